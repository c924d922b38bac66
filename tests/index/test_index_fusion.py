"""Rank fusion helpers: reciprocal rank fusion and calibrated score fusion."""

from __future__ import annotations

import pytest

from mnemex.errors import InvalidInput
from mnemex.index import normalize_scores, reciprocal_rank_fusion, weighted_score_fusion

BM25 = [(1, 12.0), (2, 6.0), (3, 3.0)]
VECTOR = [(3, 0.9), (4, 0.8), (1, 0.2)]


def test_rrf_sums_weighted_reciprocal_ranks() -> None:
    fused = dict(reciprocal_rank_fusion([BM25, VECTOR], k=60))
    assert fused[1] == pytest.approx(1 / 61 + 1 / 63)
    assert fused[3] == pytest.approx(1 / 63 + 1 / 61)
    assert fused[4] == pytest.approx(1 / 62)
    weighted = dict(reciprocal_rank_fusion([BM25, VECTOR], weights=[2.0, 0.5], k=0))
    assert weighted[2] == pytest.approx(2.0 / 2)
    assert weighted[4] == pytest.approx(0.5 / 2)


def test_rrf_orders_by_score_then_lower_id() -> None:
    assert [d for d, _ in reciprocal_rank_fusion([BM25, VECTOR])] == [1, 3, 2, 4]
    assert reciprocal_rank_fusion([BM25, VECTOR], top_k=2)[0][0] == 1
    assert reciprocal_rank_fusion([]) == []


@pytest.mark.parametrize(("method", "expected"), [
    ("minmax", [1.0, 1 / 3, 0.0]),
    ("zscore", [1.3363062095621219, -0.2672612419124244, -1.0690449676496976]),
])
def test_normalize_scores(method: str, expected: list[float]) -> None:
    got = normalize_scores(BM25, method)  # type: ignore[arg-type]
    assert [d for d, _ in got] == [1, 2, 3]
    assert [s for _, s in got] == pytest.approx(expected)


@pytest.mark.parametrize(("method", "value"), [("minmax", 1.0), ("zscore", 0.0)])
def test_normalize_equal_scores(method: str, value: float) -> None:
    assert normalize_scores([(1, 5.0), (2, 5.0)], method) == [(1, value), (2, value)]  # type: ignore[arg-type]


def test_weighted_fusion_gives_missing_documents_the_list_floor() -> None:
    fused = dict(weighted_score_fusion([BM25, VECTOR], weights=[1.0, 1.0]))
    assert fused[1] == pytest.approx(1.0 + 0.0)
    assert fused[2] == pytest.approx(1 / 3 + 0.0)
    assert fused[3] == pytest.approx(0.0 + 1.0)
    assert fused[4] == pytest.approx(0.0 + (0.8 - 0.2) / 0.7)
    assert [d for d, _ in weighted_score_fusion([BM25, VECTOR], weights=[1.0, 0.1])][:2] == [1, 2]
    z = dict(weighted_score_fusion([BM25, VECTOR], method="zscore"))
    assert z[4] == pytest.approx(min(s for _, s in normalize_scores(BM25, "zscore"))
                                 + dict(normalize_scores(VECTOR, "zscore"))[4])


@pytest.mark.parametrize("call", [
    lambda: reciprocal_rank_fusion([BM25], weights=[1.0, 2.0]),
    lambda: reciprocal_rank_fusion([BM25], weights=[-1.0]),
    lambda: reciprocal_rank_fusion([BM25], k=-1),
    lambda: reciprocal_rank_fusion([BM25], top_k=0),
    lambda: normalize_scores(BM25, "rank"),  # type: ignore[arg-type]
    lambda: normalize_scores([(1, float("nan"))]),
    lambda: weighted_score_fusion([BM25], weights=[float("inf")]),
])
def test_bad_arguments_are_refused(call: object) -> None:
    with pytest.raises(InvalidInput):
        call()  # type: ignore[operator]


def test_calibration_none_keeps_calibrated_scores_and_weights_them_to_a_mean() -> None:
    from mnemex.index import normalize_scores, weighted_score_fusion

    assert normalize_scores([(1, 0.9), (2, 0.2)], "none") == [(1, 0.9), (2, 0.2)]
    fused = dict(weighted_score_fusion([[(1, 0.9), (2, 0.2)], [(1, 0.1), (2, 0.8)]], [0.7, 0.3], method="none"))
    assert fused == {1: 0.7 * 0.9 + 0.3 * 0.1, 2: 0.7 * 0.2 + 0.3 * 0.8}
