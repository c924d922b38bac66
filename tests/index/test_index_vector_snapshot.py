"""A snapshot's view of a VectorIndex: what it writes is the index as it was when the
view was taken, however the index changes meanwhile, with no copy of the vectors;
the graph saved by hnswlib loads back only onto the vectors it was saved from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.index import VectorIndex
from mnemex.index.vector import VectorsView, read_vectors_file

DIM = 16


def unit(rng: np.random.Generator, count: int) -> np.ndarray:
    rows = rng.standard_normal((count, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def written(view: VectorsView) -> dict[int, np.ndarray]:
    ids, rows = read_vectors_file(b"".join(view.vector_chunks()))
    assert np.array_equal(ids, view.doc_ids)
    return {int(doc): row.copy() for doc, row in zip(ids, rows, strict=True)}


def state(index: VectorIndex) -> dict[int, np.ndarray]:
    return dict(index.items())


def save(view: VectorsView, folder: Path) -> tuple[bytes, str, bytes]:
    vectors = b"".join(view.vector_chunks())
    path = str(folder / "graph.bin")
    view.write_graph(path)
    return vectors, path, b"".join(view.meta_chunks())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.lists(st.tuples(st.sampled_from(["add", "remove", "update"]),
                                                                  st.integers(0, 59)), max_size=40))
def test_a_view_writes_the_index_as_it_was_whatever_changes_meanwhile(seed: int,
                                                                       steps: list[tuple[str, int]]) -> None:
    rng = np.random.default_rng(seed)
    index = VectorIndex(DIM, hnsw_threshold=10**6)
    index.add_many(list(range(0, 60, 2)), unit(rng, 30))
    index.remove(4)  # a free row before the view: it may be reused
    before = state(index)
    view = index.snapshot_view()
    for op, doc in steps:
        if op == "add" and doc not in index:
            index.add(doc, unit(rng, 1)[0])
        elif op == "remove" and doc in index:
            index.remove(doc)
        elif op == "update" and doc in index:
            index.update(doc, unit(rng, 1)[0])
        # searches see the live index, exact as ever
        query = unit(rng, 1)[0]
        assert index.search(query, 5) == index.exact_search(query, 5)
    live = state(index)
    assert written(view).keys() == before.keys()
    assert all(np.array_equal(written(view)[doc], row) for doc, row in before.items())
    view.release()
    index.add_many([1000, 1001], unit(rng, 2))  # rows freed during the view are reused now
    assert {doc: row for doc, row in state(index).items() if doc < 1000}.keys() == live.keys()


def test_rows_freed_while_viewed_are_reused_only_after_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    index = VectorIndex(DIM, hnsw_threshold=10**6)
    index.add_many([1, 2, 3], unit(rng, 3))
    view = index.snapshot_view()
    index.remove(2)
    index.add(4, unit(rng, 1)[0])
    assert index._high == 4  # a fresh row: row 1 is still read by the view
    del view  # a view dropped without release counts as released
    index.remove(4)
    index.add(5, unit(rng, 1)[0])
    assert index._high == 4 and sorted(index.doc_ids()) == [1, 3, 5]


def test_the_graph_saved_during_changes_loads_back_and_removals_wait_for_the_view(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    vectors = unit(rng, 400)
    index = VectorIndex(DIM, hnsw_threshold=100, m=8, ef_construction=50, ef_search=64)
    index.add_many(list(range(400)), vectors)
    assert index.mode == "hnsw"
    index.remove(7)  # a tombstone before the view
    at_view = state(index)
    view = index.snapshot_view()
    # changes while the snapshot is written: none of them touches the graph it saves
    index.remove(3)
    index.update(5, unit(rng, 1)[0])
    index.add(900, unit(rng, 1)[0])
    for doc in (3, 5, 7):
        hits = [d for d, _ in index.search(vectors[doc], 10)]
        assert doc not in hits or doc == 5
        assert 3 not in hits and 7 not in hits
    raw, path, meta = save(view, tmp_path)
    view.release()
    ids, rows = read_vectors_file(raw)
    loaded = VectorIndex.from_snapshot(ids, rows, DIM, graph=path, meta=meta, hnsw_threshold=100, m=8,
                                       ef_construction=50, ef_search=64)
    assert loaded.sidecar_status == "loaded" and loaded.mode == "hnsw"
    assert state(loaded).keys() == at_view.keys() and loaded.tombstones == 1
    assert 7 not in [d for d, _ in loaded.search(vectors[7], 10)]
    for query in unit(rng, 20):
        assert loaded.search(query, 10)[0][0] == max(at_view, key=lambda d: float(at_view[d] @ query))
    # once the view is released, the live graph marks what waited
    index.search(vectors[0], 10)
    assert index._marks_later == [] and index.tombstones >= 2


def test_a_graph_file_that_does_not_match_its_vectors_is_not_loaded(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    index = VectorIndex(DIM, hnsw_threshold=50, m=8, ef_construction=40)
    index.add_many(list(range(120)), unit(rng, 120))
    view = index.snapshot_view()
    raw, path, meta = save(view, tmp_path)
    ids, rows = read_vectors_file(raw)
    params = {"hnsw_threshold": 50, "m": 8, "ef_construction": 40, "auto_build": False}
    assert VectorIndex.from_snapshot(ids, rows, DIM, graph=path, meta=meta, **params).sidecar_status == "loaded"
    other = rows.copy()
    other[5] = other[6]
    stale = VectorIndex.from_snapshot(ids, other, DIM, graph=path, meta=meta, **params)
    assert stale.sidecar_status == "stale" and stale.mode == "exact" and stale.wants_graph
    assert VectorIndex.from_snapshot(ids[:-1], rows[:-1], DIM, graph=path, meta=meta,
                                     **params).sidecar_status == "stale"
    assert VectorIndex.from_snapshot(ids, rows, DIM, graph=path, meta=b"{not json",
                                     **params).sidecar_status == "corrupt"
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00" * 64)
    assert VectorIndex.from_snapshot(ids, rows, DIM, graph=str(garbage), meta=meta,
                                     **params).sidecar_status == "corrupt"
    # without a graph file the index is exact until it builds one
    rebuilt = VectorIndex.from_snapshot(ids, rows, DIM, graph=None, meta=None, hnsw_threshold=50)
    assert rebuilt.sidecar_status == "absent" and rebuilt.mode == "hnsw"


def test_a_vectors_file_is_checked() -> None:
    rng = np.random.default_rng(4)
    index = VectorIndex(DIM)
    index.add_many([3, 1], unit(rng, 2))
    raw = b"".join(index.snapshot_view().vector_chunks())
    ids, rows = read_vectors_file(raw)
    assert ids.tolist() == [3, 1] and np.array_equal(rows, index.vectors([3, 1]))
    for bad in (raw[:-1], b"MNXVEC00" + raw[8:], raw + b"\0"):
        with pytest.raises(ValueError, match="vectors file"):
            read_vectors_file(bad)


def test_a_catch_up_with_a_guard_adds_to_the_live_graph_in_place_between_searches() -> None:
    import threading

    from mnemex.memories.graphlock import TurnLock

    rng = np.random.default_rng(5)
    vectors = unit(rng, 900)
    index = VectorIndex(DIM, hnsw_threshold=300, m=8, ef_construction=40, ef_search=400, auto_build=False,
                        defer_inserts=True, catch_up_min=100, guard=TurnLock(), save_guard=threading.Lock())
    index.add_many(list(range(300)), vectors[:300])
    index.adopt(index.plan_graph().run())
    live_graph = index._graph
    index.add_many(list(range(300, 800)), vectors[300:800])
    assert index.wants_graph and index.pending == 500
    build = index.plan_graph()
    assert build.guard is not None and build.base is live_graph
    worker = threading.Thread(target=build.run)
    worker.start()
    removed = {305, 410, 12}
    for doc in removed:
        index.remove(doc)
    index.add(850, vectors[850])
    live = set(range(800)) - removed | {850}
    while worker.is_alive():  # searches go on while the build adds batch after batch
        query = vectors[int(rng.integers(0, 800))]
        assert {doc for doc, _ in index.search(query, 10)} <= live
    worker.join()
    assert build.graph is live_graph  # in place: no second graph
    assert index.adopt(build) and index._graph is live_graph
    assert index.pending == 1 and 850 in index
    for doc in removed:
        assert doc not in {d for d, _ in index.search(vectors[doc], 10)}
    for doc in (0, 450, 799, 850):
        assert index.search(vectors[doc], 1)[0][0] == doc
    # a snapshot of it loads back
    assert set(index.doc_ids()) == live


@pytest.mark.parametrize(("seconds_per_vector", "sizes"), [
    (1e-6, [32, 64, 128, 256, 512, 512, 40]),  # 32 in 32 us: each hold doubles (at most), to 512 at most
    (1e-3, [32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 4]),  # 32 in 32 ms: the smallest hold
    (1e-4, [32, 64, 100, 100, 100, 100, 4]),  # 100 take 10 ms: the size settles there
])
def test_a_catch_up_in_place_sizes_its_holds_of_the_guard_by_the_clock(
        monkeypatch: pytest.MonkeyPatch, seconds_per_vector: float, sizes: list[int]) -> None:
    import threading

    import mnemex.index.vector as vector_module
    from mnemex.memories.graphlock import TurnLock

    now = [0.0]
    added: list[int] = []
    add = vector_module.add_block

    def timed_add(graph: object, ids: np.ndarray, vectors: np.ndarray, threads: int) -> None:
        add(graph, ids, vectors, threads)
        added.append(len(ids))
        now[0] += seconds_per_vector * len(ids)  # the time the hold took, as the clock reads it

    rng = np.random.default_rng(9)
    vectors = unit(rng, 2000)
    index = VectorIndex(DIM, hnsw_threshold=300, m=8, ef_construction=40, auto_build=False,
                        defer_inserts=True, catch_up_min=100, guard=TurnLock(), save_guard=threading.Lock(),
                        clock=lambda: now[0])
    index.add_many(list(range(300)), vectors[:300])
    index.adopt(index.plan_graph().run())
    index.add_many(list(range(300, 300 + sum(sizes))), vectors[300:300 + sum(sizes)])
    monkeypatch.setattr(vector_module, "add_block", timed_add)
    build = index.plan_graph()
    assert build.run() is build and index.adopt(build)
    assert added == sizes
    assert index.pending == 0 and len(index._graph) == 300 + sum(sizes)
    for doc in (0, 300, 300 + sum(sizes) - 1):
        assert index.search(vectors[doc], 1)[0][0] == doc


def test_turns_are_taken_so_a_busy_builder_never_starves_a_searcher() -> None:
    import threading

    from mnemex.memories.graphlock import TurnLock

    lock = TurnLock()
    order: list[str] = []
    stop = threading.Event()

    def builder() -> None:
        while not stop.is_set():
            with lock:
                order.append("b")
                sum(range(2000))  # a batch of work while holding it

    worker = threading.Thread(target=builder)
    worker.start()
    try:
        for _ in range(30):
            with lock:
                order.append("a")
    finally:
        stop.set()
        worker.join()
    assert order.count("a") == 30
    # once both ask, they take turns: a batch of the builder's between two searches at most
    turns = "".join(order[order.index("a"):])
    between = [len(run) for run in turns.split("a")[1:-1]]
    assert max(between) <= 2, turns


def test_a_snapshot_saved_while_a_catch_up_adds_in_place_loads_back(tmp_path: Path) -> None:
    import threading

    from mnemex.memories.graphlock import TurnLock

    rng = np.random.default_rng(6)
    vectors = unit(rng, 700)
    params = {"hnsw_threshold": 300, "m": 8, "ef_construction": 40, "ef_search": 400, "auto_build": False,
              "defer_inserts": True, "catch_up_min": 100}
    index = VectorIndex(DIM, guard=TurnLock(), save_guard=threading.Lock(), **params)
    index.add_many(list(range(300)), vectors[:300])
    index.adopt(index.plan_graph().run())
    index.add_many(list(range(300, 700)), vectors[300:700])
    build = index.plan_graph()
    worker = threading.Thread(target=build.run)
    worker.start()
    view = index.snapshot_view()  # taken while the build may have added some of the deferred docs
    raw, path, meta = save(view, tmp_path)
    view.release()
    worker.join()
    assert index.adopt(build) and index.pending == 0
    ids, rows = read_vectors_file(raw)
    loaded = VectorIndex.from_snapshot(ids, rows, DIM, graph=path, meta=meta, **params)
    assert loaded.sidecar_status == "loaded" and loaded.pending == 400
    for doc in (0, 299, 300, 699):
        assert loaded.search(vectors[doc], 1)[0][0] == doc
    loaded.adopt(loaded.plan_graph().run())
    assert loaded.pending == 0 and loaded.search(vectors[650], 1)[0][0] == 650
