"""Short-term memory benchmark: append throughput and context latency.

Run: python bench/agent.py [--quick]

* appended messages/s into one agent and across 1,000 agents, on a temporary
  data directory with fsync=batch (group commit), 256 concurrent callers
  appending one message per call or one four-message turn per call, and 1,000
  agents with one caller each (the median of ``--repeats`` runs; every agent is
  loaded and has its journal beforehand). Under group commit the rate is the
  callers waiting over the time of one commit round, and a round's sync writes
  back every agent journal written in it: spread over 1,000 agents, a round
  takes longer, so the rate needs more callers to hold;
* ``context`` latency (p50/p99, through the runtime and the AgentRef, copies of
  the messages included) for a 10,000-message session under each policy:
  MaxMessages(100), TokenBudget(8192) with its summary in place (the view is
  cached until the next append), the same right after an append (the view is
  recomputed), and Stateless.

Prints a table and writes bench/results/agent.json.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

import mnemex
from mnemex.conversations.protocol import Policy

# bench/ goes last on the path (its http.py would hide the standard library's http);
# the shared helpers come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import machine, percentile, write_results  # noqa: E402

WORDS = ["memory", "agent", "context", "java", "lisbon", "budget", "flat", "office", "weather", "tool",
         "result", "summary", "token", "window", "session", "user", "assistant", "decision", "number",
         "plan", "march", "invoice", "flight"]


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def turn(rng: random.Random, i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": sentence(rng, 12)},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "lookup", "arguments": '{"q": 1}'}}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": sentence(rng, 20)},
        {"role": "assistant", "content": sentence(rng, 25)},
    ]


async def append_rate(data_dir: str, agents: int, callers: int, total: int, per_call: int) -> float:
    """Messages/s appended by ``callers`` concurrent tasks into ``agents`` agents."""
    config = mnemex.Config(data_dir=data_dir, fsync="batch")
    rng = random.Random(7)
    calls = total // per_call
    payloads = [turn(rng, i)[:per_call] if per_call == 4 else [{"role": "user", "content": sentence(rng, 12)}]
                for i in range(min(calls, 2_000))]
    async with mnemex.open_runtime(config) as rt:
        refs = [rt.agent(f"agent-{i}") for i in range(agents)]
        for ref in refs:  # load every agent and create its journal first: spawning is measured elsewhere
            await ref.append("warm-up", [{"role": "user", "content": "hello"}])
        per_caller = calls // callers

        async def caller(c: int) -> None:
            for k in range(per_caller):
                n = c * per_caller + k
                await refs[n % agents].append(f"s{c % 8}", payloads[n % len(payloads)])

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for c in range(callers):
                nursery.start_soon(caller, c)
        elapsed = time.perf_counter() - started
    return callers * per_caller * per_call / elapsed


async def context_latency(data_dir: str, policy: Policy, messages: int, samples: int,
                          append_between: bool = False) -> tuple[list[float], int, int]:
    """Context latencies (microseconds) for one session of ``messages`` messages."""
    config = mnemex.Config(data_dir=data_dir, fsync="batch")
    rng = random.Random(11)
    async with mnemex.open_runtime(config) as rt:
        agent = rt.agent("bench", policy=policy)
        for i in range(messages // 4):
            await agent.append("s", turn(rng, i))
        view = await agent.context_view("s")
        if isinstance(policy, mnemex.TokenBudget):
            with trio.fail_after(60):  # the first compression of 10,000 messages runs beside the actor
                while view.pending_summary or view.summary_version == 0:
                    await trio.sleep(0.01)
                    view = await agent.context_view("s")
        times: list[float] = []
        for _ in range(samples):
            if append_between:
                await agent.append("s", [{"role": "user", "content": sentence(rng, 12)},
                                         {"role": "assistant", "content": sentence(rng, 25)}])
            started = time.perf_counter_ns()
            context = await agent.context("s")
            times.append((time.perf_counter_ns() - started) / 1000)
            assert context
        view = await agent.context_view("s")
    return times, len(view.messages), view.tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer messages (smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per append figure; the median is kept")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    repeats = 1 if args.quick else args.repeats
    rows: list[tuple[str, float, str, str]] = []
    results: dict[str, Any] = {}
    total = 200_000 // scale

    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("one agent, 256 callers, 1 message per append", 1, 256, 1, ">= 20,000"),
            ("one agent, 256 callers, 4-message turn per append", 1, 256, 4, ">= 20,000"),
            ("1,000 agents, 256 callers, 1 message per append", 1000, 256, 1, ""),
            ("1,000 agents, 256 callers, 4-message turn per append", 1000, 256, 4, ""),
            # each agent its own loop: as many callers as agents, one message per append
            ("1,000 agents, 1,000 callers (one per agent), 1 message per append", 1000, 1000, 1, ">= 20,000"),
        ]
        for number, (name, agents, callers, per_call, bar) in enumerate(cases):
            rate = statistics.median(
                trio.run(append_rate, os.path.join(tmp, f"a{number}-{r}"), agents, callers, total, per_call)
                for r in range(repeats))
            rows.append((f"appended messages/s: {name}", rate, "/s", bar))
            suffix = "" if callers == 256 else f"_{callers}_callers"
            results[f"append_rate_{agents}_agents_{per_call}_per_call{suffix}"] = rate

        messages = 10_000 // scale
        samples = 2_000 // scale
        policies: list[tuple[str, Policy, bool, str]] = [
            ("MaxMessages(100)", mnemex.MaxMessages(100), False, ""),
            ("TokenBudget(8192), summary cached", mnemex.TokenBudget(8192), False, "p50 <= 1,000"),
            ("TokenBudget(8192), after each append", mnemex.TokenBudget(8192), True, ""),
            ("Stateless", mnemex.Stateless(), False, ""),
        ]
        for number, (name, policy, between, bar) in enumerate(policies):
            times, size, tokens = trio.run(context_latency, os.path.join(tmp, f"c{number}"), policy,
                                           messages, samples, between)
            p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
            label = f"context, {messages:,}-message session, {name}"
            rows.append((f"{label} p50 ({size} msgs, {tokens:,} tokens)", p50, "us", bar))
            rows.append((f"{label} p99", p99, "us", ""))
            key = name.split(",")[0].split("(")[0].lower() + ("_after_append" if between else "")
            results[f"context_{key}_p50_us"] = p50
            results[f"context_{key}_p99_us"] = p99

    width = max(len(r[0]) for r in rows)
    print(f"{'figure'.ljust(width)}  {'value':>12}  unit  bar")
    print("-" * (width + 34))
    for name, value, unit, bar in rows:
        print(f"{name.ljust(width)}  {value:>12,.1f}  {unit:<4}  {bar}")
    out = {
        "benchmark": "agent",
        "machine": machine(),
        "quick": args.quick,
        "repeats": repeats,
        "rows": [{"figure": r[0], "value": r[1], "unit": r[2], "bar": r[3]} for r in rows],
        **results,
    }
    path = write_results("agent", out)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
