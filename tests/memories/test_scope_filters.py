"""The filter language: validation errors name the key, and the mask the indexes get
is exactly the brute-force ``matches`` over every record."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.memories import filters as filters_module
from mnemex.memories.filters import FilterTable, compile_filter
from mnemex.memories.protocol import MemoryRecord

labels = st.sampled_from(["a", "b", "c", "Paris", "New York"])
meta_values = st.one_of(st.integers(-3, 3), st.floats(-3, 3, allow_nan=False), st.booleans(),
                        st.sampled_from(["x", "y", "z"]), st.none(), st.lists(st.integers(0, 2), max_size=2))


@st.composite
def records(draw: Any, doc: int) -> MemoryRecord:
    return MemoryRecord(
        id=f"m{doc}", content=f"memory {doc}",
        author=draw(st.sampled_from([None, "user", "model"])),
        timestamp=float(draw(st.integers(0, 10))), created_at=float(draw(st.integers(0, 10))),
        importance=draw(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])),
        session_id=draw(st.sampled_from([None, "s1", "s2"])), actor_id=draw(st.sampled_from([None, "a1"])),
        categories=(categories := tuple(draw(st.lists(labels, max_size=3, unique=True)))),
        category_confidences=tuple(draw(st.sampled_from([1.0, 0.8, 0.4])) for _ in categories)
        if draw(st.booleans()) else (),
        entities=tuple(draw(st.lists(labels, max_size=2, unique=True))),
        metadata=draw(st.dictionaries(st.sampled_from(["k", "n", "flag"]), meta_values, max_size=3)),
    )


operators = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"])


@st.composite
def filters(draw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["min_importance"] = draw(st.sampled_from([0.0, 0.3, 0.5, 1.0]))
    if draw(st.booleans()):
        spec[draw(st.sampled_from(["created_after", "timestamp_after"]))] = float(draw(st.integers(0, 10)))
    if draw(st.booleans()):
        spec[draw(st.sampled_from(["created_before", "timestamp_before"]))] = float(draw(st.integers(0, 10)))
    if draw(st.booleans()):
        spec[draw(st.sampled_from(["session_id", "author", "actor_id"]))] = draw(
            st.one_of(st.sampled_from(["s1", "user", "a1"]), st.lists(st.sampled_from(["s2", "model"]),
                                                                      min_size=1, max_size=2)))
    if draw(st.booleans()):
        key = draw(st.sampled_from(["categories", "entities"]))
        values = draw(st.lists(labels, min_size=1, max_size=2))
        spec[key] = draw(st.sampled_from([values, {"$all": values}, {"$in": values}, values[0]]))
    if draw(st.booleans()):
        spec["min_category_confidence"] = draw(st.sampled_from([0.0, 0.5, 0.9]))
    if draw(st.booleans()):
        conditions: dict[str, Any] = {}
        for key in draw(st.lists(st.sampled_from(["k", "n", "flag"]), max_size=2, unique=True)):
            op = draw(operators)
            if op == "$exists":
                operand: Any = draw(st.booleans())
            elif op in ("$in", "$nin"):
                operand = draw(st.lists(meta_values, max_size=3))
            elif op in ("$gt", "$gte", "$lt", "$lte"):
                operand = draw(st.one_of(st.integers(-3, 3), st.sampled_from(["x", "y"])))
            else:
                operand = draw(meta_values)
            bare = draw(st.booleans()) and op == "$eq"
            conditions[key] = operand if bare else {op: operand}
        spec["metadata"] = conditions
    return spec


@settings(max_examples=300)
@given(data=st.data())
def test_the_mask_is_exactly_the_brute_force_match(data: Any) -> None:
    _mask_is_brute_force(data)


@settings(max_examples=200)
@given(data=st.data())
def test_common_values_kept_as_doc_bits_mask_the_same(data: Any) -> None:
    # every value held by two docs or more is a DocBits here (at scale: 1 in 32 of them)
    dense_min, dense_share = filters_module._DENSE_MIN, filters_module._DENSE_SHARE
    filters_module._DENSE_MIN, filters_module._DENSE_SHARE = 2, 10**9
    try:
        table = _mask_is_brute_force(data)
    finally:
        filters_module._DENSE_MIN, filters_module._DENSE_SHARE = dense_min, dense_share
    assert all(type(docs) is not set for values in table.fields.values() for docs in values.values())


def _mask_is_brute_force(data: Any) -> FilterTable:
    table = FilterTable()
    live: dict[int, MemoryRecord] = {}
    for doc in range(data.draw(st.integers(0, 25), label="docs")):
        record = data.draw(records(doc))
        table.add(doc, record)
        live[doc] = record
    removed = data.draw(st.lists(st.sampled_from(sorted(live)), unique=True), label="removed") if live else []
    for doc in removed:
        table.remove(doc, live.pop(doc))
    spec = data.draw(filters(), label="filter")
    compiled = compile_filter(spec)
    mask = compiled.mask(table)
    got = set(np.flatnonzero(mask).tolist())
    assert got == {doc for doc, record in live.items() if compiled.matches(record)}
    least = data.draw(st.sampled_from([0.0, 0.5]), label="min_confidence")
    for name in ("a", "b", "Paris"):
        assert set(table.category_docs(name, least)) == {
            doc for doc, record in live.items() for at, held in enumerate(record.categories)
            if held == name and (record.category_confidences[at] if record.category_confidences else 1.0) >= least}
    return table


def test_booleans_are_not_numbers_and_types_never_mix() -> None:
    table = FilterTable()
    rows = [{"v": True}, {"v": 1}, {"v": "1"}, {"v": 1.0}, {}]
    for doc, metadata in enumerate(rows):
        table.add(doc, MemoryRecord(id=str(doc), content="x", metadata=metadata))

    def docs(spec: dict[str, Any]) -> list[int]:
        return np.flatnonzero(compile_filter({"metadata": spec}).mask(table)).tolist()

    assert docs({"v": 1}) == [1, 3]
    assert docs({"v": True}) == [0]
    assert docs({"v": {"$gt": 0}}) == [1, 3]
    assert docs({"v": {"$gte": "0"}}) == [2]
    assert docs({"v": {"$ne": 1}}) == [0, 2, 4]          # as in MongoDB, missing keys match $ne
    assert docs({"v": {"$exists": False}}) == [4]
    assert docs({"v": {"$in": [True, "1"]}}) == [0, 2]


def test_times_may_be_iso_strings() -> None:
    table = FilterTable()
    table.add(0, MemoryRecord(id="old", content="x", timestamp=1_700_000_000.0))
    table.add(1, MemoryRecord(id="new", content="y", timestamp=1_750_000_000.0))
    mask = compile_filter({"timestamp_after": "2024-01-01T00:00:00Z"}).mask(table)
    assert np.flatnonzero(mask).tolist() == [1]
    mask = compile_filter({"timestamp_before": "2024-01-01"}).mask(table)
    assert np.flatnonzero(mask).tolist() == [0]


@pytest.mark.parametrize(
    ("spec", "match", "field"),
    [
        ({"colour": "red"}, "unknown filter key 'colour'", "filter.colour"),
        ({"min_importance": "high"}, "not a finite number", "filter.min_importance"),
        ({"created_after": "yesterday"}, "neither seconds", "filter.created_after"),
        ({"session_id": 3}, "must be a string or a non-empty list", "filter.session_id"),
        ({"session_id": []}, "non-empty list", "filter.session_id"),
        ({"categories": {"$some": ["a"]}}, "unknown operator", "filter.categories"),
        ({"author": {"$all": ["a"]}}, "unknown operator", "filter.author"),
        ({"metadata": {"k": {"$regex": "a"}}}, "unknown operator '\\$regex'", "filter.metadata.k"),
        ({"metadata": {"k": {"$in": "abc"}}}, "takes a list", "filter.metadata.k"),
        ({"metadata": {"k": {"$gt": [1]}}}, "compares numbers or strings", "filter.metadata.k"),
        ({"metadata": {"k": {"$exists": 1}}}, "true or false", "filter.metadata.k"),
        ({"metadata": ["k"]}, "must be an object", "filter.metadata"),
    ],
)
def test_malformed_filters_name_the_key(spec: dict[str, Any], match: str, field: str) -> None:
    with pytest.raises(mnemex.InvalidInput, match=match) as caught:
        compile_filter(spec)
    assert caught.value.field == field


def test_no_filter_matches_everything() -> None:
    assert compile_filter(None).is_empty and compile_filter({}).is_empty
    assert compile_filter({"author": None}).is_empty
    with pytest.raises(mnemex.InvalidInput, match="must be an object"):
        compile_filter(["author"])  # type: ignore[arg-type]
