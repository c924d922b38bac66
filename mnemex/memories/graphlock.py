"""The lock a scope's HNSW graph is shared under: searches in the actor's thread,
a catch-up adding to the same graph in place in a build's thread (see
``VectorIndex(guard=...)``).

Taken in turns: one who held it last and asks again while another waits lets the
other go first, so a build adding batch after batch never starves the searches
(nor a stream of searches the build)."""

from __future__ import annotations

import threading

__all__ = ["TurnLock"]


class TurnLock:
    """A mutual-exclusion lock handed in turns between threads (a context manager).
    Every live scope with vectors holds one, nearly always uncontended: the condition
    threads wait on is made (under the lock) by the first that has to wait."""

    __slots__ = ("_busy", "_changed", "_last", "_lock", "_waiting")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed: threading.Condition | None = None
        self._busy = False
        self._waiting = 0
        self._last: int | None = None

    def __enter__(self) -> TurnLock:
        me = threading.get_ident()
        with self._lock:
            self._waiting += 1
            try:
                while self._busy or (self._last == me and self._waiting > 1):
                    changed = self._changed
                    if changed is None:
                        changed = self._changed = threading.Condition(self._lock)
                    changed.wait()
            finally:
                self._waiting -= 1
            self._busy = True
            self._last = me
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._busy = False
            if self._changed is not None:
                self._changed.notify_all()
