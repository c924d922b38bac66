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
from mnemex.config import ConversationsConfig, KnowledgeConfig, MemoriesConfig, ModelsConfig
from mnemex.conversations import protocol as agents
from mnemex.errors import InvalidInput, MnemexError
from mnemex.memories import protocol as scopes
from mnemex.memories.documents import ExtractDocument
from mnemex.memories.extraction import CursorInfo, GetCursors

__all__ = [
    "APPENDS",
    "ASK",
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
    ),
    ExtractDocument: Asked(SCOPE, ExtractDocumentCommand, scopes.Extracted),
}

APPENDS: Final = (agents.AppendMessages, agents.AppendItems)
"""Appends: the server makes them through its own AgentRef (what hangs on appends runs)."""

WATCH: Final = Asked(AGENT, agents.WatchSession, agents.WatchStart)
"""The one subscription that crosses the wire: a session's live messages."""

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
ScopeKey = tuple[Annotated[str, msgspec.Meta(min_length=1)], Annotated[str, msgspec.Meta(min_length=1)]]
AgentKey = tuple[Annotated[str, msgspec.Meta(min_length=1)]]


class AskScope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/actors/scope/ask``: a command for the scope ``key`` = (app_name,
    user_id); ``timeout`` in seconds (absent: the server's kernel.ask_timeout)."""

    key: ScopeKey
    command: ScopeAsk  # type: ignore[valid-type]
    timeout: _Timeout | None = None


class AskAgent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/actors/agent/ask``: a command for the agent ``key`` = (name,)."""

    key: AgentKey
    command: AgentAsk  # type: ignore[valid-type]
    timeout: _Timeout | None = None


class WatchAgent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/actors/agent/stream``: a session's live messages (NDJSON of StreamLine)."""

    key: AgentKey
    command: agents.WatchSession
    buffer: Annotated[int, msgspec.Meta(ge=1, le=65_536)] = 1024


class AskBody(msgspec.Struct, frozen=True):
    """What ``POST /v1/actors/{kind}/ask`` takes, for the OpenAPI document: ``key`` the
    actor's key (``[app_name, user_id]`` for a scope, ``[name]`` for an agent),
    ``command`` one of the whitelisted commands of that kind, tagged by its ``type``
    (``"scope.search"``...; ``mnemex.remote.wire.ASK`` lists them with their replies;
    the route decodes it as exactly one of them, AskScope or AskAgent)."""

    key: list[str]
    command: dict[str, Any]
    timeout: _Timeout | None = None


def ask_request_type(kind: str) -> type[AskScope] | type[AskAgent] | None:
    """The request body type of ``/v1/actors/{kind}/ask``; None for a kind not served."""
    if kind == SCOPE:
        return AskScope
    return AskAgent if kind == AGENT else None


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
    else:
        exc = cls(message)
    return exc
