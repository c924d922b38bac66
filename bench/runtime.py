"""Runtime benchmark: ask latency, ask throughput, spawn rate, memory per idle actor.

Run: python bench/runtime.py [--quick]

Prints a table and writes bench/results/runtime.json. The baseline row is a raw
trio memory-channel ping-pong between two tasks, measured in the same run: the
floor under any ask, so the distance to it is the kernel's own cost.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import trio.testing

import mnemex
from mnemex.testing import Add, Get, counter_kind

# bench/ goes last on the path (its http.py would hide the standard library's http);
# the shared helpers come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import machine, percentile, rss_bytes, write_results  # noqa: E402


async def raw_channel_round_trip(n: int) -> list[float]:
    to_actor, actor_inbox = trio.open_memory_channel[Any](1024)
    to_caller, caller_inbox = trio.open_memory_channel[Any](1024)

    async def actor() -> None:
        async for message in actor_inbox:
            await to_caller.send(message)

    samples = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor)
        for i in range(n):
            t = time.perf_counter_ns()
            await to_actor.send(i)
            await caller_inbox.receive()
            samples.append((time.perf_counter_ns() - t) / 1000)
        nursery.cancel_scope.cancel()
    return samples


async def ask_round_trip(cfg: mnemex.Config, n: int, command: Any) -> list[float]:
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        await ref.ask(Get())
        samples = []
        for _ in range(n):
            t = time.perf_counter_ns()
            await ref.ask(command)
            samples.append((time.perf_counter_ns() - t) / 1000)
    return samples


async def ask_throughput(cfg: mnemex.Config, actors: int, callers: int, per_caller: int,
                         command: Any) -> float:
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        refs = [rt.ref("counter", f"c{i}") for i in range(actors)]
        for ref in refs:
            await ref.ask(Get())

        async def caller(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(per_caller):
                await refs[rng.randrange(actors)].ask(command)

        t = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for c in range(callers):
                nursery.start_soon(caller, c)
        elapsed = time.perf_counter() - t
    return callers * per_caller / elapsed


async def spawn_and_memory(n: int) -> tuple[float, float]:
    cfg = mnemex.Config(data_dir=None, idle_timeout=3600)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "warm", Get())
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        before = rss_bytes()
        t = time.perf_counter()
        for i in range(n):
            await rt.tell("counter", f"actor-{i}", Add(1))
        await trio.testing.wait_all_tasks_blocked()  # every actor loaded, handled, idle
        elapsed = time.perf_counter() - t
        gc.collect()
        after = rss_bytes()
        assert rt.stats().live == n + 1
    return n / elapsed, (after - before) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure; the median is kept")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    repeats = 1 if args.quick else args.repeats
    n_lat = 20_000 // scale
    memory = mnemex.Config(data_dir=None)
    rows: list[tuple[str, float, str, str]] = []
    results: dict[str, Any] = {}

    def median_of(fn: Any) -> Any:
        return statistics.median(fn() for _ in range(repeats))

    raw = [trio.run(raw_channel_round_trip, n_lat) for _ in range(repeats)]
    raw_p50 = statistics.median(percentile(s, 0.5) for s in raw)
    raw_p99 = statistics.median(percentile(s, 0.99) for s in raw)
    rows += [("baseline: raw trio channel round trip p50", raw_p50, "us", ""),
             ("baseline: raw trio channel round trip p99", raw_p99, "us", "")]

    lat = [trio.run(ask_round_trip, memory, n_lat, Get()) for _ in range(repeats)]
    p50 = statistics.median(percentile(s, 0.5) for s in lat)
    p99 = statistics.median(percentile(s, 0.99) for s in lat)
    rows += [("ask round trip p50 (read, in memory)", p50, "us", "<= 50"),
             ("ask round trip p99 (read, in memory)", p99, "us", "")]
    results["ask_p50_us"], results["ask_p99_us"] = p50, p99

    lat_w = [trio.run(ask_round_trip, memory, n_lat, Add(1)) for _ in range(repeats)]
    rows.append(("ask round trip p50 (journaled write, in memory)",
                 statistics.median(percentile(s, 0.5) for s in lat_w), "us", ""))

    with tempfile.TemporaryDirectory() as tmp:
        disk = mnemex.Config(data_dir=tmp, fsync="batch")
        lat_d = trio.run(ask_round_trip, disk, n_lat // 4, Add(1))
        disk_p50 = percentile(lat_d, 0.5)
        rows.append(("ask round trip p50 (journaled write, disk, fsync=batch)", disk_p50, "us", ""))
        results["ask_disk_batch_p50_us"] = disk_p50

    per_caller = 2_000 // scale
    rate = median_of(lambda: trio.run(ask_throughput, memory, 100, 100, per_caller, Get()))
    rows.append(("asks/s, 100 actors x 100 callers (read)", rate, "/s", ">= 30,000"))
    results["asks_per_s"] = rate
    rate_w = median_of(lambda: trio.run(ask_throughput, memory, 100, 100, per_caller, Add(1)))
    rows.append(("asks/s, 100 actors x 100 callers (journaled write, in memory)", rate_w, "/s", ""))
    results["asks_per_s_write"] = rate_w

    n_spawn = 10_000 // (scale if args.quick else 1)
    spawned = [trio.run(spawn_and_memory, n_spawn) for _ in range(repeats)]
    spawn_rate = statistics.median(s[0] for s in spawned)
    per_actor = statistics.median(s[1] for s in spawned)
    rows.append((f"spawn rate ({n_spawn:,} actors, spawn + first message)", spawn_rate, "/s", ">= 20,000"))
    rows.append((f"RSS per idle live actor ({n_spawn:,} actors)", per_actor, "bytes", "<= 10,000"))
    rows.append((f"RSS for {n_spawn:,} idle actors", per_actor * n_spawn / 1e6, "MB", "<= 100"))
    results.update(spawn_per_s=spawn_rate, bytes_per_actor=per_actor, actors=n_spawn,
                   raw_p50_us=raw_p50, raw_p99_us=raw_p99)

    width = max(len(r[0]) for r in rows)
    print(f"{'figure'.ljust(width)}  {'value':>12}  unit   bar")
    print("-" * (width + 32))
    for name, value, unit, bar in rows:
        print(f"{name.ljust(width)}  {value:>12,.1f}  {unit:<5}  {bar}")
    out = {
        "benchmark": "runtime",
        "machine": machine(),
        "repeats": repeats,
        "quick": args.quick,
        "rows": [{"figure": r[0], "value": r[1], "unit": r[2], "bar": r[3]} for r in rows],
        **results,
    }
    path = write_results("runtime", out)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
