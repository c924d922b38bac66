"""How a scope ranks its memories for a query, in each search mode.

Scores are in 0..1 in every mode, so hits of different scopes compare:

* keyword: distinct query words matched / distinct query words;
* fulltext: BM25 (plus ``entity_boost`` per named entity, in units of the
  query's average term weight) over the query's "ideal" score, the BM25 of an
  average-length memory holding each query term once, capped at 1;
* vector: cosine similarity;
* hybrid: the relevance (weighted sum of fulltext and vector, or reciprocal
  rank fusion scaled to 0..1) times a factor in 0.3..1.5 from the memory's
  importance, recency and use (``rank_factors``; 1 with the default weights), so
  a hybrid score may reach 1.5. ``min_score`` cuts on the relevance: the factor
  reorders candidates, it never removes one.

A ``Ranker`` reads the scope's indexes and records; it never changes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from mnemex.index import (
    BM25Index,
    EntityIndex,
    KeywordIndex,
    VectorIndex,
    reciprocal_rank_fusion,
    words,
)
from mnemex.memories.protocol import MemoryRecord

if TYPE_CHECKING:
    from mnemex.memories.behaviour import ScopeSettings

__all__ = ["ACCESS_HALF", "FACTOR_RANGE", "Mask", "Ranked", "Ranker", "rank_factors"]

F32 = npt.NDArray[np.float32]
Mask = npt.NDArray[np.bool_]
Ranked = tuple[int, float, dict[str, float]]   # (doc, score, signals)

ACCESS_HALF: Final = 10.0
"""Uses at which a memory's access signal is one half: access_count / (access_count + 10)."""


@dataclass(frozen=True, slots=True)
class Ranker:
    """Ranks one scope's docs for one query: the scope's indexes, its settings and a
    way to read a doc's record."""

    keyword: KeywordIndex
    bm25: BM25Index
    entities: EntityIndex
    vectors: VectorIndex | None
    settings: ScopeSettings
    record_at: Callable[[int], MemoryRecord]

    def keyword_ranked(self, query: str, top_k: int, allowed: Mask | None) -> list[Ranked]:
        distinct = len(set(words(query, fold_accents=self.keyword.fold_accents)))
        if distinct == 0:
            return []
        return [(doc, matched / distinct, {"keyword": matched / distinct, "matched": float(matched)})
                for doc, matched in self.keyword.search(query, top_k, allowed)]

    def _fulltext(self, query: str, allowed: Mask | None) -> tuple[dict[int, float], dict[int, int],
                                                                   npt.NDArray[np.float64] | None, float]:
        """The entity part of the full-text score of each doc naming a query entity,
        those entity matches, the BM25 score array (None: no term matches), and the
        query's ideal score (what a normalised score of 1 stands for)."""
        bm25 = self.bm25
        parsed = bm25.tokenizer.parse_query(query)
        array = bm25.score_all(parsed, allowed) if len(bm25) else None
        ideal, terms = _ideal_score(bm25, parsed.all_terms)
        boosts: dict[int, float] = {}
        entity_hits: dict[int, int] = {}
        named = self.entities.find(query) if len(self.entities) else set()
        if named:
            unit = self.settings.entity_boost * (ideal / terms if terms else 1.0)
            for doc, matched in self.entities.search(query, len(self.entities)):
                if allowed is not None and not (doc < len(allowed) and allowed[doc]):
                    continue
                if parsed.phrases and (array is None or not array[doc] > 0):
                    continue  # quoted phrases are required in full-text search
                entity_hits[doc] = matched
                boosts[doc] = unit * matched
            if not terms:
                ideal = unit * len(named)
        return boosts, entity_hits, array, ideal

    def _fulltext_candidates(self, query: str, count: int,
                             allowed: Mask | None) -> tuple[list[tuple[int, float]], _FullText]:
        """The ``count`` best docs by full-text score (BM25 plus entity boosts, best
        first, ties by lower doc), and what scores any doc (see _FullText)."""
        boosts, entity_hits, array, ideal = self._fulltext(query, allowed)
        pool = np.array(sorted(boosts), dtype=np.int64)
        if array is not None:
            positive = np.flatnonzero(array > 0)
            pool = np.union1d(_best(positive, array[positive], count), pool)
        totals = array[pool] if array is not None else np.zeros(len(pool), dtype=np.float64)
        if boosts:
            totals = totals + np.array([boosts.get(doc, 0.0) for doc in pool.tolist()], dtype=np.float64)
        best = _best(pool, totals, count)
        best_totals = totals[np.searchsorted(pool, best)]
        order = np.lexsort((best, -best_totals))
        ranked = list(zip(best[order].tolist(), best_totals[order].tolist(), strict=True))
        return ranked, _FullText(array, boosts, entity_hits, ideal)

    def fulltext_ranked(self, query: str, top_k: int,
                      allowed: Mask | None) -> list[Ranked]:
        ranked, fulltext = self._fulltext_candidates(query, top_k, allowed)
        docs = [doc for doc, _ in ranked]
        texts, bm25s = fulltext.scores(np.array(docs, dtype=np.int64))
        return [(doc, normalised, {"fulltext": normalised, "bm25": round(bm25, 6),
                                   "entities": float(fulltext.entity_hits.get(doc, 0))})
                for doc, normalised, bm25 in zip(docs, texts.tolist(), bm25s.tolist(), strict=True)]

    def vector_ranked(self, query: F32, top_k: int, allowed: Mask | None) -> list[Ranked]:
        if self.vectors is None or not len(self.vectors):
            return []
        return [(doc, cosine, {"vector": cosine})
                for doc, cosine in self.vectors.search(query, top_k, allowed)]

    def hybrid_ranked(self, query: str, vector: F32, top_k: int, allowed: Mask | None,
                now: float) -> list[Ranked]:
        """Full-text and vector candidates fused into one relevance, ranked by it
        times the importance, recency and access factor. The candidates are scored as arrays;
        the score breakdown is built for the ``top_k`` returned only."""
        settings = self.settings
        count = max(top_k, settings.fusion_candidates)
        text_ranked, fulltext = self._fulltext_candidates(query, count, allowed)
        index = self.vectors
        vector_ranked: list[tuple[int, float]] = []
        if index is not None and len(index):
            vector_ranked = index.search(vector, count, allowed)
        candidates = list(dict.fromkeys([doc for doc, _ in text_ranked] + [doc for doc, _ in vector_ranked]))
        if not candidates:
            return []
        docs = np.array(candidates, dtype=np.int64)
        texts, bm25s = fulltext.scores(docs)
        cosines = np.zeros(len(docs), dtype=np.float64)
        position = {doc: i for i, doc in enumerate(candidates)}
        for doc, cosine in vector_ranked:
            cosines[position[doc]] = cosine
        if index is not None and len(vector_ranked) < len(candidates):
            # full-text candidates the vector list missed: their cosines, in one product
            missed = np.ones(len(docs), dtype=np.bool_)
            missed[[position[doc] for doc, _ in vector_ranked]] = False
            rows = np.flatnonzero(missed & index.holds(docs))
            if len(rows):
                norm = float(np.sqrt(vector.dot(vector)))  # np.linalg.norm's own sum, without its checks
                unit_query = vector / norm if norm > 0 else vector
                cosines[rows] = index.vectors(docs[rows]) @ unit_query
        w_text, w_vector = settings.fusion_fulltext_weight, settings.fusion_vector_weight
        if settings.fusion == "rrf":  # ranks only, scaled so a first place in both lists is 1.0
            k = settings.fusion_rrf_k
            fused = dict(reciprocal_rank_fusion([text_ranked, vector_ranked], [w_text, w_vector], k=k))
            best = (w_text + w_vector) / (k + 1.0)
            relevance = np.array([fused.get(doc, 0.0) / best for doc in candidates], dtype=np.float64)
        else:  # calibrated scores (BM25 to 0..1, cosine clipped at 0), weighted to a mean
            total = w_text + w_vector
            relevance = (w_text / total) * texts + (w_vector / total) * np.maximum(cosines, 0.0)
        half_life = settings.recency_half_life
        weights = np.array([settings.rank_importance_weight, settings.rank_recency_weight,
                            settings.rank_access_weight], dtype=np.float64)

        def parts(doc: int) -> tuple[float, float, float]:
            record = self.record_at(doc)
            recency = 0.5 ** (max(0.0, now - record.timestamp) / half_life)
            access = record.access_count / (record.access_count + ACCESS_HALF)
            return record.importance, recency, access

        if weights.any():
            factors = rank_factors(np.array([parts(doc) for doc in candidates], dtype=np.float64), weights)
            scores = relevance * factors
        else:
            factors = None
            scores = relevance
        top = np.lexsort((docs, -scores))[:top_k]
        out: list[Ranked] = []
        for i, score, text, bm25, cosine, relevant in zip(
                top.tolist(), scores[top].tolist(), texts[top].tolist(), bm25s[top].tolist(),
                cosines[top].tolist(), relevance[top].tolist(), strict=True):
            doc = candidates[i]
            importance, recency, access = parts(doc)
            out.append((doc, score, {
                "fulltext": round(text, 6), "bm25": round(bm25, 6),
                "entities": float(fulltext.entity_hits.get(doc, 0)), "vector": round(cosine, 6),
                "relevance": round(relevant, 6), "importance": importance,
                "recency": round(recency, 6), "access": round(access, 6),
                "factor": round(float(factors[i]), 6) if factors is not None else 1.0,
            }))
        return out


FACTOR_RANGE: Final = (0.3, 1.5)
"""The bounds of the factor importance, recency and use multiply relevance by."""


def rank_factors(parts: npt.NDArray[np.float64], weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each candidate's ranking factor from its (importance, recency, access) row:
    ``1 + w_i * (2 * importance - 1) + w_r * (2 * recency - 1) + w_a * access``, within
    FACTOR_RANGE. Importance 0.5, a half-life old and never used is 1: the relevance
    as it is. A factor only reorders: it never takes a candidate out."""
    deviations = np.column_stack([2.0 * parts[:, 0] - 1.0, 2.0 * parts[:, 1] - 1.0, parts[:, 2]])
    return np.clip(1.0 + deviations @ weights, *FACTOR_RANGE)


class _FullText(NamedTuple):
    """A query's full-text scores: the BM25 array over doc slots (None: no term
    matched), entity boosts and matches by doc, and the ideal score (what a
    normalised score of 1 stands for)."""

    array: npt.NDArray[np.float64] | None
    boosts: dict[int, float]
    entity_hits: dict[int, int]
    ideal: float

    def scores(self, docs: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(normalised scores, BM25 scores) of ``docs``: BM25 plus entity boosts over
        the ideal score, at most 1 (0 when the ideal is 0)."""
        array = self.array
        bm25 = np.zeros(len(docs), dtype=np.float64)
        if array is not None:
            inside = docs < len(array)
            bm25[inside] = array[docs[inside]]
        totals = bm25 + np.array([self.boosts.get(doc, 0.0) for doc in docs.tolist()], dtype=np.float64) \
            if self.boosts else bm25
        if self.ideal > 0:
            return np.minimum(1.0, totals / self.ideal), bm25
        return np.zeros(len(docs), dtype=np.float64), bm25


def _best(ids: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], count: int) -> npt.NDArray[np.int64]:
    """The ``count`` ids of highest score, equal scores by lower id (exact at the cut),
    in no particular order. O(n) to find the cut, then a sort of the few above it."""
    if len(ids) <= count:
        return ids
    kth = np.partition(scores, len(scores) - count)[len(scores) - count]
    keep = scores >= kth
    ids, scores = ids[keep], scores[keep]
    if len(ids) > count:
        ids = ids[np.lexsort((ids, -scores))[:count]]
    return ids


def _ideal_score(bm25: BM25Index, terms: Iterable[str]) -> tuple[float, int]:
    """The BM25 score of an average-length document holding each query term once:
    the sum of the terms' idf. A term no memory holds counts with the idf of df 0,
    so a partial match scores below 1 in every scope alike. Returns (score, terms)."""
    idfs = [bm25.idf(term) for term in terms]
    return sum(idfs), len(idfs)


