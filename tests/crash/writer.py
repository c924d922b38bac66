"""A writer process for the kill -9 tests: acknowledged writes are printed.

python tests/crash/writer.py DATA_DIR FSYNC SENDERS ACTORS SNAPSHOT_EVERY [FSYNC_METHOD]

Each sender task asks Add(i) to actor ``i % ACTORS`` for i = 0, 1, 2, ... and
prints ``sender i`` on stdout (flushed) once the ask returned, i.e. once the
write was acknowledged. The parent kills this process at a random moment.
"""

from __future__ import annotations

import sys

import trio

import mnemex
from mnemex.testing import Add, counter_kind


async def main(data_dir: str, fsync: str, senders: int, actors: int, snapshot_every: int,
               method: str = "auto") -> None:
    cfg = mnemex.Config(data_dir=data_dir, fsync=fsync, snapshot_every=snapshot_every,  # type: ignore[arg-type]
                        fsync_method=method)  # type: ignore[arg-type]
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:

        async def sender(s: int) -> None:
            i = 0
            while True:
                await rt.ask("counter", f"a{i % actors}", Add(i, sender=f"s{s}"))
                sys.stdout.write(f"s{s} {i}\n")
                sys.stdout.flush()
                i += 1

        print("ready", flush=True)
        async with trio.open_nursery() as nursery:
            for s in range(senders):
                nursery.start_soon(sender, s)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
             *sys.argv[6:7])
