"""Ingest against the model: how close storing memories through scopes comes to the
embedder's own rate, measured in the same run on the same texts (issue 20's bar:
ingest through a scope >= 90% of the raw model's texts/s).

Run: python bench/ingest.py [--rounds 12] [--per-round 690] [--quick] [--embedder minilm]

The texts are the LoCoMo dev turns ("speaker: text", read at run time from
../shared/data/locomo-dev.json); each round takes ``--per-round`` of them (the
next ones each round, around the set) and measures on them:

* ``raw``: ``embedder.embed`` called directly on the texts in batches of
  ``config.models.embed_batch_size`` (what one call of the batcher takes), one
  call after another in this thread: the model alone, nothing of mnemex around it;
* ``one caller``: one scope, one task calling ``scope.remember_many`` on batches
  of ``--large`` texts, one after another;
* ``many callers``: ``--scopes`` scopes with ``--callers`` tasks each, every task
  calling ``remember_many`` on batches of ``--small`` texts of its share;
* ``rt.remember_many``: the runtime's batch write across ``--scopes`` scopes, in
  batches of ``--large`` items, one after another.

A scope's rate is counted from the first call until the last memory is
acknowledged (embedded, journaled with the default ``fsync = "batch"``, indexed),
on a fresh data directory each time, with the model loaded beforehand. The raw
rate is measured before and after each scope workload (raw, one caller, raw, many
callers, raw, rt.remember_many, raw; the workloads' order turns each round), and
a workload's ratio in a round is its rate over the mean of the two raw rates
around it: the machine's load drifts (other processes), and what drifts between
two measurements a few seconds apart falls on both sides of the ratio alike. The
figures reported are the medians over the rounds.

Prints a table and writes bench/results/ingest.json.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

# bench/ goes last on the path (its http.py would hide the standard library's http);
# the shared helpers come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import fmt_num, load_locomo, locomo_turns, machine, table, write_results  # noqa: E402

import mnemex  # noqa: E402
from mnemex.models.embedders import embedder_from_config  # noqa: E402


def raw_rate(embedder: Any, texts: list[str], batch: int) -> float:
    """Texts/s of ``embedder.embed`` over ``texts`` in calls of ``batch``."""
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        embedder.embed(texts[start:start + batch])
    return len(texts) / (time.perf_counter() - started)


async def _timed_ingest(config: mnemex.Config, texts: list[str],
                        write: Callable[[Any, list[str]], Awaitable[None]]) -> float:
    """Texts/s of ``write(rt, texts)`` on a fresh runtime (shutdown not counted)."""
    async with mnemex.open_runtime(config) as rt:
        started = time.perf_counter()
        await write(rt, texts)
        elapsed = time.perf_counter() - started
    return len(texts) / elapsed


async def one_caller(rt: Any, texts: list[str], *, batch: int) -> None:
    scope = rt.scope(user_id="bench", app_name="ingest")
    for start in range(0, len(texts), batch):
        await scope.remember_many(texts[start:start + batch])


async def many_callers(rt: Any, texts: list[str], *, scopes: int, callers: int, batch: int) -> None:
    refs = [rt.scope(user_id=f"user{i}", app_name="ingest") for i in range(scopes)]
    tasks = scopes * callers

    async def caller(index: int) -> None:
        scope = refs[index % scopes]
        share = texts[index::tasks]
        for start in range(0, len(share), batch):
            await scope.remember_many(share[start:start + batch])

    async with trio.open_nursery() as nursery:
        for index in range(tasks):
            nursery.start_soon(caller, index)


async def across_scopes(rt: Any, texts: list[str], *, scopes: int, batch: int) -> None:
    items = [("ingest", f"user{i % scopes}", {"content": text}) for i, text in enumerate(texts)]
    for start in range(0, len(items), batch):
        await rt.remember_many(items[start:start + batch])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12, help="rounds; each figure is the median over them")
    parser.add_argument("--per-round", type=int, default=690, help="texts each measurement embeds")
    parser.add_argument("--embedder", default=mnemex.Config().embedder, help="config.embedder to measure")
    parser.add_argument("--large", type=int, default=500, help="texts per remember_many of the one caller")
    parser.add_argument("--small", type=int, default=4, help="texts per remember_many of the many callers")
    parser.add_argument("--scopes", type=int, default=8, help="scopes of the many-callers workloads")
    parser.add_argument("--callers", type=int, default=4, help="tasks per scope of the many-callers workload")
    parser.add_argument("--quick", action="store_true", help="two rounds of 200 texts (smoke run)")
    args = parser.parse_args()
    rounds, per_round = (2, 200) if args.quick else (args.rounds, args.per_round)
    turns = [turn.memory for conversation in load_locomo() for turn in locomo_turns(conversation)]
    with tempfile.TemporaryDirectory(prefix="mnemex-ingest-") as tmp:
        def config(name: str, index: int) -> mnemex.Config:
            return mnemex.Config(data_dir=f"{tmp}/{name}-{index}", embedder=args.embedder)  # type: ignore[arg-type]

        embedder = embedder_from_config(config("load", 0))
        embedder.embed(["the model loaded and warm before the first round"])
        batch = config("load", 0).models.embed_batch_size
        writes: dict[str, Callable[[Any, list[str]], Awaitable[None]]] = {
            "one caller": functools.partial(one_caller, batch=args.large),
            "many callers": functools.partial(many_callers, scopes=args.scopes, callers=args.callers,
                                              batch=args.small),
            "rt.remember_many": functools.partial(across_scopes, scopes=args.scopes, batch=args.large),
        }
        names = list(writes)
        raws: list[float] = []
        rates: dict[str, list[float]] = {name: [] for name in names}
        ratios: dict[str, list[float]] = {name: [] for name in names}
        for index in range(rounds):
            start = index * per_round % len(turns)
            texts = (turns[start:] + turns[:start])[:per_round]
            before = raw_rate(embedder, texts, batch)
            raws.append(before)
            for name in names[index % len(names):] + names[:index % len(names)]:
                rate = trio.run(_timed_ingest, config(name.replace(" ", "-"), index), texts, writes[name])
                after = raw_rate(embedder, texts, batch)
                raws.append(after)
                rates[name].append(rate)
                ratios[name].append(rate / ((before + after) / 2))
                before = after
            print(f"round {index + 1}: raw {statistics.median(raws[-4:]):,.0f}/s, " + ", ".join(
                f"{name} {rates[name][-1]:,.0f}/s ({ratios[name][-1]:.0%})" for name in names), flush=True)
    medians = {"raw": statistics.median(raws), **{name: statistics.median(rates[name]) for name in names}}
    shapes = {"raw": f"embed, batches of {batch}",
              "one caller": f"1 scope x 1 caller, batches of {args.large}",
              "many callers": f"{args.scopes} scopes x {args.callers} callers, batches of {args.small}",
              "rt.remember_many": f"{args.scopes} scopes, batches of {args.large}"}
    rows = [("raw", shapes["raw"], fmt_num(medians["raw"]), "-", "-")]
    rows += [(name, shapes[name], fmt_num(medians[name]), f"{statistics.median(ratios[name]):.1%}",
              f"{min(ratios[name]):.0%} - {max(ratios[name]):.0%}") for name in names]
    print(f"\n{per_round:,} LoCoMo turns a round, {embedder.name}, medians of {rounds} rounds "
          f"(load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}):")
    print(table(["workload", "shape", "texts/s", "of raw", "range"], rows, left=2))
    report = {"benchmark": "ingest", "machine": machine(), "embedder": embedder.name, "per_round": per_round,
              "rounds": rounds, "embed_batch_size": batch, "shapes": shapes, "raw": raws, "rates": rates,
              "ratios": ratios, "medians": medians,
              "median_ratios": {name: statistics.median(values) for name, values in ratios.items()}}
    path = write_results("ingest", report)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
