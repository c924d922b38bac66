"""Assembly: the kernel with mnemex's own actor kinds registered.

This is where ``open_runtime`` and ``Client`` come from. The kernel
(``mnemex.runtime``) stays generic; this module is the one place that knows
which kinds make up mnemex.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from mnemex.config import Config
from mnemex.conversations.protocol import Policy
from mnemex.conversations.ref import AgentRef, agent_kind, run_ttl_sweeper
from mnemex.kernel import (
    ActorKind,
    BlockingBridge,
    BlockingProxy,
    BlockingRef,
    Key,
    Runtime,
    RuntimeStats,
    open_actor_runtime,
)
from mnemex.memories.protocol import SearchMode, SearchResult, SessionAdded
from mnemex.memories.ref import ScopeRef, archive_session, flush_touches, scope_kind, search_scopes

__all__ = ["Client", "MnemexRuntime", "open_runtime"]


class MnemexRuntime(Runtime):
    """The runtime handed out by ``open_runtime``: the kernel's ask/tell/ref and,
    as mnemex's actor kinds arrive, their refs."""

    _agent_sweeper_started: bool = False

    def agent(self, name: str, *, policy: Policy | None = None, ttl: float | None = None) -> AgentRef:
        """The short-term memory of the agent ``name`` (spawned on first use).

        ``policy`` (MaxMessages, TokenBudget, NoPruning) and ``ttl`` (seconds a session
        may stay idle) are journaled with the agent on first use, so they survive
        restarts; None leaves what the agent has (or the configured default).
        """
        if not self._agent_sweeper_started:
            self._agent_sweeper_started = True
            self._nursery.start_soon(run_ttl_sweeper, self, self.config.agent_sweep_interval,
                                     name="mnemex agent TTL sweeper")
        return AgentRef(self, name, policy=policy, ttl=ttl)

    # -- long-term memory
    def scope(self, *, user_id: str, app_name: str) -> ScopeRef:
        """The long-term memory of ``user_id`` in ``app_name`` (spawned on first use)."""
        return ScopeRef(self, user_id=user_id, app_name=app_name)

    async def search(self, query: str, scopes: Iterable[tuple[str, str]], top_k: int = 10, *,
                     mode: SearchMode | None = None, min_score: float | None = None,
                     filter: Mapping[str, Any] | None = None) -> SearchResult:
        """Search several scopes, ``[(app_name, user_id), ...]``, at once and merge the
        hits into one ranking (scores are comparable across scopes; each hit names
        its scope)."""
        return await search_scopes(self, query, scopes, top_k, mode=mode, min_score=min_score, filter=filter)

    async def archive(self, agent_name: str, session_id: str, *, user_id: str, app_name: str) -> SessionAdded:
        """Move one session of agent ``agent_name`` into the long-term memory of
        (app_name, user_id); adding it again adds nothing twice."""
        return await archive_session(self, agent_name, session_id, user_id=user_id, app_name=app_name)

    async def aclose(self) -> None:
        await flush_touches(self)  # the access counts of the last interval
        await super().aclose()


def _builtin_kinds(config: Config, replaced: Iterable[str] = ()) -> list[ActorKind]:
    """mnemex's own kinds, but for those ``replaced`` by a caller's kind of that name."""
    skip = set(replaced)
    kinds: list[ActorKind] = []
    if "agent" not in skip:
        kinds.append(agent_kind(config))
    if "scope" not in skip:
        kinds.append(scope_kind(config))
    return kinds


@asynccontextmanager
async def open_runtime(config: Config | None = None, *,
                       kinds: Iterable[ActorKind] = ()) -> AsyncIterator[MnemexRuntime]:
    """Open a runtime: lock the data directory, recover nothing eagerly (actors load
    on first use), and on exit drain every mailbox and snapshot every actor.

    ``kinds`` registers extra actor kinds beside mnemex's own (tests, plugins).
    """
    cfg = config if config is not None else Config()
    extra = list(kinds)
    builtin = _builtin_kinds(cfg, [kind.name for kind in extra])
    async with open_actor_runtime(cfg, [*builtin, *extra], runtime_class=MnemexRuntime) as rt:
        yield rt


class Client(BlockingBridge[MnemexRuntime]):
    """A runtime on a background thread, for hosts that are not trio.

    The same refs and calls as the async runtime, blocking; safe from many threads
    and from asyncio via ``asyncio.to_thread``. ``close()`` (or leaving a ``with``
    block) shuts the runtime down cleanly.
    """

    def __init__(self, config: Config | None = None, *, kinds: Iterable[ActorKind] = (),
                 start_timeout: float = 60.0) -> None:
        extra = list(kinds)

        def opener() -> AbstractAsyncContextManager[MnemexRuntime]:
            return open_runtime(config, kinds=extra)

        super().__init__(opener, start_timeout=start_timeout)

    def ref(self, kind: str, key: str | Key) -> BlockingRef:
        return BlockingRef(self, self.runtime.ref(kind, key))

    def ask(self, kind: str, key: str | Key, command: Any, *, timeout: float | None = None) -> Any:
        return self.ref(kind, key).ask(command, timeout=timeout)

    def tell(self, kind: str, key: str | Key, command: Any) -> None:
        self.ref(kind, key).tell(command)

    def agent(self, name: str, *, policy: Policy | None = None, ttl: float | None = None) -> BlockingProxy:
        """A blocking AgentRef: the same calls as ``MnemexRuntime.agent``, waiting in the
        calling thread (``subscribe`` is async-only)."""
        async def make() -> AgentRef:
            return self.runtime.agent(name, policy=policy, ttl=ttl)

        return self.blocking(self.call(make))

    def scope(self, *, user_id: str, app_name: str) -> BlockingProxy:
        """A blocking ScopeRef: the same calls as ``MnemexRuntime.scope``, waiting in the
        calling thread."""
        async def make() -> ScopeRef:
            return self.runtime.scope(user_id=user_id, app_name=app_name)

        return self.blocking(self.call(make))

    def search(self, query: str, scopes: Iterable[tuple[str, str]], top_k: int = 10, *,
               mode: SearchMode | None = None, min_score: float | None = None,
               filter: Mapping[str, Any] | None = None) -> SearchResult:
        """Blocking ``MnemexRuntime.search``."""
        async def run() -> SearchResult:
            return await self.runtime.search(query, list(scopes), top_k, mode=mode, min_score=min_score,
                                             filter=filter)

        return self.call(run)

    def stats(self) -> RuntimeStats:
        async def take() -> RuntimeStats:
            return self.runtime.stats()

        return self.call(take)
