"""Entity resolution by embeddings: precision and recall on labelled name pairs.

bench/data/entity_pairs.json holds pairs of entity names labelled by hand: one
entity written two ways (``"Tower of Gandros"``, ``"Gandros Tower"``) or two
entities that must stay two (``"Paris"``, ``"Paris Hilton"``; ``"Session 1"``,
``"Session 2"``). Each pair goes through the graph as a scope meets it
(``mnemex.knowledge.graph.EntityGraph``: two memories naming one name each, the
spelling rules, then the names' vectors through ``place_vectors``), in both orders
(the outcome must not depend on it), once without types (what the offline
patterns give) and once with the extractor's types.

For each embedder (``--embedders``; MiniLM when its package is installed) it prints
precision and recall over a sweep of thresholds, the spelling rules alone, and the
figures at the embedder's default (``mnemex.knowledge.resolution.SIMILARITY``),
whose bar is a precision of 1.0 on this set (a wrong merge hides an entity; a missed
one leaves two). Then the same at the default only on the held-out pairs of
bench/data/entity_pairs_heldout.json (written after the defaults were chosen;
reported, no bar). Writes bench/results/entity_resolution.json.

    python bench/entity_resolution.py
    python bench/entity_resolution.py --embedders hashing
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import machine, table, write_results  # noqa: E402

import mnemex  # noqa: E402
from mnemex.knowledge.graph import EntityGraph  # noqa: E402
from mnemex.knowledge.resolution import default_similarity  # noqa: E402
from mnemex.models.embedders import embedder_from_config  # noqa: E402

PAIRS = _BENCH / "data" / "entity_pairs.json"
HELD_OUT = _BENCH / "data" / "entity_pairs_heldout.json"
SWEEP = [round(0.70 + 0.01 * i, 2) for i in range(30)]


def joined(pair: dict[str, Any], embedder: Any, threshold: float | None, *, typed: bool,
           flip: bool) -> bool:
    """Whether the graph makes one entity of the pair's two names."""
    graph = EntityGraph(detect=False)
    names = [(pair["a"], pair.get("type_a") or pair.get("type")), (pair["b"], pair.get("type_b") or pair.get("type"))]
    if flip:
        names.reverse()
    for doc, (name, kind) in enumerate(names):
        graph.add(doc, name, None, [name])
        if typed and kind:
            graph.note_types({name: kind})
    if threshold is not None:
        keys = graph.unembedded(100)
        if keys:
            graph.place_vectors(keys, embedder.embed(keys), embedder.name, threshold, 0.0)
    return graph.resolve(pair["a"]) == graph.resolve(pair["b"]) is not None


def scores(labels: list[bool], decided: list[bool]) -> dict[str, Any]:
    tp = sum(1 for label, made in zip(labels, decided, strict=True) if label and made)
    fp = sum(1 for label, made in zip(labels, decided, strict=True) if made and not label)
    positives = sum(labels)
    return {"precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / positives if positives else 0.0,
            "merged": tp + fp, "wrong": fp}


def measure(embedder: Any, pairs: list[dict[str, Any]], typed: bool) -> dict[str, Any]:
    labels = [bool(pair["same"]) for pair in pairs]
    out: dict[str, Any] = {"spelling": scores(labels, [joined(p, embedder, None, typed=typed, flip=False)
                                                        for p in pairs])}
    sweep = {}
    for threshold in [*SWEEP, default_similarity(embedder.name)]:
        if threshold is None:
            continue
        decided = [joined(p, embedder, threshold, typed=typed, flip=False) for p in pairs]
        flipped = [joined(p, embedder, threshold, typed=typed, flip=True) for p in pairs]
        row = scores(labels, decided)
        row["order_dependent"] = sum(a != b for a, b in zip(decided, flipped, strict=True))
        row["wrong_pairs"] = [f"{p['a']} | {p['b']}" for p, label, made in zip(pairs, labels, decided, strict=True)
                              if made and not label]
        sweep[f"{threshold:.2f}"] = row
    out["sweep"] = sweep
    return out


def held_out(embedder: Any, default: float, report: dict[str, Any]) -> None:
    pairs = json.loads(HELD_OUT.read_text())["pairs"]
    labels = [bool(pair["same"]) for pair in pairs]
    rows = []
    for typed in (False, True):
        spelling = scores(labels, [joined(p, embedder, None, typed=typed, flip=False) for p in pairs])
        decided = [joined(p, embedder, default, typed=typed, flip=False) for p in pairs]
        at = scores(labels, decided)
        at["wrong_pairs"] = [f"{p['a']} | {p['b']}" for p, label, made in zip(pairs, labels, decided, strict=True)
                             if made and not label]
        report["held_out_typed" if typed else "held_out"] = {"spelling": spelling, "default": at}
        rows.append(["typed" if typed else "untyped", f"{at['precision']:.3f}", f"{at['recall']:.3f}", at["wrong"],
                     f"{spelling['precision']:.3f}", f"{spelling['recall']:.3f}", ", ".join(at["wrong_pairs"])])
    print(f"held out: {len(pairs)} pairs ({sum(labels)} same), threshold {default}")
    print(table(["types", "precision", "recall", "wrong", "P spelling", "R spelling", "wrong pairs"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedders", default="hashing,minilm")
    args = parser.parse_args()
    pairs = json.loads(PAIRS.read_text())["pairs"]
    report: dict[str, Any] = {"machine": machine(), "pairs": len(pairs), "same": sum(p["same"] for p in pairs),
                              "embedders": {}}
    failed = []
    for name in args.embedders.split(","):
        try:
            embedder = embedder_from_config(mnemex.Config(embedder=name))
            embedder.embed(["warm"])
        except mnemex.MnemexError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        default = default_similarity(embedder.name)
        runs = {"untyped": measure(embedder, pairs, False), "typed": measure(embedder, pairs, True)}
        report["embedders"][embedder.name] = {"default": default, **runs}
        print(f"\n{embedder.name}: {len(pairs)} pairs ({report['same']} same); default threshold {default}")
        rows = []
        for threshold in runs["untyped"]["sweep"]:
            u, t = runs["untyped"]["sweep"][threshold], runs["typed"]["sweep"][threshold]
            mark = " <- default" if default is not None and threshold == f"{default:.2f}" else ""
            rows.append([threshold + mark, f"{u['precision']:.3f}", f"{u['recall']:.3f}", u["wrong"],
                         f"{t['precision']:.3f}", f"{t['recall']:.3f}", t["wrong"],
                         u["order_dependent"] + t["order_dependent"]])
        spell_u, spell_t = runs["untyped"]["spelling"], runs["typed"]["spelling"]
        rows.append(["spelling only", f"{spell_u['precision']:.3f}", f"{spell_u['recall']:.3f}", spell_u["wrong"],
                     f"{spell_t['precision']:.3f}", f"{spell_t['recall']:.3f}", spell_t["wrong"], 0])
        print(table(["threshold", "P untyped", "R untyped", "wrong", "P typed", "R typed", "wrong",
                     "order-dependent"], rows))
        if default is not None:
            at = runs["untyped"]["sweep"][f"{default:.2f}"]
            if at["precision"] < 1.0 or runs["typed"]["sweep"][f"{default:.2f}"]["precision"] < 1.0:
                failed.append(f"{embedder.name}: wrong merges at the default {default}: {at['wrong_pairs']}")
            held_out(embedder, default, report["embedders"][embedder.name])
    path = write_results("entity_resolution", report)
    print(f"\nwrote {path}")
    if failed:
        print("bar missed (precision 1.0 at the default threshold):\n  " + "\n  ".join(failed))
        raise SystemExit(1)
    print("bar met: no wrong merge at the default thresholds")


if __name__ == "__main__":
    main()
