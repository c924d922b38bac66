"""Graph helper processes (mnemex.models.graph_helpers): the graph a helper builds is
the one a thread builds; a helper that dies, answers an error or cannot start leaves
the build to the thread; a stopped build ends at once with no graph; idle helpers
are reused, then exit on their own; a runtime builds its scopes' graphs in them."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import trio

import mnemex
import mnemex.runtime
from mnemex.index import BUILD_BLOCK, GraphBuild, VectorIndex
from mnemex.models.graph_helpers import GraphHelpers

DIM = 16


def unit_vectors(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@pytest.fixture
def helpers() -> Iterator[GraphHelpers]:
    made = GraphHelpers()
    yield made
    made.close()


def grown_index(builder: GraphHelpers | None, *, replace: bool = True) -> VectorIndex:
    """An index taken through a fresh build over more than two blocks, removals, a
    replaced vector (``replace``) and a catch-up, each build planned and adopted as an
    actor does."""
    vectors = unit_vectors(2 * BUILD_BLOCK + 1000)
    index = VectorIndex(DIM, hnsw_threshold=1000, auto_build=False, defer_inserts=True, builder=builder)
    first = 2 * BUILD_BLOCK - 500
    index.add_many(np.arange(first), vectors[:first])
    assert index.adopt(index.plan_graph().run())
    for doc_id in (3, 70, 9000):
        index.remove(doc_id)
    index.add_many(np.arange(first, len(vectors)), vectors[first:])
    if replace:
        index.update(5, unit_vectors(1, seed=9)[0])  # replaced: a key the graph holds
    assert index.adopt(index.plan_graph().run())
    assert index.mode == "hnsw"
    return index


def searches(index: VectorIndex) -> list[list[tuple[int, float]]]:
    return [index.search(query, 10) for query in unit_vectors(60, seed=4)]


def test_a_helper_builds_the_graph_a_thread_builds(helpers: GraphHelpers) -> None:
    in_thread, in_helper = grown_index(None, replace=False), grown_index(helpers, replace=False)
    assert (helpers.jobs, helpers.failures) == (2, 0)  # both builds went to the helper
    assert helpers.peak_bytes > 0
    assert bytes(in_helper._graph.save()) == bytes(in_thread._graph.save())  # the very same graph
    assert searches(in_helper) == searches(in_thread)


def test_a_vector_replaced_in_a_helper_gives_the_same_hits(helpers: GraphHelpers) -> None:
    # (a graph copied in memory and one loaded from its file put a replaced key's new
    # node apart differently: the files differ in a few hundred bytes, the hits do not)
    in_thread, in_helper = grown_index(None), grown_index(helpers)
    assert (helpers.jobs, helpers.failures) == (2, 0)
    assert searches(in_helper) == searches(in_thread)
    assert len(in_helper._graph) == len(in_thread._graph)


def test_an_idle_helper_takes_the_next_job_then_exits_on_its_own() -> None:
    helpers = GraphHelpers(idle=60.0, idle_exit=3.0)
    try:
        grown = grown_index(helpers)
        assert helpers.jobs == 2 and len(helpers._idle) == 1  # the second job went to the same helper
        process = helpers._idle[0].process
        process.wait(timeout=30)  # no job for a few seconds: it exits by itself
        assert process.returncode == 0
        index = VectorIndex(DIM, hnsw_threshold=100, auto_build=False, builder=helpers)
        index.add_many(np.arange(500), unit_vectors(500, seed=2))
        assert index.adopt(index.plan_graph().run())
        assert (helpers.jobs, helpers.failures) == (3, 0)  # a new helper took it
        assert helpers._idle[0].process is not process
        assert searches(grown) == searches(grown_index(None))
    finally:
        helpers.close()


def test_a_helper_that_dies_mid_build_leaves_the_graph_to_the_thread(
        helpers: GraphHelpers, caplog: pytest.LogCaptureFixture) -> None:
    index = VectorIndex(DIM, hnsw_threshold=100, auto_build=False, builder=helpers)
    index.add_many(np.arange(300), unit_vectors(300, seed=3))
    assert index.adopt(index.plan_graph().run())  # a helper now waits idle
    victim = helpers._idle[0].process

    vectors = unit_vectors(2 * BUILD_BLOCK, seed=5)

    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for at in range(0, len(vectors), BUILD_BLOCK):
            yield np.arange(at, at + BUILD_BLOCK), vectors[at : at + BUILD_BLOCK]
            os.kill(victim.pid, signal.SIGKILL)  # after the first block

    with caplog.at_level(logging.WARNING, logger="mnemex.models"):
        made = helpers.build(index._params, len(vectors), blocks(), base=None, started=lambda stop: None)
    assert made is None
    assert helpers.failures == 1 and "a graph helper failed" in caplog.text
    assert victim.poll() is not None and not helpers._idle
    # through an index: the thread builds it, and the next job gets a new helper
    other = grown_index(helpers)
    assert helpers.failures == 1
    assert searches(other) == searches(grown_index(None))


def test_a_helper_answering_an_error_leaves_the_graph_to_the_thread(
        helpers: GraphHelpers, caplog: pytest.LogCaptureFixture) -> None:
    def damaged(path: str) -> None:
        Path(path).write_bytes(b"no graph here")  # a live graph whose file is no graph at all

    vectors = unit_vectors(100)
    with caplog.at_level(logging.WARNING, logger="mnemex.models"):
        made = helpers.build(VectorIndex(DIM)._params, 100, [(np.arange(100), vectors)], base=damaged,
                             started=lambda stop: None)
    assert made is None and helpers.failures == 1
    assert "a graph helper failed" in caplog.text and not helpers._idle  # it exited after its answer
    assert helpers.build(VectorIndex(DIM)._params, 100, [(np.arange(100), vectors)], base=None,
                         started=lambda stop: None) is not None


@pytest.mark.parametrize("python", ["/nonexistent/python3", "/bin/false"])
def test_where_no_helper_can_start_or_serve_graphs_are_built_in_threads(
        caplog: pytest.LogCaptureFixture, python: str) -> None:
    helpers = GraphHelpers(python=python)
    with caplog.at_level(logging.WARNING, logger="mnemex.models"):
        index = grown_index(helpers)
        again = grown_index(helpers)
    # two failures before any answer, then no helper is tried (nor a word said) for a while
    assert helpers.unavailable is not None and helpers.failures == 2
    assert len(caplog.records) == 2 and "graphs are built in threads for 300 s" in caplog.records[1].message
    assert searches(index) == searches(again) == searches(grown_index(None))
    helpers.close()


def test_helpers_are_tried_again_once_a_while_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    import mnemex.models.graph_helpers as module

    helpers = GraphHelpers(python="/bin/false")
    grown_index(helpers)
    assert helpers.unavailable is not None
    monkeypatch.setattr(module, "RETRY", 0.0)  # the while has passed...
    helpers._retry_at = 0.0
    helpers.python = module.sys.executable  # ...and the helpers' Python is mended
    grown_index(helpers)
    assert helpers.unavailable is None and helpers.failures == 2 and helpers.jobs == 4
    helpers.close()


def test_a_stopped_build_ends_at_once_with_no_graph(helpers: GraphHelpers,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((60_000, 64)).astype(np.float32)  # seconds to build
    index = VectorIndex(64, hnsw_threshold=100, auto_build=False, builder=helpers)
    index.add_many(np.arange(len(vectors)), vectors)
    build = index.plan_graph()
    done: list[GraphBuild] = []
    runner = threading.Thread(target=lambda: done.append(build.run()))
    with caplog.at_level(logging.WARNING, logger="mnemex.models"):
        runner.start()
        deadline = time.monotonic() + 30
        while build._stop_builder is None and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)  # (a real process: until its job is under way)
        assert build._stop_builder is not None
        stopped_at = time.monotonic()
        build.stop()
        runner.join(timeout=30)
    assert not runner.is_alive() and time.monotonic() - stopped_at < 5
    assert done[0].graph is None and not index.adopt(build)
    assert "a graph helper failed" not in caplog.text  # a stop is not a failure to report
    assert index.mode == "exact"


def test_a_closed_set_of_helpers_lets_its_idle_ones_go_and_takes_no_job() -> None:
    helpers = GraphHelpers()
    index = VectorIndex(DIM, hnsw_threshold=100, auto_build=False, builder=helpers)
    index.add_many(np.arange(300), unit_vectors(300))
    assert index.adopt(index.plan_graph().run())
    process = helpers._idle[0].process
    helpers.close()
    assert process.poll() is not None and not helpers._idle
    assert helpers.build(index._params, 1, [(np.arange(1), unit_vectors(1))], base=None,
                         started=lambda stop: None) is None


class Recording(GraphHelpers):
    made: ClassVar[list[Recording]] = []

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        Recording.made.append(self)


@pytest.mark.parametrize("helper", [True, False])
def test_a_runtime_builds_its_scopes_graphs_in_helpers_unless_told_not_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helper: bool) -> None:
    monkeypatch.setattr(mnemex.runtime, "GraphHelpers", Recording)
    Recording.made.clear()
    config = mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing", hnsw_threshold=300,
                           hnsw_helper=helper)

    async def main() -> None:
        async with mnemex.open_runtime(config) as rt:
            scope = rt.scope(user_id="u", app_name="a")
            await scope.remember_many([f"memory {i} of tea and {i * 7 % 13} violins" for i in range(400)])
            with trio.fail_after(60):
                while (stats := await scope.stats()).vector_mode != "hnsw" or stats.graph_pending:
                    await trio.sleep(0.01)
            hits = await scope.search("violins and tea", mode="vector", top_k=5)
            assert len(hits.hits) == 5

    trio.run(main)
    if helper:
        (made,) = Recording.made
        assert made.jobs >= 1 and made.failures == 0
        assert made._closed and not made._idle  # let go with the runtime
    else:
        assert Recording.made == []


def test_a_catch_up_of_a_graph_past_the_builders_limit_stays_in_the_thread(
        helpers: GraphHelpers, monkeypatch: pytest.MonkeyPatch) -> None:
    import mnemex.index.vector as vector_module

    # (usearch's save and load of a large live graph would hold the GIL too long)
    monkeypatch.setattr(vector_module, "_BUILDER_BASE_MAX", BUILD_BLOCK)  # the first graph holds more
    index = grown_index(helpers, replace=False)
    assert (helpers.jobs, helpers.failures) == (1, 0)  # the fresh build only
    assert bytes(index._graph.save()) == bytes(grown_index(None, replace=False)._graph.save())


def test_a_stop_once_the_job_is_over_leaves_the_helper_to_its_next_job(helpers: GraphHelpers) -> None:
    stops: list[Any] = []
    vectors = unit_vectors(300)
    made = helpers.build(VectorIndex(DIM)._params, 300, [(np.arange(300), vectors)], base=None,
                         started=stops.append)
    assert made is not None and stops[-1] is None
    stops[0]()  # a stop that comes late (it read the build's stop function before the end)
    waiting = helpers._idle[0].process
    assert waiting.poll() is None
    assert helpers.build(VectorIndex(DIM)._params, 300, [(np.arange(300), vectors)], base=None,
                         started=stops.append) is not None
    assert helpers.failures == 0 and helpers._idle[0].process is waiting


def test_a_superseded_catch_up_is_stopped_and_the_newer_one_adopted(
        helpers: GraphHelpers, caplog: pytest.LogCaptureFixture) -> None:
    vectors = unit_vectors(3000)
    index = VectorIndex(DIM, hnsw_threshold=100, auto_build=False, defer_inserts=True, builder=helpers)
    index.add_many(np.arange(1000), vectors[:1000])
    assert index.adopt(index.plan_graph().run())
    index.add_many(np.arange(1000, 3000), vectors[1000:])
    stale, newer = index.plan_graph(), index.plan_graph()
    with caplog.at_level(logging.WARNING, logger="mnemex.models"):
        assert stale.run().graph is None  # stopped at its first block: not built for nothing
    assert index.adopt(newer.run()) and "failed" not in caplog.text
    assert {doc for doc, _ in index.search(vectors[2500], 1)} == {2500}


def test_no_more_helpers_run_at_once_than_allowed() -> None:
    helpers = GraphHelpers(most=1)
    sending = helpers._send
    now, most = [0], [0]
    lock = threading.Lock()

    def counted(*args: Any, **kwargs: Any) -> None:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            sending(*args, **kwargs)
        finally:
            with lock:
                now[0] -= 1

    helpers._send = counted  # type: ignore[method-assign]
    built: list[VectorIndex] = []
    threads = [threading.Thread(target=lambda: built.append(grown_index(helpers, replace=False)))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    helpers.close()
    assert len(built) == 3 and helpers.jobs == 6 and helpers.failures == 0
    assert most[0] == 1


def test_the_graph_files_of_a_process_killed_mid_build_are_swept(
        helpers: GraphHelpers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = tmp_path / "mnemex-graphs-abc"  # a folder whose process is gone: unlocked
    left.mkdir()
    (left / "graph-1.usearch").write_bytes(b"x" * 1000)
    alive = tmp_path / "mnemex-graphs-def"  # one a live process holds (of any pid namespace)
    alive.mkdir()
    holder = os.open(alive, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        grown_index(helpers, replace=False)
        assert not left.exists() and alive.exists()
        ours = [folder for folder in tmp_path.glob("mnemex-graphs-*") if folder != alive]
        assert len(ours) == 1 and list(ours[0].iterdir()) == []  # each job's files gone
        other = GraphHelpers()  # another runtime of this process: ours is held, not swept
        try:
            grown_index(other, replace=False)
            assert ours[0].exists()
        finally:
            other.close()
        helpers.close()
        assert not ours[0].exists()
    finally:
        os.close(holder)


SIGPIPE_CHILD = """
import signal, threading
import numpy as np
from mnemex.index import BUILD_BLOCK, VectorIndex
from mnemex.models.graph_helpers import GraphHelpers

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as a CLI that wants `| head` to work sets it
helpers = GraphHelpers()
vectors = np.random.default_rng(3).standard_normal((40_000, 64)).astype(np.float32)
first = threading.Event()

def blocks():
    for at in range(0, len(vectors), BUILD_BLOCK):
        yield np.arange(at, min(at + BUILD_BLOCK, len(vectors))), vectors[at : at + BUILD_BLOCK]
        if at == 0:
            first.set()
            threading.Event().wait(0.5)  # the stop lands while blocks are still to be written

stops, made = [], []
runner = threading.Thread(target=lambda: made.append(helpers.build(
    VectorIndex(64)._params, len(vectors), blocks(), base=None, started=stops.append)))
runner.start()
first.wait(60)
stops[0]()
runner.join(60)
print("alive", made == [None], flush=True)
helpers.close()
"""


def test_a_host_with_sigpipe_at_its_default_survives_a_stopped_build() -> None:
    import subprocess
    import sys

    from checkout import python_env

    done = subprocess.run([sys.executable, "-c", SIGPIPE_CHILD], capture_output=True, text=True, timeout=120,
                          env=python_env(), check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["alive", "True"]


def test_a_built_graph_waits_in_its_file_until_adopted_and_no_file_outlives_its_build(
        helpers: GraphHelpers) -> None:
    import gc

    vectors = unit_vectors(3000)
    index = VectorIndex(DIM, hnsw_threshold=100, auto_build=False, defer_inserts=True, builder=helpers)
    index.add_many(np.arange(2000), vectors[:2000])
    first = index.plan_graph().run()
    assert first.graph is None and first.built is not None  # not in memory yet: in its file
    path = Path(first.built.path)  # type: ignore[attr-defined]
    assert path.exists() and index.adopt(first) and not path.exists()
    index.add_many(np.arange(2000, 3000), vectors[2000:])
    stale = index.plan_graph().run()
    stale_path = Path(stale.built.path)  # type: ignore[attr-defined]
    newer = index.plan_graph().run()
    assert not index.adopt(stale) and not stale_path.exists()  # superseded: its file goes at once
    never = Path(newer.built.path)  # type: ignore[attr-defined]
    del newer
    gc.collect()
    assert not never.exists()  # a build let go unadopted takes its file with it
    assert index.mode == "hnsw" and {d for d, _ in index.search(vectors[2500], 1)} == {2500}  # exact: pending


@pytest.mark.parametrize("damage", ["header", "body"])
def test_a_built_graph_that_cannot_be_loaded_is_not_adopted_and_a_graph_is_wanted_again(
        helpers: GraphHelpers, damage: str) -> None:
    vectors = unit_vectors(3500)
    index = VectorIndex(DIM, hnsw_threshold=100, auto_build=False, defer_inserts=True, builder=helpers)
    index.add_many(np.arange(2000), vectors[:2000])
    assert index.adopt(index.plan_graph().run())
    index.add_many(np.arange(2000, 3500), vectors[2000:])  # (more than catch_up_min)
    build = index.plan_graph().run()
    path = Path(build.built.path)  # type: ignore[attr-defined]
    whole = path.read_bytes()
    path.write_bytes(b"damaged" if damage == "header" else whole[: len(whole) // 2])
    assert not index.adopt(build) and not path.exists()
    # a header that does not read is seen before the live graph is let go: nothing changes;
    # a body that does not load is seen only as it loads: the index is exact meanwhile
    assert index.mode == ("hnsw" if damage == "header" else "exact") and index.wants_graph
    assert {d for d, _ in index.search(vectors[2500], 1)} == {2500}
    assert helpers.failures == 1  # counted as a helper's failure (two in a row: helpers rest)
    assert index.adopt(index.plan_graph().run()) and index.mode == "hnsw" and not index.wants_graph
    assert {d for d, _ in index.search(vectors[2500], 1)} == {2500}


def test_a_graph_folder_a_cleaner_removed_is_made_again(helpers: GraphHelpers) -> None:
    import shutil

    grown_index(helpers, replace=False)
    assert helpers._folder is not None
    shutil.rmtree(helpers._folder)  # (systemd-tmpfiles, or an operator cleaning /tmp)
    grown_index(helpers, replace=False)
    assert (helpers.jobs, helpers.failures, helpers.unavailable) == (4, 0, None)


FORK_CHILD = """
import os, signal, sys, threading, time
import numpy as np
from mnemex.index import BUILD_BLOCK, VectorIndex
from mnemex.models.graph_helpers import GraphHelpers

signal.signal(signal.SIGPIPE, signal.SIG_DFL)
# a helper that dies before its first answer, with the job's first line written: the host lives on
def late_blocks():
    time.sleep(0.5)  # (the helper is gone by the first block)
    yield np.arange(BUILD_BLOCK), np.ones((BUILD_BLOCK, 8), np.float32)

dead = GraphHelpers(python="/bin/true")
assert dead.build(VectorIndex(8)._params, BUILD_BLOCK, late_blocks(), base=None,
                  started=lambda stop: None) is None
dead.close()
print("alive", flush=True)

helpers = GraphHelpers()
index = VectorIndex(64, hnsw_threshold=100, auto_build=False, builder=helpers)
index.add_many(np.arange(2000), np.random.default_rng(1).standard_normal((2000, 64)).astype(np.float32))
built = index.plan_graph().run()
# a child forked (and ending normally, its atexit run) leaves the parent's graph file be
child = os.fork()
if child == 0:
    sys.exit(0)
os.waitpid(child, 0)
print("adopted", index.adopt(built), flush=True)

# a child forked while a build's thread writes to its helper does not hang in the fork hook
more = np.random.default_rng(2).standard_normal((58_000, 64)).astype(np.float32)
index.add_many(np.arange(2000, 60_000), more)
build = index.plan_graph()
runner = threading.Thread(target=build.run)
runner.start()
while build._stop_builder is None:
    time.sleep(0.01)
time.sleep(1.0)  # (the vectors sent: its thread waits for the helper's answer)
child = os.fork()
if child == 0:
    os._exit(0)
deadline = time.monotonic() + 10
while time.monotonic() < deadline and os.waitpid(child, os.WNOHANG) == (0, 0):
    time.sleep(0.02)
print("forked", time.monotonic() < deadline, flush=True)
build.stop()
runner.join(60)
helpers.close()
"""


def test_forks_and_dead_helpers_leave_the_host_and_its_graph_files_alone() -> None:
    import subprocess
    import sys

    from checkout import python_env

    done = subprocess.run([sys.executable, "-c", FORK_CHILD], capture_output=True, text=True, timeout=180,
                          env=python_env(), check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["alive", "adopted", "True", "forked", "True"]
