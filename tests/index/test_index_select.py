"""The top-k cut every index's search ends with (index._select.top_k_by_score),
against a full sort: highest score first, equal scores by lower id, exact at the
cut, float32 scores cut as they are."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.index import _select
from mnemex.index._select import top_k_by_score


def by_full_sort(ids: list[int], scores: list[float], k: int) -> list[tuple[int, float]]:
    return sorted(zip(ids, scores, strict=True), key=lambda pair: (-pair[1], pair[0]))[:k]


# few distinct scores, so that ties at the cut are common
scores_of = st.sampled_from([-1.0, 0.0, 0.25, 0.5, 0.5000001, 1.0, 3.0]) | st.floats(-2, 2, width=32)


@given(st.lists(st.tuples(st.integers(0, 10_000), scores_of), max_size=60, unique_by=lambda p: p[0]),
       st.integers(1, 70), st.sampled_from([np.float64, np.float32]), st.randoms(use_true_random=False))
@settings(max_examples=400, deadline=None)
def test_the_top_k_are_those_of_a_full_sort_ties_by_lower_id(pairs: list[tuple[int, float]], k: int,
                                                            dtype: type, rng: object) -> None:
    pairs = list(pairs)
    rng.shuffle(pairs)  # type: ignore[attr-defined]  # ids in no order
    ids = np.array([i for i, _ in pairs], dtype=np.int64)
    scores = np.array([s for _, s in pairs], dtype=dtype)
    got = top_k_by_score(ids, scores, k)
    # the scores as the cut sees them (float32 ones widened afterwards)
    expected = by_full_sort(ids.tolist(), scores.astype(np.float64).tolist(), k)
    assert got == expected
    assert all(type(doc) is int and type(score) is float for doc, score in got)


def test_many_ties_at_the_cut_keep_the_lowest_ids() -> None:
    ids = np.arange(1000, 0, -1, dtype=np.int64)
    scores = np.zeros(1000, dtype=np.float32)
    scores[::100] = 1.0  # ten above the cut
    got = top_k_by_score(ids, scores, 15)
    assert [doc for doc, _ in got[:10]] == sorted(ids[::100].tolist())
    assert [doc for doc, _ in got[10:]] == [1, 2, 3, 4, 5]
    assert [score for _, score in got] == [1.0] * 10 + [0.0] * 5


@given(st.lists(st.tuples(st.integers(0, 100_000), scores_of), min_size=200, max_size=700,
                unique_by=lambda p: p[0]),
       st.integers(1, 40), st.sampled_from([np.float64, np.float32]))
@settings(max_examples=100, deadline=None)
def test_the_top_k_of_many_are_those_of_a_full_sort_either_side_of_sorting_them_all(
        pairs: list[tuple[int, float]], k: int, dtype: type) -> None:
    ids = np.array([i for i, _ in pairs], dtype=np.int64)
    scores = np.array([s for _, s in pairs], dtype=dtype)
    assert top_k_by_score(ids, scores, k) == by_full_sort(ids.tolist(), scores.astype(np.float64).tolist(), k)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 6), st.integers(1, 40), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_positive_slots_hold_every_slot_of_the_best(levels: int, count: int, share: float, seed: int) -> None:
    """Over many slots (a bound read off a sample), as over few: every slot whose
    value is among the ``count`` highest positive ones, ties at the cut included, and
    no slot that is not positive."""
    rng = np.random.default_rng(seed)
    size = _select.SAMPLED_FROM + int(rng.integers(0, 5000))
    # few distinct values (many ties), some zero, a share positive
    values = rng.integers(0, levels + 1, size=size).astype(np.float64) * (rng.random(size) < share)
    found = _select.positive_slots(values, count)
    assert np.all(np.diff(found) > 0) and np.all(values[found] > 0)
    positive = np.flatnonzero(values > 0)
    if len(positive):
        kth = np.sort(values[positive])[::-1][min(count, len(positive)) - 1]
        assert set(np.flatnonzero(values >= kth).tolist()) <= set(found.tolist())
    small = values[: _select.SAMPLED_FROM - 1]
    np.testing.assert_array_equal(_select.positive_slots(small, count), np.flatnonzero(small > 0))
