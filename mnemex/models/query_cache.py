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
    recently used dropped first. ``size`` 0 keeps nothing. Each vector is kept as its
    bytes and read back as a read-only view of them (a caller cannot change what the
    next one gets; keeping one is one copy, with no array to make and mark); ``hits``
    and ``misses`` count the look-ups. Used from one trio run (no lock)."""

    __slots__ = ("_rows", "hits", "misses", "size")

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"a query cache holds a count >= 0 of vectors, not {size!r}")
        self.size = size
        self._rows: OrderedDict[tuple[str, str], bytes] = OrderedDict()
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
        kept: F32 = np.frombuffer(row, dtype=np.float32)
        return kept

    def put(self, embedder: str, text: str, row: F32) -> None:
        """Keep a copy of ``row`` as the vector of ``text`` by ``embedder``."""
        if self.size == 0:
            return
        key = (embedder, text)
        self._rows[key] = np.asarray(row, dtype=np.float32).tobytes()
        self._rows.move_to_end(key)
        while len(self._rows) > self.size:
            self._rows.popitem(last=False)
