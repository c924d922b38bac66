"""Short-term memory on the runtime: the async AgentRef that ``rt.agent(name)``
hands out, live session streams, and the two helpers an agent loop calls around
each model call.

This side may read the wall clock: appends are stamped here (``time.time()``),
and the timestamp travels inside the command, so the actor stays deterministic.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import msgspec
import trio

from mnemex._host import Host
from mnemex.config import DEFAULT, UseDefault
from mnemex.conversations.protocol import (
    AgentStats,
    Appended,
    AppendItems,
    AppendMessages,
    ChunkRelayed,
    CompleteSession,
    ContextView,
    ContextWindow,
    CreateSession,
    DeleteAllSessions,
    DeleteSession,
    EntriesAppended,
    EntryPage,
    ExpireSessions,
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
    MessagePage,
    Policy,
    PolicySet,
    PopMessage,
    Popped,
    RelayChunk,
    SearchTurns,
    SessionCompleted,
    SessionCreated,
    SessionEnded,
    SessionHeader,
    SessionInfo,
    SessionRead,
    SessionsDeleted,
    SetPolicy,
    SetTtl,
    Stateless,
    StoredMessage,
    StreamEvent,
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
from mnemex.conversations.validation import messages_to_raw
from mnemex.errors import Busy, InvalidInput, NotFound, Timeout
from mnemex.kernel import ActorRef, Subscription
from mnemex.state.values import encode_values

__all__ = ["AgentRef", "AgentServices", "SessionStream"]

log = logging.getLogger("mnemex.agent")



class AgentServices:
    """What a runtime keeps for the agents of one agent kind: the host that carries
    their commands and what each agent was last given by a ref (its policy, its
    TTL), so that ``rt.agent("bot", policy=...)`` called per request journals the
    policy once. Made by the runtime; refs only use it."""

    __slots__ = ("after_append", "applied", "host", "kind")

    def __init__(self, host: Host, kind: str) -> None:
        self.host = host
        self.kind = kind
        self.applied: dict[tuple[str, str], Any] = {}
        # told of every append through a ref (agent, reply, tokens appended): automatic extraction;
        # what it returns, when not None, is awaited before the append returns
        self.after_append: Callable[[str, Appended, int], Awaitable[None] | None] | None = None


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
            math.isfinite(timeout) and timeout > 0):
        raise InvalidInput(f"timeout must be a number of seconds > 0, got {timeout!r}", field="timeout")
    return float(timeout)


class AgentRef:
    """One agent's short-term memory, as the runtime serves it. Cheap to make; any
    number of refs to one name reach the same actor.

    Messages are dicts in the OpenAI chat shape or ``mnemex.ChatMessage``
    (``append``), or OpenAI Responses items (``append_items``); they are stored
    verbatim (extra fields kept) and returned as dicts.
    """

    __slots__ = ("_configured", "_policy", "_ref", "_services", "_ttl", "name")

    def __init__(self, services: AgentServices, name: str, *, policy: Policy | UseDefault | None = DEFAULT,
                 ttl: float | UseDefault | None = DEFAULT) -> None:
        if policy is not DEFAULT and policy is not None and not isinstance(
                policy, MaxMessages | TokenBudget | KeepAll | Stateless):
            raise InvalidInput(f"policy must be MaxMessages, TokenBudget, KeepAll, Stateless, None (the "
                               f"configured default) or DEFAULT (leave it), got {policy!r}", field="policy")
        if ttl is not DEFAULT and ttl is not None:
            _check_timeout(ttl)
        self._services = services
        self._ref: ActorRef = services.host.ref(services.kind, name)
        self.name = name
        self._policy = policy
        self._ttl = ttl
        self._configured = policy is DEFAULT and ttl is DEFAULT

    def __repr__(self) -> str:
        return f"AgentRef({self.name!r})"

    @property
    def ref(self) -> ActorRef:
        """The underlying actor ref (raw commands of ``mnemex.conversations.protocol``)."""
        return self._ref

    async def _configure(self) -> None:
        applied = self._services.applied
        policy, ttl = self._policy, self._ttl
        if policy is not DEFAULT and applied.get((self.name, "policy"), DEFAULT) != policy:
            await self._ref.ask(SetPolicy(policy=policy))
            applied[(self.name, "policy")] = policy
        if ttl is not DEFAULT and applied.get((self.name, "ttl"), DEFAULT) != ttl:
            await self._ref.ask(SetTtl(seconds=ttl))
            applied[(self.name, "ttl")] = ttl
        self._configured = True

    async def _ask(self, command: Any, timeout: float | UseDefault | None = DEFAULT) -> Any:
        if not self._configured:
            await self._configure()
        return await self._ref.ask(command, timeout=timeout)

    @property
    def configured(self) -> bool:
        """True when the next command needs no policy or ttl sent first (always so for a
        ref of the default policy and ttl, and once sent): ``ref`` may then be asked
        directly with what ``append_command`` builds."""
        return self._configured

    # -- writing --------------------------------------------------------------------
    async def append(self, session_id: str, messages: Iterable[Any], query_id: str | None = None,
                     turn: Turn | None = None) -> Appended:
        """Store ``messages`` in order at the end of the session (created on first use),
        all or none. Raises InvalidInput (unknown role, a tool result without its
        call, content that is not text...) or TooLarge, storing nothing.
        ``messages=[]`` stores nothing. ``turn`` records the turn's metadata."""
        return await self._appended(self.append_command(session_id, messages, query_id, turn))

    def append_command(self, session_id: str, messages: Iterable[Any], query_id: str | None = None,
                       turn: Turn | None = None) -> AppendMessages:
        """The command ``append`` sends for these arguments (refusing a single message
        as it does), for a host that asks ``ref`` itself (the HTTP server, with no
        trio task per request); ``appended`` then does what ``append`` does with the
        reply. Only when ``configured``."""
        if type(messages) is not list and isinstance(messages, Mapping | str | bytes):  # (an ABC is slow)
            raise InvalidInput("messages must be a list of chat messages, not a single one", field="messages")
        return AppendMessages(session_id=session_id, messages=messages_to_raw(messages),
                              timestamp=time.time(), query_id=query_id, turn=turn)

    def appended(self, command: AppendMessages | AppendItems, reply: Appended) -> Awaitable[None] | None:
        """What ``append`` does once ``command`` is answered ``reply``: count it for
        automatic extraction. Returns what must then be awaited in the runtime's run
        (telling the session's scope, once its buffer is full), or None."""
        hook = self._services.after_append
        if hook is None or not reply.count:
            return None
        raw = command.messages if isinstance(command, AppendMessages) else command.items
        return hook(self.name, reply, sum(len(message) for message in raw) // 4)

    async def append_items(self, session_id: str, items: Iterable[Any], query_id: str | None = None,
                           turn: Turn | None = None, *, state: Mapping[str, Any] | None = None,
                           existing: bool = False, timestamp: float | None = None) -> Appended:
        """Store OpenAI Responses input items (dicts or their JSON bytes) in order at the
        end of the session, verbatim, all or none: messages and the items that have
        no role (``function_call``, ``function_call_output``, ``reasoning``...). Any
        JSON object is an item; a ``type``, if given, must be a string, and a message
        (type "message", or a role and no type) must have a role of system,
        developer, user or assistant; nothing else is checked. Contexts of the
        session keep each model response whole and every output after its call (see
        ``mnemex.conversations.items``).

        ``state``: keys of the session's key-value state set in the same journaled
        step (see ``update_state``); ``existing``: NotFound, storing nothing, when
        the session does not exist (else the append creates it); ``timestamp``:
        seconds since the epoch the items are stamped with (default now)."""
        if isinstance(items, Mapping | str | bytes):
            raise InvalidInput("items must be a list of Responses items, not a single one", field="items")
        raw = messages_to_raw(items, what="item", path="items")
        command = AppendItems(session_id=session_id, items=raw,
                              timestamp=time.time() if timestamp is None else timestamp, query_id=query_id,
                              turn=turn, state=None if not state else encode_values(state),
                              existing=existing)
        return await self._appended(command)

    async def _appended(self, command: AppendMessages | AppendItems) -> Appended:
        reply: Appended = await self._ask(command)
        then = self.appended(command, reply)
        if then is not None:
            await then
        return reply

    async def pop(self, session_id: str) -> StoredMessage | None:
        """Take the newest message (or item) off the end of the session and return it;
        None when the session is empty or unknown. O(1), journaled like an append;
        its sequence number is not given again; live subscribers are not told. A
        summary that stood for it is made again. Facts already extracted from it
        stay, and extraction reads a session by position: a message appended after a
        pop takes the popped one's position, which counts as read if extraction had
        read that far."""
        reply: Popped = await self._ask(PopMessage(session_id=session_id, timestamp=time.time()))
        return reply.entry.stored() if reply.entry is not None else None

    async def create_session(self, session_id: str, state: Mapping[str, Any] | None = None) -> SessionCreated:
        """Create an empty session with ``state`` as its key-value state (any JSON
        values). A session that exists is left as it is: ``created`` says which."""
        reply: SessionCreated = await self._ask(CreateSession(session_id=session_id,
                                                              state=encode_values(state or {}),
                                                              timestamp=time.time()))
        return reply

    async def update_state(self, session_id: str, values: Mapping[str, Any] | None = None, *,
                           remove: Iterable[str] = ()) -> SessionHeader:
        """Set keys of the session's key-value state (a None value is stored, not a
        removal) and remove others, all or nothing, journaled; NotFound when the
        session does not exist. Returns the session's header."""
        removed = [remove] if isinstance(remove, str) else list(remove)
        reply: SessionHeader = await self._ask(UpdateSessionState(
            session_id=session_id, set=encode_values(values or {}), remove=removed, timestamp=time.time()))
        return reply

    async def read_session(self, session_id: str, last: int | None = None,
                           after: float | None = None) -> SessionRead | None:
        """One session's header (times, message count, key-value state) and its
        entries, oldest first; None when it does not exist. ``last``: only the newest
        ``last``; ``after``: then only the newest run stamped at or after ``after``.
        Costs O(entries returned), whatever the session's length."""
        reply: SessionRead | None = await self._ask(GetSession(session_id=session_id, last=last, after=after,
                                                               now=time.time()))
        return reply

    async def session_headers(self, prefix: str | None = None) -> list[SessionHeader]:
        """The header of every live session whose id starts with ``prefix`` (all when
        None), with its state; no message is read or decoded."""
        reply: list[SessionHeader] = await self._ask(ListSessionHeaders(prefix=prefix, now=time.time()))
        return reply

    async def complete(self, session_id: str) -> SessionCompleted:
        """Mark the session completed: live subscribers get the end of the stream. A
        later append reopens it. Completing an unknown session is not an error."""
        reply: SessionCompleted = await self._ask(CompleteSession(session_id=session_id,
                                                                  timestamp=time.time()))
        return reply

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session and everything in it; False when there was none."""
        reply: SessionsDeleted = await self._ask(DeleteSession(session_id=session_id, timestamp=time.time()))
        return bool(reply.session_ids)

    async def delete_all(self) -> SessionsDeleted:
        """Delete every session of this agent (its policy and TTL stay); the next
        message stored gets sequence 1."""
        reply: SessionsDeleted = await self._ask(DeleteAllSessions(timestamp=time.time(),
                                                                   restart_sequence=True))
        return reply

    async def set_policy(self, policy: Policy | None, session_id: str | None = None) -> PolicySet:
        """Set the agent's pruning policy, or one session's; None returns to the default."""
        reply: PolicySet = await self._ask(SetPolicy(policy=policy, session_id=session_id))
        if session_id is None:
            self._services.applied[(self.name, "policy")] = policy
        return reply

    async def set_ttl(self, seconds: float | None) -> TtlSet:
        """Expire sessions idle longer than ``seconds``; None keeps them forever."""
        reply: TtlSet = await self._ask(SetTtl(seconds=seconds))
        self._services.applied[(self.name, "ttl")] = seconds
        return reply

    async def cleanup_expired(self) -> list[str]:
        """Delete the sessions whose TTL has passed now; returns their ids."""
        reply: SessionsDeleted = await self._ask(ExpireSessions(now=time.time()))
        return reply.session_ids

    # -- reading --------------------------------------------------------------------
    async def history(self, session_id: str, last: int | None = None) -> list[StoredMessage]:
        """Every stored message of the session, oldest first ([] for an unknown one);
        with ``last``, only the newest ``last`` of them (O(last))."""
        entries: list[MessageEntry] = await self._ask(GetHistory(session_id=session_id, now=time.time(),
                                                                 last=last))
        return [entry.stored() for entry in entries]

    async def context(self, session_id: str, max_tokens: int | None = None) -> list[dict[str, Any]]:
        """The messages to send to the model next: the history after pruning and
        compression by the session's policy, cut further to ``max_tokens`` if given."""
        window: ContextWindow = await self._ask(GetContext(session_id=session_id, now=time.time(),
                                                           max_tokens=max_tokens))
        return window.decoded_messages()

    async def context_view(self, session_id: str, max_tokens: int | None = None) -> ContextView:
        """Like ``context``, with what the view kept, summarized and spent."""
        window: ContextWindow = await self._ask(GetContext(session_id=session_id, now=time.time(),
                                                           max_tokens=max_tokens))
        return window.view()

    async def messages(self, session_id: str | None = None, query_id: str | None = None,
                       limit: int | None = 50, offset: int = 0) -> MessagePage:
        """A page of stored messages, oldest first; ``offset`` counts from the oldest
        so pages are stable while messages are appended. ``session_id`` None pages
        over every session (in sequence order); ``limit`` None returns everything
        from ``offset`` on. Unknown sessions give an empty page."""
        page = await self.entries(session_id, query_id, limit, offset)
        return page.page()

    async def entries(self, session_id: str | None = None, query_id: str | None = None,
                      limit: int | None = 50, offset: int = 0) -> EntryPage:
        """``messages`` as the actor keeps them: each message's JSON undecoded
        (``MessageEntry.message`` is msgspec.Raw), for callers that pass messages on
        without reading them, such as the HTTP server (no decoding and re-encoding of
        every message)."""
        page: EntryPage = await self._ask(ListMessages(session_id=session_id, query_id=query_id,
                                                       limit=limit, offset=offset, now=time.time()))
        return page

    async def sessions(self) -> list[SessionInfo]:
        """Every live session of the agent, oldest first."""
        reply: list[SessionInfo] = await self._ask(ListSessions(now=time.time()))
        return reply

    async def stats(self) -> AgentStats:
        reply: AgentStats = await self._ask(GetStats(now=time.time()))
        return reply

    async def turns(self, session_id: str) -> list[TurnRecord]:
        """The turn records of a session, oldest first."""
        reply: list[TurnRecord] = await self._ask(ListTurns(session_id=session_id, now=time.time()))
        return reply

    async def search_turns(self, query: str, top_k: int = 10, session_id: str | None = None) -> list[TurnHit]:
        """Keyword (BM25) search over the agent's turns, best first."""
        reply: list[TurnHit] = await self._ask(SearchTurns(query=query, top_k=top_k, session_id=session_id,
                                                           now=time.time()))
        return reply

    # -- around a model call -------------------------------------------------------
    async def context_for_model_call(self, session_id: str, new_messages: Iterable[Any] = (), *,
                                     query_id: str | None = None,
                                     max_tokens: int | None = None) -> list[dict[str, Any]]:
        """Call before each model call: store the turn's new input (a user message, tool
        results) and return the context to send, pruned and compressed by policy."""
        new = list(new_messages)
        if new:
            await self.append(session_id, new, query_id=query_id)
        return await self.context(session_id, max_tokens=max_tokens)

    async def record_turn(self, session_id: str, messages: Iterable[Any], *,
                          usage: Mapping[str, Any] | None = None, iteration: int | None = None,
                          query_id: str | None = None,
                          metadata: Mapping[str, Any] | None = None) -> TurnRecord:
        """Call after each model call: store what the model said (its assistant message,
        and any tool results already produced) with the turn's metadata. ``usage`` is the
        response's usage object (``prompt_tokens``/``completion_tokens``, or
        ``input_tokens``/``output_tokens``)."""
        used = usage or {}
        input_tokens = used.get("prompt_tokens", used.get("input_tokens"))
        output_tokens = used.get("completion_tokens", used.get("output_tokens"))
        turn = Turn(iteration=iteration, input_tokens=input_tokens, output_tokens=output_tokens,
                    metadata=dict(metadata or {}))
        batch = list(messages)
        if not batch:
            raise InvalidInput("record_turn needs at least one message (the model's reply)", field="messages")
        reply = await self.append(session_id, batch, query_id=query_id, turn=turn)
        assert reply.turn is not None
        return reply.turn

    # -- streaming ------------------------------------------------------------------
    async def relay(self, session_id: str, chunk: Any) -> None:
        """Hand a streaming chunk (a dict, or its JSON bytes) to the session's live
        readers as it is; nothing is stored. Raises InvalidInput for a chunk that is
        not a JSON object."""
        if isinstance(chunk, bytes | bytearray | str):
            raw = bytes(chunk, "utf-8") if isinstance(chunk, str) else bytes(chunk)
            try:
                value = msgspec.json.decode(raw)
            except msgspec.DecodeError as exc:
                raise InvalidInput(f"stream chunk is not valid JSON: {exc}", field="chunk") from exc
        else:
            value = chunk
        if not isinstance(value, dict):
            raise InvalidInput(f"stream chunk must be a JSON object, got {type(value).__name__}",
                               field="chunk")
        await self._ask(RelayChunk(session_id=session_id, chunk=msgspec.Raw(msgspec.json.encode(value))))

    def subscribe(self, session_id: str, *, from_beginning: bool = False, wait_for_session: bool = False,
                  timeout: float = 30.0, buffer: int = 256) -> SessionStream:
        """A live stream of the session's messages (see SessionStream)::

            async with agent.subscribe("s1", from_beginning=True) as stream:
                async for event in stream:
                    ...
        """
        return SessionStream(self, session_id, from_beginning=from_beginning,
                             wait_for_session=wait_for_session, timeout=timeout, buffer=buffer)


class SessionStream:
    """An async iterator of StreamEvent for one session.

    With ``from_beginning`` the history comes first (``live=False``); then one
    ``"live"`` marker; then each message as it is appended (``live=True``), until
    the session is completed, deleted or expires (the last event says which). An
    unknown session raises NotFound at ``open()`` (or the first iteration) unless
    ``wait_for_session``; then the stream waits up to ``timeout`` seconds for the
    session to appear and raises Timeout if it does not. A subscriber more than
    ``buffer`` appends behind is dropped: it gets an ``"error"`` event and ends;
    appends never wait for it. Leaving ``async with`` (or ``aclose()``) frees
    the subscription at once.
    """

    def __init__(self, agent: AgentRef, session_id: str, *, from_beginning: bool, wait_for_session: bool,
                 timeout: float, buffer: int) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInput(f"session_id must be a non-empty string, got {session_id!r}",
                               field="session_id")
        self.agent = agent
        self.session_id = session_id
        self.from_beginning = from_beginning
        self.wait_for_session = wait_for_session
        self.timeout = _check_timeout(timeout)
        self.buffer = buffer
        self.start: WatchStart | None = None
        self._subscription: Subscription | None = None
        self._queue: deque[StreamEvent] = deque()
        self._waiting = False
        self._done = False

    async def open(self) -> WatchStart:
        """Register the subscription (once); returns what the session looked like."""
        if self.start is not None:
            return self.start
        agent = self.agent
        if not agent._configured:
            await agent._configure()
        host, ref = agent._services.host, agent.ref
        command = WatchSession(session_id=self.session_id, from_beginning=self.from_beginning,
                               now=time.time())
        subscription = await host.subscribe(ref.kind, ref.key, session_topic(self.session_id), command,
                                               buffer=self.buffer)
        start = subscription.initial
        assert isinstance(start, WatchStart)
        if not start.exists and not self.wait_for_session:
            await subscription.aclose()
            raise NotFound(f"agent {agent.name!r} has no session {self.session_id!r}")
        self._subscription = subscription
        self.start = start
        for message in (entry.stored() for entry in start.entries):
            self._queue.append(StreamEvent(kind="message", message=message, live=False))
        if start.completed:
            self._queue.append(StreamEvent(kind="completed"))
            self._done = True
            await subscription.aclose()
        else:
            self._queue.append(StreamEvent(kind="live"))
            self._waiting = not start.exists
        return start

    def __aiter__(self) -> SessionStream:
        return self

    async def __anext__(self) -> StreamEvent:
        if self.start is None:
            await self.open()
        while not self._queue:
            if self._done or self._subscription is None:
                raise StopAsyncIteration
            await self._receive()
        return self._queue.popleft()

    async def _receive(self) -> None:
        subscription = self._subscription
        assert subscription is not None
        try:
            if self._waiting:
                with trio.move_on_after(self.timeout) as scope:
                    event = await subscription.__anext__()
                if scope.cancelled_caught:
                    await self.aclose()
                    raise Timeout(f"session {self.session_id!r} of agent {self.agent.name!r} did not "
                                  f"appear within {self.timeout:g} s")
                self._waiting = False
            else:
                event = await subscription.__anext__()
        except StopAsyncIteration:
            self._done = True
            return
        except Busy as exc:
            self._queue.append(StreamEvent(kind="error", detail=str(exc)))
            self._done = True
            return
        if isinstance(event, ChunkRelayed):
            self._queue.append(StreamEvent(kind="chunk", chunk=event.chunk, live=True))
        elif isinstance(event, EntriesAppended):
            for message in (entry.stored() for entry in event.entries):
                self._queue.append(StreamEvent(kind="message", message=message, live=True))
        elif isinstance(event, SessionEnded):
            self._queue.append(StreamEvent(kind=event.reason))
            self._done = True
            await subscription.aclose()

    async def aclose(self) -> None:
        self._done = True
        if self._subscription is not None:
            await self._subscription.aclose()

    async def __aenter__(self) -> SessionStream:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # an abandoned stream stops receiving at once (no await possible here)
        subscription = getattr(self, "_subscription", None)  # None if __init__ raised
        if subscription is not None:
            subscription.closed = True
