"""The named memories a hybrid search over an HNSW graph reads by rounds
(``ranking._reaching_over_graph``, past ``ranking.NAMED_GATHERED`` of them): the best
by full-text score plus cosine are among those it reads, as if every named memory's
cosine had been read, and it stops reading once that is settled."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scope_support import Driver

from mnemex.index import VectorIndex
from mnemex.memories import ranking

DIM = 16
SIZE = 3000
COUNT = 30  # the expansion's candidates


@functools.cache
def graph() -> VectorIndex:
    """3,000 memories in 60 clusters, a third of them copies of another (equal
    cosines), under an HNSW graph whose beam covers them all (its lists exact), and
    every tenth doc id without a vector."""
    rng = np.random.default_rng(8)
    centres = rng.standard_normal((60, DIM))
    rows = centres[rng.integers(0, 60, SIZE)] + 0.3 * rng.standard_normal((SIZE, DIM))
    copies = rng.integers(0, SIZE, SIZE // 3)
    rows[rng.integers(0, SIZE, SIZE // 3)] = rows[copies]
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    index = VectorIndex(DIM, hnsw_threshold=500, ef_search=4000)
    docs = np.arange(SIZE * 10 // 9 + 1, dtype=np.int64)
    docs = docs[docs % 10 != 9][:SIZE]
    index.add_many(docs, rows.astype(np.float32))
    index.build_graph()
    assert index.mode == "hnsw"
    return index


def read_by_rounds(named: np.ndarray, score: np.ndarray, query: np.ndarray, allowed: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, ranking._Cosines]:
    """What the rounds read of ``named`` (those ``allowed`` among them, as a search
    filters them), the vector list being the search's of COUNT."""
    index = graph()
    cosines_of = ranking._Cosines(index, query / np.linalg.norm(query), None)
    nearest = index.search(query, COUNT, allowed)
    docs, scores, cosines = ranking._reaching_over_graph(named, score, cosines_of, index, query,
                                                         allowed=allowed, nearest=nearest, count=COUNT)
    return docs, scores, cosines, cosines_of


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), share=st.sampled_from([0.05, 0.3, 1.0]),
       levels=st.sampled_from([0, 3, 40]), words=st.integers(0, 80), kept=st.sampled_from([None, 0.5, 0.1]))
def test_the_best_of_those_read_are_the_best_of_every_named_memory(seed: int, share: float, levels: int,
                                                                   words: int, kept: float | None) -> None:
    """Named memories of every share of the scope (ids with and without vectors, and
    past the last), full-text scores on plateaus (``levels`` values; 0: all equal) with
    ``words`` memories above them, a filter that keeps ``kept`` of the memories
    (None: none): the best ``COUNT`` by score plus cosine among those read are the
    best among all of them (the same totals: equal totals may name either memory)."""
    rng = np.random.default_rng(seed)
    universe = np.arange(SIZE * 10 // 9 + 50, dtype=np.int64)
    named = np.sort(rng.choice(universe, max(1, int(len(universe) * share)), replace=False))
    allowed = None if kept is None else rng.random(len(universe) - 40) < kept
    if allowed is not None:  # (as a search filters them; the mask ends before the last ids)
        named = named[(named < len(allowed)) & allowed[np.minimum(named, len(allowed) - 1)]]
        assume(len(named) > 0)
    score = rng.integers(0, levels, len(named)) / 40 if levels else np.full(len(named), 0.1)
    score[rng.choice(len(named), min(words, len(named)), replace=False)] += rng.random(min(words, len(named)))
    query = rng.standard_normal(DIM).astype(np.float32)
    docs, scores, cosines, cosines_of = read_by_rounds(named, score, query, allowed)
    assert np.array_equal(docs, np.unique(docs)) and np.isin(docs, named).all()
    np.testing.assert_array_equal(scores, score[np.searchsorted(named, docs)])
    np.testing.assert_allclose(cosines, cosines_of(docs), rtol=0, atol=1e-6)
    every = score + cosines_of(named)
    best = np.sort(every)[::-1][:COUNT]
    found = np.sort(scores + cosines)[::-1][:COUNT]
    np.testing.assert_allclose(found, best, rtol=0, atol=1e-6)


def test_it_stops_once_the_best_are_settled() -> None:
    """Over every memory named, 40 of them matching the query's words well: the
    first round (30 by words, the vector list's 30) cannot settle the best, the
    second (120 by words) does, and nothing more is read."""
    rng = np.random.default_rng(3)
    named = np.arange(SIZE * 10 // 9 + 1, dtype=np.int64)
    score = np.full(len(named), 0.05)
    score[rng.choice(len(named), 40, replace=False)] = 0.9 + 0.1 * rng.random(40)
    docs, _, _, _ = read_by_rounds(named, score, rng.standard_normal(DIM).astype(np.float32))
    assert 4 * COUNT <= len(docs) <= 5 * COUNT


def test_past_the_last_round_the_best_of_those_read_stand(monkeypatch: pytest.MonkeyPatch) -> None:
    """One round that settles nothing reads no more than it asks for."""
    monkeypatch.setattr(ranking, "_REACH_STEPS", ((1, 0),))
    named = np.arange(SIZE * 10 // 9 + 1, dtype=np.int64)
    docs, _, _, _ = read_by_rounds(named, np.full(len(named), 0.1), np.ones(DIM, dtype=np.float32))
    assert COUNT <= len(docs) <= 2 * COUNT


def test_a_search_whose_named_memories_join_none_reads_none() -> None:
    """``expansion_candidates`` 0: the rounds are not run (their best 0 of many)."""
    driver = Driver(expansion=True, expansion_candidates=0, hnsw_threshold=50)
    for i in range(120):
        driver.remember(f"{'Caroline' if i % 2 else 'Melanie'}: I loved the lake trip {i}")[0]
    driver.run_jobs()
    assert driver.memory.vectors is not None and driver.memory.vectors.mode == "hnsw"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranking, "NAMED_GATHERED", 0)
        assert driver.search("What did Caroline love?", top_k=5, min_score=-1.0).hits
