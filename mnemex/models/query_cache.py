"""The vectors of recent search queries, so that a query asked again (an agent's
recall tool asks the same few questions over and over; a user retries a search) is
not embedded again: a model takes milliseconds per query, a look-up microseconds."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

__all__ = ["QueryCache"]

F32 = npt.NDArray[np.float32]


class QueryCache:
    """At most ``size`` query vectors, keyed by (embedder name, query text), the least
    recently used dropped first. ``size`` 0 keeps nothing. Each vector is kept
    read-only (a caller cannot change what the next one gets); ``hits`` and
    ``misses`` count the look-ups. Used from one trio run (no lock)."""

    __slots__ = ("_rows", "hits", "misses", "size")

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"a query cache holds a count >= 0 of vectors, not {size!r}")
        self.size = size
        self._rows: OrderedDict[tuple[str, str], F32] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, embedder: str, text: str) -> F32 | None:
        """The vector kept for ``text`` embedded by ``embedder``, or None."""
        key = (embedder, text)
        row = self._rows.get(key)
        if row is None:
            self.misses += 1
            return None
        self._rows.move_to_end(key)
        self.hits += 1
        return row

    def put(self, embedder: str, text: str, row: F32) -> None:
        """Keep a copy of ``row`` as the vector of ``text`` by ``embedder``."""
        if self.size == 0:
            return
        kept = np.array(row, dtype=np.float32)
        kept.setflags(write=False)
        key = (embedder, text)
        self._rows[key] = kept
        self._rows.move_to_end(key)
        while len(self._rows) > self.size:
            self._rows.popitem(last=False)
