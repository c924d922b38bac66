"""One scope of a million memories: the memory, latency and recovery bars of issue 17.

Run: python bench/million.py [--size 1000000] [--queries 300] [--embedder hashing]

The parent prepares the workload as bench/compare.py does (LoCoMo turns and varied
copies, their vectors, the exact top 10 of every question) and then runs two
children, each a fresh process whose memory is its own:

* **ingest**: ``remember_many`` in batches of 1,000 from two writers through the
  public API (data directory on disk, default config), until the HNSW graph is
  complete; then the steady RSS (after a garbage collection), ``vector`` and
  ``hybrid`` searches (top 10; p50, p99, recall@10 against the exact scan), then
  ``rt.passivate`` of the scope: the snapshot is written and the scope unloaded.
  A thread samples the resident memory every 10 ms, so the peak of each phase is
  reported beside the process's high-water mark (VmHWM).
* **recover**: opens the same data directory and times the first search (the scope
  read back from its snapshot, the journal after it replayed), then the RSS.

Bars (issue 17, one scope of 1,000,000 x 384): steady RSS <= 1.5 GB, peak (snapshot
included) <= 2 GB, vector p50 <= 2 ms with recall@10 vs exact >= 0.95, hybrid p50
<= 10 ms, recovery <= 15 s. Writes bench/results/million[-<size>].json.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import latency_summary, machine, peak_rss_bytes, rss_bytes, write_results  # noqa: E402
from compare import Work, Workload, prepare  # noqa: E402

import mnemex  # noqa: E402

BATCH = 1000
WRITERS = 2
APP, USER = "bench", "million"
MB = 2**20


class Sampler:
    """The resident memory every ``every`` seconds in a thread; the peak per phase."""

    def __init__(self, every: float = 0.01) -> None:
        self.every = every
        self.phase = "start"
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            rss = rss_bytes()
            if rss > self.peaks.get(self.phase, 0):
                self.peaks[self.phase] = rss

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.peaks[phase] = rss_bytes()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {phase: round(peak / MB, 1) for phase, peak in self.peaks.items()}


def _trim() -> None:
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def child_ingest(args: argparse.Namespace) -> dict[str, Any]:
    import trio

    work = Work(Path(args.workspace), Workload(1, args.size), args.embedder)
    # snapshot_min_growth 0: the passivation below writes its snapshot whatever was
    # snapshotted before (its peak is a bar's), not only when the journal is long
    config = mnemex.Config(data_dir=args.data_dir, embedder=args.embedder, snapshot_min_growth=0.0)
    sampler = Sampler()
    out: dict[str, Any] = {"rss_base_mb": rss_bytes() / MB}

    async def main() -> None:
        async with mnemex.open_runtime(config) as rt:
            scope = rt.scope(user_id=USER, app_name=APP)
            texts = work.texts
            count = len(texts)
            feed = iter(range(0, count, BATCH))
            order: list[str] = [""] * count  # each text's memory id
            sampler.enter("ingest")
            started = time.perf_counter()

            async def writer() -> None:
                for start in feed:
                    order[start:start + BATCH] = await scope.remember_many(texts[start:start + BATCH])

            async with trio.open_nursery() as nursery:
                for _ in range(WRITERS):
                    nursery.start_soon(writer)
            acked = time.perf_counter() - started
            sampler.enter("graph")
            stats = await scope.stats()
            while stats.vector_mode != "hnsw" or stats.graph_pending:
                await trio.sleep(0.1)
                stats = await scope.stats()
            built = time.perf_counter() - started
            out.update(count=stats.count, ingest_acked_per_s=count / acked, ingest_s=built,
                       ingest_per_s=count / built)
            # the corpus is the bench's, not the scope's: let it go, as a server lets a
            # request's texts go (the recall below reads the hits' ids; the ids are the
            # scope's own strings)
            del texts
            work.texts, work.origins = [], []
            _trim()
            await trio.sleep(1.0)
            sampler.enter("steady")
            out["steady_rss_mb"] = rss_bytes() / MB
            scope.embedder.embed(work.queries)  # the embedder's word cache, as a warm server has it
            limit = min(args.queries, len(work.queries))
            for mode in ("vector", "hybrid"):
                sampler.enter(mode)
                for query in range(min(10, limit)):
                    await scope.search(work.queries[query], top_k=10, mode=mode, min_score=-1.0)
                samples: list[float] = []
                recalls: list[float] = []
                position = {memory_id: i for i, memory_id in enumerate(order)}
                for query in range(limit):
                    t0 = time.perf_counter()
                    result = await scope.search(work.queries[query], top_k=10, mode=mode, min_score=-1.0)
                    samples.append((time.perf_counter() - t0) * 1000)
                    if mode == "vector":
                        ids = {position[hit.memory.id] for hit in result.hits}
                        recalls.append(min(10, len(ids & work.exact[query])) / 10)
                figures: dict[str, Any] = latency_summary(samples)
                if recalls:
                    figures["exact_recall@10"] = float(np.mean(recalls))
                out[mode] = figures
            out["rss_after_search_mb"] = rss_bytes() / MB
            await rt.flush_touches()  # the searches' access counts, which would load the scope again
            sampler.enter("snapshot")
            started = time.perf_counter()
            await rt.passivate("scope", (APP, USER))
            out["snapshot_s"] = time.perf_counter() - started
            out["live_after_passivate"] = [list(key) for _kind, key in rt.live_keys("scope")]
            out["files_mb"] = {p.name: round(p.stat().st_size / MB, 1)
                               for p in sorted(Path(args.data_dir).rglob("*")) if p.is_file()}
            sampler.enter("passivated")
            await trio.sleep(1.0)
            sampler.enter("closing")

    trio.run(main)
    out["phase_peak_rss_mb"] = sampler.stop()
    out["peak_rss_mb"] = peak_rss_bytes() / MB
    out["disk_mb"] = sum(p.stat().st_size for p in Path(args.data_dir).rglob("*") if p.is_file()) / MB
    return out


def child_recover(args: argparse.Namespace) -> dict[str, Any]:
    import trio

    work = Work(Path(args.workspace), Workload(1, args.size), args.embedder)
    # the first ask waits for the whole recovery, which is what is timed: no 30 s limit
    config = mnemex.Config(data_dir=args.data_dir, embedder=args.embedder, ask_timeout=args.timeout)
    out: dict[str, Any] = {}

    async def main() -> None:
        async with mnemex.open_runtime(config) as rt:
            scope = rt.scope(user_id=USER, app_name=APP)
            started = time.perf_counter()
            stats = await scope.stats()
            out["recovery_s"] = time.perf_counter() - started
            out["count"] = stats.count
            out["vector_mode"] = stats.vector_mode
            result = await scope.search(work.queries[0], top_k=10, mode="vector", min_score=-1.0)
            out["first_search_s"] = time.perf_counter() - started
            out["hits"] = len(result.hits)
            out["graph_pending"] = (await scope.stats()).graph_pending
            _trim()
            out["rss_after_recovery_mb"] = rss_bytes() / MB
            out["peak_rss_recovery_mb"] = peak_rss_bytes() / MB
            # what a restarted server holds once it serves: hybrid searches read every
            # row of a large scope (the coarse pass packs them), which the restore mapped
            samples: list[float] = []
            for query in range(min(args.queries, len(work.queries), 50)):
                t0 = time.perf_counter()
                await scope.search(work.queries[query], top_k=10, mode="hybrid", min_score=-1.0)
                samples.append((time.perf_counter() - t0) * 1000)
            out["hybrid_after_recovery"] = latency_summary(samples)
            _trim()
            out["rss_after_hybrid_mb"] = rss_bytes() / MB

    trio.run(main)
    out["peak_rss_mb"] = peak_rss_bytes() / MB
    return out


def run_child(step: str, args: argparse.Namespace, workspace: Path, data_dir: Path) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        target = Path(handle.name)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", step, "--workspace", str(workspace),
               "--data-dir", str(data_dir), "--result", str(target), "--size", str(args.size),
               "--queries", str(args.queries), "--embedder", args.embedder]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=args.timeout)
        if done.returncode != 0:
            return {"status": "failed", "reason": done.stderr[-2000:]}
        result: dict[str, Any] = orjson.loads(target.read_bytes())
        return {"status": "ok", **result}
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {args.timeout:.0f} s"}
    finally:
        target.unlink(missing_ok=True)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--timeout", type=float, default=3000.0, help="seconds a child may take")
    parser.add_argument("--child", choices=("ingest", "recover"), help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child_ingest(args) if args.child == "ingest" else child_recover(args)
        Path(args.result).write_bytes(orjson.dumps(result))
        return
    workspace = Path(tempfile.mkdtemp(prefix="mnemex-million-"))
    report: dict[str, Any] = machine() | {"size": args.size, "embedder_config": args.embedder}
    try:
        started = time.perf_counter()
        report["workload"] = prepare(workspace, [Workload(1, args.size)], args.embedder)
        print(f"prepared {args.size:,} memories in {time.perf_counter() - started:.0f} s", flush=True)
        data_dir = workspace / "data"
        report["ingest"] = ingest = run_child("ingest", args, workspace, data_dir)
        print("ingest:", orjson.dumps(ingest, option=orjson.OPT_INDENT_2).decode(), flush=True)
        if ingest["status"] == "ok":
            report["recover"] = recover = run_child("recover", args, workspace, data_dir)
            print("recover:", orjson.dumps(recover, option=orjson.OPT_INDENT_2).decode(), flush=True)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    ingest, recover = report["ingest"], report.get("recover", {})
    if ingest["status"] == "ok" and recover.get("status") == "ok":
        bars = [
            ("steady RSS <= 1.5 GB", f"{ingest['steady_rss_mb']:,.0f} MB", ingest["steady_rss_mb"] <= 1536),
            ("peak RSS (snapshot included) <= 2 GB", f"{ingest['peak_rss_mb']:,.0f} MB "
             f"(snapshot phase {ingest['phase_peak_rss_mb'].get('snapshot', 0):,.0f} MB)",
             ingest["peak_rss_mb"] <= 2048),
            ("vector p50 <= 2 ms", f"{ingest['vector']['p50']:.2f} ms", ingest["vector"]["p50"] <= 2),
            ("vector recall@10 vs exact >= 0.95", f"{ingest['vector']['exact_recall@10']:.3f}",
             ingest["vector"]["exact_recall@10"] >= 0.95),
            ("hybrid p50 <= 10 ms", f"{ingest['hybrid']['p50']:.2f} ms", ingest["hybrid"]["p50"] <= 10),
            ("recovery <= 15 s", f"{recover['recovery_s']:.2f} s", recover["recovery_s"] <= 15),
        ]
        report["bars"] = [{"bar": b, "figure": f, "ok": ok} for b, f, ok in bars]
        print(f"\none scope of {args.size:,} memories ({report['workload']['embedder']}):")
        for bar, figure, ok in bars:
            print(f"  {verdict(ok):<5} {bar}: {figure}")
        print(f"  restarted: RSS {recover['rss_after_recovery_mb']:,.0f} MB once recovered (peak "
              f"{recover['peak_rss_recovery_mb']:,.0f} MB), {recover['rss_after_hybrid_mb']:,.0f} MB after "
              f"{recover['hybrid_after_recovery']['n']} hybrid searches (p50 "
              f"{recover['hybrid_after_recovery']['p50']:.1f} ms)")
    name = "million" if args.size == 1_000_000 else f"million-{args.size}"
    path = write_results(name, report)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
