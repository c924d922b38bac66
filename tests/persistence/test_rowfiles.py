"""Vector rows in an unnamed file, mapped (mnemex.persistence.rowfiles)."""

from __future__ import annotations

import errno
import gc
import os
from pathlib import Path

import numpy as np
import pytest
import trio

import mnemex
from mnemex.index import VectorIndex
from mnemex.persistence import RowFiles
from mnemex.index.vector import read_vectors_file
from mnemex.persistence.rowfiles import FileRows, SnapshotRows

pytestmark = pytest.mark.skipif(not RowFiles.usable(), reason="no shared mappings to let go of here")

DIM = 16


def unit_rows(count: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def rows_files_mapped(folder: Path) -> list[str]:
    """The files under ``folder`` this process maps (an unnamed one shows as deleted)."""
    with open("/proc/self/maps") as maps:
        return sorted({line.split(maxsplit=5)[5].strip() for line in maps
                       if len(line.split(maxsplit=5)) == 6 and str(folder) in line})


def test_rows_grow_in_their_file_without_a_copy(tmp_path: Path) -> None:
    rows = FileRows(str(tmp_path), DIM)
    first = rows.grow(np.zeros((0, DIM), dtype=np.float32), 0, 100)
    assert first is not None and first.shape == (100, DIM) and first.flags.writeable
    first[:] = unit_rows(100, 1)
    second = rows.grow(first, 100, 300)
    assert second is not None and second.shape == (300, DIM)
    np.testing.assert_array_equal(second[:100], first)
    # one file under both: a row written through the old array is the new one's too
    first[7] = 0.5
    assert (second[7] == 0.5).all()
    assert rows.nbytes == 300 * DIM * 4
    assert os.listdir(tmp_path) == []  # unnamed: nothing to see in the folder


def test_rows_from_memory_are_copied_once_into_the_file(tmp_path: Path) -> None:
    rows = FileRows(str(tmp_path), DIM)
    anonymous = unit_rows(50, 2)
    grown = rows.grow(anonymous, 40, 64)
    assert grown is not None
    np.testing.assert_array_equal(grown[:40], anonymous[:40])
    anonymous[0] = 0.0
    assert grown[0].any()  # a copy: the array it came from is not the file


def status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


@pytest.mark.skipif(status_kb("RssFile") is None, reason="no RssFile in /proc/self/status")
def test_settled_rows_leave_the_process_and_read_back_unchanged(tmp_path: Path) -> None:
    rows = FileRows(str(tmp_path), 256)
    count = 64 * 1024  # 64 MB
    array = rows.grow(np.zeros((0, 256), dtype=np.float32), 0, count)
    assert array is not None
    values = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    array[:] = values
    before = status_kb("RssFile")
    assert before is not None and before >= 60_000
    rows.settle(array)
    after = status_kb("RssFile")
    assert after is not None and after < before - 50_000
    np.testing.assert_array_equal(array[count - 1], values)  # (read back from the page cache)
    np.testing.assert_array_equal(array[12_345], values)
    # a range: only its pages go
    array[:].sum()
    full = status_kb("RssFile")
    rows.settle(array, 0, count // 2)
    half = status_kb("RssFile")
    assert full is not None and half is not None and 25_000 < full - half < 40_000


def test_a_settled_range_lets_the_pages_around_it_go_too(tmp_path: Path) -> None:
    # a fault maps more than its page (fault-around, a large folio): after a catch-up read
    # its rows a block at a time, the neighbours stayed, 444 MB of a 1,000,000-row file
    rows = FileRows(str(tmp_path), 256)  # 1 KB rows
    count = 64 * 1024  # 64 MB
    array = rows.grow(np.zeros((0, 256), dtype=np.float32), 0, count)
    assert array is not None
    array[:] = 1.0
    rows.settle(array)
    array[:].sum()  # every page mapped again, as reads bring neighbours in
    full = status_kb("RssFile")
    rows.settle(array, 10_000, 10_016)  # 16 KB of rows, 9.8 MB in: the 2 MB around them go
    around = status_kb("RssFile")
    assert full is not None and around is not None and 1_900 <= full - around <= 4_200
    rows.settle(array, count - 3, count)  # (the last span ends at the file's end)
    last = status_kb("RssFile")
    assert last is not None and 1_900 <= around - last <= 2_200
    assert float(array[10_008, 0]) == 1.0 and float(array[count - 1, 255]) == 1.0


def test_settle_leaves_arrays_of_other_memory_alone(tmp_path: Path) -> None:
    rows = FileRows(str(tmp_path), DIM)
    anonymous = unit_rows(10, 4)
    rows.settle(anonymous)  # (not the file's: nothing happens, nothing breaks)
    np.testing.assert_array_equal(anonymous, unit_rows(10, 4))


def test_a_full_disk_keeps_the_rows_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_room(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_room)
    index = VectorIndex(DIM, hnsw_threshold=10_000, row_files=RowFiles(str(tmp_path), 0))
    vectors = unit_rows(300, 5)
    index.add_many(np.arange(300), vectors)
    assert rows_files_mapped(tmp_path) == []
    assert index.search(vectors[17], 3)[0][0] == 17
    index.add_many(np.arange(300, 700), unit_rows(400, 6))  # (a later growth tries a file again)
    assert index.search(vectors[17], 3)[0][0] == 17


def twin_indexes(tmp_path: Path, threshold: int) -> tuple[VectorIndex, VectorIndex]:
    params = {"hnsw_threshold": threshold, "ef_construction": 64, "ef_search": 64}
    return (VectorIndex(DIM, **params),  # type: ignore[arg-type]
            VectorIndex(DIM, row_files=RowFiles(str(tmp_path), 0), **params))  # type: ignore[arg-type]


@pytest.mark.parametrize("threshold", [10_000, 200], ids=["exact", "graph"])
def test_an_index_with_its_rows_in_a_file_answers_as_one_in_memory(
        tmp_path: Path, threshold: int, monkeypatch: pytest.MonkeyPatch) -> None:
    read = FileRows.read
    reads: list[bool] = []

    def counted(self: FileRows, rows: np.ndarray, which: np.ndarray) -> np.ndarray | None:
        found = read(self, rows, which)
        reads.append(found is not None)
        return found

    monkeypatch.setattr(FileRows, "read", counted)
    compare_twins(*twin_indexes(tmp_path, threshold), tmp_path, reads)
    gc.collect()
    assert rows_files_mapped(tmp_path) == []  # the last array let go: the file goes
    # the rows a search rescores and a gather of vectors are read from the file, not
    # through the mapping
    assert reads and all(reads)


def compare_twins(memory: VectorIndex, filed: VectorIndex, tmp_path: Path, reads: list[bool]) -> None:
    """Batches added and removed alike in both: the same searches, the same snapshot;
    ``reads`` grows by one for each read of rows from the file."""
    queries = unit_rows(20, 99)

    def same() -> None:
        for query in queries:
            assert filed.search(query, 10) == memory.search(query, 10)
            allowed = np.zeros(2_000, dtype=np.bool_)
            allowed[::3] = True
            assert filed.search(query, 5, allowed) == memory.search(query, 5, allowed)
        scores_memory, scores_filed = memory.exact_scores(queries[0]), filed.exact_scores(queries[0])
        assert (scores_filed is None) == (scores_memory is None) == (filed.mode == "hnsw")
        if scores_memory is not None and scores_filed is not None:
            assert scores_filed.search(10) == scores_memory.search(10)
        held = np.array([doc for doc in range(0, next_id, 5) if doc in memory], dtype=np.int64)
        before = len(reads)  # a gather of vectors reads its rows from the file, not through the mapping
        np.testing.assert_array_equal(filed.vectors(held), memory.vectors(held))
        assert len(reads) > before

    next_id = 0
    for batch in range(6):  # growths: rows of capacity doubling past each batch
        vectors = unit_rows(150 + 40 * batch, batch)
        ids = np.arange(next_id, next_id + len(vectors))
        next_id += len(vectors)
        for index in (memory, filed):
            index.add_many(ids, vectors)  # (the graph, past its threshold, built in the add)
        same()
        for index in (memory, filed):
            for doc in range(batch, next_id, 7):
                if doc in index:
                    index.remove(doc)
        same()  # (freed rows are reused by the next batch)
    assert any("(deleted)" in name for name in rows_files_mapped(tmp_path))
    # the rows are the page cache's, not the process's: the scope's budget leaves them out
    assert filed.bytes_per_vector == memory.bytes_per_vector - 4 * DIM
    # a snapshot of it writes the same bytes
    assert b"".join(filed.snapshot_view().vector_chunks()) == b"".join(memory.snapshot_view().vector_chunks())


def test_a_restored_index_moves_its_rows_into_the_file_when_it_grows(tmp_path: Path) -> None:
    vectors = unit_rows(500, 6)
    source = VectorIndex(DIM, hnsw_threshold=10_000)
    source.add_many(np.arange(500), vectors)
    view = source.snapshot_view()
    data = b"".join(view.vector_chunks())
    view.release()
    ids, matrix = read_vectors_file(data)
    restored = VectorIndex.from_snapshot(ids, matrix.copy(), DIM, graph=None, meta=None, rows_in_place=True,
                                         hnsw_threshold=10_000, row_files=RowFiles(str(tmp_path), 0))
    assert rows_files_mapped(tmp_path) == []  # (its rows stay where the restore put them)
    more = unit_rows(100, 7)
    restored.add_many(np.arange(500, 600), more)
    source.add_many(np.arange(500, 600), more)
    assert any("(deleted)" in name for name in rows_files_mapped(tmp_path))
    for query in unit_rows(10, 8):
        assert restored.search(query, 10) == source.search(query, 10)


def restored_in_place(tmp_path: Path, vectors: np.ndarray, **params: object) -> tuple[VectorIndex, SnapshotRows]:
    """An index of ``vectors`` (doc i: row i) snapshotted to a file, then restored with
    its rows in place: the file mapped copy-on-write, as a restore maps a large one."""
    import mmap

    source = VectorIndex(vectors.shape[1], hnsw_threshold=10**7)
    source.add_many(np.arange(len(vectors)), vectors)
    view = source.snapshot_view()
    path = tmp_path / "snapshot-1.vectors2.bin"
    path.write_bytes(b"".join(view.vector_chunks()))
    view.release()
    descriptor = os.open(path, os.O_RDONLY)
    mapped = mmap.mmap(descriptor, 0, access=mmap.ACCESS_COPY)
    ids, matrix = read_vectors_file(memoryview(mapped))
    rows = SnapshotRows(str(path), descriptor, mapped, matrix)
    restored = VectorIndex.from_snapshot(ids, matrix, vectors.shape[1], graph=None, meta=None,
                                         rows_in_place=rows, **{"hnsw_threshold": 10**7, **params})
    return restored, rows


@pytest.mark.skipif(status_kb("RssFile") is None, reason="no RssFile in /proc/self/status")
def test_a_snapshots_rows_in_place_let_pages_read_go_but_never_rows_written(tmp_path: Path) -> None:
    count, dim = 64 * 1024, 256  # 64 MB
    vectors = np.random.default_rng(9).standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index, rows = restored_in_place(tmp_path, vectors)
    array = index._rows
    assert index._row_file is rows and not rows.grows and rows.grow(array, count, 2 * count) is None
    rows.let_go()
    before = status_kb("RssFile")
    assert before is not None
    array.sum()  # every row read through the mapping
    read = status_kb("RssFile")
    assert read is not None and read > before + 50_000
    rows.settle(array)  # (a bulk read's end)
    after = status_kb("RssFile")
    assert after is not None and after < read - 50_000
    # a freed row reused: its page is the process's own from then on
    index.remove(1_000)
    fresh = vectors[:1].copy() * -1.0
    index.add_many(np.array([count]), fresh)
    assert rows.pages_written >= 1
    rows.let_go()
    rows.settle(array, 0, count)
    np.testing.assert_array_equal(index._rows[index._row_of[count]], fresh[0])  # (not the file's row 1,000)
    assert index.search(fresh[0], 1)[0][0] == count
    # a search's few rows are read from the file, but not from a page written
    which = np.array([5, 77, count - 1], dtype=np.int64)
    read_rows = rows.read(array, which)
    assert read_rows is not None
    np.testing.assert_array_equal(read_rows, vectors[which])
    assert rows.read(array, np.array([5, int(index._row_of[count])], dtype=np.int64)) is None
    assert rows.read(unit_rows(3, 1), which) is None  # (not its array: the caller reads the array)
    rows.settle(unit_rows(3, 1))  # (nothing happens, nothing breaks)


def test_a_restored_index_with_rows_in_place_answers_as_the_one_it_was(tmp_path: Path) -> None:
    vectors = unit_rows(3_000, 10)
    index, rows = restored_in_place(tmp_path, vectors, exact_filter_max=10)
    twin = VectorIndex(DIM, hnsw_threshold=10**7, exact_filter_max=10)
    twin.add_many(np.arange(3_000), vectors)
    assert index._rows_crc() == twin._rows_crc()  # (read a block at a time, each block let go)

    def same() -> None:
        for query in unit_rows(10, 12):
            assert index.search(query, 10) == twin.search(query, 10)
            allowed = np.arange(0, 3_700, 3)
            assert index.search(query, 10, allowed=allowed) == twin.search(query, 10, allowed=allowed)

    for one in (index, twin):
        for doc in range(0, 3_000, 7):
            one.remove(doc)
        one.add_many(np.arange(3_000, 3_200), unit_rows(200, 11))
    assert index._row_file is rows and rows.pages_written  # (freed rows reused, in place)
    rows.let_go()  # (every page but those written)
    same()
    for one in (index, twin):
        one.add_many(np.arange(3_200, 3_700), unit_rows(500, 13))
    assert index._row_file is None  # (the growth moved the rows to memory: no row files here)
    same()


def test_a_snapshots_rows_in_place_keep_only_the_pages_of_rows_written(tmp_path: Path) -> None:
    count, dim = 20_000, 64  # 256-byte rows: 16 a page
    vectors = np.random.default_rng(14).standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index, rows = restored_in_place(tmp_path, vectors)
    index.remove(5)
    index.remove(19_000)
    fresh = vectors[:2] * -1.0
    index.add_many(np.array([count, count + 1]), fresh)  # (two rows far apart, in one batch)
    assert rows.pages_written <= 4  # (their pages, not the span between them)
    # a page noted before it is written is kept by a settle that comes between (the
    # snapshot's or a graph build's, from another thread)
    array = index._rows
    rows.will_write(array, np.array([9_000]))
    rows.let_go()
    array[9_000] = fresh[0]
    rows.let_go()
    np.testing.assert_array_equal(array[9_000], fresh[0])
    rows.settle(array, 9_016, 9_017)  # (the span a settle lets go around its rows keeps them too)
    np.testing.assert_array_equal(array[9_000], fresh[0])
    np.testing.assert_array_equal(index._rows[index._row_of[[count, count + 1]]], fresh)


def test_a_restored_graph_index_reads_its_few_rows_from_the_snapshots_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vectors = unit_rows(3_000, 15)
    index, rows = restored_in_place(tmp_path, vectors, hnsw_threshold=500)
    twin = VectorIndex.from_snapshot(np.arange(3_000), vectors.copy(), DIM, graph=None, meta=None,
                                     hnsw_threshold=500)
    assert index._graph is not None and twin._graph is not None
    reads: list[int] = []
    read = rows.read

    def counted(array: np.ndarray, which: np.ndarray) -> np.ndarray | None:
        found = read(array, which)
        reads.append(found is not None)
        return found

    monkeypatch.setattr(rows, "read", counted)
    for query in unit_rows(20, 16):
        assert index.search(query, 10) == twin.search(query, 10)
    assert reads and all(reads)


@pytest.mark.parametrize("elsewhere", [False, True], ids=["data_dir", "vector_rows_dir"])
def test_a_runtime_keeps_large_scopes_rows_in_an_unnamed_file(tmp_path: Path, elsewhere: bool) -> None:
    data_dir = tmp_path / "data"
    rows_dir = tmp_path / "local" if elsewhere else data_dir
    config = mnemex.Config(data_dir=str(data_dir), embedder="hashing", vector_rows_file_from=512 * 1024,
                           vector_rows_dir=str(rows_dir) if elsewhere else None)

    async def main() -> None:
        async with mnemex.open_runtime(config) as rt:
            scope = rt.scope(user_id="u", app_name="rows")
            small = rt.scope(user_id="v", app_name="rows")
            await small.remember("one memory, rows in memory")
            await scope.remember_many([f"note {i}: tea by the lake number {i}" for i in range(120)])
            assert rows_files_mapped(tmp_path) == []  # 120 rows of 384 floats: 184 KB, in memory
            await scope.remember_many([f"note {i}: a walk in the hills number {i}" for i in range(120, 400)])
            mapped = rows_files_mapped(tmp_path)  # 400 rows: 614 KB, in the file
            assert len(mapped) == 1 and mapped[0].endswith("(deleted)") and str(rows_dir) in mapped[0]
            hits = (await scope.search("hills number 250", top_k=3, mode="vector")).hits
            assert "number 250" in hits[0].memory.content
            assert [hit.memory.content for hit in (await small.search("one memory", mode="vector")).hits] == \
                ["one memory, rows in memory"]

    trio.run(main)
    gc.collect()
    assert rows_files_mapped(tmp_path) == []
    assert not [name for name in os.listdir(rows_dir) if "rows" in name]


def test_an_empty_vector_rows_dir_is_refused() -> None:
    with pytest.raises(mnemex.InvalidInput, match="vector_rows_dir"):
        mnemex.Config(vector_rows_dir=" ")
