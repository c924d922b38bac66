"""Rank fusion: combine the rankings of several searches into one.

Every function is pure and works on rankings: lists of (doc_id, score), best
first, ids distinct within a list. Results are sorted by fused score, highest
first, equal scores by lower id, so fusion is deterministic.

* :func:`reciprocal_rank_fusion` uses only ranks: robust when scores of the
  lists are on unrelated scales, blind to how much better the first hit is.
* :func:`weighted_score_fusion` calibrates each list's scores (min-max to
  0..1, or z-score) and sums them by weight: it keeps score gaps, so a lone
  strong hit stays strong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, TypeVar

from mnemex.errors import InvalidInput

__all__ = ["normalize_scores", "reciprocal_rank_fusion", "weighted_score_fusion"]

K = TypeVar("K", int, str)
Ranking = Sequence[tuple[K, float]]
Calibration = Literal["minmax", "zscore", "none"]


def reciprocal_rank_fusion(rankings: Sequence[Ranking[K]], weights: Sequence[float] | None = None,
                           k: float = 60.0, top_k: int | None = None) -> list[tuple[K, float]]:
    """Weighted reciprocal rank fusion: ``score(d) = sum_i w_i / (k + rank_i(d))``
    with ranks counted from 1; a list that misses d adds nothing."""
    weights = _weights(rankings, weights)
    if not (math.isfinite(k) and k >= 0):
        raise InvalidInput(f"k is {k}; it must be a finite number >= 0", field="k")
    fused: dict[K, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, (doc_id, _score) in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + weight / (k + rank)
    return _ranked(fused, top_k)


def normalize_scores(ranking: Ranking[K], method: Calibration = "minmax") -> list[tuple[K, float]]:
    """Scores of one ranking calibrated: ``minmax`` maps them to 0..1 (all equal ->
    all 1.0); ``zscore`` to (score - mean) / standard deviation (all equal -> 0.0);
    ``none`` keeps scores that are calibrated already (a scope's BM25 and cosine are).
    Order and ids are kept."""
    if method not in ("minmax", "zscore", "none"):
        raise InvalidInput(f"calibration method is {method!r}; use 'minmax', 'zscore' or 'none'",
                           field="method")
    if not ranking:
        return []
    if method == "none":
        return [(d, float(s)) for d, s in ranking]
    scores = [float(s) for _, s in ranking]
    if not all(math.isfinite(s) for s in scores):
        raise InvalidInput("scores must be finite", field="scores")
    if method == "minmax":
        low, high = min(scores), max(scores)
        span = high - low
        if span == 0:
            return [(d, 1.0) for d, _ in ranking]
        return [(d, (s - low) / span) for (d, _), s in zip(ranking, scores, strict=True)]
    mean = math.fsum(scores) / len(scores)
    spread = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / len(scores))
    if spread == 0:
        return [(d, 0.0) for d, _ in ranking]
    return [(d, (s - mean) / spread) for (d, _), s in zip(ranking, scores, strict=True)]


def weighted_score_fusion(rankings: Sequence[Ranking[K]], weights: Sequence[float] | None = None,
                          method: Calibration = "minmax",
                          top_k: int | None = None) -> list[tuple[K, float]]:
    """Calibrate each ranking (:func:`normalize_scores`), then sum by weight. A
    document missing from a list gets that list's lowest calibrated score (0 for
    min-max), i.e. it counts as no better than the worst hit that list returned."""
    weights = _weights(rankings, weights)
    calibrated = [normalize_scores(r, method) for r in rankings]
    fused: dict[K, float] = {}
    for ranking in calibrated:
        for doc_id, _ in ranking:
            fused.setdefault(doc_id, 0.0)
    for ranking, weight in zip(calibrated, weights, strict=True):
        if not ranking:
            continue
        floor = min(s for _, s in ranking)
        present = dict(ranking)
        for doc_id in fused:
            fused[doc_id] += weight * present.get(doc_id, floor)
    return _ranked(fused, top_k)


def _weights(rankings: Sequence[Ranking[K]], weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise InvalidInput(f"got {len(weights)} weights for {len(rankings)} rankings", field="weights")
    result = [float(w) for w in weights]
    if not all(math.isfinite(w) and w >= 0 for w in result):
        raise InvalidInput(f"weights {result} must be finite and >= 0", field="weights")
    return result


def _ranked(fused: dict[K, float], top_k: int | None) -> list[tuple[K, float]]:
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise InvalidInput(f"top_k is {top_k!r}; it must be an int >= 1 or None", field="top_k")
    ranked = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    return ranked if top_k is None else ranked[:top_k]
