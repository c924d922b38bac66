"""How a scope ranks its memories for a query, in each search mode.

Scores are in 0..1 in every mode and mean the same in every scope and with every
embedder, so hits of different scopes compare and one ``min_score`` fits all:

* keyword: distinct query words matched / distinct query words;
* fulltext: how much of the query a memory holds, by weight of word: BM25 (plus
  ``entity_boost`` per named entity, in units of the query's average term weight)
  over the query's "ideal" score, the BM25 of an average-length memory holding
  each query term once, capped at 1. A memory's session context (its neighbours'
  text, a second BM25 field) ranks it too, but a memory that holds none of the
  query's words itself gets only ``CONTEXT_ONLY`` of that credit: its neighbours
  can lift it, not make it look relevant;
* vector: the cosine similarity calibrated for the embedder
  (:func:`calibrated_cosine`): about 0 at ``cosine_floor``, the cosine an
  unrelated memory reaches as a query's best match, about 1 at
  ``cosine_ceiling``, where nearly every match is a right one (``scores["cosine"]``
  keeps the cosine itself);
* hybrid: the relevance, a weighted mean of the fulltext and vector scores whose
  full-text weight adapts to each query and memory (:func:`text_weights`), moved
  toward 1 for a memory observed in or near a period the query names
  (``date_weight``, :mod:`mnemex.memories.periods`); or reciprocal rank fusion
  scaled to 0..1. Then times a factor in 0.3..1.5 from the memory's importance,
  recency and use (``rank_factors``; 1 with the default weights), so a hybrid
  score may reach 1.5. ``min_score`` cuts on the relevance: the factor reorders
  candidates, it never removes one.

Why the full-text weight adapts: on a conversation (LoCoMo), where every memory is
near the query's subject, cosine similarity cannot single out the answer and words
do (hybrid needs text weight 0.5-0.7 there); on a scope of varied facts asked in
other words (the paraphrase set), a shared everyday word ("work", "smoke") points
to the wrong memory, and any fixed text weight loses to the vector alone. So the
full-text weight is ``fusion_fulltext_weight`` times the larger of the scope's
*crowding* around the query (the mean cosine of the query's ten nearest memories,
from three quarters of ``cosine_crowded`` to ``cosine_crowded``: on LoCoMo 95% of the
questions have their ten nearest turns above 0.43, on the paraphrase set 90% below
0.33, around a newcomer's dozen memories below 0.18) and the memory's own
*coverage* of the query (its fulltext score, from ``COVERAGE_RAMP[0]`` to
``COVERAGE_RAMP[1]``): a memory holding nearly all the query's words (at least
``COVERAGE_MIN_TERMS`` of them when the query is a sentence) is trusted on its words
anywhere.

A ``Ranker`` reads the scope's indexes and records; it never changes them. What one
hybrid search computes once: below the HNSW threshold, the query's cosine to every
memory (one product; the vector candidates, the candidates' cosines and those of the
named entities' memories are read from it). What a scope's searches share
(``RankCache``, kept until the full-text index changes): the BM25 scores of the
graph's expansion terms, the same for every query naming the same entities.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from mnemex.index import (
    BM25Index,
    EntityIndex,
    ExactScores,
    KeywordIndex,
    VectorIndex,
    reciprocal_rank_fusion,
    words,
)
from mnemex.index._select import members, pairs_as_arrays, positive_slots
from mnemex.knowledge.graph import EntityGraph, Expansion
from mnemex.memories.filters import FilterTable
from mnemex.memories.periods import DAY, named_periods, period_match
from mnemex.memories.protocol import Hit, MemoryRecord

if TYPE_CHECKING:
    from mnemex.memories.behaviour import ScopeSettings
    from mnemex.memories.keyed import MultiVectorSearch

__all__ = ["ACCESS_HALF", "CONTEXT_ONLY", "COVERAGE_MIN_TERMS", "COVERAGE_RAMP", "CROWDING_NEIGHBOURS",
           "DATE_SLACK", "FACTOR_RANGE", "FOUND_BY", "CosineScale", "Mask", "RankCache", "Ranked", "Ranker",
           "ReadAhead", "calibrated_cosine", "crowding", "rank_factors", "rounded", "rounded6", "rounded_all",
           "text_weights"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
Ranked = tuple[int, float, dict[str, float]]   # (doc, score, signals)
HybridRanked = tuple[int, float, dict[str, float], tuple[str, ...]]  # and the lists that found it (FOUND_BY)
_K = TypeVar("_K")
_T = TypeVar("_T")
_Entry = tuple["weakref.ref[Expansion]", _K, _T]  # (the expansion, what it was made of, what was kept)

ACCESS_HALF: Final = 10.0
"""Uses at which a memory's access signal is one half: access_count / (access_count + 10)."""

MENTION_ONLY: Final = 0.0
"""Share of the graph's lift (``expansion_graph_weight``) a memory gets for naming an
entity of the query that speaks in other memories without being said by it (Caroline
thanking Mel is no memory about Mel); an entity that is never a speaker (an NPC in a
game master's notes) lifts every memory naming it fully. LoCoMo dev, hashing
embedder: multi-hop recall@10 0.451 at 0, 0.448 at 0.25, 0.445 at 0.5 (graph weight
0.5)."""

CONTEXT_ONLY: Final = 0.25
"""Share of its full-text score a memory keeps when only its session context holds
query words (LoCoMo recall@10 is the same from 0 to 0.5; 0.25 keeps such a memory
findable below those that hold the words themselves)."""

COVERAGE_RAMP: Final = (0.5, 0.9)
"""Fulltext scores over which a memory's own coverage of the query raises its
full-text weight from nothing to full (see :func:`text_weights`)."""

COVERAGE_MIN_TERMS: Final = 2
"""Distinct query words a memory's content must hold before its coverage of a query
worded as a sentence counts: one shared word ("What is her phone?" and "The phone
signal in the kitchen is terrible") is no evidence of an answer. A query of keywords
only ("Python", "太郎") asks for its words: there one suffices. Measured: paraphrase
R@1 held out 0.467 -> 0.533 (= vector), dev 0.415 either way, LoCoMo unchanged (its
text weight comes from crowding)."""

DATE_SLACK: Final = 7 * DAY
"""How far outside a period the query names a memory's time still counts, falling
linearly (a conversation on 10 April tells what happened "last weekend")."""

CROWDING_NEIGHBOURS: Final = 10
"""How many of a query's nearest memories tell how crowded the scope is around it."""

_COSINE_BLOCK: Final = 1024
"""Vectors gathered at a time for the cosines of a hybrid search's named memories."""

NAMED_GATHERED: Final = 2048
"""The memories of the entities a hybrid search's query names, at most, whose
cosines a search over an HNSW index reads all (float32 rows gathered, ~0.55 us a row
in memory, ~1.5 us read from a row file). Past it, the search reads only those that
could be among its ``expansion_candidates`` best by full-text score plus cosine (see
``_reaching_over_graph``): at 1,000,000 memories a query naming a speaker
names ~160,000 of them, and a coarse pass over every row, which bounded them
before, read 392 MB a search and kept an int8 copy of every row (384 MB)."""

_REACH_STEPS: Final = ((1, 0), (4, 0), (16, 0), (64, 0), (64, 8), (128, 8))
"""How deep :func:`_reaching_over_graph` reads its two lists, round by round, in
``expansion_candidates``: the named memories by full-text score (a row read each),
and the memories nearest the query (0: the search's vector list; deeper lists take
a graph search). The rounds stop once what is read settles the best. Over 300,000
memories (bench/million.py's questions; 256 of 300 name entities of 30,000-100,000
memories, 48,237 at the median) a search reads 150 of them at the median, 1,941 at
the 90th percentile, 4,078 at most."""

_SMOOTHING: Final = 0.02
"""Width, in cosine, of the rounded corners of :func:`calibrated_cosine`."""


class CosineScale(NamedTuple):
    """How one embedder's cosine similarities read (an embedder declares its own as
    ``cosine_scale = (floor, ceiling, crowded)``; config's ``cosine_*`` override it).
    The defaults are all-MiniLM-L6-v2's, measured by bench/quality.py on its dev sets
    (queries embedded as a search embeds them, :mod:`mnemex.memories.queries`): the median best cosine
    of a query without an answer is 0.20 (floor), 90% of LoCoMo evidence turns score
    below 0.65 (ceiling); the ten nearest turns of a LoCoMo question have a mean
    cosine of 0.54 (median; 95% above 0.43), the ten nearest memories of a paraphrase
    question 0.27 (90% below 0.33): from 0.33 to 0.44 (crowded) the full-text weight
    rises."""

    floor: float = 0.2
    """The cosine an unrelated memory reaches as the best match of a query with no
    answer: calibrated to about 0."""
    ceiling: float = 0.65
    """The cosine where nearly every match is a right one: calibrated to about 1."""
    crowded: float = 0.44
    """The mean cosine of a query's ten nearest memories from which the scope is
    crowded around it (<= 0: always)."""


@dataclass(frozen=True, slots=True)
class Ranker:
    """Ranks one scope's docs for one query: the scope's indexes, its filter table
    (times and live docs), its settings and a way to read a doc's record."""

    keyword: KeywordIndex
    bm25: BM25Index
    entities: EntityIndex
    vectors: VectorIndex | MultiVectorSearch | None  # several vectors per memory: memories.keyed
    table: FilterTable
    settings: ScopeSettings
    record_at: Callable[[int], MemoryRecord]
    graph: EntityGraph | None = None
    """The scope's entity graph, for query expansion in hybrid search (None: off)."""
    cache: RankCache | None = None
    """What the scope's searches share between its writes (None: nothing kept)."""

    def keyword_ranked(self, query: str, top_k: int, allowed: Mask | None) -> list[Ranked]:
        distinct = len(set(words(query, fold_accents=self.keyword.fold_accents)))
        if distinct == 0:
            return []
        return [(doc, matched / distinct, {"keyword": matched / distinct, "matched": float(matched)})
                for doc, matched in self.keyword.search(query, top_k, allowed)]

    def _expanded(self, expansion: Expansion, allowed: Mask | None) -> F64 | None:
        """The BM25 scores of an expansion's terms, weighted: the aliases of the
        entities the query names at ``expansion_alias_weight``, their neighbours'
        names at ``expansion_neighbour_weight`` (context-only matches cut as for the
        query); None when no memory holds one."""
        bm25, settings = self.bm25, self.settings
        parts = ((expansion.aliases, settings.expansion_alias_weight),
                 (expansion.neighbours, settings.expansion_neighbour_weight))
        # the same entities give the same terms: their scores over every memory are
        # kept until the index changes, and a filter only zeroes what it hides
        total = self.cache.expanded(bm25, parts, self._expanded_scores) if self.cache is not None \
            else self._expanded_scores(parts)
        if total is None or allowed is None:
            return total
        total = total.copy()
        shared = min(len(allowed), len(total))
        total[:shared][~allowed[:shared]] = 0.0
        total[shared:] = 0.0
        return total

    def _expanded_scores(self, parts: tuple[tuple[tuple[str, ...], float], ...]) -> F64 | None:
        """The weighted BM25 scores of every doc slot for the terms of ``parts``
        ((terms, weight) pairs; see _expanded), unfiltered; None when no memory holds one."""
        bm25 = self.bm25
        total: F64 | None = None
        for terms, weight in parts:
            if not terms or weight <= 0:
                continue
            found = bm25.context_only(bm25.tokenizer.parse_query(" ".join(terms)))
            if found is None:
                continue
            scores = found[0]  # (this search's own array: scaled and summed in place)
            scores *= weight
            scores[found[1]] *= CONTEXT_ONLY  # (the docs holding the terms in their context alone)
            if total is None:
                total = scores
            else:
                total += scores
        return total

    def _fulltext(self, query: str, allowed: Mask | None, expansion: Expansion | None = None) -> _FullText:
        """The query's full-text scores (see _FullText): BM25 with context-only
        matches cut to CONTEXT_ONLY, the expansion's terms added at their weights,
        and the entity boosts of the docs naming a query entity."""
        bm25 = self.bm25
        parsed = bm25.tokenizer.parse_query(query)
        scored = bm25.scored(parsed, allowed) if len(bm25) else None
        array = ranking = matches = None
        if scored is not None:
            array, matches = scored.scores, scored.matches
            # only a doc holding a term in its context can match by its context alone
            context_only = scored.context_alone()
            ranking = array  # (the same values: one array, until context-only matches are cut)
            if len(context_only):
                ranking = array.copy()
                ranking[context_only] = array[context_only] * CONTEXT_ONLY
        expanded = self._expanded(expansion, allowed) if expansion is not None and len(bm25) else None
        if expanded is not None:  # the expansion's terms count as the query's, at their weights
            if array is None or ranking is None:
                array, ranking = np.zeros(len(expanded)), np.zeros(len(expanded))
            # (both are this search's own arrays, the BM25 scores and their copy with
            # context-only matches cut, or one array twice: added to in place)
            array += expanded
            if ranking is not array:
                ranking += expanded
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
                if ranking is not None and doc < len(ranking):
                    ranking[doc] = array[doc]  # type: ignore[index]  # the memory names it: its own match
            if not terms:
                ideal = unit * len(named)
        worded = bm25.tokenizer.worded(query)
        boosted = None
        if boosts:  # by doc slot, for look-ups of many docs at once
            boosted = np.zeros(max(boosts) + 1, dtype=np.float64)
            boosted[np.fromiter(boosts, dtype=np.int64, count=len(boosts))] = list(boosts.values())
        return _FullText(array, ranking, boosts, entity_hits, ideal, matches, worded, expanded, boosted)

    def _fulltext_candidates(self, query: str, count: int, allowed: Mask | None,
                             expansion: Expansion | None = None) -> tuple[list[tuple[int, float]], _FullText]:
        """The ``count`` best docs by full-text score (BM25, context-only matches cut,
        plus entity boosts, best first, ties by lower doc), and what scores any doc
        (see _FullText)."""
        fulltext = self._fulltext(query, allowed, expansion)
        boosts, ranking = fulltext.boosts, fulltext.ranking
        best = np.zeros(0, dtype=np.int64)
        if ranking is not None:
            positive = positive_slots(ranking, count)
            best = _best(positive, ranking[positive], count)
        if boosts:  # the boosted docs join, and every one's total is its BM25 plus its boost
            pool = np.union1d(best, np.array(sorted(boosts), dtype=np.int64))  # (distinct ids)
            totals = ranking[pool] if ranking is not None else np.zeros(len(pool), dtype=np.float64)
            totals = totals + fulltext.boosts_of(pool)
            best = _best(pool, totals, count)
            best_totals = totals[np.searchsorted(pool, best)]
        else:
            best_totals = ranking[best] if ranking is not None else np.zeros(0, dtype=np.float64)
        order = np.lexsort((best, -best_totals))
        ranked = list(zip(best[order].tolist(), best_totals[order].tolist(), strict=True))
        return ranked, fulltext

    def fulltext_ranked(self, query: str, top_k: int,
                        allowed: Mask | None) -> list[Ranked]:
        ranked, fulltext = self._fulltext_candidates(query, top_k, allowed)
        docs = [doc for doc, _ in ranked]
        texts, bm25s = fulltext.scores(np.array(docs, dtype=np.int64))
        return [(doc, normalised, {"fulltext": normalised, "bm25": round(bm25, 6),
                                   "entities": float(fulltext.entity_hits.get(doc, 0))})
                for doc, normalised, bm25 in zip(docs, texts.tolist(), bm25s.tolist(), strict=True)]

    def vector_hits(self, query: F32, top_k: int, allowed: Mask | None, min_score: float | None, *,
                    app_name: str, user_id: str) -> list[Hit]:
        """The hits of a vector search: the ``top_k`` memories nearest ``query`` (best
        first, equal cosines by lower doc) whose score, the calibrated cosine, is at
        least ``min_score`` (None: every one); their signals ``vector`` (that score) and ``cosine``. Built
        in one pass, each value rounded once: a vector search's ranking is its hits."""
        vectors = self.vectors
        if vectors is None or not len(vectors):
            return []
        docs, cosines = vectors.search_arrays(query, top_k, allowed) if type(vectors) is VectorIndex \
            else pairs_as_arrays(vectors.search(query, top_k, allowed))
        settings = self.settings
        scores = calibrated_cosine(cosines, settings.cosine_floor, settings.cosine_ceiling).tolist()
        count = len(scores)
        shown = rounded_all(scores + cosines.tolist())  # the scores', then the cosines'
        record_at = self.record_at
        return [Hit(record_at(doc), score, {"vector": score, "cosine": cosine}, app_name, user_id)
                for doc, score, cosine, exact in zip(docs.tolist(), shown[:count], shown[count:], scores,
                                                     strict=True)
                if min_score is None or exact >= min_score]

    def hybrid_vector(self, query: str, vector: F32) -> tuple[Expansion | None, F32]:
        """What a hybrid search of ``query`` asks of the graph (its expansion: None
        when it names no entity) and the vector it searches with: ``vector`` (the
        query's), moved toward the expansion's memories."""
        settings = self.settings
        graph = self.graph
        expansion = graph.expansion(query, neighbours=settings.expansion_neighbours) \
            if graph is not None and graph else None
        index = self.vectors if self.vectors is not None and len(self.vectors) else None
        if expansion is not None and index is not None and settings.expansion_vector_weight > 0:
            vector = self._expanded_vector(vector, expansion, index)
        return expansion, vector

    def hybrid_ranked(self, query: str, vector: F32, top_k: int, allowed: Mask | None,
                      now: float, *, ahead: ReadAhead | None = None) -> list[HybridRanked]:
        """Full-text and vector candidates (and the best of those observed near a
        period the query names) fused into one relevance, ranked by it times the
        importance, recency and access factor. The candidates are scored as arrays;
        the score breakdown is built for the ``top_k`` returned only. ``ahead``: what
        a read-ahead made for this search (:class:`ReadAhead`), taken as made here."""
        settings = self.settings
        count = max(top_k, settings.fusion_candidates)
        index = self.vectors if self.vectors is not None and len(self.vectors) else None
        exact: ExactScores | None
        if ahead is not None:
            expansion, vector, exact = ahead
        else:
            expansion, vector = self.hybrid_vector(query, vector)
            # an exact index scores every memory once; the searches and cosines below read that
            exact = index.exact_scores(vector) if isinstance(index, VectorIndex) else None
        text_ranked, fulltext = self._fulltext_candidates(query, count, allowed, expansion)
        named = np.zeros(0, dtype=np.int64)  # the memories of the query's entities, ascending
        if expansion is not None and len(expansion.docs):  # the memories of the query's entities join
            named = expansion.docs
            if allowed is not None:
                named = named[(named < len(allowed)) & allowed[np.minimum(named, len(allowed) - 1)]]
        cosines_of = _Cosines(index, _unit(vector), exact)
        # over an HNSW index, the named memories past NAMED_GATHERED are read by the
        # threshold algorithm, whose first list of nearest memories is the vector list
        over_graph = exact is None and type(index) is VectorIndex and len(named) > NAMED_GATHERED \
            and settings.expansion_candidates > 0
        reaching: tuple[npt.NDArray[np.int64], F64, F64 | None] | None = None
        if len(named) and not over_graph:
            reaching = (*self._reaching(named, fulltext, cosines_of, settings.expansion_candidates), None)
        # the cosines read below (of the full-text candidates, and of the named memories
        # that may be among the best of them) are rescored with the search's rows
        also = np.fromiter((doc for doc, _ in text_ranked), dtype=np.int64, count=len(text_ranked))
        if reaching is not None and len(reaching[0]):
            also = np.concatenate((also, reaching[0]))
        vector_ranked = cosines_of.search(vector, count, allowed, also)
        if over_graph:
            assert isinstance(index, VectorIndex)
            reaching = _reaching_over_graph(named, fulltext.scores(named)[0], cosines_of, index, vector,
                                            allowed=allowed, nearest=vector_ranked,
                                            count=settings.expansion_candidates)
        dated = self._dated(query)
        extra: list[int] = []
        graph_found: list[int] = []
        if reaching is not None:
            docs_reaching, scores_reaching, cosines_reaching = reaching
            if cosines_reaching is None and cosines_of.index is not None:
                cosines_reaching = cosines_of(docs_reaching)
            if cosines_reaching is not None:
                scores_reaching = scores_reaching + cosines_reaching
            graph_found = _best(docs_reaching, scores_reaching, settings.expansion_candidates).tolist()
        if dated is not None:  # the best of the memories near a named period join the candidates
            near = _visible(dated > 0, allowed)
            if near.any():
                if index is not None:
                    extra += [doc for doc, _ in cosines_of.search(vector, count, near)]
                if fulltext.ranking is not None:
                    inside = np.flatnonzero(near[: len(fulltext.ranking)] & (fulltext.ranking > 0))
                    extra += _best(inside, fulltext.ranking[inside], count).tolist()
        candidates = list(dict.fromkeys([doc for doc, _ in text_ranked] + [doc for doc, _ in vector_ranked]
                                        + sorted(extra) + graph_found))
        if not candidates:
            return []
        docs = np.array(candidates, dtype=np.int64)
        texts, bm25s = fulltext.scores(docs)
        if exact is not None:  # every candidate's cosine read from the one product, as the list's were
            cosines = exact.of(docs)
        else:
            cosines = np.zeros(len(docs), dtype=np.float64)
            position = {doc: i for i, doc in enumerate(candidates)}
            for doc, cosine in vector_ranked:
                cosines[position[doc]] = cosine
            if index is not None and len(vector_ranked) < len(candidates):
                # candidates the vector list missed: their cosines, in one product (or look-up)
                missed = np.ones(len(docs), dtype=np.bool_)
                missed[[position[doc] for doc, _ in vector_ranked]] = False
                rows = np.flatnonzero(missed)
                cosines[rows] = cosines_of(docs[rows])
        calibrated = calibrated_cosine(cosines, settings.cosine_floor, settings.cosine_ceiling)
        w_text, w_vector = settings.fusion_fulltext_weight, settings.fusion_vector_weight
        weights = np.full(len(docs), w_text / (w_text + w_vector))
        if index is None:  # nothing to fuse: the words alone
            calibrated[:] = 0.0
            weights[:] = 1.0
        crowded = 1.0
        if settings.fusion == "rrf":  # ranks only, scaled so a first place in both lists is 1.0
            k = settings.fusion_rrf_k
            fused = dict(reciprocal_rank_fusion([text_ranked, vector_ranked], [w_text, w_vector], k=k))
            best = (w_text + w_vector) / (k + 1.0)
            relevance = np.array([fused.get(doc, 0.0) / best for doc in candidates], dtype=np.float64)
        else:  # calibrated scores, weighted to a mean; the text weight adapts (module doc)
            if settings.fusion_adaptive and index is not None and w_vector > 0:
                nearest = [cosine for _, cosine in vector_ranked[:CROWDING_NEIGHBOURS]]
                # (np.mean's own sum and division, without its checks)
                mean = float(np.add.reduce(np.array(nearest, dtype=np.float64))) / len(nearest) if nearest \
                    else 0.0
                crowded = crowding(mean, settings.cosine_crowded)
                weights = text_weights(texts, crowded, weights[0], fulltext.matched(docs),
                                       COVERAGE_MIN_TERMS if fulltext.worded else 1)
            relevance = weights * texts + (1.0 - weights) * calibrated
        near_period = np.zeros(len(docs), dtype=np.float64)
        if dated is not None:
            held = docs < len(dated)
            near_period[held] = dated[docs[held]]
            relevance = relevance + (1.0 - relevance) * settings.date_weight * near_period
        names_entity = np.zeros(len(docs), dtype=np.float64)
        is_named = members(docs, named)
        if len(named):
            assert expansion is not None
            named_at = np.flatnonzero(is_named)  # a memory the named entity says counts fully
            names_entity[named_at] = expansion.lifts(docs[named_at].tolist(), MENTION_ONLY)
            relevance = relevance + (1.0 - relevance) * settings.expansion_graph_weight * names_entity
        expanded = fulltext.expanded_scores(docs)
        half_life = settings.recency_half_life
        factor_weights = np.array([settings.rank_importance_weight, settings.rank_recency_weight,
                                   settings.rank_access_weight], dtype=np.float64)

        def parts(doc: int) -> tuple[float, float, float]:
            record = self.record_at(doc)
            recency = 0.5 ** (max(0.0, now - record.timestamp) / half_life)
            access = record.access_count / (record.access_count + ACCESS_HALF)
            return record.importance, recency, access

        every_part = [parts(doc) for doc in candidates] if factor_weights.any() else None
        if every_part is not None:
            factors = rank_factors(np.array(every_part, dtype=np.float64), factor_weights)
            scores = relevance * factors
        else:
            factors = None
            scores = relevance
        top = np.lexsort((docs, -scores))[:top_k]
        top_docs = docs[top].tolist()
        top_parts = [every_part[i] for i in top.tolist()] if every_part is not None \
            else [parts(doc) for doc in top_docs]
        importances, recencies, accesses = zip(*top_parts, strict=True)
        # the breakdown of the top_k only: one gather of every signal, rounded to 6
        # decimals in one pass (as round() rounds), read as plain floats
        rounded = rounded6(np.vstack((np.array((texts, bm25s, calibrated, cosines, weights, near_period,
                                                relevance, factors if factors is not None else relevance,
                                                expanded)).take(top, axis=1),
                                      np.array((recencies, accesses), dtype=np.float64)))).T.tolist()
        # the lists that brought a hit (FOUND_BY's order); graph: it names a query entity,
        # or the expansion's terms scored it
        by_text, by_vector = {doc for doc, _ in text_ranked}, {doc for doc, _ in vector_ranked}
        by_date, by_graph = set(extra), set(graph_found)
        crowding_shown = round(crowded, 6)
        entity_hits = fulltext.entity_hits
        out: list[HybridRanked] = []
        for doc, score, named_it, graph_lift, expansion_part, importance, (
                text, bm25, fused_vector, cosine, weight, date, relevant, factor, expansion_shown, recency,
                access) in zip(top_docs, scores[top].tolist(), is_named[top].tolist(),
                               names_entity[top].tolist(), expanded[top].tolist(), importances, rounded,
                               strict=True):
            signals = {
                "fulltext": text, "bm25": bm25, "entities": float(entity_hits.get(doc, 0)),
                "vector": fused_vector, "cosine": cosine, "text_weight": weight, "crowding": crowding_shown,
                "date": date, "relevance": relevant, "importance": importance, "recency": recency,
                "access": access, "factor": factor if factors is not None else 1.0, "graph": graph_lift,
                "expansion": expansion_shown,
            }
            found = _FOUND[(doc in by_text) | (doc in by_vector) << 1 | (doc in by_date) << 2
                           | (doc in by_graph or named_it or expansion_part > 0) << 3]
            out.append((doc, score, signals, found))
        return out

    def _expanded_vector(self, vector: F32, expansion: Expansion,
                         index: VectorIndex | MultiVectorSearch) -> F32:
        """The query's vector moved toward the named entities' memories (the mean of
        their vectors: the entity as the scope knows it)."""
        cache = self.cache
        centroid = cache.centroid(self.bm25, expansion, index, _centroid) if cache is not None \
            else _centroid((expansion, index))
        if centroid is None:
            return vector
        moved: F32 = (_unit(vector) + self.settings.expansion_vector_weight * centroid).astype(np.float32)
        return _unit(moved)

    def _reaching(self, docs: npt.NDArray[np.int64], fulltext: _FullText, cosines_of: _Cosines,
                  count: int) -> tuple[npt.NDArray[np.int64], F64]:
        """Of ``docs`` (the memories of the query's entities), those that could be among
        the ``count`` best by their full-text score (the expansion's terms included)
        plus their cosine to the query, with their full-text scores: all of them, unless
        an exact index's bounds on the cosines leave some out (their best possible is
        below ``count`` others' worst). The best are those of highest score plus
        cosine (``_best``: ties by lower doc)."""
        if len(docs) == 0 or count <= 0:
            return docs[:0], np.zeros(0, dtype=np.float64)
        score = fulltext.scores(docs)[0]
        if cosines_of.index is not None and cosines_of.exact is not None:
            reach = cosines_of.exact.reach(docs, score, count)
            if reach is not None:
                return docs[reach], score[reach]
        return docs, score

    def _dated(self, query: str) -> F64 | None:
        """How near each doc slot's time is to a period the query names (see
        ``periods.period_match``), 0 for slots that hold no memory; None when the
        query names no period or dates weigh nothing."""
        if self.settings.date_weight <= 0:
            return None
        periods = named_periods(query)
        if not periods:
            return None
        table = self.table
        near = period_match(table.timestamp, periods, DATE_SLACK)
        near[~table.live] = 0.0
        return near


FOUND_BY: Final = ("fulltext", "vector", "date", "graph")
"""The candidate lists of a hybrid search, in the order ``Hit.found_by`` names them."""

_FOUND: Final = tuple(tuple(name for bit, name in enumerate(FOUND_BY) if marks >> bit & 1)
                      for marks in range(1 << len(FOUND_BY)))
"""The lists named by each set of marks (bit i: ``FOUND_BY[i]``), in FOUND_BY's order."""


_ROUND_FAST_BELOW: Final = 2.0 ** 30
"""Scaled values (``x * 1e6``) below which :func:`rounded6` rounds in numpy: their
product is within 2**-23 of the exact one, far inside its guard around halves."""


def rounded6(values: F64) -> F64:
    """``round(x, 6)`` of every value, exactly as Python rounds (the float nearest to
    ``x``'s exact binary value rounded half to even at 6 decimals), in one pass.
    ``rint(x * 1e6)`` is that rounding unless ``x * 1e6`` lies within 1e-6 of a half
    (its product's own rounding error is far smaller below ``_ROUND_FAST_BELOW``), and
    dividing the whole number by 1e6 gives the float nearest to the decimal, as
    Python's parse of it does (IEEE division of two exact floats rounds correctly).
    The values near a half, large or not finite are rounded by Python itself."""
    with np.errstate(over="ignore", invalid="ignore"):  # (the values they concern are Python's)
        scaled = values * 1e6
        whole = np.rint(scaled)
        out: F64 = whole / 1e6
        doubtful = ~(np.abs(scaled) < _ROUND_FAST_BELOW) | (np.abs(np.abs(scaled - whole) - 0.5) < 1e-6)
    if doubtful.any():
        flat, source = out.reshape(-1), values.reshape(-1)
        for i in np.flatnonzero(doubtful.reshape(-1)).tolist():
            flat[i] = round(float(source[i]), 6)
    return out


def rounded(value: float) -> float:
    """``round(value, 6)`` of one value (``rounded6``'s form for a few: a search of ten
    vector hits shows 30 scores), in half round's time: both take the correctly
    rounded decimal string of 6 places (the same ``dtoa`` digits) and read it back,
    and round's own way there is the slower one."""
    return float(f"{value:.6f}")


def rounded_all(values: list[float]) -> list[float]:
    """``rounded`` of each of a few values, in one formatting of them all: the same
    digits (``%.6f`` is ``rounded``'s format), without a call and a string per value."""
    return [*map(float, (("%.6f " * len(values)) % (*values,)).split())]


@functools.lru_cache(maxsize=64)
def _ramp_ends(floor: float, ceiling: float) -> F64:
    """``[[floor], [ceiling]]``, made once per scale (read-only: shared by every search)."""
    ends = np.array([[floor], [ceiling]], dtype=np.float64)
    ends.flags.writeable = False
    return ends


def calibrated_cosine(cosines: F64, floor: float, ceiling: float) -> F64:
    """Cosine similarities on the 0..1 scale every embedder shares: a ramp from
    ``floor`` to ``ceiling`` with rounded corners, so it rises strictly everywhere
    (cosines below the floor keep their order, at scores near 0)::

        (softplus(c - floor) - softplus(c - ceiling)) / (ceiling - floor),
        softplus(x) = s * ln(1 + exp(x / s)),  s = 0.02

    ``floor`` is the cosine an unrelated memory reaches as the best match of a query
    that has no answer, ``ceiling`` the cosine where nearly every match is a right
    one; the embedders carry theirs (measured by bench/quality.py)."""
    span = max(ceiling - floor, 1e-6)
    s = _SMOOTHING
    # both softplus terms in one pass of each operation (a search calls this for ten cosines,
    # where numpy's cost is per call): element by element the same operations, the same bits
    both = np.logaddexp(0.0, (cosines - _ramp_ends(floor, ceiling)) / s)
    rise = s * (both[0] - both[1])
    out: F64 = _clipped(rise / span, 0.0, 1.0)
    return out


def crowding(nearest: float, crowded: float) -> float:
    """How crowded a scope is around a query, 0..1, from the mean cosine of the
    query's CROWDING_NEIGHBOURS nearest memories: 0 up to three quarters of
    ``crowded``, rising to 1 at ``crowded`` (always 1 when ``crowded`` <= 0: an
    embedder whose cosines say nothing about crowding)."""
    if crowded <= 0:
        return 1.0
    return min(max((nearest - 0.75 * crowded) / (0.25 * crowded), 0.0), 1.0)


def text_weights(texts: F64, crowded: float, weight: float, matched: F64, needed: int) -> F64:
    """The full-text weight of each candidate in hybrid fusion: ``weight`` times the
    larger of the scope's crowding around the query and the candidate's coverage of
    the query (its fulltext score over COVERAGE_RAMP), counted only for a candidate
    whose content holds ``matched`` >= ``needed`` distinct query words
    (COVERAGE_MIN_TERMS for a query worded as a sentence, 1 for keywords). See the
    module doc."""
    low, high = COVERAGE_RAMP
    trust = matched >= needed
    coverage = trust * _clipped((texts - low) / (high - low), 0.0, 1.0)
    out: F64 = weight * np.maximum(crowded, coverage)
    return out


FACTOR_RANGE: Final = (0.3, 1.5)
"""The bounds of the factor importance, recency and use multiply relevance by."""


def rank_factors(parts: F64, weights: F64) -> F64:
    """Each candidate's ranking factor from its (importance, recency, access) row:
    ``1 + w_i * (2 * importance - 1) + w_r * (2 * recency - 1) + w_a * access``, within
    FACTOR_RANGE. Importance 0.5, a half-life old and never used is 1: the relevance
    as it is. A factor only reorders: it never takes a candidate out."""
    deviations = parts.copy()
    deviations[:, :2] = 2.0 * parts[:, :2] - 1.0
    out: F64 = _clipped(1.0 + deviations @ weights, *FACTOR_RANGE)
    return out


def _clipped(values: F64, low: float, high: float) -> F64:
    """``np.clip(values, low, high)`` (the same values, NaN kept), without its
    wrappers' cost: the ranking clips a few arrays of a hundred values a search."""
    out: F64 = np.minimum(np.maximum(values, low), high)
    return out


class _FullText(NamedTuple):
    """A query's full-text scores: the BM25 array over doc slots (None: no term
    matched), the same with context-only matches cut (what ranks and scores), entity
    boosts and matches by doc, the ideal score (what a normalised score of 1
    stands for), how many distinct query terms each doc slot's content holds,
    whether the query is worded as a sentence, and the expansion's part of the
    scores (None: no expansion)."""

    array: F64 | None
    ranking: F64 | None
    boosts: dict[int, float]
    entity_hits: dict[int, int]
    ideal: float
    matches: npt.NDArray[np.int32] | None
    worded: bool
    expanded: F64 | None = None
    boosted: F64 | None = None
    """The entity boosts by doc slot, up to the last boosted doc (None: no boost)."""

    def boosts_of(self, docs: npt.NDArray[np.int64]) -> F64:
        """The entity boost of each of ``docs`` (0 for a doc without one)."""
        return _at(self.boosted, docs)

    def matched(self, docs: npt.NDArray[np.int64]) -> F64:
        """How many distinct query terms the content of each of ``docs`` holds."""
        return _at(self.matches, docs)

    def expanded_scores(self, docs: npt.NDArray[np.int64]) -> F64:
        """The part of ``docs``' normalised full-text scores the query expansion gave."""
        if self.expanded is None or self.ideal <= 0:
            return np.zeros(len(docs), dtype=np.float64)
        out: F64 = np.minimum(1.0, _at(self.expanded, docs) / self.ideal)
        return out

    def scores(self, docs: npt.NDArray[np.int64]) -> tuple[F64, F64]:
        """(normalised scores, BM25 scores) of ``docs``: BM25 (context-only matches
        cut) plus entity boosts over the ideal score, at most 1 (0 when the ideal is
        0); the BM25 scores as the index gives them."""
        array, ranking = self.array, self.ranking
        bm25 = _at(array if ranking is not None else None, docs)
        ranked = bm25 if ranking is array else _at(ranking if array is not None else None, docs)
        totals = ranked + self.boosts_of(docs) if self.boosts else ranked
        if self.ideal > 0:
            return np.minimum(1.0, totals / self.ideal), bm25
        return np.zeros(len(docs), dtype=np.float64), bm25


class ReadAhead(NamedTuple):
    """What :meth:`Ranker.hybrid_ranked` computes first, made ahead for several searches
    of one scope at once (``ScopeMemory.read_ahead``): the query's expansion, the
    vector it searches with, and that vector's exact scores (from one coarse pass
    shared by the searches)."""

    expansion: Expansion | None
    vector: F32
    exact: ExactScores


class _Cosines:
    """A query's cosine to any memory, read from one exact product over the index
    (``exact``) when there is one, else gathered from the index's vectors."""

    __slots__ = ("exact", "index", "unit_query")

    def __init__(self, index: VectorIndex | MultiVectorSearch | None, unit_query: F32,
                 exact: ExactScores | None) -> None:
        self.index, self.unit_query, self.exact = index, unit_query, exact

    def search(self, vector: F32, top_k: int, allowed: Mask | None,
               also: npt.NDArray[np.int64] | None = None) -> list[tuple[int, float]]:
        """The index's search for ``vector`` (the query's); ``also``: docs whose
        cosines are read next, computed with the search's where that is cheaper."""
        if self.index is None:
            return []
        if self.exact is not None:
            return self.exact.search(top_k, allowed, also)
        return self.index.search(vector, top_k, allowed)

    def __call__(self, docs: npt.NDArray[np.int64]) -> F64:
        """The cosine of each of ``docs``, 0 for a doc without a vector."""
        if self.exact is not None:
            return self.exact.of(docs)
        out = np.zeros(len(docs), dtype=np.float64)
        if self.index is not None:
            at = np.flatnonzero(self.index.holds(docs))
            # gathered a block at a time: the memories of a named entity can be tens
            # of thousands, whose vectors at once were a transient of tens of MB
            for start in range(0, len(at), _COSINE_BLOCK):
                rows = at[start:start + _COSINE_BLOCK]
                out[rows] = self.index.vectors(docs[rows]) @ self.unit_query
        return out


class RankCache:
    """What a scope's searches share while its full-text index does not change (every
    write that adds, changes or removes a memory changes it): the scores of a query
    expansion's terms over every memory (the same entities named give the same
    terms), and, per expansion the entity graph gives (the same object while the
    graph does not change), the centroid of its memories' vectors. Bounded: the least
    recently used entries go past ``limit`` entries (of each table) or ``max_bytes``
    (the term scores' bytes). An expansion's entries do not keep it alive, and go
    once it is gone: the graph keeps a bounded few (``EntityGraph.expansion``), and
    holding them here kept their sets of memories too (32 held 108 MB in a scope of
    300,000).
    Searches running side by side (beside the actor) share it: its entries change
    under a lock; what is computed is computed outside it."""

    def __init__(self, limit: int = 32, max_bytes: int = 8 << 20) -> None:
        self.limit, self.max_bytes = limit, max_bytes
        self._index: weakref.ref[BM25Index] | None = None  # the index the entries were computed from
        self._changes = -1
        self._expanded: dict[Any, F64 | None] = {}  # least recently used first
        # per expansion (by id, with a weak reference to it, so that an entry of an expansion
        # gone, whose id another may take, is never read; no callbacks: entries change
        # under the lock alone), with what it was made of: the centroid of the index
        # (id, size) it was made of
        self._centroids: dict[int, _Entry[tuple[int, int], F32 | None]] = {}
        self.nbytes = 0
        self._lock = threading.Lock()

    def expanded(self, bm25: BM25Index, key: Any,
                 compute: Callable[[Any], F64 | None]) -> F64 | None:
        """``compute(key)``, kept while ``bm25`` does not change (read-only); another
        index (a scope's indexes rebuilt) starts afresh."""
        with self._lock:
            self._follow(bm25)
            if key in self._expanded:
                found = self._expanded[key] = self._expanded.pop(key)
                return found
        found = compute(key)
        if found is not None:
            found.flags.writeable = False
        with self._lock:
            if key in self._expanded or bm25.changes != self._changes:
                return found  # another search kept it meanwhile, or the index changed
            self._expanded[key] = found
            self.nbytes += found.nbytes if found is not None else 0
            while len(self._expanded) > 1 and (len(self._expanded) > self.limit
                                               or self.nbytes > self.max_bytes):
                dropped = self._expanded.pop(next(iter(self._expanded)))
                self.nbytes -= dropped.nbytes if dropped is not None else 0
        return found

    def centroid(self, bm25: BM25Index, expansion: Expansion, index: VectorIndex | MultiVectorSearch,
                 compute: Callable[[tuple[Expansion, VectorIndex | MultiVectorSearch]], F32 | None]
                 ) -> F32 | None:
        """``compute((expansion, index))``: the centroid of the vectors of its
        memories in ``index`` (kept for the index and size it was made of)."""
        return self._kept(bm25, self._centroids, expansion, of=(id(index), len(index)),
                          compute=lambda: compute((expansion, index)))

    def _kept(self, bm25: BM25Index, table: dict[int, _Entry[_K, _T]], expansion: Expansion, *, of: _K,
              compute: Callable[[], _T]) -> _T:
        """What ``compute()`` gives for ``expansion`` and ``of``, kept in ``table`` (the
        least recently used going past ``limit`` entries)."""
        key = id(expansion)
        with self._lock:
            self._follow(bm25)
            entry = table.pop(key, None)
            if entry is not None and entry[0]() is expansion:
                table[key] = entry  # (now the most recently used)
                if entry[1] == of:
                    return entry[2]
        found = compute()
        with self._lock:
            if bm25.changes == self._changes:
                table[key] = (weakref.ref(expansion), of, found)
                _prune(table)
                while len(table) > 1 and len(table) > self.limit:
                    del table[next(iter(table))]
        return found

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _follow(self, bm25: BM25Index) -> None:
        """Forget everything when ``bm25`` changed, or is another index (under the lock)."""
        if bm25.changes != self._changes or self._index is None or self._index() is not bm25:
            self._clear()
            self._index, self._changes = weakref.ref(bm25), bm25.changes

    def _clear(self) -> None:
        self._expanded.clear()
        self._centroids.clear()
        self.nbytes = 0
        self._changes = -1


def _prune(table: dict[int, Any]) -> None:
    """Drop the entries of expansions gone (each entry's first item: a weak reference)."""
    for key in [key for key, entry in table.items() if entry[0]() is None]:
        del table[key]


def _centroid(key: tuple[Expansion, VectorIndex | MultiVectorSearch]) -> F32 | None:
    """The unit mean of the vectors of the memories the expansion's entities say (or,
    when they say none, name): the first 2,000 by doc; None when none has a vector."""
    expansion, index = key
    docs = (expansion.spoken if len(expansion.spoken) else expansion.docs)[:2000]
    held = docs[index.holds(docs)] if len(docs) else docs
    if not len(held):
        return None
    centroid = _unit(index.vectors(held).mean(axis=0).astype(np.float32))
    centroid.flags.writeable = False
    return centroid


def _at(values: npt.NDArray[np.float64] | npt.NDArray[np.int32] | None, docs: npt.NDArray[np.int64]) -> F64:
    """``values`` (by doc slot) of each of ``docs`` as floats, 0 past their end (or
    with no values)."""
    if values is None:
        return np.zeros(len(docs), dtype=np.float64)
    if not len(docs) or int(docs.max()) < len(values):
        out: F64 = values[docs].astype(np.float64, copy=False)
        return out
    out = np.zeros(len(docs), dtype=np.float64)
    inside = docs < len(values)
    out[inside] = values[docs[inside]]
    return out


def _visible(mask: Mask, allowed: Mask | None) -> Mask:
    """``mask`` (over doc slots) limited to the slots ``allowed`` lets through (a
    copy; slots beyond the shorter of the two are not allowed)."""
    out = mask.copy()
    if allowed is not None:
        out[: len(allowed)] &= allowed[: len(out)]
        out[len(allowed):] = False
    return out


def _unit(vector: F32) -> F32:
    norm = float(np.sqrt(vector.dot(vector)))  # np.linalg.norm's own sum, without its checks
    return vector / norm if norm > 0 else vector


def _reaching_over_graph(docs: npt.NDArray[np.int64], score: F64, cosines_of: _Cosines, index: VectorIndex,
                         vector: F32, *, allowed: Mask | None, nearest: list[tuple[int, float]],
                         count: int) -> tuple[npt.NDArray[np.int64], F64, F64]:
    """The named ``docs`` (ascending, with their full-text ``score``) that may be among
    the ``count`` best by score plus cosine, read from two lists as the threshold
    algorithm reads them: the named memories by full-text score (their cosines
    gathered), and the memories nearest the query among those ``allowed`` (those
    named among them, their cosines the search's): first ``nearest``, the search's
    vector list, then the graph's nearest, deeper. A memory on neither list scores at
    most the last full-text score read plus the last cosine of the nearest (or 0, the
    cosine of a memory without a vector); once ``count`` of those read score above
    that, the best are among them. Until then the lists are read deeper
    (``_REACH_STEPS``); past the last step the best of those read stand. The graph is
    approximate: a named memory it misses among the nearest can be missed, as a
    vector search misses it. Returns the docs read, their scores and their cosines."""
    size = len(docs)
    cosines = np.full(size, np.nan, dtype=np.float64)  # by position in docs; nan: not read
    # the named memories by full-text score, best first (ties by lower doc: docs ascend),
    # as deep as the last round reads: one partition and a sort of those
    order = _best(np.arange(size, dtype=np.int64), score, max(steps for steps, _ in _REACH_STEPS) * count)
    order = order[np.lexsort((order, -score[order]))]
    near, near_cosines = pairs_as_arrays(nearest)
    asked = max(len(near), count)
    last = np.inf
    for by_text, by_vector in _REACH_STEPS:
        if by_vector * count > asked:  # the nearest memories, deeper
            asked = by_vector * count
            near, near_cosines = index.search_arrays(vector, asked, allowed)
        if len(near):
            at = np.searchsorted(docs, near)
            named = at < size
            named[named] = docs[at[named]] == near[named]
            fresh = np.isnan(cosines[at[named]])
            cosines[at[named][fresh]] = near_cosines[named][fresh]
            near = near[:0]
        # a named memory on no list of the nearest: its cosine at most each list's last
        # (or 0, a memory without a vector; a list may be short of what was asked
        # without holding every vector: the graph's answer less what was removed)
        if len(near_cosines):
            last = min(last, float(near_cosines[-1]))
        bound = max(last, 0.0) if last < np.inf else 0.0
        depth = min(by_text * count, size)
        top = order[:depth]
        unread = top[np.isnan(cosines[top])]
        if len(unread):
            cosines[unread] = cosines_of(docs[unread])
        if depth == size:
            break
        held = np.flatnonzero(~np.isnan(cosines))
        if len(held) >= count:
            totals = score[held] + cosines[held]
            kth = np.partition(totals, len(totals) - count)[len(totals) - count]
            if kth > float(score[top[-1]]) + bound:  # nothing unread can reach the best
                break
    held = np.flatnonzero(~np.isnan(cosines))
    return docs[held], score[held], cosines[held]


def _best(ids: npt.NDArray[np.int64], scores: F64, count: int) -> npt.NDArray[np.int64]:
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
