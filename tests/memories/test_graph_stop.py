"""A graph build under way when the runtime closes is asked to stop and waited for:
the process then exits cleanly (a thread left inside usearch's native code when
the interpreter exits makes the C++ runtime abort the process: exit status 134,
"terminate called without an active exception"). A stopped build gives no graph,
and the index stays as it was."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from checkout import python_env

from mnemex.index import VectorIndex

CHILD = textwrap.dedent("""
    import sys
    import trio
    import mnemex

    async def main() -> None:
        # the last batch starts a fresh build over 20,000 vectors (seconds): under way at the close
        config = mnemex.Config(data_dir=sys.argv[1], embedder="hashing", hnsw_threshold=20_000)
        async with mnemex.open_runtime(config) as rt:
            scope = rt.scope(user_id="u", app_name="a")
            for batch in range(20):
                await scope.remember_many([f"memory {batch} {i} of tea, a lake and {i * 7 % 13} violins"
                                           for i in range(1000)])
            stats = await scope.stats()
            print("building" if stats.graph_pending else "built", flush=True)

    trio.run(main)
    print("exited", flush=True)
""")


def test_a_process_that_closes_its_runtime_during_a_graph_build_exits_cleanly(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "data")], capture_output=True,
                          text=True, timeout=300, env=python_env())
    assert "terminate called" not in done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() in (["building", "exited"], ["built", "exited"])


def test_a_stopped_build_gives_no_graph_and_changes_nothing() -> None:
    rng = np.random.default_rng(7)
    index = VectorIndex(16, hnsw_threshold=10, auto_build=False)
    index.add_many(np.arange(40, dtype=np.int64), rng.normal(size=(40, 16)).astype(np.float32))
    build = index.plan_graph()
    build.stop()
    assert build.run().graph is None
    assert not index.adopt(build)
    assert index.mode == "exact"
    index.build_graph()  # a later plan builds as usual
    assert index.mode == "hnsw"
    index.add_many(np.arange(40, 60, dtype=np.int64), rng.normal(size=(20, 16)).astype(np.float32))
    catch_up = index.plan_graph()
    catch_up.stop()
    assert catch_up.run().graph is None and not index.adopt(catch_up)
    assert index.mode == "hnsw"
    hits = index.search(index.vector(50), top_k=1)
    assert hits[0][0] == 50  # the deferred vectors are still searched
