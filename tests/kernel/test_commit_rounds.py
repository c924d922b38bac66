"""How a group-commit round makes its journals durable: a round of a few journals
syncs each one (a filesystem-wide sync would also wait for every other file's
writes), a round of many syncs the filesystem once."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import pytest
import trio
import trio.testing

from mnemex.errors import StorageError
from mnemex.kernel._commit import GroupCommitter, hold


class Journal:
    """A Durable that counts how it was made durable."""

    def __init__(self) -> None:
        self.written = 1
        self.synced = 0
        self.acks: deque[tuple[int, Callable[[BaseException | None], None]]] | None = None
        self.syncs = 0
        self.covers = 0

    def sync(self) -> None:
        self.syncs += 1

    def covered(self) -> None:
        self.covers += 1


@pytest.mark.parametrize(("journals", "whole_filesystem"), [(1, False), (4, False), (5, True), (40, True)])
async def test_a_round_syncs_few_journals_one_by_one_and_many_with_one_filesystem_sync(
        journals: int, whole_filesystem: bool) -> None:
    filesystem_syncs = 0

    def sync_filesystem() -> bool:
        nonlocal filesystem_syncs
        filesystem_syncs += 1
        return True

    committer = GroupCommitter(0.0, threads=4, sync_filesystem=sync_filesystem, few=4)
    cells = [Journal() for _ in range(journals)]
    released: list[BaseException | None] = []
    all_released = trio.Event()

    def release(error: BaseException | None) -> None:
        released.append(error)
        if len(released) == journals:
            all_released.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(committer.run)
        await trio.testing.wait_all_tasks_blocked()
        for cell in cells:
            committer.submit(cell, release)
        with trio.fail_after(5):
            await all_released.wait()
        nursery.cancel_scope.cancel()
    assert released == [None] * journals
    assert filesystem_syncs == (1 if whole_filesystem else 0)
    assert [c.syncs for c in cells] == [0 if whole_filesystem else 1] * journals
    assert [c.covers for c in cells] == [1 if whole_filesystem else 0] * journals


class Broken(Journal):
    """A journal whose sync raises what no store should: a bug."""

    def sync(self) -> None:
        raise RuntimeError("sync bug")


async def test_a_sync_that_raises_unexpectedly_fails_its_journals_and_the_commits_go_on() -> None:
    committer = GroupCommitter(0.0, threads=2)
    outcomes: list[BaseException | None] = []
    first, released = trio.Event(), trio.Event()

    def release(error: BaseException | None) -> None:
        outcomes.append(error)
        (first if len(outcomes) == 1 else released).set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(committer.run)
        await trio.testing.wait_all_tasks_blocked()
        committer.submit(Broken(), release)
        with trio.fail_after(5):
            await first.wait()
        good = Journal()
        committer.submit(good, release)  # the committer still runs
        with trio.fail_after(5):
            await released.wait()
        nursery.cancel_scope.cancel()
    assert isinstance(outcomes[0], StorageError) and "sync bug" in str(outcomes[0])
    assert outcomes[1] is None and good.syncs == 1


async def test_the_committer_ends_after_the_syncs_under_way_and_stops_its_threads() -> None:
    gate = threading.Event()
    entered = threading.Semaphore(0)

    class Slow(Journal):
        def sync(self) -> None:
            entered.release()
            assert gate.wait(10)
            super().sync()

    committer = GroupCommitter(0.0, threads=3)
    cells = [Slow() for _ in range(8)]
    released: list[BaseException | None] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(committer.run)
        await trio.testing.wait_all_tasks_blocked()
        for cell in cells:
            committer.submit(cell, released.append)
        for _ in range(3):  # one round of three chunks: three threads, each in its first sync
            assert await trio.to_thread.run_sync(entered.acquire, True, 10)
        workers = list(committer._workers)
        assert len(workers) == 3  # never more threads than configured
        nursery.cancel_scope.cancel()  # run() waits for what its threads are syncing
        threading.Timer(0.1, gate.set).start()
    assert released == [None] * 8 and all(cell.syncs == 1 for cell in cells)
    for worker in workers:
        worker.join(5)
        assert not worker.is_alive()


async def test_a_round_that_cannot_start_a_thread_fails_its_journals(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    committer = GroupCommitter(0.0, threads=2)
    outcomes: list[BaseException | None] = []
    released = trio.Event()

    def release(error: BaseException | None) -> None:
        outcomes.append(error)
        released.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(committer.run)
        await trio.testing.wait_all_tasks_blocked()
        committer.submit(Journal(), release)
        with trio.fail_after(5):
            await released.wait()
        nursery.cancel_scope.cancel()
    assert isinstance(outcomes[0], StorageError) and "could not start a thread" in str(outcomes[0])


def test_rounds_of_one_journal_are_released_in_their_order_whatever_order_they_report_in() -> None:
    # round 1 (write A, mark 1) and round 2 (write B, mark 2) overlap; round 2's fsync
    # reports success first, round 1's failure after: A must be answered the failure
    # (a later fsync of the file can succeed past a lost write), never durable
    committer = GroupCommitter(window=0.0)
    journal = Journal()
    answered: list[tuple[str, BaseException | None]] = []
    hold(journal, 1, lambda error: answered.append(("A", error)))
    committer._note_round([journal])
    journal.written = 2
    hold(journal, 2, lambda error: answered.append(("B", error)))
    committer._note_round([journal])
    committer._release_in_order(journal, 2, None)
    assert answered == [] and journal.synced == 0  # round 1 has not reported
    failure = StorageError("fsync failed: EIO")
    committer._release_in_order(journal, 1, failure)
    assert answered[0] == ("A", failure)
    assert [name for name, _ in answered] == ["A", "B"] and not committer._pending
    # in order, each is released as it reports
    journal.written = 3
    hold(journal, 3, lambda error: answered.append(("C", error)))
    committer._note_round([journal])
    committer._release_in_order(journal, 3, None)
    assert answered[-1] == ("C", None) and journal.synced == 3
    assert journal.acks is None  # a journal waiting for no fsync keeps no queue
