"""ScopeMemory against brute force: random writes, forgets, updates and touches; after
each, every search mode (with and without a filter) must give what a full scan of
a plain model gives, and journal replay must rebuild the same state."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from scope_support import (
    EMBEDDER,
    KEY,
    Driver,
    allowed_records,
    assert_ranking,
    bm25_scores,
    entity_matches,
    keyword_expected,
    restored,
)

from mnemex.index import _coarse
from mnemex.memories.behaviour import ScopeMemory, ScopeSettings, scope_codec
from mnemex.memories.protocol import CountMemories, Forget, GetMemory, MemoryRecord, Touch, UpdateMemory
from mnemex.memories.snapshot import encode_vector

VOCABULARY = ["tea", "coffee", "hiking", "paint", "painting", "dog", "cat", "Paris", "New", "York", "music",
              "guitar", "the", "and", "support", "group", "race", "charity", "kids", "camping"]
ENTITIES = ["Paris", "New York"]
FILTERS: list[dict[str, Any] | None] = [None, {"min_importance": 0.5}, {"categories": "a"},
                                        {"entities": "Paris"}, {"timestamp_after": 1_010.0},
                                        {"metadata": {"n": {"$gte": 1}}}]
WEIGHTS = {"rank_importance_weight": 0.1, "rank_recency_weight": 0.05, "rank_access_weight": 0.05,
           "fusion_fulltext_weight": 0.5, "fusion_vector_weight": 0.5,
           # the brute force below models unstemmed BM25 and fixed fusion weights (test_scope_ranking
           # checks the adaptive weights, dates and stemming)
           "fulltext_stem": False, "fusion_adaptive": False, "date_weight": 0.0}

def vector_score(cosine: float, scope: ScopeSettings) -> float:
    """The calibrated vector score, written out (ranking.calibrated_cosine)."""
    def softplus(x: float) -> float:
        s = 0.02
        return s * math.log1p(math.exp(x / s)) if x < 0.5 else x + s * math.log1p(math.exp(-x / s))

    floor, ceiling = scope.cosine_floor, scope.cosine_ceiling
    return min(1.0, max(0.0, (softplus(cosine - floor) - softplus(cosine - ceiling)) / (ceiling - floor)))


texts = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=6).map(" ".join)
queries = st.lists(st.sampled_from([*VOCABULARY, "zebra"]), min_size=1, max_size=4).map(" ".join)


class ScopeAgainstBruteForce(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.driver = Driver(recency_half_life=50.0, **WEIGHTS)
        self.model: dict[str, MemoryRecord] = {}
        self.vectors: dict[str, np.ndarray] = {}
        self.journal: list[bytes] = []

    def send(self, command: Any) -> Any:
        reply = self.driver.send(command)
        self.journal.append(scope_codec.encode(command))
        return reply

    # -- writes -----------------------------------------------------------------------------
    @rule(content=texts, importance=st.sampled_from([0.0, 0.3, 0.5, 0.9]),
          categories=st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True),
          entities=st.lists(st.sampled_from(ENTITIES), max_size=2, unique=True),
          n=st.integers(0, 2), age=st.integers(0, 30))
    def remember(self, content: str, importance: float, categories: list[str],  # noqa: PLR0917
                 entities: list[str], n: int, age: int) -> None:
        d = self.driver
        now = d.tick()
        memory = d.new(content, importance=importance, categories=tuple(categories), entities=tuple(entities),
                       metadata={"n": n}, timestamp=now - age)
        from mnemex.memories.protocol import Remember

        reply = self.send(Remember(memories=[memory], embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=now))
        existing = next((r for r in self.model.values() if r.content == content), None)
        if existing is not None:
            assert reply.ids == [existing.id] and reply.created == [False]
            return
        assert reply.ids == [memory.id]
        self.model[memory.id] = MemoryRecord(
            id=memory.id, content=content, timestamp=now - age, created_at=now, importance=importance,
            categories=tuple(categories), entities=tuple(entities), metadata={"n": n})
        self.vectors[memory.id] = EMBEDDER.embed([content])[0]

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def forget(self, data: Any) -> None:
        victim = data.draw(st.sampled_from(sorted(self.model)))
        reply = self.send(Forget(ids=[victim], now=self.driver.tick()))
        assert reply.ids == [victim]
        del self.model[victim]
        del self.vectors[victim]

    @precondition(lambda self: self.model)
    @rule(data=st.data(), content=texts, importance=st.sampled_from([0.1, 0.6]))
    def update(self, data: Any, content: str, importance: float) -> None:
        target = data.draw(st.sampled_from(sorted(self.model)))
        clash = any(r.content == content and r.id != target for r in self.model.values())
        vector = encode_vector(EMBEDDER.embed([content])[0])
        command = UpdateMemory(id=target, now=self.driver.tick(), content=content, vector=vector,
                               embedder=EMBEDDER.name, dim=EMBEDDER.dim, importance=importance)
        if clash:
            try:
                self.driver.send(command)
            except Exception as exc:  # refused: nothing changes
                assert "already holds this content" in str(exc)
                return
            raise AssertionError("an update onto another memory's content was accepted")
        self.send(command)
        self.model[target] = msgspec.structs.replace(self.model[target], content=content,
                                                     importance=importance)
        self.vectors[target] = EMBEDDER.embed([content])[0]

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def touch(self, data: Any) -> None:
        ids = data.draw(st.lists(st.sampled_from(sorted(self.model)), min_size=1, max_size=3, unique=True))
        now = self.driver.tick()
        self.send(Touch(ids=ids, counts=[2] * len(ids), now=now))
        for memory_id in ids:
            old = self.model[memory_id]
            self.model[memory_id] = msgspec.structs.replace(old, access_count=old.access_count + 2,
                                                            last_accessed_at=now)

    # -- searches against brute force ------------------------------------------------------------
    @rule(query=queries, top_k=st.integers(1, 8), spec=st.sampled_from(FILTERS))
    def search_keyword(self, query: str, top_k: int, spec: dict[str, Any] | None) -> None:
        d = self.driver
        allowed = allowed_records(self.model.values(), spec)
        expected = keyword_expected(allowed, query)
        expected.sort(key=lambda item: (-item[1], -item[2], d.memory.doc_of[item[0]]))
        hits = d.search(query, "keyword", top_k=top_k, filter=spec).hits
        assert [h.memory.id for h in hits] == [memory_id for memory_id, _, _ in expected[:top_k]]

    @rule(query=queries, top_k=st.integers(1, 8), spec=st.sampled_from(FILTERS))
    def search_fulltext(self, query: str, top_k: int, spec: dict[str, Any] | None) -> None:
        d = self.driver
        raw, ideal = self._fulltext(query, spec)
        hits = d.search(query, "fulltext", top_k=top_k, filter=spec).hits
        unit = ideal / max(1, len(set(d.memory.bm25.tokenizer.tokens(query))))
        actual = [(h.memory.id, h.scores["bm25"] + unit * h.scores["entities"]) for h in hits]
        assert_ranking(actual, {k: v for k, v in raw.items() if v > 0}, top_k, tol=1e-4)
        for hit in hits:
            assert hit.score == min(1.0, round(raw[hit.memory.id] / ideal, 6)) or abs(
                hit.score - min(1.0, raw[hit.memory.id] / ideal)) < 1e-5

    @rule(query=queries, top_k=st.integers(1, 8), spec=st.sampled_from(FILTERS))
    def search_vector(self, query: str, top_k: int, spec: dict[str, Any] | None) -> None:
        allowed = allowed_records(self.model.values(), spec)
        expected = self._cosines(allowed, query)
        hits = self.driver.search(query, "vector", top_k=top_k, min_score=-1.0, filter=spec).hits
        assert_ranking([(h.memory.id, h.scores["cosine"]) for h in hits], expected, top_k)

    @rule(query=queries, top_k=st.integers(1, 8), spec=st.sampled_from(FILTERS))
    def search_hybrid(self, query: str, top_k: int, spec: dict[str, Any] | None) -> None:
        d = self.driver
        allowed = allowed_records(self.model.values(), spec)
        raw, ideal = self._fulltext(query, spec)
        cos = self._cosines(allowed, query)
        expected = {}
        for record in allowed:
            text = min(1.0, raw.get(record.id, 0.0) / ideal) if ideal > 0 else 0.0
            relevance = (text + vector_score(cos[record.id], d.memory.settings)) / 2
            recency = 0.5 ** (max(0.0, d.now - record.timestamp) / 50.0)
            access = record.access_count / (record.access_count + 10)
            factor = 1 + 0.1 * (2 * record.importance - 1) + 0.05 * (2 * recency - 1) + 0.05 * access
            expected[record.id] = relevance * min(1.5, max(0.3, factor))
        hits = d.search(query, "hybrid", top_k=top_k, min_score=-1.0, filter=spec).hits
        assert_ranking([(h.memory.id, h.score) for h in hits], expected, top_k, tol=2e-5)

    @rule(batch=st.lists(st.tuples(queries, st.integers(1, 8), st.sampled_from(FILTERS)), min_size=2,
                         max_size=5))
    def search_hybrid_read_ahead(self, batch: list[tuple[str, int, dict[str, Any] | None]]) -> None:
        """Hybrid searches read ahead (``ScopeMemory.read_ahead``, as the server's batches
        are), here through the coarse pass whatever the size, find each what it finds alone."""
        d = self.driver
        kept = _coarse.MIN_VALUES
        _coarse.MIN_VALUES = 1
        try:
            commands = [d.search_command(query, "hybrid", top_k, None, spec) for query, top_k, spec in batch]
            d.memory.read_ahead(commands)
            ahead = [d.send(command) for command in commands]
            alone = [d.send(msgspec.structs.replace(command)) for command in commands]
        finally:
            _coarse.MIN_VALUES = kept
        assert [[(h.memory.id, h.score, h.scores, h.found_by) for h in r.hits] for r in ahead] == \
            [[(h.memory.id, h.score, h.scores, h.found_by) for h in r.hits] for r in alone]

    def _fulltext(self, query: str, spec: dict[str, Any] | None) -> tuple[dict[str, float], float]:
        everything = list(self.model.values())
        scores, ideal = bm25_scores(everything, query)
        terms = len(set(self.driver.memory.bm25.tokenizer.tokens(query)))
        unit = ideal / terms if terms else 1.0
        raw: dict[str, float] = {}
        for record in allowed_records(everything, spec):
            value = scores.get(record.id, 0.0) + unit * entity_matches(record, query)
            if value > 0:
                raw[record.id] = value
        if not terms:
            named = {e for r in everything for e in r.entities if entity_matches(
                MemoryRecord(id="q", content="", entities=(e,)), query)}
            ideal = unit * len(named)
        return raw, ideal

    def _cosines(self, records: list[MemoryRecord], query: str) -> dict[str, float]:
        q = EMBEDDER.embed([query])[0].astype(np.float64)
        return {r.id: float(np.dot(self.vectors[r.id].astype(np.float64), q)) for r in records}

    # -- invariants --------------------------------------------------------------------------------
    @invariant()
    def records_match_the_model(self) -> None:
        d = self.driver
        assert d.send(CountMemories()) == len(self.model)
        for memory_id, record in self.model.items():
            got = d.send(GetMemory(id=memory_id))
            assert (got.content, got.importance, got.access_count, got.categories, got.entities) == (
                record.content, record.importance, record.access_count, record.categories, record.entities)

    def teardown(self) -> None:
        # replay of the journal, and restore from a snapshot, rebuild the same state
        replayed = ScopeMemory(KEY, self.driver.memory.settings)
        for payload in self.journal:
            replayed.handle(scope_codec.decode(payload))
        assert replayed.doc_of == self.driver.memory.doc_of
        assert list(replayed.records()) == list(self.driver.memory.records())
        again = restored(self.driver.memory)
        assert list(again.records()) == list(self.driver.memory.records())
        assert again.free == self.driver.memory.free


ScopeAgainstBruteForce.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_scope_against_brute_force = ScopeAgainstBruteForce.TestCase
