"""The wire between a remote host and ``mnemex serve``: which commands cross it,
the reply each one gets, and how an error comes back as the exception it was.

Both sides read this one module. ``ASK`` is the whitelist: a command type that is
not in it is refused by the client before anything is sent, and by the server
before anything reaches an actor (its tag does not decode). Only commands the
public refs send are in it; what the runtime sends its actors by itself
(``ApplyExtraction``, ``ExtractionFailed``, ``StoreSession``, ``ApplySummary``,
``SummaryFailed``, ``FindExpired``, extraction jobs and timers) never is, so a
forged request cannot write what only a model's journaled answer may.

Requests and answers (JSON; bodies forbid unknown fields)::

    GET  /v1/runtime                  -> RuntimeInfo (embedder, limits: what a client checks at connect)
    GET  /v1/scopes                   -> [[app_name, user_id], ...]
    POST /v1/actors/{kind}/ask        {"key": [...], "command": {"type": "scope.search", ...},
                                       "timeout": 5.0}  -> the reply, as ASK names its type
    POST /v1/actors/{kind}/stream     {"key": [...], "command": {"type": "agent.watch", ...},
                                       "buffer": 256}   -> NDJSON lines of StreamLine, blank lines
                                                           as heartbeats

Errors are ``{"error": message, "type": "InvalidInput", "field": ...}`` with the
status of the server's one table; ``error_of`` turns them back into the class named.
This module is sans-io: no trio, no HTTP client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

import msgspec

from mnemex import errors
from mnemex.checkpoints import protocol as checkpoints
from mnemex.checkpoints.kind import CHECKPOINT_KIND
from mnemex.config import ConversationsConfig, KnowledgeConfig, MemoriesConfig, ModelsConfig
from mnemex.conversations import protocol as agents
from mnemex.errors import InvalidInput, MnemexError
from mnemex.memories import protocol as scopes
from mnemex.memories.documents import ExtractDocument
from mnemex.memories.extraction import CursorInfo, GetCursors
from mnemex.state import protocol as state
from mnemex.state.kind import STATE_KIND

__all__ = [
    "APPENDS",
    "VECTORS_OF_THE_SCOPE",
    "ASK",
    "IN_PROCESS_ONLY",
    "PROTOCOL",
    "SCOPE_LIMITS",
    "Asked",
    "ExtractDocumentCommand",
    "RuntimeInfo",
    "ScopeKeys",
    "StreamLine",
    "ask_request_type",
    "error_of",
    "to_actor",
    "to_wire",
]

PROTOCOL: Final = 1
"""Raised when the wire changes incompatibly; a client refuses a server of another."""

AGENT: Final = "agent"
SCOPE: Final = "scope"
STATE: Final = STATE_KIND
CHECKPOINT: Final = CHECKPOINT_KIND


class ExtractDocumentCommand(msgspec.Struct, frozen=True, tag_field="type", tag="scope.extract_document"):
    """``memories.documents.ExtractDocument`` (a plain dataclass, never journaled) as it
    crosses the wire."""

    document_id: str
    now: float
    mode: Literal["flush", "now"] = "flush"


@dataclass(frozen=True, slots=True)
class Asked:
    """One whitelisted command: the kind it goes to, its wire type and its reply's type."""

    kind: str
    wire: type[Any]
    reply: Any


def _table(*rows: tuple[str, type[Any], Any]) -> dict[type[Any], Asked]:
    return {command: Asked(kind, command, reply) for kind, command, reply in rows}


ASK: Final[Mapping[type[Any], Asked]] = {
    **_table(
        # long-term memory (ScopeRef, search across scopes, export and import)
        (SCOPE, scopes.Remember, scopes.Remembered),
        (SCOPE, scopes.AddSession, scopes.SessionAdded),
        (SCOPE, scopes.UpdateMemory, scopes.Updated),
        (SCOPE, scopes.Forget, scopes.Forgotten),
        (SCOPE, scopes.ForgetWhere, scopes.Forgotten),
        # access counts, as the runtime batches them after searches: they change what
        # searches already change, never a memory's content
        (SCOPE, scopes.Touch, scopes.Touched),
        (SCOPE, scopes.GetMemory, scopes.MemoryRecord),
        (SCOPE, scopes.CountMemories, int),
        (SCOPE, scopes.ListMemories, scopes.MemoryPage),
        (SCOPE, scopes.GetScopeStats, scopes.ScopeStats),
        (SCOPE, scopes.Search, scopes.SearchResult),
        (SCOPE, scopes.GetHistory, scopes.MemoryHistory),
        (SCOPE, scopes.ImportMemories, scopes.Imported),
        (SCOPE, scopes.GetVectors, scopes.Vectors),
        (SCOPE, scopes.GetDocuments, list[scopes.DocumentStatus]),
        (SCOPE, scopes.IngestDocument, scopes.DocumentIngested),
        (SCOPE, scopes.ForgetDocument, scopes.Forgotten),
        (SCOPE, GetCursors, list[CursorInfo]),
        (SCOPE, scopes.GetCategories, scopes.CategoryCatalog),
        (SCOPE, scopes.SetCategories, scopes.CategoryCatalog),
        (SCOPE, scopes.GetFacets, scopes.Facets),
        (SCOPE, scopes.GetActorMemories, scopes.MemoryPage),
        (SCOPE, scopes.PutMemories, scopes.MemoriesPut),
        (SCOPE, scopes.ListNamespaces, scopes.Namespaces),
        (SCOPE, scopes.RefreshExpiry, int),
        (SCOPE, scopes.ForgetExpired, scopes.Forgotten),
        # the entity graph
        (SCOPE, scopes.ListEntities, scopes.EntityPage),
        (SCOPE, scopes.GetEntity, scopes.EntityDetail),
        (SCOPE, scopes.GetRelated, scopes.RelatedEntities),
        (SCOPE, scopes.DeclareEntity, scopes.EntityChanged),
        (SCOPE, scopes.MergeEntities, scopes.EntityChanged),
        (SCOPE, scopes.UnmergeEntity, scopes.EntityChanged),
        (SCOPE, scopes.GetGraphStats, scopes.GraphStats),
        # short-term memory (AgentRef)
        (AGENT, agents.AppendMessages, agents.Appended),
        (AGENT, agents.AppendItems, agents.Appended),
        (AGENT, agents.PopMessage, agents.Popped),
        (AGENT, agents.CompleteSession, agents.SessionCompleted),
        (AGENT, agents.DeleteSession, agents.SessionsDeleted),
        (AGENT, agents.DeleteAllSessions, agents.SessionsDeleted),
        (AGENT, agents.SetPolicy, agents.PolicySet),
        (AGENT, agents.SetTtl, agents.TtlSet),
        (AGENT, agents.ExpireSessions, agents.SessionsDeleted),
        (AGENT, agents.GetHistory, list[agents.MessageEntry]),
        (AGENT, agents.GetContext, agents.ContextWindow),
        (AGENT, agents.ListMessages, agents.EntryPage),
        (AGENT, agents.ListSessions, list[agents.SessionInfo]),
        (AGENT, agents.GetStats, agents.AgentStats),
        (AGENT, agents.ListTurns, list[agents.TurnRecord]),
        (AGENT, agents.SearchTurns, list[agents.TurnHit]),
        (AGENT, agents.RelayChunk, None),
        (AGENT, agents.ArchiveSession, scopes.SessionAdded),
        (AGENT, agents.CreateSession, agents.SessionCreated),
        (AGENT, agents.UpdateSessionState, agents.SessionHeader),
        (AGENT, agents.GetSession, agents.SessionRead | None),
        (AGENT, agents.ListSessionHeaders, list[agents.SessionHeader]),
        # key-value state of an app or of a user in it (StateRef)
        (STATE, state.UpdateState, state.StateValues),
        (STATE, state.ClearState, state.StateValues),
        (STATE, state.GetState, state.StateValues),
        # graph checkpoints, one actor per thread (Checkpoints, LangGraph's MnemexSaver)
        (CHECKPOINT, checkpoints.PutCheckpoint, None),
        (CHECKPOINT, checkpoints.PutWrites, None),
        (CHECKPOINT, checkpoints.GetCheckpoint, checkpoints.CheckpointEntry | None),
        (CHECKPOINT, checkpoints.ListCheckpoints, checkpoints.CheckpointPage),
        (CHECKPOINT, checkpoints.DeleteThread, checkpoints.CheckpointsDeleted),
        (CHECKPOINT, checkpoints.DeleteRuns, checkpoints.CheckpointsDeleted),
        (CHECKPOINT, checkpoints.PruneThread, checkpoints.CheckpointsDeleted),
        (CHECKPOINT, checkpoints.ExportThread, checkpoints.ThreadExport),
        (CHECKPOINT, checkpoints.CopyInto, None),
    ),
    ExtractDocument: Asked(SCOPE, ExtractDocumentCommand, scopes.Extracted),
}

VECTORS_OF_THE_SCOPE: Final = (scopes.Remember, scopes.AddSession, scopes.UpdateMemory, scopes.ImportMemories,
                                scopes.IngestDocument)
"""Commands whose vectors join the scope's own index: the server takes them only of
its embedder (a fresh scope would take any model's, and then refuse the server's)."""

APPENDS: Final = (agents.AppendMessages, agents.AppendItems)
"""Appends: the server makes them through its own AgentRef (what hangs on appends runs)."""

WATCH: Final = Asked(AGENT, agents.WatchSession, agents.WatchStart)
"""The one subscription that crosses the wire: a session's live messages."""

IN_PROCESS_ONLY: Final = ("ExtractSession", "RetryDeadLetter")
"""Commands of the refs that never cross: they carry a callable (how to read a conversation)."""

_HINTS: Final[Mapping[str, str]] = {
    "ExtractSession": "extracting a conversation the caller keeps (scope.extract_from) reads it through a "
                      "callable, which cannot cross HTTP: store it in an agent and call "
                      "rt.extract(agent, session_id, ...) instead",
    "RetryDeadLetter": "retrying a dead letter reads the conversation through a callable, which cannot "
                       "cross HTTP: call retry_extraction on the server's own runtime",
}


def to_wire(command: Any) -> tuple[Asked, Any]:
    """The table row of ``command`` and what is sent for it; InvalidInput for a
    command that does not cross the wire (the message says what to do instead)."""
    row = ASK.get(type(command))
    if row is None:
        name = type(command).__name__
        hint = _HINTS.get(name, "only the commands the public refs send cross it (mnemex.remote.wire.ASK)")
        raise InvalidInput(f"{name} cannot be sent to a remote mnemex server: {hint}", field="command")
    if isinstance(command, ExtractDocument):
        return row, ExtractDocumentCommand(command.document_id, command.now, command.mode)
    return row, command


def to_actor(command: Any) -> Any:
    """What the server hands the actor for a decoded wire command."""
    if isinstance(command, ExtractDocumentCommand):
        return ExtractDocument(command.document_id, command.now, command.mode)
    return command


def _union(kind: str) -> Any:
    types = tuple(row.wire for row in ASK.values() if row.kind == kind)
    union: Any = types[0]
    for more in types[1:]:
        union = union | more
    return union


ScopeAsk = _union(SCOPE)
AgentAsk = _union(AGENT)
# ge, not gt: OpenAPI 3.0 has no numeric exclusiveMinimum
_Timeout = Annotated[float, msgspec.Meta(ge=0.001, le=3600)]
_Part = Annotated[str, msgspec.Meta(min_length=1)]
KEYS: Final[Mapping[str, Any]] = {
    SCOPE: tuple[_Part, _Part],                 # (app_name, user_id)
    AGENT: tuple[_Part],                        # (name,)
    STATE: Annotated[list[_Part], msgspec.Meta(min_length=1, max_length=2)],  # (app[, user])
    CHECKPOINT: tuple[_Part],                   # (thread_id,)
}
"""The key each kind's actors have: a key of another shape never reaches one."""


def _ask_type(kind: str) -> Any:
    return msgspec.defstruct(f"Ask{kind.title()}", [
        ("key", KEYS[kind]), ("command", _union(kind)), ("timeout", _Timeout | None, None)],
        frozen=True, forbid_unknown_fields=True)


ASK_TYPES: Final[Mapping[str, Any]] = {kind: _ask_type(kind) for kind in KEYS}
"""The body of ``POST /v1/actors/{kind}/ask`` per kind: its key, and one of its
whitelisted commands (any other tag does not decode)."""


class WatchAgent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/actors/agent/stream``: a session's live messages (NDJSON of StreamLine)."""

    key: tuple[_Part]
    command: agents.WatchSession
    buffer: Annotated[int, msgspec.Meta(ge=1, le=65_536)] = 1024


class AskBody(msgspec.Struct, frozen=True):
    """What ``POST /v1/actors/{kind}/ask`` takes, for the OpenAPI document: ``key`` the
    actor's key (``[app_name, user_id]`` for a scope, ``[name]`` for an agent,
    ``[app_name]`` or ``[app_name, user_id]`` for state, ``[thread_id]`` for
    checkpoints), ``command`` one of the whitelisted commands of that kind, tagged by
    its ``type`` (``"scope.search"``...; ``mnemex.remote.wire.ASK`` lists them with
    their replies; the route decodes it as exactly one of them)."""

    key: list[str]
    command: dict[str, Any]
    timeout: _Timeout | None = None


class ActorReply(msgspec.Struct, frozen=True):
    """What ``POST /v1/actors/{kind}/ask`` answers, for the OpenAPI document: the
    command's reply as ``mnemex.remote.wire.ASK`` names its type; most are tagged
    objects (``{"type": "scope.search_result", ...}``), a few a number, a list or
    null (a count, documents, a write without a reply)."""


def ask_request_type(kind: str) -> Any:
    """The request body type of ``/v1/actors/{kind}/ask``; None for a kind not served."""
    return ASK_TYPES.get(kind)


# -- session streams ---------------------------------------------------------------------------
class _Line(msgspec.Struct, frozen=True, tag_field="line"):
    pass


class Started(_Line, frozen=True, tag="started"):
    """The first line: what the session looked like when the subscription began."""

    reply: agents.WatchStart


class Entries(_Line, frozen=True, tag="entries"):
    event: agents.EntriesAppended


class Chunk(_Line, frozen=True, tag="chunk"):
    event: agents.ChunkRelayed


class Ended(_Line, frozen=True, tag="ended"):
    event: agents.SessionEnded


class Finished(_Line, frozen=True, tag="finished"):
    """The feed ended (the topic's last event was sent)."""


class Failed(_Line, frozen=True, tag="failed"):
    """The feed broke: ``type`` names the mnemex error (Busy: this reader fell behind)."""

    error: str
    type: str = "MnemexError"


StreamLine = Started | Entries | Chunk | Ended | Finished | Failed
EVENTS: Final[Mapping[type[Any], type[_Line]]] = {
    agents.EntriesAppended: Entries, agents.ChunkRelayed: Chunk, agents.SessionEnded: Ended}


def line_of(event: Any) -> _Line:
    """The stream line carrying one event of a session's topic."""
    wrapper = EVENTS.get(type(event))
    if wrapper is None:
        raise TypeError(f"a session stream does not carry {type(event).__name__}")
    return wrapper(event)


# -- what a client checks at connect ------------------------------------------------------------
class EmbedderInfo(msgspec.Struct, frozen=True):
    name: str
    dim: int


class RuntimeInfo(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/runtime``: what a remote client needs to behave as the server's own
    runtime: the protocol, the embedder its scopes hold vectors of (a client embeds
    with the same one or refuses to connect), and the sections of its config the refs
    read (limits, search defaults, chunking)."""

    protocol: int
    version: str
    kinds: list[str]
    """The actor kinds of the server that its remote clients reach."""
    embedder: EmbedderInfo | None
    ask_timeout: float
    memories: MemoriesConfig
    conversations: ConversationsConfig
    knowledge: KnowledgeConfig
    models: ModelsConfig


class ScopeKeys(msgspec.Struct, frozen=True):
    """``GET /v1/scopes``: every scope of the runtime, ``[app_name, user_id]``, sorted."""

    scopes: list[tuple[str, str]]


SCOPE_LIMITS: Final = ("memories", "conversations", "knowledge")
"""The config sections a remote client takes from the server as they are."""


class ErrorBody(msgspec.Struct, frozen=True):
    error: str = ""
    type: str | None = None
    field: str | None = None
    reason: str | None = None
    vshard: int | None = None  # NotOwner: the virtual shard, its owner and epoch as known
    owner: str | None = None
    epoch: int | None = None


_BY_NAME: Final[Mapping[str, type[MnemexError]]] = {
    name: getattr(errors, name) for name in errors.__all__}
_BY_STATUS: Final[tuple[tuple[int, type[MnemexError]], ...]] = (
    (413, errors.TooLarge), (422, errors.TooLarge), (404, errors.NotFound), (408, errors.Timeout),
    (504, errors.Timeout), (503, errors.Busy), (507, errors.StorageError))


def error_of(status: int, body: bytes) -> MnemexError:
    """The mnemex exception an error answer stands for: the class it names, else one
    told from the status (400s: InvalidInput), with its message and field."""
    try:
        said = msgspec.json.decode(body, type=ErrorBody)
    except msgspec.MsgspecError:
        said = ErrorBody(error=body[:500].decode("utf-8", "replace"))
    cls = _BY_NAME.get(said.type or "")
    if cls is None:
        cls = next((c for s, c in _BY_STATUS if s == status), None) or (
            errors.InvalidInput if 400 <= status < 500 else MnemexError)
    message = said.error or f"the server answered {status}"
    if status in (401, 403):
        message = f"{message} (status {status}: check the token given to mnemex.connect)"
    exc: MnemexError
    if issubclass(cls, errors.InvalidInput):
        exc = cls(message, field=said.field)
    elif issubclass(cls, errors.ExtractionError):
        exc = cls(message, reason=said.reason or "malformed")
    elif issubclass(cls, errors.NotOwner):
        exc = cls(message, vshard=said.vshard if said.vshard is not None else -1, owner=said.owner,
                  epoch=said.epoch)
    else:
        exc = cls(message)
    return exc
