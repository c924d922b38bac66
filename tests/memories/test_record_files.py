"""FileRecords against a plain list: a large scope's records in a file read back as
the list of records they replace, through writes, forgets, views taken for a
snapshot, copies to a new file and writes that fail; Contents keyed by digests finds
what it found keyed by contents."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mnemex.memories import records as records_module
from mnemex.memories.protocol import MemoryRecord
from mnemex.memories.records import Contents, FileRecords, HashDocs, RecordsView
from mnemex.persistence.recordfiles import RecordFile, RecordFiles

CONTENTS = ["tea", "coffee", "a longer memory about hiking in the hills", "é ünïcode ✓", "x" * 300, ""]


def record(number: int, content: str, **fields: Any) -> MemoryRecord:
    return MemoryRecord(id=f"m{number:05d}", content=content, timestamp=1_000.0 + number, **fields)


class Failing(RecordFiles):
    """Files whose appends fail while ``failing`` is set (a full disk), and that
    cannot be made while ``failing`` or ``no_new`` is."""

    def __init__(self, directory: str, batch: int) -> None:
        super().__init__(directory, 0, batch=batch)
        self.failing = False
        self.no_new = False
        self.opened = 0

    def open(self) -> RecordFile:
        self.opened += 1
        if self.failing or self.no_new:
            raise OSError(28, "No space left on device")
        made = super().open()
        outer = self

        class Refusing(RecordFile):
            __slots__ = ()

            def append(self, data: bytes | bytearray | memoryview) -> int:
                if outer.failing:
                    raise OSError(28, "No space left on device")
                return RecordFile.append(self, data)

        made.__class__ = Refusing
        return made


class RecordsAgainstAList(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="mnemex-records-test-")
        self.files = Failing(self.directory, batch=3)
        self.model: list[MemoryRecord | None] = [record(0, "first")]
        self.stored = FileRecords(self.files, self.model)
        self.numbers = iter(range(1, 10**6))
        self.views: list[tuple[RecordsView, list[tuple[int, MemoryRecord]]]] = []
        self.was_compact = records_module.COMPACT_MIN_BYTES
        records_module.COMPACT_MIN_BYTES = 200  # (copies to a new file happen within a few writes)

    def teardown(self) -> None:
        records_module.COMPACT_MIN_BYTES = self.was_compact
        for view, pairs in self.views:  # a view reads what was there when it was taken
            assert list(view) == pairs and len(view) == len(pairs)
        del self.stored, self.views
        assert not os.listdir(self.directory)  # (unnamed files: nothing is left)
        os.rmdir(self.directory)

    @rule(content=st.sampled_from(CONTENTS), importance=st.sampled_from([0.5, 0.9]))
    def append(self, content: str, importance: float) -> None:
        made = record(next(self.numbers), content, importance=importance)
        self.model.append(made)
        self.stored.append(made)

    @rule()
    def append_free(self) -> None:
        self.model.append(None)
        self.stored.append(None)

    @rule(data=st.data(), content=st.sampled_from(CONTENTS))
    def replace(self, data: Any, content: str) -> None:
        doc = data.draw(st.integers(0, len(self.model) - 1))
        made = record(next(self.numbers), content, categories=("a",))
        self.model[doc] = made
        self.stored[doc] = made

    @rule(data=st.data())
    def forget(self, data: Any) -> None:
        doc = data.draw(st.integers(0, len(self.model) - 1))
        self.model[doc] = None
        self.stored[doc] = None

    @rule()
    def flush(self) -> None:
        self.stored.flush()

    @rule(failing=st.booleans())
    def disk(self, failing: bool) -> None:
        self.files.failing = failing

    @precondition(lambda self: len(self.views) < 3)
    @rule()
    def view(self) -> None:
        self.views.append((self.stored.view(), [(doc, r) for doc, r in enumerate(self.model) if r is not None]))

    @rule(data=st.data())
    def many(self, data: Any) -> None:
        docs = data.draw(st.lists(st.integers(0, len(self.model) - 1), max_size=12))
        assert list(self.stored.many(docs)) == [self.model[doc] for doc in docs]

    @invariant()
    def reads_as_the_list(self) -> None:
        stored = self.stored
        assert len(stored) == len(self.model)
        assert [stored[doc] for doc in range(len(self.model))] == self.model
        assert list(stored) == self.model and stored == self.model
        assert [stored.id_at(doc) for doc in range(len(self.model))] == [
            None if r is None else r.id for r in self.model]
        assert stored[-1] == self.model[-1] and stored[1:3] == self.model[1:3]


RecordsAgainstAList.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
test_records_against_a_list = RecordsAgainstAList.TestCase


@pytest.fixture
def files(tmp_path: Path) -> Iterator[RecordFiles]:
    yield RecordFiles(str(tmp_path), 0, batch=4)


def test_records_written_leave_memory_and_are_read_from_the_file(files: RecordFiles) -> None:
    stored = FileRecords(files, [record(n, CONTENTS[n % len(CONTENTS)]) for n in range(10)])
    assert not stored._pending and stored.file_bytes > 10 * 20  # type: ignore[attr-defined]
    assert stored[3] == record(3, CONTENTS[3]) and stored[3] is not stored[3]  # (decoded at each read)
    for n in range(3):
        stored[n] = record(100 + n, "changed")
    assert stored[0] == record(100, "changed")  # (waiting: one short of a batch)
    assert len(stored._pending) == 3  # type: ignore[attr-defined]
    stored[5] = None
    assert not stored._pending and stored[5] is None  # type: ignore[attr-defined]


def test_copies_to_a_new_file_once_the_garbage_outweighs_the_records(files: RecordFiles,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records_module, "COMPACT_MIN_BYTES", 1_000)
    stored = FileRecords(files, [record(n, "x" * 100) for n in range(20)])
    first = stored.file_bytes
    view = stored.view()
    for round_ in range(3):
        for n in range(20):
            stored[n] = record(n, "y" * 100, reinforced=round_ + 1)
    stored.flush()
    assert stored.file_bytes < 2 * first  # (three rewrites of every record: copied, garbage gone)
    assert [r.reinforced for r in stored if r is not None] == [3] * 20
    assert [r.content for _, r in view] == ["x" * 100] * 20  # the view's file is still open


def test_a_failed_write_keeps_the_records_in_memory_then_writes_them(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    files = Failing(str(tmp_path), batch=2)
    stored = FileRecords(files, [record(0, "a")])
    files.failing = True
    for n in range(1, 6):
        stored.append(record(n, f"r{n}"))
    assert "could not be written" in caplog.text
    assert [r.content for r in stored if r is not None] == ["a", "r1", "r2", "r3", "r4", "r5"]
    files.failing = False
    stored.flush()
    assert not stored._pending  # type: ignore[attr-defined]
    assert [r.content for r in stored if r is not None] == ["a", "r1", "r2", "r3", "r4", "r5"]


def test_a_file_that_cannot_be_made_or_written_refuses_the_whole_store(tmp_path: Path) -> None:
    files = Failing(str(tmp_path), batch=2)
    files.failing = True
    with pytest.raises(OSError, match="No space"):
        FileRecords(files, [record(n, "a") for n in range(5)])


def test_read_spans_joins_near_spans_and_reads_far_ones_apart(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    file = RecordFile(str(tmp_path))
    blob = bytes(range(256)) * 2_000
    file.append(blob)
    calls: list[tuple[int, int]] = []
    pread = os.pread

    def counted(fd: int, length: int, offset: int) -> bytes:
        calls.append((offset, length))
        return pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counted)
    spans = [(0, 10), (20, 5), (40, 30), (400_000, 7), (400_010, 3)]
    assert file.read_spans(spans) == [blob[o : o + n] for o, n in spans]
    assert calls == [(0, 70), (400_000, 13)]


class Colliding(str):
    """A content whose hash is every other Colliding content's."""

    def __hash__(self) -> int:
        return 42


def keyed_by_hash(files: RecordFiles, contents: list[str]) -> tuple[Contents, FileRecords]:
    """Contents keyed by hash over records of ``contents`` at docs 0.. (one each)."""
    stored = FileRecords(files, [record(doc, content) for doc, content in enumerate(contents)])
    index = Contents()
    index.key_by_hash(stored)
    return index, stored


@pytest.mark.parametrize("by_hash", [False, True])
def test_contents_find_the_first_doc_and_its_twins(by_hash: bool, files: RecordFiles) -> None:
    contents = Contents()
    if by_hash:
        contents, _ = keyed_by_hash(files, ["x", "x", "same", "x", "same", "x", "x", "other"])
    contents.hold(4, "same")
    contents.hold(2, "same")
    contents.hold(7, "other")
    contents.hold(4, "same")  # (again: nothing changes)
    assert contents.get("same") == 4 and "other" in contents and "none" not in contents and 3 not in contents
    assert len(contents.twins) == 1 and sorted(contents.values()) == [4, 7]
    contents.release(4, "same")
    assert contents.get("same") == 2 and not contents.twins
    contents.release(2, "same")
    assert contents.get("same") is None and len(contents) == 1


def test_contents_keyed_by_hash_later_find_the_same(files: RecordFiles) -> None:
    texts = ["a", "b", "a", "c", "a"]
    plain = Contents()
    for doc, content in enumerate(texts):
        plain.hold(doc, content)
    later = Contents()
    for doc, content in enumerate(texts):
        later.hold(doc, content)
    later.key_by_hash(FileRecords(files, [record(doc, content) for doc, content in enumerate(texts)]))
    assert all(plain.get(c) == later.get(c) for c in "abcd")
    assert sorted(map(sorted, plain.twins.values())) == sorted(map(sorted, later.twins.values()))
    assert later != plain and all(type(key) is int for key in later.twins)


def test_contents_of_one_hash_are_kept_apart_and_never_taken_for_each_other(files: RecordFiles) -> None:
    texts = [Colliding("alpha"), Colliding("beta"), Colliding("alpha"), Colliding("gamma"), Colliding("beta")]
    index, _ = keyed_by_hash(files, [str(text) for text in texts])
    for doc, text in enumerate(texts):
        index.hold(doc, text)
    assert [index.get(Colliding(t)) for t in ("alpha", "beta", "gamma", "delta")] == [0, 1, 3, None]
    assert len(index) == 3 and sorted(index.values()) == [0, 1, 3]
    index.release(0, texts[0])  # the first of "alpha" goes: its twin takes its place
    assert index.get(Colliding("alpha")) == 2
    index.release(1, texts[1])
    index.release(4, texts[4])
    assert index.get(Colliding("beta")) is None and index.get(Colliding("gamma")) == 3
    index.release(3, texts[3])
    index.release(2, texts[2])
    assert len(index) == 0 and index.get(Colliding("alpha")) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["setdefault", "set", "del"]), st.integers(-30, 30), st.integers(0, 99)),
                max_size=150))
def test_hash_docs_hold_what_a_dict_holds(steps: list[tuple[str, int, int]]) -> None:
    """The sorted hashes with their recent changes beside them (sorted in past a
    few, here 4) read as a dict: look-ups, first docs kept, replaced, let go."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records_module, "_RECENT_MIN", 4)
        held, expected = HashDocs(), {}
        for step, key, doc in steps:
            if step == "setdefault":
                assert held.setdefault(key, doc) == expected.setdefault(key, doc)
            elif step == "set":
                held[key] = doc
                expected[key] = doc
            elif key in expected:
                del held[key]
                del expected[key]
            else:
                with pytest.raises(KeyError):
                    del held[key]
            assert len(held) == len(expected)
            assert held.get(key) == expected.get(key)
        assert all(held.get(key) == expected.get(key) for key in range(-31, 32))
        assert dict(held.items()) == expected and sorted(held.values()) == sorted(expected.values())
        loaded = HashDocs()
        loaded.load(np.array(list(expected), dtype=np.int64), np.array(list(expected.values()), dtype=np.int64))
        assert loaded == held
        if expected:
            with pytest.raises(ValueError, match="empty"):
                loaded.load(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))


@pytest.mark.parametrize("some_first", [False, True])
def test_contents_filed_at_once_are_those_held_one_by_one(files: RecordFiles, some_first: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore files every content's hash at once: the same first docs, twins and
    contents kept apart (a hash two contents share) as holding them one by one."""
    read = Contents._content_at

    def read_colliding(self: Contents, doc: int) -> str | None:  # (as written: the same hash)
        content = read(self, doc)
        return Colliding(content) if content in ("alpha", "beta", "gamma") else content

    monkeypatch.setattr(Contents, "_content_at", read_colliding)
    texts = ["a", Colliding("alpha"), "b", "a", Colliding("beta"), Colliding("alpha"), "c", "a",
             Colliding("beta"), "b", Colliding("gamma")]
    one_by_one, _ = keyed_by_hash(files, [str(text) for text in texts])
    for doc, text in enumerate(texts):
        one_by_one.hold(doc, text)
    at_once, _ = keyed_by_hash(files, [str(text) for text in texts])
    start = 3 if some_first else 0  # (into an index holding some: each as hold)
    for doc in range(start):
        at_once.hold(doc, texts[doc])
    at_once.hold_hashed(np.arange(start, len(texts), dtype=np.int64),
                        np.array([hash(text) for text in texts[start:]], dtype=np.int64))
    assert at_once == one_by_one and at_once._apart is not None
    for text in [*texts, "d", Colliding("delta")]:
        assert at_once.get(text) == one_by_one.get(text)
    assert len(at_once) == len(one_by_one) == 6 and sorted(at_once.values()) == [0, 1, 2, 4, 6, 10]
    with pytest.raises(TypeError, match="key_by_hash"):
        Contents().hold_hashed(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))


def test_a_copy_that_fails_is_tried_again_once_the_garbage_doubled(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records_module, "COMPACT_MIN_BYTES", 500)
    files = Failing(str(tmp_path), batch=5)
    stored = FileRecords(files, [record(n, "x" * 50) for n in range(10)])
    files.no_new = True  # (appends go on; a new file cannot be made)
    for round_ in range(1, 13):
        for n in range(10):
            stored[n] = record(n, "x" * 50, reinforced=round_)
    # each round leaves about 700 bytes of garbage: a copy tried at 500, 1,000, 2,000, 4,000 and 8,000
    # bytes of it, not at every batch written
    assert 3 <= files.opened - 1 <= 6
    tries = files.opened
    files.no_new = False  # the disk has room again: the copy is made once the garbage doubled
    rounds = 0
    while stored.file_bytes > 2_000 and rounds < 60:
        rounds += 1
        for n in range(10):
            stored[n] = record(n, "y", reinforced=rounds)
    assert files.opened == tries + 1 and stored.file_bytes <= 2_000
    assert [r.reinforced for r in stored if r is not None] == [rounds] * 10


def test_a_reader_going_through_the_records_while_they_are_written_and_copied(
        files: RecordFiles, monkeypatch: pytest.MonkeyPatch) -> None:
    # (ScopeMemory.records() is a generator: a caller may write between the records it takes)
    monkeypatch.setattr(records_module, "COMPACT_MIN_BYTES", 200)
    stored = FileRecords(files, [record(n, f"first {n}") for n in range(3_000)])
    seen = []
    for doc, found in enumerate(stored.many(range(3_000))):
        assert found is not None and found.id == f"m{doc:05d}"
        seen.append(found.content)
        if doc % 500 == 0:
            for n in range(3_000):
                stored[n] = record(n, f"again {doc} {n}")
    assert all(content.endswith(f" {doc}") for doc, content in enumerate(seen))


def test_a_record_changed_keeps_its_id_object(files: RecordFiles) -> None:
    stored = FileRecords(files, [record(n, "a") for n in range(3)])
    kept = stored.id_at(1)
    changed = stored[1]
    assert changed is not None and changed.id is not kept
    stored[1] = msgspec.structs.replace(changed, reinforced=2)
    assert stored.id_at(1) is kept
