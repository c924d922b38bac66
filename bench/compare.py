"""mnemex beside its peers: the same memories, the same queries, the same embedding
function, one table.

Run: python bench/compare.py [--sizes 1000,10000,100000] [--scopes 1000x100]
     [--peers mnemex,adk,langgraph,fts5,numpy,hnswlib] [--embedder hashing]
     [--queries N] [--budget SECONDS] [--quick] [--scaling]

Systems (each measured in a subprocess of its own, so its peak RSS is its own, its
helper processes included: mnemex's graph helpers, sampled with it every 20 ms):

* ``mnemex``: through the public API (``open_runtime``, ``rt.scope(...)``,
  ``remember_many`` in batches of 1,000 from concurrent writers, ``search`` with
  ``mode=keyword|fulltext|vector|hybrid``, ``top_k=10``, ``min_score=-1``), on a
  data directory in a temporary folder with the default fsync policy. Ingest
  counts until every memory is acknowledged and, past ``hnsw_threshold``, until
  the HNSW graph is built.
* ``adk``: Google ADK's ``InMemoryMemoryService``: ``add_session_to_memory`` of
  sessions of 100 events (building the events counts as ingest) and
  ``search_memory`` (word overlap, ten best), compared with mnemex ``keyword``.
* ``langgraph``: LangGraph's ``InMemoryStore(index={dims, embed, fields})`` with
  mnemex's own embedder as ``embed`` (rows returned as lists of floats, the
  Embeddings contract); puts go through ``store.batch`` of 1,000 ``PutOp`` (what
  ``put`` does one at a time), searches through ``store.search(query=...,
  limit=10)``. Compared with mnemex ``vector``.
* ``fts5``: SQLite FTS5 (Python's sqlite3) in a file in a temporary folder, default
  journal and sync settings, a 1 GiB page cache so searches read memory,
  inserts committed per 1,000 and an ``optimize`` at the end (counted).
  Queries: the question's words minus the English stop words mnemex drops,
  OR-ed, ranked by ``bm25()``. Compared with mnemex ``fulltext``.
* ``numpy``: exact inner-product search over the same vectors (a float32 matrix
  per scope; ``vector given`` rows time the scan alone, ``vector`` rows include
  embedding the query as mnemex does).
* ``hnswlib``: a raw hnswlib graph over the same vectors with mnemex's own
  parameters (``Config.hnsw_m``, ``hnsw_ef_construction``, ``hnsw_ef_search``,
  ``hnsw_threads`` to build, one thread to query, inner-product space).

numpy and hnswlib load the vectors computed once by the parent (their ingest
is the index build alone); mnemex and LangGraph embed the texts themselves.

Workload: memories are LoCoMo dialogue turns ("speaker: text", read at run time
from ../shared/data/locomo-dev.json, never copied), each original once, then
copies with a seeded variation (one word dropped, one word of the corpus
inserted) until there are N, shuffled. Queries are the LoCoMo questions of
categories 1-4, shuffled, the same for every system. Workloads: one scope of N
memories for each of ``--sizes``, and ``--scopes SxP``: S scopes of P memories
(query i goes to scope i * 7919 mod S).

Figures per system and workload: ingest rate, acknowledged (``acked/s``: every
write answered; mnemex may still be building its HNSW graph beside the actor) and
complete (``complete/s``: searchable with the graph built), search p50/p99 per mode, peak
RSS, dev recall@10 (one scope only: share of a question's evidence turns whose
text, original or varied, is in the top 10) and recall@10 against an exact scan
of the same vectors (vector modes; ties at the tenth score count). Each system
runs at most ``--queries`` queries per mode and stops after ``--budget``
seconds once ``--min-queries`` are done; the tables say how many ran. A peer
that cannot be imported or fails says so in the table; no figure is made up.

``--scaling`` measures one scope from 1,000 to 1,000,000 memories (a size is
skipped, and says so, when the system's figures at the previous size predict
more than ``--max-rss-gb`` or ``--child-timeout``) and plots search p50 and
ingest rate against N to bench/results/compare-scaling.png (a full run also
copies it to bench/plots/compare-scaling.png, committed, which the README shows).

Prints the tables and writes bench/results/compare.json (compare-quick.json,
compare-scaling.json; compare-custom.json for a run with other flags).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

# bench/ goes last on the path: its http.py would otherwise hide the standard library's
# http, which google-adk and langgraph import.
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import (  # noqa: E402
    RESULTS,
    TreeRss,
    fmt_ms,
    fmt_num,
    fmt_ratio,
    fts5_match,
    latency_summary,
    load_locomo,
    locomo_questions,
    locomo_turns,
    machine,
    peak_rss_bytes,
    rss_bytes,
    table,
    write_results,
)

import mnemex  # noqa: E402
from mnemex.models.embedders import embedder_from_config  # noqa: E402

SYSTEMS = ("mnemex", "adk", "langgraph", "fts5", "numpy", "hnswlib")
MNEMEX_MODES = ("keyword", "fulltext", "vector", "hybrid")
MODES: dict[str, tuple[str, ...]] = {
    "mnemex": MNEMEX_MODES, "adk": ("keyword",), "langgraph": ("vector",), "fts5": ("fulltext",),
    "numpy": ("vector", "vector given"), "hnswlib": ("vector", "vector given"),
}
# the mnemex mode each peer's search is set against
COUNTERPART = {"adk": "keyword", "langgraph": "vector", "fts5": "fulltext", "numpy": "vector",
               "hnswlib": "vector"}
VECTOR_MODES = ("vector", "vector given")
BATCH = 1000
SESSION_EVENTS = 100
SCOPE_STRIDE = 7919
TIE = 1e-5
BAR_SIZE = 100_000
SCALING_SIZES = (1000, 3000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
SHOWN = _BENCH / "plots" / "compare-scaling.png"  # bench/results/ is not committed; this copy is


# -- the workload -----------------------------------------------------------------------------
def build_corpus(turns: Sequence[str], size: int, seed: int = 7) -> tuple[list[str], list[int]]:
    """``size`` distinct memory texts and, for each, the index of the turn it comes
    from: every distinct turn once (a seeded sample when ``size`` is smaller), then
    varied copies (one word dropped, one word of the corpus inserted), shuffled."""
    rng = random.Random(seed)
    first: dict[str, int] = {}
    for index, text in enumerate(turns):
        first.setdefault(text, index)
    originals = list(first.items())
    order = list(range(len(originals)))
    rng.shuffle(order)
    if size <= len(originals):
        picked = [originals[i] for i in order[:size]]
    else:
        picked = list(originals)
        seen = set(first)
        pool = [word for text, _ in originals for word in text.split(": ", 1)[-1].split()]
        while len(picked) < size:
            for i in order:
                text, origin = originals[i]
                for _ in range(8):
                    variant = _vary(text, rng, pool)
                    if variant not in seen:
                        break
                else:
                    continue
                seen.add(variant)
                picked.append((variant, origin))
                if len(picked) == size:
                    break
    rng.shuffle(picked)
    return [text for text, _ in picked], [origin for _, origin in picked]


def _vary(text: str, rng: random.Random, pool: Sequence[str]) -> str:
    speaker, _, body = text.partition(": ")
    tokens = body.split()
    if len(tokens) > 2:
        del tokens[rng.randrange(len(tokens))]
    tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(pool))
    return f"{speaker}: {' '.join(tokens)}"


@dataclass(frozen=True, slots=True)
class Workload:
    """``scopes`` scopes of ``per_scope`` memories each (one scope: the size test)."""

    scopes: int
    per_scope: int

    @property
    def size(self) -> int:
        return self.scopes * self.per_scope

    @property
    def name(self) -> str:
        return f"one:{self.size}" if self.scopes == 1 else f"many:{self.scopes}x{self.per_scope}"

    @property
    def title(self) -> str:
        if self.scopes == 1:
            return f"one scope of {self.size:,} memories"
        return f"{self.scopes:,} scopes of {self.per_scope:,} memories"

    @classmethod
    def parse(cls, text: str) -> Workload:
        kind, _, rest = text.partition(":")
        if kind == "one":
            return cls(1, int(rest))
        scopes, _, per = rest.partition("x")
        return cls(int(scopes), int(per))


def prepare(workspace: Path, workloads: list[Workload], embedder_name: str) -> dict[str, Any]:
    """Write what the children read: the corpus of each size, its vectors (computed
    once, with the shared embedder), the queries and the truth of each workload."""
    conversations = load_locomo()
    turns = [turn for conversation in conversations for turn in locomo_turns(conversation)]
    turn_index = {turn.key: i for i, turn in enumerate(turns)}
    questions = locomo_questions(conversations)
    random.Random(11).shuffle(questions)
    (workspace / "queries.json").write_bytes(orjson.dumps(
        [{"text": q.text, "category": q.category, "evidence": sorted(turn_index[k] for k in q.evidence)}
         for q in questions]))
    embedder = embedder_from_config(mnemex.Config(embedder=embedder_name))
    query_vectors = embedder.embed([q.text for q in questions])
    info: dict[str, Any] = {"embedder": embedder.name, "dim": embedder.dim, "turns": len(turns),
                            "questions": len(questions), "embed_per_s": {}}
    for size in sorted({w.size for w in workloads}):
        texts, origins = build_corpus([turn.memory for turn in turns], size)
        (workspace / f"corpus-{size}.json").write_bytes(orjson.dumps({"texts": texts, "origins": origins}))
        started = time.perf_counter()
        vectors = np.empty((size, embedder.dim), dtype=np.float32)
        for start in range(0, size, 4096):
            vectors[start:start + 4096] = embedder.embed(texts[start:start + 4096])
        info["embed_per_s"][size] = size / (time.perf_counter() - started)
        np.save(workspace / f"vectors-{size}.npy", vectors)
        present = set(origins)
        for workload in (w for w in workloads if w.size == size):
            exact = _exact_truth(vectors, query_vectors, workload)
            dev = ([sorted(turn_index[k] for k in q.evidence if turn_index[k] in present) for q in questions]
                   if workload.scopes == 1 else None)
            (workspace / f"truth-{workload.name.replace(':', '-')}.json").write_bytes(
                orjson.dumps({"exact": exact, "dev": dev}))
        del vectors
    return info


def scope_of_query(query: int, scopes: int) -> int:
    return (query * SCOPE_STRIDE) % scopes


def _exact_truth(vectors: np.ndarray, queries: np.ndarray, workload: Workload) -> list[list[int]]:
    """Per query, the ids whose exact score reaches the tenth best (ties included)."""
    out: list[list[int]] = []
    if workload.scopes == 1:
        for start in range(0, len(queries), 32):
            scores = vectors @ queries[start:start + 32].T
            for column in scores.T:
                k = min(10, len(column))
                tenth = np.partition(column, -k)[-k]
                out.append(np.flatnonzero(column >= tenth - TIE).tolist())
        return out
    per = workload.per_scope
    for i, query in enumerate(queries):
        base = scope_of_query(i, workload.scopes) * per
        column = vectors[base:base + per] @ query
        k = min(10, per)
        tenth = np.partition(column, -k)[-k]
        out.append((np.flatnonzero(column >= tenth - TIE) + base).tolist())
    return out


class Work:
    """What a child measures: read back from the workspace."""

    def __init__(self, workspace: Path, workload: Workload, embedder_name: str) -> None:
        self.workspace = workspace
        self.workload = workload
        self.embedder_name = embedder_name
        corpus = orjson.loads((workspace / f"corpus-{workload.size}.json").read_bytes())
        self.texts: list[str] = corpus["texts"]
        self.origins: list[int] = corpus["origins"]
        queries = orjson.loads((workspace / "queries.json").read_bytes())
        self.queries: list[str] = [q["text"] for q in queries]
        truth = orjson.loads((workspace / f"truth-{workload.name.replace(':', '-')}.json").read_bytes())
        self.exact: list[set[int]] = [set(ids) for ids in truth["exact"]]
        self.dev: list[set[int]] | None = ([set(ids) for ids in truth["dev"]]
                                           if truth["dev"] is not None else None)
        per = workload.per_scope
        self.scopes = [range(s * per, (s + 1) * per) for s in range(workload.scopes)]
        self.query_scope = [scope_of_query(i, workload.scopes) for i in range(len(self.queries))]

    def vectors(self) -> np.ndarray:
        matrix: np.ndarray = np.load(self.workspace / f"vectors-{self.workload.size}.npy")
        return matrix

    def embedder(self) -> Any:
        return embedder_from_config(mnemex.Config(embedder=self.embedder_name))


# -- the systems ----------------------------------------------------------------------------------
class Unavailable(Exception):
    """The peer cannot run here (not installed); the table says so."""


class System:
    """One system under test. ``run`` calls ``body`` inside whatever event loop or
    context the system needs; ``search`` returns corpus ids, best first."""

    name = ""
    note = ""

    def __init__(self, work: Work, folder: Path, args: argparse.Namespace) -> None:
        self.work = work
        self.folder = folder
        self.args = args
        self.extra: dict[str, Any] = {}

    def run(self, body: Callable[[], Awaitable[None]]) -> None:
        asyncio.run(body())

    async def ingest(self) -> None:
        raise NotImplementedError

    async def ready(self) -> None:
        """Wait for work the system finishes after acknowledging the writes."""

    async def warm(self) -> None:
        """Untimed set-up before searches (warm the embedder's word cache)."""

    async def search(self, mode: str, query: int) -> list[int]:
        raise NotImplementedError


class Mnemex(System):
    name = "mnemex"

    def __init__(self, work: Work, folder: Path, args: argparse.Namespace) -> None:
        super().__init__(work, folder, args)
        # (snapshot_min_growth 0: the shutdown snapshots the scopes whatever came before,
        # so the peak RSS always includes a snapshot)
        self.config = mnemex.Config(data_dir=str(folder / "data"), embedder=work.embedder_name,
                                    snapshot_min_growth=0.0)
        self.note = (f"public API, data_dir on disk, fsync={self.config.fsync}, "
                     f"hnsw_threshold={self.config.hnsw_threshold:,}")
        self.position = {text: i for i, text in enumerate(work.texts)}
        self.rt: Any = None
        self.refs: list[Any] = []

    def run(self, body: Callable[[], Awaitable[None]]) -> None:
        import trio

        async def main() -> None:
            async with mnemex.open_runtime(self.config) as rt:
                self.rt = rt
                self.refs = [rt.scope(user_id=f"u{s}", app_name="bench")
                             for s in range(len(self.work.scopes))]
                await body()

        trio.run(main)

    async def ingest(self) -> None:
        import trio

        jobs = [(self.refs[s], [self.work.texts[i] for i in ids[start:start + BATCH]])
                for s, ids in enumerate(self.work.scopes) for start in range(0, len(ids), BATCH)]
        feed = iter(jobs)
        writers = 2 if len(self.work.scopes) == 1 else 8
        self.extra["writers"] = writers

        async def writer() -> None:
            for ref, texts in feed:
                await ref.remember_many(texts)

        async with trio.open_nursery() as nursery:
            for _ in range(writers):
                nursery.start_soon(writer)

    async def ready(self) -> None:
        import trio

        threshold = self.config.hnsw_threshold
        for ref, ids in zip(self.refs, self.work.scopes, strict=True):
            if len(ids) < threshold:
                continue
            stats = await ref.stats()
            while stats.vector_mode != "hnsw" or stats.graph_pending:
                await trio.sleep(0.05)
                stats = await ref.stats()
        stats = await self.refs[0].stats()
        self.extra["vector_mode"] = stats.vector_mode
        assert stats.count == len(self.work.scopes[0]), stats

    async def warm(self) -> None:
        self.refs[0].embedder.embed(self.work.queries)

    async def search(self, mode: str, query: int) -> list[int]:
        ref = self.refs[self.work.query_scope[query]]
        result = await ref.search(self.work.queries[query], top_k=10, mode=mode, min_score=-1.0)
        return [self.position[hit.memory.content] for hit in result.hits]


class Adk(System):
    name = "adk"
    note = "google-adk InMemoryMemoryService: add_session_to_memory (100 events a session), search_memory"

    def __init__(self, work: Work, folder: Path, args: argparse.Namespace) -> None:
        super().__init__(work, folder, args)
        try:
            from google.adk.events import Event
            from google.adk.memory import InMemoryMemoryService
            from google.adk.sessions import Session
            from google.genai import types
        except ImportError as exc:
            raise Unavailable(f"google-adk is not installed ({exc})") from exc
        import importlib.metadata

        self.note += f" (google-adk {importlib.metadata.version('google-adk')})"
        self.service = InMemoryMemoryService()
        self.classes = (Event, Session, types)

    async def ingest(self) -> None:
        event_class, session_class, types = self.classes
        texts = self.work.texts
        for s, ids in enumerate(self.work.scopes):
            for start in range(0, len(ids), SESSION_EVENTS):
                events = [event_class(id=str(i), invocation_id="bench", author="user", timestamp=float(i),
                                      content=types.Content(role="user", parts=[types.Part(text=texts[i])]))
                          for i in ids[start:start + SESSION_EVENTS]]
                await self.service.add_session_to_memory(session_class(
                    id=f"s{start}", app_name="bench", user_id=f"u{s}", events=events))

    async def search(self, mode: str, query: int) -> list[int]:
        response = await self.service.search_memory(
            app_name="bench", user_id=f"u{self.work.query_scope[query]}", query=self.work.queries[query])
        return [int(memory.id) for memory in response.memories if memory.id is not None]


class LangGraph(System):
    name = "langgraph"

    def __init__(self, work: Work, folder: Path, args: argparse.Namespace) -> None:
        super().__init__(work, folder, args)
        try:
            from langgraph.store.base import PutOp
            from langgraph.store.memory import InMemoryStore
        except ImportError as exc:
            raise Unavailable(f"langgraph is not installed ({exc})") from exc
        import importlib.metadata

        self.embedder = work.embedder()
        embedder = self.embedder

        def embed(texts: Sequence[str]) -> list[list[float]]:
            rows: list[list[float]] = embedder.embed(list(texts)).tolist()
            return rows

        self.note = (f"langgraph {importlib.metadata.version('langgraph')} InMemoryStore, index "
                     f"dims={embedder.dim}, embed=mnemex's {embedder.name}; store.batch(PutOp x1000), "
                     f"store.search(query=, limit=10)")
        self.store = InMemoryStore(index={"dims": embedder.dim, "embed": embed, "fields": ["text"]})
        self.put = PutOp

    async def ingest(self) -> None:
        texts = self.work.texts
        for s, ids in enumerate(self.work.scopes):
            namespace = ("bench", f"u{s}")
            for start in range(0, len(ids), BATCH):
                self.store.batch([self.put(namespace, str(i), {"text": texts[i]})
                                  for i in ids[start:start + BATCH]])

    async def warm(self) -> None:
        self.embedder.embed(self.work.queries)

    async def search(self, mode: str, query: int) -> list[int]:
        items = self.store.search(("bench", f"u{self.work.query_scope[query]}"),
                                  query=self.work.queries[query], limit=10)
        return [int(item.key) for item in items]


class Fts5(System):
    name = "fts5"

    def __init__(self, work: Work, folder: Path, args: argparse.Namespace) -> None:
        super().__init__(work, folder, args)
        import sqlite3

        self.db = sqlite3.connect(folder / "fts5.db")
        self.db.execute("PRAGMA cache_size = -1048576")
        self.many = len(work.scopes) > 1
        try:
            if self.many:
                self.db.execute("CREATE VIRTUAL TABLE mem USING fts5(scope, content)")
                self.db.execute("INSERT INTO mem(mem, rank) VALUES ('rank', 'bm25(0.0, 1.0)')")
            else:
                self.db.execute("CREATE VIRTUAL TABLE mem USING fts5(content)")
        except sqlite3.OperationalError as exc:
            raise Unavailable(f"this Python's SQLite {sqlite3.sqlite_version} has no FTS5 ({exc})") from exc
        self.db.commit()
        self.note = (f"SQLite {sqlite3.sqlite_version} FTS5 (unicode61), file db, default journal and "
                     f"synchronous, 1 GiB cache, commit per 1,000, optimize; bm25(); query words minus "
                     f"stop words, OR-ed" + ("; scope as a column, weight 0" if self.many else ""))

    async def ingest(self) -> None:
        texts = self.work.texts
        for s, ids in enumerate(self.work.scopes):
            for start in range(0, len(ids), BATCH):
                chunk = ids[start:start + BATCH]
                with self.db:
                    if self.many:
                        self.db.executemany("INSERT INTO mem(rowid, scope, content) VALUES (?, ?, ?)",
                                            [(i, f"u{s}", texts[i]) for i in chunk])
                    else:
                        self.db.executemany("INSERT INTO mem(rowid, content) VALUES (?, ?)",
                                            [(i, texts[i]) for i in chunk])
        with self.db:
            self.db.execute("INSERT INTO mem(mem) VALUES ('optimize')")

    async def search(self, mode: str, query: int) -> list[int]:
        match = fts5_match(self.work.queries[query])
        if not match:
            return []
        if self.many:
            match = f'scope : "u{self.work.query_scope[query]}" AND ({match})'
        rows = self.db.execute("SELECT rowid FROM mem WHERE mem MATCH ? ORDER BY rank LIMIT 10",
                               (match,)).fetchall()
        return [row[0] for row in rows]


class _VectorFloor(System):
    """Shared by the numpy and hnswlib floors: the parent's vectors, per scope."""

    async def warm(self) -> None:
        self.embedder = self.work.embedder()
        self.query_vectors = self.embedder.embed(self.work.queries)

    def query_vector(self, mode: str, query: int) -> np.ndarray:
        if mode == "vector given":
            vector: np.ndarray = self.query_vectors[query]
            return vector
        matrix: np.ndarray = self.embedder.embed([self.work.queries[query]])
        return matrix[0]


class NumpyExact(_VectorFloor):
    name = "numpy"
    note = "exact inner product over a float32 matrix per scope (argpartition), 1 BLAS thread"

    async def ingest(self) -> None:
        vectors = self.work.vectors()
        self.matrices = [np.ascontiguousarray(vectors[ids.start:ids.stop]) for ids in self.work.scopes]
        del vectors

    async def search(self, mode: str, query: int) -> list[int]:
        vector = self.query_vector(mode, query)
        scope = self.work.query_scope[query]
        scores = self.matrices[scope] @ vector
        k = min(10, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top])]
        base = self.work.scopes[scope].start
        return (top + base).tolist()


class Hnswlib(_VectorFloor):
    name = "hnswlib"

    def __init__(self, work: Work, folder: Path, args: argparse.Namespace) -> None:
        super().__init__(work, folder, args)
        try:
            import hnswlib
        except ImportError as exc:
            raise Unavailable(f"hnswlib is not installed ({exc})") from exc
        self.hnswlib = hnswlib
        cfg = mnemex.Config()
        self.m, self.ef_construction = cfg.hnsw_m, cfg.hnsw_ef_construction
        self.ef_search, self.threads = cfg.hnsw_ef_search, cfg.hnsw_threads
        self.note = (f"hnswlib, space ip, M={self.m}, ef_construction={self.ef_construction}, "
                     f"ef={self.ef_search} (mnemex.Config), build threads {self.threads}, query 1 thread")

    async def ingest(self) -> None:
        vectors = self.work.vectors()
        self.graphs = []
        for ids in self.work.scopes:
            graph = self.hnswlib.Index(space="ip", dim=vectors.shape[1])
            graph.init_index(max_elements=len(ids), M=self.m, ef_construction=self.ef_construction,
                             random_seed=100)
            graph.set_num_threads(self.threads)
            for start in range(ids.start, ids.stop, 10 * BATCH):
                stop = min(ids.stop, start + 10 * BATCH)
                graph.add_items(vectors[start:stop], np.arange(start, stop), num_threads=self.threads)
            graph.set_ef(self.ef_search)
            self.graphs.append(graph)
        del vectors

    async def search(self, mode: str, query: int) -> list[int]:
        vector = self.query_vector(mode, query)
        graph = self.graphs[self.work.query_scope[query]]
        labels, _ = graph.knn_query(vector, k=min(10, graph.get_current_count()), num_threads=1)
        return [int(label) for label in labels[0]]


CLASSES: dict[str, type[System]] = {"mnemex": Mnemex, "adk": Adk, "langgraph": LangGraph, "fts5": Fts5,
                                    "numpy": NumpyExact, "hnswlib": Hnswlib}


# -- the child: one system, one workload ---------------------------------------------------------------
async def measure(system: System, work: Work, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"rss_base_bytes": rss_bytes()}
    size = work.workload.size
    started = time.perf_counter()
    await system.ingest()
    acked = time.perf_counter() - started
    await system.ready()
    built = time.perf_counter() - started
    result |= {"ingest_s": built, "ingest_per_s": size / built, "ingest_acked_s": acked,
               "ingest_acked_per_s": size / acked,
               "rss_after_ingest_bytes": rss_bytes(), "peak_rss_after_ingest_bytes": peak_rss_bytes()}
    await system.warm()
    limit = min(args.queries or len(work.queries), len(work.queries))
    modes: dict[str, Any] = {}
    for mode in MODES[system.name]:
        warm_until = time.perf_counter() + 2.0
        for query in range(min(10, limit)):
            await system.search(mode, query)
            if time.perf_counter() > warm_until:
                break
        samples: list[float] = []
        ranked: list[list[int]] = []
        began = time.perf_counter()
        for query in range(limit):
            if query >= args.min_queries and time.perf_counter() - began > args.budget:
                break
            t0 = time.perf_counter()
            ids = await system.search(mode, query)
            samples.append((time.perf_counter() - t0) * 1000)
            ranked.append(ids)
        figures: dict[str, Any] = latency_summary(samples)
        figures |= _recalls(work, ranked, mode)
        modes[mode] = figures
    result["modes"] = modes
    result["peak_rss_after_search_bytes"] = peak_rss_bytes()
    return result


def _recalls(work: Work, ranked: list[list[int]], mode: str) -> dict[str, Any]:
    """Dev recall@10 (one scope) and recall@10 against exact (vector modes): the
    mean, and per query (None where a question has no evidence in the corpus) so
    that two systems can be set side by side on the queries both ran."""
    out: dict[str, Any] = {}
    if work.dev is not None:
        dev: list[float | None] = []
        for query, ids in enumerate(ranked):
            evidence = work.dev[query]
            found = {work.origins[i] for i in ids[:10]}
            dev.append(len(found & evidence) / len(evidence) if evidence else None)
        scored = [v for v in dev if v is not None]
        out["dev_recall@10"] = float(np.mean(scored)) if scored else None
        out["dev_questions"] = len(scored)
        out["dev_per_query"] = dev
    if mode in VECTOR_MODES:
        per = work.workload.per_scope
        exact = [min(10, len(set(ids[:10]) & work.exact[query])) / min(10, per)
                 for query, ids in enumerate(ranked)]
        out["exact_recall@10"] = float(np.mean(exact)) if exact else None
        out["exact_per_query"] = exact
    return out


def child(args: argparse.Namespace) -> None:
    workload = Workload.parse(args.workload)
    folder = Path(tempfile.mkdtemp(prefix=f"mnemex-compare-{args.child}-"))
    out: dict[str, Any] = {"system": args.child, "workload": workload.name}
    try:
        work = Work(Path(args.workspace), workload, args.embedder)
        try:
            system = CLASSES[args.child](work, folder, args)
        except Unavailable as exc:
            out |= {"status": "unavailable", "reason": str(exc)}
        else:
            holder: dict[str, Any] = {}

            async def body() -> None:
                holder.update(await measure(system, work, args))

            # the peak counts the system's helper processes (mnemex's graph helpers)
            # with its own, sampled together; with this process's exact high-water
            # mark as the least it can be
            with TreeRss() as tree:
                system.run(body)
            out |= {"status": "ok", "note": system.note, **holder, **system.extra,
                    "own_peak_rss_bytes": peak_rss_bytes(), "children_peak_rss_bytes": tree.children_peak,
                    "peak_rss_bytes": max(peak_rss_bytes(), tree.peak)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    Path(args.result).write_bytes(orjson.dumps(out))


# -- the parent ------------------------------------------------------------------------------------
def run_child(system: str, workload: Workload, workspace: Path, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        target = Path(handle.name)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", system, "--workload", workload.name,
               "--workspace", str(workspace), "--result", str(target), "--embedder", args.embedder,
               "--queries", str(args.queries), "--budget", str(args.budget),
               "--min-queries", str(args.min_queries)]
    threads = str(args.blas_threads)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, check=False, env=env, capture_output=True, text=True,
                              timeout=args.child_timeout)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            return {"system": system, "workload": workload.name, "status": "failed",
                    "reason": (lines[-1] if lines else f"exit status {done.returncode}")[:300]}
        result: dict[str, Any] = orjson.loads(target.read_bytes())
    except subprocess.TimeoutExpired:
        return {"system": system, "workload": workload.name, "status": "failed",
                "reason": f"timed out after {args.child_timeout:,.0f} s (--child-timeout)"}
    finally:
        target.unlink(missing_ok=True)
    result["wall_s"] = time.perf_counter() - started
    return result


def size_name(result: dict[str, Any]) -> str:
    return f"{Workload.parse(result['workload']).size:,} memories"


def skip_reason(system: str, workload: Workload, done: list[dict[str, Any]],
                args: argparse.Namespace) -> str | None:
    """Why a (scaling) size is not attempted: what the system took at the largest
    size measured so far, scaled linearly, passes the memory or time limit."""
    earlier = [r for r in done if r["system"] == system and r["workload"].startswith("one:")]
    if not earlier:
        return None
    last = earlier[-1]
    if last.get("status") != "ok":
        return f"{size_name(last)} was not measured ({last.get('status')}), so neither is this size"
    size = Workload.parse(last["workload"]).size
    factor = workload.size / size
    rss = last["peak_rss_bytes"] * factor
    seconds = last["wall_s"] * factor
    try:
        import psutil

        free = psutil.virtual_memory().available
    except ImportError:
        free = None
    limit = args.max_rss_gb * 2**30 if free is None else min(args.max_rss_gb * 2**30, 0.6 * free)
    if rss > limit:
        return (f"{size:,} memories took {last['peak_rss_bytes'] / 2**30:.1f} GB, so "
                f"{workload.size:,} would need about {rss / 2**30:.1f} GB (limit {limit / 2**30:.1f} GB)")
    if seconds > args.child_timeout:
        return (f"{size:,} memories took {last['wall_s']:,.0f} s, so {workload.size:,} would take "
                f"about {seconds:,.0f} s (--child-timeout {args.child_timeout:,.0f})")
    return None


def progress(result: dict[str, Any]) -> str:
    head = f"  {result['workload']:<16} {result['system']:<10}"
    if result.get("status") != "ok":
        return f"{head} {result.get('status')}: {result.get('reason')}"
    modes = ", ".join(f"{mode} p50 {fmt_ms(f['p50'])} ms ({f['n']} q)" for mode, f in result["modes"].items())
    return (f"{head} ingest {fmt_num(result['ingest_acked_per_s'])}/s acked, "
            f"{fmt_num(result['ingest_per_s'])}/s complete ({result['ingest_s']:.2f} s), {modes}, peak "
            f"{result['peak_rss_bytes'] / 2**20:,.0f} MB, {result['wall_s']:.0f} s")


def workload_table(results: list[dict[str, Any]]) -> str:
    rows: list[list[Any]] = []
    missing = []
    for result in results:
        if result.get("status") != "ok":
            missing.append(f"  {result['system']}: {result.get('status')}: {result.get('reason')}")
            continue
        first = True
        for mode, figures in result["modes"].items():
            dev = figures.get("dev_recall@10")
            exact = figures.get("exact_recall@10")
            rows.append([result["system"] if first else "",
                         fmt_num(result.get("ingest_acked_per_s", result["ingest_per_s"])) if first else "",
                         fmt_num(result["ingest_per_s"]) if first else "",
                         f"{result['rss_after_ingest_bytes'] / 2**20:,.0f}" if first else "",
                         f"{result['peak_rss_bytes'] / 2**20:,.0f}" if first else "",
                         mode, fmt_ms(figures["p50"]), fmt_ms(figures["p99"]), figures["n"],
                         "-" if dev is None else f"{dev:.3f}", "-" if exact is None else f"{exact:.3f}"])
            first = False
    headers = ["system", "acked/s", "complete/s", "RSS MB", "peak RSS MB", "mode", "p50 ms", "p99 ms",
               "queries", "dev R@10", "R@10 vs exact"]
    return "\n".join([table(headers, rows), *missing])


def ratio_rows(workload: Workload, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """mnemex's figures as ratios to each peer's on one workload."""
    ours = next((r for r in results if r["system"] == "mnemex" and r.get("status") == "ok"), None)
    rows = []
    for peer in results:
        if peer["system"] == "mnemex" or peer.get("status") != "ok" or ours is None:
            continue
        mode = COUNTERPART[peer["system"]]
        mine, theirs = ours["modes"][mode], peer["modes"][mode]
        row: dict[str, Any] = {
            "workload": workload.name, "peer": peer["system"], "mode": mode,
            # numpy's "ingest" only copies the given vectors: no ratio means anything
            "ingest_ratio": (ours["ingest_per_s"] / peer["ingest_per_s"]
                             if peer["system"] != "numpy" else None),
            "rss_ratio": ours["peak_rss_bytes"] / peer["peak_rss_bytes"],
            "p50_speedup": theirs["p50"] / mine["p50"], "p99_speedup": theirs["p99"] / mine["p99"],
        }
        for key in ("dev", "exact"):
            ratio, common = _common_prefix_ratio(mine.get(f"{key}_per_query"), theirs.get(f"{key}_per_query"))
            if ratio is not None:
                row[f"{key}_recall_ratio"], row[f"{key}_recall_queries"] = ratio, common
        rows.append(row)
    return rows


def _common_prefix_ratio(mine: list[float | None] | None,
                         theirs: list[float | None] | None) -> tuple[float | None, int]:
    """mnemex's mean over the peer's, on the queries both ran (a prefix of the same
    shuffled list) that have a truth."""
    if not mine or not theirs:
        return None, 0
    pairs = [(a, b) for a, b in zip(mine, theirs, strict=False) if a is not None and b is not None]
    ours, peer = sum(a for a, _ in pairs), sum(b for _, b in pairs)
    return (ours / peer if peer else None), len(pairs)


def _ratio_with_count(row: dict[str, Any], key: str) -> str:
    value = row.get(f"{key}_recall_ratio")
    return "-" if value is None else f"{fmt_ratio(value)} ({row[f'{key}_recall_queries']} q)"


def ratio_table(rows: list[dict[str, Any]]) -> str:
    return table(["workload", "peer", "mode", "ingest/s", "peak RSS", "p50 speed", "p99 speed",
                  "dev R@10", "R@10 vs exact"],
                 [[r["workload"], r["peer"], r["mode"], fmt_ratio(r["ingest_ratio"]),
                   fmt_ratio(r["rss_ratio"]), fmt_ratio(r["p50_speedup"]), fmt_ratio(r["p99_speedup"]),
                   _ratio_with_count(r, "dev"), _ratio_with_count(r, "exact")]
                  for r in rows],
                 left=3)


def bars(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's bars, at one scope of 100,000 memories, from this run."""
    at = {r["system"]: r for r in results if r["workload"] == f"one:{BAR_SIZE}"}
    ours = at.get("mnemex")

    def p50(system: str, mode: str) -> float | None:
        r = at.get(system)
        if r is None or r.get("status") != "ok":
            return None
        value: float = r["modes"][mode]["p50"]
        return value

    def missing(*systems: str) -> str:
        lacking = [s for s in systems if at.get(s, {}).get("status") != "ok"]
        return "not measured: " + ", ".join(
            f"{s} {at[s].get('status')} ({at[s].get('reason')})" if s in at else f"{s} not run"
            for s in lacking)

    out = []
    keyword, adk = p50("mnemex", "keyword"), p50("adk", "keyword")
    if keyword and adk:
        ratio = adk / keyword
        out.append({"bar": "mnemex keyword p50 >= 100x faster than ADK InMemoryMemoryService search",
                    "figure": f"{ratio:,.0f}x ({fmt_ms(keyword)} ms vs {fmt_ms(adk)} ms, "
                              f"{at['adk']['modes']['keyword']['n']} ADK queries)", "ok": ratio >= 100})
    else:
        out.append({"bar": "mnemex keyword p50 >= 100x faster than ADK", "figure": missing("mnemex", "adk"),
                    "ok": None})
    vector, graph = p50("mnemex", "vector"), p50("langgraph", "vector")
    if vector and graph and ours is not None:
        ratio = graph / vector
        recall = ours["modes"]["vector"].get("exact_recall@10") or 0.0
        out.append({"bar": "mnemex vector p50 >= 20x faster than LangGraph InMemoryStore, recall@10 >= 0.95 "
                           "of exact",
                    "figure": f"{ratio:,.0f}x ({fmt_ms(vector)} ms vs {fmt_ms(graph)} ms, "
                              f"{at['langgraph']['modes']['vector']['n']} LangGraph queries), "
                              f"recall@10 vs exact {recall:.3f}",
                    "ok": ratio >= 20 and recall >= 0.95})
    else:
        out.append({"bar": "mnemex vector p50 >= 20x faster than LangGraph", "ok": None,
                    "figure": missing("mnemex", "langgraph")})
    fulltext, fts = p50("mnemex", "fulltext"), p50("fts5", "fulltext")
    if fulltext and fts:
        out.append({"bar": "mnemex fulltext p50 <= SQLite FTS5 p50",
                    "figure": f"{fmt_ms(fulltext)} ms vs {fmt_ms(fts)} ms ({fts / fulltext:.2f}x)",
                    "ok": fulltext <= fts})
    else:
        out.append({"bar": "mnemex fulltext p50 <= SQLite FTS5 p50", "ok": None,
                    "figure": missing("mnemex", "fts5")})
    floor, given = p50("hnswlib", "vector"), p50("hnswlib", "vector given")
    if vector and floor:
        out.append({"bar": "mnemex vector p50 <= 2x raw hnswlib p50 (both embed the query)",
                    "figure": f"{fmt_ms(vector)} ms vs {fmt_ms(floor)} ms = {vector / floor:.2f}x" + (
                        f" (hnswlib with the query vector given: {fmt_ms(given)} ms, {vector / given:.2f}x)"
                        if given else ""),
                    "ok": vector <= 2 * floor})
    else:
        out.append({"bar": "mnemex vector p50 <= 2x raw hnswlib p50", "ok": None,
                    "figure": missing("mnemex", "hnswlib")})
    return out


INGEST_BARS = {"acked_100k": 15_000.0, "acked_1k": 10_000.0, "graph_ratio": 1.2, "small_p50_ratio": 2.0}
SMALL_SCOPES = "many:1000x100"


def ingest_bars(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 17's ingest and small-scope bars, from this run: acknowledged ingest
    (every remember_many answered, the HNSW graph possibly still building beside the
    actor) at one scope of 100,000 and of 1,000; the time until the graph is
    complete against raw hnswlib's build of the same vectors; vector p50 over 1,000
    scopes of 100 against raw hnswlib's (both embedding the query). A bar whose
    workload or peer did not run says so."""
    at = {(r["system"], r["workload"]): r for r in results if r.get("status") == "ok"}
    out: list[dict[str, Any]] = []
    for workload, bar in ((f"one:{BAR_SIZE}", INGEST_BARS["acked_100k"]),
                          ("one:1000", INGEST_BARS["acked_1k"])):
        ours = at.get(("mnemex", workload))
        name = f"acknowledged ingest at {Workload.parse(workload).title} >= {bar:,.0f}/s (fsync=batch)"
        if ours is None:
            out.append({"bar": name, "figure": f"mnemex not measured on {workload}", "ok": None})
            continue
        rate = ours["ingest_acked_per_s"]
        out.append({"bar": name, "ok": rate >= bar,
                    "figure": f"{fmt_num(rate)}/s acknowledged ({ours['ingest_acked_s']:.2f} s), "
                              f"{fmt_num(ours['ingest_per_s'])}/s until searchable with the graph complete"})
    ours, peer = at.get(("mnemex", f"one:{BAR_SIZE}")), at.get(("hnswlib", f"one:{BAR_SIZE}"))
    name = f"HNSW graph complete within {INGEST_BARS['graph_ratio']}x raw hnswlib's build (same vectors)"
    if ours is None or peer is None:
        out.append({"bar": name, "ok": None,
                    "figure": f"mnemex and hnswlib not both measured at {BAR_SIZE:,}"})
    else:
        ratio = ours["ingest_s"] / peer["ingest_s"]
        out.append({"bar": name, "ok": ratio <= INGEST_BARS["graph_ratio"],
                    "figure": f"{ours['ingest_s']:.1f} s vs {peer['ingest_s']:.1f} s = {ratio:.2f}x "
                              f"(mnemex from the first write; hnswlib from the given vectors)"})
    ours, peer = at.get(("mnemex", SMALL_SCOPES)), at.get(("hnswlib", SMALL_SCOPES))
    name = f"vector p50 over 1,000 scopes of 100 within {INGEST_BARS['small_p50_ratio']:g}x raw hnswlib's"
    if ours is None or peer is None:
        out.append({"bar": name, "ok": None,
                    "figure": f"mnemex and hnswlib not both measured on {SMALL_SCOPES}"})
    else:
        mine, theirs = ours["modes"]["vector"]["p50"], peer["modes"]["vector"]["p50"]
        out.append({"bar": name, "ok": mine <= INGEST_BARS["small_p50_ratio"] * theirs,
                    "figure": f"{fmt_ms(mine)} ms vs {fmt_ms(theirs)} ms = {mine / theirs:.2f}x (both embed "
                              f"the query; hnswlib given the vector: "
                              f"{fmt_ms(peer['modes']['vector given']['p50'])} ms)"})
    return out


def scaling_tables(results: list[dict[str, Any]], systems: Sequence[str]) -> str:
    """Search p50 (ms) per system and mode, and ingest rate, one row per size."""
    sizes = sorted({Workload.parse(r["workload"]).size for r in results if r["workload"].startswith("one:")})
    at = {(r["system"], Workload.parse(r["workload"]).size): r for r in results
          if r["workload"].startswith("one:")}
    columns = [(system, mode) for system in systems for mode in MODES[system] if mode != "vector given"]
    latency_rows, ingest_rows = [], []
    for size in sizes:
        latency_row: list[Any] = [f"{size:,}"]
        ingest_row: list[Any] = [f"{size:,}"]
        for system, mode in columns:
            r = at.get((system, size))
            latency_row.append(fmt_ms(r["modes"][mode]["p50"]) if r and r.get("status") == "ok"
                               else (r or {}).get("status", "-"))
        for system in systems:
            r = at.get((system, size))
            ingest_row.append(fmt_num(r["ingest_per_s"]) if r and r.get("status") == "ok"
                              else (r or {}).get("status", "-"))
        latency_rows.append(latency_row)
        ingest_rows.append(ingest_row)
    return "\n".join([
        "search p50 ms:", table(["N", *[f"{s} {m}" for s, m in columns]], latency_rows), "",
        "ingest memories/s:", table(["N", *systems], ingest_rows)])


def plot_scaling(results: list[dict[str, Any]], path: Path, embedder: str) -> None:
    """Search p50 per system and mode, and ingest rate, against N (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {system: plt.get_cmap("tab10")(i) for i, system in enumerate(SYSTEMS)}
    dashes = {"keyword": "-", "fulltext": "--", "vector": "-.", "hybrid": ":", "vector given": (0, (1, 1))}
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.6))
    lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
    ingest: dict[str, list[tuple[int, float]]] = {}
    skipped = []
    for r in results:
        if not r["workload"].startswith("one:"):
            continue
        size = Workload.parse(r["workload"]).size
        if r.get("status") != "ok":
            skipped.append(f"{r['system']} {size:,}")
            continue
        if r["system"] != "numpy":  # numpy's "ingest" is a copy of the given vectors
            ingest.setdefault(r["system"], []).append((size, r["ingest_per_s"]))
        for mode, figures in r["modes"].items():
            lines.setdefault((r["system"], mode), []).append((size, figures["p50"]))
    for (system, mode), points in sorted(lines.items(), key=lambda item: SYSTEMS.index(item[0][0])):
        xs, ys = zip(*sorted(points), strict=True)
        left.plot(xs, ys, linestyle=dashes.get(mode, "-"), color=colours[system], marker="o", markersize=3,
                  linewidth=2.2 if system == "mnemex" else 1.3, label=f"{system} {mode}")
    for system, points in sorted(ingest.items(), key=lambda item: SYSTEMS.index(item[0])):
        xs, ys = zip(*sorted(points), strict=True)
        right.plot(xs, ys, color=colours[system], marker="o", markersize=3,
                   linewidth=2.2 if system == "mnemex" else 1.3, label=system)
    left.set(xscale="log", yscale="log", xlabel="memories in one scope", ylabel="search p50 (ms)",
             title="search latency, top 10")
    right.set(xscale="log", yscale="log", xlabel="memories in one scope", ylabel="memories/s",
              title="ingest rate (numpy omitted: it only copies the given vectors)")
    for axis in (left, right):
        axis.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7, ncol=2)
    right.legend(fontsize=8)
    note = f"embedder {embedder}"
    if skipped:
        note += "; not measured: " + ", ".join(skipped)
    figure.text(0.01, 0.01, note, fontsize=7)
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="memories in one scope, comma-separated")
    parser.add_argument("--scopes", default="1000x100", help="SxP: S scopes of P memories; 'none' to skip")
    parser.add_argument("--peers", default=",".join(SYSTEMS), help="systems to run (mnemex included)")
    parser.add_argument("--embedder", default="hashing", help="config.embedder shared by every system")
    parser.add_argument("--queries", type=int, default=0, help="most queries per mode (0: every question)")
    parser.add_argument("--budget", type=float, default=30.0,
                        help="seconds of searching per system, workload and mode, once --min-queries ran")
    parser.add_argument("--min-queries", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 memories, 100x100 scopes, "
                                                             "200 queries, 5 s budgets")
    parser.add_argument("--scaling", action="store_true",
                        help="one scope of 1,000 .. 1,000,000 memories, plotted to bench/results/")
    parser.add_argument("--max-size", type=int, default=1_000_000, help="largest --scaling size")
    parser.add_argument("--max-rss-gb", type=float, default=6.0,
                        help="skip a size whose predicted peak RSS passes this")
    parser.add_argument("--child-timeout", type=float, default=1200.0, help="seconds one system may take")
    parser.add_argument("--blas-threads", type=int, default=1, help="OPENBLAS_NUM_THREADS of the children")
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    name = "compare"
    if args.quick:
        if args.sizes == parser.get_default("sizes"):
            args.sizes = "1000,10000"
        if args.scopes == parser.get_default("scopes"):
            args.scopes = "100x100"
        args.queries = args.queries or 200
        args.budget = min(args.budget, 5.0)
        name = "compare-quick"
    custom = any(getattr(args, key) != parser.get_default(key)
                 for key in ("sizes", "scopes", "peers", "queries", "budget", "embedder", "min_queries"))
    if custom and not (args.quick or args.scaling):
        name = "compare-custom"  # a partial run leaves the default run's compare.json alone
    sizes = [int(s) for s in args.sizes.split(",") if s]
    workloads = [Workload(1, size) for size in sizes]
    if args.scaling:
        workloads = [Workload(1, size) for size in SCALING_SIZES if size <= args.max_size]
        name = "compare-scaling"
        args.queries = args.queries or 300
        if args.budget == parser.get_default("budget"):
            args.budget = 10.0
    elif args.scopes != "none":
        scopes, _, per = args.scopes.partition("x")
        workloads.append(Workload(int(scopes), int(per)))
    systems = [s for s in args.peers.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown system(s) {', '.join(sorted(unknown))}; choose from {', '.join(SYSTEMS)}")
    try:
        embedder_from_config(mnemex.Config(embedder=args.embedder)).embed(["a probe"])
    except (mnemex.MnemexError, ImportError, OSError, RuntimeError) as exc:
        parser.error(f"--embedder {args.embedder!r} cannot be used here: {exc}")

    report: dict[str, Any] = machine() | {
        "embedder_config": args.embedder, "systems": systems,
        "queries_limit": args.queries, "budget_s": args.budget, "min_queries": args.min_queries,
        "blas_threads": args.blas_threads, "workloads": [w.name for w in workloads], "results": []}
    cfg = mnemex.Config()
    report["mnemex_config"] = {k: getattr(cfg, k) for k in (
        "fsync", "hnsw_threshold", "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search", "hnsw_threads",
        "fusion")}
    workspace = Path(tempfile.mkdtemp(prefix="mnemex-compare-"))
    started = time.perf_counter()
    try:
        print(f"preparing {len(workloads)} workloads in {workspace} ...", flush=True)
        report["workload_info"] = prepare(workspace, workloads, args.embedder)
        info = report["workload_info"]
        print(f"embedder {info['embedder']} ({info['dim']} dims), {info['questions']} questions, "
              f"{info['turns']:,} turns; prepared in {time.perf_counter() - started:.0f} s", flush=True)
        results: list[dict[str, Any]] = report["results"]
        for workload in workloads:
            for system in systems:
                reason = skip_reason(system, workload, results, args) if args.scaling else None
                if reason is not None:
                    result = {"system": system, "workload": workload.name, "status": "skipped",
                              "reason": reason}
                else:
                    result = run_child(system, workload, workspace, args)
                results.append(result)
                print(progress(result), flush=True)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    report["total_s"] = time.perf_counter() - started

    print(f"\n{report['date']}, {report['cpus']} cores, Python {report['python']}; embedder "
          f"{info['embedder']} ({info['dim']} dims) shared by every system; top 10; at most "
          f"{args.queries or info['questions']} queries per mode, {args.budget:g} s budget once "
          f"{args.min_queries} ran")
    ratios: list[dict[str, Any]] = []
    for workload in workloads:
        chosen = [r for r in results if r["workload"] == workload.name]
        print(f"\n{workload.title} (RSS: after ingest; peak: the whole run, shutdown included):")
        print(workload_table(chosen))
        ratios.extend(ratio_rows(workload, chosen))
    report["ratios"] = ratios
    if ratios:
        print("\nmnemex / peer (ingest and RSS: mnemex's figure over the peer's; speed: the peer's p50/p99 "
              "over mnemex's, above 1x = mnemex faster; recall: mnemex's over the peer's on the queries "
              "both ran):")
        print(ratio_table(ratios))
    notes = {r["system"]: r["note"] for r in results if r.get("status") == "ok"}
    report["notes"] = notes
    print("\nhow each system ran:")
    for system, note in notes.items():
        print(f"  {system:<10} {note}")
    report["bars"] = bars(results)
    if any(r["workload"] == f"one:{BAR_SIZE}" for r in results):
        print(f"\nbars at one scope of {BAR_SIZE:,} memories (this run):")
        for bar in report["bars"]:
            verdict = {True: "PASS", False: "FAIL", None: "n/a"}[bar["ok"]]
            print(f"  {verdict:<5} {bar['bar']}: {bar['figure']}")
    report["ingest_bars"] = ingest_bars(results)
    if any(bar["ok"] is not None for bar in report["ingest_bars"]):
        print("\ningest and small-scope bars (issue 17, this run):")
        for bar in report["ingest_bars"]:
            verdict = {True: "PASS", False: "FAIL", None: "n/a"}[bar["ok"]]
            print(f"  {verdict:<5} {bar['bar']}: {bar['figure']}")
    if args.scaling:
        print("\nscaling, one scope (a size is skipped when the previous one predicts too much memory "
              "or time):")
        print(scaling_tables(results, systems))
        image = RESULTS / "compare-scaling.png"
        RESULTS.mkdir(exist_ok=True)
        plot_scaling(results, image, info["embedder"])
        report["plot"] = str(image.relative_to(image.parent.parent.parent))
        if args.max_size >= SCALING_SIZES[-1]:  # a full run: the copy the README shows (committed)
            SHOWN.parent.mkdir(exist_ok=True)
            shutil.copyfile(image, SHOWN)
            print(f"\nplot: {report['plot']} (copied to {SHOWN.relative_to(_BENCH.parent)}, which the README shows)")
        else:
            print(f"\nplot: {report['plot']}")
    path = write_results(name, report)
    print(f"wrote {path.relative_to(path.parent.parent.parent)} ({report['total_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
