"""The entity graph: what query expansion does to retrieval, and how fast the graph is.

Two parts (``--part quality``, ``--part speed``, both by default):

* quality: LoCoMo dev (read at run time from ../shared/data/locomo-dev.json, never
  copied), hybrid recall@10 per question category, with query expansion off and on
  (entities found offline by the patterns of ``mnemex.knowledge.entities``, no LLM),
  and for each design given by ``--designs`` (settings of ``config.memories``);
* speed: a scope of ``--memories`` memories naming ``--entities`` entities (a
  synthetic cast: each memory names two or three of them among common words), hashing
  embedder: p50/p99 of a graph query (``scope.entity`` with its memories and
  neighbours, ``scope.related`` depth 2), of hybrid search with expansion and
  without, over ``--queries`` queries each.

Prints a table and writes bench/results/knowledge_graph.json.

    python bench/knowledge_graph.py                  # both parts
    python bench/knowledge_graph.py --part quality --embedder minilm
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import trio

_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import (  # noqa: E402
    CATEGORY_NAMES,
    latency_summary,
    load_locomo,
    locomo_questions,
    machine,
    table,
    write_results,
)
from quality import locomo_mnemex  # noqa: E402

import mnemex  # noqa: E402

DESIGNS: dict[str, dict[str, Any]] = {
    "off": {"expansion": False},
    "default": {},
    "no graph boost": {"expansion_graph_weight": 0.0},
    "graph boost 0.25": {"expansion_graph_weight": 0.25},
    "terms only (no candidates, no boost)": {"expansion_graph_weight": 0.0, "expansion_candidates": 0},
    "no neighbours": {"expansion_neighbours": 0},
}


def quality(embedder: str, designs: list[str]) -> dict[str, Any]:
    conversations = load_locomo()
    questions = locomo_questions(conversations)
    out: dict[str, Any] = {}
    for name in designs:
        started = time.perf_counter()
        result = trio.run(lambda n=name: locomo_mnemex(conversations, questions, embedder, ("hybrid",),
                                                         **DESIGNS[n]))
        out[name] = result["hybrid"]
        by = out[name]["by_category"]
        print(f"  {name}: R@10 {out[name]['recall@10']:.3f} "
              + " ".join(f"{c} {v['recall@10']:.3f}" for c, v in by.items())
              + f" ({time.perf_counter() - started:.0f} s)", flush=True)
    return out


# -- speed -------------------------------------------------------------------------------------------
_SYLLABLES = ("an", "bel", "cor", "dra", "el", "fen", "gar", "hal", "is", "jor", "kel", "lor", "mar", "nor",
              "or", "pel", "quin", "ros", "sel", "tor", "ul", "vin", "wen", "yar", "zan")
_WORDS = ("river", "sword", "debt", "favour", "tower", "market", "storm", "letter", "road", "harvest", "coin",
          "winter", "feast", "bridge", "oath", "map", "lantern", "forest", "ship", "song", "horse", "castle",
          "promise", "secret", "rescue", "trade", "festival", "mine", "temple", "garden")


_NOBODY = ("the ferryman", "the old cook")


def cast(count: int, rng: random.Random) -> list[str]:
    names: dict[str, None] = {}
    while len(names) < count:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 3))))
        names.setdefault(word.capitalize(), None)
    return list(names)


def memory_text(names: list[str], rng: random.Random, i: int) -> tuple[str, list[str]]:
    who = rng.sample(list(dict.fromkeys(names)), min(len(set(names)), rng.choice((2, 3))))
    while len(who) < 2:
        who.append(rng.choice(_NOBODY))
    words = rng.sample(_WORDS, 5)
    return (f"In chapter {i}, {who[0]} spoke of the {words[0]} and the {words[1]} with {who[1]}; "
            f"{' and '.join(who[2:]) or 'nobody else'} remembered the {words[2]}, the {words[3]} "
            f"and the {words[4]}.", who)


async def speed(memories: int, entities: int, queries: int) -> dict[str, Any]:
    rng = random.Random(19)
    names = cast(int(entities * 1.15), rng)  # some names of the tail never come up
    # mentions follow a skewed law: a few main characters, a long tail
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(names))]
    texts: list[str] = []
    used: dict[str, None] = {}
    for i in range(memories):
        text, who = memory_text(rng.choices(names, weights, k=6), rng, i)
        used.update(dict.fromkeys(who))
        texts.append(text)
    cast_used = [name for name in used if name not in _NOBODY]
    out: dict[str, Any] = {"memories": memories, "cast": len(cast_used)}
    for expansion in (True, False):
        cfg = mnemex.Config(data_dir=None, embedder="hashing", expansion=expansion)
        async with mnemex.open_runtime(cfg) as rt:
            scope = rt.scope(user_id="bench", app_name="graph")
            started = time.perf_counter()
            for at in range(0, len(texts), 1000):
                await scope.remember_many(texts[at:at + 1000])
            stored = time.perf_counter() - started
            stats = await scope.graph_stats()
            asked = [rng.choice(cast_used) for _ in range(queries)]
            phrases = [f"what did {name} say about the {rng.choice(_WORDS)}" for name in asked]
            await scope.search(phrases[0], top_k=10)  # warm (the graph's automaton)
            hybrid = []
            for phrase in phrases:
                began = time.perf_counter()
                await scope.search(phrase, top_k=10)
                hybrid.append((time.perf_counter() - began) * 1000)
            key = "hybrid_expansion_ms" if expansion else "hybrid_plain_ms"
            out[key] = latency_summary(hybrid)
            if expansion:
                entity, related = [], []
                await scope.entity(asked[0])
                for name in asked:
                    began = time.perf_counter()
                    await scope.entity(name, memories=20, neighbours=10)
                    entity.append((time.perf_counter() - began) * 1000)
                    began = time.perf_counter()
                    await scope.related(name, depth=2)
                    related.append((time.perf_counter() - began) * 1000)
                out["entity_ms"] = latency_summary(entity)
                out["related_depth2_ms"] = latency_summary(related)
                out["graph"] = {"entities": stats.entities, "mentions": stats.mentions,
                                "relations": stats.relations}
                out["store_seconds"] = round(stored, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("quality", "speed", "both"), default="both")
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--designs", nargs="*", default=["off", "default"], choices=sorted(DESIGNS))
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--entities", type=int, default=2_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": machine()}
    if args.part in ("quality", "both"):
        print(f"LoCoMo dev, hybrid, embedder {args.embedder}:", flush=True)
        report["quality"] = {"embedder": args.embedder, "designs": quality(args.embedder, args.designs)}
    if args.part in ("speed", "both"):
        report["speed"] = trio.run(speed, args.memories, args.entities, args.queries)
    print_report(report)
    if not args.no_write:
        write_results("knowledge_graph", report)


def print_report(report: dict[str, Any]) -> None:
    if "quality" in report:
        designs = report["quality"]["designs"]
        categories = [CATEGORY_NAMES[c] for c in sorted(CATEGORY_NAMES)]
        categories = [c for c in categories if c in next(iter(designs.values()))["by_category"]]
        base = designs.get("off")
        rows = []
        for name, figures in designs.items():
            cells = [f"{figures['recall@10']:.3f}"]
            for category in categories:
                value = figures["by_category"][category]["recall@10"]
                delta = "" if base is None or name == "off" else \
                    f" ({value - base['by_category'][category]['recall@10']:+.3f})"
                cells.append(f"{value:.3f}{delta}")
            rows.append([name, *cells])
        print(f"\nLoCoMo dev recall@10, hybrid, embedder {report['quality']['embedder']} "
              f"(in brackets: against expansion off)")
        print(table(["design", "all", *categories], rows))
    if "speed" in report:
        speed = report["speed"]
        graph = speed["graph"]
        print(f"\n{speed['memories']:,} memories, {graph['entities']:,} entities, "
              f"{graph['mentions']:,} mentions, {graph['relations']:,} relations "
              f"(hashing embedder; stored in {speed['store_seconds']} s)")
        rows = [[label, f"{speed[key]['p50']:.2f}", f"{speed[key]['p99']:.2f}"] for label, key in (
            ("scope.entity (20 memories, 10 neighbours)", "entity_ms"),
            ("scope.related depth 2", "related_depth2_ms"),
            ("hybrid search, expansion on", "hybrid_expansion_ms"),
            ("hybrid search, expansion off", "hybrid_plain_ms"))]
        print(table(["query", "p50 ms", "p99 ms"], rows))


if __name__ == "__main__":
    main()
