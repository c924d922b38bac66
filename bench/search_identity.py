"""Hybrid search of bench/http.py's scope, this tree against another: the same hits
(memories, order, scores, every signal, found_by) on every query, and the CPU a
search costs in the scope's ranking, without HTTP or the actor, the trees in turns.

Run: python bench/search_identity.py --baseline-tree PATH [--memories 10000]
                                     [--queries 200] [--rounds 5]

The scope is stored once (``mnemex.open_runtime``, hashing embedder, the memories
bench/http.py stores through POST /memory/batch) by this tree in a temporary data
directory; each tree then opens a copy of it in a child process (cwd and PYTHONPATH
set to the tree, checked), runs one search of each query through the scope (its
commands: the query's vector as the ref embeds it), and then ranks those commands
again in the scope (``ScopeMemory._search``, one BLAS thread as ``mnemex serve``
runs, the time of every command fixed so recency is the same) ``--repeat`` times,
giving the hits and the CPU (thread time) per search. Access counts are not
updated (no touches). Exit status 1 when any query's hits differ.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/http.py would shadow the standard library's http: this folder goes last on the
# import path (the shared helpers come from it); mnemex is the tree's own (PYTHONPATH)
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.append(str(_BENCH))

import trio  # noqa: E402
from _common import ROOT, machine, percentile, table, write_results  # noqa: E402

NOW = 2_000_000_000.0
"""The time every compared search runs at (recency depends on it)."""


def bench_http() -> Any:
    """bench/http.py as a module (its name would shadow the standard library's http):
    the memories and queries it searches."""
    spec = importlib.util.spec_from_file_location("bench_http", Path(__file__).parent / "http.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_http"] = module
    spec.loader.exec_module(module)
    return module


async def build(data: Path, memories: int) -> None:
    import random

    import mnemex

    texts, _ = bench_http().texts_and_questions()
    rng = random.Random(7)  # bench/http.py's store_memories
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(data), embedder="hashing")) as rt:
        batch: list[tuple[str, str, dict[str, Any]]] = []
        for i in range(memories):
            content = f"{texts[i % len(texts)]} (note {i}, {rng.randrange(10**6)})"
            batch.append(("bench", "bench0", {"content": content}))
            if len(batch) == 500 or i == memories - 1:  # (app_name, user_id, fields), 500 a batch
                await rt.remember_many(batch)
                batch = []


async def run(data: Path, queries: int, repeat: int, out: Path) -> None:
    import msgspec
    from threadpoolctl import threadpool_limits

    import mnemex
    from mnemex.memories import ref
    from mnemex.memories.behaviour import ScopeMemory

    _, questions = bench_http().texts_and_questions()
    asked = [q.replace('"', "").replace("\\", "") for q in questions[:queries]]  # bench/http.py's
    seen: dict[str, Any] = {"commands": []}
    searched = ScopeMemory._search

    def spy(memory: ScopeMemory, command: Any) -> Any:
        seen["memory"] = memory
        seen["commands"].append(command)
        return searched(memory, command)

    ScopeMemory._search = spy  # type: ignore[method-assign]
    for name in dir(ref):  # no access counts updated: both trees rank the same records
        kind = getattr(ref, name)
        if isinstance(kind, type) and "touch" in vars(kind):
            kind.touch = lambda self, key, hits: None
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(data), embedder="hashing")) as rt:
        scope = rt.scope(user_id="bench0", app_name="bench")
        for query in asked:
            await scope.search(query, 10)
    ScopeMemory._search = searched  # type: ignore[method-assign]
    memory = seen["memory"]
    commands = [msgspec.structs.replace(c, now=NOW) for c in seen["commands"]]
    with threadpool_limits(1, user_api="blas"):
        hits = [[(h.memory.content, h.score, dict(h.scores), tuple(h.found_by))
                 for h in memory._search(c).hits] for c in commands]
        cpu = []
        for _ in range(repeat):
            started = time.thread_time()
            for command in commands:
                memory._search(command)
            cpu.append((time.thread_time() - started) / len(commands) * 1e6)
    out.write_bytes(pickle.dumps({"hits": hits, "cpu_us": cpu, "mnemex": mnemex.__file__}))


def child(tree: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], cwd=tree, env=env, check=True,
                   timeout=1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-tree", type=Path, required=False, default=None,
                        help="the other checkout (its mnemex is imported there)")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5, help="children per tree, in turns (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="passes over the queries in each child")
    parser.add_argument("--child", choices=("build", "run"), help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "build":
        trio.run(build, args.data, args.memories)
        return
    if args.child == "run":
        trio.run(run, args.data, args.queries, args.repeat, args.out)
        return
    if args.baseline_tree is None or not (args.baseline_tree / "mnemex" / "__init__.py").exists():
        sys.exit("--baseline-tree PATH: a checkout with mnemex/__init__.py")
    trees = {"baseline": args.baseline_tree.resolve(), "mnemex": ROOT}
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in trees}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        started = time.perf_counter()
        child(ROOT, "--child", "build", "--data", str(tmp / "data"), "--memories", str(args.memories))
        print(f"stored {args.memories:,} memories in {time.perf_counter() - started:.1f} s", flush=True)
        for round_ in range(1, args.rounds + 1):
            for side, tree in trees.items():
                data = tmp / f"data-{side}-{round_}"
                shutil.copytree(tmp / "data", data)
                out = tmp / f"{side}-{round_}.pickle"
                child(tree, "--child", "run", "--data", str(data), "--out", str(out),
                      "--queries", str(args.queries), "--repeat", str(args.repeat))
                found = pickle.loads(out.read_bytes())
                if not found["mnemex"].startswith(str(tree)):
                    sys.exit(f"{side}: imported {found['mnemex']}, not the tree's own mnemex")
                results[side].append(found)
                shutil.rmtree(data)
                print(f"  round {round_} {side:8} {min(found['cpu_us']):6.0f} us CPU a search", flush=True)
    base, ours = results["baseline"][0]["hits"], results["mnemex"][0]["hits"]
    differing = [i for i, (a, b) in enumerate(zip(base, ours, strict=True)) if a != b]
    cpu = {side: [min(r["cpu_us"]) for r in runs] for side, runs in results.items()}
    print()
    print(table(["tree", "runs", "CPU us a search (median)", "min-max"],
                [[side, len(values), f"{percentile(values, 0.5):,.0f}",
                  f"{min(values):,.0f}-{max(values):,.0f}"] for side, values in cpu.items()]))
    print(f"\nhits of {len(base)} queries: {len(base) - len(differing)} identical, {len(differing)} differ"
          + (f" (first: query {differing[0]})" if differing else ""))
    write_results("search_identity", {"machine": machine(), "memories": args.memories, "queries": len(base),
                                      "differing": differing, "cpu_us": cpu,
                                      "baseline_tree": str(trees["baseline"])})
    if differing:
        sys.exit(1)


if __name__ == "__main__":
    main()
