"""How reads answered in the asking task share the run (``Runtime.ask``'s inline reads).

An inline read is done by the time ``ask`` would yield. Yielding after every one
(trio's ``checkpoint``: a trip through the scheduler, its I/O poll and instruments
included) cost a small scope's search a fifth of its time: over 1,000 scopes of 100
memories (bench/compare.py's), a vector search through ``ScopeRef.search`` took a
median 110 us with it and 91 us without (the scheduler's state, cold again at each
trip, costs more than the 3.6 us a trip takes in a tight loop). So each inline read
is a cancel point (a cancelled caller gets Cancelled there, as at any checkpoint),
and a schedule point only once ``streak`` inline reads, or ``seconds`` of the run's
clock, have gone by since the last one that was: a task asking in a loop lets the others run at least that
often, and a deadline around such a loop is noticed in time (trio notices deadlines
as it schedules). The count keeps that true where the clock stands still (a
``MockClock`` between jumps).
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["INLINE_SLICE", "INLINE_STREAK", "InlineSlices"]

INLINE_STREAK: Final = 16
"""Inline reads after which one is a schedule point, whatever the clock says."""

INLINE_SLICE: Final = 0.001
"""Seconds (the run's clock) after which an inline read is a schedule point."""


class InlineSlices:
    """Says which inline reads are schedule points (see the module docstring). One per
    runtime: reads of any task count towards the same slice."""

    __slots__ = ("_count", "_since", "seconds", "streak")

    def __init__(self, streak: int = INLINE_STREAK, seconds: float = INLINE_SLICE) -> None:
        if isinstance(streak, bool) or not isinstance(streak, int) or streak < 1:
            raise ValueError(f"streak is {streak!r}; it must be an int >= 1")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            raise ValueError(f"seconds is {seconds!r}; it must be a number >= 0")
        self.streak = streak
        self.seconds = float(seconds)
        self._count = 0
        self._since = -math.inf

    def is_due(self, now: float) -> bool:
        """Whether the inline read answered at ``now`` (the run's clock) is to be a
        schedule point; counts it. The first read is one, and then each read that
        ends a streak or comes ``seconds`` after the last one that was."""
        self._count += 1
        if self._count < self.streak and now - self._since < self.seconds:
            return False
        self._count = 0
        self._since = now
        return True
