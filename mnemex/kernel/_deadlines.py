"""Deadlines of asks waiting with the default timeout, kept in one queue.

Every ask without a timeout of its own waits ``config.kernel.ask_timeout``: the same
limit for all, so their deadlines arrive in the order they were set and one deque
holds them, with one task that fails each overdue ask with Timeout. That costs a
deque append per ask instead of a cancel scope per ask (the ask's fast path).
Answered asks are dropped lazily, from the front, or in one pass when a slow one
at the front holds the queue back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final, Protocol

import trio

__all__ = ["AskDeadlines"]

_COMPACT_AT: Final = 4096


class _Waiter(Protocol):
    done: bool

    def resolve(self, value: Any) -> None: ...


class AskDeadlines:
    """Fails asks that outlive their limit: ``add`` one, ``run`` in the kernel's nursery."""

    def __init__(self, overdue: Callable[[float, str, tuple[str, ...], Any], BaseException]) -> None:
        self._overdue = overdue
        self._queue: deque[tuple[float, _Waiter, float, str, tuple[str, ...], Any]] = deque()
        self._compact_at = _COMPACT_AT
        self._idle: trio.Event | None = None

    def add(self, waiter: _Waiter, limit: float, kind: str, key: tuple[str, ...], command: Any, *,
            now: float | None = None) -> None:
        """Fail ``waiter`` with ``overdue(limit, kind, key, command)`` unless answered
        within ``limit`` seconds from ``now`` (the run's clock, read by the caller
        when it has it; default: read here)."""
        queue = self._queue
        while queue and queue[0][1].done:
            queue.popleft()
        if len(queue) >= self._compact_at:
            self._queue = queue = deque(entry for entry in queue if not entry[1].done)
            self._compact_at = max(_COMPACT_AT, 2 * len(queue))
        deadline = (trio.current_time() if now is None else now) + limit
        queue.append((deadline, waiter, limit, kind, key, command))
        if self._idle is not None:
            self._idle.set()
            self._idle = None

    async def run(self) -> None:
        while True:
            queue = self._queue
            while queue and queue[0][1].done:
                queue.popleft()
            if not queue:
                self._idle = idle = trio.Event()
                await idle.wait()
                continue
            deadline, waiter, limit, kind, key, command = queue[0]
            if trio.current_time() < deadline:
                await trio.sleep_until(deadline)
                continue
            queue.popleft()
            waiter.resolve(self._overdue(limit, kind, key, command))
