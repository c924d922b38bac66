"""The shutdown says what it did: how many actors it closed and snapshotted, and,
at ERROR, which final snapshots failed; it never claims every actor was
snapshotted when one was not. A failed snapshot loses nothing: the journal has it."""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

import mnemex
from mnemex.lowlevel import ShutdownReport
from mnemex.persistence import store as store_module
from mnemex.persistence.snapshot import write_snapshot_stream
from mnemex.testing import Add, Get, counter_kind


def fail_snapshots_of(monkeypatch: pytest.MonkeyPatch, doomed: Callable[[Path], bool]) -> None:
    """Make writing a snapshot fail with EMFILE for the actors whose folder ``doomed`` picks."""
    def write(folder: Path, *args: Any, **kwargs: Any) -> None:
        if doomed(folder):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        write_snapshot_stream(folder, *args, **kwargs)

    monkeypatch.setattr(store_module, "write_snapshot_stream", write)


def shutdown_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The shutdown's report lines in the log."""
    return [record for record in caplog.records
            if record.name == "mnemex.runtime" and record.getMessage().startswith("shutdown: ")]


async def test_a_clean_shutdown_reports_every_actor_snapshotted(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mnemex.runtime")
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path)), kinds=[counter_kind()]) as rt:
        for n in range(4):
            await rt.ask("counter", f"c{n}", Add(n))
        await rt.ask("counter", "idle", Get())  # loaded, nothing new: no snapshot needed
    assert rt.shutdown_report == ShutdownReport(closed=5, snapshots=4)
    assert rt.shutdown_report.ok
    [line] = shutdown_lines(caplog)
    assert line.levelno == logging.INFO
    assert line.getMessage() == ("shutdown: 5 actors closed, 4 final snapshots written: every actor "
                                 "snapshotted")


async def test_failed_final_snapshots_are_counted_named_and_logged_at_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mnemex.runtime")
    cfg = mnemex.Config(data_dir=str(tmp_path))
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        for name in ("good1", "bad1", "good2", "bad2"):
            await rt.ask("counter", name, Add(7))
        fail_snapshots_of(monkeypatch, lambda folder: folder.name.startswith("bad"))
    report = rt.shutdown_report
    assert report is not None and not report.ok
    assert (report.closed, report.snapshots) == (4, 2)
    assert sorted(actor for actor, _ in report.failed) == ["counter 'bad1'", "counter 'bad2'"]
    assert all("Too many open files (EMFILE)" in error for _, error in report.failed)
    [line] = shutdown_lines(caplog)
    assert line.levelno == logging.ERROR
    message = line.getMessage()
    assert "4 actors closed, 2 final snapshots written, 2 final snapshots FAILED" in message
    assert "counter 'bad1'" in message and "counter 'bad2'" in message and "EMFILE" in message
    assert "every actor snapshotted" not in message
    monkeypatch.undo()
    # nothing was lost: the journals of the actors without a snapshot still hold their commands
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        for name in ("good1", "bad1", "good2", "bad2"):
            assert await rt.ask("counter", name, Get()) == (7, 1)
    assert rt.shutdown_report is not None and rt.shutdown_report.ok


async def test_many_failures_name_the_first_few_and_count_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mnemex.runtime")
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path)), kinds=[counter_kind()]) as rt:
        for n in range(30):
            await rt.ask("counter", f"c{n}", Add(1))
        fail_snapshots_of(monkeypatch, lambda folder: True)
    report = rt.shutdown_report
    assert report is not None and (report.closed, report.snapshots, len(report.failed)) == (30, 0, 30)
    message = report.describe()
    assert "30 final snapshots FAILED" in message and "; and 25 more" in message
    assert message.count("counter '") == 5
    # one summary at ERROR, not a line per actor
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == [f"shutdown: {message}"]


async def test_closing_twice_gives_the_same_report(tmp_path: Path) -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path)), kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "c", Add(1))
        first = await rt.kernel.aclose()
        assert first == ShutdownReport(closed=1, snapshots=1)
        assert await rt.kernel.aclose() is first
    assert rt.shutdown_report is first


def test_the_client_returns_the_report_when_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = mnemex.Client(mnemex.Config(data_dir=str(tmp_path)), kinds=[counter_kind()])
    client.ask("counter", "ok", Add(1))
    client.ask("counter", "doomed", Add(1))
    fail_snapshots_of(monkeypatch, lambda folder: folder.name == "doomed")
    report = client.close()
    assert report is not None and not report.ok
    assert [actor for actor, _ in report.failed] == ["counter 'doomed'"]
    assert client.close() is report


async def test_a_failed_snapshot_when_passivating_is_logged_for_its_actor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path)), kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "c", Add(1))
        fail_snapshots_of(monkeypatch, lambda folder: True)
        await rt.passivate("counter", "c")
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and errors[0].startswith("counter 'c': final snapshot failed")
        monkeypatch.undo()
        assert await rt.ask("counter", "c", Get()) == (1, 1)  # reloaded from its journal
    assert rt.shutdown_report == ShutdownReport(closed=1, snapshots=1)


async def test_actors_still_closing_when_the_shutdown_times_out_are_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def slow(folder: Path, *args: Any, **kwargs: Any) -> None:
        if folder.name == "slow":
            time.sleep(0.5)  # far past the shutdown's 0.05 s
        write_snapshot_stream(folder, *args, **kwargs)

    cfg = mnemex.Config(data_dir=str(tmp_path), shutdown_timeout=0.05)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "slow", Add(1))
        await rt.ask("counter", "fast", Add(1))
        monkeypatch.setattr(store_module, "write_snapshot_stream", slow)
    assert rt.shutdown_report == ShutdownReport(closed=1, snapshots=1, unfinished=1)
    [line] = shutdown_lines(caplog)
    assert line.levelno == logging.ERROR
    assert line.getMessage() == (
        "shutdown: 1 actor closed, 1 final snapshot written, 1 actor still closing when "
        "config.kernel.shutdown_timeout ran out; their journals hold every accepted command, replayed "
        "when they next load")


def snapshot_seqs(data_dir: Path) -> list[int]:
    """The seq of every snapshot in ``data_dir``, in order."""
    return sorted(int(path.name.split("-")[1].split(".")[0]) for path in data_dir.rglob("snapshot-*.jsonl"))


async def test_a_short_journal_since_the_last_snapshot_is_kept_instead_of_a_final_snapshot(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # a counter's one line is far under 100 times its snapshot: as a few searches' touches
    # are under 1% (the default) of a large scope's
    caplog.set_level(logging.INFO, logger="mnemex.runtime")
    cfg = mnemex.Config(data_dir=str(tmp_path), snapshot_min_growth=100.0)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "c", Add(1))
        await rt.passivate("counter", "c")  # its first snapshot (none to replay the journal on)
        assert snapshot_seqs(tmp_path) == [1]
        await rt.ask("counter", "c", Add(2))
        await rt.passivate("counter", "c")  # not written whole again for one line
        assert snapshot_seqs(tmp_path) == [1]
        assert await rt.ask("counter", "c", Get()) == (3, 2)  # the snapshot, then its journal
    assert rt.shutdown_report == ShutdownReport(closed=1, snapshots=0, journaled=1)
    assert rt.shutdown_report.ok
    [line] = shutdown_lines(caplog)
    assert line.getMessage() == ("shutdown: 1 actor closed, 0 final snapshots written, 1 actor left to a "
                                 "short journal since its last snapshot (config.storage.snapshot_min_growth): "
                                 "every state kept")
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path)), kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "c", Add(3)) == 6
    # by the default share the counter's journal is long enough: snapshotted
    assert rt.shutdown_report == ShutdownReport(closed=1, snapshots=1)
    assert snapshot_seqs(tmp_path) == [1, 3]


async def test_a_behaviour_that_wants_a_snapshot_gets_one_at_close_however_short_its_journal(
        tmp_path: Path) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path), snapshot_min_growth=100.0)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "c", Add(1))
        await rt.passivate("counter", "c")
        await rt.ask("counter", "c", Add(2))
        # as a scope that built its HNSW graph beside it (no journal line holds that)
        rt.kernel._cells[("counter", ("c",))].behaviour.snapshot_wanted = True
        await rt.passivate("counter", "c")
        assert snapshot_seqs(tmp_path) == [1, 2]


async def test_a_behaviour_whose_wanted_snapshot_failed_wants_one_still(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemex.testing import Counter

    taken = Counter.snapshot

    def snapshot(self: Any) -> Any:
        self.snapshot_wanted = False  # (as a scope's: taking it clears the wish)
        return taken(self)

    monkeypatch.setattr(Counter, "snapshot", snapshot)
    cfg = mnemex.Config(data_dir=str(tmp_path), snapshot_every=1, snapshot_growth=0.0)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:

        async def added(n: int) -> Any:  # its cell, the snapshot beside it written, or not
            await rt.ask("counter", "c", Add(n))
            cell = rt.kernel._cells[("counter", ("c",))]
            if cell.snapshot_done is not None:
                await cell.snapshot_done.wait()
            return cell

        cell = await added(1)
        cell.behaviour.snapshot_wanted = True
        fail_snapshots_of(monkeypatch, lambda folder: True)
        await added(1)  # a snapshot due, taken, and not written
        assert cell.behaviour.snapshot_wanted
        monkeypatch.setattr(store_module, "write_snapshot_stream", write_snapshot_stream)
        await added(1)
        assert not cell.behaviour.snapshot_wanted


@pytest.mark.parametrize(("share", "expected"), [(1000.0, [2]), (0.0, [2, 3])])
async def test_a_snapshot_due_by_time_waits_for_the_journal_to_grow_past_its_share(
        tmp_path: Path, mock_clock: MockClock, share: float, expected: list[int]) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path), snapshot_interval=10.0, snapshot_min_growth=share)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "c", Add(1))
        mock_clock.jump(11)
        await rt.ask("counter", "c", Add(1))  # due by time, and no snapshot yet: written beside
        for _ in range(1000):  # (in a worker thread: real time, 5 s at most)
            if snapshot_seqs(tmp_path) == [2]:
                break
            await trio.to_thread.run_sync(time.sleep, 0.005)
        mock_clock.jump(11)
        await rt.ask("counter", "c", Add(1))  # due by time again, with one line since the snapshot
        await rt.passivate("counter", "c")  # waits for a snapshot beside; its final one is not due
        assert snapshot_seqs(tmp_path) == expected
        assert await rt.ask("counter", "c", Get()) == (3, 3)


async def test_a_short_journal_kept_at_close_is_synced_even_with_fsync_never(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a final snapshot's own fsync made the state durable: the journal kept instead is)
    synced: list[str] = []
    sync = store_module.FileStore.sync

    def noted(store: store_module.FileStore) -> None:
        synced.append(store.key[0])
        sync(store)

    monkeypatch.setattr(store_module.FileStore, "sync", noted)
    cfg = mnemex.Config(data_dir=str(tmp_path), fsync="never", snapshot_min_growth=100.0)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "c", Add(1))
        await rt.passivate("counter", "c")  # a snapshot
        await rt.ask("counter", "c", Add(2))
        assert synced == []  # fsync "never"
    assert rt.shutdown_report == ShutdownReport(closed=1, snapshots=0, journaled=1)
    assert synced == ["c"]
