"""Snapshots and sidecars are read by mapping the files into memory: what a restore
keeps must be copies, so that once the recovered image is dropped no snapshot file
stays mapped (nor its descriptor open), even after the files are replaced."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scope_support import EMBEDDER, KEY, Driver, restored

from mnemex.effects import Image
from mnemex.memories.behaviour import ScopeMemory
from mnemex.persistence.store import FileStore, Recovered

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")


def mapped_snapshot_files() -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line.split()[-1] for line in maps if "/snapshot-" in line]


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def written(tmp_path: Path, driver: Driver) -> tuple[FileStore, dict[str, Any]]:
    """The snapshot of ``driver``'s scope written to files (its store, its sidecars)."""
    data = driver.memory.snapshot()
    assert callable(data.records) and callable(data.sidecars)
    sidecars = data.sidecars()
    assert data.required == {"vectors2"}
    store = FileStore(tmp_path, "scope", KEY)
    store.write_snapshot(7, 1_000, data.records(), created=2_000, extra=dict(data.extra), sidecars=sidecars,
                         required=data.required)
    assert data.done is not None
    data.done()
    return store, sidecars


def restored_from(recovered: Recovered, driver: Driver) -> ScopeMemory:
    """The scope ``recovered`` holds, restored with ``driver``'s settings (its graph loaded)."""
    assert recovered.header is not None
    memory = ScopeMemory.restore(KEY, Image(recovered.records, recovered.header.extra, recovered.sidecars,
                                            recovered.sidecar_paths), driver.memory.settings)
    assert memory.vectors is not None and memory.vectors.sidecar_status == "loaded"
    return memory


def test_a_restored_scope_keeps_no_snapshot_file_mapped(tmp_path: Path) -> None:
    driver = Driver(hnsw_threshold=50)
    driver.remember(*(driver.new(f"note {i} about tea and lakes", session_id=f"s{i % 4}")
                      for i in range(200)))
    driver.run_jobs()  # the HNSW graph, so that its sidecar is written too
    store, sidecars = written(tmp_path, driver)
    assert {"records2", "vectors2", "usearch", "usearchmeta", "keyword", "bm25"} <= set(sidecars)

    before = open_descriptors()
    recovered = store.recover()
    assert mapped_snapshot_files()  # read by mapping
    assert set(recovered.sidecars) == set(sidecars) == set(recovered.sidecar_paths)
    for name, blob in sidecars.items():
        if isinstance(blob, bytes):
            assert bytes(recovered.sidecars[name]) == blob
    memory = restored_from(recovered, driver)
    del recovered
    gc.collect()
    assert mapped_snapshot_files() == []
    assert open_descriptors() == before
    # the restored scope works on its own copies, with the files gone
    for path in tmp_path.rglob("snapshot-*"):
        path.unlink()
    searcher = Driver(memory)
    for mode in ("keyword", "fulltext", "vector", "hybrid"):
        assert [hit.memory.id for hit in searcher.search("tea lakes 17", mode).hits] == \
            [hit.memory.id for hit in driver.search("tea lakes 17", mode).hits]
    assert EMBEDDER.dim == memory.dim


def test_an_empty_snapshot_and_a_header_only_file_read_back(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "scope", KEY)
    store.write_snapshot(1, 10, [], created=20, extra={"empty": True}, sidecars={"blank": b""})
    recovered = store.recover()
    assert recovered.header is not None and recovered.header.count == 0
    assert list(recovered.records) == [] and len(recovered.records) == 0
    assert recovered.sidecars == {"blank": b""}


def test_a_restored_scope_shares_what_its_records_repeat() -> None:
    # decoding a snapshot makes an object for every occurrence; a scope built memory
    # by memory holds one tuple per repeated categories, one str per name (40 MB more
    # in a restored scope of 300,000), and a restored keyword index keeps its postings
    # as arrays, not an int object per posting (70 MB more)
    driver = Driver()
    driver.remember(*(driver.new(f"Caroline went hiking by lake {i} with Melanie", categories=["travel"],
                                 entities=["Caroline", "Melanie" if i % 2 else "Mel"])
                      for i in range(300)))
    from mnemex.memories.protocol import Remember
    from scope_support import EMBEDDER

    driver.send(Remember(memories=[driver.new(f"I love painting sunsets by the lake, number {i}")
                                   for i in range(100)],
                         embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=driver.tick(), classify=True))
    memory = restored(driver.memory)
    records = [record for record in memory.docs if record is not None]
    assert len(records) == 400 and len({id(record.categories) for record in records[:300]}) == 1
    # what the classifier wrote repeats too (the same confidences, the same classifier), and
    # a record's creation is its time
    classified = [record for record in records if record.category_confidences]
    assert len(classified) == 100
    for values in ([record.category_confidences for record in classified],
                   [record.classified_by for record in classified]):
        assert len({id(value) for value in values}) == len(set(values))
    assert all(record.created_at is record.timestamp for record in records)
    entities = {name: id(name) for record in records for name in record.entities}
    assert entities and all(id(name) == entities[name] for record in records for name in record.entities)
    assert memory.keyword is not None
    assert any(isinstance(postings, np.ndarray) for postings in memory.keyword._sparse.values())
    # one int object a doc: the one doc_of holds, in the content index too (the entity
    # graph keeps its memories' mentions in a list by doc: no int of its own a doc)
    owned = {doc: id(doc) for doc in memory.doc_of.values()}
    assert all(id(doc) == owned[doc] for doc in memory.by_content.values())
    assert len(memory.graph._mentions) >= 300 and type(memory.graph._mentions.slots) is list
    # from the lines alone (every index made again), and the graph made again after a
    # declaration: the same sharing (ints from 257 up are objects of their own)
    from mnemex.memories.graph import reindex_graph

    bare = restored(driver.memory, sidecars=False)
    for rebuilt in (False, True):
        if rebuilt:
            reindex_graph(bare)
        owned = {doc: id(doc) for doc in bare.doc_of.values()}
        assert all(id(doc) == owned[doc] for doc in bare.by_content.values())
        assert len(bare.graph._mentions) >= 300
    for mode in ("keyword", "fulltext", "vector", "hybrid"):
        assert [hit.memory.id for hit in Driver(memory).search("Melanie lake 17", mode).hits] == \
            [hit.memory.id for hit in driver.search("Melanie lake 17", mode).hits]


def test_a_large_restored_scope_keeps_its_rows_in_the_sidecar_mapped_copy_on_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    from mnemex.memories import snapshot as snapshot_module
    from mnemex.memories.protocol import Forget

    monkeypatch.setattr(snapshot_module, "MAP_ROWS_FROM", 1)  # (every vectors sidecar counts as large)
    driver = Driver(hnsw_threshold=50)
    driver.remember(*(driver.new(f"note {i} about tea and lakes") for i in range(200)))
    driver.run_jobs()
    store, _ = written(tmp_path, driver)
    [vectors_file] = tmp_path.rglob("snapshot-*.vectors2.bin")
    on_disk = hashlib.sha256(vectors_file.read_bytes()).hexdigest()
    recovered = store.recover()
    memory = restored_from(recovered, driver)
    del recovered
    gc.collect()
    assert mapped_snapshot_files() == [str(vectors_file)]  # the rows, in place

    restored_driver = Driver(memory)
    twins = (driver, restored_driver)

    def both(command_of: object) -> None:
        for twin in twins:
            twin.send(command_of(twin))  # type: ignore[operator]

    def same_searches() -> None:
        for mode in ("vector", "hybrid"):
            for query in ("tea lakes 17", "note 150", "mountains and rivers 3"):
                assert [hit.memory.id for hit in restored_driver.search(query, mode).hits] == \
                    [hit.memory.id for hit in driver.search(query, mode).hits]

    same_searches()
    # rows freed and reused: written in the mapping, copy-on-write, never in the file
    gone = [f"m{i:06d}" for i in range(1, 41)]
    both(lambda twin: Forget(ids=gone, now=twin.tick()))
    fresh = [driver.new(f"mountains and rivers {i}", id=f"n{i:03d}") for i in range(30)]
    for twin in twins:
        twin.remember(*fresh)
        twin.run_jobs()
    same_searches()
    assert hashlib.sha256(vectors_file.read_bytes()).hexdigest() == on_disk
    assert mapped_snapshot_files() == [str(vectors_file)]
    # more than they hold: the rows move into memory, and the file is let go of
    more = [driver.new(f"forests and hills {i}", id=f"f{i:03d}") for i in range(40)]
    for twin in twins:
        twin.remember(*more)
        twin.run_jobs()
    same_searches()
    gc.collect()
    assert mapped_snapshot_files() == []
    assert hashlib.sha256(vectors_file.read_bytes()).hexdigest() == on_disk


def test_a_scope_wants_a_snapshot_while_it_holds_work_no_journal_line_does() -> None:
    # (the kernel then snapshots it even for a short journal: storage.snapshot_min_growth)
    from scope_support import restored

    driver = Driver(hnsw_threshold=50)
    driver.remember(*(driver.new(f"note {i} about tea and lakes") for i in range(100)))
    assert not driver.memory.snapshot_wanted  # everything it holds is in its journal
    driver.run_jobs()  # the HNSW graph, built beside it: not journaled
    assert driver.memory.snapshot_wanted
    assert not restored(driver.memory).snapshot_wanted  # (a snapshot was taken: it holds the graph)
    assert not driver.memory.snapshot_wanted
    rebuilt = restored(driver.memory, sidecars=False)  # its text indexes and mentions made again
    assert rebuilt.snapshot_wanted
    again = Driver(restored(driver.memory))
    assert not again.memory.snapshot_wanted
    from mnemex.memories.protocol import DeclareEntity

    again.send(DeclareEntity(name="Tea Lake", aliases=["the lake"], now=again.tick()))
    assert again.memory.snapshot_wanted  # every memory's mentions found again, for one short line


def sidecar_bytes(data: Any) -> dict[str, bytes]:
    sidecars = data.sidecars()
    out = {name: b"".join(sidecars[name]) for name in ("keyword", "bm25")}
    if data.done is not None:
        data.done()
    return out


def test_a_closing_scope_lends_its_text_indexes_to_its_snapshot() -> None:
    """``final_snapshot`` (the kernel's, as a scope closes) writes the text indexes'
    sidecars the same as ``snapshot``, from their own buffers: of a scope built and of
    one restored from sidecars, then changed."""
    driver = Driver()
    driver.remember(*(driver.new(f"note {i} about tea and lakes {i % 7}", session_id=f"s{i % 4}")
                      for i in range(300)))
    for memory in (driver.memory, restored(driver.memory)):
        lent = sidecar_bytes(memory.final_snapshot())
        assert lent == sidecar_bytes(memory.snapshot())
        Driver(memory).remember(driver.new("one more note about tea"))
        assert sidecar_bytes(memory.final_snapshot()) == sidecar_bytes(memory.snapshot()) != lent


async def test_a_passivated_scope_is_snapshotted_by_final_snapshot(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import mnemex

    taken: list[int] = []
    final = ScopeMemory.final_snapshot

    def counted(self: ScopeMemory) -> Any:
        taken.append(len(self))
        return final(self)

    monkeypatch.setattr(ScopeMemory, "final_snapshot", counted)
    config = mnemex.Config(data_dir=str(tmp_path), embedder="hashing", snapshot_min_growth=0.0)
    async with mnemex.open_runtime(config) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        await scope.remember_many([f"note {i} about tea and lakes" for i in range(50)])
        before = await scope.search("tea lakes 17", mode="fulltext", top_k=5)
        await rt.passivate("scope", ("a", "u"))
        assert taken == [50]
        assert await scope.search("tea lakes 17", mode="fulltext", top_k=5) == before  # restored from it
