"""A write whose journal line cannot be written, or cannot be made durable, answers
only its own caller: the reads beside it are answered from the state without it,
the write is never visible afterwards (nor after a restart), and the next write,
once the disk is back, is durable. A write that cannot be written does not reload
the actor (its line is written before it is applied); one whose fsync fails is
undone by reloading the actor from what is durable.

Faults come from a storage backend (``FlakyStorage``) whose stores keep their
journals in memory and fail a write or an fsync on demand; the ordering inside a
batch is set up by holding the actor's load until every message is queued."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import mnemex
from mnemex.errors import MnemexError, StorageError
from mnemex.lowlevel import open_actor_runtime
from mnemex.persistence import MemoryStore, Recovered
from mnemex.testing import Add, Crash, Fail, Get, counter_kind

KEY = ("c",)


class FlakyStore(MemoryStore):
    """A store in memory whose writes and fsyncs fail while its storage says so. Not
    a MemoryStore to the kernel (its type differs), so the configured fsync policy
    applies: replies wait for a group commit that calls ``sync``. Lines written
    since the last good sync are what a crash may lose (``crash()``)."""

    def __init__(self, storage: FlakyStorage, kind: str, key: tuple[str, ...], keep: int) -> None:
        super().__init__(kind, key, keep=keep)
        self.storage = storage
        self.broken = False
        self.durable = 0

    def append(self, entries: Sequence[tuple[int, int, bytes]]) -> None:
        if self.broken:
            raise StorageError("journal refuses writes until it is recovered")
        if self.storage.full:
            raise StorageError("could not append to the journal: No space left on device (ENOSPC)")
        super().append(entries)

    def sync(self) -> None:
        if self.broken:
            raise StorageError("journal refuses writes until it is recovered")
        if self.storage.fsync_fails:
            self.broken = True
            raise StorageError("could not fsync the journal: Input/output error (EIO)")
        self.storage.syncs += 1
        self.durable = self._last_seq or 0

    @property
    def needs_recovery(self) -> bool:
        return self.broken

    def recover(self) -> Recovered:
        self.storage.recoveries += 1
        gate = self.storage.load_gate
        if gate is not None:
            assert gate.wait(10), "the test never opened the load gate"
        self.broken = False
        return super().recover()

    def commands(self) -> list[Any]:
        """The commands of the journal as it is now."""
        kind = counter_kind()
        return [kind.decode(entry.payload) for entry in super().recover().journal]


class FlakyStorage:
    """The Storage protocol over FlakyStores, with switches for the faults and
    counts of what the kernel asked for."""

    def __init__(self) -> None:
        self.full = False
        self.fsync_fails = False
        self.load_gate: threading.Event | None = None
        self.recoveries = 0
        self.syncs = 0
        self.stores: dict[tuple[str, tuple[str, ...]], FlakyStore] = {}

    def store(self, kind: str, key: tuple[str, ...], keep: int = 2) -> FlakyStore:
        store = self.stores.get((kind, key))
        if store is None:
            store = self.stores[(kind, key)] = FlakyStore(self, kind, key, keep)
        return store

    def syncfs(self) -> bool:
        return False

    def close(self) -> None:
        pass


def seeded(n: int = 1) -> FlakyStorage:
    """Storage whose counter ``c`` already holds Add(n): its first message loads it
    from the store (in a worker thread, where the load gate can hold it)."""
    storage = FlakyStorage()
    storage.store("counter", KEY).append([(1, 1, counter_kind().encode(Add(n)))])
    return storage


def config(**overrides: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=None, restore_backoff=0.0, **overrides)


async def one_batch(rt: Any, storage: FlakyStorage, commands: list[Any]) -> list[Any]:
    """Send ``commands`` so that the actor takes them as one batch, in this order: the
    actor's load is held until every one of them is queued. Their replies, or the
    errors they raised."""
    storage.load_gate = gate = threading.Event()
    outcomes: list[Any] = [None] * len(commands)

    async def ask(index: int, command: Any) -> None:
        try:
            outcomes[index] = await rt.ask("counter", KEY, command)
        except MnemexError as exc:
            outcomes[index] = exc

    async with trio.open_nursery() as nursery:
        for index, command in enumerate(commands):
            nursery.start_soon(ask, index, command)
            await trio.testing.wait_all_tasks_blocked()
        storage.load_gate = None
        gate.set()
    return outcomes


async def test_a_read_beside_a_write_that_cannot_be_written_gets_its_answer() -> None:
    storage = seeded(1)
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        storage.full = True
        before, write, after = await one_batch(rt, storage, [Get(), Add(10), Get()])
        assert before == (1, 1)
        assert isinstance(write, StorageError) and "No space left" in str(write)
        assert after == (1, 1)  # answered, and the refused write is not in it


async def test_a_write_that_cannot_be_written_does_not_reload_the_actor() -> None:
    storage = seeded(1)
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        storage.full = True
        await one_batch(rt, storage, [Add(10), Get(), Add(20)])
        assert storage.recoveries == 1  # the first load, nothing since
        for n in range(5):
            with pytest.raises(StorageError):
                await rt.ask("counter", KEY, Add(n))
            assert await rt.ask("counter", KEY, Get()) == (1, 1)
        assert storage.recoveries == 1
        assert rt.stats().spawns == 1


async def test_a_write_that_could_not_be_written_is_never_seen_again() -> None:
    storage = seeded(1)
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        storage.full = True
        await one_batch(rt, storage, [Add(10)])
        storage.full = False
        assert await rt.ask("counter", KEY, Get()) == (1, 1)
        assert await rt.ask("counter", KEY, Add(2)) == 3
        assert storage.store("counter", KEY).commands() == [Add(1), Add(2)]
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        assert await rt.ask("counter", KEY, Get()) == (3, 2)


async def test_the_next_write_once_the_disk_has_room_is_durable() -> None:
    storage = seeded(1)
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        storage.full = True
        with pytest.raises(StorageError):
            await rt.ask("counter", KEY, Add(10))
        storage.full = False
        syncs = storage.syncs
        assert await rt.ask("counter", KEY, Add(2)) == 3
        assert storage.syncs > syncs  # answered after its fsync (group commit)
        store = storage.store("counter", KEY)
        assert store.durable == 2 and store.commands() == [Add(1), Add(2)]


async def test_writes_in_a_batch_around_a_refused_one_get_consecutive_lines() -> None:
    # each line is written before its command is handled: the refused command's line
    # comes off again, and the write after it gets the next seq
    storage = seeded(1)
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        replies = await one_batch(rt, storage, [Add(2), Fail(), Add(3), Fail(), Fail(), Add(4), Get()])
        assert replies[0] == 3 and replies[2] == 6 and replies[5] == 10 and replies[6] == (10, 4)
        assert all(isinstance(replies[i], mnemex.InvalidInput) for i in (1, 3, 4))
        assert storage.store("counter", KEY).commands() == [Add(1), Add(2), Add(3), Add(4)]
        assert storage.recoveries == 1
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        assert await rt.ask("counter", KEY, Get()) == (10, 4)


async def test_a_crash_in_a_batch_takes_its_line_off_and_the_rest_is_handled() -> None:
    storage = seeded(1)
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        replies = await one_batch(rt, storage, [Add(2), Crash(), Add(3), Get()])
        assert replies[0] == 3 and isinstance(replies[1], mnemex.ActorCrashed)
        assert replies[2:] == [6, (6, 3)]
        assert storage.store("counter", KEY).commands() == [Add(1), Add(2), Add(3)]


async def test_a_read_beside_a_write_whose_fsync_fails_gets_its_answer() -> None:
    storage = seeded(1)
    async with open_actor_runtime(config(fsync="batch"), [counter_kind()], storage=storage) as rt:
        storage.fsync_fails = True
        before, write, after = await one_batch(rt, storage, [Get(), Add(10), Get()])
        storage.fsync_fails = False
        assert before == (1, 1)
        assert isinstance(write, StorageError) and "fsync" in str(write)
        # the read was handled after the write was applied; its answer waited for the
        # write's fsync, and when that failed it was handled again, without the write
        assert after == (1, 1)
        assert await rt.ask("counter", KEY, Get()) == (1, 1)
        # the one reload of a storage fault: the write was applied before its fsync failed
        assert storage.recoveries == 2
        assert await rt.ask("counter", KEY, Add(2)) == 3
        assert storage.store("counter", KEY).durable == 2
        assert storage.store("counter", KEY).commands() == [Add(1), Add(2)]
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        assert await rt.ask("counter", KEY, Get()) == (3, 2)


async def test_writes_after_one_whose_fsync_failed_fail_with_it() -> None:
    # the actor goes on while a group commit is on disk: writes made after the one
    # whose fsync fails hold it in their state, so they are undone and refused too
    storage = seeded(1)
    async with open_actor_runtime(config(fsync="always"), [counter_kind()], storage=storage) as rt:
        storage.fsync_fails = True
        replies = await one_batch(rt, storage, [Add(10), Get(), Add(20), Get()])
        storage.fsync_fails = False
        assert isinstance(replies[0], StorageError) and isinstance(replies[2], StorageError)
        assert replies[1] == replies[3] == (1, 1)
        assert await rt.ask("counter", KEY, Add(2)) == 3
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        assert await rt.ask("counter", KEY, Get()) == (3, 2)


async def test_a_write_whose_fsync_fails_at_shutdown_is_neither_snapshotted_nor_replayed() -> None:
    storage = seeded(1)
    async with open_actor_runtime(config(fsync_window=60.0), [counter_kind()], storage=storage) as rt:
        assert await rt.ask("counter", KEY, Get()) == (1, 1)
        storage.fsync_fails = True
        await rt.tell("counter", KEY, Add(10))
        await trio.testing.wait_all_tasks_blocked()  # applied; its fsync waits for the shutdown's
    report = rt.shutdown_report
    assert report is not None and report.snapshots == 0
    assert "did not become durable" in report.describe()
    assert storage.store("counter", KEY).commands() == [Add(1)]
    storage.fsync_fails = False
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        assert await rt.ask("counter", KEY, Get()) == (1, 1)


async def test_a_line_written_ahead_of_a_refused_command_replays_as_a_refusal() -> None:
    # what a kill -9 between writing a batch's lines and cutting a refused one leaves
    storage = FlakyStorage()
    encode = counter_kind().encode
    storage.store("counter", KEY).append([(1, 1, encode(Add(1))), (2, 1, encode(Fail())),
                                          (3, 1, encode(Add(2)))])
    async with open_actor_runtime(config(), [counter_kind()], storage=storage) as rt:
        assert await rt.ask("counter", KEY, Get()) == (3, 2)
        assert await rt.ask("counter", KEY, Add(3)) == 6


# -- real files ---------------------------------------------------------------------------


async def test_on_disk_a_full_disk_leaves_reads_beside_it_alone(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path))
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "c", Add(1)) == 1

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        loads = rt.kernel.stats().spawns
        with monkeypatch.context() as patch:
            patch.setattr(os, "write", full)
            outcomes: list[Any] = []

            async def ask(command: Any) -> None:
                try:
                    outcomes.append(await rt.ask("counter", "c", command))
                except MnemexError as exc:
                    outcomes.append(exc)

            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(ask, Add(10))
                    nursery.start_soon(ask, Get())
            assert sum(isinstance(outcome, StorageError) for outcome in outcomes) == 4
            assert [outcome for outcome in outcomes if not isinstance(outcome, StorageError)] == [(1, 1)] * 4
        assert rt.kernel.stats().spawns == loads
        assert await rt.ask("counter", "c", Add(2)) == 3
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "c", Get()) == (3, 2)


async def test_on_disk_a_failed_fsync_is_cut_from_the_journal_and_not_snapshotted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path), fsync="batch", fsync_method="fdatasync", snapshot_every=1,
                        snapshot_growth=0.0)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "c", Add(1)) == 1

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        with monkeypatch.context() as patch:
            patch.setattr(os, "fdatasync", failing)
            with pytest.raises(StorageError, match="Input/output error"):
                await rt.ask("counter", "c", Add(10))
        assert await rt.ask("counter", "c", Get()) == (1, 1)
        assert await rt.ask("counter", "c", Add(2)) == 3
    folder = tmp_path / "counters" / "c"
    journals = b"".join(path.read_bytes() for path in sorted(folder.glob("journal*.jsonl")))
    assert b'"n":10' not in journals
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "c", Get()) == (3, 2)


async def test_a_new_actor_whose_first_write_failed_its_fsync_answers_what_comes_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the cut after the failed line takes every file the actor had: its store must
    # not go on owing a recovery (each message would reload it, on and on)
    cfg = mnemex.Config(data_dir=str(tmp_path), fsync="batch", fsync_method="fdatasync")
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        with monkeypatch.context() as patch:
            patch.setattr(os, "fdatasync", failing)
            with pytest.raises(StorageError, match="Input/output error"):
                await rt.ask("counter", "new", Add(10))
        with trio.fail_after(10):
            assert await rt.ask("counter", "new", Get()) == (0, 0)
            assert await rt.ask("counter", "new", Add(2)) == 2
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "new", Get()) == (2, 1)
