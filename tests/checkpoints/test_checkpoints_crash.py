"""A process killed (``os._exit``, no shutdown, no snapshot) right after its puts were
acknowledged: a new runtime reads back every checkpoint and write, across threads,
from the journals alone; then the listing of threads, runs deleted across threads
and copies work on what was recovered."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import trio

import mnemex
from mnemex.lowlevel import Blob

WRITER = textwrap.dedent("""
    import os, sys
    import mnemex
    from mnemex.lowlevel import Blob, ChannelValue, WriteValue

    client = mnemex.Client(mnemex.Config(data_dir=sys.argv[1], embedder="hashing"))
    checkpoints = client.checkpoints()
    for t in range(5):
        parent = None
        for i in range(4):
            checkpoints.put(f"thread-{t}", f"{i:04}", Blob("msgpack", bytes([t, i]) * 50), parent_id=parent,
                            metadata={"run_id": f"run-{i % 2}", "step": i}, versions={"a": i, "b": 0},
                            values=[ChannelValue("a", i, Blob("msgpack", b"A%d" % i))]
                            + ([ChannelValue("b", 0, Blob("msgpack", b"B"))] if i == 0 else []))
            parent = f"{i:04}"
        checkpoints.put_writes(f"thread-{t}", parent, "task", [WriteValue(0, "a", Blob("json", b"1"))])
    print("acknowledged", flush=True)
    os._exit(0)
""")


def test_acknowledged_checkpoints_survive_a_killed_process(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = subprocess.run([sys.executable, "-c", WRITER, str(data)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.stdout.strip() == "acknowledged", done.stderr
    assert not list(data.glob("checkpoints/*/snapshot-*"))  # no shutdown: the journals hold it all

    async def main() -> None:
        async with mnemex.open_runtime(mnemex.Config(data_dir=str(data), embedder="hashing")) as rt:
            checkpoints = rt.checkpoints()
            assert await checkpoints.threads() == [f"thread-{t}" for t in range(5)]
            for t in range(5):
                entries = await checkpoints.list(f"thread-{t}")
                assert [e.checkpoint_id for e in entries] == ["0003", "0002", "0001", "0000"]
                newest = entries[0]
                assert newest.checkpoint == Blob("msgpack", bytes([t, 3]) * 50)
                assert {v.channel: v.value for v in newest.values} == {"a": Blob("msgpack", b"A3"),
                                                                      "b": Blob("msgpack", b"B")}
                assert [(w.task_id, w.channel) for w in newest.writes] == [("task", "a")]
            assert await checkpoints.delete_runs(["run-1"]) == 10
            assert [e.checkpoint_id for e in await checkpoints.list("thread-0")] == ["0002", "0000"]
            await checkpoints.copy_thread("thread-0", "copy")
            assert len(await checkpoints.list(None, limit=100)) == 12
            assert len(await checkpoints.list(None, limit=3)) == 3
            assert await checkpoints.prune(["copy"]) == 1
            assert await checkpoints.list("copy", filter={"step": 2}) != []

    trio.run(main)
