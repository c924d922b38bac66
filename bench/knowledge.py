"""Issue 19's knowledge bars, one section each (hashing embedder, one scope of
``--memories`` memories, default 10,000, in a fresh data directory with default
durability):

* ``classifier``: the offline classifier's precision and recall on the labelled set
  (tests/knowledge/category_examples.py) at each threshold: what
  ``knowledge.category_threshold`` was chosen by.
* ``store``: a scope is filled to ``--memories`` (in batches), then ``--stores``
  memories are stored one ``remember`` at a time (embedding, classification,
  journal write, indexes): p50 <= 10 ms.
* ``fulltext``: ``--queries`` full-text searches with a category filter (and, for
  comparison, without; with facets over the scope): p50 <= 5 ms.
* ``reclassify``: the catalog changed, the whole scope re-classified beside the
  actor (seconds until done).

Sections still to come from the entity graph (graph query, hybrid with expansion)
plug in as functions of the same shape: ``SECTIONS[name] = run(rt, scope, args,
report)``.

Run: python bench/knowledge.py [--memories 10000] [--stores 1000] [--queries 500]
     [--sections classifier,store,fulltext,reclassify] [--quick] [--out FILE]
Prints the tables and writes bench/results/knowledge.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# the checkout goes first on the import path (else an installed mnemex is measured);
# the shared helpers come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))
sys.path.append(str(_BENCH.parent / "tests" / "knowledge"))

import trio  # noqa: E402
from _common import fmt_ms, fmt_num, latency_summary, machine, percentile, table, write_results  # noqa: E402
from category_examples import EXAMPLES  # noqa: E402

import mnemex  # noqa: E402
from mnemex.knowledge.categories import DEFAULT_CATEGORIES, Classifier  # noqa: E402

BARS_MS = {"store": 10.0, "fulltext": 5.0}
THRESHOLDS = (0.2, 0.3, 0.5, 0.7, 0.9)

_NAMES = ("Gandros", "Mira", "Bram", "Elda", "Rell", "Senna", "Tom", "Priya", "Anna", "Carla", "Vael", "Ilmara")
_PLACES = ("the tower of Ash", "the tavern", "Port Vessa", "the old road", "the temple ruins", "Brill",
           "the northern forest", "the harbour", "the mill", "the bridge")
_TEMPLATES = (
    "{a} owes {b} a favour since the night at {p}",
    "{a} promised to repay the debt to {b}",
    "The party's quest is to find {a} near {p}",
    "{a} offered a reward for escorting {b} to {p}",
    "{a} distrusts {b} after the trial",
    "{a} is an ally of {b}",
    "{p} lies north of the river, past the bridge",
    "Legends say {a} forged the ring at {p}",
    "House rule: {a} rolls a d20 with advantage at {p}",
    "{a} loves spicy food and hates the rain at {p}",
    "{a} is allergic to peanuts and sleeps badly",
    "{a} works as a scribe for {b}",
    "{a} plans to visit {p} next spring",
    "{a} carries a silver sword and three potions",
    "{a} met {b} at the festival in {p}",
    "The weather at {p} was grey when {a} arrived",
)


def corpus(count: int, seed: int = 19) -> list[str]:
    """``count`` distinct memories a campaign would hold."""
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        a, b = rng.sample(_NAMES, 2)
        text = rng.choice(_TEMPLATES).format(a=a, b=b, p=rng.choice(_PLACES)) + f" (note {len(out)})"
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


# -- sections ------------------------------------------------------------------------------------
async def classifier_section(rt: Any, scope: Any, args: argparse.Namespace, report: dict[str, Any]) -> None:
    rows = []
    figures = {}
    for threshold in THRESHOLDS:
        classifier = Classifier(DEFAULT_CATEGORIES, threshold)
        tp = fp = fn = 0
        for text, gold in EXAMPLES:
            got = set(classifier.classify(text)[0])
            tp += len(got & set(gold))
            fp += len(got - set(gold))
            fn += len(set(gold) - got)
        precision, recall = tp / (tp + fp), tp / (tp + fn)
        figures[str(threshold)] = {"precision": round(precision, 3), "recall": round(recall, 3)}
        rows.append((f"{threshold:.1f}", f"{precision:.3f}", f"{recall:.3f}"))
    classifier = Classifier(DEFAULT_CATEGORIES)
    texts = [text for text, _ in EXAMPLES] * 20
    started = time.perf_counter()
    for text in texts:
        classifier.classify(text)
    per_text_us = (time.perf_counter() - started) / len(texts) * 1e6
    report["classifier"] = {"examples": len(EXAMPLES), "by_threshold": figures,
                            "microseconds_per_text": round(per_text_us, 1)}
    print(f"\nOffline classifier on {len(EXAMPLES)} labelled memories ({per_text_us:.0f} µs a memory)")
    print(table(("threshold", "precision", "recall"), rows))


async def store_section(rt: Any, scope: Any, args: argparse.Namespace, report: dict[str, Any]) -> None:
    texts = corpus(args.memories + args.stores)
    base, timed = texts[:args.memories - args.stores], texts[args.memories - args.stores:args.memories]
    started = time.perf_counter()
    for start in range(0, len(base), 500):
        await scope.remember_many(base[start:start + 500])
    fill = time.perf_counter() - started
    samples = []
    for text in timed:
        t0 = time.perf_counter()
        await scope.remember(text)
        samples.append((time.perf_counter() - t0) * 1000)
    summary = {**latency_summary(samples), "p90": percentile(samples, 0.9)}
    report["store"] = {"memories": await scope.count(), "fill_seconds": round(fill, 2), "ms": summary,
                       "bar_p50_ms": BARS_MS["store"], "met": summary["p50"] <= BARS_MS["store"]}
    print(f"\nStore (one remember at a time, scope of {report['store']['memories']:,} memories)")
    print(table(("stores", "p50", "p90", "p99", "bar p50"),
                [(fmt_num(len(samples)), fmt_ms(summary["p50"]), fmt_ms(summary["p90"]),
                  fmt_ms(summary["p99"]), fmt_ms(BARS_MS["store"]))]))


async def fulltext_section(rt: Any, scope: Any, args: argparse.Namespace, report: dict[str, Any]) -> None:
    rng = random.Random(7)
    words = ("favour", "debt", "quest", "reward", "ally", "tower", "river", "ring", "rolls", "sword", "food",
             "festival", "scribe", "spring", "Gandros", "Mira", "Elda", "harbour")
    queries = [" ".join(rng.sample(words, 2)) for _ in range(args.queries)]
    runs: dict[str, dict[str, Any]] = {
        "no filter": {},
        "category filter": {"filter": {"categories": ["favor_owed", "quests"]}},
        "category >= 0.8": {"filter": {"categories": ["favor_owed"], "min_category_confidence": 0.8}},
        "scope facets": {"facets": "scope"},
    }
    rows = []
    figures = {}
    for name, options in runs.items():
        samples = []
        hits = 0
        for query in queries:
            t0 = time.perf_counter()
            result = await scope.search(query, top_k=10, mode="fulltext", **options)
            samples.append((time.perf_counter() - t0) * 1000)
            hits += len(result.hits)
        summary = {**latency_summary(samples), "p90": percentile(samples, 0.9)}
        figures[name] = {"ms": summary, "mean_hits": round(hits / len(queries), 2)}
        rows.append((name, fmt_ms(summary["p50"]), fmt_ms(summary["p90"]), fmt_ms(summary["p99"]),
                     f"{hits / len(queries):.1f}"))
    met = figures["category filter"]["ms"]["p50"] <= BARS_MS["fulltext"]
    report["fulltext"] = {"queries": len(queries), "runs": figures, "bar_p50_ms": BARS_MS["fulltext"],
                          "met": met}
    print(f"\nFull-text search, top 10, {await scope.count():,} memories (bar: p50 <= "
          f"{fmt_ms(BARS_MS['fulltext'])} with a category filter)")
    print(table(("search", "p50", "p90", "p99", "hits"), rows))


async def reclassify_section(rt: Any, scope: Any, args: argparse.Namespace, report: dict[str, Any]) -> None:
    started = time.perf_counter()
    await scope.set_categories([mnemex.Category("spells", "Spells and magic", ("fireball", "spell", "ring"))])
    while (catalog := await scope.categories()).reclassifying:
        await trio.sleep(0.01)
    seconds = time.perf_counter() - started
    report["reclassify"] = {"memories": catalog.total, "seconds": round(seconds, 2),
                            "per_second": round(catalog.total / seconds), "spells": catalog.counts.get("spells", 0)}
    print(f"\nRe-classification after a catalog change: {catalog.total:,} memories in {seconds:.2f} s "
          f"({catalog.total / seconds:,.0f} a second, beside the actor)")


SECTIONS: dict[str, Callable[[Any, Any, argparse.Namespace, dict[str, Any]], Awaitable[None]]] = {
    "classifier": classifier_section,
    "store": store_section,
    "fulltext": fulltext_section,
    "reclassify": reclassify_section,
}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine(), "memories": args.memories}
    wanted = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"unknown section(s) {', '.join(unknown)}; the sections are {', '.join(SECTIONS)}")
    with tempfile.TemporaryDirectory() as data_dir:
        config = mnemex.Config(data_dir=data_dir, embedder="hashing")
        async with mnemex.open_runtime(config) as rt:
            scope = rt.scope(user_id="gm", app_name="campaign")
            for name in wanted:
                await SECTIONS[name](rt, scope, args, report)
    return report


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--stores", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="1,000 memories, 100 stores, 100 queries")
    parser.add_argument("--out", default=None, help="write the JSON here (default bench/results/knowledge.json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.memories, args.stores, args.queries = 1_000, 100, 100
    args.stores = min(args.stores, args.memories)
    return args


if __name__ == "__main__":
    arguments = parse()
    result = trio.run(main, arguments)
    path = write_results("knowledge", result) if arguments.out is None else Path(arguments.out)
    if arguments.out is not None:
        import json

        path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {path}")
