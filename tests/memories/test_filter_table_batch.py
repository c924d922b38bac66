"""FilterTable.add_many files a batch's docs field by field (issue 17, ingest speed):
a value every memory of the batch shares joins its set in one update. What it
holds must be what filing each memory by itself, field after field, holds: the
same values in the same order (category listings read that order), the same sets,
confidences and metadata, batch after batch."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.memories.fields import record_of
from mnemex.memories.filters import DocBits, FilterTable, doc_array
from mnemex.memories.protocol import MemoryRecord, NewMemory

SINGLE = ("session_id", "actor_id", "author", "kind", "attributed_to")


def one_by_one(table: FilterTable, doc: int, record: MemoryRecord) -> None:
    """The plain filing of one memory (the columns are left to add_many)."""
    for name in SINGLE:
        value = getattr(record, name)
        if value is not None:
            table.fields.setdefault(name, {}).setdefault(value, set()).add(doc)
    for name, values in (("categories", record.categories), ("entities", record.entities)):
        for value in values:
            table.fields.setdefault(name, {}).setdefault(value, set()).add(doc)
    table.fields.setdefault("scope", {}).setdefault(record.scope_label, set()).add(doc)
    for category, confidence in zip(record.categories, record.category_confidences, strict=False):
        if confidence < 1.0:
            table.category_confidence.setdefault(category, {})[doc] = confidence
    for key, value in record.metadata.items():
        table.metadata.setdefault(key, {})[doc] = value


def held(table: FilterTable) -> Any:
    return ({name: [(value, sorted(docs)) for value, docs in values.items()]
             for name, values in table.fields.items()},
            {name: list(docs.items()) for name, docs in table.category_confidence.items()},
            {name: list(docs.items()) for name, docs in table.metadata.items()})


LABELS = st.sampled_from([None, "ann", "bob", "s1"])
MEMORY = st.fixed_dictionaries({
    "author": LABELS, "session_id": LABELS, "actor_id": LABELS, "attributed_to": LABELS,
    "kind": st.sampled_from([None, "fact", "event"]),
    "categories": st.lists(st.sampled_from(["hobbies", "work", "misc"]), max_size=3, unique=True).map(tuple),
    "entities": st.lists(st.sampled_from(["Anna", "Paris"]), max_size=2, unique=True).map(tuple),
    "scope": st.sampled_from([None, ("campaign", "ash"), ("actor", "gandros")]),
    "metadata": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(MEMORY, min_size=1, max_size=6), min_size=1, max_size=4), st.booleans())
def test_a_batch_is_filed_as_each_memory_by_itself(batches: list[list[dict[str, Any]]], same: bool) -> None:
    batched, single = FilterTable(), FilterTable()
    doc = 0
    for drawn in batches:
        # (same: a batch whose fields all agree, the one-update path for every field)
        batch = [drawn[0]] * len(drawn) if same else drawn
        items = []
        for fields in batch:
            scope = fields["scope"]
            memory = NewMemory(
                id=f"m{doc:04d}", content=f"memory {doc}", author=fields["author"],
                session_id=fields["session_id"], actor_id=fields["actor_id"],
                attributed_to=fields["attributed_to"], kind=fields["kind"], categories=fields["categories"],
                entities=fields["entities"], metadata=fields["metadata"],
                scope_kind=scope[0] if scope else None, scope_id=scope[1] if scope else None)
            record = record_of(memory, 1000.0 + doc, 10_240, 10_240)
            if record.categories:
                record = msgspec.structs.replace(record, category_confidences=(0.5,) * len(record.categories))
            items.append((doc, record))
            doc += 1
        batched.add_many(items)
        for at, record in items:
            one_by_one(single, at, record)
    assert held(batched) == held(single)


def test_the_columns_are_views_of_two_arrays_that_grow_and_keep_their_rows() -> None:
    table = FilterTable()
    assert table.capacity == 0 and table.fields == {} and table.values_of("author") == {}
    assert len(table.live) == len(table.importance) == len(table.valid_until) == 0
    records = [MemoryRecord(id=f"m{doc}", content=f"memory {doc}", importance=doc / 10, timestamp=100.0 + doc,
                            created_at=200.0 + doc, valid_at=None if doc % 2 else 50.0 + doc,
                            invalid_at=300.0 + doc if doc == 3 else None, author="ann" if doc == 5 else None,
                            status="merged" if doc == 7 else "active")
               for doc in range(9)]
    for doc, record in enumerate(records):  # one at a time: the arrays grow 4, 8, 16
        table.add(doc, record)
    assert table.capacity == 16 and sorted(table.fields) == ["author", "kind", "scope"]
    assert table.values_of("author") == {"ann": {5}} and table.values_of("session_id") == {}
    assert table.live.tolist() == [True] * 9 + [False] * 7
    assert table.active.tolist() == [doc != 7 for doc in range(9)] + [False] * 7
    assert table.merged.tolist() == [doc == 7 for doc in range(9)] + [False] * 7
    assert table.inactive == 1
    assert table.importance[:9].tolist() == [doc / 10 for doc in range(9)]
    assert table.timestamp[:9].tolist() == [100.0 + doc for doc in range(9)]
    assert table.created[:9].tolist() == [200.0 + doc for doc in range(9)]
    assert table.valid_from[:9].tolist() == [100.0 + doc if doc % 2 else 50.0 + doc for doc in range(9)]
    assert table.valid_until[:9].tolist() == [300.0 + doc if doc == 3 else float("inf") for doc in range(9)]
    table.remove(7, records[7])
    table.remove(5, records[5])
    assert table.inactive == 0 and table.values_of("author") == {}
    assert np.flatnonzero(table.live).tolist() == [0, 1, 2, 3, 4, 6, 8]
    assert table.visible() is None  # every live memory is active again
    as_of = table.visible(as_of=303.5)  # doc 3 was invalid from 303
    assert as_of is not None and np.flatnonzero(as_of).tolist() == [0, 1, 2, 4, 6, 8]


def test_a_value_of_one_doc_shares_its_frozenset_until_a_second_doc_holds_it() -> None:
    first, second = FilterTable(), FilterTable()
    records = [MemoryRecord(id=f"m{doc}", content=f"memory {doc}", author="ann", entities=("Lisbon",))
               for doc in range(3)]
    first.add(0, records[0])
    second.add_many([(0, records[0])])
    assert first.values_of("author")["ann"] is second.values_of("author")["ann"] == frozenset({0})
    assert first.values_of("entities")["Lisbon"] is second.values_of("entities")["Lisbon"]
    first.add(1, records[1])  # a second doc: a set of the value's own
    second.add_many([(1, records[1]), (2, records[2])])
    assert first.values_of("author") == {"ann": {0, 1}} and isinstance(first.values_of("author")["ann"], set)
    assert second.values_of("entities") == {"Lisbon": {0, 1, 2}}
    third = FilterTable()
    third.add(0, records[0])
    assert third.values_of("author")["ann"] == frozenset({0})  # the shared one is as it was
    third.remove(0, records[0])
    assert third.values_of("author") == {} and third.values_of("entities") == {}
    far = FilterTable()
    far.add(5000, records[0])  # (past the docs whose frozenset the process keeps: a set)
    assert far.values_of("author") == {"ann": {5000}} and isinstance(far.values_of("author")["ann"], set)


_SET_OPS = st.lists(st.tuples(st.sampled_from(["add", "discard", "update"]),
                              st.lists(st.integers(0, 70), min_size=1, max_size=5)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(_SET_OPS, st.sets(st.integers(0, 80), max_size=10))
def test_doc_bits_answer_as_a_set(ops: list[tuple[str, list[int]]], other: set[int]) -> None:
    bits, model = DocBits([3, 1]), {1, 3}
    for op, docs in ops:
        if op == "update":
            bits.update(docs)
            model.update(docs)
        else:
            for doc in docs:
                getattr(bits, op)(doc)
                getattr(model, op)(doc)
        assert len(bits) == len(model) and list(bits) == sorted(model) and bool(bits) == bool(model)
    assert all((doc in bits) == (doc in model) for doc in range(-2, 90)) and "1" not in bits
    assert set(bits - other) == model - other and isinstance(bits - other, DocBits)
    assert bits & other == model & other and other & bits == model & other
    assert bits | other == model | other and other | bits == model | other
    assert other - bits == other - model and bits == model
    grown = set(other)
    grown |= bits
    assert grown == model | other
    assert doc_array(bits).tolist() == sorted(model) == sorted(doc_array(set(model)).tolist())


def test_doc_bits_refuse_what_is_no_doc_id_and_clear_at_once() -> None:
    bits = DocBits([0, 1, 2, 5])
    assert True not in bits and np.int64(5) in bits
    bits.discard(True)  # type: ignore[arg-type]
    assert list(bits) == [0, 1, 2, 5]
    with pytest.raises(TypeError):
        bits.add(True)  # type: ignore[arg-type]
    assert set(bits - {np.int64(2), True, "x"}) == {0, 1, 5}
    kept = DocBits([1, 3, 5])
    kept &= {np.int64(3)}
    assert set(kept) == {3}
    assert bits.pop() == 0 and list(bits) == [1, 2, 5]
    bits.clear()
    assert len(bits) == 0 and not bits and list(bits) == []
    with pytest.raises(KeyError):
        bits.pop()
