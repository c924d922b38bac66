"""mnemex as an MCP server: the memory of one user in one app, as tools any MCP client
(Claude Desktop and Code, Cursor, ...) can call. ``mnemex mcp`` runs it; this module is
what that command runs, and what a trio program embeds to serve its own runtime.

    mnemex mcp --data-dir ~/.mnemex --user-id alice --app-name desktop             # stdio
    mnemex mcp --data-dir ~/.mnemex --user-id alice --app-name desktop --http --port 8765

The tools: ``remember``, ``search_memory``, ``list_memories``, ``forget``,
``memory_history`` (long-term memory); ``append`` and ``context`` (a conversation kept
by mnemex, pruned to fit a model); ``extract`` (facts from a conversation, by the LLM of
``config.llm`` or by rules). With ``graph_tools`` the reference "memory" server's
knowledge-graph tools too (``create_entities``, ``create_relations``,
``add_observations``, ``delete_entities``, ``delete_observations``,
``delete_relations``, ``read_graph``, ``search_nodes``, ``open_nodes``), kept as
mnemex memories that name their entities, so they are searched like any other.

Every call works on the scope the server was started for (``McpSettings.user_id`` and
``app_name``) and the conversations of one agent (``McpSettings.agent``). A call may
name another scope (``user_id``/``app_name``/``agent`` arguments) only when
``allow_scope_args`` is set: otherwise those arguments are neither offered nor
accepted, so one user's assistant cannot read another user's memory.

Results are JSON: the structured content of the tool result (each tool declares its
output schema) and the same JSON as its text. A mnemex error (bad input, an unknown
id, a memory too large...) is a tool error whose text is the error's class and message, so
the model can correct its call; an unknown tool is a protocol error.

Why trio all the way: the MCP SDK (``mcp``) is written on anyio, and anyio runs on
trio, so the SDK's server shares the runtime's trio loop and each tool awaits the
runtime directly: no thread, no second event loop, no bridge. stdio uses the SDK's
own stdio transport; streamable HTTP serves the SDK's ASGI app with hypercorn's trio
worker (uvicorn is asyncio only).
"""

from __future__ import annotations

import functools
import hmac
import inspect
import ipaddress
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec
import trio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from msgspec import Meta

import mnemex
from mnemex import InvalidInput, MemoryRecord, MnemexError, MnemexRuntime, NotFound, ScopeRef

__all__ = ["GRAPH_TOOLS", "MEMORY_TOOLS", "McpSettings", "MemoryTools", "build_server", "check_http_binding",
           "run", "serve_http", "serve_stdio"]

T = TypeVar("T")

INSTRUCTIONS: Final = (
    "mnemex is the long-term memory of this user. Before answering anything that may depend on what "
    "the user said in earlier conversations (their preferences, plans, people, projects), search it "
    "with search_memory. When the user states something durable about themselves or asks you to "
    "remember something, store it with remember as one short, self-contained sentence. Use forget "
    "when the user asks you to forget something (find its id with search_memory first).")


@dataclass(frozen=True, slots=True)
class McpSettings:
    """Whose memory the server serves. ``user_id`` / ``app_name``: the scope every call
    uses (both required unless ``allow_scope_args``, which lets each call name its own,
    these two being the default). ``agent``: the agent whose conversations ``append``,
    ``context`` and ``extract`` use. ``graph_tools``: also serve the knowledge-graph
    tools of the reference memory server."""

    user_id: str | None = None
    app_name: str | None = None
    agent: str = "mcp"
    allow_scope_args: bool = False
    graph_tools: bool = False

    def __post_init__(self) -> None:
        for what, value in (("user_id", self.user_id), ("app_name", self.app_name), ("agent", self.agent)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
        if not self.allow_scope_args and (self.user_id is None or self.app_name is None):
            missing = " and ".join(what for what, value in (("user_id", self.user_id),
                                                            ("app_name", self.app_name)) if value is None)
            raise InvalidInput(f"the MCP server needs a {missing} (--user-id, --app-name): the scope every "
                               f"call works on, unless --allow-scope-args lets each call name it",
                               field="user_id" if self.user_id is None else "app_name")


# -- arguments: one Struct per tool, its JSON schema the tool's input schema ----------------------
SCOPE_FIELDS: Final = ("user_id", "app_name", "agent")
"""Arguments offered and accepted only with ``allow_scope_args``."""

class _Arguments(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    user_id: Annotated[str | None, Meta(
        description="The user whose memory to use (default: the server's user).")] = None
    app_name: Annotated[str | None, Meta(
        description="The app whose memory to use (default: the server's app).")] = None


class _SessionArguments(_Arguments, kw_only=True, forbid_unknown_fields=True):
    agent: Annotated[str | None, Meta(
        description="The agent whose conversations to use (default: the server's agent).")] = None


SessionId = Annotated[str, Meta(min_length=1, description="The conversation's id, chosen by you (any text).")]
Messages = Annotated[list[dict[str, Any]], Meta(description=(
    "Chat messages in the OpenAI shape, oldest first: {\"role\": \"user\" | \"assistant\" | \"system\" | "
    "\"tool\", \"content\": \"...\"}."))]
Filters = Annotated[dict[str, Any] | None, Meta(description=(
    "Narrow to memories that match, keys combined with AND: min_importance, max_importance (0..1); "
    "created_after, created_before, timestamp_after, timestamp_before (ISO 8601 or epoch seconds); "
    "session_id, author, kind, attributed_to (a string or a list: any of them); categories, entities "
    "(a list: has any; {\"$all\": [...]}: has all); metadata ({\"key\": value} or operators $eq $ne $gt "
    "$gte $lt $lte $in $nin $exists)."))]


class Remember(_Arguments, kw_only=True, forbid_unknown_fields=True):
    content: Annotated[str, Meta(min_length=1, description=(
        "The fact, as one short self-contained sentence, e.g. 'The user is allergic to peanuts.'"))]
    importance: Annotated[float, Meta(ge=0.0, le=1.0, description=(
        "How much it matters, 0..1 (default 0.5); 0.9 for what the user asked to remember."))] | None = None
    categories: Annotated[list[str] | None, Meta(description=(
        "Labels to file it under, e.g. [\"food\", \"health\"]."))] = None
    metadata: Annotated[dict[str, Any] | None, Meta(description="Any JSON object to keep with it.")] = None


class SearchMemory(_Arguments, kw_only=True, forbid_unknown_fields=True):
    query: Annotated[str, Meta(min_length=1, description="What to look for, in plain words.")]
    top_k: Annotated[int, Meta(ge=1, description="How many memories to return at most (default 5).")] = 5
    mode: Annotated[Literal["hybrid", "vector", "fulltext", "keyword"] | None, Meta(description=(
        "hybrid (meaning and words, the default), vector (meaning), fulltext (BM25 over the words) or "
        "keyword (by the share of your words a memory has)."))] = None
    filters: Filters = None
    include_history: Annotated[bool, Meta(description=(
        "Also find memories that were superseded or merged into others (default false)."))] = False


class Forget(_Arguments, kw_only=True, forbid_unknown_fields=True):
    memory_id: Annotated[str, Meta(min_length=1, description="The memory's id (from search_memory).")]


class ListMemories(_Arguments, kw_only=True, forbid_unknown_fields=True):
    limit: Annotated[int, Meta(ge=1, description="How many memories at most (default 20).")] = 20
    offset: Annotated[int, Meta(ge=0, description="How many to skip, oldest first (default 0).")] = 0
    filters: Filters = None


class MemoryHistoryOf(_Arguments, kw_only=True, forbid_unknown_fields=True):
    memory_id: Annotated[str, Meta(min_length=1, description="The memory's id.")]


class Extract(_SessionArguments, kw_only=True, forbid_unknown_fields=True):
    session_id: SessionId
    messages: Annotated[list[dict[str, Any]] | None, Meta(description=(
        "The conversation's whole history so far, oldest first, when you keep it yourself (position i is "
        "messages[i]; call again with the longer history and only the new messages are read). Leave it "
        "out for a conversation stored in mnemex with append."))] = None


class Append(_SessionArguments, kw_only=True, forbid_unknown_fields=True):
    session_id: SessionId
    messages: Messages


class Context(_SessionArguments, kw_only=True, forbid_unknown_fields=True):
    session_id: SessionId
    max_tokens: Annotated[int, Meta(ge=1, description=(
        "Cut the context to about this many tokens (default: the conversation's own policy)."))] | None = None


# -- results ---------------------------------------------------------------------------------
class MemoryView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One memory as a tool returns it; times are ISO 8601 (UTC)."""

    id: str
    content: str
    score: float | None = None
    kind: str = "fact"
    importance: float = 0.5
    categories: list[str] = msgspec.field(default_factory=list)
    entities: list[str] = msgspec.field(default_factory=list)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    status: str = "active"
    created_at: str | None = None
    observed_at: str | None = None
    valid_at: str | None = None
    invalid_at: str | None = None
    superseded_by: str | None = None
    merged_into: str | None = None
    attributed_to: str | None = None
    author: str | None = None
    session_id: str | None = None


class Remembered(msgspec.Struct, kw_only=True):
    id: str
    content: str


class Found(msgspec.Struct, kw_only=True):
    mode: str
    memories: list[MemoryView]


class Forgotten(msgspec.Struct, kw_only=True):
    id: str
    forgotten: bool


class Listed(msgspec.Struct, kw_only=True):
    memories: list[MemoryView]
    total: int
    offset: int


class ChangeView(msgspec.Struct, kw_only=True, omit_defaults=True):
    memory_id: str
    at: str | None
    op: str
    by: str | None = None
    other: str | None = None
    note: str | None = None


class History(msgspec.Struct, kw_only=True):
    memory: MemoryView
    related: list[MemoryView]
    changes: list[ChangeView]


class ExtractedView(msgspec.Struct, kw_only=True, omit_defaults=True):
    session_id: str
    status: str
    added: list[MemoryView] = msgspec.field(default_factory=list)
    reinforced: list[str] = msgspec.field(default_factory=list)
    merged: list[str] = msgspec.field(default_factory=list)
    superseded: list[str] = msgspec.field(default_factory=list)
    linked: list[str] = msgspec.field(default_factory=list)
    dropped: list[str] = msgspec.field(default_factory=list)
    extractor: str | None = None
    error: str | None = None


class AppendedView(msgspec.Struct, kw_only=True):
    session_id: str
    first_sequence: int
    count: int
    message_count: int


class ContextResult(msgspec.Struct, kw_only=True):
    session_id: str
    messages: list[dict[str, Any]]
    tokens: int
    stored: int
    kept: int
    summarized: int
    over_budget: bool


def _iso(seconds: float | None) -> str | None:
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _memory_view(record: MemoryRecord, score: float | None = None) -> MemoryView:
    return MemoryView(
        id=record.id, content=record.content, score=None if score is None else round(score, 4),
        kind=record.kind, importance=record.importance, categories=list(record.categories),
        entities=list(record.entities), metadata=dict(record.metadata), status=record.status,
        created_at=_iso(record.created_at), observed_at=_iso(record.timestamp),
        valid_at=_iso(record.valid_at), invalid_at=_iso(record.invalid_at),
        superseded_by=record.superseded_by, merged_into=record.merged_into,
        attributed_to=record.attributed_to, author=record.author, session_id=record.session_id)


# -- the knowledge graph of the reference memory server, kept as mnemex memories ------------------
# Each entity, observation and relation is one memory whose metadata says which (its "graph" key) and
# whose ``entities`` name the entities it is about; its content is a sentence ("Alice: likes tea"),
# so a search finds it like any memory, and two entities' equal observations stay two memories.
class _Wire(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """The reference server's field names (camelCase) on the wire."""


EntityName = Annotated[str, Meta(min_length=1, description="The entity's name (its identifier).")]


class Entity(_Wire, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    name: EntityName
    entity_type: Annotated[str, Meta(min_length=1, description="What it is: person, project, place...")]
    observations: Annotated[list[str], Meta(description="Facts about it, one short sentence each.")] = (
        msgspec.field(default_factory=list))


class Relation(_Wire, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    source: Annotated[str, Meta(min_length=1, description="The entity the relation starts at.")] = (
        msgspec.field(name="from"))
    target: Annotated[str, Meta(min_length=1, description="The entity it points to.")] = (
        msgspec.field(name="to"))
    relation_type: Annotated[str, Meta(min_length=1, description=(
        "The relation, in active voice: works_at, knows, ..."))]


class ObservationsOf(_Wire, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    entity_name: EntityName
    contents: Annotated[list[str], Meta(description="The observations to add.")]


class DeletionsOf(_Wire, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    entity_name: EntityName
    observations: Annotated[list[str], Meta(description="The observations to delete.")]


class CreateEntities(_Arguments, kw_only=True, forbid_unknown_fields=True):
    entities: list[Entity]


class CreateRelations(_Arguments, kw_only=True, forbid_unknown_fields=True):
    relations: list[Relation]


class AddObservations(_Arguments, kw_only=True, forbid_unknown_fields=True):
    observations: list[ObservationsOf]


class DeleteEntities(_Arguments, kw_only=True, forbid_unknown_fields=True,
                     rename={"entity_names": "entityNames"}):
    entity_names: Annotated[list[str], Meta(description="The entities to delete, with their relations.")]


class DeleteObservations(_Arguments, kw_only=True, forbid_unknown_fields=True):
    deletions: list[DeletionsOf]


class DeleteRelations(_Arguments, kw_only=True, forbid_unknown_fields=True):
    relations: list[Relation]


class ReadGraph(_Arguments, kw_only=True, forbid_unknown_fields=True):
    pass


class SearchNodes(_Arguments, kw_only=True, forbid_unknown_fields=True):
    query: Annotated[str, Meta(min_length=1, description=(
        "Words to look for in entity names, types and observations."))]


class OpenNodes(_Arguments, kw_only=True, forbid_unknown_fields=True):
    names: Annotated[list[str], Meta(description="The entities to return.")]


class Graph(msgspec.Struct, kw_only=True):
    entities: list[Entity]
    relations: list[Relation]


class EntitiesCreated(msgspec.Struct, kw_only=True):
    entities: list[Entity]


class RelationsCreated(msgspec.Struct, kw_only=True):
    relations: list[Relation]


class ObservationsAdded(_Wire, kw_only=True, rename="camel"):
    entity_name: str
    added_observations: list[str]


class AddedObservations(msgspec.Struct, kw_only=True):
    results: list[ObservationsAdded]


class Deleted(msgspec.Struct, kw_only=True):
    success: bool
    message: str
    deleted: int


@dataclass(slots=True)
class _GraphState:
    """The knowledge graph of a scope, read from its memories."""

    entities: dict[str, tuple[str, str]]  # name -> (memory id, entity type)
    observations: dict[str, list[tuple[str, str]]]  # name -> [(memory id, observation)], oldest first
    relations: dict[tuple[str, str, str], str]  # (from, type, to) -> memory id

    def graph(self, names: Iterable[str] | None = None) -> Graph:
        """The whole graph, or the entities ``names`` and the relations among them."""
        chosen = list(self.entities) if names is None else [name for name in dict.fromkeys(names)
                                                             if name in self.entities]
        kept = set(chosen)
        return Graph(
            entities=[Entity(name=name, entity_type=self.entities[name][1],
                             observations=[text for _, text in self.observations.get(name, ())])
                      for name in chosen],
            relations=[Relation(source=source, target=target, relation_type=kind)
                       for source, kind, target in self.relations
                       if names is None or (source in kept and target in kept)])


async def _graph_state(scope: ScopeRef) -> _GraphState:
    page = await scope.memories({"metadata": {"graph": {"$exists": True}}}, limit=None)
    state = _GraphState({}, {}, {})
    for record in page.memories:
        meta = record.metadata
        match meta:  # anything else with a "graph" key in its metadata is a memory of the user's own
            case {"graph": "entity", "name": str(name), "entity_type": str(kind)}:
                state.entities.setdefault(name, (record.id, kind))
            case {"graph": "observation", "name": str(name), "observation": str(text)}:
                state.observations.setdefault(name, []).append((record.id, text))
            case {"graph": "relation", "from": str(source), "relation_type": str(kind), "to": str(target)}:
                state.relations.setdefault((source, kind, target), record.id)
    return state


def _observation(name: str, text: str) -> dict[str, Any]:
    return {"content": f"{name}: {text}", "entities": [name], "kind": "observation", "source": "mcp",
            "metadata": {"graph": "observation", "name": name, "observation": text}}


# -- the tools -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    title: str
    description: str
    arguments: type[_Arguments]
    result: type[msgspec.Struct]
    annotations: ToolAnnotations
    run: Callable[[MemoryTools, Any], Awaitable[msgspec.Struct]]


_TOOLS: dict[str, _Tool] = {}
_Method = Callable[["MemoryTools", Any], Awaitable[T]]


def _tool(name: str, title: str, arguments: type[_Arguments], result: type[msgspec.Struct], *,
          read_only: bool = False, destructive: bool = False,
          idempotent: bool = False) -> Callable[[_Method[T]], _Method[T]]:
    """Register the method below as tool ``name``; its docstring is what the model reads."""

    def register(method: _Method[T]) -> _Method[T]:
        _TOOLS[name] = _Tool(name, title, inspect.cleandoc(method.__doc__ or ""), arguments, result,
                             ToolAnnotations(title=title, read_only_hint=read_only,
                                             destructive_hint=destructive if not read_only else None,
                                             idempotent_hint=idempotent if not read_only else None,
                                             open_world_hint=False),
                             method)  # type: ignore[arg-type]
        return method

    return register


class MemoryTools:
    """The tools over one runtime with the scope of ``settings``: ``call(name, arguments)``
    runs one (raising MnemexError for what the caller got wrong); ``tools()`` lists them as
    MCP tools. Used by ``build_server``; usable without MCP (tests, other hosts)."""

    def __init__(self, rt: MnemexRuntime, settings: McpSettings) -> None:
        self._rt = rt
        self._settings = settings
        names = [*MEMORY_TOOLS, *(GRAPH_TOOLS if settings.graph_tools else ())]
        self._tools = {name: _TOOLS[name] for name in names}
        self._listed = [self._listing(_TOOLS[name]) for name in names]

    def tools(self) -> list[Tool]:
        return list(self._listed)

    def has_tool(self, name: str) -> bool:
        return name in self._tools

    def _listing(self, tool: _Tool) -> Tool:
        schema = _object_schema(tool.arguments, simplify=True)
        if not self._settings.allow_scope_args:
            for name in SCOPE_FIELDS:
                schema["properties"].pop(name, None)
        return Tool(name=tool.name, title=tool.title, description=tool.description, input_schema=schema,
                    output_schema=_object_schema(tool.result, simplify=False), annotations=tool.annotations)

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> msgspec.Struct:
        """Run tool ``name`` with ``arguments`` (its JSON object). InvalidInput names the
        argument that is wrong; KeyError for a tool this server does not serve."""
        tool = self._tools[name]
        try:
            parsed = msgspec.convert(dict(arguments or {}), tool.arguments, strict=False)
        except msgspec.ValidationError as exc:
            raise InvalidInput(f"{name}: {exc}", field="arguments") from exc
        if not self._settings.allow_scope_args:
            given = [field for field in SCOPE_FIELDS if getattr(parsed, field, None) is not None]
            if given:
                raise InvalidInput(
                    f"{name}: {', '.join(given)} cannot be chosen per call: this server serves user "
                    f"{self._settings.user_id!r} in app {self._settings.app_name!r} (a server started with "
                    f"--allow-scope-args takes them)", field=given[0])
        return await tool.run(self, parsed)

    # -- scope ------------------------------------------------------------------------------
    def _names(self, args: _Arguments) -> tuple[str, str]:
        user_id = args.user_id or self._settings.user_id
        app_name = args.app_name or self._settings.app_name
        for what, value in (("user_id", user_id), ("app_name", app_name)):
            if value is None:
                raise InvalidInput(f"{what} is required: this server has no default {what}", field=what)
        assert user_id is not None and app_name is not None
        return user_id, app_name

    def _scope(self, args: _Arguments) -> ScopeRef:
        user_id, app_name = self._names(args)
        return self._rt.scope(user_id=user_id, app_name=app_name)

    def _agent(self, args: _SessionArguments) -> mnemex.AgentRef:
        return self._rt.agent(args.agent or self._settings.agent)

    # -- long-term memory -------------------------------------------------------------------
    @_tool("remember", "Remember", Remember, Remembered, idempotent=True)
    async def remember(self, args: Remember) -> Remembered:
        """Store a fact about the user for later conversations: when the user asks you to
        remember something, or states something durable about themselves (a preference, a
        plan, a person, a detail of their life). Write it as one short, self-contained
        sentence. Storing the same sentence again returns the id it already has."""
        fields: dict[str, Any] = {"source": "mcp"}
        for name in ("importance", "categories", "metadata"):
            if getattr(args, name) is not None:
                fields[name] = getattr(args, name)
        memory_id = await self._scope(args).remember(args.content, **fields)
        return Remembered(id=memory_id, content=args.content)

    @_tool("search_memory", "Search memory", SearchMemory, Found, read_only=True)
    async def search_memory(self, args: SearchMemory) -> Found:
        """Search the user's long-term memory, best match first: what they told you in earlier
        conversations (preferences, plans, people, facts about them). Use it before answering
        anything that may depend on it."""
        result = await self._scope(args).search(args.query, args.top_k,
                                                 mnemex.DEFAULT if args.mode is None else args.mode,
                                                 filter=args.filters, include_history=args.include_history)
        return Found(mode=result.mode, memories=[_memory_view(hit.memory, hit.score) for hit in result.hits])

    @_tool("list_memories", "List memories", ListMemories, Listed, read_only=True)
    async def list_memories(self, args: ListMemories) -> Listed:
        """List the user's memories, oldest first, a page at a time (total says how many match)."""
        page = await self._scope(args).memories(args.filters, args.limit, args.offset)
        return Listed(memories=[_memory_view(record) for record in page.memories], total=page.total,
                      offset=page.offset)

    @_tool("forget", "Forget", Forget, Forgotten, destructive=True, idempotent=True)
    async def forget(self, args: Forget) -> Forgotten:
        """Delete one memory for good, by its id (find it with search_memory or list_memories).
        Use it when the user asks you to forget something; forgotten is false when there was
        no such memory."""
        return Forgotten(id=args.memory_id, forgotten=await self._scope(args).forget(args.memory_id))

    @_tool("memory_history", "Memory history", MemoryHistoryOf, History, read_only=True)
    async def memory_history(self, args: MemoryHistoryOf) -> History:
        """How a memory came to be: its changes (created, reinforced, merged, superseded...) and
        the memories it replaced or that replaced it."""
        found = await self._scope(args).history(args.memory_id)
        return History(memory=_memory_view(found.memory), related=[_memory_view(r) for r in found.related],
                       changes=[ChangeView(memory_id=memory_id, at=_iso(change.at), op=change.op,
                                           by=change.by, other=change.other, note=change.note)
                                for memory_id, change in found.changes])

    # -- conversations and knowledge ------------------------------------------------------------
    @_tool("append", "Append to a conversation", Append, AppendedView)
    async def append(self, args: Append) -> AppendedView:
        """Store messages at the end of a conversation kept by mnemex (created on first use),
        all or none. Read it back, pruned to fit a model, with context; turn it into memories
        with extract."""
        done = await self._agent(args).append(args.session_id, args.messages)
        return AppendedView(session_id=done.session_id, first_sequence=done.first_sequence, count=done.count,
                            message_count=done.message_count)

    @_tool("context", "Conversation context", Context, ContextResult, read_only=True)
    async def context(self, args: Context) -> ContextResult:
        """The messages of a conversation kept by mnemex to send to a model next: its history
        after pruning and summarizing by the conversation's policy (an unknown conversation
        has none)."""
        view = await self._agent(args).context_view(args.session_id, args.max_tokens)
        return ContextResult(session_id=args.session_id, messages=view.messages, tokens=view.tokens,
                             stored=view.stored, kept=view.kept, summarized=view.summarized,
                             over_budget=view.over_budget)

    @_tool("extract", "Extract memories", Extract, ExtractedView, idempotent=True)
    async def extract(self, args: Extract) -> ExtractedView:
        """Turn a conversation into long-term memories: the facts it states about the user are
        extracted and consolidated with what is known (a repeated fact is reinforced, a changed
        one supersedes the old). Only messages not extracted before are read. Pass messages
        for a conversation you keep yourself; leave them out for one stored with append."""
        scope = self._scope(args)
        if args.messages is not None:
            done = await scope.extract_from(args.session_id, args.messages)
        else:
            done = await self._rt.extract(args.agent or self._settings.agent, args.session_id,
                                          user_id=scope.user_id, app_name=scope.app_name)
        added = []
        for memory_id in done.added:
            try:
                added.append(_memory_view(await scope.get(memory_id)))
            except NotFound:  # merged into another, or forgotten, since
                continue
        return ExtractedView(session_id=done.session_id, status=done.status, added=added,
                             reinforced=list(done.reinforced), merged=list(done.merged),
                             superseded=list(done.superseded), linked=list(done.linked),
                             dropped=list(done.dropped), extractor=done.extractor, error=done.error)

    # -- the knowledge graph -----------------------------------------------------------------
    @_tool("create_entities", "Create entities", CreateEntities, EntitiesCreated, idempotent=True)
    async def create_entities(self, args: CreateEntities) -> EntitiesCreated:
        """Create entities in the knowledge graph, each with a name, a type and observations
        (facts about it). An entity whose name exists already is left as it is."""
        scope = self._scope(args)
        state = await _graph_state(scope)
        created: list[Entity] = []
        batch: list[dict[str, Any]] = []
        for entity in args.entities:
            if entity.name in state.entities or any(e.name == entity.name for e in created):
                continue
            created.append(entity)
            batch.append({"content": f"{entity.name} ({entity.entity_type})", "entities": [entity.name],
                          "kind": "entity", "source": "mcp",
                          "metadata": {"graph": "entity", "name": entity.name,
                                       "entity_type": entity.entity_type}})
            batch.extend(_observation(entity.name, text) for text in dict.fromkeys(entity.observations))
        await scope.remember_many(batch)
        return EntitiesCreated(entities=created)

    @_tool("create_relations", "Create relations", CreateRelations, RelationsCreated, idempotent=True)
    async def create_relations(self, args: CreateRelations) -> RelationsCreated:
        """Create relations between entities of the knowledge graph, in active voice (Alice
        works_at Acme). A relation that exists already is left as it is."""
        scope = self._scope(args)
        state = await _graph_state(scope)
        created: dict[tuple[str, str, str], Relation] = {}
        for relation in args.relations:
            key = (relation.source, relation.relation_type, relation.target)
            if key not in state.relations:
                created.setdefault(key, relation)
        await scope.remember_many([
            {"content": f"{source} {kind} {target}", "entities": [source, target], "kind": "relationship",
             "source": "mcp", "metadata": {"graph": "relation", "from": source, "relation_type": kind,
                                           "to": target}}
            for source, kind, target in created])
        return RelationsCreated(relations=list(created.values()))

    @_tool("add_observations", "Add observations", AddObservations, AddedObservations, idempotent=True)
    async def add_observations(self, args: AddObservations) -> AddedObservations:
        """Add observations (facts, one short sentence each) to existing entities of the
        knowledge graph; those an entity has already are skipped."""
        scope = self._scope(args)
        state = await _graph_state(scope)
        results: list[ObservationsAdded] = []
        batch: list[dict[str, Any]] = []
        for item in args.observations:
            if item.entity_name not in state.entities:
                raise NotFound(f"no entity named {item.entity_name!r} in the knowledge graph (create it with "
                               f"create_entities)")
            known = {text for _, text in state.observations.get(item.entity_name, ())}
            new = [text for text in dict.fromkeys(item.contents) if text not in known]
            state.observations.setdefault(item.entity_name, []).extend(("", text) for text in new)
            batch.extend(_observation(item.entity_name, text) for text in new)
            results.append(ObservationsAdded(entity_name=item.entity_name, added_observations=new))
        await scope.remember_many(batch)
        return AddedObservations(results=results)

    @_tool("delete_entities", "Delete entities", DeleteEntities, Deleted, destructive=True, idempotent=True)
    async def delete_entities(self, args: DeleteEntities) -> Deleted:
        """Delete entities from the knowledge graph, with their observations and every
        relation from or to them."""
        scope = self._scope(args)
        state = await _graph_state(scope)
        names = set(args.entity_names)
        ids = [state.entities[name][0] for name in names if name in state.entities]
        ids += [memory_id for name in names for memory_id, _ in state.observations.get(name, ())]
        ids += [memory_id for (source, _, target), memory_id in state.relations.items()
                if source in names or target in names]
        gone = await scope.forget_many(ids) if ids else []
        return Deleted(success=True, message="Entities deleted", deleted=len(gone))

    @_tool("delete_observations", "Delete observations", DeleteObservations, Deleted, destructive=True,
           idempotent=True)
    async def delete_observations(self, args: DeleteObservations) -> Deleted:
        """Delete observations from entities of the knowledge graph."""
        scope = self._scope(args)
        state = await _graph_state(scope)
        ids = [memory_id for item in args.deletions
               for memory_id, text in state.observations.get(item.entity_name, ())
               if text in item.observations]
        gone = await scope.forget_many(ids) if ids else []
        return Deleted(success=True, message="Observations deleted", deleted=len(gone))

    @_tool("delete_relations", "Delete relations", DeleteRelations, Deleted, destructive=True,
           idempotent=True)
    async def delete_relations(self, args: DeleteRelations) -> Deleted:
        """Delete relations from the knowledge graph."""
        scope = self._scope(args)
        state = await _graph_state(scope)
        keys = [(relation.source, relation.relation_type, relation.target) for relation in args.relations]
        ids = [state.relations[key] for key in dict.fromkeys(keys) if key in state.relations]
        gone = await scope.forget_many(ids) if ids else []
        return Deleted(success=True, message="Relations deleted", deleted=len(gone))

    @_tool("read_graph", "Read the knowledge graph", ReadGraph, Graph, read_only=True)
    async def read_graph(self, args: ReadGraph) -> Graph:
        """The whole knowledge graph: every entity with its observations, and every relation."""
        return (await _graph_state(self._scope(args))).graph()

    @_tool("search_nodes", "Search the knowledge graph", SearchNodes, Graph, read_only=True)
    async def search_nodes(self, args: SearchNodes) -> Graph:
        """Find entities of the knowledge graph whose name, type or observations match the
        query (by words and by meaning), with the relations among them."""
        scope = self._scope(args)
        state = await _graph_state(scope)
        needle = args.query.casefold()
        names = [name for name, (_, kind) in state.entities.items()
                 if needle in name.casefold() or needle in kind.casefold()
                 or any(needle in text.casefold() for _, text in state.observations.get(name, ()))]
        result = await scope.search(args.query, 10, filter={"metadata": {"graph": {"$exists": True}}})
        names += [name for hit in result.hits for name in hit.memory.entities]
        return state.graph(names)

    @_tool("open_nodes", "Open entities", OpenNodes, Graph, read_only=True)
    async def open_nodes(self, args: OpenNodes) -> Graph:
        """The entities of the knowledge graph with these names, and the relations among them."""
        return (await _graph_state(self._scope(args))).graph(args.names)


MEMORY_TOOLS: Final = ("remember", "search_memory", "list_memories", "forget", "memory_history", "append",
                       "context", "extract")
"""The tools every server offers, in the order they are listed."""
GRAPH_TOOLS: Final = ("create_entities", "create_relations", "add_observations", "delete_entities",
                      "delete_observations", "delete_relations", "read_graph", "search_nodes", "open_nodes")
"""The reference memory server's knowledge-graph tools (``McpSettings.graph_tools``)."""


def _object_schema(struct: type[msgspec.Struct], *, simplify: bool) -> dict[str, Any]:
    """The JSON schema of ``struct`` with the object itself at the root (an MCP schema's
    root is ``type: object``) and what it refers to under ``$defs``. ``simplify``: an
    optional argument is shown as its type alone (``null`` is still accepted), the form
    every client's schema reader takes."""
    (root,), components = msgspec.json.schema_components([struct], ref_template="#/$defs/{name}")
    name = root["$ref"].rsplit("/", 1)[1]
    schema: dict[str, Any] = components.pop(name)
    if components:
        schema["$defs"] = components
    if simplify:
        _simplified(schema)
    return schema


def _simplified(schema: Any) -> None:
    if isinstance(schema, list):
        for item in schema:
            _simplified(item)
        return
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("title"), str):  # the keyword, not a property named "title"
        del schema["title"]
    for value in schema.values():
        _simplified(value)
    for prop in (schema.get("properties") or {}).values():
        options = prop.get("anyOf")
        if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
            del prop["anyOf"]
            prop.update(next(option for option in options if option != {"type": "null"}))
        if "default" in prop and prop["default"] is None:
            del prop["default"]


# -- the server ------------------------------------------------------------------------------
def build_server(rt: MnemexRuntime, settings: McpSettings, *, name: str = "mnemex") -> Server[Any]:
    """An MCP server (the SDK's low-level ``Server``) whose tools work on ``rt``, on the
    scope of ``settings``. Serve it with ``serve_stdio``/``serve_http``, or connect to it
    in-process with ``mcp.Client(server)``."""
    tools = MemoryTools(rt, settings)

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=tools.tools())

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        if not tools.has_tool(params.name):
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}; this server's tools: "
                                           f"{', '.join(tool.name for tool in tools.tools())}")
        try:
            result = await tools.call(params.name, params.arguments)
        except MnemexError as exc:
            return CallToolResult(content=[TextContent(text=f"{type(exc).__name__}: {exc}")], is_error=True)
        data = msgspec.to_builtins(result)
        return CallToolResult(content=[TextContent(text=json.dumps(data, ensure_ascii=False))],
                              structured_content=data)

    return Server(name, version=mnemex.__version__, title="mnemex memory", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(rt: MnemexRuntime, settings: McpSettings) -> None:
    """Serve MCP on this process's stdin and stdout until the client closes stdin. While
    it serves, the SDK points file descriptor 1 at stderr, so stray output cannot break
    the protocol."""
    server = build_server(rt, settings)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_http_binding(host: str, token: str | None) -> None:
    """Refuse to serve beyond this machine without a token (InvalidInput)."""
    if not _is_loopback(host) and not token:
        raise InvalidInput(f"serving MCP on {host} (beyond this machine) needs a token (--token or "
                           f"MNEMEX_TOKEN): anyone who can reach the port could read and change this "
                           f"memory", field="host")


def _bearer_only(app: Any, token: str) -> Any:
    """``app`` answering 401 to an HTTP request without ``Authorization: Bearer <token>``."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = next((value for key, value in scope["headers"] if key == b"authorization"), b"")
            if not hmac.compare_digest(given, expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b'{"error": "this MCP server needs Authorization: Bearer <token>"}'})
                return
        await app(scope, receive, send)

    return guarded


async def serve_http(rt: MnemexRuntime, settings: McpSettings, *, host: str = "127.0.0.1", port: int = 8765,
                     token: str | None = None, path: str = "/mcp",
                     shutdown: Callable[[], Awaitable[None]] | None = None,
                     task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP over streamable HTTP at ``http://host:port/mcp`` (hypercorn's trio worker,
    in this trio loop) until ``shutdown()`` returns or the task is cancelled; started
    with the URL served (``port=0`` picks a free port). Off this machine only with a
    ``token`` every request must bring as ``Authorization: Bearer``; on 127.0.0.1 the
    SDK also refuses requests whose Host or Origin header a web page could forge."""
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve

    check_http_binding(host, token)
    server = build_server(rt, settings)
    app: Any = server.streamable_http_app(streamable_http_path=path, host=host)
    if token:
        app = _bearer_only(app, token)
    config = HypercornConfig()
    config.bind = [f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")  # through the host's handlers, as is

    async def started(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await serve(app, config, shutdown_trigger=shutdown, task_status=task_status)

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(started)
        task_status.started(binds[0] + path)


async def _until_signalled() -> None:
    import signal

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def run(config: mnemex.Config, settings: McpSettings, *, http: bool = False, host: str = "127.0.0.1",
        port: int = 8765, token: str | None = None) -> None:
    """Open a runtime on ``config`` and serve MCP on it until the client leaves (stdio:
    stdin closed) or, over HTTP, until SIGINT or SIGTERM; then close the runtime (every
    actor snapshotted). A MnemexError (a locked data directory...) is raised as itself."""
    if http:
        check_http_binding(host, token)

    async def main() -> None:
        failure: MnemexError | None = None
        async with mnemex.open_runtime(config) as rt:
            try:
                if not http:
                    await serve_stdio(rt, settings)
                    return
                async with trio.open_nursery() as nursery:
                    url = await nursery.start(functools.partial(
                        serve_http, rt, settings, host=host, port=port, token=token,
                        shutdown=_until_signalled))
                    print(f"mnemex mcp: serving MCP (streamable HTTP) at {url}", file=sys.stderr, flush=True)
            except MnemexError as exc:
                failure = exc
        if failure is not None:
            raise failure

    trio.run(main)

