"""The blocking Client: a runtime on a background thread, for hosts that are not trio.

Every call the async API has is written out here as a real, typed method (as httpx's
``Client`` mirrors ``AsyncClient``), so an editor completes it and mypy catches a
misspelled one. Each call hops into the runtime's thread, waits there, and returns
or raises in the calling thread; calls are safe from many threads and from asyncio
through ``asyncio.to_thread``. ``timeout=`` bounds one call where it may wait long.
An ask of one actor (``ref(...).ask``, the checkpoint calls about one thread) takes
the bridge's short way: no trio task for the caller, and a read of an idle actor
answered in the calling thread while the runtime waits for I/O (see
``mnemex.kernel._bridge``).

    with mnemex.Client(mnemex.Config(data_dir="mnemex-data")) as client:
        agent = client.agent("assistant")
        agent.append("s1", [{"role": "user", "content": "I'm John"}])
        client.scope(user_id="alice", app_name="chat").search("java")

``Client(url="http://127.0.0.1:8000", token=...)`` makes the same calls against a
``mnemex serve`` instead (``mnemex.connect`` on the background thread): for hosts
that run several worker processes, which cannot each open the data directory.
"""

from __future__ import annotations

import builtins
import concurrent.futures
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from types import TracebackType
from typing import IO, Any, Literal, ParamSpec, TypeVar

from mnemex.checkpoints.protocol import Blob, ChannelValue, CheckpointEntry, Version, WriteValue
from mnemex.checkpoints.ref import Checkpoints, get_command, put_command, thread_key, writes_command
from mnemex.config import DEFAULT, Config, UseDefault
from mnemex.conversations.protocol import (
    AgentStats,
    Appended,
    ContextView,
    MessagePage,
    Policy,
    PolicySet,
    SessionCompleted,
    SessionCreated,
    SessionHeader,
    SessionInfo,
    SessionRead,
    SessionsDeleted,
    StoredMessage,
    StreamEvent,
    TtlSet,
    Turn,
    TurnHit,
    TurnRecord,
)
from mnemex.conversations.ref import AgentRef, SessionStream
from mnemex.effects import Key
from mnemex.errors import ActorClosed, InvalidInput
from mnemex.kernel import ActorKind, BlockingBridge, BlockingRef, Runtime, RuntimeStats, ShutdownReport
from mnemex.knowledge.categories import Category
from mnemex.memories.extraction import CursorInfo
from mnemex.memories.protocol import (
    CategoryCatalog,
    DocumentStatus,
    Extracted,
    Facets,
    IngestProgress,
    IngestReport,
    MemoriesPut,
    MemoryHistory,
    MemoryPage,
    MemoryRecord,
    ScopeStats,
    SearchMode,
    SearchResult,
    Session,
    SessionAdded,
)
from mnemex.memories.ref import ScopeRef
from mnemex.memories.transfer import ExportedMemory, ExportHeader, ImportReport
from mnemex.remote.runtime import RemoteRuntime, connect
from mnemex.runtime import MnemexRuntime, open_runtime
from mnemex.state.protocol import StateValues
from mnemex.state.ref import StateRef

__all__ = ["BlockingAgent", "BlockingCheckpoints", "BlockingScope", "BlockingState", "BlockingStream",
           "Client"]

P = ParamSpec("P")
T = TypeVar("T")


class Client:
    """A runtime on its own thread, opened when the Client is made (an error while
    opening, such as a locked data directory, is raised by the constructor) and
    closed by ``close()`` or leaving a ``with`` block: mailboxes drained, every actor
    snapshotted (``close()`` returns the report of what was). An error the runtime
    raises after start-up is never dropped: the next call and ``close()`` raise it.
    A call after close raises ActorClosed.

    With ``url`` the Client opens no runtime: it reaches the one of the ``mnemex
    serve`` at ``url`` (bearer ``token``), with the same calls (see
    ``mnemex.connect``; ``config`` then only chooses the embedder, which must be the
    server's; None: the server's own). A few calls are in-process only and raise
    InvalidInput remotely (``mnemex.remote.runtime`` lists them)."""

    def __init__(self, config: Config | None = None, *, kinds: Iterable[ActorKind] = (),
                 start_timeout: float = 60.0, url: str | None = None, token: str | None = None) -> None:
        extra = list(kinds)
        if url is None and token is not None:
            raise InvalidInput("token is for a remote server: give its url too", field="token")
        if url is not None and extra:
            raise InvalidInput("kinds are registered in the server's runtime, not in a remote client",
                               field="kinds")

        def opener() -> AbstractAsyncContextManager[MnemexRuntime | RemoteRuntime]:
            if url is not None:
                return connect(url, token=token, config=config, timeout=start_timeout)
            return open_runtime(config, kinds=extra)

        self._bridge = BlockingBridge(opener, start_timeout=start_timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> ShutdownReport | None:
        """Shut the runtime down cleanly and join its thread (idempotent). Returns what
        the shutdown did (actors closed, final snapshots written and which failed;
        None if the runtime ended on an error). Raises an error the runtime met after
        start-up, if no call has raised it yet."""
        self._bridge.close()
        return self._bridge.runtime.shutdown_report

    @property
    def runtime(self) -> MnemexRuntime | RemoteRuntime:
        """The async runtime underneath (use it only inside the runtime's thread): a
        RemoteRuntime for a Client made with ``url``."""
        return self._bridge.runtime

    @property
    def config(self) -> Config:
        return self._bridge.runtime.config

    def _call(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._bridge.call(functools.partial(fn, *args, **kwargs))

    def submit(self, fn: Callable[P, Awaitable[T]], /, *args: P.args,
               **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        """Start ``await fn(*args, **kwargs)`` (a call of the async API: ``client.runtime``'s
        refs) in the runtime's thread without waiting: a Future of its outcome. From
        asyncio, ``await asyncio.wrap_future(client.submit(...))`` waits without blocking
        the event loop or taking a worker thread. The call runs to its end even if the
        Future is no longer awaited."""
        return self._bridge.submit(functools.partial(fn, *args, **kwargs))

    # -- refs
    def agent(self, name: str, *, policy: Policy | UseDefault | None = DEFAULT,
              ttl: float | UseDefault | None = DEFAULT) -> BlockingAgent:
        """The short-term memory of agent ``name``, blocking (see ``MnemexRuntime.agent``)."""
        return BlockingAgent(self, self._bridge.runtime.agent(name, policy=policy, ttl=ttl))

    def scope(self, *, user_id: str, app_name: str) -> BlockingScope:
        """The long-term memory of ``user_id`` in ``app_name``, blocking."""
        return BlockingScope(self, self._bridge.runtime.scope(user_id=user_id, app_name=app_name))

    def state(self, *, app_name: str, user_id: str | None = None) -> BlockingState:
        """The key-value state of an app (``user_id`` None) or of one user in an app,
        blocking (see ``MnemexRuntime.state``)."""
        return BlockingState(self, self._bridge.runtime.state(app_name=app_name, user_id=user_id))

    def checkpoints(self) -> BlockingCheckpoints:
        """The checkpoints of graph threads, blocking (see ``MnemexRuntime.checkpoints``)."""
        return BlockingCheckpoints(self, self._bridge.runtime.checkpoints())

    def ref(self, kind: str, key: str | Key) -> BlockingRef:
        """A blocking ref to an actor of any registered kind (``ask``/``tell`` raw commands)."""
        return BlockingRef(self._bridge, self._bridge.runtime.ref(kind, key))

    # -- the runtime's calls
    def search(self, query: str, scopes: Iterable[tuple[str, str]], top_k: int = 10, *,
               mode: SearchMode | UseDefault = DEFAULT, min_score: float | UseDefault | None = DEFAULT,
               filter: Mapping[str, Any] | None = None, timeout: float | None = None,
               include_history: bool = False, as_of: float | str | datetime | None = None) -> SearchResult:
        """Search several scopes, ``[(app_name, user_id), ...]``, into one ranking."""
        runtime = self._bridge.runtime
        return self._bridge.call(functools.partial(runtime.search, query, list(scopes), top_k, mode=mode,
                                                   min_score=min_score, filter=filter,
                                                   include_history=include_history, as_of=as_of),
                                 timeout=timeout)

    def archive(self, agent_name: str, session_id: str, *, user_id: str, app_name: str,
                timeout: float | None = None) -> SessionAdded:
        """Move one session of an agent into the long-term memory of (app_name, user_id)."""
        runtime = self._bridge.runtime
        return self._bridge.call(functools.partial(runtime.archive, agent_name, session_id, user_id=user_id,
                                                   app_name=app_name), timeout=timeout)

    def extract(self, agent_name: str, session_id: str, *, user_id: str, app_name: str,
                if_needed: bool = False, timeout: float | None = None) -> Extracted:
        """Extract facts from a session into the long-term memory of (app_name, user_id)
        (see ``MnemexRuntime.extract``)."""
        runtime = self._bridge.runtime
        return self._bridge.call(functools.partial(runtime.extract, agent_name, session_id, user_id=user_id,
                                                   app_name=app_name, if_needed=if_needed), timeout=timeout)

    def extract_if_needed(self, agent_name: str, session_id: str, *, user_id: str, app_name: str,
                          timeout: float | None = None) -> Extracted:
        """``extract`` only when the session's buffer is full."""
        return self.extract(agent_name, session_id, user_id=user_id, app_name=app_name, if_needed=True,
                            timeout=timeout)

    def retry_extraction(self, agent_name: str, session_id: str, first: int, *, user_id: str,
                         app_name: str, timeout: float | None = None) -> Extracted:
        """Extract a session's dead letter starting at position ``first`` again."""
        runtime = self._bridge.runtime
        return self._bridge.call(functools.partial(runtime.retry_extraction, agent_name, session_id, first,
                                                   user_id=user_id, app_name=app_name), timeout=timeout)

    def extract_automatically(self, agent_name: str, *, app_name: str, user_id: str,
                              session_id: str | None = None, turns: int | None = None,
                              tokens: int | None = None) -> None:
        """Extract an agent's sessions automatically (see ``MnemexRuntime.extract_automatically``)."""
        self._bridge.runtime.extract_automatically(agent_name, app_name=app_name, user_id=user_id,
                                                   session_id=session_id, turns=turns, tokens=tokens)

    def scope_keys(self) -> list[tuple[str, str]]:
        """Every scope as ``(app_name, user_id)``: in the data directory or loaded now."""
        runtime = self._bridge.runtime
        if isinstance(runtime, RemoteRuntime):
            return self._call(runtime.scope_keys)
        return runtime.scope_keys()

    def export_data(self, out: IO[str], scopes: Iterable[tuple[str, str]] | None = None, *,
                    include_vectors: bool = True, timeout: float | None = None) -> ExportHeader:
        """Write the memories of ``scopes`` (None: every scope) to ``out`` as JSONL (see
        ``MnemexRuntime.export_data``); returns the header written."""
        runtime = self._bridge.runtime
        chosen = None if scopes is None else list(scopes)
        return self._bridge.call(functools.partial(runtime.export_data, out, chosen,
                                                   include_vectors=include_vectors), timeout=timeout)

    def import_data(self, lines: Iterable[str | bytes], *, timeout: float | None = None) -> ImportReport:
        """Read an export into this runtime's scopes, ids preserved (see
        ``MnemexRuntime.import_data``); returns the counts."""
        runtime = self._bridge.runtime
        return self._bridge.call(functools.partial(runtime.import_data, lines), timeout=timeout)

    def ask(self, kind: str, key: str | Key, command: Any, *,
            timeout: float | UseDefault | None = DEFAULT) -> Any:
        """Send a raw command to an actor and wait for its reply."""
        return self.ref(kind, key).ask(command, timeout=timeout)

    def tell(self, kind: str, key: str | Key, command: Any) -> None:
        """Send a raw command to an actor without waiting for its reply."""
        self.ref(kind, key).tell(command)

    def flush_touches(self) -> int:
        """Send the access counts searches gathered so far now."""
        return self._call(self._bridge.runtime.flush_touches)

    def stats(self) -> RuntimeStats:
        """Counts for health checks and metrics."""
        return self._bridge.runtime.stats()


class BlockingAgent:
    """One agent's short-term memory, blocking: every call of ``AgentRef``."""

    __slots__ = ("_agent", "_client")

    def __init__(self, client: Client, agent: AgentRef) -> None:
        self._client = client
        self._agent = agent

    def __repr__(self) -> str:
        return f"BlockingAgent({self._agent.name!r})"

    @property
    def name(self) -> str:
        return self._agent.name

    # -- writing
    def append(self, session_id: str, messages: Iterable[Any], query_id: str | None = None,
               turn: Turn | None = None) -> Appended:
        """Store messages at the end of the session, all or none (see ``AgentRef.append``)."""
        return self._client._call(self._agent.append, session_id, list(messages), query_id, turn)

    def append_items(self, session_id: str, items: Iterable[Any], query_id: str | None = None,
                     turn: Turn | None = None, *, state: Mapping[str, Any] | None = None,
                     existing: bool = False, timestamp: float | None = None) -> Appended:
        """Store OpenAI Responses items at the end of the session, verbatim, all or none,
        with a change of the session's state (see ``AgentRef.append_items``)."""
        return self._client._call(self._agent.append_items, session_id, list(items), query_id, turn,
                                  state=state, existing=existing, timestamp=timestamp)

    def create_session(self, session_id: str, state: Mapping[str, Any] | None = None) -> SessionCreated:
        """Create an empty session with a key-value state, unless it exists (see
        ``AgentRef.create_session``)."""
        return self._client._call(self._agent.create_session, session_id, state)

    def update_state(self, session_id: str, values: Mapping[str, Any] | None = None, *,
                     remove: Iterable[str] = ()) -> SessionHeader:
        """Change the session's key-value state (see ``AgentRef.update_state``)."""
        return self._client._call(self._agent.update_state, session_id, values, remove=remove)

    def read_session(self, session_id: str, last: int | None = None,
                     after: float | None = None) -> SessionRead | None:
        """One session's header and entries, or None (see ``AgentRef.read_session``)."""
        return self._client._call(self._agent.read_session, session_id, last, after)

    def session_headers(self, prefix: str | None = None) -> list[SessionHeader]:
        """The headers of the sessions whose id starts with ``prefix`` (see
        ``AgentRef.session_headers``)."""
        return self._client._call(self._agent.session_headers, prefix)

    def pop(self, session_id: str) -> StoredMessage | None:
        """Take the newest message (or item) off the session and return it; None when
        it has none (see ``AgentRef.pop``)."""
        return self._client._call(self._agent.pop, session_id)

    def complete(self, session_id: str) -> SessionCompleted:
        """Mark the session completed: live readers get the end of the stream."""
        return self._client._call(self._agent.complete, session_id)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session; False when there was none."""
        return self._client._call(self._agent.delete_session, session_id)

    def delete_all(self) -> SessionsDeleted:
        """Delete every session of this agent (its policy and TTL stay)."""
        return self._client._call(self._agent.delete_all)

    def set_policy(self, policy: Policy | None, session_id: str | None = None) -> PolicySet:
        """Set the agent's pruning policy, or one session's; None returns to the default."""
        return self._client._call(self._agent.set_policy, policy, session_id)

    def set_ttl(self, seconds: float | None) -> TtlSet:
        """Expire sessions idle longer than ``seconds``; None keeps them forever."""
        return self._client._call(self._agent.set_ttl, seconds)

    def cleanup_expired(self) -> list[str]:
        """Delete the sessions whose TTL has passed; returns their ids."""
        return self._client._call(self._agent.cleanup_expired)

    # -- reading
    def history(self, session_id: str, last: int | None = None) -> list[StoredMessage]:
        """Every stored message of the session, oldest first (the newest ``last`` only)."""
        return self._client._call(self._agent.history, session_id, last)

    def context(self, session_id: str, max_tokens: int | None = None) -> list[dict[str, Any]]:
        """The messages to send to the model next, pruned and compressed by policy."""
        return self._client._call(self._agent.context, session_id, max_tokens)

    def context_view(self, session_id: str, max_tokens: int | None = None) -> ContextView:
        """Like ``context``, with what the view kept, summarized and spent."""
        return self._client._call(self._agent.context_view, session_id, max_tokens)

    def messages(self, session_id: str | None = None, query_id: str | None = None,
                 limit: int | None = 50, offset: int = 0) -> MessagePage:
        """A page of stored messages, oldest first (see ``AgentRef.messages``)."""
        return self._client._call(self._agent.messages, session_id, query_id, limit, offset)

    def sessions(self) -> list[SessionInfo]:
        """Every live session of the agent, oldest first."""
        return self._client._call(self._agent.sessions)

    def stats(self) -> AgentStats:
        return self._client._call(self._agent.stats)

    def turns(self, session_id: str) -> list[TurnRecord]:
        """The turn records of a session, oldest first."""
        return self._client._call(self._agent.turns, session_id)

    def search_turns(self, query: str, top_k: int = 10, session_id: str | None = None) -> list[TurnHit]:
        """Keyword (BM25) search over the agent's turns, best first."""
        return self._client._call(self._agent.search_turns, query, top_k, session_id)

    # -- around a model call
    def context_for_model_call(self, session_id: str, new_messages: Iterable[Any] = (), *,
                               query_id: str | None = None,
                               max_tokens: int | None = None) -> list[dict[str, Any]]:
        """Before a model call: store the turn's new input, return the context to send."""
        return self._client._call(self._agent.context_for_model_call, session_id, list(new_messages),
                                  query_id=query_id, max_tokens=max_tokens)

    def record_turn(self, session_id: str, messages: Iterable[Any], *, usage: Mapping[str, Any] | None = None,
                    iteration: int | None = None, query_id: str | None = None,
                    metadata: Mapping[str, Any] | None = None) -> TurnRecord:
        """After a model call: store what the model said with the turn's metadata."""
        return self._client._call(self._agent.record_turn, session_id, list(messages), usage=usage,
                                  iteration=iteration, query_id=query_id, metadata=metadata)

    # -- streaming
    def relay(self, session_id: str, chunk: Any) -> None:
        """Hand a streaming chunk to the session's live readers as it is; nothing is stored."""
        self._client._call(self._agent.relay, session_id, chunk)

    def subscribe(self, session_id: str, *, from_beginning: bool = False, wait_for_session: bool = False,
                  timeout: float = 30.0, buffer: int = 256) -> BlockingStream:
        """A live stream of the session, blocking::

            with agent.subscribe("s1", from_beginning=True) as stream:
                for event in stream:
                    ...
        """
        stream = self._agent.subscribe(session_id, from_beginning=from_beginning,
                                       wait_for_session=wait_for_session, timeout=timeout, buffer=buffer)
        return BlockingStream(self._client, stream)


class BlockingStream:
    """A session's live events as a blocking iterator (see ``SessionStream``). Opened
    when entered (or on the first ``next``); leaving the ``with`` block, or
    ``close()``, frees the subscription. ``next_timeout`` bounds each wait."""

    __slots__ = ("_client", "_stream", "next_timeout")

    def __init__(self, client: Client, stream: SessionStream, next_timeout: float | None = None) -> None:
        self._client = client
        self._stream = stream
        self.next_timeout = next_timeout

    def __enter__(self) -> BlockingStream:
        self._client._call(self._stream.open)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        try:
            return self._client._bridge.call(self._stream.__anext__, timeout=self.next_timeout)
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        try:
            self._client._call(self._stream.aclose)
        except ActorClosed:
            pass  # the runtime is gone: so is the subscription


class BlockingState:
    """The key-value state of an app or of one user in an app, blocking: every call of
    ``StateRef``."""

    __slots__ = ("_client", "_state")

    def __init__(self, client: Client, state: StateRef) -> None:
        self._client = client
        self._state = state

    def __repr__(self) -> str:
        return f"BlockingState(app_name={self.app_name!r}, user_id={self.user_id!r})"

    @property
    def app_name(self) -> str:
        return self._state.app_name

    @property
    def user_id(self) -> str | None:
        return self._state.user_id

    def get(self, keys: Iterable[str] | None = None) -> dict[str, Any]:
        """The values of ``keys`` that exist (every key when None), decoded."""
        return self._client._call(self._state.get, None if keys is None else list(keys))

    def values(self) -> StateValues:
        """Every value as raw JSON, with the time of the latest change."""
        return self._client._call(self._state.values)

    def update(self, values: Mapping[str, Any] | None = None, *, remove: Iterable[str] = ()) -> None:
        """Set values and remove keys, all or nothing (see ``StateRef.update``)."""
        self._client._call(self._state.update, values, remove=remove)

    def clear(self) -> None:
        """Remove every key."""
        self._client._call(self._state.clear)


class BlockingCheckpoints:
    """The checkpoints of graph threads, blocking: each call is the ``Checkpoints``
    call of the same name, run in the runtime's thread. In-process, a call about one
    thread asks its actor the bridge's short way (``BlockingBridge.ask``: no task
    for the caller; a read of an idle thread answered at once)."""

    def __init__(self, client: Client, checkpoints: Checkpoints) -> None:
        self._client = client
        self._checkpoints = checkpoints
        host = checkpoints.host
        self._kernel = host if isinstance(host, Runtime) else None

    def __repr__(self) -> str:
        return f"Blocking{self._checkpoints!r}"

    def _ask(self, thread_id: str, command: Any) -> Any:
        key = thread_key(thread_id)
        if self._kernel is None:
            return self._client._call(self._checkpoints.host.ask, self._checkpoints.kind, key, command)
        return self._client._bridge.ask(self._kernel, self._checkpoints.kind, key, command)

    def put(self, thread_id: str, checkpoint_id: str, checkpoint: Blob, *, ns: str = "",
            parent_id: str | None = None, metadata: Mapping[str, Any] | None = None,
            versions: Mapping[str, Version] | None = None, values: Iterable[ChannelValue] = ()) -> None:
        """Store a checkpoint; durable when this returns."""
        self._ask(thread_id, put_command(checkpoint_id, checkpoint, ns=ns, parent_id=parent_id,
                                         metadata=metadata, versions=versions, values=values))

    def put_writes(self, thread_id: str, checkpoint_id: str, task_id: str, writes: Iterable[WriteValue], *,
                   ns: str = "", task_path: str = "") -> None:
        """Store writes pending on a checkpoint; durable when this returns."""
        self._ask(thread_id, writes_command(checkpoint_id, task_id, writes, ns=ns, task_path=task_path))

    def get(self, thread_id: str, checkpoint_id: str | None = None, *,
            ns: str = "") -> CheckpointEntry | None:
        """One checkpoint (None: the newest of ``ns``), or None."""
        entry: CheckpointEntry | None = self._ask(thread_id, get_command(checkpoint_id, ns=ns))
        return entry

    def list(self, thread_id: str | None = None, *, ns: str | None = None, checkpoint_id: str | None = None,
             before: str | None = None, filter: Mapping[str, Any] | None = None,
             limit: int | None = None) -> list[CheckpointEntry]:
        """Checkpoints newest first, of one thread or of every thread."""
        return self._client._call(self._checkpoints.list, thread_id, ns=ns, checkpoint_id=checkpoint_id,
                                  before=before, filter=filter, limit=limit)

    def threads(self) -> builtins.list[str]:
        """Every thread id, sorted."""
        return self._client._call(self._checkpoints.threads)

    def delete_thread(self, thread_id: str) -> int:
        """Delete everything of a thread; how many checkpoints went."""
        return self._client._call(self._checkpoints.delete_thread, thread_id)

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete what runs ``run_ids`` made, in every thread; how many checkpoints went."""
        return self._client._call(self._checkpoints.delete_runs, run_ids)

    def copy_thread(self, source: str, target: str) -> None:
        """Copy a thread's checkpoints and writes into another thread."""
        self._client._call(self._checkpoints.copy_thread, source, target)

    def prune(self, thread_ids: Sequence[str],
              strategy: Literal["keep_latest", "delete"] = "keep_latest") -> int:
        """Keep the newest checkpoint per namespace, or delete all; how many went."""
        return self._client._call(self._checkpoints.prune, thread_ids, strategy)


class BlockingScope:
    """One user's long-term memory in one app, blocking: every call of ``ScopeRef``."""

    __slots__ = ("_client", "_scope")

    def __init__(self, client: Client, scope: ScopeRef) -> None:
        self._client = client
        self._scope = scope

    def __repr__(self) -> str:
        return f"BlockingScope(app_name={self.app_name!r}, user_id={self.user_id!r})"

    @property
    def app_name(self) -> str:
        return self._scope.app_name

    @property
    def user_id(self) -> str:
        return self._scope.user_id

    # -- writing
    def remember(self, content: str, **fields: Any) -> str:
        """Store a memory; returns its id (see ``ScopeRef.remember`` for the fields)."""
        return self._client._call(self._scope.remember, content, **fields)

    def remember_many(self, memories: Iterable[str | Mapping[str, Any]]) -> list[str]:
        """Store several memories, all or none; returns their ids in order."""
        return self._client._call(self._scope.remember_many, list(memories))

    def update(self, memory_id: str, **fields: Any) -> MemoryRecord:
        """Change some fields of a memory; returns the updated memory."""
        return self._client._call(self._scope.update, memory_id, **fields)

    def forget(self, memory_id: str) -> bool:
        """Delete a memory; False when there was none."""
        return self._client._call(self._scope.forget, memory_id)

    def forget_many(self, memory_ids: Iterable[str]) -> list[str]:
        """Delete memories by id; returns the ids that existed."""
        return self._client._call(self._scope.forget_many, list(memory_ids))

    def forget_where(self, filter: Mapping[str, Any]) -> list[str]:
        """Delete every memory the filter matches; returns their ids."""
        return self._client._call(self._scope.forget_where, filter)

    def add_session(self, session: Session) -> SessionAdded:
        """Store every event of a finished session that has text as a memory."""
        return self._client._call(self._scope.add_session, session)

    # -- reading
    def get(self, memory_id: str) -> MemoryRecord:
        """The memory with this id; NotFound when this scope has none."""
        return self._client._call(self._scope.get, memory_id)

    def count(self, filter: Mapping[str, Any] | None = None, *, include_history: bool = False,
              as_of: float | str | datetime | None = None) -> int:
        """How many active memories the scope holds (see ``ScopeRef.count``)."""
        return self._client._call(self._scope.count, filter, include_history=include_history, as_of=as_of)

    def memories(self, filter: Mapping[str, Any] | None = None, limit: int | None = 100,
                 offset: int = 0, *, include_history: bool = False,
                 as_of: float | str | datetime | None = None) -> MemoryPage:
        """A page of active memories in creation order (see ``ScopeRef.memories``)."""
        return self._client._call(self._scope.memories, filter, limit, offset,
                                  include_history=include_history, as_of=as_of)

    def stats(self) -> ScopeStats:
        return self._client._call(self._scope.stats)

    def search(self, query: str, top_k: int = 10, mode: SearchMode | UseDefault = DEFAULT,
               min_score: float | UseDefault | None = DEFAULT,
               filter: Mapping[str, Any] | None = None, *, include_history: bool = False,
               as_of: float | str | datetime | None = None, scopes: Iterable[str] | None = None,
               scope_ids: Mapping[str, str] | None = None,
               facets: Literal["hits", "scope"] | None = None) -> SearchResult:
        """Search this scope (see ``ScopeRef.search``)."""
        return self._client._call(self._scope.search, query, top_k, mode, min_score, filter,
                                  include_history=include_history, as_of=as_of,
                                  scopes=None if scopes is None else list(scopes), scope_ids=scope_ids,
                                  facets=facets)

    # -- categories and actors
    def categories(self) -> CategoryCatalog:
        """The category catalog (see ``ScopeRef.categories``)."""
        return self._client._call(self._scope.categories)

    def set_categories(self, categories: Iterable[Category | Mapping[str, Any]] = (), *,
                       remove: Iterable[str] = (), replace: bool = False,
                       reclassify: bool = False) -> CategoryCatalog:
        """Extend or change the catalog (see ``ScopeRef.set_categories``)."""
        return self._client._call(self._scope.set_categories, list(categories), remove=list(remove),
                                  replace=replace, reclassify=reclassify)

    def facets(self, filter: Mapping[str, Any] | None = None, *, min_confidence: float = 0.0,
               include_history: bool = False, as_of: float | str | datetime | None = None) -> Facets:
        """Memories per category (see ``ScopeRef.facets``)."""
        return self._client._call(self._scope.facets, filter, min_confidence=min_confidence,
                                  include_history=include_history, as_of=as_of)

    def actor_memories(self, actor_id: str, limit: int | None = 100, offset: int = 0, *,
                       include_history: bool = False) -> MemoryPage:
        """The memories linked to an actor (see ``ScopeRef.actor_memories``)."""
        return self._client._call(self._scope.actor_memories, actor_id, limit, offset,
                                  include_history=include_history)

    # -- keyed memories (see ScopeRef.put)
    def put(self, memories: Iterable[Mapping[str, Any]], *, forget: Iterable[str] = (),
            vectors_of: tuple[str, int] | None = None) -> MemoriesPut:
        """Create or replace memories by id and forget others, all or none (see ``ScopeRef.put``)."""
        return self._client._call(self._scope.put, list(memories), forget=list(forget), vectors_of=vectors_of)

    def search_vector(self, vector: Sequence[float], top_k: int = 10, *, vectors_of: tuple[str, int],
                      namespace: Sequence[str] | None = None,
                      filter: Mapping[str, Any] | None = None) -> SearchResult:
        """The memories nearest a caller's query vector (see ``ScopeRef.search_vector``)."""
        return self._client._call(self._scope.search_vector, vector, top_k, vectors_of=vectors_of,
                                  namespace=namespace, filter=filter)

    def memories_in(self, namespace: Sequence[str] = (), filter: Mapping[str, Any] | None = None,
                    limit: int | None = 100, offset: int = 0) -> MemoryPage:
        """A page of the keyed memories under ``namespace`` (see ``ScopeRef.memories_in``)."""
        return self._client._call(self._scope.memories_in, namespace, filter, limit, offset)

    def list_namespaces(self, prefix: Sequence[str] = (), suffix: Sequence[str] = (), *,
                        max_depth: int | None = None, limit: int = 100,
                        offset: int = 0) -> builtins.list[tuple[str, ...]]:
        """The namespaces of the scope's keyed memories (see ``ScopeRef.list_namespaces``)."""
        return self._client._call(self._scope.list_namespaces, prefix, suffix, max_depth=max_depth,
                                  limit=limit, offset=offset)

    def refresh_expiry(self, memory_ids: Iterable[str]) -> int:
        """Push back the expiry of these memories to now + their ttl; how many."""
        return self._client._call(self._scope.refresh_expiry, list(memory_ids))

    def forget_expired(self) -> builtins.list[str]:
        """Forget the memories whose expiry has passed; their ids."""
        return self._client._call(self._scope.forget_expired)

    def extract_from(self, session_id: str, messages: Sequence[Any] | None = None, *,
                     provider: Callable[[int, int], Any] | None = None, count: int | None = None,
                     if_needed: bool = False) -> Extracted:
        """Extract facts from a conversation the host keeps (see ``ScopeRef.extract_from``)."""
        return self._client._call(self._scope.extract_from, session_id, messages, provider=provider,
                                  count=count, if_needed=if_needed)

    def extraction_status(self, session_id: str | None = None) -> list[CursorInfo]:
        """Each session's extraction cursor (see ``ScopeRef.extraction_status``)."""
        return self._client._call(self._scope.extraction_status, session_id)

    def retry_dead_letter(self, session_id: str, first: int, messages: Sequence[Any] | None = None, *,
                          provider: Callable[[int, int], Any] | None = None) -> Extracted:
        """Extract a dead letter again (see ``ScopeRef.retry_dead_letter``)."""
        return self._client._call(self._scope.retry_dead_letter, session_id, first, messages,
                                  provider=provider)

    def history(self, memory_id: str) -> MemoryHistory:
        """How a memory came to be (see ``ScopeRef.history``)."""
        return self._client._call(self._scope.history, memory_id)

    def recall(self, query: str, top_k: int = 5, *, mode: SearchMode | UseDefault = DEFAULT,
               min_score: float | UseDefault | None = DEFAULT,
               filter: Mapping[str, Any] | None = None) -> str:
        """The memories relevant to ``query``, formatted for a model's context."""
        return self._client._call(self._scope.recall, query, top_k, mode=mode, min_score=min_score,
                                  filter=filter)

    # -- moving memories
    def export(self, include_vectors: bool = True) -> list[ExportedMemory]:
        """Every memory of this scope as the lines of an export (see ``ScopeRef.export``)."""
        return self._client._call(_collected, self._scope.export(include_vectors))

    def import_records(self, memories: Iterable[ExportedMemory]) -> ImportReport:
        """Store exported memories in this scope, ids preserved (see ``ScopeRef.import_records``)."""
        return self._client._call(self._scope.import_records, list(memories))

    # -- documents
    def ingest(self, source: str | os.PathLike[str] | bytes, media_type: str | None = None, *,
               document_id: str | None = None, title: str | None = None,
               metadata: Mapping[str, Any] | None = None, extract: bool = True,
               progress: Callable[[IngestProgress], Any] | None = None) -> IngestReport:
        """Store a document as searchable chunks (see ``ScopeRef.ingest``); ``progress``
        is called on the runtime's thread."""
        return self._client._call(self._scope.ingest, source, media_type, document_id=document_id,
                                  title=title, metadata=metadata, extract=extract, progress=progress)

    def documents(self, document_id: str | None = None) -> list[DocumentStatus]:
        """The documents this scope holds (see ``ScopeRef.documents``)."""
        return self._client._call(self._scope.documents, document_id)

    def extract_document(self, document_id: str) -> Extracted:
        """Extract facts from an ingested document now (see ``ScopeRef.extract_document``)."""
        return self._client._call(self._scope.extract_document, document_id)

    def forget_document(self, document_id: str) -> list[str]:
        """Forget a document, its chunks and what was extracted from it (see
        ``ScopeRef.forget_document``)."""
        return self._client._call(self._scope.forget_document, document_id)


async def _collected(items: AsyncIterator[T]) -> list[T]:
    return [item async for item in items]
