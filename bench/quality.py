"""Retrieval quality on the LoCoMo dev set, per mnemex search mode and embedder,
beside plain BM25 baselines; on paraphrase sets; on what a new user tries first; and
the cosine scale of each embedder, measured.

Run: python bench/quality.py [--embedders hashing,minilm] [--readme]

LoCoMo (read at run time from ../shared/data/locomo-dev.json, never copied): one
scope per conversation, one memory per turn ("speaker: text", with the
session's time, the speaker as author, the session as session_id and the turn's
dia_id in metadata), stored with ``remember_many`` on an in-memory runtime
(``data_dir=None``) exactly as bench/search.py does, so the figures agree with
its quality table. For every question of categories 1-4 whose evidence names a
turn, ``search(question, top_k=10, mode=..., min_score=-1)``; recall@k is the
share of its evidence turns in the top k (a memory whose text several turns
share counts for all of them), MRR the mean of 1 / rank of the first evidence
turn. Per mode (keyword, fulltext, vector, hybrid with weighted fusion, hybrid
with reciprocal-rank fusion), per question category and per embedder.

Baselines on the same memories and questions: Okapi BM25 written here (k1 1.5,
b 0.75, lower-cased word tokens, nothing dropped: the reference figure of
../shared/data/README.md) and SQLite FTS5 ranked by bm25() (the question's words
minus the stop words mnemex drops, OR-ed: the query bench/compare.py gives it).

Paraphrases (bench/data/paraphrases.json, and the held-out
bench/data/paraphrases_heldout.json and paraphrases_heldout2.json (written blind, after the last
setting was chosen), ``{"pairs": [{"question", "passage"}],
"distractors": [...]}``; skipped when absent): every passage and distractor a
memory of one scope; recall@1 and MRR of each question's passage.

Newcomer (bench/data/newcomer.json, held out: newcomer_heldout.json and
newcomer_heldout2.json; ``{"memories", "queries": [{"query", "expect"}],
"no_answer"}``): one scope of a dozen memories, searched with the default settings
(``scope.search(query)``: the default mode and min_score), as a new user would:
how many queries return their memory first, how many queries with no answer return
nothing; the same in vector mode; and, from searches without a cut, the trade-off
of every cut between keeping a right answer ranked first and silencing the queries
with no answer (how the default min_score was chosen, on the dev set only).

Cosine scale per embedder (what ``cosine_scale`` declares, see
mnemex.memories.ranking.CosineScale): the floor is the median best cosine of the
newcomer dev set's queries with no answer, the ceiling the 90th percentile of the
cosines of LoCoMo evidence turns to their questions; for crowding, the mean cosine
of a question's ten nearest memories (5th percentile over LoCoMo questions, 90th
over the paraphrase questions: crowded belongs above the second and near the
first); queries embedded as a search embeds them (``memories.queries``).

Speed per embedder: load time, embedding throughput over the LoCoMo turns (in
batches of ``config.embed_batch_size``), one-query embedding latency, and search
latency per mode through the scope (the query's embedding included).

An embedder that cannot be built here (``--embedders`` names one this mnemex
does not know, or its model is not installed) is reported as unavailable.

Prints the tables and writes bench/results/quality.json (quality-custom.json for
a run with other flags); ``--readme`` also rewrites the retrieval table of
README.md (between its ``quality:begin`` and ``quality:end`` markers).
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import trio

# bench/ goes last on the path: its http.py would otherwise hide the standard library's.
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

import numpy as np  # noqa: E402
from _common import (  # noqa: E402
    CATEGORY_NAMES,
    Question,
    Turn,
    fmt_ms,
    fmt_num,
    fts5_match,
    latency_summary,
    load_locomo,
    locomo_questions,
    locomo_turns,
    machine,
    table,
    write_results,
)

import mnemex  # noqa: E402
from mnemex.memories.kind import cosine_scale_of  # noqa: E402
from mnemex.memories.queries import query_texts  # noqa: E402
from mnemex.models.embedders import embedder_from_config  # noqa: E402

MODES = ("keyword", "fulltext", "vector", "hybrid")
PARAPHRASES = _BENCH / "data" / "paraphrases.json"
PARAPHRASES_HELD_OUT = {"paraphrases held out": _BENCH / "data" / "paraphrases_heldout.json",
                        "paraphrases held out 2": _BENCH / "data" / "paraphrases_heldout2.json"}
PARAPHRASE_KEYS = ("paraphrases", *PARAPHRASES_HELD_OUT)
NEWCOMER = {"dev": _BENCH / "data" / "newcomer.json", "held out": _BENCH / "data" / "newcomer_heldout.json",
            "held out 2": _BENCH / "data" / "newcomer_heldout2.json"}
CUTS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)
README = _BENCH.parent / "README.md"
KS = (1, 5, 10)
Ranker = Callable[[str], Sequence[str]]   # a question -> memory texts, best first


# -- scoring ------------------------------------------------------------------------------------
class Scores:
    """recall@1/5/10 and MRR over questions, overall and per category."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def add(self, category: int, ranked_turns: Sequence[set[str]], evidence: frozenset[str]) -> None:
        row = {}
        for k in KS:
            found = set().union(*ranked_turns[:k]) & evidence if ranked_turns else set()
            row[f"recall@{k}"] = len(found) / len(evidence)
        first = next((rank for rank, turns in enumerate(ranked_turns, start=1) if turns & evidence), None)
        row["mrr"] = 1.0 / first if first else 0.0
        self.rows.append((category, row))

    def summary(self) -> dict[str, Any]:
        def mean(rows: list[dict[str, float]]) -> dict[str, float]:
            return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]} if rows else {}

        out: dict[str, Any] = mean([row for _, row in self.rows]) | {"questions": len(self.rows)}
        by_category: dict[str, Any] = {}
        for category in sorted({c for c, _ in self.rows}):
            chosen = [row for c, row in self.rows if c == category]
            by_category[CATEGORY_NAMES[category]] = mean(chosen) | {"questions": len(chosen)}
        out["by_category"] = by_category
        return out


def conversation_memories(conversation: dict[str, Any]) -> tuple[list[Turn], dict[str, set[str]]]:
    """The turns of a conversation and, per memory text, the turn keys sharing it."""
    turns = locomo_turns(conversation)
    owners: dict[str, set[str]] = defaultdict(set)
    for turn in turns:
        owners[turn.memory].add(turn.key)
    return turns, owners


# -- mnemex -------------------------------------------------------------------------------------
def available_embedder(name: str) -> tuple[Any, float, str | None]:
    """The embedder ``name`` with its load time, or why it cannot be used here."""
    started = time.perf_counter()
    try:
        config = mnemex.Config(embedder=name)
        embedder = embedder_from_config(config)
        embedder.embed(["warm the model up"])
    except (mnemex.MnemexError, msgspec.ValidationError, ImportError, OSError, RuntimeError) as exc:
        return None, 0.0, f"{type(exc).__name__}: {exc}"[:300]
    return embedder, time.perf_counter() - started, None


async def locomo_mnemex(conversations: list[dict[str, Any]], questions: list[Question], embedder_name: str,
                        modes: Sequence[str], fusion: str = "weighted", **settings: Any) -> dict[str, Any]:
    cfg = mnemex.Config(data_dir=None, embedder=embedder_name, fusion=fusion, **settings)  # type: ignore[arg-type]
    scores = {mode: Scores() for mode in modes}
    latencies: dict[str, list[float]] = {mode: [] for mode in modes}
    async with mnemex.open_runtime(cfg) as rt:
        for conversation in conversations:
            sample = conversation["sample_id"]
            turns, owners = conversation_memories(conversation)
            scope = rt.scope(user_id=sample, app_name="locomo")
            await scope.remember_many([
                {"content": t.memory, "timestamp": t.timestamp, "author": t.speaker,
                 "metadata": {"dia_id": t.dia_id}, "session_id": t.session} for t in turns])
            for question in (q for q in questions if q.sample_id == sample):
                for mode in modes:
                    started = time.perf_counter()
                    result = await scope.search(question.text, top_k=10, mode=mode, min_score=-1.0)
                    latencies[mode].append((time.perf_counter() - started) * 1000)
                    ranked = [owners.get(hit.memory.content, set()) for hit in result.hits]
                    scores[mode].add(question.category, ranked, question.evidence)
    return {mode: scores[mode].summary() | {"latency_ms": latency_summary(latencies[mode])}
            for mode in modes}


async def paraphrase_mnemex(data: dict[str, Any], embedder_name: str, modes: Sequence[str],
                            **settings: Any) -> dict[str, Any]:
    cfg = mnemex.Config(data_dir=None, embedder=embedder_name, **settings)  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    async with mnemex.open_runtime(cfg) as rt:
        scope = rt.scope(user_id="paraphrases", app_name="quality")
        await scope.remember_many(list(dict.fromkeys(paraphrase_memories(data))))
        for mode in modes:
            ranked = []
            for pair in data["pairs"]:
                result = await scope.search(pair["question"], top_k=10, mode=mode, min_score=-1.0)
                ranked.append([hit.memory.content for hit in result.hits])
            out[mode] = paraphrase_scores(data, ranked)
    return out


def paraphrase_memories(data: dict[str, Any]) -> list[str]:
    return [pair["passage"] for pair in data["pairs"]] + list(data.get("distractors", []))


def paraphrase_scores(data: dict[str, Any], ranked: list[Sequence[str]]) -> dict[str, Any]:
    top1 = mrr = 0.0
    for pair, texts in zip(data["pairs"], ranked, strict=True):
        rank = next((i for i, text in enumerate(texts[:10], start=1) if text == pair["passage"]), None)
        top1 += rank == 1
        mrr += 1.0 / rank if rank else 0.0
    count = len(data["pairs"])
    return {"recall@1": top1 / count, "mrr": mrr / count, "questions": count}


# -- what each default adds --------------------------------------------------------------------------
ABLATIONS: dict[str, dict[str, Any]] = {
    "the defaults": {},
    "no stemming (fulltext_stem false)": {"fulltext_stem": False},
    "no dates (date_weight 0)": {"date_weight": 0.0},
    "fixed weights (fusion_adaptive false)": {"fusion_adaptive": False},
    "no session context (context_window 0)": {"context_window": 0},
    "no query expansion (expansion false)": {"expansion": False},
    "all three off: fixed 0.7 / 0.3, no stemming, no dates": {
        "fusion_adaptive": False, "fulltext_stem": False, "date_weight": 0.0},
}


def ablations(conversations: list[dict[str, Any]], questions: list[Question],
              paraphrases: dict[str, Any] | None, embedder_name: str) -> dict[str, Any]:
    """Hybrid LoCoMo recall@10 (overall and per category) and paraphrase recall@1 with
    each default turned off in turn."""
    out: dict[str, Any] = {}
    for label, settings in ABLATIONS.items():
        row = {"settings": settings,
               "locomo": trio.run(functools.partial(locomo_mnemex, conversations, questions, embedder_name,
                                                    ("hybrid",), "weighted", **settings))["hybrid"]}
        if paraphrases is not None:
            row["paraphrases"] = trio.run(functools.partial(paraphrase_mnemex, paraphrases, embedder_name,
                                                            ("hybrid",), **settings))["hybrid"]
        out[label] = row
        print(f"  ablation {label}: LoCoMo R@10 {row['locomo']['recall@10']:.3f}", flush=True)
    return out


# -- what a new user tries first ----------------------------------------------------------------
def load_newcomer(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data: dict[str, Any] = msgspec.json.decode(path.read_bytes())
    return data


async def newcomer_mnemex(data: dict[str, Any], embedder_name: str) -> dict[str, Any]:
    """One scope of the set's memories. Per way of searching (the defaults, that is
    ``scope.search(query)``; vector mode with its default cut): the queries whose
    memory comes first, the queries with no answer that return nothing. Then, from
    hybrid searches without a cut, the trade-off of each cut in CUTS."""
    cfg = mnemex.Config(data_dir=None, embedder=embedder_name)  # type: ignore[arg-type]
    out: dict[str, Any] = {"queries": len(data["queries"]), "no_answer": len(data["no_answer"])}
    async with mnemex.open_runtime(cfg) as rt:
        scope = rt.scope(user_id="newcomer", app_name="quality")
        await scope.remember_many(list(data["memories"]))
        for label, mode in (("default", mnemex.DEFAULT), ("vector", "vector")):
            first, failed = 0, []
            for item in data["queries"]:
                hits = (await scope.search(item["query"], top_k=5, mode=mode)).hits
                if hits and hits[0].memory.content == item["expect"]:
                    first += 1
                else:
                    failed.append(item["query"])
            noisy = [q for q in data["no_answer"] if (await scope.search(q, top_k=5, mode=mode)).hits]
            out[label] = {"first": first, "missed": failed, "silent": len(data["no_answer"]) - len(noisy),
                          "noisy": noisy}
        # the top hit's relevance: of a right answer ranked first, of a query with no answer
        right, noise = [], []
        for item in data["queries"]:
            hits = (await scope.search(item["query"], top_k=1, mode="hybrid", min_score=None)).hits
            if hits and hits[0].memory.content == item["expect"]:
                right.append(hits[0].scores["relevance"])
        for query in data["no_answer"]:
            hits = (await scope.search(query, top_k=1, mode="hybrid", min_score=None)).hits
            noise.append(hits[0].scores["relevance"] if hits else 0.0)
        out["cuts"] = {f"{cut:.2f}": {"kept": sum(r >= cut for r in right) / len(data["queries"]),
                                      "silent": sum(n < cut for n in noise) / len(data["no_answer"])}
                       for cut in CUTS}
    return out


def cosine_scale_measured(embedder: Any, conversations: list[dict[str, Any]], questions: list[Question],
                          newcomer: dict[str, Any] | None,
                          paraphrases: dict[str, Any] | None) -> dict[str, Any]:
    """The embedder's cosine scale measured (see the module doc) beside the one it
    declares."""
    def query_vectors(texts: Sequence[str]) -> Any:
        embed = getattr(embedder, "embed_queries", embedder.embed)
        rows = [embed(list(query_texts(text))).mean(axis=0) for text in texts]
        matrix = np.array(rows, dtype=np.float64)
        return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)

    evidence, crowded_locomo = [], []
    for conversation in conversations:
        turns = locomo_turns(conversation)
        vectors = np.asarray(embedder.embed([t.memory for t in turns]), dtype=np.float64)
        mine = [q for q in questions if q.sample_id == conversation["sample_id"]]
        for question, q in zip(mine, query_vectors([q.text for q in mine]), strict=True):
            cosines = vectors @ q
            crowded_locomo.append(float(np.sort(cosines)[-10:].mean()))
            evidence += [float(c) for turn, c in zip(turns, cosines, strict=True)
                         if turn.key in question.evidence]
    out: dict[str, Any] = {"declared": list(cosine_scale_of(embedder)),
                           "ceiling": float(np.quantile(evidence, 0.9)),
                           "locomo_nearest": float(np.quantile(crowded_locomo, 0.05))}
    if newcomer is not None:
        memories = np.asarray(embedder.embed(list(newcomer["memories"])), dtype=np.float64)
        out["floor"] = float(np.median((query_vectors(newcomer["no_answer"]) @ memories.T).max(axis=1)))
    if paraphrases is not None:
        memories = np.asarray(embedder.embed(list(dict.fromkeys(paraphrase_memories(paraphrases)))),
                              dtype=np.float64)
        cosines = query_vectors([pair["question"] for pair in paraphrases["pairs"]]) @ memories.T
        out["paraphrase_nearest"] = float(np.quantile(np.sort(cosines, axis=1)[:, -10:].mean(axis=1), 0.9))
    return out


def embedding_speed(embedder: Any, texts: list[str], queries: list[str], batch: int) -> dict[str, Any]:
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        embedder.embed(texts[start:start + batch])
    throughput = len(texts) / (time.perf_counter() - started)
    samples = []
    for query in queries:
        t0 = time.perf_counter()
        embedder.embed([query])
        samples.append((time.perf_counter() - t0) * 1000)
    return {"texts_per_s": throughput, "texts": len(texts), "batch": batch,
            "query_ms": latency_summary(samples)}


# -- baselines ------------------------------------------------------------------------------------
_WORD = re.compile(r"\w+")


class OkapiBM25:
    """Plain Okapi BM25 over lower-cased word tokens (k1 1.5, b 0.75, idf
    ln(1 + (N - df + 0.5) / (df + 0.5))), nothing dropped or stemmed."""

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.texts = list(texts)
        self.k1, self.b = k1, b
        self.docs = [Counter(_WORD.findall(text.lower())) for text in self.texts]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.average = sum(self.lengths) / max(1, len(self.lengths))
        self.postings: dict[str, list[int]] = defaultdict(list)
        for index, doc in enumerate(self.docs):
            for term in doc:
                self.postings[term].append(index)

    def rank(self, query: str, k: int = 10) -> list[str]:
        count = len(self.docs)
        scores: dict[int, float] = defaultdict(float)
        for term in set(_WORD.findall(query.lower())):
            posting = self.postings.get(term)
            if not posting:
                continue
            idf = math.log(1 + (count - len(posting) + 0.5) / (len(posting) + 0.5))
            for index in posting:
                tf = self.docs[index][term]
                norm = 1 - self.b + self.b * self.lengths[index] / self.average
                scores[index] += idf * tf * (self.k1 + 1) / (tf + self.k1 * norm)
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
        return [self.texts[index] for index, _ in best]


class Fts5Baseline:
    """SQLite FTS5 in memory, ranked by bm25()."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE mem USING fts5(content)")
        self.db.executemany("INSERT INTO mem(rowid, content) VALUES (?, ?)", enumerate(self.texts))

    def rank(self, query: str, k: int = 10) -> list[str]:
        match = fts5_match(query)
        if not match:
            return []
        rows = self.db.execute("SELECT rowid FROM mem WHERE mem MATCH ? ORDER BY rank LIMIT ?", (match, k))
        return [self.texts[row[0]] for row in rows]


BASELINES: dict[str, Callable[[Sequence[str]], Any]] = {"okapi bm25": OkapiBM25,
                                                        "sqlite fts5 bm25": Fts5Baseline}


def locomo_baseline(build: Callable[[Sequence[str]], Any], conversations: list[dict[str, Any]],
                    questions: list[Question]) -> dict[str, Any]:
    scores = Scores()
    samples = []
    for conversation in conversations:
        _, owners = conversation_memories(conversation)
        ranker = build(list(owners))
        for question in (q for q in questions if q.sample_id == conversation["sample_id"]):
            started = time.perf_counter()
            texts = ranker.rank(question.text)
            samples.append((time.perf_counter() - started) * 1000)
            scores.add(question.category, [owners[text] for text in texts], question.evidence)
    return scores.summary() | {"latency_ms": latency_summary(samples)}


def load_paraphrases(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    if not path.exists():
        return None, f"{path} not found"
    try:
        data = msgspec.json.decode(path.read_bytes())
        pairs = data["pairs"]
        if not pairs or not all(isinstance(p.get("question"), str) and isinstance(p.get("passage"), str)
                                for p in pairs):
            return None, f"{path}: pairs need a question and a passage"
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError) as exc:
        return None, f"{path} unreadable: {exc}"
    return data, None


# -- main ---------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", default="hashing,minilm",
                        help="config.embedder names, comma-separated")
    parser.add_argument("--paraphrases", type=Path, default=PARAPHRASES)
    parser.add_argument("--no-rrf", action="store_true", help="skip the hybrid run with fusion=rrf")
    parser.add_argument("--ablations", action="store_true",
                        help="also run hybrid with each default turned off in turn (the default embedder)")
    parser.add_argument("--readme", action="store_true",
                        help="rewrite README.md's retrieval table from this run (the default embedder)")
    args = parser.parse_args()

    conversations = load_locomo()
    questions = locomo_questions(conversations)
    turn_texts = [turn.memory for c in conversations for turn in locomo_turns(c)]
    paraphrases, paraphrase_note = load_paraphrases(args.paraphrases)
    held_out = {key: data for key, path in PARAPHRASES_HELD_OUT.items()
                if (data := load_paraphrases(path)[0]) is not None}
    newcomers = {label: data for label, path in NEWCOMER.items() if (data := load_newcomer(path)) is not None}
    report: dict[str, Any] = machine() | {"questions": len(questions), "memories": len(turn_texts),
                                          "paraphrases": str(args.paraphrases), "embedders": {},
                                          "baselines": {}}
    if paraphrase_note:
        report["paraphrases_note"] = paraphrase_note
        print(f"paraphrases: {paraphrase_note}; skipped", flush=True)

    for name in [n for n in args.embedders.split(",") if n]:
        embedder, load_s, problem = available_embedder(name)
        if problem is not None:
            report["embedders"][name] = {"status": "unavailable", "reason": problem}
            print(f"embedder {name}: unavailable ({problem})", flush=True)
            continue
        print(f"embedder {name} ({embedder.name}, {embedder.dim} dims): loaded in {load_s:.1f} s", flush=True)
        entry: dict[str, Any] = {"status": "ok", "embedder": embedder.name, "dim": embedder.dim,
                                 "load_s": load_s}
        entry["speed"] = embedding_speed(embedder, turn_texts, [q.text for q in questions[:200]],
                                         mnemex.Config().embed_batch_size)
        entry["locomo"] = trio.run(locomo_mnemex, conversations, questions, name, MODES)
        if not args.no_rrf:
            rrf = trio.run(locomo_mnemex, conversations, questions, name, ("hybrid",), "rrf")
            entry["locomo"]["hybrid (rrf)"] = rrf["hybrid"]
        if paraphrases is not None:
            entry["paraphrases"] = trio.run(paraphrase_mnemex, paraphrases, name, MODES)
        for key, data in held_out.items():
            entry[key] = trio.run(paraphrase_mnemex, data, name, MODES)
        entry["newcomer"] = {label: trio.run(newcomer_mnemex, data, name)
                             for label, data in newcomers.items()}
        entry["cosine_scale"] = cosine_scale_measured(embedder, conversations, questions,
                                                      newcomers.get("dev"),
                                                      paraphrases)
        if args.ablations and embedder.name == embedder_from_config(mnemex.Config()).name:
            entry["ablations"] = ablations(conversations, questions, paraphrases, name)
        report["embedders"][name] = entry
        done = ", ".join(f"{m} R@10 {v['recall@10']:.3f}" for m, v in entry["locomo"].items())
        print(f"  LoCoMo: {done}", flush=True)
    for label, build in BASELINES.items():
        baseline: dict[str, Any] = {"locomo": locomo_baseline(build, conversations, questions)}
        for key, data in (("paraphrases", paraphrases), *held_out.items()):
            if data is not None:
                memories = list(dict.fromkeys(paraphrase_memories(data)))
                ranker = build(memories)
                baseline[key] = paraphrase_scores(data, [ranker.rank(pair["question"])
                                                         for pair in data["pairs"]])
        report["baselines"][label] = baseline

    print_report(report)
    custom = any(getattr(args, key) != parser.get_default(key)
                 for key in ("embedders", "paraphrases", "no_rrf"))
    # a partial run leaves the default run's quality.json alone
    path = write_results("quality-custom" if custom else "quality", report)
    print(f"\nwrote {path.relative_to(path.parent.parent.parent)}")
    if args.readme:
        rewrite_readme(report)
        print("rewrote README.md's retrieval table")


def print_report(report: dict[str, Any]) -> None:
    categories = [CATEGORY_NAMES[c] for c in (1, 2, 3, 4)]
    rows = []
    paraphrase_rows = []
    seen_lexical = False
    for name, entry in report["embedders"].items():
        if entry["status"] != "ok":
            continue
        for mode, figures in entry["locomo"].items():
            lexical = mode in ("keyword", "fulltext")
            if lexical and seen_lexical:
                continue  # the same with every embedder
            label = f"mnemex {mode}" if lexical else f"mnemex {mode} [{name}]"
            rows.append(_quality_row(label, figures, categories))
            cells = [entry[key][mode] if mode in entry.get(key, {}) else None for key in PARAPHRASE_KEYS]
            if any(cells):
                paraphrase_rows.append([label, *_paraphrase_cells(cells)])
        seen_lexical = True
    for label, baseline in report["baselines"].items():
        rows.append(_quality_row(label, baseline["locomo"], categories))
        cells = [baseline.get(key) for key in PARAPHRASE_KEYS]
        if any(cells):
            paraphrase_rows.append([label, *_paraphrase_cells(cells)])
    print(f"\n{report['date']}, {report['cpus']} cores. LoCoMo dev retrieval: {report['questions']} "
          f"questions (categories 1-4), {report['memories']:,} memories in 5 scopes; top 10")
    print(table(["method", "R@1", "R@5", "R@10", "MRR", *[f"R@10 {c}" for c in categories]], rows))
    counts = next(iter(report["baselines"].values()))["locomo"]["by_category"]
    print("questions per category: "
          + ", ".join(f"{c} {counts[c]['questions']}" for c in categories if c in counts))
    if paraphrase_rows:
        print("\nparaphrases (one scope of passages and distractors; held out 2 written blind after "
              "the last choice):")
        print(table(["method", "R@1", "MRR", "held out R@1", "held out MRR", "held out 2 R@1",
                     "held out 2 MRR"], paraphrase_rows))
    else:
        print(f"\nparaphrases: {report.get('paraphrases_note', 'not run')}")
    for name, entry in report["embedders"].items():
        if entry["status"] != "ok" or not entry.get("newcomer"):
            continue
        print(f"\nnewcomer [{name}] (one scope of a dozen memories; default settings: scope.search(query)):")
        newcomer_rows = []
        for label, figures in entry["newcomer"].items():
            for way in ("default", "vector"):
                f = figures[way]
                newcomer_rows.append([f"{label}, {way}", f"{f['first']}/{figures['queries']}",
                                      f"{f['silent']}/{figures['no_answer']}",
                                      f"{f['silent'] / figures['no_answer']:.0%}",
                                      "; ".join(f["missed"])[:70]])
        print(table(["set, search", "memory first", "no answer: nothing", "silent", "missed"], newcomer_rows))
        cut_rows = [[label, *[f"{c['kept']:.0%}/{c['silent']:.0%}" for c in figures["cuts"].values()]]
                    for label, figures in entry["newcomer"].items()]
        print("hybrid min_score -> right answers ranked first and kept / queries with no answer silent:")
        print(table(["set", *next(iter(entry["newcomer"].values()))["cuts"]], cut_rows))
    for name, entry in report["embedders"].items():
        if entry["status"] == "ok" and entry.get("ablations"):
            print(f"\nwhat each default adds [{name}] (hybrid; LoCoMo R@10 overall and per category, "
                  "paraphrase R@1):")
            print(table(["settings", "LoCoMo R@10", *categories, "paraphrases R@1"],
                        [_ablation_row(label, row, categories) for label, row in entry["ablations"].items()]))
    scale_rows = []
    for name, entry in report["embedders"].items():
        if entry["status"] == "ok" and "cosine_scale" in entry:
            c = entry["cosine_scale"]
            floor, ceiling, crowded = c["declared"]
            scale_rows.append([name, f"{c.get('floor', float('nan')):.3f} ({floor:g})",
                               f"{c['ceiling']:.3f} ({ceiling:g})", f"{c['locomo_nearest']:.3f}",
                               f"{c.get('paraphrase_nearest', float('nan')):.3f}", f"{crowded:g}"])
    if scale_rows:
        print("\ncosine scale, measured (declared): floor, ceiling; mean cosine of a question's ten nearest "
              "memories, 5th percentile on LoCoMo, 90th on the paraphrases (declared crowded)")
        headers = ["embedder", "floor", "ceiling", "LoCoMo nearest p5", "paraphrase nearest p90", "crowded"]
        print(table(headers, scale_rows))
    speed_rows = []
    for name, entry in report["embedders"].items():
        if entry["status"] != "ok":
            speed_rows.append([name, f"unavailable: {entry['reason']}"])
            continue
        speed = entry["speed"]
        speed_rows.append([name, f"{entry['load_s']:.1f}", fmt_num(speed["texts_per_s"]),
                           fmt_ms(speed["query_ms"]["p50"]),
                           *[fmt_ms(entry["locomo"][m]["latency_ms"]["p50"]) for m in MODES]])
    print("\nspeed (search p50 through the scope, ~550 memories each, query embedding included):")
    headers = ["embedder", "load s", "embed texts/s", "1 query ms", *[f"{m} p50 ms" for m in MODES]]
    ok_rows = [r for r in speed_rows if len(r) == len(headers)]
    print(table(headers, ok_rows))
    for row in speed_rows:
        if len(row) != len(headers):
            print(f"  {row[0]}: {row[1]}")


def _ablation_row(label: str, row: dict[str, Any], categories: list[str]) -> list[str]:
    by = row["locomo"]["by_category"]
    para = row.get("paraphrases")
    return [label, f"{row['locomo']['recall@10']:.3f}",
            *[f"{by[c]['recall@10']:.3f}" if c in by else "-" for c in categories],
            f"{para['recall@1']:.3f}" if para else "-"]


def _paraphrase_cells(cells: list[dict[str, Any] | None]) -> list[str]:
    out = []
    for cell in cells:
        out += [f"{cell['recall@1']:.3f}", f"{cell['mrr']:.3f}"] if cell else ["-", "-"]
    return out


def rewrite_readme(report: dict[str, Any]) -> None:
    """README.md's retrieval table (between ``<!-- quality:begin -->`` and
    ``<!-- quality:end -->``) from this run: LoCoMo recall@10 overall and per category,
    paraphrase recall@1 (dev and held out), newcomer figures, per mode, with the default
    embedder (or the first that ran)."""
    ran = [(n, e) for n, e in report["embedders"].items() if e["status"] == "ok"]
    default = embedder_from_config(mnemex.Config()).name
    name, entry = next(((n, e) for n, e in ran if e["embedder"] == default), ran[0])
    categories = [CATEGORY_NAMES[c] for c in (1, 2, 3, 4)]
    lines = [f"Measured by `python bench/quality.py --readme` ({report['date']}, embedder `{name}`, "
             "default settings; LoCoMo dev: 760 questions, recall@10 of the evidence turns; "
             "paraphrases: recall@1, dev / held out / held out 2):", "",
             "| search | LoCoMo R@10 | " + " | ".join(categories) + " | paraphrases R@1 |",
             "|---|---|" + "---|" * len(categories) + "---|"]
    for mode, figures in entry["locomo"].items():
        by = figures["by_category"]
        para = [entry[key][mode]["recall@1"] if mode in entry.get(key, {}) else None
                for key in PARAPHRASE_KEYS]
        cells = " / ".join("-" if p is None else f"{p:.3f}" for p in para)
        bold = "**" if mode == "hybrid" else ""
        lines.append(f"| {bold}{mode}{bold} | {bold}{figures['recall@10']:.3f}{bold} | "
                     + " | ".join(f"{by[c]['recall@10']:.3f}" if c in by else "-" for c in categories)
                     + f" | {cells} |")
    for label, baseline in report["baselines"].items():
        by = baseline["locomo"]["by_category"]
        lines.append(f"| {label} | {baseline['locomo']['recall@10']:.3f} | "
                     + " | ".join(f"{by[c]['recall@10']:.3f}" if c in by else "-" for c in categories)
                     + " | - |")
    if entry.get("ablations"):
        lines += ["", "What each default adds (hybrid, each turned off in turn; `--ablations`):", "",
                  "| settings | LoCoMo R@10 | " + " | ".join(categories) + " | paraphrases R@1 |",
                  "|---|---|" + "---|" * len(categories) + "---|"]
        lines += ["| " + " | ".join(_ablation_row(label, row, categories)) + " |"
                  for label, row in entry["ablations"].items()]
    if entry.get("newcomer"):
        lines += ["", "A new user's first searches (a dozen memories, `scope.search(query)` with the "
                  "defaults):", "",
                  "| set | memory ranked first | queries with no answer that return nothing |",
                  "|---|---|---|"]
        for label, figures in entry["newcomer"].items():
            f = figures["default"]
            lines.append(f"| {label} | {f['first']}/{figures['queries']} | "
                         f"{f['silent']}/{figures['no_answer']} "
                         f"({f['silent'] / figures['no_answer']:.0%}) |")
        cuts = list(next(iter(entry["newcomer"].values()))["cuts"])
        lines += ["", "Every cut, from hybrid searches without one: right answers ranked first and kept / "
                  "queries with no answer left empty (the default, 0.25, was chosen on the dev set):", "",
                  "| set | " + " | ".join(cuts) + " |", "|---|" + "---|" * len(cuts)]
        lines += [f"| {label} | " + " | ".join(f"{c['kept']:.0%} / {c['silent']:.0%}"
                                               for c in figures["cuts"].values()) + " |"
                  for label, figures in entry["newcomer"].items()]
    text = README.read_text()
    begin, end = "<!-- quality:begin -->", "<!-- quality:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"README.md has no {begin} ... {end} block to rewrite")
    head, rest = text.split(begin, 1)
    README.write_text(head + begin + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1])


def _quality_row(label: str, figures: dict[str, Any], categories: list[str]) -> list[str]:
    by = figures["by_category"]
    return [label, f"{figures['recall@1']:.3f}", f"{figures['recall@5']:.3f}", f"{figures['recall@10']:.3f}",
            f"{figures['mrr']:.3f}", *[f"{by[c]['recall@10']:.3f}" if c in by else "-" for c in categories]]


if __name__ == "__main__":
    main()
