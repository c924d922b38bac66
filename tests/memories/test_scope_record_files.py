"""A scope whose records are in a file (``storage.records_file_from``) answers as one
whose records are objects: the brute-force state machine of test_scope_stateful run
with the records moving to a file at the second memory and written three at a time;
and a runtime's large scope keeps its records in a file across a passivation."""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import trio
from hypothesis import settings
from scope_support import KEY, Driver, snapshot_image
from test_scope_stateful import WEIGHTS, ScopeAgainstBruteForce

import mnemex
from mnemex.memories import records as records_module
from mnemex.memories.behaviour import GRAPH_SIDECAR, ScopeMemory
from mnemex.memories.protocol import Forget
from mnemex.memories.records import FileRecords
from mnemex.persistence.recordfiles import RecordFiles


class ScopeWithRecordFile(ScopeAgainstBruteForce):
    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="mnemex-scope-records-")
        self.driver = Driver(recency_half_life=50.0, record_files=RecordFiles(self.directory, 2, batch=3),
                             **WEIGHTS)
        self.was_compact = records_module.COMPACT_MIN_BYTES
        records_module.COMPACT_MIN_BYTES = 300

    def teardown(self) -> None:
        memory = self.driver.memory
        assert isinstance(memory.docs, FileRecords) == (len(memory.docs) >= 2)
        try:
            super().teardown()
        finally:
            records_module.COMPACT_MIN_BYTES = self.was_compact
            shutil.rmtree(self.directory, ignore_errors=True)


ScopeWithRecordFile.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
test_scope_with_record_file = ScopeWithRecordFile.TestCase


def _scope(rt: mnemex.MnemexRuntime) -> ScopeMemory:
    behaviour = rt.kernel._cells[("scope", ("app", "u"))].behaviour
    assert isinstance(behaviour, ScopeMemory)
    return behaviour


def test_a_runtime_scope_keeps_its_records_in_a_file_across_a_passivation(tmp_path: Path) -> None:
    config = mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing", records_file_from=50,
                           snapshot_min_growth=0.0)
    texts = [f"memory number {n} about tea and hiking" for n in range(120)]

    async def main() -> None:
        async with mnemex.open_runtime(config) as rt:
            scope = rt.scope(user_id="u", app_name="app")
            ids = await scope.remember_many(texts[:40])
            assert not isinstance(_scope(rt).docs, FileRecords)
            ids += await scope.remember_many(texts[40:])
            assert isinstance(_scope(rt).docs, FileRecords)
            assert (await scope.remember_many(texts[:3])) == ids[:3]  # deduplicated by content digest
            await scope.update(ids[7], content="an edited memory about coffee")
            assert await scope.forget(ids[8])
            found = await scope.search("edited coffee", top_k=1, mode="hybrid")
            assert found.hits[0].memory.id == ids[7]
            await rt.passivate("scope", ("app", "u"))
            again = await scope.search("edited coffee", top_k=1, mode="fulltext")
            assert again.hits[0].memory.id == ids[7]
            assert isinstance(_scope(rt).docs, FileRecords)
            assert (await scope.get(ids[9])).content == texts[9]
            with pytest.raises(mnemex.NotFound):
                await scope.get(ids[8])
            assert (await scope.count()) == 119

    trio.run(main)


def _filled(driver: Driver) -> None:
    """Memories of every kind a restore reads: sessions (their context), categories,
    metadata, entities, twins (stored without dedupe), a chunk of a document, keyed
    ones, and forgotten ones (free docs)."""
    memory_ids = driver.remember(*(f"note {n} about tea in Paris" for n in range(6)), categories=("a",))
    driver.remember(*(driver.new(f"session turn {n} on hiking", session_id="s1", metadata={"n": n})
                      for n in range(5)))
    driver.remember(driver.new("same words", dedupe=False), driver.new("same words", dedupe=False))
    driver.send(Forget(ids=memory_ids[1:3], now=driver.tick()))
    driver.remember("one after the forgets")


@pytest.mark.parametrize("left_out", ["nothing", "the entity graph's", "every optional"])
def test_a_restore_into_the_file_reads_as_a_restore_of_objects(tmp_path: Path, left_out: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    plain = Driver()
    _filled(plain)
    image = snapshot_image(plain.memory, optional=left_out != "every optional")
    if left_out == "the entity graph's":
        del image.sidecars[GRAPH_SIDECAR]
    files = RecordFiles(str(tmp_path), 3, batch=4)
    caplog.set_level(logging.INFO, logger="mnemex.memories")
    objects = ScopeMemory.restore(KEY, image, plain.memory.settings)
    stored = ScopeMemory.restore(KEY, image, replace(plain.memory.settings, record_files=files))
    # with its sidecars the records go to the file as they are read; without the graph's,
    # they are read whole (its mentions are found again), then moved; without the
    # records' own sidecar they can only be read whole
    assert ("reading them whole" in caplog.text) == (left_out == "the entity graph's")
    assert isinstance(stored.docs, FileRecords) and not isinstance(objects.docs, FileRecords)
    assert list(stored.records()) == list(objects.records()) and stored.docs == objects.docs
    assert stored.doc_of == objects.doc_of and stored.free == objects.free
    assert stored.sessions == objects.sessions and stored.content_bytes == objects.content_bytes
    # the filter table files the same values into the same kinds of sets, at the same capacity
    shapes = [{name: {value: type(docs) for value, docs in table.items()}
               for name, table in memory.table.fields.items()} for memory in (stored, objects)]
    assert shapes[0] == shapes[1] and stored.table.capacity == objects.table.capacity
    assert stored.by_content.by_hash and not objects.by_content.by_hash
    assert all(stored.by_content.get(record.content) == objects.by_content.get(record.content)
               for record in objects.records())
    assert len(stored.by_content) == len(objects.by_content) and len(stored.twins) == len(objects.twins) == 1
    for query, spec in [("tea", None), ("hiking", {"metadata": {"n": {"$gte": 2}}}), ("same", None),
                        ("tea Paris", {"categories": "a"})]:
        for mode in ("keyword", "fulltext", "vector", "hybrid"):
            command = plain.search_command(query, mode, filter=spec)
            assert stored.handle(command) == objects.handle(command)
    again = Driver(stored)
    again.now = plain.now
    assert again.remember("same words") == [objects.docs_record(objects.by_content.get("same words") or 0).id]
