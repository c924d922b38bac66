"""Assembly: the kernel with mnemex's own actor kinds registered.

This is where ``open_runtime`` and ``Client`` come from. The kernel
(``mnemex.runtime``) stays generic; this module is the one place that knows
which kinds make up mnemex.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from mnemex._agents import AgentRef, agent_kind, run_ttl_sweeper
from mnemex.config import Config
from mnemex.messages import Policy
from mnemex.runtime import (
    ActorKind,
    BlockingBridge,
    BlockingProxy,
    BlockingRef,
    Key,
    Runtime,
    RuntimeStats,
    open_actor_runtime,
)

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


def _builtin_kinds(config: Config, replaced: Iterable[str] = ()) -> list[ActorKind]:
    """mnemex's own kinds, but for those ``replaced`` by a caller's kind of that name."""
    skip = set(replaced)
    return [kind for kind in (agent_kind(config),) if kind.name not in skip]


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

    def stats(self) -> RuntimeStats:
        async def take() -> RuntimeStats:
            return self.runtime.stats()

        return self.call(take)
