"""Short-term memory's messages: the commands an agent actor (key: the agent's name)
accepts, its replies, its events and its pruning policies."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from mnemex._protocol import Command, Reply
from mnemex.errors import InvalidInput

_decode_message = msgspec.json.Decoder(dict[str, Any]).decode
_decode_messages = msgspec.json.Decoder(list[dict[str, Any]]).decode
_encode_raws = msgspec.json.Encoder().encode

__all__ = [
    "AGENT_WRITES",
    "AgentCommand",
    "AgentCommandType",
    "AgentRead",
    "AgentStats",
    "AgentWrite",
    "AppendItems",
    "AppendMessages",
    "Appended",
    "ApplySummary",
    "ArchiveSession",
    "ChatMessage",
    "ChunkRelayed",
    "CompleteSession",
    "ContextView",
    "ContextWindow",
    "CreateSession",
    "DeleteAllSessions",
    "DeleteSession",
    "EntriesAppended",
    "EntryPage",
    "ExpireSessions",
    "FindExpired",
    "GetContext",
    "GetHistory",
    "GetSession",
    "GetStats",
    "ListMessages",
    "ListSessionHeaders",
    "ListSessions",
    "KeepAll",
    "ListTurns",
    "MaxMessages",
    "MessageEntry",
    "MessagePage",
    "Policy",
    "PolicySet",
    "PopMessage",
    "Popped",
    "PruningPolicy",
    "RelayChunk",
    "SearchTurns",
    "SessionCompleted",
    "SessionCounts",
    "SessionCreated",
    "SessionEnded",
    "SessionHeader",
    "SessionRead",
    "SessionInfo",
    "SessionsDeleted",
    "SetPolicy",
    "SetTtl",
    "Stateless",
    "StoredMessage",
    "StreamEvent",
    "SummaryApplied",
    "SummaryFailed",
    "TokenBudget",
    "TtlSet",
    "Turn",
    "TurnHit",
    "TurnRecord",
    "UpdateSessionState",
    "WatchSession",
    "WatchStart",
    "decode_state",
    "session_topic",
]

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



# Short-term memory: the commands an AgentActor (key: the agent's name) accepts, its
# replies, and its pruning policies. Messages travel as ``msgspec.Raw`` (the JSON of
# one chat message, verbatim: unknown fields and ``content: null`` kept) so the
# journal, the snapshot and HTTP pass them on without re-encoding them.


class PruningPolicy(msgspec.Struct, frozen=True, tag_field="type"):
    """Base of the pruning policies: how a session's history becomes the context
    sent to the model. Policies are data (journaled, compared, hashed); the views
    they give are computed in ``mnemex.conversations.pruning``."""


class MaxMessages(PruningPolicy, frozen=True, tag="max_messages"):
    """At most ``n`` messages, system messages included: every system message is
    kept wherever it stands (it defines the agent) and the newest other messages
    fill the rest. A tool result never goes without the assistant message that
    called it, nor that message without its results: a chain that does not fit
    whole is left out whole, so the view may hold fewer than ``n``. When the
    system messages alone take ``n`` places, the newest message (or chain) is still
    kept: a non-empty session never gives a context without its latest turn."""

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


class KeepAll(PruningPolicy, frozen=True, tag="keep_all"):
    """Every stored message, oldest first (cut only by a ``max_tokens`` the caller
    gives for one context)."""


class Stateless(PruningPolicy, frozen=True, tag="none"):
    """No short-term memory: the context is only the messages of the latest append
    (system messages among them included); nothing earlier is carried into the
    next call. History is still stored. (Persisted as ``"none"``.)"""


Policy = MaxMessages | TokenBudget | KeepAll | Stateless


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
    and increasing across the agent, in insertion order (a popped message's number
    is never given again); ``timestamp`` is seconds since the epoch, given by
    whoever appended. Never tracked by the cyclic GC (it holds no containers), so
    long histories cost collections nothing.

    Entries stored as OpenAI Responses items (``AppendItems``) say so: ``item`` is
    the item's type (``"message"`` for a message item, with ``role`` set;
    ``"function_call"``, ``"reasoning"``... with ``role`` empty; ``"untyped"`` for an
    object with neither a type nor a role); ``joined``: a
    context never starts on it (see ``mnemex.conversations.items``). Chat messages
    leave both at their defaults."""

    sequence: int
    timestamp: float
    session_id: str
    message: msgspec.Raw
    query_id: str | None = None
    role: str = ""
    tokens: int = 0
    tool_call_ids: tuple[str, ...] = ()
    tool_call_id: str | None = None
    item: str = ""
    joined: bool = False

    def stored(self) -> StoredMessage:
        """The message as callers see it: its JSON decoded into a fresh dict."""
        return StoredMessage(self.sequence, self.timestamp, self.session_id, _decode_message(self.message),
                             self.query_id)


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

    def page(self) -> MessagePage:
        """The page as callers see it."""
        return MessagePage([entry.stored() for entry in self.entries], self.total, self.limit, self.offset)


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

    def decoded_messages(self) -> list[dict[str, Any]]:
        """The messages as dicts: the raw lines joined into one JSON array and decoded
        in one call (a call per message costs a third more on a 20-message context)."""
        return _decode_messages(_encode_raws(self.messages)) if self.messages else []

    def view(self) -> ContextView:
        """The window as callers see it: each message's JSON decoded into a dict."""
        fields = msgspec.structs.asdict(self)
        fields["messages"] = self.decoded_messages()
        return ContextView(**fields)


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


def decode_state(state: dict[str, msgspec.Raw]) -> dict[str, Any]:
    """A key-value state as the actor keeps it (each value's JSON, verbatim) decoded
    into Python values, in one pass over the whole object."""
    return _decode_message(_encode_raws(state)) if state else {}


class SessionHeader(Reply, frozen=True, kw_only=True, tag="agent.session_header"):
    """One session without its messages: times (seconds since the epoch; ``updated_at``
    is its latest append or state change, ``last_entry_at`` the stamp of its newest
    entry, None without one), how many messages it holds, and its key-value state
    (each value's JSON, verbatim: ``values()`` decodes them)."""

    session_id: str
    created_at: float
    updated_at: float
    message_count: int
    state: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    last_entry_at: float | None = None

    def values(self) -> dict[str, Any]:
        """The session's state as Python values."""
        return decode_state(self.state)


class SessionRead(Reply, frozen=True, kw_only=True, tag="agent.session_read"):
    """The answer to GetSession: the session's header and the entries asked for,
    oldest first."""

    header: SessionHeader
    entries: list[MessageEntry] = msgspec.field(default_factory=list)


class SessionCreated(Reply, frozen=True, kw_only=True, tag="agent.session_created"):
    """The answer to CreateSession: ``created`` is False when the session existed
    already (it was left as it was; ``header`` is the existing one)."""

    created: bool
    header: SessionHeader


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


class Popped(Reply, frozen=True, kw_only=True, tag="agent.popped"):
    """The answer to PopMessage: the message taken off the end of the session (None
    when it had none) and the session's message count after it."""

    session_id: str
    entry: MessageEntry | None
    message_count: int


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
    """Store ``messages`` (JSON objects, in order) in ``session_id``. All or nothing.
    ``state``: keys of the session's state set in the same step (see
    UpdateSessionState); ``existing``: NotFound, storing nothing, when the session
    does not exist (else the append creates it)."""

    session_id: str
    messages: list[msgspec.Raw] = msgspec.field(default_factory=list)
    timestamp: float = 0.0
    query_id: str | None = None
    turn: Turn | None = None
    state: dict[str, msgspec.Raw] | None = None
    existing: bool = False


class AppendItems(AgentCommand, frozen=True, tag="agent.append_items"):
    """Store ``items`` (OpenAI Responses input items, JSON objects, in order) in
    ``session_id``, verbatim: items without a role (``function_call``,
    ``function_call_output``, ``reasoning``...) as well as message items. All or
    nothing; checked as items (``mnemex.conversations.items``), not as chat messages."""

    session_id: str
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)
    timestamp: float = 0.0
    query_id: str | None = None
    turn: Turn | None = None
    state: dict[str, msgspec.Raw] | None = None
    existing: bool = False


class CreateSession(AgentCommand, frozen=True, tag="agent.create_session"):
    """Create ``session_id`` empty, with ``state`` as its key-value state (each value
    JSON). A session that exists is left as it is (SessionCreated says so)."""

    session_id: str
    state: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    timestamp: float = 0.0


class UpdateSessionState(AgentCommand, frozen=True, tag="agent.update_state"):
    """Set keys of a session's key-value state (``set``: key to JSON value, null
    included: a null is stored, not a removal) and remove others (``remove``); NotFound
    when the session does not exist. All or nothing."""

    session_id: str
    set: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    remove: list[str] = msgspec.field(default_factory=list)
    timestamp: float = 0.0


class PopMessage(AgentCommand, frozen=True, tag="agent.pop"):
    """Take the newest message (or item) off the end of ``session_id`` and answer it
    (Popped). Its sequence number is not given again; a summary that stood for it
    is dropped (the next context read asks for a new one)."""

    session_id: str
    timestamp: float = 0.0


class CompleteSession(AgentCommand, frozen=True, tag="agent.complete"):
    """Mark a session completed: its live subscribers get the end of the stream.
    A later append reopens it."""

    session_id: str
    timestamp: float = 0.0


class DeleteSession(AgentCommand, frozen=True, tag="agent.delete_session"):
    session_id: str
    timestamp: float = 0.0


class DeleteAllSessions(AgentCommand, frozen=True, tag="agent.delete_all"):
    """Delete every session. ``restart_sequence``: the next message stored gets
    sequence 1 again (False in journals written before it existed: replay keeps the
    numbers it acknowledged then)."""

    timestamp: float = 0.0
    restart_sequence: bool = False


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
    pops: int = 0
    """The session's pop count when the summary was asked for: a message popped since
    may be one it stands for, so it is then ignored."""


class SummaryFailed(AgentCommand, frozen=True, tag="agent.summary_failed"):
    """A summary job failed (not journaled): the context stays cut to the budget and
    the summary is asked for again after a back-off."""

    session_id: str
    generation: int
    base_version: int
    error: str = ""
    pops: int = 0


class GetHistory(AgentCommand, frozen=True, tag="agent.history"):
    """Read: the session's entries, oldest first; ``last``: only the newest ``last``."""

    session_id: str
    now: float = 0.0
    last: int | None = None


class GetSession(AgentCommand, frozen=True, tag="agent.get_session"):
    """Read: one session's header and entries (None when it does not exist). ``last``:
    only the newest ``last`` entries; ``after``: then only the newest run of entries
    stamped at or after ``after`` (read back from the end, so O(entries returned))."""

    session_id: str
    last: int | None = None
    after: float | None = None
    now: float = 0.0


class ListSessionHeaders(AgentCommand, frozen=True, tag="agent.session_headers"):
    """Read: the header of every live session whose id starts with ``prefix`` (every
    session when None), in no particular order; no message is read."""

    prefix: str | None = None
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
              | ExpireSessions | ApplySummary | AppendItems | PopMessage | CreateSession | UpdateSessionState)
AgentRead = (SummaryFailed | FindExpired | GetHistory | GetContext | ListMessages | ListSessions | GetStats
             | ListTurns | SearchTurns | WatchSession | RelayChunk | ArchiveSession | GetSession
             | ListSessionHeaders)
AgentCommandType = AgentWrite | AgentRead
AGENT_WRITES: tuple[type[AgentCommand], ...] = (AppendMessages, CompleteSession, DeleteSession,
                                                DeleteAllSessions, SetPolicy, SetTtl, ExpireSessions,
                                                ApplySummary, AppendItems, PopMessage, CreateSession,
                                                UpdateSessionState)


def session_topic(session_id: str) -> str:
    """The pub/sub topic of one session's live messages."""
    return "session:" + session_id

