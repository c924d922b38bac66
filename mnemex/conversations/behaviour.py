"""AgentMemory: the behaviour of an AgentActor (key: the agent's name).

An agent owns its sessions: each session's messages, stored verbatim with a
sequence, a timestamp and a query id; its turn records; its summary; its
pruning policy (the agent's, or one set for the session). Everything that
changes state arrives as a journaled command carrying its own time, so replay
gives the same state; reads carry ``now`` too, for TTLs.

Summaries never run here: a context read that finds the session over its
trigger returns a Job (run in a worker thread by the runtime) whose result
comes back as ApplySummary, journaled like any write. A summary pending at a
crash is simply asked for again by a later read.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from mnemex._checks import check_id, check_int
from mnemex._protocol import JsonCodec
from mnemex._time import check_seconds
from mnemex.config import Config
from mnemex.conversations.conversation import (
    SUMMARY_CLOSE,
    SUMMARY_OPEN,
    SYSTEM_ROLES,
    TOOL_ROLES,
    Conversation,
    Summary,
)
from mnemex.conversations.items import check_item, item_as_chat
from mnemex.conversations.protocol import (
    AGENT_WRITES,
    AgentCommand,
    AgentCommandType,
    AgentStats,
    Appended,
    AppendItems,
    AppendMessages,
    ApplySummary,
    ArchiveSession,
    ChunkRelayed,
    CompleteSession,
    ContextWindow,
    CreateSession,
    DeleteAllSessions,
    DeleteSession,
    EntriesAppended,
    EntryPage,
    ExpireSessions,
    FindExpired,
    GetContext,
    GetHistory,
    GetSession,
    GetStats,
    KeepAll,
    ListMessages,
    ListSessionHeaders,
    ListSessions,
    ListTurns,
    MaxMessages,
    MessageEntry,
    Policy,
    PolicySet,
    PopMessage,
    Popped,
    RelayChunk,
    SearchTurns,
    SessionCompleted,
    SessionCounts,
    SessionCreated,
    SessionEnded,
    SessionHeader,
    SessionInfo,
    SessionRead,
    SessionsDeleted,
    SetPolicy,
    SetTtl,
    Stateless,
    SummaryApplied,
    SummaryFailed,
    TokenBudget,
    TtlSet,
    Turn,
    TurnHit,
    TurnRecord,
    UpdateSessionState,
    WatchSession,
    WatchStart,
    session_topic,
)
from mnemex.conversations.pruning import compression_cut, context_window, max_messages_start, summary_target
from mnemex.conversations.snapshot import (
    SNAPSHOT_FORMAT,
    CapturedSession,
    adopt_encoded,
    check_format,
    decode_policy,
    decode_sessions,
    encode_sessions,
)
from mnemex.conversations.summaries import (
    ExtractiveSummarizer,
    Summarizer,
    SummaryRequest,
    truncate_to_tokens,
)
from mnemex.conversations.tokens import (
    MESSAGE_OVERHEAD,
    EstimatedTokens,
    TokenCounter,
)
from mnemex.conversations.turns import TurnIndex, check_turn, turn_record
from mnemex.conversations.validation import CheckedMessage, check_message
from mnemex.effects import Effect, Emit, Forward, Image, Job, JobResult, SnapshotData, Step
from mnemex.errors import InvalidInput, NotFound
from mnemex.index import Tokenizer
from mnemex.memories.protocol import Event, Session, StoreSession
from mnemex.memories.sessions import event_text
from mnemex.state.values import apply_change, check_change

__all__ = [
    "AgentMemory",
    "AgentSettings",
    "agent_codec",
    "encode_agent_command",
    "is_agent_write",
    "summarizer_from_config",
]

log = logging.getLogger("mnemex.agent")

_MAX_ID_CHARS: Final = 1024
_ADOPT_BUDGET: Final = 512
"""Entries a command adopts at most from a snapshot's writer (see adopt_encoded):
each frees the entry it replaces, so the cost is spread over the turns after it."""

agent_codec: JsonCodec[AgentCommandType] = JsonCodec(AgentCommandType, "agent command")


def encode_agent_command(command: Any) -> bytes:
    """A command's journal payload: compact JSON on one line. Raw messages are embedded
    verbatim, so one holding a line break (pretty-printed JSON) is refused here,
    before the actor sees it; ``messages_to_raw`` compacts such messages."""
    payload = agent_codec.encode(command)
    if b"\n" in payload:
        raise InvalidInput("a message holds a raw line break (pretty-printed JSON); send compact JSON "
                           "or pass it through messages_to_raw, which compacts it", field="messages")
    return payload


def is_agent_write(command: Any) -> bool:
    """Whether a command changes an agent's state (and so is journaled)."""
    return isinstance(command, AGENT_WRITES)


# -- settings ------------------------------------------------------------------------
def summarizer_from_config(config: Config) -> Summarizer:
    """The summarizer ``config.conversations.summarizer`` names."""
    if config.conversations.summarizer == "llm":
        from mnemex.conversations.summaries import LLMSummarizer

        section = config.conversations
        return LLMSummarizer(base_url=section.llm_base_url, model=section.llm_model,
                             api_key_env=section.llm_api_key_env, timeout=section.llm_timeout)
    return ExtractiveSummarizer()


def _policy_from_config(config: Config) -> Policy:
    if config.conversations.policy == "token_budget":
        return TokenBudget(config.conversations.max_context_tokens, config.conversations.trigger_ratio,
                           config.conversations.keep_recent_turns)
    if config.conversations.policy in ("stateless", "none"):
        return Stateless()
    if config.conversations.policy == "keep_all":
        return KeepAll()
    return MaxMessages(config.conversations.max_messages)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """What every agent of a runtime shares: defaults and the pluggable parts.

    ``summary_retry`` is the back-off in seconds after a failed summary (doubling
    per failure, at most 300 s); ``summary_stale`` is how long a summary may stay
    pending before it is asked for again.
    """

    default_policy: Policy = field(default_factory=MaxMessages)
    ttl: float | None = None
    retain: Literal["all", "pruned"] = "all"
    max_message_bytes: int = 1_048_576
    max_session_id_bytes: int = 1024
    summarizer: Summarizer = field(default_factory=ExtractiveSummarizer)
    counter: TokenCounter = field(default_factory=EstimatedTokens)
    summary_retry: float = 5.0
    summary_stale: float = 300.0

    @classmethod
    def from_config(cls, config: Config, *, summarizer: Summarizer | None = None,
                    token_counter: TokenCounter | None = None) -> AgentSettings:
        return cls(
            default_policy=_policy_from_config(config),
            ttl=config.conversations.session_ttl,
            retain=config.conversations.retain,
            max_message_bytes=config.conversations.max_message_bytes,
            max_session_id_bytes=config.kernel.max_key_bytes,
            summarizer=summarizer if summarizer is not None else summarizer_from_config(config),
            counter=token_counter if token_counter is not None else EstimatedTokens(),
            summary_retry=config.conversations.summary_retry,
        )


AGENT_BYTES: Final = 2_500
"""What a live agent costs besides its sessions, its cell in the kernel included
(tracemalloc: 5.2 KB an agent over 300 agents of one message)."""
SESSION_BYTES: Final = 2_000
"""What each session costs besides its messages: the conversation and its indexes."""
ENTRY_BYTES: Final = 700
"""What each stored message costs besides its JSON: the entry, its journal line
kept for snapshots, its places in the token sums and indexes."""


# -- the behaviour ----------------------------------------------------------------------
class AgentMemory:
    """The short-term memory of one agent. Synchronous and deterministic; see module doc."""

    def __init__(self, name: str, settings: AgentSettings) -> None:
        self.name = name
        self.settings = settings
        self.policy: Policy | None = None
        self.session_policies: dict[str, Policy] = {}
        self.ttl: float | None = settings.ttl
        self.ttl_set = False
        self.sessions: dict[str, Conversation] = {}
        self.activity: OrderedDict[str, None] = OrderedDict()
        self.sequence = 0
        self.summaries_applied = 0
        self.summaries_failed = 0
        self.clock = 0.0  # the latest time any command carried (transient)
        self._turn_index: TurnIndex | None = None
        self._tokenizer: Tokenizer | None = None
        # sessions whose new lines a snapshot's writer encoded, to adopt (see snapshot)
        self._encoded: deque[CapturedSession] = deque()

    def live_bytes(self) -> int:
        """An estimate of the memory this agent holds while live, for the runtime's
        ``kernel.max_live_bytes`` budget: constants per agent, session and message,
        and the messages' JSON twice (the entry and its journal line), and what the turn
        index's BM25 keeps between searches."""
        kept = self._turn_index.bm25.kept_bytes if self._turn_index is not None else 0
        return AGENT_BYTES + kept + sum(SESSION_BYTES + len(c.entries) * ENTRY_BYTES + 2 * c.size
                                        for c in self.sessions.values())

    def __repr__(self) -> str:
        return f"AgentMemory({self.name!r}, sessions={len(self.sessions)}, sequence={self.sequence})"

    # -- helpers ---------------------------------------------------------------------
    def policy_for(self, session_id: str) -> Policy:
        """The policy in force for a session: its own, else the agent's, else the default."""
        own = self.session_policies.get(session_id)
        if own is not None:
            return own
        return self.policy if self.policy is not None else self.settings.default_policy

    def _is_expired(self, conv: Conversation, now: float) -> bool:
        return self.ttl is not None and conv.updated_at + self.ttl <= now

    def _live(self, session_id: str | None, now: float) -> Conversation | None:
        """The session if it exists and has not expired at ``now`` (reads hide expired
        sessions; journaled commands remove them)."""
        if session_id is None:
            return None
        conv = self.sessions.get(session_id)
        if conv is None or self._is_expired(conv, now):
            return None
        return conv

    def _live_sessions(self, now: float) -> Iterator[Conversation]:
        if self.ttl is None:
            yield from self.sessions.values()
            return
        for conv in self.sessions.values():
            if not self._is_expired(conv, now):
                yield conv

    def _tick(self, now: float) -> None:
        self.clock = max(self.clock, now)

    def _remove(self, session_id: str, reason: Literal["deleted", "expired"]) -> tuple[int, Emit]:
        conv = self.sessions.pop(session_id)
        self.activity.pop(session_id, None)
        self.session_policies.pop(session_id, None)
        if conv.turns:
            self._turn_index = None
        return len(conv), Emit(session_topic(session_id), SessionEnded(reason), last=True)

    def _sweep(self, now: float) -> tuple[list[str], int, list[Effect]]:
        """Remove the sessions whose TTL passed at ``now`` (oldest activity first)."""
        if self.ttl is None or not self.activity:
            return [], 0, []
        removed: list[str] = []
        effects: list[Effect] = []
        count = 0
        while self.activity:
            oldest = next(iter(self.activity))
            if not self._is_expired(self.sessions[oldest], now):
                break
            n, emit = self._remove(oldest, "expired")
            removed.append(oldest)
            effects.append(emit)
            count += n
        if removed:
            log.info("agent %r: %d session(s) expired (ttl %g s)", self.name, len(removed), self.ttl)
        return removed, count, effects

    # -- into long-term memory --------------------------------------------------------
    def _archive(self, command: ArchiveSession) -> Step:
        """Forward the session's user and assistant messages with text to the scope
        actor: it embeds and stores them and answers the caller."""
        session_id = check_id(command.session_id, "session_id", self.settings.max_session_id_bytes)
        assert session_id is not None
        for value, what in ((command.app_name, "app_name"), (command.user_id, "user_id"),
                            (command.scope_kind, "scope_kind")):
            if not isinstance(value, str) or not value:
                raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
        conv = self._live(session_id, check_seconds(command.now, "now"))
        events: list[Event] = []
        for entry in conv.entries if conv is not None else ():
            if entry.role not in ("user", "assistant"):
                continue
            message = msgspec.json.decode(entry.message)
            text = event_text(message.get("content"))
            if text is None:
                continue
            name = message.get("name")
            events.append(Event(author=name if isinstance(name, str) and name else entry.role, content=text,
                                timestamp=entry.timestamp, id=f"{self.name}/{session_id}/{entry.sequence}",
                                role=entry.role))
        if not events:
            raise NotFound(f"agent {self.name!r} has no session {session_id!r} with text to archive")
        session = Session(id=session_id, app_name=command.app_name, user_id=command.user_id, events=events)
        store = StoreSession(session=session, first_id=command.first_id, now=command.now)
        return Step(None, (Forward(command.scope_kind, (command.app_name, command.user_id), store),))

    # -- dispatch --------------------------------------------------------------------
    def handle(self, command: Any) -> Any:
        if self._encoded:  # what the last snapshot's writer encoded: kept, a little a turn
            adopt_encoded(self._encoded, self.sessions, _ADOPT_BUDGET)
        match command:
            case AppendMessages() | AppendItems():
                return self._append(command)
            case GetContext():
                return self._context(command)
            case GetHistory(session_id=session_id, now=now, last=last):
                if last is not None:
                    check_int(last, "last", 0)
                conv = self._live(session_id, now)
                if conv is None or last == 0:
                    return []
                return conv.entries[:] if last is None else conv.entries[-last:]
            case PopMessage():
                return self._pop(command)
            case CreateSession():
                return self._create(command)
            case UpdateSessionState():
                return self._update_state(command)
            case GetSession():
                return self._read_session(command)
            case ListSessionHeaders(prefix=prefix, now=now):
                if prefix is not None and not isinstance(prefix, str):
                    raise InvalidInput(f"prefix must be a string or None, got {prefix!r}", field="prefix")
                return [self._header(conv) for conv in self._live_sessions(now)
                        if prefix is None or conv.session_id.startswith(prefix)]
            case ListMessages():
                return self._messages(command)
            case CompleteSession(session_id=session_id, timestamp=timestamp):
                return self._complete(session_id, timestamp)
            case DeleteSession(session_id=session_id, timestamp=timestamp):
                return self._delete(session_id, timestamp)
            case DeleteAllSessions(timestamp=timestamp, restart_sequence=restart):
                return self._delete_all(timestamp, restart)
            case ListSessions(now=now):
                return [self._info(conv) for conv in self._live_sessions(now)]
            case GetStats(now=now):
                return self._stats(now)
            case ListTurns(session_id=session_id, now=now):
                conv = self._live(session_id, now)
                return [] if conv is None else conv.turns[:]
            case SearchTurns():
                return self._search_turns(command)
            case RelayChunk(session_id=session_id, chunk=chunk):
                check_id(session_id, "session_id", self.settings.max_session_id_bytes)
                return Step(None, (Emit(session_topic(session_id), ChunkRelayed(chunk)),))
            case WatchSession(session_id=session_id, from_beginning=from_beginning, now=now):
                conv = self._live(session_id, now)
                if conv is None:
                    return WatchStart(exists=False, completed=False)
                return WatchStart(exists=True, completed=conv.completed,
                                  entries=conv.entries[:] if from_beginning else [])
            case SetPolicy(policy=policy, session_id=session_id):
                return self._set_policy(policy, session_id)
            case SetTtl(seconds=seconds):
                return self._set_ttl(seconds)
            case ExpireSessions(now=now):
                now = check_seconds(now, "now")
                self._tick(now)
                removed, count, effects = self._sweep(now)
                return Step(SessionsDeleted(session_ids=removed, messages_removed=count), tuple(effects))
            case FindExpired(now=now):
                if self.ttl is None:
                    return []
                return [sid for sid in self.activity if self._is_expired(self.sessions[sid], now)]
            case ArchiveSession():
                return self._archive(command)
            case ApplySummary():
                return self._apply_summary(command)
            case SummaryFailed():
                return self._summary_failed(command)
            case _:
                raise TypeError(f"agent {self.name!r} cannot handle {command!r}")

    # -- writes ----------------------------------------------------------------------
    def _append(self, cmd: AppendMessages | AppendItems) -> Any:
        settings = self.settings
        session_id = check_id(cmd.session_id, "session_id", settings.max_session_id_bytes)
        assert session_id is not None
        query_id = check_id(cmd.query_id, "query_id", _MAX_ID_CHARS, optional=True)
        timestamp = check_seconds(cmd.timestamp, "timestamp")
        as_items = type(cmd) is AppendItems
        raws = cmd.items if isinstance(cmd, AppendItems) else cmd.messages
        if type(raws) is not list and not isinstance(raws, list | tuple):
            what = "items must be a list of Responses items" if as_items else \
                "messages must be a list of chat messages"
            raise InvalidInput(what, field="items" if as_items else "messages")
        if cmd.turn is not None:
            check_turn(cmd.turn)
        state_set, _ = check_change(cmd.state, (), settings.max_message_bytes)
        conv = self.sessions.get(session_id)
        if conv is not None and self._is_expired(conv, timestamp):
            conv = None  # removed by the sweep below; the session starts afresh
        if conv is None and cmd.existing:
            raise NotFound(f"agent {self.name!r} has no session {session_id!r}")
        checked: list[CheckedMessage] = []
        counter, limit = settings.counter, settings.max_message_bytes
        if as_items:
            last = conv.entries[-1] if conv is not None and conv.entries else None
            previous = (last.item, last.role) if last is not None else ("", "")
            for index, raw in enumerate(raws):
                item = check_item(raw, index, counter, limit, previous=previous)
                previous = (item.item, item.role)
                checked.append(item)
        else:
            known = conv.calls if conv is not None else set()
            batch_calls: set[str] = set()
            for index, raw in enumerate(raws):
                item = check_message(raw, index, counter, limit, known_calls=known, batch_calls=batch_calls)
                batch_calls.update(item.call_ids)
                checked.append(item)
        if not checked and not (state_set and conv is not None):
            return Appended(session_id=session_id, first_sequence=self.sequence + 1, count=0,
                            message_count=len(conv) if conv is not None else 0)
        # valid: from here on the state changes
        self._tick(timestamp)
        effects: list[Effect] = self._sweep(timestamp)[2] if self.ttl is not None else []
        conv = self.sessions.get(session_id)
        if conv is not None and self._is_expired(conv, timestamp):  # behind a newer one in the sweep order
            effects.append(self._remove(session_id, "expired")[1])
            conv = None
        if conv is None:
            conv = self.sessions[session_id] = Conversation(session_id, self.sequence + 1, timestamp)
        conv.completed = False
        conv.updated_at = max(conv.updated_at, timestamp)
        self.activity[session_id] = None
        self.activity.move_to_end(session_id)
        apply_change(conv.state, state_set, ())
        first = self.sequence + 1
        if not checked:  # a change of state alone
            return Step(Appended(session_id=session_id, first_sequence=first, count=0,
                                 message_count=len(conv)), tuple(effects))
        conv.last_append = len(conv)
        new: list[MessageEntry] = []
        for offset, item in enumerate(checked):
            entry = MessageEntry(first + offset, timestamp, session_id, item.raw, query_id, item.role,
                                 item.tokens, item.call_ids, item.tool_call_id, item.item, item.joined)
            conv.add(entry)
            new.append(entry)
        self.sequence = first + len(checked) - 1
        conv.cache = None
        turn_record = None
        if cmd.turn is not None:
            turn_record = self._record_turn(conv, cmd.turn, checked, new, query_id=query_id,
                                            timestamp=timestamp)
        if settings.retain == "pruned":
            self._drop_pruned(conv)
        effects.append(Emit(session_topic(session_id), EntriesAppended(new)))
        reply = Appended(session_id=session_id, first_sequence=first, count=len(new),
                         message_count=len(conv), turn=turn_record)
        return Step(reply, tuple(effects))

    def _create(self, cmd: CreateSession) -> Any:
        session_id = check_id(cmd.session_id, "session_id", self.settings.max_session_id_bytes)
        assert session_id is not None
        timestamp = check_seconds(cmd.timestamp, "timestamp")
        state, _ = check_change(cmd.state, (), self.settings.max_message_bytes)
        conv = self._live(session_id, timestamp)
        if conv is not None:
            return Step(SessionCreated(created=False, header=self._header(conv)), unchanged=True)
        self._tick(timestamp)
        effects: list[Effect] = self._sweep(timestamp)[2] if self.ttl is not None else []
        if session_id in self.sessions:  # expired, behind a newer one in the sweep order
            effects.append(self._remove(session_id, "expired")[1])
        conv = self.sessions[session_id] = Conversation(session_id, self.sequence + 1, timestamp)
        conv.state = dict(state)
        self.activity[session_id] = None
        return Step(SessionCreated(created=True, header=self._header(conv)), tuple(effects))

    def _update_state(self, cmd: UpdateSessionState) -> Any:
        session_id = check_id(cmd.session_id, "session_id", self.settings.max_session_id_bytes)
        assert session_id is not None
        timestamp = check_seconds(cmd.timestamp, "timestamp")
        state, remove = check_change(cmd.set, cmd.remove, self.settings.max_message_bytes)
        conv = self._live(session_id, timestamp)
        if conv is None:
            raise NotFound(f"agent {self.name!r} has no session {session_id!r}")
        if not apply_change(conv.state, state, remove):
            return Step(self._header(conv), unchanged=True)
        self._tick(timestamp)
        conv.updated_at = max(conv.updated_at, timestamp)
        self.activity.move_to_end(session_id)
        return self._header(conv)

    def _read_session(self, cmd: GetSession) -> SessionRead | None:
        last, after = cmd.last, cmd.after
        if last is not None:
            check_int(last, "last", 0)
        if after is not None:
            after = check_seconds(after, "after")
        conv = self._live(cmd.session_id, check_seconds(cmd.now, "now"))
        if conv is None:
            return None
        entries = conv.entries
        start = 0 if last is None else max(0, len(entries) - last)
        if after is not None:
            index = len(entries) - 1
            while index >= start and entries[index].timestamp >= after:
                index -= 1
            start = index + 1
        return SessionRead(header=self._header(conv), entries=entries[start:] if start < len(entries) else [])

    def _header(self, conv: Conversation) -> SessionHeader:
        return SessionHeader(session_id=conv.session_id, created_at=conv.created_at,
                             updated_at=conv.updated_at, message_count=len(conv), state=dict(conv.state),
                             last_entry_at=conv.entries[-1].timestamp if conv.entries else None)

    def _record_turn(self, conv: Conversation, turn: Turn, checked: list[CheckedMessage],
                     new: list[MessageEntry], *, query_id: str | None, timestamp: float) -> TurnRecord:
        record = turn_record(conv.session_id, turn, checked, new, iteration=len(conv.turns) + 1,
                             message_count=len(conv), query_id=query_id, timestamp=timestamp)
        conv.turns.append(record)
        if self._turn_index is not None:
            self._turn_index.add(record, len(conv.turns) - 1)
        return record

    def _drop_pruned(self, conv: Conversation) -> None:
        """retain="pruned": forget the stored messages no context view can show again."""
        policy = self.policy_for(conv.session_id)
        if isinstance(policy, TokenBudget):
            keep_from = conv.summary_index()
        elif isinstance(policy, MaxMessages):
            keep_from = max_messages_start(conv, policy.n)
            while keep_from < len(conv) and (conv.entries[keep_from].role in TOOL_ROLES
                                             or conv.entries[keep_from].joined):
                keep_from += 1
        else:
            keep_from = conv.last_append
        droppable = keep_from - len(conv.systems_before(0, keep_from))
        if droppable <= 0 or (droppable < max(64, len(conv) // 4) and not isinstance(policy, TokenBudget)):
            return  # amortized: rebuild only when enough can go
        last_append_seq = conv.entries[conv.last_append].sequence if conv.last_append < len(conv) else None
        kept = [e for i, e in enumerate(conv.entries) if i >= keep_from or e.role in SYSTEM_ROLES]
        conv.reindex(kept)
        conv.last_append = len(conv) if last_append_seq is None else conv.index_of(last_append_seq)

    def _pop(self, cmd: PopMessage) -> Any:
        """Take the newest entry off a session. A summary standing for it is dropped
        (asked for again by the next read); a summary being made is ignored when it
        arrives (``pops``); a turn record loses it, and goes when it had nothing else."""
        session_id = check_id(cmd.session_id, "session_id", self.settings.max_session_id_bytes)
        assert session_id is not None
        timestamp = check_seconds(cmd.timestamp, "timestamp")
        conv = self.sessions.get(session_id)
        if conv is None or not conv.entries or self._is_expired(conv, timestamp):
            return Step(Popped(session_id=session_id, entry=None, message_count=0), unchanged=True)
        self._tick(timestamp)
        entry = conv.pop()
        conv.pending_since = None
        if conv.summary is not None and entry.sequence < conv.summary.through:
            conv.set_summary(None, 0)
        turns = conv.turns
        if turns and turns[-1].last_sequence >= entry.sequence:
            if turns[-1].first_sequence >= entry.sequence:
                turns.pop()
            else:
                turns[-1] = msgspec.structs.replace(turns[-1], last_sequence=conv.entries[-1].sequence,
                                                    message_count=len(conv))
            self._turn_index = None
        return Popped(session_id=session_id, entry=entry, message_count=len(conv))

    def _complete(self, session_id: Any, timestamp: Any) -> Any:
        checked = check_id(session_id, "session_id", self.settings.max_session_id_bytes)
        assert checked is not None
        timestamp = check_seconds(timestamp, "timestamp")
        self._tick(timestamp)
        _, _, effects = self._sweep(timestamp)
        conv = self.sessions.get(checked)
        if conv is not None:
            conv.completed = True
        effects.append(Emit(session_topic(checked), SessionEnded("completed"), last=True))
        reply = SessionCompleted(session_id=checked, existed=conv is not None,
                                 message_count=len(conv) if conv is not None else 0)
        return Step(reply, tuple(effects))

    def _delete(self, session_id: Any, timestamp: Any) -> Any:
        checked = check_id(session_id, "session_id", self.settings.max_session_id_bytes)
        assert checked is not None
        timestamp = check_seconds(timestamp, "timestamp")
        self._tick(timestamp)
        _, _, effects = self._sweep(timestamp)
        removed: list[str] = []
        count = 0
        if checked in self.sessions:
            count, emit = self._remove(checked, "deleted")
            removed.append(checked)
            effects.append(emit)
        had_policy = self.session_policies.pop(checked, None) is not None
        return Step(SessionsDeleted(session_ids=removed, messages_removed=count), tuple(effects),
                    unchanged=not effects and not had_policy)

    def _delete_all(self, timestamp: Any, restart_sequence: bool) -> Any:
        timestamp = check_seconds(timestamp, "timestamp")
        self._tick(timestamp)
        removed = list(self.sessions)
        effects: list[Effect] = []
        count = 0
        for session_id in removed:
            n, emit = self._remove(session_id, "deleted")
            count += n
            effects.append(emit)
        self.session_policies.clear()
        if restart_sequence:
            self.sequence = 0
        return Step(SessionsDeleted(session_ids=removed, messages_removed=count), tuple(effects))

    def _set_policy(self, policy: Any, session_id: Any) -> PolicySet:
        if policy is not None and not isinstance(policy, MaxMessages | TokenBudget | KeepAll | Stateless):
            raise InvalidInput(f"policy must be MaxMessages, TokenBudget, KeepAll, Stateless or None, "
                               f"got {policy!r}",
                               field="policy")
        if session_id is None:
            self.policy = policy
        else:
            checked = check_id(session_id, "session_id", self.settings.max_session_id_bytes)
            assert checked is not None
            if policy is None:
                self.session_policies.pop(checked, None)
            else:
                self.session_policies[checked] = policy
            conv = self.sessions.get(checked)
            if conv is not None:
                conv.cache = None
        return PolicySet(policy=policy, session_id=session_id)

    def _set_ttl(self, seconds: Any) -> TtlSet:
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)
                                    or not math.isfinite(seconds) or seconds <= 0):
            raise InvalidInput(f"a session TTL must be a number of seconds > 0 or None, got {seconds!r}",
                               field="seconds")
        self.ttl = None if seconds is None else float(seconds)
        self.ttl_set = True
        return TtlSet(seconds=self.ttl)

    # -- summaries --------------------------------------------------------------------
    def _apply_summary(self, cmd: ApplySummary) -> SummaryApplied:
        if not isinstance(cmd.text, str):
            raise InvalidInput("summary text must be a string", field="text")
        conv = self.sessions.get(cmd.session_id)
        current = conv.summary.version if conv is not None and conv.summary is not None else 0
        through_now = conv.summary.through if conv is not None and conv.summary is not None else 0
        if (conv is None or conv.generation != cmd.generation or conv.pops != cmd.pops
                or current != cmd.base_version or cmd.through <= through_now or not conv.entries
                or cmd.through > conv.entries[-1].sequence):
            return SummaryApplied(session_id=cmd.session_id, applied=False)
        summary = Summary(version=current + 1, through=cmd.through, text=cmd.text, covered=cmd.covered)
        conv.set_summary(summary, self._pair_tokens(summary))
        conv.pending_since = None
        conv.failures = 0
        self.summaries_applied += 1
        log.info("agent %r session %r: summary %d applied (%d messages, %d tokens)", self.name,
                 cmd.session_id, summary.version, summary.covered, conv.pair_tokens)
        if self.settings.retain == "pruned":
            self._drop_pruned(conv)
        return SummaryApplied(session_id=cmd.session_id, applied=True, version=summary.version)

    def _pair_tokens(self, summary: Summary) -> int:
        counter = self.settings.counter
        framed = f"{SUMMARY_OPEN}\n{summary.text}\n{SUMMARY_CLOSE}"
        call = counter.count("memory_compress") + counter.count("{}")
        return 2 * MESSAGE_OVERHEAD + call + counter.count(framed)

    def _summary_failed(self, cmd: SummaryFailed) -> None:
        conv = self.sessions.get(cmd.session_id)
        self.summaries_failed += 1
        if conv is None or conv.generation != cmd.generation or conv.pops != cmd.pops:
            return
        conv.pending_since = None
        conv.failures += 1
        delay = min(300.0, self.settings.summary_retry * 2 ** (conv.failures - 1))
        conv.retry_after = self.clock + delay
        log.warning("agent %r session %r: summary failed (%s); the context is cut to the budget; "
                    "retrying in %g s", self.name, cmd.session_id, cmd.error, delay)

    def _summary_job(self, conv: Conversation, policy: TokenBudget, cut: int) -> Job:
        start = conv.summary_index()
        raws = [(e.message, bool(e.item)) for e in conv.entries[start:cut] if e.role not in SYSTEM_ROLES]
        previous = conv.summary.text if conv.summary is not None else None
        covered = (conv.summary.covered if conv.summary is not None else 0) + len(raws)
        base = conv.summary.version if conv.summary is not None else 0
        through = conv.entries[cut].sequence
        session_id, generation, pops = conv.session_id, conv.generation, conv.pops
        summarizer, counter = self.settings.summarizer, self.settings.counter
        target = summary_target(policy)

        def work() -> str:
            messages: list[dict[str, Any]] = []
            for raw, is_item in raws:
                message = msgspec.json.decode(raw)
                if is_item:  # a summarizer reads chat messages
                    message = item_as_chat(message)
                if message is not None:
                    messages.append(message)
            text = summarizer.summarize(SummaryRequest(previous, messages, target, counter))
            if not isinstance(text, str):
                raise TypeError(f"{summarizer!r} returned {type(text).__name__}, not str")
            return truncate_to_tokens(text.strip(), target, counter)

        def deliver(result: JobResult) -> AgentCommand:
            if result.error is not None:
                return SummaryFailed(session_id=session_id, generation=generation, base_version=base,
                                     error=f"{type(result.error).__name__}: {result.error}", pops=pops)
            return ApplySummary(session_id=session_id, generation=generation, base_version=base,
                                through=through, text=str(result.value), covered=covered, pops=pops)

        return Job(work, deliver, name=f"agent.summarize {self.name}/{session_id}")

    # -- reads ------------------------------------------------------------------------
    def _context(self, cmd: GetContext) -> Any:
        now = check_seconds(cmd.now, "now")
        max_tokens = cmd.max_tokens
        if max_tokens is not None:
            check_int(max_tokens, "max_tokens", 1)
        self._tick(now)
        conv = self._live(cmd.session_id, now)
        policy = self.policy_for(cmd.session_id) if isinstance(cmd.session_id, str) else \
            self.settings.default_policy
        if conv is None or not conv.entries:
            return ContextWindow(messages=[], tokens=0, stored=0, kept=0, policy=policy,
                                 budget=max_tokens if max_tokens is not None else
                                 (policy.max_context_tokens if isinstance(policy, TokenBudget) else None))
        effects: tuple[Effect, ...] = ()
        if conv.pending_since is not None and now - conv.pending_since > self.settings.summary_stale:
            conv.pending_since = None  # its result was lost (a crash, a restart): ask again
        if isinstance(policy, TokenBudget) and conv.pending_since is None and now >= conv.retry_after:
            cut = compression_cut(conv, policy)
            if cut is not None:
                conv.pending_since = now
                effects = (self._summary_job(conv, policy, cut),)
        pending = conv.pending_since is not None
        key = (policy, max_tokens, len(conv), conv.last_append,
               conv.summary.version if conv.summary is not None else 0, pending)
        cached = conv.cache
        if cached is not None and cached[0] == key:
            window = cached[1]
            assert isinstance(window, ContextWindow)
        else:
            window = context_window(conv, policy, max_tokens, pending)
            conv.cache = (key, window)
            self._log_pruning(conv, window)
        return Step(window, effects) if effects else window

    def _log_pruning(self, conv: Conversation, window: ContextWindow) -> None:
        dropped = window.stored - window.kept - window.summarized
        if dropped <= 0:
            return
        level = logging.DEBUG if conv.prune_logged else logging.INFO
        conv.prune_logged = True
        if log.isEnabledFor(level):
            log.log(level, "agent %r session %r: context keeps %d of %d messages under %r%s", self.name,
                    conv.session_id, window.kept, window.stored, window.policy,
                    " (over budget)" if window.over_budget else "")

    def _messages(self, cmd: ListMessages) -> EntryPage:
        limit = cmd.limit
        if limit is not None:
            check_int(limit, "limit", 0)
        offset = check_int(cmd.offset, "offset", 0)
        now = cmd.now
        if cmd.session_id is not None:
            conv = self._live(cmd.session_id, now)
            convs = [] if conv is None else [conv]
        else:
            convs = list(self._live_sessions(now))
        query_id = cmd.query_id
        sources: list[Sequence[MessageEntry]] = []
        total = 0
        for conv in convs:
            if query_id is None:
                sources.append(conv.entries)
                total += len(conv.entries)
            else:
                positions = conv.query_positions(query_id)
                if positions:
                    sources.append(_Picked(conv.entries, positions))
                    total += len(positions)
        stop = None if limit is None else offset + limit
        if len(sources) == 1:
            page = list(sources[0][offset:stop])
        else:
            merged: Iterable[MessageEntry] = heapq.merge(*sources, key=_sequence_of)
            page = list(itertools.islice(merged, offset, stop))
        return EntryPage(entries=page, total=total, limit=limit, offset=offset)

    def _info(self, conv: Conversation) -> SessionInfo:
        return SessionInfo(
            session_id=conv.session_id,
            message_count=len(conv),
            query_count=conv.query_count,
            tokens=conv.tokens,
            created_at=conv.created_at,
            updated_at=conv.updated_at,
            completed=conv.completed,
            turns=len(conv.turns),
            summary_version=conv.summary.version if conv.summary is not None else 0,
            summarized=conv.summary.covered if conv.summary is not None else 0,
            policy=self.session_policies.get(conv.session_id),
        )

    def _stats(self, now: float) -> AgentStats:
        live = list(self._live_sessions(now))
        return AgentStats(
            agent=self.name,
            total_sessions=len(live),
            total_messages=sum(len(conv) for conv in live),
            completed_sessions=sum(1 for conv in live if conv.completed),
            turns=sum(len(conv.turns) for conv in live),
            tokens=sum(conv.tokens for conv in live),
            last_sequence=self.sequence,
            policy=self.policy if self.policy is not None else self.settings.default_policy,
            ttl=self.ttl,
            summaries_applied=self.summaries_applied,
            summaries_pending=sum(1 for conv in live if conv.pending_since is not None),
            summaries_failed=self.summaries_failed,
            sessions={conv.session_id: SessionCounts(len(conv), conv.query_count) for conv in live},
        )

    def _search_turns(self, cmd: SearchTurns) -> list[TurnHit]:
        if not isinstance(cmd.query, str):
            raise InvalidInput("query must be a string", field="query")
        top_k = check_int(cmd.top_k, "top_k", 1)
        if self._turn_index is None:
            if self._tokenizer is None:
                self._tokenizer = Tokenizer()
            index = TurnIndex(self._tokenizer)
            for conv in self.sessions.values():
                for position, turn in enumerate(conv.turns):
                    index.add(turn, position)
            self._turn_index = index
        now, wanted = cmd.now, cmd.session_id

        def accept(session_id: str) -> bool:
            if wanted is not None and session_id != wanted:
                return False
            return self._live(session_id, now) is not None

        return self._turn_index.search(cmd.query, top_k, accept)

    # -- snapshots -------------------------------------------------------------------------
    def snapshot(self) -> SnapshotData:
        """The state as record lines (see ``conversations.snapshot``) and counters."""
        ranks = {session_id: rank for rank, session_id in enumerate(self.activity)}
        records = encode_sessions(self.sessions.values(), ranks, self.sequence + 1, self._encoded)
        extra = {
            "format": SNAPSHOT_FORMAT,
            "sequence": self.sequence,
            "policy": msgspec.to_builtins(self.policy),
            "session_policies": {k: msgspec.to_builtins(v) for k, v in self.session_policies.items()},
            "ttl": self.ttl,
            "ttl_set": self.ttl_set,
            "counter": self.settings.counter.name,
            "summaries_applied": self.summaries_applied,
            "sessions": len(self.sessions),
        }
        return SnapshotData(records=records, extra=extra)

    @classmethod
    def restore(cls, name: str, image: Image, settings: AgentSettings) -> AgentMemory:
        memory = cls(name, settings)
        extra = image.extra
        check_format(name, extra)
        memory.sequence = int(extra.get("sequence", 0))
        memory.policy = decode_policy(extra.get("policy"))
        for session_id, value in dict(extra.get("session_policies") or {}).items():
            decoded = decode_policy(value)
            if decoded is not None:
                memory.session_policies[session_id] = decoded
        if extra.get("ttl_set"):
            memory.ttl, memory.ttl_set = extra.get("ttl"), True
        memory.summaries_applied = int(extra.get("summaries_applied", 0))
        recount = settings.counter if extra.get("counter") != settings.counter.name else None
        restored = decode_sessions(name, image.records, recount)
        for item in restored:
            memory.sessions[item.conv.session_id] = item.conv
            if item.summary is not None:
                item.conv.set_summary(item.summary, memory._pair_tokens(item.summary))
        for item in sorted(restored, key=lambda item: (item.activity, item.conv.session_id)):
            memory.activity[item.conv.session_id] = None
        for item in restored:
            item.conv.last_append = item.conv.index_of(item.last_append)
        return memory


class _Picked(Sequence[MessageEntry]):
    """Some entries of a list, by position, as a sequence (for paging one query id)."""

    __slots__ = ("entries", "positions")

    def __init__(self, entries: list[MessageEntry], positions: Sequence[int]) -> None:
        self.entries = entries
        self.positions = positions

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self.entries[p] for p in self.positions[index]]
        return self.entries[self.positions[index]]

    def __iter__(self) -> Iterator[MessageEntry]:
        entries = self.entries
        return (entries[p] for p in self.positions)


def _sequence_of(entry: MessageEntry) -> int:
    return entry.sequence


