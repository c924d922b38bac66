"""The rule-based extractor (mnemex.knowledge.rules) against conversation turns written
for mnemex: precision and recall over facts, overall and per slot.

Run: python bench/rules_extractor.py [--set development|held-out] [--misses] [--out FILE]

Two sets, each line ``{"text": ..., "facts": [{"slot": ..., "value": ...}]}``:
bench/data/extraction_turns.jsonl (the development set, 161 turns, 44 stating no fact)
and bench/data/extraction_turns_heldout.jsonl (40 turns, 13 stating none), both written
before the extractor, the second never used to tune it. Each turn is one user message.

Gold facts are (slot, value) pairs; the slots are the extractor's (``SLOTS``). The value
is the shortest span of the turn that carries the fact (a place, a name, an employer,
the thing liked); a person close to the user is a ``relationship`` whose value is
their name when given, else the relation word; a pet is a ``pet`` (its name, else the
species); ``note`` is an explicitly requested fact that fits no other slot. Questions,
hypotheticals, what the user no longer does, other people's words and the memory
block mnemex injects state no fact.

An extracted fact matches a gold fact when ``slot_of(fact)`` is the gold slot and the
fact's content contains the gold value (case, accents and punctuation ignored, whole
words). Precision: matched extracted facts / extracted facts; recall: matched gold
facts / gold facts. Bars: precision >= 0.9 and recall >= 0.6 on each set
(tests/knowledge/test_rules.py asserts them). Prints the tables and writes
bench/results/rules_extractor.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the checkout goes first on the import path (else an installed mnemex is measured);
# the shared helpers come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import machine, table, write_results  # noqa: E402

from mnemex.knowledge.facts import ExtractionRequest, SourceMessage  # noqa: E402
from mnemex.knowledge.rules import SLOTS, RulesExtractor, slot_of  # noqa: E402

SETS = {"development": _BENCH / "data" / "extraction_turns.jsonl",
        "held-out": _BENCH / "data" / "extraction_turns_heldout.jsonl"}
BAR_PRECISION = 0.9
BAR_RECALL = 0.6


def normalised(text: str) -> str:
    """Lower case, no accents, no apostrophes, words separated by single spaces."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(re.split(r"[^\w]+", plain.replace("'", ""))).strip()


def matches(slot: str, content: str, gold: dict[str, str]) -> bool:
    return slot == gold["slot"] and f" {normalised(gold['value'])} " in f" {normalised(content)} "


@dataclass
class Tally:
    gold: int = 0
    extracted: int = 0
    gold_matched: int = 0
    extracted_matched: int = 0

    @property
    def precision(self) -> float:
        return self.extracted_matched / self.extracted if self.extracted else 1.0

    @property
    def recall(self) -> float:
        return self.gold_matched / self.gold if self.gold else 1.0


@dataclass
class Evaluation:
    """The figures of one set: overall, per slot, the no-fact turns that produced a
    fact, and every miss (gold facts not found, extracted facts matching nothing)."""

    turns: int = 0
    silent_turns: int = 0
    silent_turns_with_facts: int = 0
    overall: Tally = field(default_factory=Tally)
    slots: dict[str, Tally] = field(default_factory=dict)
    missed: list[dict[str, Any]] = field(default_factory=list)
    spurious: list[dict[str, Any]] = field(default_factory=list)


def load(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{number}: {exc}") from exc
    return rows


def evaluate(rows: list[dict[str, Any]]) -> Evaluation:
    extractor = RulesExtractor()
    result = Evaluation()
    for row in rows:
        request = ExtractionRequest(session_id="bench", messages=[SourceMessage(0, "user", row["text"])])
        facts = [(slot_of(f), f.content) for f in extractor.extract(request).facts]
        gold = row["facts"]
        result.turns += 1
        if not gold:
            result.silent_turns += 1
            result.silent_turns_with_facts += bool(facts)
        for g in gold:
            found = any(matches(slot, content, g) for slot, content in facts)
            for tally in (result.overall, result.slots.setdefault(g["slot"], Tally())):
                tally.gold += 1
                tally.gold_matched += found
            if not found:
                result.missed.append({"text": row["text"], "gold": g, "extracted": facts})
        for slot, content in facts:
            found = any(matches(slot, content, g) for g in gold)
            for tally in (result.overall, result.slots.setdefault(slot, Tally())):
                tally.extracted += 1
                tally.extracted_matched += found
            if not found:
                result.spurious.append({"text": row["text"], "slot": slot, "content": content})
    return result


def meets_bars(evaluation: Evaluation) -> bool:
    return evaluation.overall.precision >= BAR_PRECISION and evaluation.overall.recall >= BAR_RECALL


def figures(evaluation: Evaluation) -> dict[str, Any]:
    def tally(t: Tally) -> dict[str, Any]:
        return {"gold": t.gold, "extracted": t.extracted, "gold_matched": t.gold_matched,
                "extracted_matched": t.extracted_matched, "precision": round(t.precision, 4),
                "recall": round(t.recall, 4)}

    return {"turns": evaluation.turns, "turns_without_facts": evaluation.silent_turns,
            "turns_without_facts_that_gave_one": evaluation.silent_turns_with_facts,
            **tally(evaluation.overall),
            "slots": {slot: tally(evaluation.slots[slot]) for slot in SLOTS if slot in evaluation.slots},
            "missed": evaluation.missed, "spurious": evaluation.spurious}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", choices=list(SETS), dest="sets",
                        help="only this set (repeatable; default: both)")
    parser.add_argument("--misses", action="store_true", help="print every missed and every spurious fact")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here instead")
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": machine(), "sets": {},
                              "bars": {"precision": BAR_PRECISION, "recall": BAR_RECALL}}
    summary = []
    for name, path in SETS.items():
        if args.sets and name not in args.sets:
            continue
        evaluation = evaluate(load(path))
        report["sets"][name] = {"file": str(path.relative_to(_BENCH.parent)), **figures(evaluation)}
        o = evaluation.overall
        silent = f"{evaluation.silent_turns_with_facts} of {evaluation.silent_turns}"
        summary.append((name, evaluation.turns, silent, o.gold, o.extracted, f"{o.precision:.3f}",
                        f"{o.recall:.3f}", "yes" if meets_bars(evaluation) else "NO"))
        print(f"\n{name} set ({path.name}), per slot\n")
        print(table(["slot", "gold", "extracted", "precision", "recall"],
                    [(slot, t.gold, t.extracted, f"{t.precision:.2f}" if t.extracted else "-",
                      f"{t.recall:.2f}" if t.gold else "-")
                     for slot in SLOTS if (t := evaluation.slots.get(slot)) is not None]))
        if args.misses:
            for miss in evaluation.missed:
                print(f"  missed {miss['gold']['slot']}={miss['gold']['value']!r}: {miss['text']}")
                for slot, content in miss["extracted"]:
                    print(f"      got {slot}: {content}")
            for extra in evaluation.spurious:
                print(f"  spurious {extra['slot']}: {extra['content']!r} <- {extra['text']}")
    print(f"\nbars: precision >= {BAR_PRECISION}, recall >= {BAR_RECALL}\n")
    print(table(["set", "turns", "no-fact turns giving a fact", "gold facts", "extracted", "precision",
                 "recall", "bars met"], summary))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nwrote {args.out}")
    else:
        print(f"\nwrote {write_results('rules_extractor', report)}")


if __name__ == "__main__":
    main()
