"""The one id clock: memory ids that sort by creation time.

An id is 128 bits written as 26 Crockford base-32 characters: 48 bits of milliseconds
since the epoch, then 80 bits that start random each millisecond and count up within
it, so ids made by one clock sort strictly in the order they were made, even when the
wall clock steps back. ``id_at(first, i)`` names the i-th id of a block reserved with
``IdClock.reserve`` (a session archived as memories takes its ids from one block, so
the actor can number them without a clock of its own).

Pure code: the runtime owns an ``IdClock`` and passes ``now``; behaviours only call
``id_at``.
"""

from __future__ import annotations

import os
import threading
from typing import Final

from mnemex.errors import InvalidInput

__all__ = ["CROCKFORD", "SESSION_ID_BLOCK", "IdClock", "encode_id", "id_at"]

CROCKFORD: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DIGITS: Final = {char: value for value, char in enumerate(CROCKFORD)}
_ID_CHARS: Final = 26
_ID_LIMIT: Final = 1 << 128

# ids an archived session may take: far more than any session has events
SESSION_ID_BLOCK: Final = 1 << 32


# every pair of digits, by the 10 bits they write
_PAIRS: Final = tuple(first + second for first in CROCKFORD for second in CROCKFORD)
_PAIR_SHIFTS: Final = tuple(range(5 * _ID_CHARS - 10, -1, -10))


def encode_id(value: int) -> str:
    """A 128-bit value as 26 Crockford base-32 characters (sorting as the value does)."""
    pairs = _PAIRS
    high = value >> 30
    last_high, prefix = _LAST_PREFIX[0]
    if high != last_high:  # (ids made in a row share their first 20 characters: kept)
        prefix = "".join([pairs[(value >> shift) & 1023] for shift in _PAIR_SHIFTS[:-3]])
        _LAST_PREFIX[0] = (high, prefix)
    return prefix + pairs[(value >> 20) & 1023] + pairs[(value >> 10) & 1023] + pairs[value & 1023]


# the value >> 30 of the last id encoded, and its first 20 characters (one tuple, so
# that threads encoding at once each read a matching pair)
_LAST_PREFIX: list[tuple[int, str]] = [(-1, "")]


def id_at(first: str, offset: int) -> str:
    """The id ``offset`` places after ``first`` in a reserved block of ids."""
    if not isinstance(first, str) or len(first) != _ID_CHARS or any(char not in _DIGITS for char in first):
        raise InvalidInput(f"first_id {first!r} is not a memory id (26 Crockford base-32 characters)",
                           field="first_id")
    value = 0
    for char in first:
        value = value * 32 + _DIGITS[char]
    value += offset
    if value >= _ID_LIMIT:
        raise InvalidInput(f"first_id {first!r} leaves no room for {offset + 1:,} ids", field="first_id")
    return encode_id(value)


class IdClock:
    """Monotonic ids (see the module docstring); safe from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._tail = 0

    def next(self, now: float, span: int = 1) -> str:
        """The next id at ``now`` (seconds); ``span`` > 1 reserves that many in a row."""
        return encode_id(self._take(now, span))

    def next_many(self, now: float, count: int) -> list[str]:
        """``count`` ids at ``now``, in a row: what as many calls of ``next(now)`` give
        (one turn of the lock for a batch of memories)."""
        if count <= 0:
            return []
        first = self._take(now, count)
        return [encode_id(value) for value in range(first, first + count)]

    def _take(self, now: float, span: int) -> int:
        """The value of the next id, ``span`` of them reserved from it."""
        ms = max(0, int(now * 1000))
        with self._lock:
            if ms <= self._ms and self._tail + span < 1 << 80:
                ms = self._ms
                self._tail += 1
            else:  # a new millisecond (or this one is used up: borrow the next)
                ms = max(ms, self._ms + 1)
                self._tail = int.from_bytes(os.urandom(10), "big") >> 1
            value = (ms << 80) | self._tail
            self._ms = ms
            self._tail += span - 1
        return value

    def reserve(self, now: float, count: int = SESSION_ID_BLOCK) -> str:
        """The first of ``count`` consecutive new ids (``id_at(first, i)``)."""
        return self.next(now, count)
