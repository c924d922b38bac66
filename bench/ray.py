"""mnemex on a local Ray cluster beside the runtime in-process: what a call through a
shard costs, and how long a lost node leaves its keys unserved.

Run: python bench/ray.py [--quick] [--embedder hashing|minilm] [--memories 300] [--queries 200] [--ttl 6]
                         [--scopes N [--concurrency 32] [--baseline-scopes N]]

One run: a local three-node Ray cluster (ray.cluster_utils, every node on
127.0.0.1; a head with 2 CPUs and two workers with 1), three shards over one
temporary data directory, and, on another, a runtime opened in this process with
the same config. In turns (in-process, Ray, in-process, Ray), each side stores the
same memories one ``remember`` at a time and answers the same queries with
``search`` (hybrid), one call at a time (latency, not throughput). Texts are
embedded by the caller on both sides, so the difference is the hop to the shard
actor and back (Ray's call, the wire encoding, the shard's trio thread).

Then failover: a worker node hosting a shard is removed (``cluster.remove_node``);
the time from its loss until a scope of that shard answers again is reported (Ray
restarts the shard elsewhere; it takes the leases once they lapse: about ``--ttl``).

With ``--scopes N`` (issue 22's bar, 100,000 across 4 shards): another cluster of
four shards on a new data directory; N users each store one memory (``--concurrency``
calls at once); the shards' resident memory is read from /proc before and after,
and the growth per scope is set beside the scale issue's per-user bar (20,000
users within 600 MB: 30 KB each). Beside it, in the same run (once the cluster is
down), the same number of scopes (``--baseline-scopes``, default N; 0: none) in one
runtime opened in a child process, the same way: its own resident memory before and
after, per scope (that runtime embeds the texts itself, so its embedder's bounded
word caches are in its figure; the shards get vectors).

Prints a table and writes bench/results/ray.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/ goes last on the path (its http.py would hide the standard library's http); Ray
# speaks over loopback only when it believes clustering is off (read when it is imported)
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import trio  # noqa: E402
from _common import fmt_ms, latency_summary, machine, rss_bytes, table, texts, write_results  # noqa: E402

import mnemex  # noqa: E402
import mnemex.ray  # noqa: E402
from mnemex.lowlevel import vshard_of  # noqa: E402


async def measure(rt: Any, user: str, memories: list[str], queries: list[str],
                  out: dict[str, list[float]]) -> None:
    scope = rt.scope(user_id=user, app_name="bench")
    await scope.remember("warm-up: the first call loads the scope")
    await scope.search("warm-up", mode="hybrid")
    for text in memories:
        started = time.perf_counter()
        await scope.remember(text)
        out["remember"].append((time.perf_counter() - started) * 1000)
    for query in queries:
        started = time.perf_counter()
        await scope.search(query, mode="hybrid", top_k=5)
        out["search"].append((time.perf_counter() - started) * 1000)


async def failover(rt: mnemex.ray.RayRuntime, cluster: Any, workers: list[Any]) -> dict[str, Any]:
    """Remove a worker node hosting a shard; seconds until that shard's scope answers."""
    health = await rt.health()
    by_id = {node.node_id: node for node in workers}
    victim = next((h for h in health if h is not None and h.node_id in by_id), None)
    if victim is None:
        return {"error": "no shard ran on a worker node"}
    index = int(victim.name.split("-")[1])
    user = next(f"u{i}" for i in range(100_000)
                if rt.placement.owners[vshard_of("scope", ("bench", f"u{i}"))] == index)
    scope = rt.scope(user_id=user, app_name="bench")
    stored = await scope.remember("stored before the node was lost")
    await trio.to_thread.run_sync(cluster.remove_node, by_id[victim.node_id])
    lost = time.perf_counter()
    page = await scope.memories()
    serving = time.perf_counter() - lost
    return {"shard": victim.name, "seconds_to_serve_again": serving,
            "intact": [m.id for m in page.memories] == [stored]}


PER_USER_BAR_KB = 600 * 1024 / 20_000  # issue 17: 20,000 users of one memory within 600 MB


def rss_kb(pid: int) -> int:
    """Resident memory of a process, from /proc (KB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


async def many_scopes(args: argparse.Namespace, data_dir: str) -> dict[str, Any]:
    """N users of one memory each through four shards: the shards' memory per scope."""
    config = mnemex.Config(data_dir=data_dir, embedder=args.embedder)
    async with mnemex.ray.open_runtime(config, shards=4, ttl=args.ttl, margin=min(2.0, args.ttl / 4),
                                       actor_options={"num_cpus": 0.5}) as rt:
        await rt.scope(user_id="warm-up", app_name="bench").remember("warm-up")
        pids = await rt.shard_pids()
        before = [rss_kb(pid) for pid in pids]
        limiter = trio.CapacityLimiter(args.concurrency)
        done = [0]
        started = time.perf_counter()
        deadline = started + args.scope_seconds

        async def store(first: int) -> None:
            for i in range(first, args.scopes, args.concurrency):
                if time.perf_counter() > deadline:
                    return
                async with limiter:
                    await rt.scope(user_id=f"user-{i}", app_name="bench").remember(f"user {i} likes tea")
                done[0] += 1

        async with trio.open_nursery() as nursery:
            for first in range(args.concurrency):
                nursery.start_soon(store, first)
        seconds = time.perf_counter() - started
        after = [rss_kb(pid) for pid in await rt.shard_pids()]
        check = await rt.scope(user_id="user-0", app_name="bench").memories()
    grown = sum(after) - sum(before)
    return {"scopes": done[0], "asked": args.scopes, "seconds": seconds, "per_second": done[0] / seconds,
            "shard_rss_kb_before": before, "shard_rss_kb_after": after,
            "kb_per_scope": grown / max(1, done[0]), "bar_kb_per_scope": PER_USER_BAR_KB,
            "found_again": len(check.memories) == 1}


async def in_process_scopes(args: argparse.Namespace) -> None:
    """The baseline of ``many_scopes``: as many users of one memory each in one runtime
    in this process (a child of the benchmark), its resident memory before and after,
    printed as JSON. Then the process leaves without the runtime's clean shutdown
    (snapshotting every scope takes minutes and is not what is measured)."""
    data_dir = tempfile.mkdtemp(prefix="mnemex-bench-")
    config = mnemex.Config(data_dir=data_dir, embedder=args.embedder)
    async with mnemex.open_runtime(config) as rt:
        await rt.scope(user_id="warm-up", app_name="bench").remember("warm-up")
        before = rss_bytes()
        limiter = trio.CapacityLimiter(args.concurrency)
        count = args.baseline_child
        started = time.perf_counter()

        async def store(first: int) -> None:
            for i in range(first, count, args.concurrency):
                async with limiter:
                    await rt.scope(user_id=f"user-{i}", app_name="bench").remember(f"user {i} likes tea")

        async with trio.open_nursery() as nursery:
            for first in range(args.concurrency):
                nursery.start_soon(store, first)
        seconds = time.perf_counter() - started
        after = rss_bytes()
        grown = (after - before) / 1024
        print(json.dumps({"scopes": count, "seconds": seconds, "rss_kb_before": before // 1024,
                          "rss_kb_after": after // 1024, "kb_per_scope": grown / max(1, count),
                          "live": rt.stats().live}), flush=True)
        shutil.rmtree(data_dir, ignore_errors=True)
        os._exit(0)


def baseline_scopes(args: argparse.Namespace) -> dict[str, Any]:
    """``in_process_scopes`` in a child process (its memory apart from Ray's driver)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--baseline-child", str(args.baseline_scopes),
               "--embedder", args.embedder, "--concurrency", str(args.concurrency)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.scope_seconds + 300,
                          check=False)
    if done.returncode != 0:
        return {"error": f"the in-process run failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    node = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True,
                      head_node_args={**node, "num_cpus": 2, "include_dashboard": False})
    workers = [cluster.add_node(**node, num_cpus=1) for _ in range(2)]
    ray.init(address=cluster.address, _node_ip_address="127.0.0.1", namespace="mnemex-bench",
             log_to_driver=False)
    memories, queries = texts(args.memories, 1), texts(args.queries, 2)
    local: dict[str, list[float]] = {"remember": [], "search": []}
    remote: dict[str, list[float]] = {"remember": [], "search": []}
    try:
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
            config = mnemex.Config(data_dir=one, embedder=args.embedder)
            shared = mnemex.Config(data_dir=two, embedder=args.embedder)
            async with mnemex.open_runtime(config) as inproc, mnemex.ray.open_runtime(
                    shared, shards=3, ttl=args.ttl, margin=min(2.0, args.ttl / 4),
                    actor_options={"num_cpus": 1}) as cluster_rt:
                half_m, half_q = len(memories) // 2, len(queries) // 2
                for turn in range(2):
                    chunk_m = memories[turn * half_m:(turn + 1) * half_m]
                    chunk_q = queries[turn * half_q:(turn + 1) * half_q]
                    await measure(inproc, f"user{turn}", chunk_m, chunk_q, local)
                    await measure(cluster_rt, f"user{turn}", chunk_m, chunk_q, remote)
                over = await failover(cluster_rt, cluster, workers)
        scopes = None
        if args.scopes:
            with tempfile.TemporaryDirectory() as three:
                scopes = await many_scopes(args, three)
    finally:
        ray.shutdown()
        cluster.shutdown()
    if scopes is not None and args.baseline_scopes:
        scopes["in_process"] = await trio.to_thread.run_sync(baseline_scopes, args)
    calls = {}
    for call in ("remember", "search"):
        mine, theirs = latency_summary(local[call]), latency_summary(remote[call])
        calls[call] = {"in_process": mine, "ray": theirs, "p50_difference_ms": theirs["p50"] - mine["p50"]}
    return {"machine": machine(), "embedder": args.embedder, "shards": 3, "ttl": args.ttl,
            "memories": args.memories, "queries": args.queries, "calls": calls, "failover": over,
            "many_scopes": scopes}


def scope_rows(scopes: dict[str, Any]) -> list[list[str]]:
    """The --scopes table: the four shards' growth, and the same run's in-process baseline."""
    bar = scopes["bar_kb_per_scope"]
    rows = [["4 shards through Ray", f"{scopes['scopes']:,}", f"{scopes['seconds']:.0f}",
             f"{scopes['per_second']:,.0f}", f"{sum(scopes['shard_rss_kb_before']) / 1024:,.0f}",
             f"{sum(scopes['shard_rss_kb_after']) / 1024:,.0f}", f"{scopes['kb_per_scope']:.1f}",
             "yes" if scopes["kb_per_scope"] <= bar else "NO"]]
    baseline = scopes.get("in_process")
    if baseline is not None and "error" not in baseline:
        rows.append(["one runtime in-process", f"{baseline['scopes']:,}", f"{baseline['seconds']:.0f}",
                     f"{baseline['scopes'] / baseline['seconds']:,.0f}",
                     f"{baseline['rss_kb_before'] / 1024:,.0f}",
                     f"{baseline['rss_kb_after'] / 1024:,.0f}", f"{baseline['kb_per_scope']:.1f}",
                     "yes" if baseline["kb_per_scope"] <= bar else "NO"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 memories, 40 queries")
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    parser.add_argument("--memories", type=int, default=300)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ttl", type=float, default=6.0, help="lease seconds (failover waits about this)")
    parser.add_argument("--scopes", type=int, default=0,
                        help="also store this many users of one memory through four shards (bar: 100,000)")
    parser.add_argument("--concurrency", type=int, default=32, help="calls at once for --scopes")
    parser.add_argument("--scope-seconds", type=float, default=900.0, help="stop storing scopes after this")
    parser.add_argument("--baseline-scopes", type=int, default=None,
                        help="scopes in one in-process runtime beside --scopes (default: as many; 0: none)")
    parser.add_argument("--baseline-child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_child:  # the child process of the in-process baseline
        trio.run(in_process_scopes, args)
        return
    if args.baseline_scopes is None:
        args.baseline_scopes = args.scopes
    if args.quick:
        args.memories, args.queries = 60, 40
    report = trio.run(run, args)
    rows = []
    for call, figures in report["calls"].items():
        mine, theirs = figures["in_process"], figures["ray"]
        difference = figures["p50_difference_ms"]
        rows.append([call, fmt_ms(mine["p50"]), fmt_ms(mine["p99"]), fmt_ms(theirs["p50"]),
                     fmt_ms(theirs["p99"]), fmt_ms(difference), "yes" if difference <= 3.0 else "NO"])
    print(table(["call", "in-process p50 ms", "p99", "Ray p50 ms", "p99", "p50 difference ms", "within 3 ms"],
                rows))
    over = report["failover"]
    if "seconds_to_serve_again" in over:
        print(f"\nnode lost -> {over['shard']} serving again: {over['seconds_to_serve_again']:.1f} s "
              f"(lease ttl {report['ttl']:g} s); scope intact: {over['intact']}")
    else:
        print(f"\nfailover not measured: {over['error']}")
    scopes = report["many_scopes"]
    if scopes is not None:
        print(f"\nscopes of one memory each (bar {scopes['bar_kb_per_scope']:.1f} KB a scope):")
        headers = ["where", "scopes", "s", "per s", "RSS before MB", "after MB", "KB a scope", "within bar"]
        print(table(headers, scope_rows(scopes)))
        baseline = scopes.get("in_process")
        if baseline is not None and "error" in baseline:
            print(f"in one runtime in-process: {baseline['error']}")
        print(f"found again through Ray: {scopes['found_again']}")
    print(f"wrote {write_results('ray', report)}")


if __name__ == "__main__":
    main()
