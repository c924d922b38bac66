"""Helpers for the ScopeMemory tests: a driver that embeds like the ref does, and
brute-force references for every search mode."""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from mnemex.effects import Image, Job, SnapshotData, Step
from mnemex.index import Tokenizer, normalize_phrase, words
from mnemex.memories.behaviour import ScopeMemory, ScopeSettings
from mnemex.memories.filters import compile_filter
from mnemex.memories.protocol import MemoryRecord, NewMemory, Remember, Search
from mnemex.memories.snapshot import encode_vector
from mnemex.models.hashing import HashingEmbedder
from mnemex.persistence.snapshot import sidecar_bytes

EMBEDDER = HashingEmbedder(dim=32)
KEY = ("app", "user")


async def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    return EMBEDDER.embed(list(texts))


def run_work(work: Any) -> Any:
    """A job's work, run here: a coroutine function is driven to its end (the test
    embedder never waits), anything else is called."""
    if not inspect.iscoroutinefunction(work):
        return work()
    coroutine = work()
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("a job's coroutine waited for something; drive it with trio instead")


def settings(**overrides: Any) -> ScopeSettings:
    # the brute-force references model the ranking without the entity graph's query
    # expansion (tests/knowledge/test_entity_graph.py checks expansion against it)
    base = ScopeSettings(embedder_name=EMBEDDER.name, embedder_dim=EMBEDDER.dim, embed=embed,
                         hnsw_threshold=10_000, fusion_candidates=1000, expansion=False)
    return replace(base, **overrides)


class Driver:
    """Sends commands the way the ref would: ids, times and vectors filled in."""

    def __init__(self, memory: ScopeMemory | None = None, **overrides: Any) -> None:
        self.memory = memory if memory is not None else ScopeMemory(KEY, settings(**overrides))
        self.now = 1_000.0
        self.ids = itertools.count(1)
        self.jobs: list[Job] = []

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now

    def send(self, command: Any) -> Any:
        out = self.memory.handle(command)
        if isinstance(out, Step):
            self.jobs.extend(effect for effect in out.effects if isinstance(effect, Job))
            return out.reply
        return out

    def new(self, content: str, **fields: Any) -> NewMemory:
        vector = encode_vector(EMBEDDER.embed([content])[0])
        memory_id = fields.pop("id", None) or f"m{next(self.ids):06d}"
        return NewMemory(id=memory_id, content=content, vector=vector, **fields)

    def remember(self, *contents: str | NewMemory, **fields: Any) -> list[str]:
        memories = [c if isinstance(c, NewMemory) else self.new(c, **fields) for c in contents]
        reply = self.send(Remember(memories=memories, embedder=EMBEDDER.name, dim=EMBEDDER.dim,
                                   now=self.tick()))
        return list(reply.ids)

    def search(self, query: str, mode: str = "hybrid", top_k: int = 10, min_score: float | None = None,
               filter: Mapping[str, Any] | None = None) -> Any:
        return self.send(self.search_command(query, mode, top_k, min_score, filter))

    def search_command(self, query: str, mode: str = "hybrid", top_k: int = 10, min_score: float | None = None,
                       filter: Mapping[str, Any] | None = None) -> Search:
        vector = encode_vector(EMBEDDER.embed([query])[0]) if mode in ("vector", "hybrid") else None
        return Search(query=query, vector=vector, embedder=EMBEDDER.name if vector else None,
                      dim=EMBEDDER.dim if vector else 0, top_k=top_k, mode=mode,  # type: ignore[arg-type]
                      min_score=min_score, filter=dict(filter) if filter else None, now=self.now)

    def run_jobs(self) -> None:
        while self.jobs:
            job = self.jobs.pop(0)
            from mnemex.effects import JobResult

            try:
                result = JobResult(value=run_work(job.work))
            except Exception as exc:  # pragma: no cover - reported by the deliver
                result = JobResult(error=exc)
            self.send(job.deliver(result))


def image_of(data: SnapshotData, *, optional: bool = True) -> Image:
    """The Image a store would give back for ``data`` (sidecar writers run into bytes);
    ``optional=False`` leaves out every sidecar but the required ones."""
    try:
        records = list(data.records() if callable(data.records) else data.records)
        sidecars = data.sidecars() if callable(data.sidecars) else (data.sidecars or {})
        blobs = {name: sidecar_bytes(blob) for name, blob in sidecars.items()
                 if optional or name in data.required}
    finally:
        if data.done is not None:
            data.done()
    return Image(records, dict(data.extra), blobs)


def snapshot_image(memory: ScopeMemory, *, optional: bool = True) -> Image:
    return image_of(memory.snapshot(), optional=optional)


def restored(memory: ScopeMemory, *, sidecars: bool = True) -> ScopeMemory:
    """``memory`` restored from its snapshot; ``sidecars=False``: from its lines and
    the sidecars it cannot do without (the vectors) only."""
    return ScopeMemory.restore(KEY, snapshot_image(memory, optional=sidecars), memory.settings)


# -- brute force -------------------------------------------------------------------------------
def allowed_records(records: Iterable[MemoryRecord], spec: Mapping[str, Any] | None) -> list[MemoryRecord]:
    compiled = compile_filter(spec)
    return [r for r in records if compiled.matches(r)]


def keyword_expected(records: Sequence[MemoryRecord], query: str) -> list[tuple[str, float, float]]:
    """(id, score, timestamp) of every match, unordered within ties."""
    wanted = set(words(query))
    if not wanted:
        return []
    out = []
    for record in records:
        matched = len(wanted & set(words(record.content)))
        if matched:
            out.append((record.id, matched / len(wanted), record.timestamp))
    return out


def bm25_scores(all_records: Sequence[MemoryRecord], query: str, k1: float = 1.5,
                b: float = 0.75) -> tuple[dict[str, float], float]:
    """BM25 of every record (over the whole scope's statistics) and the query's ideal
    score. Quoted phrases are not modelled here (tests keep queries unquoted)."""
    tokenizer = Tokenizer()
    docs = {r.id: tokenizer.tokens(r.content) for r in all_records}
    n = len(docs)
    avg = sum(len(t) for t in docs.values()) / n if n else 1.0
    terms = list(dict.fromkeys(tokenizer.tokens(query)))
    scores: dict[str, float] = {}
    ideal = 0.0
    for term in terms:
        df = sum(1 for tokens in docs.values() if term in tokens)
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        ideal += idf
        for memory_id, tokens in docs.items():
            tf = tokens.count(term)
            if not tf:
                continue
            norm = tf / (1 - b + b * len(tokens) / avg)
            scores[memory_id] = scores.get(memory_id, 0.0) + idf * (k1 + 1) * norm / (k1 + norm)
    return scores, ideal


def entity_matches(record: MemoryRecord, query: str) -> int:
    text = f" {normalize_phrase(query)} "
    return sum(1 for entity in {normalize_phrase(e) for e in record.entities} if f" {entity} " in text)


def cosines(records: Sequence[MemoryRecord], query: str,
            vectors: Mapping[str, np.ndarray]) -> dict[str, float]:
    q = EMBEDDER.embed([query])[0].astype(np.float64)
    out = {}
    for record in records:
        v = vectors.get(record.id)
        if v is not None:
            out[record.id] = float(np.dot(v.astype(np.float64), q))
    return out


def assert_ranking(actual: Sequence[tuple[str, float]], expected: Mapping[str, float], top_k: int,
                   tol: float = 1e-5) -> None:
    """``actual`` is the top_k of ``expected`` by score (ties in any order)."""
    best = sorted(expected.values(), reverse=True)[:top_k]
    assert len(actual) == len(best), (actual, best)
    for (memory_id, score), want in zip(actual, best, strict=True):
        assert math.isclose(score, want, abs_tol=tol), (memory_id, score, want)
        assert math.isclose(expected[memory_id], score, abs_tol=tol), (memory_id, score, expected[memory_id])
