"""A full disk under a live scope: what a write that cannot be written costs, and
what the searches arriving beside it get.

Run: python bench/failed_write.py [--memories N] [--rounds K] [--quick]

Fills one scope with N memories (hashing embedder, data on disk, fsync=batch),
then makes every journal write fail with ENOSPC (``os.write`` patched in this
process) and, K times, sends a remember and a search at once. Reports the failed
write's latency, the search's latency and how many searches got an error, and the
scope reloads the failures caused (each ``FileStore.recover`` call is counted and
timed). Writes bench/results/failed_write.json.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

# bench/ goes last on the path (its http.py would hide the standard library's http);
# the checkout goes first, before mnemex is imported (else an installed mnemex is
# measured); the shared helpers come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import fmt_ms, latency_summary, machine, table, write_results  # noqa: E402

import mnemex  # noqa: E402
from mnemex.persistence.store import FileStore  # noqa: E402

WORDS = ["tea", "coffee", "hiking", "paint", "lake", "sunrise", "dog", "cat", "paris", "guitar", "charity",
         "race", "kids", "camping", "java", "python", "garden", "bread", "music", "chess"]


def memory_text(i: int) -> str:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6)]
    return f"memory {i}: " + " ".join(words)


class Recoveries:
    """Counts and times every FileStore.recover (a scope load or reload)."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self._real = FileStore.recover

    def install(self) -> None:
        real = self._real

        def recover(store: FileStore) -> Any:
            started = time.perf_counter()
            try:
                return real(store)
            finally:
                self.count += 1
                self.seconds += time.perf_counter() - started

        FileStore.recover = recover  # type: ignore[method-assign]


async def measure(memories: int, rounds: int) -> dict[str, Any]:
    recoveries = Recoveries()
    recoveries.install()
    with tempfile.TemporaryDirectory(prefix="mnemex-failed-write-") as data_dir:
        cfg = mnemex.Config(data_dir=data_dir, embedder="hashing", fsync="batch")
        async with mnemex.open_runtime(cfg) as rt:
            scope = rt.scope(user_id="u", app_name="bench")
            for start in range(0, memories, 1000):
                await scope.remember_many([memory_text(i) for i in range(start, min(memories, start + 1000))])
            await rt.kernel.passivate("scope", ("bench", "u"))  # loads from disk on its next message
            await scope.search("tea garden", top_k=5)
            loads_before, load_seconds = recoveries.count, recoveries.seconds
            real_write = os.write

            def full(fd: int, data: Any) -> int:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            write_ms: list[float] = []
            search_ms: list[float] = []
            search_errors: list[str] = []
            os.write = full  # type: ignore[assignment]
            try:
                for i in range(rounds):
                    outcome: dict[str, Any] = {}

                    async def write(i: int = i, outcome: dict[str, Any] = outcome) -> None:
                        started = time.perf_counter()
                        try:
                            await scope.remember(f"new memory {i} about chess")
                        except mnemex.StorageError:
                            outcome["write"] = "StorageError"
                        write_ms.append((time.perf_counter() - started) * 1000)

                    async def search(outcome: dict[str, Any] = outcome) -> None:
                        started = time.perf_counter()
                        try:
                            await scope.search("chess music", top_k=5)
                        except mnemex.MnemexError as exc:
                            outcome["search"] = f"{type(exc).__name__}: {exc}"
                        search_ms.append((time.perf_counter() - started) * 1000)

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(write)
                        nursery.start_soon(search)
                    assert outcome.get("write") == "StorageError", outcome
                    if "search" in outcome:
                        search_errors.append(outcome["search"])
            finally:
                os.write = real_write
            reloads = recoveries.count - loads_before
            reload_seconds = recoveries.seconds - load_seconds
            await scope.remember("written once the disk has room again")
    return {"memories": memories, "rounds": rounds, "failed_write_ms": latency_summary(write_ms),
            "search_beside_ms": latency_summary(search_ms), "search_errors": search_errors,
            "reloads": reloads, "reload_seconds": round(reload_seconds, 3),
            "first_load_seconds": round(load_seconds, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=20_000, help="memories in the scope")
    parser.add_argument("--rounds", type=int, default=10, help="failed writes, each with a search beside it")
    parser.add_argument("--quick", action="store_true", help="2,000 memories, 5 rounds (smoke run)")
    args = parser.parse_args()
    memories, rounds = (2_000, 5) if args.quick else (args.memories, args.rounds)
    result = trio.run(measure, memories, rounds)
    print(table(["figure", "value"], [
        ("memories in the scope", f"{result['memories']:,}"),
        ("loading it from disk", f"{result['first_load_seconds']:.3f} s"),
        ("failed write, p50", fmt_ms(result["failed_write_ms"]["p50"]) + " ms"),
        ("search beside it, p50", fmt_ms(result["search_beside_ms"]["p50"]) + " ms"),
        ("search beside it, p99", fmt_ms(result["search_beside_ms"]["p99"]) + " ms"),
        ("searches that got an error", f"{len(result['search_errors'])} of {result['rounds']}"),
        ("scope reloads", f"{result['reloads']} ({result['reload_seconds']:.3f} s)"),
    ]))
    print(f"\nwrote {write_results('failed_write', {'machine': machine(), **result})}")


if __name__ == "__main__":
    main()
