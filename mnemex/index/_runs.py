"""Runs: byte strings by doc id, packed in one buffer.

A dict of ``bytes`` by doc id costs about 100 bytes a doc beyond the bytes
themselves: an int key, a dict slot, a bytes object's head. The BM25 index keeps
two such runs a document (its content's term ids, its context's), so at a
million documents the heads weighed more than the term ids. :class:`Runs` keeps
them end to end in one ``bytearray``, with a doc's offset and size in two arrays
indexed by doc id (12 bytes a doc id). A run replaced or removed leaves its bytes
behind as garbage, and the buffer is packed again once the garbage outweighs
what is live (so a run costs at most twice its bytes, amortised).

Reading a run copies it out (``bytes``): a view would pin the buffer, which must
stay free to grow.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Final, Literal, overload

import numpy as np
import numpy.typing as npt

from mnemex.index._select import doc_slot

__all__ = ["Runs"]

_ABSENT: Final = -1
_PACK_MIN: Final = 1 << 16  # garbage below this many bytes is never worth a pass


class Runs:
    """Byte strings by doc id (a doc id: an int >= 0), as a dict of them would hold
    them: ``runs[doc] = data``, ``runs[doc]``, ``get``, ``pop``, ``in``, ``len``;
    iteration gives the doc ids ascending. Not safe to change from several threads
    at once, nor to read while another thread changes it: unlike a dict's, such a
    read may give wrong bytes (its owner never lets one happen)."""

    __slots__ = ("_at", "_count", "_garbage", "_heap", "_size")

    def __init__(self) -> None:
        self._heap = bytearray()
        self._at = array("q")     # by doc id: where its run starts in the heap
        self._size = array("i")   # by doc id: its run's bytes, _ABSENT for none
        self._count = 0
        self._garbage = 0         # bytes of the heap no run holds

    @classmethod
    def from_arrays(cls, ids: npt.NDArray[np.integer], sizes: npt.NDArray[np.integer],
                    data: bytes | memoryview) -> Runs:
        """The runs of ``ids`` (distinct, >= 0), each of ``sizes`` bytes, laid end to end
        in ``data`` in that order (copied: nothing of ``data`` is kept). Of an id given
        twice, the last run is kept, and the runs count one less: a caller that reads
        them from a file compares ``len`` with its ids to find that."""
        runs = cls()
        if not len(ids):
            return runs
        ids = np.asarray(ids, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        starts = np.cumsum(sizes) - sizes
        slots = int(ids.max()) + 1
        at = np.zeros(slots, dtype=np.int64)
        size = np.full(slots, _ABSENT, dtype=np.int32)
        at[ids] = starts
        size[ids] = sizes
        runs._heap = bytearray(data)
        runs._at = array("q", at.tobytes())
        runs._size = array("i", size.tobytes())
        runs._count = int(np.count_nonzero(size != _ABSENT))  # (less than len(ids): an id repeats)
        return runs

    # -- a dict's reading ----------------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    def __contains__(self, doc: object) -> bool:
        at = doc_slot(doc)
        return at is not None and at < len(self._size) and self._size[at] != _ABSENT

    def __getitem__(self, doc: int) -> bytes:
        found = self.get(doc)
        if found is None:
            raise KeyError(doc)
        return found

    def get(self, doc: int, default: bytes | None = None) -> bytes | None:
        if doc not in self:
            return default
        start = self._at[doc]
        return bytes(self._heap[start : start + self._size[doc]])

    def __eq__(self, other: object) -> bool:
        """Equal to runs holding the same bytes for the same doc ids (as dicts compare)."""
        if not isinstance(other, Runs):
            return NotImplemented
        return len(self) == len(other) and all(self.get(doc) == other.get(doc) for doc in self)

    __hash__ = None  # type: ignore[assignment]  # (changes: unhashable, as a dict)

    def __iter__(self) -> Iterator[int]:
        return iter(self.doc_ids().tolist())

    def doc_ids(self) -> npt.NDArray[np.int64]:
        """The doc ids that hold a run, ascending."""
        return np.flatnonzero(np.frombuffer(self._size, dtype=np.int32) != _ABSENT)

    # -- a dict's changing ----------------------------------------------------------------
    def __setitem__(self, doc: int, data: bytes) -> None:
        if doc_slot(doc) is None:
            raise ValueError(f"doc id {doc!r} is not an int >= 0")
        size = self._size
        if doc >= len(size):
            grown = max(doc + 1, 2 * len(size), 16) - len(size)
            size.extend(array("i", [_ABSENT]) * grown)
            self._at.extend(array("q", [0]) * grown)
        old = size[doc]
        if old == _ABSENT:
            self._count += 1
        else:
            self._garbage += old
        self._at[doc] = len(self._heap)
        size[doc] = len(data)
        self._heap += data
        self._pack_if_due()

    def update(self, pairs: Iterable[tuple[int, bytes]]) -> None:
        for doc, data in pairs:
            self[doc] = data

    def pop(self, doc: int, default: bytes | None = None) -> bytes | None:
        found = self.get(doc)
        if found is None:
            return default
        self._size[doc] = _ABSENT
        self._count -= 1
        self._garbage += len(found)
        self._pack_if_due()
        return found

    # -- as arrays ----------------------------------------------------------------------------
    @overload
    def arrays(self, *, lend: Literal[False] = False) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                                               bytes]: ...
    @overload
    def arrays(self, *, lend: bool) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                             bytes | list[memoryview]]: ...

    def arrays(self, *, lend: bool = False) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                                     bytes | list[memoryview]]:
        """Every run as ``from_arrays`` takes them: the doc ids ascending, their runs'
        sizes, and the runs end to end in that order (one copy of the live bytes,
        taken a stretch of runs adjacent in the buffer at a time: the runs of docs
        added in ascending order, or read by ``from_arrays``, are one stretch). With
        ``lend``, those stretches as views of the buffer, no copy (while they are
        held, the buffer cannot grow: for runs that do not change any more)."""
        ids = self.doc_ids()
        if not len(ids):
            return ids, np.zeros(0, dtype=np.int64), [] if lend else b""
        starts = np.frombuffer(self._at, dtype=np.int64)[ids]
        sizes = np.frombuffer(self._size, dtype=np.int32)[ids].astype(np.int64)
        ends = starts + sizes
        # a stretch ends where the next doc's run does not start at its end
        breaks = np.flatnonzero(starts[1:] != ends[:-1]) + 1
        firsts = starts[np.concatenate(([0], breaks))].tolist()
        lasts = ends[np.concatenate((breaks - 1, [len(ids) - 1]))].tolist()
        if lend:
            heap = memoryview(self._heap)
            return ids, sizes, [heap[first:last] for first, last in zip(firsts, lasts, strict=True)]
        with memoryview(self._heap) as view:
            data = b"".join([view[first:last] for first, last in zip(firsts, lasts, strict=True)])
        return ids, sizes, data

    # -- insides ------------------------------------------------------------------------------
    def _pack_if_due(self) -> None:
        garbage = self._garbage
        if garbage < _PACK_MIN or 2 * garbage < len(self._heap):
            return
        ids, sizes, data = self.arrays()
        self._heap = bytearray(data)
        starts = np.cumsum(sizes) - sizes
        at = np.frombuffer(self._at, dtype=np.int64).copy()
        at[ids] = starts
        self._at = array("q", at.tobytes())
        self._garbage = 0
