"""What the asyncio adapters share: handing a call to the blocking ``mnemex.Client``
without blocking the event loop, and letting a write already handed over finish
when its caller is cancelled.

The runtime runs on trio, on the Client's own thread; asyncio frameworks call from
their event loop. ``run_blocking`` runs a blocking function in a worker thread
(``asyncio.to_thread``) so the loop stays free; ``run_write`` does the same for a
write and waits for its outcome even when the caller is cancelled meanwhile (see
``settled``), so a write is never half-known: it happened, and the cancellation is
raised after it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

__all__ = ["run_blocking", "run_write", "settled"]

P = ParamSpec("P")
T = TypeVar("T")


async def settled(call: Awaitable[T]) -> T:
    """The outcome of a write already handed to the runtime, waited for even when the
    caller is cancelled meanwhile; the cancellation is raised after it (an outcome
    of the write, an error, is then dropped: the caller asked not to hear it)."""
    task = asyncio.ensure_future(call)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: asyncio would otherwise log it as never retrieved
        raise cancelled
    return task.result()


async def run_blocking(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker thread: a read (cancelling it abandons the
    result)."""
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


async def run_write(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker thread, settled: a cancelled caller still
    waits for the write's outcome before the cancellation is raised."""
    return await settled(asyncio.to_thread(functools.partial(fn, *args, **kwargs)))
