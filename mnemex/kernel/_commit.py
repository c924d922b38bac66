"""Group commit: one fsync covers every journal line written since the last one.

An actor writes its batch of journal lines (a page-cache write), hands its
replies to the committer and goes straight on to its next batch. The committer
fsyncs every dirty journal in a few worker threads at once and releases, per
actor and in order, each reply whose lines are now durable.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio

from mnemex.errors import MnemexError, StorageError

__all__ = ["Durable", "GroupCommitter"]

log = logging.getLogger("mnemex.runtime")


class Durable(Protocol):
    """What the committer needs of an actor: a sync call and its ack queue."""

    written: int
    """Number of journal writes made so far (a monotonic mark)."""
    synced: int
    """Highest write mark known to be durable."""
    acks: deque[tuple[int, Callable[[BaseException | None], None]]]
    """(mark, release) in order: release(None) once durable, release(error) if not."""

    def sync(self) -> None: ...

    def covered(self) -> None:
        """Note that a filesystem-wide sync made this actor's writes durable."""


def release_through(cell: Durable, mark: int, error: BaseException | None) -> None:
    """Release, in order, every ack of ``cell`` whose mark is <= ``mark``."""
    if error is None and mark > cell.synced:
        cell.synced = mark
    acks = cell.acks
    while acks and acks[0][0] <= mark:
        acks.popleft()[1](error)


class GroupCommitter:
    """Batches fsyncs across actors. ``submit`` never blocks the caller.

    One round at a time takes every journal written since the previous round
    and fsyncs them in up to ``threads`` worker threads at once: while a round
    is on disk the next one gathers (leader/follower group commit), so an idle
    system commits at once and a busy one commits many lines per fsync.
    ``window`` adds a wait before each round to gather even more. With
    ``sync_filesystem`` a round syncs the whole filesystem at once, unless it
    holds at most ``few`` journals: those are synced one by one.
    """

    def __init__(self, window: float, threads: int = 4, rounds: int = 3,
                 sync_filesystem: Callable[[], bool] | None = None, few: int = 0) -> None:
        self._window = window
        self._sync_filesystem = sync_filesystem
        self._few = few
        self._slots = trio.Semaphore(rounds)
        self._threads = threads
        self._limiter = trio.CapacityLimiter(threads)
        self._dirty: dict[int, Durable] = {}
        self._wake: trio.Event | None = None
        self.fsyncs = 0
        self.rounds = 0
        self.fsync_seconds: deque[float] = deque(maxlen=1024)

    def submit(self, cell: Durable, release: Callable[[BaseException | None], None]) -> None:
        """Release ``release`` once everything ``cell`` has written so far is durable."""
        mark = cell.written
        if mark <= cell.synced:
            release(None)
            return
        cell.acks.append((mark, release))
        self._dirty[id(cell)] = cell
        if self._wake is not None:
            self._wake.set()
            self._wake = None

    async def run(self) -> None:
        """The commit loop; runs until cancelled (after every actor flushed). Up to
        ``rounds`` rounds overlap, so a line written while a round is on disk
        does not wait for that round to end before its own starts."""
        async with trio.open_nursery() as nursery:
            while True:
                if not self._dirty:
                    self._wake = wake = trio.Event()
                    await wake.wait()
                if self._window > 0:
                    await trio.sleep(self._window)
                await self._slots.acquire()
                cells = list(self._dirty.values())
                self._dirty = {}
                if not cells:
                    self._slots.release()
                    continue
                self.rounds += 1
                self.fsyncs += len(cells)
                nursery.start_soon(self._round, cells)

    async def _round(self, cells: list[Durable]) -> None:
        try:
            if self._sync_filesystem is not None and len(cells) > self._few:
                marks = [cell.written for cell in cells]
                errors = await trio.to_thread.run_sync(self._sync_whole_fs, cells, limiter=self._limiter)
                for cell, mark, error in zip(cells, marks, errors, strict=True):
                    release_through(cell, mark, error)
                return
            chunks = [cells[i :: self._threads] for i in range(min(self._threads, len(cells)))]
            async with trio.open_nursery() as nursery:
                for chunk in chunks:
                    nursery.start_soon(self._sync_chunk, chunk)
        finally:
            self._slots.release()

    async def _sync_chunk(self, cells: list[Durable]) -> None:
        marks = [cell.written for cell in cells]
        errors = await trio.to_thread.run_sync(self._sync_all, cells, limiter=self._limiter)
        for cell, mark, error in zip(cells, marks, errors, strict=True):
            release_through(cell, mark, error)

    def _sync_whole_fs(self, cells: list[Durable]) -> list[BaseException | None]:
        """One syncfs for every journal of the round (see DataDir.syncfs)."""
        assert self._sync_filesystem is not None
        started = time.perf_counter()
        try:
            done = self._sync_filesystem()
        except MnemexError as exc:
            return [exc] * len(cells)
        if not done:  # no syncfs here after all: fall back to a sync per journal, for good
            self._sync_filesystem = None
            return self._sync_all(cells)
        self.fsync_seconds.append(time.perf_counter() - started)
        out: list[BaseException | None] = []
        for cell in cells:
            try:
                cell.covered()
            except MnemexError as exc:
                out.append(exc)
            else:
                out.append(None)
        return out

    def _sync_all(self, cells: list[Durable]) -> list[BaseException | None]:
        out: list[BaseException | None] = []
        for cell in cells:
            started = time.perf_counter()
            try:
                cell.sync()
            except MnemexError as exc:
                out.append(exc)
            except OSError as exc:
                out.append(StorageError(f"fsync failed: {exc}"))
            else:
                out.append(None)
            self.fsync_seconds.append(time.perf_counter() - started)
        return out
