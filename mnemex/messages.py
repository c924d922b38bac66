"""Typed messages: the data that crosses an actor's mailbox, the journal and HTTP.

Every command and reply is a frozen msgspec Struct. Commands of one actor kind
form a tagged union (tag field ``"type"``, namespaced tags such as
``"scope.remember"``) decoded in one pass by a decoder built once; the journal
line of a command *is* its encoding, so replay is decode + ``handle``.

Persisted types tolerate unknown fields (old readers read new files); every new
field gets a default. Junk that fails to decode raises ``InvalidInput`` naming
the field path (``$.messages[0].role``), never a bare KeyError or msgspec error.
"""

from __future__ import annotations

import re
from typing import Any, Generic, Literal, TypeVar

import msgspec

from mnemex.errors import InvalidInput

__all__ = [
    "AGENT_WRITES",
    "AgentCommand",
    "AgentCommandType",
    "AgentRead",
    "AgentStats",
    "AgentWrite",
    "AppendMessages",
    "Appended",
    "ApplySummary",
    "ArchiveSession",
    "ChatMessage",
    "Command",
    "CompleteSession",
    "ContextView",
    "ContextWindow",
    "DeleteAllSessions",
    "DeleteSession",
    "EntriesAppended",
    "EntryPage",
    "ExpireSessions",
    "FindExpired",
    "GetContext",
    "GetHistory",
    "GetStats",
    "JsonCodec",
    "ListMessages",
    "ListSessions",
    "ListTurns",
    "MaxMessages",
    "MemoryRecord",
    "MessageEntry",
    "MessagePage",
    "NoPruning",
    "Policy",
    "PolicySet",
    "PruningPolicy",
    "Reply",
    "SearchTurns",
    "SessionCompleted",
    "SessionCounts",
    "SessionEnded",
    "SessionInfo",
    "SessionsDeleted",
    "SetPolicy",
    "SetTtl",
    "StoredMessage",
    "StreamEvent",
    "SummaryApplied",
    "SummaryFailed",
    "TokenBudget",
    "TtlSet",
    "Turn",
    "TurnHit",
    "TurnRecord",
    "WatchSession",
    "WatchStart",
    "decode_json",
    "session_topic",
]

T = TypeVar("T")


class Command(msgspec.Struct, frozen=True, tag_field="type"):
    """Base of every actor command. Subclasses set ``tag="<kind>.<verb>"``."""


class Reply(msgspec.Struct, frozen=True, tag_field="type"):
    """Base of every structured reply. Subclasses set ``tag="<kind>.<noun>"``."""


class ChatMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """One message of a conversation, in the OpenAI chat shape.

    ``content`` is text, a list of content parts, or None (an assistant message
    that only calls tools). ``extra`` keeps any other field a platform sent, so a
    message is returned as it was given.
    """

    role: str
    content: str | list[Any] | None = None
    name: str | None = None
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class MemoryRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """One long-term memory of a (app_name, user_id) scope.

    Times are seconds since the epoch (UTC). ``timestamp`` is when the original
    content happened, ``created_at`` when mnemex stored it. ``id`` is assigned by
    the runtime and sorts by creation time.
    """

    id: str
    content: str
    author: str | None = None
    timestamp: float = 0.0
    created_at: float = 0.0
    last_accessed_at: float = 0.0
    access_count: int = 0
    importance: float = 0.5
    session_id: str | None = None
    actor_id: str | None = None
    categories: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    source: str | None = None


_PATH = re.compile(r"- at `(\$[^`]*)`")
_MISSING = re.compile(r"missing required field `([^`]*)`")


def _field_of(exc: msgspec.ValidationError) -> str | None:
    """The JSON path of the offending field: ``$.messages[0].role``."""
    text = str(exc)
    match = _PATH.search(text)
    path = match.group(1) if match else None
    missing = _MISSING.search(text)
    if missing:
        return f"{path or '$'}.{missing.group(1)}"
    return path


class JsonCodec(Generic[T]):
    """One shared JSON encoder/decoder pair for a type, built once and reused.

    ``decode`` raises InvalidInput naming the offending field; ``what`` says what
    was being decoded (``"journal command"``, ``"POST /memory body"``).
    """

    __slots__ = ("_decoder", "_encoder", "type", "what")

    def __init__(self, type_: Any, what: str) -> None:
        self.type = type_
        self.what = what
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(type_)
        self._encoder = msgspec.json.Encoder()

    def encode(self, value: T) -> bytes:
        return self._encoder.encode(value)

    def decode(self, data: bytes | str) -> T:
        try:
            return self._decoder.decode(data)
        except msgspec.ValidationError as exc:
            field = _field_of(exc)
            raise InvalidInput(f"{self.what}: {exc}", field=field) from exc
        except msgspec.DecodeError as exc:
            raise InvalidInput(f"{self.what} is not valid JSON: {exc}") from exc


def decode_json(data: bytes | str, type_: type[T], what: str) -> T:
    """Decode ``data`` as ``type_`` once; prefer a module-level JsonCodec in hot paths."""
    return JsonCodec[T](type_, what).decode(data)


# -- agents --------------------------------------------------------------------------
# Short-term memory: the commands an AgentActor (key: the agent's name) accepts, its
# replies, and its pruning policies. Messages travel as ``msgspec.Raw`` (the JSON of
# one chat message, verbatim: unknown fields and ``content: null`` kept) so the
# journal, the snapshot and HTTP pass them on without re-encoding them.


class PruningPolicy(msgspec.Struct, frozen=True, tag_field="type"):
    """Base of the pruning policies: how a session's history becomes the context
    sent to the model. Policies are data (journaled, compared, hashed); the views
    they give are computed in ``mnemex.actors.pruning``."""


class MaxMessages(PruningPolicy, frozen=True, tag="max_messages"):
    """Keep every system message, wherever it stands, plus the ``n`` most recent
    other messages. A tool result is never kept without the assistant message that
    called it (so the view may hold a few less)."""

    n: int = 100

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise InvalidInput(f"MaxMessages.n is {self.n!r}; it must be an integer >= 1", field="n")


class TokenBudget(PruningPolicy, frozen=True, tag="token_budget"):
    """Fit the context into ``max_context_tokens``: once it reaches ``trigger_ratio``
    of that, keep the system messages and the last ``keep_recent_turns`` user turns
    (with everything after them) and replace what came before by a summary,
    injected as a ``memory_compress`` tool call and its result. Summaries are
    made beside the actor; until one arrives the context is cut to the budget."""

    max_context_tokens: int = 8192
    trigger_ratio: float = 0.8
    keep_recent_turns: int = 5

    def __post_init__(self) -> None:
        tokens = self.max_context_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 16:
            raise InvalidInput(f"TokenBudget.max_context_tokens is {tokens!r}; it must be an integer >= 16",
                               field="max_context_tokens")
        ratio = self.trigger_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0.0 < ratio <= 1.0:
            raise InvalidInput(f"TokenBudget.trigger_ratio is {ratio!r}; it must be in (0, 1]",
                               field="trigger_ratio")
        turns = self.keep_recent_turns
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise InvalidInput(f"TokenBudget.keep_recent_turns is {turns!r}; it must be an integer >= 1",
                               field="keep_recent_turns")

    @property
    def summary_tokens(self) -> int:
        """Target size of a summary: min(4000, max(500, max_context_tokens / 10))."""
        return min(4000, max(500, self.max_context_tokens // 10))


class NoPruning(PruningPolicy, frozen=True, tag="none"):
    """Short-term memory off: nothing is carried across calls, the context is only
    the messages of the latest append. History is still stored."""


Policy = MaxMessages | TokenBudget | NoPruning


class Turn(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Metadata of one assistant turn, given with the turn's messages to ``append``.

    Fields left None are filled in: ``iteration`` counts the session's turns,
    ``tool_calls`` lists the tools the turn's assistant messages called."""

    iteration: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tool_calls: list[str] | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class TurnRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A stored turn: its metadata, where it sits in the session (``first_sequence``
    to ``last_sequence``) and its text, which ``search_turns`` matches."""

    session_id: str
    iteration: int
    message_count: int
    timestamp: float
    first_sequence: int
    last_sequence: int
    query_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tool_calls: list[str] = msgspec.field(default_factory=list)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    text: str = ""


class TurnHit(msgspec.Struct, frozen=True):
    """One result of ``search_turns``: a BM25 score (higher is better) and the turn."""

    score: float
    turn: TurnRecord


class MessageEntry(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One stored message as the actor keeps it: the message JSON verbatim and what
    the actor derived from it (role, tokens, tool call ids). ``sequence`` is unique
    and increasing across the agent, in insertion order; ``timestamp`` is seconds
    since the epoch, given by whoever appended. Never tracked by the cyclic GC
    (it holds no containers), so long histories cost collections nothing."""

    sequence: int
    timestamp: float
    session_id: str
    message: msgspec.Raw
    query_id: str | None = None
    role: str = ""
    tokens: int = 0
    tool_call_ids: tuple[str, ...] = ()
    tool_call_id: str | None = None


class StoredMessage(msgspec.Struct, frozen=True):
    """One stored message as callers see it: ``message`` is the object that was
    appended, with every field it had."""

    sequence: int
    timestamp: float
    session_id: str
    message: dict[str, Any]
    query_id: str | None = None


class EntryPage(msgspec.Struct, frozen=True):
    """The actor's answer to ListMessages: raw entries, oldest first."""

    entries: list[MessageEntry]
    total: int
    limit: int | None
    offset: int


class MessagePage(msgspec.Struct, frozen=True):
    """A page of stored messages, oldest first (newest last). ``offset`` counts from
    the oldest, so pages stay put while messages are appended. ``limit`` None means
    every message from ``offset`` on."""

    messages: list[StoredMessage]
    total: int
    limit: int | None
    offset: int


class ContextWindow(msgspec.Struct, frozen=True, kw_only=True):
    """The actor's answer to GetContext: the messages as raw JSON (see ContextView)."""

    messages: list[msgspec.Raw]
    tokens: int
    stored: int
    kept: int
    summarized: int = 0
    summary_version: int = 0
    pending_summary: bool = False
    over_budget: bool = False
    budget: int | None = None
    policy: Policy = msgspec.field(default_factory=MaxMessages)


class ContextView(msgspec.Struct, frozen=True, kw_only=True):
    """The context for the next model call and how it was made.

    ``messages``: what to send, oldest first. ``tokens``: their estimated size.
    ``stored``: messages in the session; ``kept``: how many of them are in
    ``messages``; ``summarized``: how many the injected summary (version
    ``summary_version``, 0 for none) stands for. ``pending_summary``: a summary is
    being made. ``over_budget``: even the smallest valid context (the latest
    message or tool chain) is larger than ``budget``.
    """

    messages: list[dict[str, Any]]
    tokens: int
    stored: int
    kept: int
    summarized: int = 0
    summary_version: int = 0
    pending_summary: bool = False
    over_budget: bool = False
    budget: int | None = None
    policy: Policy = msgspec.field(default_factory=MaxMessages)


class SessionInfo(Reply, frozen=True, kw_only=True, tag="agent.session"):
    """One session of an agent. Times are seconds since the epoch; ``updated_at``
    is the latest append (a TTL counts from it)."""

    session_id: str
    message_count: int
    query_count: int
    tokens: int
    created_at: float
    updated_at: float
    completed: bool = False
    turns: int = 0
    summary_version: int = 0
    summarized: int = 0
    policy: Policy | None = None


class SessionCounts(msgspec.Struct, frozen=True):
    message_count: int
    query_count: int


class AgentStats(Reply, frozen=True, kw_only=True, tag="agent.stats"):
    """Counts for one agent (``sessions`` maps each live session to its counts)."""

    agent: str
    total_sessions: int
    total_messages: int
    completed_sessions: int
    turns: int
    tokens: int
    last_sequence: int
    policy: Policy
    ttl: float | None
    summaries_applied: int
    summaries_pending: int
    summaries_failed: int
    sessions: dict[str, SessionCounts] = msgspec.field(default_factory=dict)


class Appended(Reply, frozen=True, kw_only=True, tag="agent.appended"):
    """The answer to AppendMessages: the sequences given (``first_sequence`` to
    ``first_sequence + count - 1``) and the session's message count after it."""

    session_id: str
    first_sequence: int
    count: int
    message_count: int
    turn: TurnRecord | None = None


class SessionCompleted(Reply, frozen=True, kw_only=True, tag="agent.completed"):
    session_id: str
    existed: bool
    message_count: int = 0


class SessionsDeleted(Reply, frozen=True, kw_only=True, tag="agent.deleted"):
    """Sessions removed (by delete, purge or expiry) and how many messages they held."""

    session_ids: list[str]
    messages_removed: int


class PolicySet(Reply, frozen=True, kw_only=True, tag="agent.policy_set"):
    policy: Policy | None
    session_id: str | None = None


class TtlSet(Reply, frozen=True, kw_only=True, tag="agent.ttl_set"):
    seconds: float | None


class SummaryApplied(Reply, frozen=True, kw_only=True, tag="agent.summary_applied"):
    """``applied`` is False when the summary came too late (the session changed)."""

    session_id: str
    applied: bool
    version: int = 0


class WatchStart(Reply, frozen=True, kw_only=True, tag="agent.watch_start"):
    """The answer to WatchSession, given in the turn the subscription was registered:
    whether the session exists, whether it is completed, and its history (when
    asked for) up to the first event the subscription will receive."""

    exists: bool
    completed: bool
    entries: list[MessageEntry] = msgspec.field(default_factory=list)


class EntriesAppended(msgspec.Struct, frozen=True):
    """Event on a session's topic: messages were appended."""

    entries: list[MessageEntry]


class ChunkRelayed(msgspec.Struct, frozen=True):
    """Event on a session's topic: a pushed streaming chunk (see RelayChunk)."""

    chunk: msgspec.Raw


class SessionEnded(msgspec.Struct, frozen=True):
    """Event on a session's topic, the last one: completed, deleted or expired."""

    reason: Literal["completed", "deleted", "expired"]


class StreamEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One item of ``AgentRef.subscribe``.

    ``kind`` is ``"message"`` (``message`` set; ``live`` False while replaying the
    history, True once live), ``"live"`` (the marker between history and live
    delivery), ``"completed"``, ``"deleted"`` or ``"expired"`` (the last item), or
    ``"error"`` (the subscriber fell too far behind and was dropped; ``detail``
    says why; the last item)."""

    kind: Literal["message", "chunk", "live", "completed", "deleted", "expired", "error"]
    message: StoredMessage | None = None
    chunk: msgspec.Raw | None = None
    """For ``"chunk"``: a streaming chunk a platform pushed (RelayChunk), as it came."""
    live: bool = False
    detail: str = ""


class AgentCommand(Command, frozen=True, kw_only=True):
    """Base of the AgentActor's commands. ``timestamp``/``now`` are seconds since
    the epoch, read by the caller: the actor never reads a clock."""


class AppendMessages(AgentCommand, frozen=True, tag="agent.append"):
    """Store ``messages`` (JSON objects, in order) in ``session_id``. All or nothing."""

    session_id: str
    messages: list[msgspec.Raw] = msgspec.field(default_factory=list)
    timestamp: float = 0.0
    query_id: str | None = None
    turn: Turn | None = None


class CompleteSession(AgentCommand, frozen=True, tag="agent.complete"):
    """Mark a session completed: its live subscribers get the end of the stream.
    A later append reopens it."""

    session_id: str
    timestamp: float = 0.0


class DeleteSession(AgentCommand, frozen=True, tag="agent.delete_session"):
    session_id: str
    timestamp: float = 0.0


class DeleteAllSessions(AgentCommand, frozen=True, tag="agent.delete_all"):
    timestamp: float = 0.0


class SetPolicy(AgentCommand, frozen=True, tag="agent.set_policy"):
    """Set the agent's pruning policy, or one session's (``session_id``). ``policy``
    None returns to the default (the agent's, or the configured one)."""

    policy: Policy | None = None
    session_id: str | None = None


class SetTtl(AgentCommand, frozen=True, tag="agent.set_ttl"):
    """Sessions idle longer than ``seconds`` expire; None keeps them forever."""

    seconds: float | None = None


class ExpireSessions(AgentCommand, frozen=True, tag="agent.expire"):
    """Delete every session whose TTL has passed at ``now``."""

    now: float = 0.0


class FindExpired(AgentCommand, frozen=True, tag="agent.find_expired"):
    """Read: the ids of the sessions whose TTL has passed at ``now`` (the sweeper asks
    this first, so an agent with nothing to expire journals nothing)."""

    now: float = 0.0


class ApplySummary(AgentCommand, frozen=True, tag="agent.apply_summary"):
    """A summary made beside the actor: it stands for the session's non-system
    messages with a sequence below ``through``, folding in summary ``base_version``.
    Ignored when the session changed meanwhile (other generation or version)."""

    session_id: str
    generation: int
    base_version: int
    through: int
    text: str
    covered: int = 0


class SummaryFailed(AgentCommand, frozen=True, tag="agent.summary_failed"):
    """A summary job failed (not journaled): the context stays cut to the budget and
    the summary is asked for again after a back-off."""

    session_id: str
    generation: int
    base_version: int
    error: str = ""


class GetHistory(AgentCommand, frozen=True, tag="agent.history"):
    session_id: str
    now: float = 0.0


class GetContext(AgentCommand, frozen=True, tag="agent.context"):
    session_id: str
    now: float = 0.0
    max_tokens: int | None = None


class ListMessages(AgentCommand, frozen=True, tag="agent.messages"):
    session_id: str | None = None
    query_id: str | None = None
    limit: int | None = 50
    offset: int = 0
    now: float = 0.0


class ListSessions(AgentCommand, frozen=True, tag="agent.sessions"):
    now: float = 0.0


class GetStats(AgentCommand, frozen=True, tag="agent.get_stats"):
    now: float = 0.0


class ListTurns(AgentCommand, frozen=True, tag="agent.turns"):
    session_id: str
    now: float = 0.0


class SearchTurns(AgentCommand, frozen=True, tag="agent.search_turns"):
    query: str
    top_k: int = 10
    session_id: str | None = None
    now: float = 0.0


class WatchSession(AgentCommand, frozen=True, tag="agent.watch"):
    """Sent with a subscription to the session's topic (see Runtime.subscribe)."""

    session_id: str
    from_beginning: bool = False
    now: float = 0.0


class RelayChunk(AgentCommand, frozen=True, tag="agent.relay_chunk"):
    """A streaming chunk (an OpenAI ``chat.completion.chunk``) a platform pushes while
    a reply is generated: handed to the session's live readers as it is, not stored
    (the finished messages are appended as usual) and not journaled."""

    session_id: str
    chunk: msgspec.Raw


class ArchiveSession(AgentCommand, frozen=True, tag="agent.archive"):
    """Send a session's user and assistant messages with text to the long-term
    memory of (app_name, user_id): the agent forwards them to that scope actor
    (kind ``scope_kind``), whose answer (SessionAdded) answers this command. Its
    memories take ids from ``first_id`` on (a block the caller reserved)."""

    session_id: str
    app_name: str
    user_id: str
    first_id: str
    scope_kind: str = "scope"
    now: float = 0.0


AgentWrite = (AppendMessages | CompleteSession | DeleteSession | DeleteAllSessions | SetPolicy | SetTtl
              | ExpireSessions | ApplySummary)
AgentRead = (SummaryFailed | FindExpired | GetHistory | GetContext | ListMessages | ListSessions | GetStats
             | ListTurns | SearchTurns | WatchSession | RelayChunk | ArchiveSession)
AgentCommandType = AgentWrite | AgentRead
AGENT_WRITES: tuple[type[AgentCommand], ...] = (AppendMessages, CompleteSession, DeleteSession,
                                                DeleteAllSessions, SetPolicy, SetTtl, ExpireSessions,
                                                ApplySummary)


def session_topic(session_id: str) -> str:
    """The pub/sub topic of one session's live messages."""
    return "session:" + session_id


# -- scopes (long-term memory) ------------------------------------------------------------
# Long-term memory: the commands a ScopeActor (key: (app_name, user_id)) accepts, its
# replies, and the public types of the classic two-call memory service. Ids, times and
# embeddings arrive inside the commands (the ref assigns and computes them), so the
# actor stays deterministic: a vector is journaled with the command that carries it
# (float32 little-endian bytes, base64 in JSON) and replay never needs the model.

__all__ += [
    "AddSession",
    "CountMemories",
    "Event",
    "Forget",
    "ForgetWhere",
    "Forgotten",
    "GetMemory",
    "GetScopeStats",
    "Hit",
    "ListMemories",
    "MemoryEntry",
    "MemoryPage",
    "NewMemory",
    "Remember",
    "Remembered",
    "SCOPE_WRITES",
    "ScopeCommand",
    "ScopeCommandType",
    "ScopeRead",
    "ScopeStats",
    "ScopeWrite",
    "Search",
    "SearchMode",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "Session",
    "SessionAdded",
    "StoreSession",
    "Touch",
    "Touched",
    "UpdateMemory",
    "Updated",
]

SearchMode = Literal["keyword", "fulltext", "vector", "hybrid"]


class Event(msgspec.Struct, frozen=True, omit_defaults=True):
    """One event of a finished session: who said it, what, and when (seconds since
    the epoch). ``content`` is text, or a message content in the chat shapes (a list
    of parts, or an object with ``parts``/``text``); events without text are skipped
    when the session goes into memory."""

    author: str
    content: Any = None
    timestamp: float = 0.0
    id: str | None = None


class Session(msgspec.Struct, frozen=True, omit_defaults=True):
    """A finished conversation of one user in one app, as ``add_session`` takes it."""

    id: str
    app_name: str
    user_id: str
    events: list[Event] = msgspec.field(default_factory=list)
    last_update_time: float = 0.0


class SearchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The classic search of ``MemoryService``: memories of (app_name, user_id) sharing
    a word with ``query``, most words matched first, then the most recent."""

    query: str
    user_id: str
    app_name: str
    top_k: int = 100


class MemoryEntry(msgspec.Struct, frozen=True, omit_defaults=True):
    """One memory as the classic service returns it; ``timestamp`` is when the
    original content happened, ISO 8601 in UTC."""

    content: str
    author: str | None = None
    timestamp: str | None = None
    id: str | None = None


class SearchResponse(msgspec.Struct, frozen=True):
    memories: list[MemoryEntry] = msgspec.field(default_factory=list)


class NewMemory(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A memory to store, as the ref sends it: ``id`` assigned by the runtime (sortable
    by time), ``vector`` the embedding of ``content`` (float32 bytes, of the command's
    embedder). ``timestamp`` None means the command's ``now``."""

    id: str
    content: str
    vector: bytes | None = None
    author: str | None = None
    timestamp: float | None = None
    importance: float = 0.5
    session_id: str | None = None
    actor_id: str | None = None
    categories: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    source: str | None = None


class ScopeCommand(Command, frozen=True, kw_only=True):
    """Base of the ScopeActor's commands. ``now`` is seconds since the epoch, read by
    the caller; ``embedder``/``dim`` name the model that made the command's vectors."""


class Remember(ScopeCommand, frozen=True, tag="scope.remember"):
    """Store ``memories``, all or none. Content already stored in the scope is not
    stored again: its existing id comes back."""

    memories: list[NewMemory] = msgspec.field(default_factory=list)
    embedder: str | None = None
    dim: int = 0
    now: float = 0.0


class AddSession(ScopeCommand, frozen=True, tag="scope.add_session"):
    """Store the text events of a finished session (``memories``, one per event)."""

    session_id: str
    memories: list[NewMemory] = msgspec.field(default_factory=list)
    embedder: str | None = None
    dim: int = 0
    now: float = 0.0


class UpdateMemory(ScopeCommand, frozen=True, tag="scope.update"):
    """Change some fields of a memory (unset fields stay); a new ``content`` comes with
    its ``vector`` and is re-indexed."""

    id: str
    now: float = 0.0
    content: str | msgspec.UnsetType = msgspec.UNSET
    vector: bytes | msgspec.UnsetType | None = msgspec.UNSET
    embedder: str | None = None
    dim: int = 0
    author: str | msgspec.UnsetType | None = msgspec.UNSET
    timestamp: float | msgspec.UnsetType = msgspec.UNSET
    importance: float | msgspec.UnsetType = msgspec.UNSET
    session_id: str | msgspec.UnsetType | None = msgspec.UNSET
    actor_id: str | msgspec.UnsetType | None = msgspec.UNSET
    categories: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    entities: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    metadata: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    source: str | msgspec.UnsetType | None = msgspec.UNSET


class Forget(ScopeCommand, frozen=True, tag="scope.forget"):
    """Delete memories by id; unknown ids are ignored (the reply lists what went)."""

    ids: list[str] = msgspec.field(default_factory=list)
    now: float = 0.0


class ForgetWhere(ScopeCommand, frozen=True, tag="scope.forget_where"):
    """Delete every memory the filter matches (an empty filter is refused)."""

    filter: dict[str, Any] = msgspec.field(default_factory=dict)
    now: float = 0.0


class Touch(ScopeCommand, frozen=True, tag="scope.touch"):
    """Searches returned these memories: add ``counts[i]`` (1 when counts is empty) to
    each one's access_count and set last_accessed_at to ``now``. Sent batched, one
    command for many searches; ids no longer stored are ignored."""

    ids: list[str] = msgspec.field(default_factory=list)
    counts: list[int] = msgspec.field(default_factory=list)
    now: float = 0.0


class GetMemory(ScopeCommand, frozen=True, tag="scope.get"):
    id: str


class CountMemories(ScopeCommand, frozen=True, tag="scope.count"):
    filter: dict[str, Any] | None = None


class ListMemories(ScopeCommand, frozen=True, tag="scope.list"):
    """A page of memories in id order (creation order), optionally filtered."""

    filter: dict[str, Any] | None = None
    limit: int | None = 100
    offset: int = 0


class GetScopeStats(ScopeCommand, frozen=True, tag="scope.get_stats"):
    now: float = 0.0


class Search(ScopeCommand, frozen=True, tag="scope.search"):
    """Search the scope. ``vector`` is the query's embedding (needed by the vector and
    hybrid modes). ``min_score`` None means the mode's default."""

    query: str
    vector: bytes | None = None
    embedder: str | None = None
    dim: int = 0
    top_k: int = 10
    mode: SearchMode = "hybrid"
    min_score: float | None = None
    filter: dict[str, Any] | None = None
    now: float = 0.0


class Remembered(Reply, frozen=True, kw_only=True, tag="scope.remembered"):
    """Ids in the order given; ``created[i]`` is False where the content was stored
    already (the id is the existing memory's)."""

    ids: list[str]
    created: list[bool]


class SessionAdded(Reply, frozen=True, kw_only=True, tag="scope.session_added"):
    """``ids``: the memory of each text event; ``added``: how many were new."""

    session_id: str
    ids: list[str]
    added: int


class Updated(Reply, frozen=True, kw_only=True, tag="scope.updated"):
    memory: MemoryRecord


class Forgotten(Reply, frozen=True, kw_only=True, tag="scope.forgotten"):
    ids: list[str]


class Touched(Reply, frozen=True, kw_only=True, tag="scope.touched"):
    count: int


class Hit(msgspec.Struct, frozen=True, omit_defaults=True):
    """One search result: the memory, its final ``score`` (higher is better; in 0..1
    for every mode, so hits of different scopes compare) and every signal that made
    it (``scores``: keyword, bm25, fulltext, entities, vector, relevance, importance,
    recency, access, ...). ``app_name``/``user_id`` name the scope it came from."""

    memory: MemoryRecord
    score: float
    scores: dict[str, float] = msgspec.field(default_factory=dict)
    app_name: str = ""
    user_id: str = ""


class SearchResult(Reply, frozen=True, kw_only=True, tag="scope.search_result"):
    hits: list[Hit]
    mode: SearchMode = "hybrid"


class MemoryPage(Reply, frozen=True, kw_only=True, tag="scope.page"):
    memories: list[MemoryRecord]
    total: int
    limit: int | None
    offset: int


class ScopeStats(Reply, frozen=True, kw_only=True, tag="scope.stats"):
    """Counts of one scope. ``vector_mode`` is ``exact`` or ``hnsw``; ``graph_pending``
    says an HNSW graph is being built beside the actor (searches stay exact)."""

    app_name: str
    user_id: str
    count: int
    embedder: str | None
    dim: int
    vector_mode: str
    graph_pending: bool
    tombstones: int
    vocabulary: int
    entities: int
    sessions: int
    categories: int
    content_bytes: int
    oldest_created_at: float | None = None
    newest_created_at: float | None = None


class StoreSession(ScopeCommand, frozen=True, tag="scope.store_session"):
    """A finished session sent by an actor (an agent archiving one): the scope
    embeds its new texts beside itself, then stores them as an AddSession, whose
    reply answers this command. Ids from ``first_id`` on."""

    session: Session
    first_id: str
    now: float = 0.0


ScopeWrite = Remember | AddSession | UpdateMemory | Forget | ForgetWhere | Touch
ScopeRead = GetMemory | CountMemories | ListMemories | GetScopeStats | Search | StoreSession
ScopeCommandType = ScopeWrite | ScopeRead
SCOPE_WRITES: tuple[type[ScopeCommand], ...] = (Remember, AddSession, UpdateMemory, Forget, ForgetWhere,
                                                Touch)
