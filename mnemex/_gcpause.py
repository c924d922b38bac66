"""One pause of the cyclic garbage collector, shared by every thread that asks.

Restoring an actor or loading an index sidecar allocates hundreds of thousands
of containers that all live on and form no cycles. Left on, the collector starts
a pass every 700 of them and, now and then, a full pass over the whole growing
heap: about half of a large restore's time in measurements. Cycles made while it
is paused are found once it resumes.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_holders = [0]          # threads inside a pause
_resume = [False]       # whether the collector was on when the first of them came


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the block. Pauses in several threads overlap into
    one: the collector resumes when the last ends, and only if it was on when the
    first began (a collector the host turned off stays off)."""
    with _lock:
        if _holders[0] == 0:
            _resume[0] = gc.isenabled()
            gc.disable()
        _holders[0] += 1
    try:
        yield
    finally:
        with _lock:
            _holders[0] -= 1
            if _holders[0] == 0 and _resume[0]:
                gc.enable()
