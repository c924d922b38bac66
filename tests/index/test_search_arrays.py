"""A vector search's hits as arrays (``VectorIndex.search_arrays``, ``top_k_arrays``)
against the pairs ``search`` and ``top_k_by_score`` give: the same ids in the same
order and the same cosines to the bit, over small exact indexes with ties, removals
and reused rows, filters, the coarse pass and a graph; the same refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.index import VectorIndex, _coarse
from mnemex.index._select import _SORT_ALL, pairs_as_arrays, top_k_arrays, top_k_by_score

DIM = 8


def unit_rows(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def assert_same(index: VectorIndex, query: np.ndarray, top_k: int, allowed: object = None) -> None:
    pairs = index.search(query, top_k, allowed)  # type: ignore[arg-type]
    ids, cosines = index.search_arrays(query, top_k, allowed)  # type: ignore[arg-type]
    assert ids.dtype == np.int64 and cosines.dtype == np.float64
    assert ids.tolist() == [doc for doc, _ in pairs]
    assert cosines.tobytes() == np.array([cosine for _, cosine in pairs], dtype=np.float64).tobytes()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), copies=st.integers(0, 5),
       removed=st.integers(0, 20), top_k=st.integers(1, 70), filtered=st.booleans())
def test_search_arrays_are_searchs_pairs(*, seed: int, n: int, copies: int, removed: int, top_k: int,
                                         filtered: bool) -> None:
    rng = np.random.default_rng(seed)
    index = VectorIndex(DIM)
    rows = unit_rows(rng, n)
    if n and copies:  # tied vectors: equal cosines go by lower id
        rows = np.concatenate([rows, np.repeat(rows[:1], copies, axis=0)])
    docs = rng.permutation(len(rows) * 3)[: len(rows)]
    if len(rows):
        index.add_many(docs.tolist(), rows)
    for doc in docs[:removed].tolist():
        index.remove(doc)
    if len(rows) > removed:  # rows freed by the removals taken again
        index.add_many([len(rows) * 3 + 1], unit_rows(rng, 1))
    query = unit_rows(rng, 1)[0] if rng.random() < 0.8 else rows[0] if len(rows) else unit_rows(rng, 1)[0]
    allowed = set(rng.choice(len(rows) * 3 + 2, size=len(rows) // 2 + 1).tolist()) if filtered else None
    assert_same(index, query, top_k, allowed)
    assert_same(index, (query * 3).tolist(), top_k, allowed)  # not of unit length: normalised alike


def test_search_arrays_through_the_coarse_pass_and_a_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    monkeypatch.setattr(_coarse, "MIN_VALUES", 40 * DIM)
    index = VectorIndex(DIM, hnsw_threshold=10_000)
    index.add_many(list(range(300)), unit_rows(rng, 300))
    for query in unit_rows(rng, 5):
        assert_same(index, query, 10)
    graph = VectorIndex(DIM, hnsw_threshold=50, ef_search=64)
    graph.add_many(list(range(200)), unit_rows(rng, 200))
    assert graph.mode == "hnsw"
    for query in unit_rows(rng, 5):
        assert_same(graph, query, 10)
        assert_same(graph, query, 10, set(range(0, 200, 3)))


def test_search_arrays_refuse_what_search_refuses() -> None:
    index = VectorIndex(DIM)
    index.add_many([1, 2], unit_rows(np.random.default_rng(1), 2))
    for vector, top_k in (([1.0] * (DIM - 1), 10), ([float("nan")] * DIM, 10), ([1.0] * DIM, 0),
                          ([1.0] * DIM, True)):
        with pytest.raises(InvalidInput) as want:
            index.search(vector, top_k)
        with pytest.raises(InvalidInput) as got:
            index.search_arrays(vector, top_k)
        assert str(got.value) == str(want.value)
    empty = VectorIndex(DIM)
    ids, cosines = empty.search_arrays([1.0] * DIM)
    assert ids.tolist() == [] and cosines.tolist() == []
    with pytest.raises(InvalidInput):
        empty.search_arrays([1.0] * DIM, 0)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 2 * _SORT_ALL), k=st.integers(1, 30),
       levels=st.integers(1, 50), wide=st.booleans())
def test_top_k_arrays_are_the_pairs_of_top_k_by_score(seed: int, n: int, k: int, levels: int,
                                                      wide: bool) -> None:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(3 * n + 1)[:n].astype(np.int64)
    scores = (rng.integers(0, levels, n) / levels).astype(np.float64 if wide else np.float32)
    best, values = top_k_arrays(ids, scores, k)
    pairs = top_k_by_score(ids, scores, k)
    assert values.dtype == np.float64
    assert list(zip(best.tolist(), values.tolist(), strict=True)) == pairs
    back_ids, back_values = pairs_as_arrays(pairs)
    assert back_ids.tolist() == best.tolist() and back_values.tobytes() == values.tobytes()
