"""Micro benchmark of the index data structures at scope size (default 100,000 docs).

Run: python bench/index_micro.py [--docs N] [--quick]

Documents are LoCoMo dialogue turns ("speaker: text", read at run time from
../shared/data/locomo-dev.json, never copied into the repository), repeated
with a small seeded variation (one word dropped, one word of the corpus
inserted) until there are N of them; queries are the LoCoMo questions. Each
document's BM25 context is its neighbouring turns, as the ScopeActor is
expected to index it.

Measured, on one thread: ingest rate (tokenize + keyword + BM25 + embed with
HashingEmbedder + vector index, the HNSW graph included), search latency
p50/p99 per index (unfiltered, and filtered to 10% and 1% of the documents),
HNSW recall@10 against exact search, and memory per document. Prints a table
and writes bench/results/index_micro.json.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# bench/ goes last on the path (its http.py would hide the standard library's http);
# the shared helpers come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import LOCOMO, machine, percentile, rss_bytes, write_results  # noqa: E402
from _common import load_locomo as _read_locomo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# The script's own folder holds other benchmarks (one may be named like a stdlib
# module): import from the project root instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from mnemex.index import BM25Index, KeywordIndex, VectorIndex  # noqa: E402
from mnemex.models.hashing import HashingEmbedder  # noqa: E402

DATA = LOCOMO
BATCH = 256


def sessions_and_questions(path: Path) -> tuple[list[list[str]], list[str]]:
    """Sessions (each a list of turn texts) and the questions of categories 1-4."""
    conversations = _read_locomo(path)
    sessions: list[list[str]] = []
    questions: list[str] = []
    for conversation in conversations:
        turns = conversation["conversation"]
        numbers = sorted(int(k.split("_")[1]) for k in turns
                         if k.startswith("session_") and isinstance(turns[k], list))
        for n in numbers:
            sessions.append([f"{t['speaker']}: {t['text']}" for t in turns[f"session_{n}"]])
        questions.extend(q["question"] for q in conversation["qa"] if q.get("category") in (1, 2, 3, 4))
    return sessions, questions


def make_corpus(sessions: list[list[str]], n_docs: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """n_docs texts and their contexts (previous and next turn of the same session)."""
    rng = random.Random(seed)
    vocabulary = sorted({w for session in sessions for turn in session for w in turn.split()})
    texts: list[str] = []
    contexts: list[str] = []
    copy = 0
    while len(texts) < n_docs:
        for session in sessions:
            varied = []
            for turn in session:
                words = turn.split()
                if copy and len(words) > 2:
                    words.pop(rng.randrange(1, len(words)))
                    words.insert(rng.randrange(1, len(words) + 1), rng.choice(vocabulary))
                varied.append(" ".join(words))
            for i, text in enumerate(varied):
                texts.append(text)
                contexts.append(" ".join(varied[max(0, i - 1) : i] + varied[i + 1 : i + 2]))
        copy += 1
    return texts[:n_docs], contexts[:n_docs]


def time_queries(run: Any, queries: list[Any], repeat: int = 1) -> list[float]:
    samples = []
    for _ in range(repeat):
        for q in queries:
            t = time.perf_counter_ns()
            run(q)
            samples.append((time.perf_counter_ns() - t) / 1e6)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 docs")
    parser.add_argument("--ef-search", type=int, default=None)
    parser.add_argument("--ef-construction", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="HNSW build threads")
    args = parser.parse_args()
    n_docs = 10_000 if args.quick else args.docs
    if not DATA.exists():
        sys.exit(f"{DATA} is missing: the benchmark reads LoCoMo from ../shared/data/")
    sessions, questions = sessions_and_questions(DATA)
    texts, contexts = make_corpus(sessions, n_docs)
    timestamps = [float(i) for i in range(n_docs)]

    vector_params: dict[str, Any] = {"num_threads": args.threads}
    if args.ef_search:
        vector_params["ef_search"] = args.ef_search
    if args.ef_construction:
        vector_params["ef_construction"] = args.ef_construction
    embedder = HashingEmbedder(384)
    keyword, bm25 = KeywordIndex(), BM25Index()
    vectors = VectorIndex(384, **vector_params)

    gc.collect()
    rss_before = rss_bytes()
    spent = {"keyword": 0.0, "bm25": 0.0, "embed": 0.0, "vector": 0.0}
    started = time.perf_counter()
    for start in range(0, n_docs, BATCH):
        stop = min(n_docs, start + BATCH)
        t0 = time.perf_counter()
        for i in range(start, stop):
            keyword.add(i, texts[i], timestamps[i])
        t1 = time.perf_counter()
        for i in range(start, stop):
            bm25.add(i, texts[i], contexts[i])
        t2 = time.perf_counter()
        batch_vectors = embedder.embed(texts[start:stop])
        t3 = time.perf_counter()
        vectors.add_many(list(range(start, stop)), batch_vectors)
        t4 = time.perf_counter()
        spent["keyword"] += t1 - t0
        spent["bm25"] += t2 - t1
        spent["embed"] += t3 - t2
        spent["vector"] += t4 - t3
    ingest_seconds = time.perf_counter() - started
    gc.collect()
    rss_after = rss_bytes()

    rng = random.Random(11)
    allowed_10 = set(rng.sample(range(n_docs), n_docs // 10))
    allowed_1 = set(rng.sample(range(n_docs), n_docs // 100))
    query_vectors = embedder.embed(questions)

    rows: list[dict[str, Any]] = []

    def record(name: str, samples: list[float], bar: float | None = None, **extra: Any) -> None:
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        rows.append({"measure": name, "p50_ms": p50, "p99_ms": p99, "bar_p50_ms": bar,
                     "ok": None if bar is None else p50 <= bar, **extra})

    # Warm caches (postings arrays are built on first use after a change).
    for q in questions[:50]:
        keyword.search(q)
        bm25.search(q)
    record("keyword search", time_queries(lambda q: keyword.search(q, 10), questions), 0.5)
    record("keyword search, 10% allowed",
           time_queries(lambda q: keyword.search(q, 10, allowed=allowed_10), questions[:300]))
    record("bm25 search", time_queries(lambda q: bm25.search(q, 10), questions), 3.0)
    record("bm25 search, 10% allowed",
           time_queries(lambda q: bm25.search(q, 10, allowed=allowed_10), questions[:300]))
    qv = list(query_vectors)
    record(f"vector search ({vectors.mode})", time_queries(lambda v: vectors.search(v, 10), qv), 1.0)
    record("vector search, 10% allowed", time_queries(lambda v: vectors.search(v, 10, allowed=allowed_10),
                                                       qv[:300]))
    record("vector search, 1% allowed (exact)",
           time_queries(lambda v: vectors.search(v, 10, allowed=allowed_1), qv[:300]))
    record("vector exact search", time_queries(lambda v: vectors.exact_search(v, 10), qv[:200]))

    recalls = []
    for v in qv:
        approximate = {d for d, _ in vectors.search(v, 10)}
        exact = {d for d, _ in vectors.exact_search(v, 10)}
        recalls.append(len(approximate & exact) / max(1, len(exact)))
    recall = float(np.mean(recalls))
    recalls_f = []
    for v in qv[:300]:
        approximate = {d for d, _ in vectors.search(v, 10, allowed=allowed_10)}
        exact = {d for d, _ in vectors.exact_search(v, 10, allowed=allowed_10)}
        recalls_f.append(len(approximate & exact) / max(1, len(exact)))
    recall_filtered = float(np.mean(recalls_f))

    # ef sweep: what each ef_search costs and buys, on the same graph.
    sweep = []
    if vectors.mode == "hnsw":
        chosen = vectors.ef_search
        exact_top = [{d for d, _ in vectors.exact_search(v, 10)} for v in qv]
        for ef in sorted({32, 64, 128, 200, 256, 320, 400, chosen}):
            vectors.ef_search = ef
            samples = time_queries(lambda v: vectors.search(v, 10), qv)
            got = [{d for d, _ in vectors.search(v, 10)} for v in qv]
            sweep.append({"ef_search": ef, "p50_ms": percentile(samples, 0.5),
                          "p99_ms": percentile(samples, 0.99),
                          "recall_at_10": float(np.mean([len(g & e) / max(1, len(e))
                                                         for g, e in zip(got, exact_top, strict=True)]))})
        vectors.ef_search = chosen

    ingest_rate = n_docs / ingest_seconds
    non_vector = n_docs / (spent["keyword"] + spent["bm25"] + spent["embed"])
    result = {
        "docs": n_docs,
        "queries": len(questions),
        "machine": machine(),
        "vector_params": {"mode": vectors.mode, "hnsw_threshold": vectors.hnsw_threshold,
                          "ef_search": vectors.ef_search, **vector_params},
        "ingest_docs_per_s": ingest_rate,
        "ingest_docs_per_s_without_vector_index": non_vector,
        "ingest_seconds_by_part": spent,
        "hnsw_recall_at_10": recall,
        "hnsw_recall_at_10_filtered_10pct": recall_filtered,
        "rss_bytes_per_doc": (rss_after - rss_before) / n_docs,
        "vector_bytes_per_doc": 384 * 4,
        "searches": rows,
        "ef_sweep": sweep,
    }
    write_results("index_micro", result)

    print(f"index micro benchmark: {n_docs:,} docs, {len(questions):,} LoCoMo questions, "
          f"vector index {vectors.mode} (ef_search {vectors.ef_search}, threads {args.threads})")
    print(f"{'measure':42} {'p50 ms':>8} {'p99 ms':>8} {'bar p50':>8}  ok")
    for row in rows:
        bar = "" if row["bar_p50_ms"] is None else f"{row['bar_p50_ms']:.1f}"
        ok = "" if row["ok"] is None else ("yes" if row["ok"] else "NO")
        print(f"{row['measure']:42} {row['p50_ms']:8.3f} {row['p99_ms']:8.3f} {bar:>8}  {ok}")
    print(f"{'HNSW recall@10 vs exact':42} {recall:8.3f} {'':8} {'0.95':>8}  "
          f"{'yes' if recall >= 0.95 else 'NO'}")
    print(f"{'HNSW recall@10, 10% allowed':42} {recall_filtered:8.3f}")
    print(f"{'ingest docs/s (all indexes + embed)':42} {ingest_rate:8.0f} {'':8} {'4000':>8}  "
          f"{'yes' if ingest_rate >= 4000 else 'NO'}")
    print(f"{'ingest docs/s without the vector index':42} {non_vector:8.0f}")
    parts = ", ".join(f"{k} {v:.1f}s" for k, v in spent.items())
    print(f"{'ingest time by part':42} {parts}")
    print(f"{'RSS per doc (all indexes, bytes)':42} {result['rss_bytes_per_doc']:8.0f}")
    for row in sweep:
        print(f"  ef_search {row['ef_search']:4}: p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms, "
              f"recall@10 {row['recall_at_10']:.3f}")


if __name__ == "__main__":
    main()
