"""Tokenizer speed: the classic words, the full-text tokens and queries, and the
keyword and BM25 indexes that use them, on English and on text in other scripts.

Run: python bench/tokenizer.py [--repeats 7] [--quick]

Corpora: ``english`` is the LoCoMo dev turns as memories ("speaker: text", read
at run time from ../shared/data/locomo-dev.json; 99% ASCII) and its questions as
queries; ``multilingual`` is sentences written here in Japanese, Chinese, Korean,
Thai, Hindi, Arabic, French and mixed scripts, as many texts as ``english`` has
(each with a number, so they differ), with words of them as queries.

Measured, on one thread, the best of ``--repeats`` passes over the whole corpus
(a warm-up pass first: the script tables are built on first use): texts/s and
MB/s (UTF-8) of ``words``, ``Tokenizer.positioned`` (what BM25 indexes) and
``Tokenizer.parse_query`` (queries); ingest of the corpus into a fresh
``KeywordIndex`` and ``BM25Index`` (``add_many`` in batches of 256); and the
median search latency of each index over the queries. Only public calls that
every version has are used, so the same script measures an older checkout
(run it there) for a before/after comparison. Writes bench/results/tokenizer.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# bench/ goes last on the path: its http.py would otherwise hide the standard library's.
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import (  # noqa: E402
    LOCOMO,
    fmt_num,
    load_locomo,
    locomo_questions,
    locomo_turns,
    machine,
    table,
    write_results,
)

from mnemex.index import BM25Index, KeywordIndex, Tokenizer, words  # noqa: E402

BATCH = 256
SENTENCES = [
    "私の名前は太郎です。東京で働いています",
    "私はPythonでADKを使っています",
    "昨日、友達と一緒に京都へ旅行に行きました",
    "我住在北京，在一家银行工作。周末喜欢去爬山",
    "他的女儿明年要上大学了",
    "서울에서 소프트웨어 개발자로 일해요. 주말에는 등산을 해요",
    "ผมชอบกินข้าวผัดกับไก่ และดื่มน้ำมะพร้าว",
    "मैं दिल्ली में रहता हूँ और हिन्दी बोलता हूँ",
    "أعيش في القاهرة وأعمل مهندسًا",
    "J'habite à Montréal et je travaille dans un café près de l'église",
    "Zoë's résumé mentions Ångström and São Paulo",
    "Meeting with 田中さん about the Q3 roadmap at 15:00",
]
QUERIES = ["太郎", "Python", "京都", "北京", "银行", "서울", "개발자", "ข้าวผัด", "हिन्दी", "القاهرة", "café",
           "Montréal", "田中", "roadmap", "東京で働いて"]


def english_corpus() -> tuple[list[str], list[str]]:
    conversations = load_locomo(LOCOMO)
    texts = [turn.memory for conversation in conversations for turn in locomo_turns(conversation)]
    return texts, [question.text for question in locomo_questions(conversations)]


def multilingual_corpus(size: int) -> tuple[list[str], list[str]]:
    return [f"{SENTENCES[i % len(SENTENCES)]} {i}" for i in range(size)], QUERIES


def best_pass(run: Callable[[], object], repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``run`` (after one warm-up)."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def ingest_keyword(texts: Sequence[str]) -> KeywordIndex:
    index = KeywordIndex()
    for at in range(0, len(texts), BATCH):
        batch = texts[at : at + BATCH]
        index.add_many(range(at, at + len(batch)), batch, [float(i) for i in range(at, at + len(batch))])
    return index


def ingest_bm25(texts: Sequence[str]) -> BM25Index:
    index = BM25Index()
    for at in range(0, len(texts), BATCH):
        index.add_many([(at + i, text, None) for i, text in enumerate(texts[at : at + BATCH])])
    return index


def median_ms(search: Callable[[str], object], queries: Sequence[str], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        for query in queries:
            start = time.perf_counter_ns()
            search(query)
            samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def measure(texts: list[str], queries: list[str], repeats: int) -> dict[str, Any]:
    tokenizer = Tokenizer()
    size = sum(len(text.encode()) for text in texts)
    query_size = sum(len(query.encode()) for query in queries)
    rates: dict[str, Any] = {}
    for name, run, count, nbytes in [
        ("words", lambda: [words(t) for t in texts], len(texts), size),
        ("positioned", lambda: [tokenizer.positioned(t) for t in texts], len(texts), size),
        ("parse_query", lambda: [tokenizer.parse_query(q) for q in queries], len(queries), query_size),
        ("keyword ingest", lambda: ingest_keyword(texts), len(texts), size),
        ("bm25 ingest", lambda: ingest_bm25(texts), len(texts), size),
    ]:
        seconds = best_pass(run, repeats)
        rates[name] = {"texts_per_s": count / seconds, "mb_per_s": nbytes / seconds / 1e6, "seconds": seconds}
    keyword, bm25 = ingest_keyword(texts), ingest_bm25(texts)
    rates["keyword search"] = {"p50_ms": median_ms(keyword.search, queries, repeats)}
    rates["bm25 search"] = {"p50_ms": median_ms(bm25.search, queries, repeats)}
    return {"texts": len(texts), "bytes": size, "queries": len(queries), "rates": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="a tenth of the texts, 2 repeats")
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    english, questions = english_corpus()
    if args.quick:
        english = english[: len(english) // 10]
    corpora = {"english": (english, questions), "multilingual": multilingual_corpus(len(english))}
    report: dict[str, Any] = {**machine(), "repeats": repeats, "corpora": {}}
    rows = []
    for name, (texts, queries) in corpora.items():
        found = measure(texts, queries, repeats)
        report["corpora"][name] = found
        for step, rate in found["rates"].items():
            if "p50_ms" in rate:
                rows.append([name, step, "", "", f"{rate['p50_ms']:.3f}"])
            else:
                rows.append([name, step, fmt_num(rate["texts_per_s"]), fmt_num(rate["mb_per_s"], 2), ""])
    print(f"tokenizer speed, one thread, best of {repeats} passes ({report['date']})")
    print(table(["corpus", "step", "texts/s", "MB/s", "p50 ms"], rows, left=2))
    print(f"wrote {write_results('tokenizer', report)}")


if __name__ == "__main__":
    main()
