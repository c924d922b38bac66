"""The HTTP client mode beside the runtime in-process: what a round trip costs.

Run: python bench/remote.py [--quick] [--embedder hashing|minilm] [--memories 300] [--queries 200]

In one run, in turns (in-process, remote, in-process...), on two temporary data directories with the same
config: a runtime opened in this process (``mnemex.open_runtime``), and a ``mnemex
serve`` on a thread of this process (uvicorn on uvloop, the runtime its trio guest)
reached through ``mnemex.connect`` over 127.0.0.1 (keep-alive connections). Each
side stores the same memories one ``remember`` at a time, then answers the same
queries with ``search`` in keyword and hybrid modes, one call at a time (latency,
not throughput). Texts are embedded by the caller on both sides, so the difference
is the HTTP round trip and the encoding of the command and its reply.

Prints a table (p50 and p99 per call, the remote's p50 over the in-process one)
and writes bench/results/remote.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/ goes last on the path (its http.py would hide the standard library's http)
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

import trio  # noqa: E402
from _common import WORDS, fmt_ms, fmt_ratio, latency_summary, machine, table, texts, write_results  # noqa: E402

import mnemex  # noqa: E402
from mnemex.server import Server, ServerSettings  # noqa: E402


async def measure(rt: Any, user: str, memories: list[str], queries: list[str],
                  out: dict[str, list[float]]) -> None:
    """Milliseconds per call into ``out``: each memory remembered in scope ``user``,
    then each query searched per mode."""
    scope = rt.scope(user_id=user, app_name="remote")
    await scope.remember("warm-up: the first call loads the scope")
    await scope.search("warm-up", mode="hybrid")
    for text in memories:
        started = time.perf_counter()
        await scope.remember(text)
        out.setdefault("remember", []).append((time.perf_counter() - started) * 1000)
    for mode in ("keyword", "hybrid"):
        for query in queries:
            started = time.perf_counter()
            await scope.search(query, 10, mode)
            out.setdefault(f"search {mode}", []).append((time.perf_counter() - started) * 1000)


async def both(config: mnemex.Config, url: str, memories: list[str], queries: list[str],
               rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """The two sides in turns (in-process, remote, in-process...), each round in a
    scope of its own, so that neither gets the warmer machine."""
    here: dict[str, list[float]] = {}
    there: dict[str, list[float]] = {}
    async with mnemex.open_runtime(config) as local, mnemex.connect(url) as remote:
        for round_ in range(rounds):
            await measure(local, f"bench{round_}", memories, queries, here)
            await measure(remote, f"bench{round_}", memories, queries, there)
    return here, there


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 memories, 50 queries, 2 rounds")
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    parser.add_argument("--memories", type=int, default=300)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="turns of each side")
    args = parser.parse_args()
    count, asked = (100, 50) if args.quick else (args.memories, args.queries)
    if args.quick:
        args.rounds = 2
    memories, queries = texts(count, 1), [" ".join(random.Random(i).sample(WORDS, 3)) for i in range(asked)]
    with tempfile.TemporaryDirectory(prefix="mnemex-bench-remote-") as tmp:
        server = Server(mnemex.Config(data_dir=f"{tmp}/served", embedder=args.embedder),
                        ServerSettings(host="127.0.0.1", port=0))
        server.start()
        try:
            here, there = trio.run(both, mnemex.Config(data_dir=f"{tmp}/local", embedder=args.embedder),
                                   f"http://127.0.0.1:{server.port}", memories, queries, args.rounds)
        finally:
            server.close()
    rows = []
    results: dict[str, Any] = {}
    for name in here:
        local_, remote_ = latency_summary(here[name]), latency_summary(there[name])
        ratio = float(remote_["p50"]) / float(local_["p50"])
        overhead = float(remote_["p50"]) - float(local_["p50"])
        results[name] = {"in_process_ms": local_, "remote_ms": remote_, "p50_ratio": ratio,
                         "p50_overhead_ms": overhead}
        rows.append([name, fmt_ms(float(local_["p50"])), fmt_ms(float(remote_["p50"])), fmt_ms(overhead),
                     fmt_ratio(ratio), fmt_ms(float(local_["p99"])), fmt_ms(float(remote_["p99"]))])
    print(f"embedder {args.embedder}; {args.rounds} rounds of {count} memories and {asked} queries per mode "
          f"on each side, in turns; one call at a time (ms)")
    print(table(["call", "in-process p50", "remote p50", "+ms", "remote/in-process",
                 "in-process p99", "remote p99"], rows))
    report = {"machine": machine(), "embedder": args.embedder, "memories": count, "queries": asked,
              "rounds": args.rounds,
              "results": results}
    print(f"wrote {write_results('remote', report)}")


if __name__ == "__main__":
    main()
