"""Shared pieces of every index: argument checks, the ``allowed`` filter, top-k.

Documents are dense non-negative ``int`` ids (below 2**31, so postings fit in
int32). ``allowed`` restricts a search to some documents and is applied inside
the search, before the cut to top_k. It is either ``None`` (everything), a
numpy bool mask indexed by doc id (ids past its end are not allowed), or a
collection of ids (a set, frozenset, list, range or integer numpy array).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from collections.abc import Set as AbstractSet
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from mnemex.errors import InvalidInput, NotFound

__all__ = ["MAX_DOC_ID", "Allowed", "allowed_ids", "allowed_mask", "check_doc_id", "check_top_k",
           "pairs_as_arrays", "positive_slots", "top_k_arrays", "top_k_by_score"]

MAX_DOC_ID = 2**31 - 1

Allowed: TypeAlias = npt.NDArray[np.bool_] | npt.NDArray[np.integer[Any]] | Collection[int] | None

BoolArray: TypeAlias = npt.NDArray[np.bool_]
IdArray: TypeAlias = npt.NDArray[np.int64]
FloatArray: TypeAlias = npt.NDArray[np.float64]


def check_doc_id(doc_id: object) -> int:
    """The doc id as an int, or InvalidInput naming what is wrong with it."""
    if isinstance(doc_id, bool) or not isinstance(doc_id, int | np.integer):
        raise InvalidInput(f"doc_id must be an int, got {type(doc_id).__name__}", field="doc_id")
    value = int(doc_id)
    if not 0 <= value <= MAX_DOC_ID:
        raise InvalidInput(f"doc_id is {value}; it must be in 0..{MAX_DOC_ID}", field="doc_id")
    return value


def doc_slot(doc_id: object) -> int | None:
    """``doc_id`` as an int when it names a doc id (an int or numpy integer >= 0,
    not a bool), else None: what a membership test reads, where a bool would
    index a whole numpy array as a mask."""
    if isinstance(doc_id, bool) or not isinstance(doc_id, int | np.integer) or doc_id < 0:
        return None
    return int(doc_id)


def members(docs: npt.NDArray[np.int64], ascending: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """For each of ``docs``, whether ``ascending`` (sorted doc ids) holds it."""
    if not len(ascending):
        return np.zeros(len(docs), dtype=np.bool_)
    at = np.minimum(np.searchsorted(ascending, docs), len(ascending) - 1)
    out: npt.NDArray[np.bool_] = ascending[at] == docs
    return out


def check_top_k(top_k: object) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or int(top_k) < 1:
        raise InvalidInput(f"top_k is {top_k!r}; it must be an int >= 1", field="top_k")
    return int(top_k)


def check_finite(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise InvalidInput(f"{name} must be a number, got {type(value).__name__}", field=name)
    result = float(value)
    if not math.isfinite(result):
        raise InvalidInput(f"{name} is {result}; it must be finite", field=name)
    return result


def missing(doc_id: int, what: str) -> NotFound:
    return NotFound(f"doc {doc_id} is not in the {what}")


def allowed_mask(allowed: Allowed, size: int) -> BoolArray | None:
    """``allowed`` as a bool mask of exactly ``size`` entries (None stays None)."""
    if allowed is None:
        return None
    if isinstance(allowed, np.ndarray) and allowed.dtype == np.bool_:
        if allowed.ndim != 1:
            raise InvalidInput("allowed mask must be one-dimensional", field="allowed")
        if len(allowed) >= size:
            return np.asarray(allowed[:size], dtype=np.bool_)
        mask = np.zeros(size, dtype=np.bool_)
        mask[: len(allowed)] = allowed
        return mask
    ids = allowed_ids(allowed)
    mask = np.zeros(size, dtype=np.bool_)
    mask[ids[ids < size]] = True
    return mask


def allowed_ids(allowed: Allowed) -> IdArray:
    """``allowed`` (not None) as an array of distinct non-negative doc ids (sorted
    unless it came as a set)."""
    if allowed is None:
        raise InvalidInput("allowed is None", field="allowed")
    if isinstance(allowed, np.ndarray):
        if allowed.dtype == np.bool_:
            return np.flatnonzero(allowed).astype(np.int64)
        if not np.issubdtype(allowed.dtype, np.integer):
            raise InvalidInput(f"allowed array must be bool or integer, not {allowed.dtype}",
                               field="allowed")
        ids = np.unique(allowed.astype(np.int64).ravel())
    else:
        try:
            ids = np.fromiter(allowed, dtype=np.int64, count=len(allowed))
            if not isinstance(allowed, AbstractSet | range):
                ids = np.unique(ids)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInput("allowed must hold int doc ids", field="allowed") from exc
    return ids[ids >= 0]


_SORT_ALL = 256
"""Scores up to which ``top_k_by_score`` sorts them all rather than cutting at the
k-th first (the same pairs: the cut only spares the sort work; measured, sorting
100 takes about two thirds of the time of the cut and the sort of what it keeps)."""


SAMPLED_FROM = 65_536
"""Slots from which :func:`positive_slots` reads a bound off a sample first."""
_SAMPLE_EVERY = 16


def positive_slots(values: FloatArray, count: int) -> IdArray:
    """Ascending slots of ``values`` that hold every one of the ``count`` highest
    positive values (and every value tied with the lowest of those): the positive
    slots, or, over many slots, only those at least the ``count``-th highest value of
    every 16th slot when that is positive (no higher than the ``count``-th highest of
    all). Over 1,000,000 BM25 scores, half of them positive, the slots of a top 30 are
    then a few hundred, not the 500,000 positive ones a partition and gathers read."""
    if len(values) >= SAMPLED_FROM and count > 0:
        sample = values[::_SAMPLE_EVERY]
        if len(sample) > count:
            bound = np.partition(sample, len(sample) - count)[len(sample) - count]
            if bound > 0:
                return np.flatnonzero(values >= bound)
    return np.flatnonzero(values > 0)


def top_k_by_score(ids: IdArray, scores: FloatArray | npt.NDArray[np.float32],
                   k: int) -> list[tuple[int, float]]:
    """The k best (id, score) pairs, highest score first, equal scores by lower id
    (float32 scores are cut as they are and come back as floats).

    ``ids`` must be distinct. Exact at the cut: of several documents tied at the
    k-th score, the lowest ids are kept."""
    if len(ids) == 0:
        return []
    best, values = top_k_arrays(ids, scores, k)
    return list(zip(best.tolist(), values.tolist(), strict=True))


def top_k_arrays(ids: IdArray, scores: FloatArray | npt.NDArray[np.float32],
                 k: int) -> tuple[IdArray, FloatArray]:
    """``top_k_by_score``'s pairs as two arrays, the ids and their scores as float64
    (for a caller that goes on with arrays: no pairs made and taken apart again)."""
    n = len(ids)
    if n > k and n > _SORT_ALL:
        # fewer than k scores lie above the k-th: sorted, the ties at the cut follow them by id
        kth = np.partition(scores, n - k)[n - k]
        keep = np.flatnonzero(scores >= kth)
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:k]
    best: FloatArray = scores[order].astype(np.float64, copy=False)
    return ids[order], best


def pairs_as_arrays(pairs: list[tuple[int, float]]) -> tuple[IdArray, FloatArray]:
    """(id, score) pairs as ``top_k_arrays`` gives them: the ids, the scores as float64."""
    ids = np.fromiter((doc for doc, _ in pairs), dtype=np.int64, count=len(pairs))
    scores = np.fromiter((score for _, score in pairs), dtype=np.float64, count=len(pairs))
    return ids, scores
