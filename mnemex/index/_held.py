"""Compact lists of doc ids, for the sets a large scope keeps per name or category.

A Python set or dict of ints costs 40-100 bytes an element: at 1,000,000 memories
a scope's sets of the memories naming each name held ~90 MB, and its categories'
confidences ~96 MB. These hold 4 bytes a doc (and 8 a value): an ``array('i')``
in no order, and the docs let go since (``gone``), left in the array until they
pass a quarter of it. Docs are added only while not held (the owner's indexes
keep them in step), and a doc let go and held again before a compaction is taken
out of ``gone``, not appended twice."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import numpy.typing as npt

LISTED: Final = 64
"""Up to this many docs, a doc let go is taken out of the array at once (a scan of
so few costs less than keeping it aside)."""


class HeldDocs:
    """The docs holding one value (a name, a category), see the module doc."""

    __slots__ = ("docs", "gone")

    def __init__(self, doc: int | None = None) -> None:
        self.docs = array("i", () if doc is None else (doc,))
        self.gone: set[int] | None = None

    def add(self, doc: int) -> None:
        """Hold ``doc`` (not held now)."""
        gone = self.gone
        if gone is not None and doc in gone:
            gone.discard(doc)  # (still in the array)
        else:
            self.docs.append(doc)

    @staticmethod
    def of(docs: npt.NDArray[np.integer[Any]]) -> HeldDocs:
        """Docs held at once: ``docs`` (distinct, fitting an int32), in their order."""
        held = HeldDocs()
        held.docs = array("i", np.asarray(docs, dtype=np.int32).tobytes())
        return held

    def discard(self, doc: int) -> None:
        """Let ``doc`` (held now) go."""
        docs = self.docs
        if len(docs) <= LISTED:
            if doc in docs:
                self._drop(docs.index(doc))
            return
        gone = self.gone
        if gone is None:
            gone = self.gone = set()
        gone.add(doc)
        if 4 * len(gone) > len(docs):
            self._keep(self._held())

    def _drop(self, at: int) -> None:
        del self.docs[at]

    def _held(self) -> npt.NDArray[np.bool_]:
        """Which places of the array hold a doc not let go."""
        docs = np.frombuffer(self.docs, dtype=np.int32)
        gone = self.gone
        if not gone:
            return np.ones(len(docs), dtype=np.bool_)
        return ~np.isin(docs, np.fromiter(gone, dtype=np.int32, count=len(gone)))

    def _keep(self, held: npt.NDArray[np.bool_]) -> None:
        self.docs = array("i", np.frombuffer(self.docs, dtype=np.int32)[held].tobytes())
        self.gone = None

    def __len__(self) -> int:
        return len(self.docs) - (len(self.gone) if self.gone is not None else 0)

    def array(self) -> npt.NDArray[np.int64]:
        """The docs held, ascending (a new array)."""
        out = np.frombuffer(self.docs, dtype=np.int32).astype(np.int64)
        if self.gone:
            out = out[self._held()]
        out.sort()
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HeldDocs):
            return NotImplemented
        return bool(np.array_equal(self.array(), other.array()))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.array().tolist()})"


class HeldValues(HeldDocs):
    """Docs with a float each (a category's confidences), in a second array beside
    the docs, place for place."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        super().__init__()
        self.values = array("d")

    def put(self, doc: int, value: float) -> None:
        """Hold ``doc`` (not held now) with ``value``."""
        gone = self.gone
        if gone is not None and doc in gone:  # (still in the array: its value is replaced)
            at = int(np.flatnonzero(np.frombuffer(self.docs, dtype=np.int32) == doc)[0])
            self.values[at] = value
            gone.discard(doc)
        else:
            self.docs.append(doc)
            self.values.append(value)

    def add(self, doc: int) -> None:
        raise TypeError("a doc is held with its value: put(doc, value)")

    def _drop(self, at: int) -> None:
        del self.docs[at]
        del self.values[at]

    def _keep(self, held: npt.NDArray[np.bool_]) -> None:
        self.values = array("d", np.frombuffer(self.values, dtype=np.float64)[held].tobytes())
        super()._keep(held)

    def below(self, limit: float) -> set[int]:
        """The docs held whose value is below ``limit``."""
        docs = np.frombuffer(self.docs, dtype=np.int32)
        low = np.frombuffer(self.values, dtype=np.float64) < limit
        if self.gone:
            low &= self._held()
        return set(docs[low].tolist())

    def items(self) -> Iterator[tuple[int, float]]:
        """(doc, value) of each doc held, in the order they were put."""
        held = self._held().tolist()
        return ((doc, value) for doc, value, kept in zip(self.docs, self.values, held, strict=True) if kept)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HeldValues):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    __hash__ = None
