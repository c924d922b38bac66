"""Waiting for something that happens outside the test's control: a worker thread's
job, a subprocess, a server's socket. One place, bounded, and failing with what it
waited for. (What happens inside the test's own trio run is waited for with
``trio.testing.wait_all_tasks_blocked`` or MockClock, never with these.)"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import trio


async def eventually(check: Callable[[], Awaitable[bool]], *, what: str, timeout: float = 5.0,
                     interval: float = 0.005) -> None:
    """Return once ``await check()`` is true; fail after ``timeout`` seconds naming ``what``."""
    with trio.move_on_after(timeout):
        while not await check():
            await trio.sleep(interval)
        return
    raise AssertionError(f"waited {timeout:g} s for {what}")


def wait_until(check: Callable[[], bool], *, what: str, timeout: float = 30.0,
               interval: float = 0.02) -> None:
    """Blocking ``eventually``, for tests outside a trio run (subprocesses, servers)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(interval)


def next_millisecond() -> float:
    """``time.time()`` once its millisecond differs from now's: journal lines written
    before and after the returned moment carry different millisecond stamps."""
    start = int(time.time() * 1000)
    while int(time.time() * 1000) <= start:
        time.sleep(0.0002)
    return time.time()
