"""The filter language of long-term memory search, and the columns it reads.

A filter is a JSON object; every key narrows the memories a search, count,
page or ``forget_where`` sees (keys combine with AND)::

    {
      "min_importance": 0.5,              # importance >= 0.5   (also max_importance: <=)
      "created_after": 1714000000,        # created_at >= t     (created_before: created_at < t)
      "timestamp_after": "2024-05-01",    # timestamp >= t      (timestamp_before: timestamp < t)
      "session_id": "s1",                 # one of: a string, or a list of strings (any of them)
      "actor_id": ["a1", "a2"],
      "author": "user",
      "kind": ["fact", "preference"],     # as session_id (also attributed_to)
      "categories": ["food", "travel"],   # has any of these; {"$all": [...]} has all of them
      "min_category_confidence": 0.6,     # ... each with a confidence >= 0.6 (a caller's: 1.0)
      "scope": ["global", "campaign:ash"],  # in one of these parts of the scope (scope_label)
      "entities": {"$all": ["Paris"]},
      "metadata": {"lang": "en", "score": {"$gte": 3, "$lt": 9}, "tag": {"$in": ["a", "b"]}}
    }

Times are seconds since the epoch or ISO 8601 strings (UTC when no offset is
given); ``*_after`` bounds are inclusive, ``*_before`` bounds exclusive.
Metadata keys are top-level keys of a memory's metadata; a bare value means
``$eq``; the operators are ``$eq $ne $gt $gte $lt $lte $in $nin $exists``.
Comparisons never mix types: numbers compare with numbers, strings with
strings, and booleans are not numbers (``true`` does not equal ``1``). As in
MongoDB, ``$ne`` and ``$nin`` also match memories without the key.

``compile_filter`` validates a filter once (a malformed one raises
InvalidInput naming the key) into a :class:`Filter`, which is evaluated
against a :class:`FilterTable` as a boolean mask by doc id, the form the
search indexes take as ``allowed``, so filtering happens inside the search.
``Filter.matches`` tests one record and is the brute-force reference.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableSet, Sequence, Sized
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar, cast

import numpy as np
import numpy.typing as npt

from mnemex.errors import InvalidInput
from mnemex.index._held import HeldValues
from mnemex.index._select import doc_slot
from mnemex.memories.protocol import MemoryRecord

__all__ = ["FILTER_KEYS", "DocBits", "Filter", "FilterTable", "compile_filter", "doc_array"]

Mask = npt.NDArray[np.bool_]


class DocBits(MutableSet[int]):
    """The docs holding a common value (a kind, a scope, a category most memories
    have): a set of doc ids kept as a bool array over them, a byte a doc id. A set
    costs 30 to 60 bytes a member; a value held by a share of the scope's memories
    of at least 1 in ``_DENSE_SHARE`` is kept so (``_held``). It answers as a set,
    and the set operations it does not do itself give plain sets."""

    __slots__ = ("_bits", "_count")

    def __init__(self, docs: Iterable[int] = ()) -> None:
        ids = np.fromiter(docs, dtype=np.int64)
        self._bits = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=np.bool_)
        self._bits[ids] = True
        self._count = int(np.count_nonzero(self._bits))

    @classmethod
    def _from_iterable(cls, it: Iterable[int]) -> set[int]:  # type: ignore[override]
        return set(it)

    def __contains__(self, doc: object) -> bool:
        at = doc_slot(doc)
        return at is not None and at < len(self._bits) and bool(self._bits[at])

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids().tolist())

    def __repr__(self) -> str:
        return f"DocBits({self._count} docs)"

    def ids(self) -> npt.NDArray[np.int64]:
        """The docs, ascending."""
        return np.flatnonzero(self._bits)

    def add(self, doc: int) -> None:
        at = doc_slot(doc)
        if at is None:
            raise TypeError(f"a doc id is an int >= 0, not {doc!r}")
        doc = at
        bits = self._bits
        if doc >= len(bits):
            grown = np.zeros(max(doc + 1, 2 * len(bits)), dtype=np.bool_)
            grown[: len(bits)] = bits
            bits = self._bits = grown
        if not bits[doc]:
            bits[doc] = True
            self._count += 1

    def update(self, docs: Sequence[int]) -> None:
        """Add each of ``docs`` (ints >= 0), in one store when they are plain ints."""
        if len(docs) < 8 or not all(type(doc) is int for doc in docs):
            for doc in docs:
                self.add(doc)
            return
        ids = np.fromiter(docs, dtype=np.int64, count=len(docs))
        if int(ids.min()) < 0:
            raise TypeError(f"a doc id is an int >= 0, not {int(ids.min())}")
        bits = self._bits
        top = int(ids.max())
        if top >= len(bits):
            grown = np.zeros(max(top + 1, 2 * len(bits)), dtype=np.bool_)
            grown[: len(bits)] = bits
            bits = self._bits = grown
        bits[ids] = True
        self._count = int(np.count_nonzero(bits))

    def discard(self, doc: int) -> None:
        if doc in self:
            self._bits[int(doc)] = False
            self._count -= 1

    def clear(self) -> None:
        self._bits[:] = False
        self._count = 0

    def pop(self) -> int:
        ids = self.ids()
        if not len(ids):
            raise KeyError("pop from an empty DocBits")
        doc = int(ids[0])
        self.discard(doc)
        return doc

    def __sub__(self, other: Iterable[Any]) -> DocBits:
        left = DocBits()
        left._bits = self._bits.copy()
        slots = (doc_slot(doc) for doc in other)
        ids = np.fromiter((at for at in slots if at is not None and at < len(left._bits)), dtype=np.int64)
        left._bits[ids] = False
        left._count = int(np.count_nonzero(left._bits))
        return left


Docs = set[int] | frozenset[int] | DocBits
"""The docs holding a value: a set; while one doc holds it, the process's frozenset
of that doc (shared by every table; replaced by a set of the value's own on a second);
once it is common, a :class:`DocBits`."""


def doc_array(docs: Iterable[int]) -> npt.NDArray[np.int64]:
    """The docs of ``docs`` as an int64 array (a DocBits' ascending; others' in their order)."""
    if isinstance(docs, DocBits):
        return docs.ids()
    return np.fromiter(docs, dtype=np.int64, count=len(docs) if isinstance(docs, Sized) else -1)
_Floats = npt.NDArray[np.float64]
_C = TypeVar("_C")

FILTER_KEYS: Final = frozenset({
    "min_importance", "max_importance", "created_after", "created_before", "timestamp_after",
    "timestamp_before", "session_id", "actor_id", "author", "categories", "entities", "metadata",
    "kind", "attributed_to", "scope", "min_category_confidence",
})
_SINGLE: Final = ("session_id", "actor_id", "author", "kind", "attributed_to")
_OPERATORS: Final = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"})
_MAX_LIST: Final = 10_000
_DENSE_SHARE: Final = 32   # a value's docs are a DocBits once it holds 1 in 32 doc ids,
_DENSE_MIN: Final = 1024   # and at least this many docs
_MIN_CAPACITY: Final = 4  # every live scope holds eight columns: small until it grows
_NO_NUMBERS: Final = np.zeros((5, 0), dtype=np.float64)  # a new table's columns (no rows to write)
_NO_FLAGS: Final = np.zeros((3, 0), dtype=np.bool_)
_NO_VALUES: Final[Mapping[str, Docs]] = MappingProxyType({})
_NO_DOCS: Final[frozenset[int]] = frozenset()


class _Column(Generic[_C]):
    """A column of a :class:`FilterTable`: row ``row`` of its array ``array``, read as
    a view (what is written to it is written to the table)."""

    __slots__ = ("array", "row")

    def __init__(self, array: str, row: int) -> None:
        self.array, self.row = array, row

    def __get__(self, table: object, owner: type | None = None) -> _C:
        return cast("_C", getattr(table, self.array)[self.row])


class FilterTable:
    """What filters read about each memory, by doc id: numeric columns as numpy
    arrays (one vectorised comparison per bound) and, for the string fields and
    metadata, the docs of each value (:data:`Docs`). Kept in step by the owner's
    add/remove.

    The columns are rows of two arrays, the numbers' and the flags' (each column a
    view made when asked): a live scope of one memory held eight arrays of ~140
    bytes. A field gets its table of values with its first value (``values_of``
    reads an absent one as empty), and a value held by one doc shares that doc's
    frozenset (a set of one is 216 bytes: a scope of one memory held five)."""

    __slots__ = ("_flags", "_numbers", "capacity", "category_confidence", "fields", "inactive", "metadata")

    def __init__(self) -> None:
        self.capacity = 0
        self._numbers = _NO_NUMBERS  # rows: importance, timestamp, created, valid_from, valid_until
        self._flags = _NO_FLAGS      # rows: live, active, merged
        self.inactive = 0
        # field (session_id, actor_id, author, kind, attributed_to, categories, entities,
        # scope) -> value -> its docs
        self.fields: dict[str, dict[str, Docs]] = {}
        self.metadata: dict[str, dict[int, Any]] = {}
        # category -> its docs with a confidence below 1, and those confidences (absent:
        # 1.0); 12 bytes a doc, where a dict of them held ~96 MB at 1,000,000 memories
        self.category_confidence: dict[str, HeldValues] = {}

    # the columns, by doc id (views: what is written to one is written to the table)
    importance = _Column[_Floats]("_numbers", 0)
    timestamp = _Column[_Floats]("_numbers", 1)
    created = _Column[_Floats]("_numbers", 2)
    valid_from = _Column[_Floats]("_numbers", 3)
    valid_until = _Column[_Floats]("_numbers", 4)
    live = _Column[Mask]("_flags", 0)
    active = _Column[Mask]("_flags", 1)
    """What reads see by default: active memories (as_of reads the validity interval)."""
    merged = _Column[Mask]("_flags", 2)

    def values_of(self, field: str) -> Mapping[str, Docs]:
        """A field's values and the docs holding each (empty until one holds a value)."""
        return self.fields.get(field, _NO_VALUES)

    def _values_table(self, field: str) -> dict[str, Docs]:
        table = self.fields.get(field)
        if table is None:
            table = self.fields[field] = {}
        return table

    def add(self, doc: int, record: MemoryRecord) -> None:
        self.add_many([(doc, record)])

    def add_many(self, items: Sequence[tuple[int, MemoryRecord]]) -> None:
        """Record many (doc, record) pairs at once: one memory's columns by one store
        in each of the two arrays, a batch's a column at a time."""
        if not items:
            return
        docs = np.fromiter((doc for doc, _ in items), dtype=np.int64, count=len(items))
        self._ensure(int(docs.max()) + 1)
        records = [record for _, record in items]
        doc_list = [int(doc) for doc, _ in items]  # (the callers' int objects, shared with their indexes)
        # each doc's column in the two arrays: (importance, timestamp, created, valid from,
        # valid until) and (live, active, merged); one doc's by scalar stores, which cost
        # a fifth of a fancy one (most batches are one memory)
        numbers = [(record.importance, record.timestamp, record.created_at,
                    record.timestamp if record.valid_at is None else record.valid_at,
                    math.inf if record.invalid_at is None else record.invalid_at) for record in records]
        flags = [(True, record.status == "active", record.status == "merged") for record in records]
        if len(doc_list) == 1:
            self._numbers[:, doc_list[0]] = numbers[0]
            self._flags[:, doc_list[0]] = flags[0]
        else:
            for array, columns in ((self._numbers, numbers), (self._flags, flags)):
                for row, column in zip(array, zip(*columns, strict=True), strict=True):
                    row[docs] = column
        self.inactive += sum(not active for _, active, _ in flags)
        metadata = self.metadata
        # a field of one value in all the batch (a kind, the global scope, no author):
        # its docs join that value's set in one update, in the same order
        for name in _SINGLE:
            values = list(map(_GETTERS[name], records))
            if values.count(None) != len(values):
                _hold_values(self._values_table(name), doc_list, values, self.capacity)
        # each category's and entity's docs, joining its set (or bits) at once
        categories: dict[str, list[int]] = {}
        entities: dict[str, list[int]] = {}
        for doc, record in zip(doc_list, records, strict=True):
            for value in record.categories:
                categories.setdefault(value, []).append(doc)
            for value in record.entities:
                entities.setdefault(value, []).append(doc)
        for name, grouped in (("categories", categories), ("entities", entities)):
            if grouped:
                table = self._values_table(name)
                for value, holders in grouped.items():
                    _hold_many(table, value, holders, self.capacity)
        _hold_values(self._values_table("scope"), doc_list, [record.scope_label for record in records],
                     self.capacity)
        confidences = self.category_confidence
        for doc, record in items:
            for category, confidence in _confidences(record):
                if confidence < 1.0:
                    held = confidences.get(category)
                    if held is None:
                        held = confidences[category] = HeldValues()
                    held.put(doc, confidence)
            for key, value in record.metadata.items():
                metadata.setdefault(key, {})[doc] = value

    def remove(self, doc: int, record: MemoryRecord) -> None:
        flags = self._flags
        flags[0, doc] = False
        if not flags[1, doc]:
            self.inactive -= 1
        flags[1, doc] = False
        for name, values in self._values(record):
            table = self.fields.get(name)
            if table is None:
                continue
            for value in values:
                holders = table.get(value)
                if isinstance(holders, set | DocBits):
                    holders.discard(doc)
                    if not holders:
                        del table[value]
                elif holders is not None and doc in holders:  # (one doc's: the last)
                    del table[value]
        for category, confidence in _confidences(record):
            held = self.category_confidence.get(category) if confidence < 1.0 else None  # (as put)
            if held is not None:
                held.discard(doc)
                if not len(held):
                    del self.category_confidence[category]
        for key in record.metadata:
            docs = self.metadata.get(key)
            if docs is not None:
                docs.pop(doc, None)
                if not docs:
                    del self.metadata[key]

    def distinct(self, name: str) -> int:
        return len(self.values_of(name))

    def visible(self, include_history: bool = False, as_of: float | None = None) -> Mask | None:
        """Which memories a read sees: the active ones (None: every live memory is
        active); with ``include_history`` every memory; ``as_of`` a time: those that
        were true then (valid_at, or the timestamp, <= as_of < invalid_at), whatever
        their status now, merged wordings left out."""
        if as_of is not None:
            return self.live & ~self.merged & (self.valid_from <= as_of) & (as_of < self.valid_until)
        if include_history or self.inactive == 0:
            return None
        return self.active.copy()

    @staticmethod
    def _values(record: MemoryRecord) -> Iterable[tuple[str, Iterable[str]]]:
        for name in _SINGLE:
            value = getattr(record, name)
            if value is not None:
                yield name, (value,)
        if record.categories:
            yield "categories", set(record.categories)
        if record.entities:
            yield "entities", set(record.entities)
        yield "scope", (record.scope_label,)

    def reserve(self, docs: int) -> None:
        """Room for doc ids below ``docs`` (a restore filing its memories a chunk at a
        time keeps the capacity its value sets are weighed against)."""
        self._ensure(docs)

    def _ensure(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        capacity = max(_MIN_CAPACITY, needed, 2 * self.capacity)
        for name in ("_numbers", "_flags"):
            old = getattr(self, name)
            grown = np.zeros((len(old), capacity), dtype=old.dtype)
            grown[:, : self.capacity] = old
            setattr(self, name, grown)
        self.capacity = capacity

    def category_docs(self, category: str, min_confidence: float = 0.0) -> Docs:
        """The docs in ``category`` with a confidence of at least ``min_confidence``."""
        docs = self.values_of("categories").get(category, _NO_DOCS)
        if min_confidence <= 0.0 or not docs:
            return docs
        confidences = self.category_confidence.get(category)
        low = confidences.below(min_confidence) if confidences is not None else None
        return docs - low if low else docs

    def docs_mask(self, docs: Iterable[int]) -> Mask:
        mask = np.zeros(self.capacity, dtype=np.bool_)
        ids = doc_array(docs)
        if len(ids):
            mask[ids] = True
        return mask


def _confidences(record: MemoryRecord) -> Iterable[tuple[str, float]]:
    """A record's (category, confidence) pairs, a category once (its last confidence)."""
    pairs = zip(record.categories, record.category_confidences, strict=False)
    return pairs if len(record.categories) < 2 else dict(pairs).items()


# -- compiled predicates ------------------------------------------------------------------
class _Predicate:
    def mask(self, table: FilterTable) -> Mask:
        raise NotImplementedError

    def test(self, record: MemoryRecord) -> bool:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class _Range(_Predicate):
    column: str            # importance | timestamp | created
    low: float | None      # inclusive
    high: float | None     # inclusive when high_inclusive
    high_inclusive: bool

    def mask(self, table: FilterTable) -> Mask:
        values = getattr(table, self.column)
        mask = np.ones(table.capacity, dtype=np.bool_)
        if self.low is not None:
            mask &= values >= self.low
        if self.high is not None:
            mask &= (values <= self.high) if self.high_inclusive else (values < self.high)
        return mask

    def test(self, record: MemoryRecord) -> bool:
        value = {"importance": record.importance, "timestamp": record.timestamp,
                 "created": record.created_at}[self.column]
        if self.low is not None and not value >= self.low:
            return False
        if self.high is not None:
            return value <= self.high if self.high_inclusive else value < self.high
        return True


@dataclass(frozen=True, slots=True)
class _AnyOf(_Predicate):
    field: str
    values: tuple[str, ...]
    every: bool = False     # all of the values (categories, entities) instead of any

    def mask(self, table: FilterTable) -> Mask:
        index = table.values_of(self.field)
        if self.every:
            return _all_of(table, [index.get(value, _NO_DOCS) for value in self.values])
        mask = np.zeros(table.capacity, dtype=np.bool_)
        for value in self.values:
            found = index.get(value)
            if found:
                mask[doc_array(found)] = True
        return mask

    def test(self, record: MemoryRecord) -> bool:
        value = record.scope_label if self.field == "scope" else getattr(record, self.field)
        have = set(value) if isinstance(value, tuple) else ({value} if value is not None else set())
        if self.every:
            return all(v in have for v in self.values)
        return any(v in have for v in self.values)


@dataclass(frozen=True, slots=True)
class _InCategories(_Predicate):
    """Categories held with a confidence of at least ``min_confidence`` (any of
    ``values``, or all of them; no values: any category but misc)."""

    values: tuple[str, ...]
    min_confidence: float
    every: bool = False

    def mask(self, table: FilterTable) -> Mask:
        names = self.values or tuple(name for name in table.values_of("categories") if name != "misc")
        sets = [table.category_docs(name, self.min_confidence) for name in names]
        if self.every:
            return _all_of(table, sets)
        mask = np.zeros(table.capacity, dtype=np.bool_)
        for docs in sets:
            if docs:
                mask[doc_array(docs)] = True
        return mask

    def test(self, record: MemoryRecord) -> bool:
        confidences = record.category_confidences
        held = {name for i, name in enumerate(record.categories)
                if (confidences[i] if i < len(confidences) else 1.0) >= self.min_confidence}
        if not self.values:
            return bool(held - {"misc"})
        if self.every:
            return all(v in held for v in self.values)
        return any(v in held for v in self.values)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "str"
    if value is None:
        return "null"
    return "json"


def _equal(a: Any, b: Any) -> bool:
    kind = _kind(a)
    if kind != _kind(b):
        return False
    if kind == "json":
        return bool(_normalised(a) == _normalised(b))
    return bool(a == b)


def _normalised(value: Any) -> Any:
    """JSON values compared structurally, booleans kept apart from numbers."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, Mapping):
        return ("object", tuple(sorted((str(k), _normalised(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("array", tuple(_normalised(v) for v in value))
    return (_kind(value), value)


def _ordered(op: str, have: Any, bound: Any) -> bool:
    kind = _kind(bound)
    if _kind(have) != kind:
        return False
    if op == "$gt":
        return bool(have > bound)
    if op == "$gte":
        return bool(have >= bound)
    if op == "$lt":
        return bool(have < bound)
    return bool(have <= bound)


@dataclass(frozen=True, slots=True)
class _Meta(_Predicate):
    key: str
    op: str
    operand: Any

    def _holds(self, present: bool, value: Any) -> bool:
        op, operand = self.op, self.operand
        if op == "$exists":
            return present is operand
        if op == "$ne":
            return not present or not _equal(value, operand)
        if op == "$nin":
            return not present or not any(_equal(value, o) for o in operand)
        if not present:
            return False
        if op == "$eq":
            return _equal(value, operand)
        if op == "$in":
            return any(_equal(value, o) for o in operand)
        return _ordered(op, value, operand)

    def mask(self, table: FilterTable) -> Mask:
        docs = table.metadata.get(self.key, {})
        hits = [doc for doc, value in docs.items() if self._holds(True, value)]
        mask = table.docs_mask(hits)
        if self._holds(False, None):  # memories without the key match too
            absent = table.live.copy()
            if docs:
                absent[np.fromiter(docs, dtype=np.int64, count=len(docs))] = False
            mask |= absent
        return mask

    def test(self, record: MemoryRecord) -> bool:
        present = self.key in record.metadata
        return self._holds(present, record.metadata.get(self.key))


@dataclass(frozen=True, slots=True)
class Filter:
    """A validated filter. ``mask(table)`` is a bool array over the table's doc ids
    (True = the memory passes; removed docs never do); ``matches(record)`` tests one
    record. An empty filter matches every memory."""

    predicates: tuple[_Predicate, ...]
    source: Mapping[str, Any]

    @property
    def is_empty(self) -> bool:
        return not self.predicates

    def mask(self, table: FilterTable) -> Mask:
        mask = table.live.copy()
        for predicate in self.predicates:
            mask &= predicate.mask(table)
            if not mask.any():
                break
        return mask

    def matches(self, record: MemoryRecord) -> bool:
        return all(predicate.test(record) for predicate in self.predicates)


_MATCH_ALL: Final = Filter((), MappingProxyType({}))
"""The filter of no filter (one for every search without one)."""


# -- validation ---------------------------------------------------------------------------
def _all_of(table: FilterTable, sets: Sequence[Docs]) -> Mask:
    """The docs in every one of ``sets`` (none when there is none), as a mask: one
    product of masks (a common value's DocBits reads as an array, not a set)."""
    if not sets or not all(sets):
        return np.zeros(table.capacity, dtype=np.bool_)
    mask = table.docs_mask(sets[0])
    for docs in sets[1:]:
        mask &= table.docs_mask(docs)
    return mask


def _fail(key: str, message: str) -> InvalidInput:
    return InvalidInput(f"filter {key}: {message}", field=f"filter.{key}")


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(key, f"{value!r} is not a finite number")
    return float(value)


def _time(key: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise _fail(key, f"{value!r} is neither seconds since the epoch nor an ISO 8601 time") from exc
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    return _number(key, value)


def _strings(key: str, value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise _fail(key, f"{value!r} must be a string or a non-empty list of strings")
    if len(items) > _MAX_LIST:
        raise _fail(key, f"a list of {len(items):,} values; the limit is {_MAX_LIST:,}")
    for item in items:
        if not isinstance(item, str):
            raise _fail(key, f"{item!r} is not a string")
    return tuple(dict.fromkeys(items))


def _set_predicate(key: str, value: Any, *, allow_all: bool) -> _AnyOf:
    if isinstance(value, Mapping):
        if len(value) != 1:
            raise _fail(key, f"{dict(value)!r} must have exactly one of $in, $all" if allow_all
                        else f"{dict(value)!r} must have exactly one operator, $in")
        ((op, operand),) = value.items()
        if op == "$in" or (op == "$any" and allow_all):
            return _AnyOf(key, _strings(key, operand))
        if op == "$all" and allow_all:
            return _AnyOf(key, _strings(key, operand), every=True)
        raise _fail(key, f"unknown operator {op!r}")
    return _AnyOf(key, _strings(key, value))


def _meta_predicates(value: Any) -> list[_Predicate]:
    if not isinstance(value, Mapping):
        raise _fail("metadata", f"{value!r} must be an object of key: value or key: {{operator: value}}")
    out: list[_Predicate] = []
    for key, condition in value.items():
        where = f"metadata.{key}"
        if not isinstance(key, str) or not key:
            raise _fail("metadata", f"key {key!r} must be a non-empty string")
        if isinstance(condition, Mapping) and condition and all(
                isinstance(k, str) and k.startswith("$") for k in condition):
            for op, operand in condition.items():
                if op not in _OPERATORS:
                    raise _fail(where, f"unknown operator {op!r}; use one of {', '.join(sorted(_OPERATORS))}")
                out.append(_Meta(key, op, _operand(where, op, operand)))
        else:
            out.append(_Meta(key, "$eq", _operand(where, "$eq", condition)))
    return out


def _operand(where: str, op: str, operand: Any) -> Any:
    if op == "$exists":
        if not isinstance(operand, bool):
            raise _fail(where, f"$exists takes true or false, not {operand!r}")
        return operand
    if op in ("$in", "$nin"):
        if not isinstance(operand, list | tuple):
            raise _fail(where, f"{op} takes a list, not {operand!r}")
        if len(operand) > _MAX_LIST:
            raise _fail(where, f"{op} has {len(operand):,} values; the limit is {_MAX_LIST:,}")
        return tuple(operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        kind = _kind(operand)
        if kind not in ("number", "str"):
            raise _fail(where, f"{op} compares numbers or strings, not {operand!r}")
        if kind == "number" and not math.isfinite(operand):
            raise _fail(where, f"{op} bound {operand!r} is not finite")
        return operand
    return operand


_RANGES: Final[dict[str, tuple[str, bool, bool]]] = {
    # key: (column, is lower bound, upper bound inclusive)
    "min_importance": ("importance", True, True),
    "max_importance": ("importance", False, True),
    "created_after": ("created", True, False),
    "created_before": ("created", False, False),
    "timestamp_after": ("timestamp", True, False),
    "timestamp_before": ("timestamp", False, False),
}


def compile_filter(spec: Mapping[str, Any] | None) -> Filter:
    """Validate ``spec`` (see the module doc) into a Filter; None or {} match everything.
    Raises InvalidInput naming the offending key."""
    if spec is None:
        return _MATCH_ALL
    if not isinstance(spec, Mapping):
        raise InvalidInput(f"a filter must be an object, got {type(spec).__name__}", field="filter")
    predicates: list[_Predicate] = []
    bounds: dict[str, list[float | None]] = {}
    for key, value in spec.items():
        if key not in FILTER_KEYS:
            raise InvalidInput(f"unknown filter key {key!r}; the keys are {', '.join(sorted(FILTER_KEYS))}",
                               field=f"filter.{key}")
        if value is None:
            continue
        if key in _RANGES:
            column, is_low, _ = _RANGES[key]
            parse: Callable[[str, Any], float] = _number if column == "importance" else _time
            bound = parse(key, value)
            low_high = bounds.setdefault(column, [None, None])
            low_high[0 if is_low else 1] = bound
        elif key in ("categories", "entities"):
            predicates.append(_set_predicate(key, value, allow_all=True))
        elif key == "min_category_confidence":
            continue  # read with categories, below
        elif key == "metadata":
            predicates.extend(_meta_predicates(value))
        else:
            predicates.append(_set_predicate(key, value, allow_all=False))
    for column, (low, high) in bounds.items():
        predicates.insert(0, _Range(column, low, high, high_inclusive=column == "importance"))
    least = spec.get("min_category_confidence")
    if least is not None:
        least = _number("min_category_confidence", least)
        if not 0.0 <= least <= 1.0:
            raise _fail("min_category_confidence", f"{least!r} is not in 0..1")
        at = next((i for i, p in enumerate(predicates) if isinstance(p, _AnyOf) and p.field == "categories"),
                  None)
        if at is None:
            predicates.append(_InCategories((), least))
        else:
            named = predicates[at]
            assert isinstance(named, _AnyOf)
            predicates[at] = _InCategories(named.values, least, named.every)
    return Filter(tuple(predicates), dict(spec))


_GETTERS: Final = {name: operator.attrgetter(name) for name in _SINGLE}


_ONE_DOC: dict[int, frozenset[int]] = {}
_ONE_DOC_MAX: Final = 1024  # the docs whose frozenset the process keeps (216 bytes each at most)


def _one_doc(doc: int) -> Docs:
    """What a value held by ``doc`` alone holds: the process's frozenset of it."""
    one = _ONE_DOC.get(doc)
    if one is None:
        if doc >= _ONE_DOC_MAX:
            return {doc}
        one = _ONE_DOC.setdefault(doc, frozenset((doc,)))
    return one


def _hold_values(table: dict[str, Docs], docs: list[int], values: list[str | None], capacity: int) -> None:
    """Put each doc in the set of its value (None: in none), each value's docs at once."""
    first = values[0]
    if values.count(first) == len(values):  # one value for all
        if first is not None:
            _hold_many(table, first, docs, capacity)
        return
    grouped: dict[str, list[int]] = {}
    for doc, value in zip(docs, values, strict=True):
        if value is not None:
            grouped.setdefault(value, []).append(doc)
    for value, holders in grouped.items():
        _hold_many(table, value, holders, capacity)


def _hold_many(table: dict[str, Docs], value: str, docs: list[int], capacity: int) -> None:
    """Put ``docs`` in the set of ``value`` (made, grown, or kept as bits: ``_held``)."""
    holders = table.get(value)
    if holders is None:
        holders = table[value] = _one_doc(docs[0]) if len(docs) == 1 else set(docs)
    elif isinstance(holders, set | DocBits):
        holders.update(docs)
    else:
        holders = table[value] = {*holders, *docs}
    if isinstance(holders, set):
        _held(table, value, holders, capacity)


def _held(table: dict[str, Docs], value: str, holders: set[int], capacity: int) -> None:
    """Keep a value's docs as a DocBits once it is common (see DocBits)."""
    if len(holders) >= _DENSE_MIN and len(holders) * _DENSE_SHARE >= capacity:
        table[value] = DocBits(holders)
