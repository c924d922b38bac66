"""ActorStore behaviour: the same suite for FileStore and MemoryStore, then what
only files do (journal cut, archives, retention, fallback, faults, threads)."""

from __future__ import annotations

import errno
import itertools
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mnemex.errors import CorruptData, InvalidInput, StorageError
from mnemex.persistence import ActorStore, FileStore, MemoryStore, Recovered
from mnemex.persistence import store as store_module
from mnemex.persistence._files import write_atomic
from mnemex.persistence.journal import encode_entries, scan_journal

KEY = ("chat", "alice")
T0 = 1_700_000_000_000

OpenStore = Callable[[], ActorStore]


def entry(seq: int) -> tuple[int, int, bytes]:
    return seq, T0 + seq * 10, b'{"t":"counter.add","n":%d}' % seq


def entries(first: int, last: int) -> list[tuple[int, int, bytes]]:
    return [entry(seq) for seq in range(first, last + 1)]


def record(seq: int) -> bytes:
    return b'{"record":%d}' % seq


def records_until(seq: int) -> list[bytes]:
    return [record(n) for n in range(1, seq + 1)]


def snapshot(store: ActorStore, seq: int, **kwargs: object) -> None:
    store.write_snapshot(seq, T0 + seq * 10, records_until(seq), created=T0 + 99_999, **kwargs)  # type: ignore[arg-type]


def state(recovered: Recovered) -> list[int]:
    """The 'behaviour' these tests persist: the list of seqs applied so far."""
    seqs = [orjson.loads(line)["record"] for line in recovered.records]
    return seqs + [orjson.loads(e.payload)["n"] for e in recovered.journal]


@pytest.fixture(params=["file", "memory", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenStore]:
    """Opens the store of one actor again, as the runtime does after passivation
    (the postgres journal: a real server, see tests/postgres_server.py)."""
    opened: list[ActorStore] = []
    memory = MemoryStore("counter", KEY)
    storage = None
    if request.param == "postgres":
        from mnemex.persistence.postgres import PostgresStorage

        server = request.getfixturevalue("postgres_server")
        storage = PostgresStorage(server.dsn, snapshots_dir=tmp_path_factory.mktemp("snapshots"),
                                  schema=request.getfixturevalue("postgres_schema"))

    def reopen() -> ActorStore:
        store: ActorStore
        if storage is not None:
            store = storage.store("counter", KEY)
        else:
            store = FileStore(tmp_path, "counter", KEY) if request.param == "file" else memory
        opened.append(store)
        return store

    yield reopen
    for store in opened:
        store.close()
    if storage is not None:
        storage.close()


# -- the shared behavioural suite ---------------------------------------------------


def test_an_unknown_actor_recovers_empty_and_creates_nothing(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    assert not store.exists()
    recovered = store.recover()
    assert (recovered.header, recovered.records, recovered.sidecars, recovered.journal) == (None, [], {}, [])
    assert recovered.last_seq == 0
    assert store.disk_bytes() == 0
    assert list(tmp_path.iterdir()) == []


def test_appended_commands_come_back_in_order(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 3))
    store.append(entries(4, 4))
    store.append([])
    store.sync()
    store.close()
    again = open_store()
    assert again.exists()
    recovered = again.recover()
    assert [(e.seq, e.ts, e.payload) for e in recovered.journal] == entries(1, 4)
    assert recovered.last_seq == 4
    assert again.disk_bytes() > 0


def test_seqs_must_continue_from_the_last_one(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 2))
    for bad in (entries(2, 3), entries(4, 5), [entry(3), entry(5)]):
        with pytest.raises(InvalidInput):
            store.append(bad)
    store.append(entries(3, 3))
    assert open_store().recover().last_seq == 3


def test_recovery_is_the_snapshot_plus_the_commands_after_it(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 10))
    snapshot(store, 6, extra={"memories": 6}, sidecars={"index": b"\x00\xff" * 8})
    store.append(entries(11, 12))
    store.close()
    recovered = open_store().recover()
    assert recovered.header is not None
    assert (recovered.header.seq, recovered.header.ts, recovered.header.count) == (6, T0 + 60, 6)
    assert (recovered.header.kind, recovered.header.key, recovered.header.extra) == ("counter", KEY,
                                                                                     {"memories": 6})
    assert recovered.sidecars == {"index": b"\x00\xff" * 8}
    assert [e.seq for e in recovered.journal] == [7, 8, 9, 10, 11, 12]
    assert state(recovered) == list(range(1, 13))
    assert recovered.last_seq == 12


def test_a_snapshot_of_everything_leaves_no_journal_to_replay(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 5))
    snapshot(store, 5)
    recovered = open_store().recover()
    assert recovered.journal == []
    assert recovered.last_seq == 5
    store.append(entries(6, 6))
    assert state(open_store().recover()) == [1, 2, 3, 4, 5, 6]


def test_a_snapshot_before_any_command(open_store: OpenStore) -> None:
    store = open_store()
    snapshot(store, 0, extra={"empty": True})
    assert store.exists()
    recovered = open_store().recover()
    assert recovered.header is not None and recovered.header.seq == 0 and list(recovered.records) == []
    assert recovered.last_seq == 0


def test_the_newest_snapshot_wins(open_store: OpenStore) -> None:
    store = open_store()
    for seq in range(1, 8):
        store.append(entries(seq, seq))
        if seq % 2 == 0:
            snapshot(store, seq)
    recovered = open_store().recover()
    assert recovered.header is not None and recovered.header.seq == 6
    assert state(recovered) == list(range(1, 8))


def test_a_rejected_snapshot_changes_nothing(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 3))
    with pytest.raises(InvalidInput):
        store.write_snapshot(3, T0, [b"a\nb"], created=T0)
    recovered = open_store().recover()
    assert recovered.header is None and recovered.last_seq == 3


def test_snapshots_only_move_forward(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 6))
    snapshot(store, 4)
    with pytest.raises(InvalidInput, match="older than the newest snapshot"):
        snapshot(store, 3)
    snapshot(store, 4)  # the same seq again is fine
    snapshot(store, 6)
    assert state(open_store().recover()) == [1, 2, 3, 4, 5, 6]


def test_a_closed_store_can_be_used_again(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 1))
    store.close()
    store.close()
    store.append(entries(2, 2))
    store.sync()
    assert open_store().recover().last_seq == 2


def test_lines_cut_off_the_end_are_gone_and_their_seqs_are_written_again(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 3))
    store.append(entries(4, 7))
    store.cut_after(5)  # within the latest append
    store.cut_after(5)  # nothing more to cut
    store.append(entries(6, 6))
    store.cut_after(2)  # back past the latest append
    store.append(entries(3, 4))
    store.sync()
    assert not store.needs_recovery
    assert state(open_store().recover()) == [1, 2, 3, 4]


def test_a_cut_after_a_snapshot_keeps_what_the_snapshot_covers(open_store: OpenStore) -> None:
    store = open_store()
    store.append(entries(1, 6))
    snapshot(store, 4)
    store.cut_after(4)
    store.append(entries(5, 5))
    assert state(open_store().recover()) == [1, 2, 3, 4, 5]


# -- a model-based check of both stores ------------------------------------------------


class StoreMachine(RuleBasedStateMachine):
    """Appends, snapshots and restarts in any order; the recovered state always
    equals the model (every seq applied once, in order)."""

    file_based = True

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="mnemex-store-"))
        self.memory = MemoryStore("counter", KEY, keep=1)
        self.store = self.open()
        self.applied = 0
        self.snapshotted = 0

    def open(self) -> ActorStore:
        return FileStore(self.folder, "counter", KEY, keep=2) if self.file_based else self.memory

    @rule(count=st.integers(1, 5))
    def append(self, count: int) -> None:
        self.store.append(entries(self.applied + 1, self.applied + count))
        self.applied += count

    @rule(back=st.integers(0, 3))
    def write_snapshot(self, back: int) -> None:
        seq = max(0, self.applied - back)
        if seq < self.snapshotted:
            with pytest.raises(InvalidInput):
                snapshot(self.store, seq)
            return
        snapshot(self.store, seq)
        self.snapshotted = seq

    @rule(back=st.integers(0, 4))
    def cut(self, back: int) -> None:
        seq = max(self.snapshotted, self.applied - back)
        self.store.cut_after(seq)
        self.applied = seq

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = self.open()
        assert self.store.recover().last_seq == self.applied

    @invariant()
    def recovery_matches_the_model(self) -> None:
        recovered = self.open().recover()
        assert state(recovered) == list(range(1, self.applied + 1))

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class MemoryStoreMachine(StoreMachine):
    file_based = False


class PostgresStoreMachine(StoreMachine):
    """The same model against the postgres journal: each example on a schema of its own."""

    dsn = ""
    schemas = iter(())  # type: ignore[var-annotated]

    def __init__(self) -> None:
        from mnemex.persistence.postgres import PostgresStorage

        self.storage = PostgresStorage(self.dsn, snapshots_dir=tempfile.mkdtemp(prefix="mnemex-pg-snap-"),
                                       schema=next(self.schemas))
        super().__init__()

    def open(self) -> ActorStore:
        return self.storage.store("counter", KEY, keep=2)

    def teardown(self) -> None:
        super().teardown()
        self.storage.close()
        shutil.rmtree(self.storage.snapshots_dir, ignore_errors=True)


def test_the_postgres_store_matches_the_model(postgres_server: object) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    PostgresStoreMachine.dsn = postgres_server.dsn  # type: ignore[attr-defined]
    PostgresStoreMachine.schemas = (f"machine{os.getpid()}_{n}" for n in itertools.count())
    run_state_machine_as_test(PostgresStoreMachine,
                              settings=settings(max_examples=25, stateful_step_count=12, deadline=None))


TestFileStoreMachine = StoreMachine.TestCase
TestFileStoreMachine.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
TestMemoryStoreMachine = MemoryStoreMachine.TestCase
TestMemoryStoreMachine.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)


# -- files only: journal cut, archives, retention -----------------------------------


def names(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


def test_files_are_created_on_first_write_with_a_key_manifest(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", ("x" * 300,))
    assert not tmp_path.joinpath("counters").exists()
    store.append(entries(1, 1))
    store.sync()
    assert names(store.path) == {"key.json", "journal.jsonl"}
    assert orjson.loads((store.path / "key.json").read_bytes()) == {"kind": "counter", "key": ["x" * 300]}
    assert "~" in store.path.name
    store.close()


def test_a_snapshot_moves_the_lines_it_covers_to_an_archive(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 3))
    snapshot(store, 2)
    # With one snapshot nothing older can need lines 1-2: their archive goes at once.
    assert names(store.path) == {"key.json", "journal.jsonl", "snapshot-2.jsonl"}
    store.append(entries(4, 10))
    snapshot(store, 6)
    assert names(store.path) == {"key.json", "journal.jsonl", "snapshot-2.jsonl", "snapshot-6.jsonl",
                                 "journal-3-6.jsonl"}
    journal = scan_journal((store.path / "journal.jsonl").read_bytes(), "j").entries
    archive = scan_journal((store.path / "journal-3-6.jsonl").read_bytes(), "a").entries
    assert [e.seq for e in journal] == [7, 8, 9, 10]
    assert [e.seq for e in archive] == [3, 4, 5, 6]
    store.append(entries(11, 11))  # the reopened handle appends to the new file
    assert [e.seq for e in FileStore(tmp_path, "counter", KEY).recover().journal] == [7, 8, 9, 10, 11]
    store.close()


def test_lines_appended_while_the_journal_is_cut_move_to_the_new_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 8))
    real_write_atomic = write_atomic

    def archive_then_append(path: Path, chunks: list[bytes], **kwargs: bool) -> int:
        written = real_write_atomic(path, chunks, **kwargs)
        store.append(entries(9, 12))  # lands in the old file after the cut read it
        return written

    monkeypatch.setattr(store_module, "write_atomic", archive_then_append)
    snapshot(store, 5)
    monkeypatch.undo()
    store.append(entries(13, 13))
    journal = scan_journal((store.path / "journal.jsonl").read_bytes(), "j").entries
    assert [e.seq for e in journal] == list(range(6, 14))
    store.close()
    assert state(FileStore(tmp_path, "counter", KEY).recover()) == list(range(1, 14))


def test_only_the_newest_snapshots_and_the_archives_they_need_are_kept(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY, keep=2)
    for seq in (10, 20, 30):
        store.append(entries(seq - 9, seq))
        snapshot(store, seq, sidecars={"index": b"%d" % seq})
    assert names(store.path) == {
        "key.json", "journal.jsonl", "snapshot-20.jsonl", "snapshot-30.jsonl", "snapshot-20.index.bin",
        "snapshot-30.index.bin", "journal-21-30.jsonl",
    }
    store.close()


def test_a_damaged_newest_snapshot_falls_back_through_the_archive(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY, keep=2)
    store.append(entries(1, 10))
    snapshot(store, 10)
    store.append(entries(11, 20))
    snapshot(store, 20)
    store.append(entries(21, 25))
    store.close()
    newest = store.path / "snapshot-20.jsonl"
    newest.write_bytes(newest.read_bytes()[:-2] + b"X\n")
    recovered = FileStore(tmp_path, "counter", KEY).recover()
    assert recovered.header is not None and recovered.header.seq == 10
    assert [e.seq for e in recovered.journal] == list(range(11, 26))
    assert state(recovered) == list(range(1, 26))


def test_a_fallback_with_its_archive_gone_is_corrupt_data(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY, keep=2)
    store.append(entries(1, 10))
    snapshot(store, 10)
    store.append(entries(11, 20))
    snapshot(store, 20)
    store.close()
    (store.path / "snapshot-20.jsonl").write_bytes(b"garbage\n")
    (store.path / "journal-11-20.jsonl").unlink()
    with pytest.raises(CorruptData, match="reached seq 20, but only seq 10 can be recovered"):
        FileStore(tmp_path, "counter", KEY).recover()


def test_a_gap_between_snapshot_and_journal_is_corrupt_data(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY, keep=2)
    store.append(entries(1, 10))
    snapshot(store, 4)
    snapshot(store, 10)
    store.append(entries(11, 12))
    store.close()
    (store.path / "snapshot-10.jsonl").write_bytes(b"garbage\n")
    (store.path / "journal-5-10.jsonl").unlink()
    with pytest.raises(CorruptData, match="commands 5 to 10 are missing"):
        FileStore(tmp_path, "counter", KEY).recover()


def test_lines_the_snapshot_already_covers_are_not_replayed(tmp_path: Path) -> None:
    """A crash after the snapshot's rename but before the journal cut."""
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 8))
    journal_before = (store.path / "journal.jsonl").read_bytes()
    snapshot(store, 5)
    store.close()
    (store.path / "journal.jsonl").write_bytes(journal_before)  # the cut never happened
    recovered = FileStore(tmp_path, "counter", KEY).recover()
    assert [e.seq for e in recovered.journal] == [6, 7, 8]
    again = FileStore(tmp_path, "counter", KEY)
    again.recover()
    again.append(entries(9, 9))
    snapshot(again, 9)  # a second cut over an overlapping archive
    again.close()
    assert state(FileStore(tmp_path, "counter", KEY).recover()) == list(range(1, 10))


def test_leftovers_of_interrupted_writes_are_ignored_then_removed(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 4))
    snapshot(store, 2)
    for leftover in ("snapshot-4.jsonl.tmp", "snapshot-4.index.bin", "journal.jsonl.tmp",
                     "snapshot-3.index.bin.tmp"):
        (store.path / leftover).write_bytes(b"half written")
    recovered = FileStore(tmp_path, "counter", KEY).recover()
    assert recovered.header is not None and recovered.header.seq == 2 and recovered.last_seq == 4
    snapshot(store, 4)
    assert names(store.path) == {"key.json", "journal.jsonl", "snapshot-2.jsonl", "snapshot-4.jsonl",
                                 "journal-3-4.jsonl"}
    store.close()


def test_a_torn_tail_is_cut_before_the_next_append_even_without_recover(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 3))
    store.close()
    journal = store.path / "journal.jsonl"
    journal.write_bytes(journal.read_bytes()[:-7])
    again = FileStore(tmp_path, "counter", KEY)
    again.append(entries(3, 3))
    again.close()
    assert [e.seq for e in FileStore(tmp_path, "counter", KEY).recover().journal] == [1, 2, 3]


def test_recover_cuts_a_torn_tail_on_disk(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 3))
    journal = store.path / "journal.jsonl"
    whole = journal.read_bytes()
    os.truncate(journal, len(whole) - 1)
    assert store.recover().last_seq == 2
    assert journal.read_bytes() == whole[: whole.rindex(b"\n", 0, len(whole) - 1) + 1]
    store.append(entries(3, 3))
    store.close()
    assert FileStore(tmp_path, "counter", KEY).recover().last_seq == 3


# -- files only: faults ---------------------------------------------------------------


def test_a_full_disk_keeps_no_partial_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 3))
    journal = store.path / "journal.jsonl"
    before = journal.read_bytes()
    real_write = os.write
    calls = []

    def write_half_then_fail(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write_half_then_fail)
    with pytest.raises(StorageError, match=r"journal\.jsonl.*No space left on device \(ENOSPC\)") as caught:
        store.append(entries(4, 6))
    monkeypatch.undo()
    assert isinstance(caught.value.__cause__, OSError)
    assert journal.read_bytes() == before
    assert FileStore(tmp_path, "counter", KEY).recover().last_seq == 3
    store.append(entries(4, 6))  # the same seqs are accepted once the disk has room
    store.close()
    assert FileStore(tmp_path, "counter", KEY).recover().last_seq == 6


def test_when_the_partial_line_cannot_be_removed_the_store_refuses_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 2))
    real_write = os.write

    def partial(fd: int, data: bytes) -> int:
        if len(data) > 5:
            return real_write(fd, bytes(data)[:5])
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "write", partial)
    monkeypatch.setattr(os, "ftruncate", no_truncate)
    with pytest.raises(StorageError, match="refuses writes"):
        store.append(entries(3, 3))
    monkeypatch.undo()
    with pytest.raises(StorageError, match="refuses writes"):
        store.append(entries(3, 3))
    assert store.recover().last_seq == 2  # reloading the actor cuts the partial line
    store.append(entries(3, 3))
    store.close()
    assert FileStore(tmp_path, "counter", KEY).recover().last_seq == 3


def test_a_failed_fsync_is_a_storage_error_and_stops_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 1))

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError, match="could not fsync"):
        store.sync()
    monkeypatch.undo()
    with pytest.raises(StorageError, match="refuses writes"):
        store.append(entries(2, 2))
    assert store.recover().last_seq == 1  # the runtime reloads the actor from what the file holds
    store.append(entries(2, 2))
    store.sync()
    store.close()


def test_a_cut_that_fails_refuses_writes_until_recover_makes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 3))

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "ftruncate", no_truncate)
    with pytest.raises(StorageError, match=r"could not cut journal .* after seq 1: Input/output error"):
        store.cut_after(1)
    assert store.needs_recovery
    with pytest.raises(StorageError, match="refuses writes"):
        store.append(entries(2, 2))
    store.close()  # a closed store still owes the cut
    assert store.needs_recovery
    monkeypatch.undo()
    assert store.recover().last_seq == 1
    assert not store.needs_recovery
    store.append(entries(2, 2))
    store.close()
    assert state(FileStore(tmp_path, "counter", KEY).recover()) == [1, 2]


@pytest.mark.parametrize("refusal", ["not owner", "lock held"])
def test_a_cut_the_fence_refuses_refuses_writes_until_recover_makes_it(tmp_path: Path, refusal: str) -> None:
    # the lease lapsed (or a takeover held the lock too long) between a line written ahead
    # and its cut: were the store to go on, the next write would follow a line the actor
    # never accepted (appending seq 2 after 2)
    import contextlib

    from mnemex.errors import MnemexError, NotOwner

    owned = [True]

    @contextlib.contextmanager
    def fence() -> Iterator[None]:
        if not owned[0]:
            if refusal == "not owner":
                raise NotOwner("virtual shard 7 is not ours now", vshard=7)
            raise StorageError("virtual shard 7 is not ours now: its lock stayed held")
        yield

    store = FileStore(tmp_path, "counter", KEY, fence=fence)
    store.append(entries(1, 2))
    owned[0] = False
    with pytest.raises(MnemexError, match="virtual shard 7 is not ours now"):
        store.cut_after(1)
    owned[0] = True  # taken back
    assert store.needs_recovery
    with pytest.raises(StorageError, match=r"could not cut .* after seq 1: virtual shard 7 is not ours"):
        store.append(entries(2, 2))
    assert store.recover().last_seq == 1
    store.append(entries(2, 2))
    owned[0] = False
    with pytest.raises(MnemexError):
        store.cut_after(2)  # refused, but there was nothing to cut: nothing owed
    assert not store.needs_recovery
    owned[0] = True
    store.append(entries(3, 3))
    store.close()
    assert state(FileStore(tmp_path, "counter", KEY).recover()) == [1, 2, 3]


def test_cutting_every_line_of_a_new_actor_leaves_nothing_on_disk(tmp_path: Path) -> None:
    # what the kernel does for a first command that changed nothing: its line was written ahead
    store = FileStore(tmp_path / "data", "counter", ("a.b", "c"))
    store.append(entries(1, 2))
    store.cut_after(0)
    assert not (tmp_path / "data").exists()
    assert not store.exists()
    store.append(entries(1, 1))  # the next write creates them again
    store.sync()
    store.close()
    assert state(FileStore(tmp_path / "data", "counter", ("a.b", "c")).recover()) == [1]


def test_cutting_every_line_removes_only_the_folders_its_own_write_made(tmp_path: Path) -> None:
    data = tmp_path / "data"
    other = FileStore(data, "counter", ("someone", "else"))
    other.append(entries(1, 1))
    other.sync()
    store = FileStore(data, "counter", ("a.b", "c"))
    for _ in range(2):  # made, cut and gone, then the same again
        store.append(entries(1, 2))
        made = [folder for folder in (store.path, *store.path.parents) if folder.is_relative_to(data)]
        store.cut_after(0)
        assert not store.exists() and not store.path.exists()
        left = [folder for folder in made if folder.exists()]
        assert left and all(folder in other.path.parents for folder in left)  # (the shared ones)
        assert state(other.recover()) == [1]
    other.close()
    store.close()


def test_cutting_every_line_keeps_a_folder_with_anything_else_in_it(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 2))
    snapshot(store, 2)
    store.append(entries(3, 3))
    store.cut_after(2)
    assert store.exists() and (store.path / "journal.jsonl").exists()
    store.close()
    assert state(FileStore(tmp_path, "counter", KEY).recover()) == [1, 2]


def test_a_cut_reads_the_file_when_the_lines_are_not_from_the_latest_append(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 5))
    store.close()
    again = FileStore(tmp_path, "counter", KEY)  # knows nothing of the lines written
    again.cut_after(3)
    again.append(entries(4, 4))
    again.close()
    assert (store.path / "journal.jsonl").read_bytes() == b"".join(
        encode_entries([line]) for line in entries(1, 4))


def test_lines_cut_while_the_journal_is_cut_do_not_come_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 8))
    real_write_atomic = write_atomic

    def archive_then_cut(path: Path, chunks: list[bytes], **kwargs: bool) -> int:
        written = real_write_atomic(path, chunks, **kwargs)
        store.cut_after(7)  # line 8 was read by the journal cut already
        store.append(entries(8, 9))
        return written

    monkeypatch.setattr(store_module, "write_atomic", archive_then_cut)
    snapshot(store, 5)
    monkeypatch.undo()
    store.append(entries(10, 10))
    store.close()
    assert state(FileStore(tmp_path, "counter", KEY).recover()) == list(range(1, 11))
    snapshot(store, 10)  # the next snapshot cuts the journal
    assert not scan_journal((store.path / "journal.jsonl").read_bytes(), "j").entries


def test_a_failed_snapshot_write_leaves_the_previous_one_and_no_tmp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", KEY)
    store.append(entries(1, 4))
    snapshot(store, 2)

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError, match=r"snapshot-4\.jsonl"):
        snapshot(store, 4)
    monkeypatch.undo()
    assert not any(name.endswith(".tmp") for name in names(store.path))
    recovered = FileStore(tmp_path, "counter", KEY).recover()
    assert recovered.header is not None and recovered.header.seq == 2 and recovered.last_seq == 4
    store.close()


# -- files only: threads ----------------------------------------------------------------


def test_appends_during_snapshots_lose_and_repeat_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "counter", KEY, keep=1000)
    appended = 0
    snapshots_written = 0
    lock = threading.Lock()
    errors: list[BaseException] = []
    done = threading.Event()

    def appender() -> None:
        nonlocal appended
        rng = random.Random(7)
        try:
            while snapshots_written < 12:
                count = rng.randint(1, 40)
                store.append(entries(appended + 1, appended + count))
                with lock:
                    appended += count
                if appended > 500 * (snapshots_written + 1):
                    time.sleep(0.0005)  # let the snapshots keep up; they still overlap appends
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def snapshotter() -> None:
        nonlocal snapshots_written
        last = 0
        try:
            while not done.is_set():
                with lock:
                    seq = appended
                if seq > last:
                    # Small records: what is under test is the journal cut, not the body.
                    store.write_snapshot(seq, T0, [b"%d" % seq], created=T0)
                    snapshots_written += 1
                    last = seq
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=appender), threading.Thread(target=snapshotter)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert snapshots_written >= 12
    store.close()

    # Archives go back to the oldest snapshot kept; from there every seq is kept exactly once.
    oldest = min(int(name.split("-")[1].split(".")[0]) for name in names(store.path)
                 if name.startswith("snapshot-"))
    seqs: list[int] = []
    archives = sorted((int(name.split("-")[1]), name) for name in names(store.path)
                      if name.startswith("journal-"))
    for _first, name in archives:
        seqs += [e.seq for e in scan_journal((store.path / name).read_bytes(), name).entries]
    seqs += [e.seq for e in scan_journal((store.path / "journal.jsonl").read_bytes(), "j").entries]
    assert seqs == list(range(oldest + 1, appended + 1))
    recovered = FileStore(tmp_path, "counter", KEY).recover()
    assert recovered.header is not None
    assert list(recovered.records) == [b"%d" % recovered.header.seq]
    assert [e.seq for e in recovered.journal] == list(range(recovered.header.seq + 1, appended + 1))
