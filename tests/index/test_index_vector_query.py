"""VectorIndex's short way for a query (``_as_query``: a float32 vector of the index's
dimension, what a search's plan decodes) against the general way every other vector
takes (``_as_matrix``: any array-like, any number of rows): the same checks, the same
errors, the same bits, so the same hits with the same scores; over random indexes
with tied vectors, removals and reused rows."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.index import VectorIndex

DIM = 24


def general(index: VectorIndex, vector: Any) -> np.ndarray:
    row: np.ndarray = index._as_matrix(vector, 1)[0]
    return row


def assert_same_bits(index: VectorIndex, vector: np.ndarray) -> None:
    short, long = index._as_query(vector), general(index, vector)
    assert short.dtype == long.dtype == np.float32
    assert short.shape == long.shape == (index.dim,)
    assert short.flags.c_contiguous
    assert short.tobytes() == long.tobytes()


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(DIM).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_a_query_of_about_unit_length_is_kept_or_rescaled_as_the_general_way_does() -> None:
    """Around the bound (|norm - 1| <= 1e-6 keeps the bits) in float32 steps."""
    index = VectorIndex(DIM)
    rng = np.random.default_rng(3)
    kept = rescaled = 0
    for _ in range(300):
        v = unit(rng)
        for steps in range(-24, 25):
            nudged = (v * np.float32(1.0 + steps * 2.0**-24)).astype(np.float32)
            assert_same_bits(index, nudged)
            if index._as_query(nudged) is nudged:
                kept += 1
            else:
                rescaled += 1
    assert kept and rescaled  # both sides of the bound were reached


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # (both ways square)
@pytest.mark.parametrize("scale", [0.0, 1e-30, 1e-20, 1e-3, 0.5, 2.0, 3.0, 1e10, 1e19, 1e20, 3e38])
def test_a_query_of_any_scale_gets_the_same_bits_both_ways(scale: float) -> None:
    """Zero, tiny (subnormal squares), large, and squares past float32's range."""
    index = VectorIndex(DIM)
    rng = np.random.default_rng(5)
    for _ in range(20):
        assert_same_bits(index, (unit(rng) * np.float32(scale)).astype(np.float32))


def test_a_query_that_is_a_view_or_of_another_type_is_checked_the_general_way() -> None:
    index = VectorIndex(DIM)
    rng = np.random.default_rng(7)
    wide = rng.standard_normal(2 * DIM).astype(np.float32)
    assert_same_bits(index, wide[::2])  # not contiguous
    v = unit(rng)
    for other in (v.astype(np.float64), v.tolist(), v[None, :]):
        assert index._as_query(other).tobytes() == general(index, other).tobytes()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_query_that_is_not_finite_is_refused_with_the_general_ways_error(bad: float) -> None:
    index = VectorIndex(DIM)
    v = np.ones(DIM, dtype=np.float32)
    v[5] = bad
    with pytest.raises(InvalidInput) as short:
        index._as_query(v)
    with pytest.raises(InvalidInput) as long:
        general(index, v)
    assert str(short.value) == str(long.value)


def test_a_query_of_another_dimension_is_refused_with_the_general_ways_error() -> None:
    index = VectorIndex(DIM)
    v = np.ones(DIM + 1, dtype=np.float32)
    with pytest.raises(InvalidInput) as short:
        index._as_query(v)
    with pytest.raises(InvalidInput) as long:
        general(index, v)
    assert str(short.value) == str(long.value)


def searches(index: VectorIndex, query: np.ndarray, top_k: int,
             allowed: set[int] | None) -> list[list[tuple[int, float]]]:
    """The same search by every way in: the short one, and the query as a list (general);
    unfiltered, by the shared product too (filtered, that one reads the full product's
    scores, which may differ in the last bit from the allowed rows' own product)."""
    out = [index.search(query, top_k, allowed), index.search(query.tolist(), top_k, allowed),
           index.exact_search(query, top_k, allowed), index.exact_search(query.tolist(), top_k, allowed)]
    if allowed is None:
        scores = index.exact_scores(query)
        assert scores is not None
        out.append(scores.search(top_k))
    return out


@given(st.data())
@settings(max_examples=120, deadline=None)
def test_searches_by_the_short_way_equal_the_general_way(data: Any) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    pool = [unit(rng) for _ in range(data.draw(st.integers(1, 6), label="distinct vectors"))]
    index = VectorIndex(DIM)
    live: dict[int, np.ndarray] = {}
    for doc in range(data.draw(st.integers(1, 60), label="docs")):
        vector = pool[int(rng.integers(len(pool)))] * np.float32(rng.choice([1.0, 2.5]))  # ties, any scale
        index.add(doc, vector)
        live[doc] = vector
    gone = data.draw(st.lists(st.sampled_from(sorted(live)), max_size=len(live), unique=True),
                     label="removed")
    for doc in gone:
        index.remove(doc)
        del live[doc]
    for doc in range(100, 100 + data.draw(st.integers(0, 20), label="added after")):  # rows reused
        vector = pool[int(rng.integers(len(pool)))]
        index.add(doc, vector)
        live[doc] = vector
    if not live:
        return
    for _ in range(3):
        query = (pool[int(rng.integers(len(pool)))] if rng.random() < 0.5 else unit(rng)) \
            * np.float32(rng.choice([1.0, 1.0 + 2.0**-22, 7.0]))
        top_k = data.draw(st.integers(1, 15), label="top_k")
        allowed = data.draw(st.sampled_from([None, "half", "none"]), label="allowed")
        ids = sorted(live)
        mask = None if allowed is None else set(ids[::2]) if allowed == "half" else set()
        found = searches(index, query.astype(np.float32), top_k, mask)
        first = found[0]
        for other in found[1:]:
            assert [(doc, np.float64(s).tobytes()) for doc, s in other] == \
                [(doc, np.float64(s).tobytes()) for doc, s in first]
        for (doc, score), (next_doc, next_score) in itertools.pairwise(first):
            assert score > next_score or (score == next_score and doc < next_doc)  # ties: lower id first
        want = len(live) if mask is None else len(mask)
        assert len(first) == min(top_k, want)
