"""One int object per doc id for the whole process (see :func:`shared_ints`)."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = ["shared_ints"]

_SHARED_MIN: Final = 1 << 20
_SHARED_SPREAD: Final = 16
"""Ids below ``_SHARED_MIN`` are always shared; past it, only ids below
``_SHARED_SPREAD`` times the count asked for at once (a scope's are dense)."""

_ints: npt.NDArray[np.object_] = np.empty(0, dtype=object)


def shared_ints(values: npt.NDArray[np.integer[Any]]) -> list[int]:
    """``values.tolist()`` (doc ids, all >= 0), each value the one int object this
    process keeps for it. A restore reads the doc ids of postings from arrays: by
    ``tolist`` every posting of a doc was an int of its own (28 bytes, and 2,800,000
    of them past what an index built memory by memory holds, which shares each doc's
    int, in a scope of 300,000). The table grows to the largest id asked for, doubling,
    and is kept: every scope's ids share it. Restores in two threads may each grow it:
    the last one's stays, and ints from the other are still the right values."""
    global _ints  # noqa: PLW0603 (replaced whole: a reader sees the old table or the new)
    if not len(values):
        return []
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= max(_SHARED_MIN, _SHARED_SPREAD * len(values)):
        # (not shared: a negative id, or one far past what so many ids reach, which a
        # damaged file may hold: the table would keep its size for good)
        ids: list[int] = values.tolist()
        return ids
    table = _ints
    if high >= len(table):
        grown = np.empty(max(high + 1, 2 * len(table)), dtype=object)
        grown[: len(table)] = table
        grown[len(table):] = range(len(table), len(grown))
        _ints = table = grown
    shared: list[int] = table[values].tolist()
    return shared
