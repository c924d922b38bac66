"""Snapshots and sidecars are read by mapping the files into memory: what a restore
keeps must be copies, so that once the recovered image is dropped no snapshot file
stays mapped (nor its descriptor open), even after the files are replaced."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest
from scope_support import EMBEDDER, KEY, Driver, restored

from mnemex.effects import Image
from mnemex.memories.behaviour import ScopeMemory
from mnemex.persistence.store import FileStore

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")


def mapped_snapshot_files() -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line.split()[-1] for line in maps if "/snapshot-" in line]


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_restored_scope_keeps_no_snapshot_file_mapped(tmp_path: Path) -> None:
    driver = Driver(hnsw_threshold=50)
    driver.remember(*(driver.new(f"note {i} about tea and lakes", session_id=f"s{i % 4}")
                      for i in range(200)))
    driver.run_jobs()  # the HNSW graph, so that its sidecar is written too
    data = driver.memory.snapshot()
    assert callable(data.records) and callable(data.sidecars)
    sidecars = data.sidecars()
    assert {"records2", "vectors2", "usearch", "usearchmeta", "keyword", "bm25"} <= set(sidecars)
    assert data.required == {"vectors2"}
    store = FileStore(tmp_path, "scope", KEY)
    store.write_snapshot(7, 1_000, data.records(), created=2_000, extra=dict(data.extra), sidecars=sidecars,
                         required=data.required)
    assert data.done is not None
    data.done()

    before = open_descriptors()
    recovered = store.recover()
    assert mapped_snapshot_files()  # read by mapping
    assert set(recovered.sidecars) == set(sidecars) == set(recovered.sidecar_paths)
    for name, blob in sidecars.items():
        if isinstance(blob, bytes):
            assert bytes(recovered.sidecars[name]) == blob
    assert recovered.header is not None
    memory = ScopeMemory.restore(KEY, Image(recovered.records, recovered.header.extra, recovered.sidecars,
                                            recovered.sidecar_paths), driver.memory.settings)
    assert memory.vectors is not None and memory.vectors.sidecar_status == "loaded"
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
    memory = restored(driver.memory)
    records = [record for record in memory.docs if record is not None]
    assert len(records) == 300 and len({id(record.categories) for record in records}) == 1
    entities = {name: id(name) for record in records for name in record.entities}
    assert entities and all(id(name) == entities[name] for record in records for name in record.entities)
    assert memory.keyword is not None
    assert any(isinstance(postings, np.ndarray) for postings in memory.keyword._sparse.values())
    for mode in ("keyword", "fulltext", "vector", "hybrid"):
        assert [hit.memory.id for hit in Driver(memory).search("Melanie lake 17", mode).hits] == \
            [hit.memory.id for hit in driver.search("Melanie lake 17", mode).hits]
