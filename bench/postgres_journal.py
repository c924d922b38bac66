"""The postgres journal against the file journal: journaled commands/s and
commits per group-commit round under concurrent writers (16, and 2: a round of
at most 4 actors is synced actor by actor, the kernel's path for few), in the
same run.

Run: python bench/postgres_journal.py [--repeats N] [--seconds S] [--writers 2,16] [--dsn DSN]

Without ``--dsn`` it starts a PostgreSQL server of its own as the tests do
(tests/postgres_server.py: Debian's package, initdb into a temporary folder,
127.0.0.1, ``fsync = on``, the default ``synchronous_commit = on``), so both
backends write to the same disk. Each writer is a task asking its own actor of
the ``counter`` kind (mnemex.testing) for ``Add`` after ``Add`` (each one
journaled and answered only once durable: fsync ``batch``, the default),
through ``mnemex.open_runtime``; the counters are checked afterwards. Reported
per backend: commands/s, group-commit rounds, and per round the journals synced
(files) or the COMMITs made (postgres: ``PostgresStorage.commits``). Figures
are medians of ``--repeats`` runs. Prints a table and writes
bench/results/postgres_journal.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

# bench/ goes last on the path (its http.py would hide the standard library's http); the
# shared helpers come from bench/_common.py, the server from tests/postgres_server.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))
sys.path.append(str(_BENCH.parent / "tests"))

from _common import fmt_num, machine, table, write_results  # noqa: E402
from postgres_server import start_server  # noqa: E402

import mnemex  # noqa: E402
from mnemex.persistence import Storage  # noqa: E402
from mnemex.persistence.postgres import PostgresStorage  # noqa: E402
from mnemex.testing import Add, Get, counter_kind  # noqa: E402


async def run_once(storage: Storage, folder: Path, seconds: float, writers: int) -> dict[str, Any]:
    config = mnemex.Config(data_dir=str(folder), embedder="hashing")
    async with mnemex.open_runtime(config, kinds=[counter_kind()], storage=storage) as rt:
        refs = [rt.ref("counter", f"w{n}") for n in range(writers)]
        for ref in refs:
            await ref.ask(Get())  # loaded before the clock starts
        health0 = rt._kernel.journal_health()
        commits0 = storage.commits if isinstance(storage, PostgresStorage) else 0
        sent = [0] * writers
        deadline = time.perf_counter() + seconds

        async def writer(n: int) -> None:
            while time.perf_counter() < deadline:
                await refs[n].ask(Add(1))
                sent[n] += 1

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for n in range(writers):
                nursery.start_soon(writer, n)
        elapsed = time.perf_counter() - started
        health = rt._kernel.journal_health()
        commits = (storage.commits - commits0) if isinstance(storage, PostgresStorage) else None
        for n, ref in enumerate(refs):
            total = (await ref.ask(Get()))[0]
            if total < sent[n]:
                raise AssertionError(f"writer {n}: {sent[n]} adds acknowledged, the counter holds {total}")
    rounds = health["fsync_rounds"] - health0["fsync_rounds"]
    return {"commands": sum(sent), "seconds": elapsed, "rate": sum(sent) / elapsed, "rounds": rounds,
            "journals_per_round": (health["fsyncs"] - health0["fsyncs"]) / rounds,
            "commits": commits, "commits_per_round": commits / rounds if commits is not None else None,
            "commands_per_round": sum(sent) / rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--writers", default="2,16", help="comma-separated writer counts (default 2,16)")
    parser.add_argument("--dsn", help="an existing database (default: start a server of our own)")
    args = parser.parse_args()
    server = None
    dsn = args.dsn
    if dsn is None:
        started = start_server()
        if isinstance(started, str):
            raise SystemExit(f"no PostgreSQL server: {started}")
        server, dsn = started, started.dsn
    counts = [int(part) for part in args.writers.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {f"{backend}/{n}": [] for n in counts
                                             for backend in ("files", "postgres")}
    try:
        for repeat in range(args.repeats):
            for n in counts:
                for backend in ("files", "postgres"):  # interleaved: load changes hit both alike
                    with tempfile.TemporaryDirectory(prefix="mnemex-bench-", dir=Path.cwd()) as folder:
                        storage: Storage
                        if backend == "files":
                            storage = mnemex.persistence.DataDir(Path(folder) / "data")
                        else:
                            storage = PostgresStorage(dsn, snapshots_dir=Path(folder) / "snapshots",
                                                      schema=f"bench_{repeat}_{n}")
                        runs[f"{backend}/{n}"].append(
                            trio.run(run_once, storage, Path(folder) / "data", args.seconds, n))
    finally:
        if server is not None:
            server.stop()
    fields = ("rate", "rounds", "journals_per_round", "commands_per_round")
    summary: dict[str, dict[str, Any]] = {}
    for name, found in runs.items():
        summary[name] = {field: statistics.median(run[field] for run in found) for field in fields}
        if name.startswith("postgres"):
            summary[name]["commits_per_round"] = statistics.median(run["commits_per_round"] for run in found)
    rows = [[name.split("/")[0], name.split("/")[1], fmt_num(values["rate"]), fmt_num(values["rounds"]),
             fmt_num(values["commands_per_round"], 1), fmt_num(values["journals_per_round"], 1),
             fmt_num(values["commits_per_round"], 2) if "commits_per_round" in values else "-"]
            for name, values in summary.items()]
    print(f"fsync batch, medians of {args.repeats} runs of {args.seconds} s")
    print(table(["backend", "writers", "commands/s", "rounds", "commands/round", "journals/round",
                 "COMMITs/round"], rows))
    ratios = {n: summary[f"postgres/{n}"]["rate"] / summary[f"files/{n}"]["rate"] for n in counts}
    for n, ratio in ratios.items():
        print(f"{n} writers: postgres / files throughput {ratio:.2f}")
    path = write_results("postgres_journal", {"machine": machine(), "runs": runs, "summary": summary,
                                              "postgres_over_files": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
