"""Group commit: one fsync covers every journal line written since the last one.

An actor writes its batch of journal lines (a page-cache write), hands its
replies to the committer and goes straight on to its next batch. The committer
fsyncs every dirty journal in a few worker threads at once and releases, per
actor and in order, each reply whose lines are now durable.

The worker threads are the committer's own, kept for the run: a round hands its
journals to them through a queue and each reports back with one callback on the
trio run (``TrioToken.run_sync_soon``) that releases the replies itself. That is
two thread wake-ups a round and no trio task; ``trio.to_thread`` would add a task
per journal chunk and its own hand-offs to every acknowledged write.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeAlias

import trio

from mnemex.errors import MnemexError, StorageError

__all__ = ["Durable", "GroupCommitter", "hold", "release_through"]

log = logging.getLogger("mnemex.runtime")

_UNREPORTED: Final = object()
"""A round's outcome not reported yet (``GroupCommitter._pending``)."""


class Durable(Protocol):
    """What the committer needs of an actor: a sync call and its ack queue."""

    written: int
    """Number of journal writes made so far (a monotonic mark)."""
    synced: int
    """Highest write mark known to be durable."""
    acks: deque[tuple[int, Callable[[BaseException | None], None]]] | None
    """(mark, release) in order: release(None) once durable, release(error) if not;
    None while there are none (``hold`` makes it: an empty deque is 760 bytes, and
    most live actors wait for no fsync)."""

    def sync(self) -> None: ...

    def covered(self) -> None:
        """Note that a filesystem-wide sync made this actor's writes durable."""


def hold(cell: Durable, mark: int, release: Callable[[BaseException | None], None]) -> None:
    """Queue ``release`` to be called once ``cell``'s writes through ``mark`` are
    durable (or could not be made so)."""
    acks = cell.acks
    if acks is None:
        cell.acks = acks = deque()
    acks.append((mark, release))


def release_through(cell: Durable, mark: int, error: BaseException | None) -> None:
    """Release, in order, every ack of ``cell`` whose mark is <= ``mark``."""
    if error is None and mark > cell.synced:
        cell.synced = mark
    acks = cell.acks
    while acks and acks[0][0] <= mark:
        acks.popleft()[1](error)
    if acks is not None and not acks and cell.acks is acks:
        cell.acks = None


class ParkedRun(trio.abc.Instrument):
    """Holds ``lock`` while the run executes and lets go of it only while the run
    waits for I/O, after the end-of-batch work of the committer: whoever takes it
    then has the run stopped until it lets go (the run waits for it before going
    on), so it may use the kernel's own state (cells, the committer's round) that
    only the run's thread touches otherwise (the blocking bridge answers a read, or
    journals a write, in the caller's thread so). Not trio's own state: between
    the I/O wait and taking the lock back, trio processes the I/O events (waking
    tasks) without it, so a parked caller must never touch a trio object (an
    Event, a task, the run queue). ``wanted``
    while the run waits to take it back: callers then leave it alone (a lock is not
    fair, and callers reading in a loop would starve the run)."""

    def __init__(self, at_end_of_batch: Callable[[], None]) -> None:
        self._at_end_of_batch = at_end_of_batch
        self.lock = threading.Lock()
        self.lock.acquire()  # taken in the run's thread, which is executing
        self.wanted = False

    def before_io_wait(self, timeout: float) -> None:
        try:
            self._at_end_of_batch()
        except Exception:  # an instrument that raises is dropped by trio, the lock let go for good
            log.exception("group commit: starting a round failed")
        self.lock.release()

    def after_io_wait(self, timeout: float) -> None:
        if not self.lock.acquire(blocking=False):
            self.wanted = True
            self.lock.acquire()
            self.wanted = False


_Sync: TypeAlias = Callable[[list[Durable]], list[BaseException | None]]
_Job: TypeAlias = tuple[_Sync, list[Durable], list[int], list[int]]


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
        self._dirty: dict[int, Durable] = {}
        self._wake: trio.Event | None = None
        self.fsyncs = 0
        self.rounds = 0
        self.fsync_seconds: deque[float] = deque(maxlen=1024)
        # the worker threads (at most ``threads``), their queue, and the chunks handed
        # to them whose outcome has not come back yet
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._in_flight = 0
        # per journal (id of its cell), the marks of its rounds under way, oldest first,
        # each with its outcome once reported: outcomes are released in this order only
        self._pending: dict[int, deque[list[Any]]] = {}
        self._drained: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._hooked = False  # the run calls _at_end_of_batch: submit need not wake the loop
        self.parked: ParkedRun | None = None
        """While ``run`` runs (with no ``window``): the run's lock (see ParkedRun)."""
        self.report_via: Callable[..., object] | None = None
        """A guest run's host loop's ``call_soon_threadsafe``: the threads report there
        (see ``report_to_host``) rather than by waking the run."""

    def submit(self, cell: Durable, release: Callable[[BaseException | None], None]) -> None:
        """Release ``release`` once everything ``cell`` has written so far is durable."""
        mark = cell.written
        if mark <= cell.synced:
            release(None)
            return
        hold(cell, mark, release)
        self._dirty[id(cell)] = cell
        if self._wake is not None and not self._hooked:
            self._wake.set()
            self._wake = None

    def _at_end_of_batch(self, *, wake: bool = True) -> None:
        """Called by the run each time it has run every runnable task and is about to
        wait for I/O (an instrument, with no ``window``): start the round of the
        journals written meanwhile there and then, or have the loop start it once a
        round's slot is free. Every submit of the batch is in that round, as when
        the loop's task starts it in the next batch, a batch of scheduling sooner."""
        if not self._dirty:
            return
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            if wake and self._wake is not None:
                self._wake.set()
                self._wake = None
            return
        cells = list(self._dirty.values())
        self._dirty = {}
        self.rounds += 1
        self.fsyncs += len(cells)
        self._start_round(cells)

    async def run(self) -> None:
        """The commit loop; runs until cancelled (after every actor flushed), then
        waits for the syncs under way and ends its threads. Up to ``rounds`` rounds
        overlap, so a line written while a round is on disk does not wait for that
        round to end before its own starts."""
        self._token = trio.lowlevel.current_trio_token()
        hook = None
        if self._window <= 0:
            hook = self.parked = ParkedRun(self._at_end_of_batch)
            trio.lowlevel.add_instrument(hook)
            self._hooked = True
        try:
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
                self._start_round(cells)
        finally:
            if hook is not None:
                self._hooked = False
                self.parked = None
                with contextlib.suppress(KeyError):  # trio removed it if it ever raised
                    trio.lowlevel.remove_instrument(hook)  # taken by the run: it stays so
            with trio.CancelScope(shield=True):
                while self._in_flight:
                    self._drained = drained = trio.Event()
                    await drained.wait()
            for _ in self._workers:
                self._jobs.put(None)
            self._workers = []

    def round_from_parked(self) -> None:
        """From a thread holding ``parked.lock`` (the run is stopped): start the round
        of what was written there, as the end of a batch would, rather than wake the
        run for it. Nothing when every slot is taken: a round under way reports, and
        the run (or the host loop, see ``report_to_host``) then starts the next one.
        Nothing with a ``window`` either: the commit loop waits it out first."""
        if self._hooked:
            self._at_end_of_batch(wake=False)

    def _start_round(self, cells: list[Durable]) -> None:
        """Hand the round's journals to the threads: one filesystem-wide sync for
        many, else up to ``threads`` chunks synced one journal at a time."""
        if self._sync_filesystem is not None and len(cells) > self._few:
            chunks: list[tuple[_Sync, list[Durable]]] = [(self._sync_whole_fs, cells)]
        else:
            count = min(self._threads, len(cells))
            chunks = [(self._sync_all, cells[i :: self._threads]) for i in range(count)]
        left = [len(chunks)]  # chunks of this round not reported yet: the round's slot is then free
        self._note_round(cells)
        for sync, chunk in chunks:
            self._in_flight += 1
            if self._in_flight > len(self._workers) and len(self._workers) < self._threads:
                worker = threading.Thread(target=self._work, name="mnemex-fsync", daemon=True)
                try:
                    worker.start()
                except RuntimeError as exc:  # no thread to be had now: the ones there will do
                    if not self._workers:  # reported as a thread would (this may run in a hook)
                        errors: list[BaseException | None] = [
                            StorageError(f"fsync: could not start a thread: {exc}")] * len(chunk)
                        assert self._token is not None
                        self._token.run_sync_soon(self._report, chunk, [cell.written for cell in chunk],
                                                  errors, left)
                        continue
                else:
                    self._workers.append(worker)
            self._jobs.put((sync, chunk, [cell.written for cell in chunk], left))

    def _work(self) -> None:
        """A worker thread: sync what the queue hands it, report each outcome."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._run_job(job)

    def _run_job(self, job: _Job) -> None:
        """Sync one chunk and report its outcome to the run, whatever happens (an
        interrupt too: its journals are then reported not durable)."""
        sync, cells, marks, left = job
        errors: list[BaseException | None] | None = None
        try:
            errors = sync(cells)
        except Exception as exc:  # not a storage error the syncs report: a bug, kept per journal
            log.exception("group commit: a sync failed unexpectedly")
            errors = [StorageError(f"fsync failed: {exc!r}")] * len(cells)
        finally:
            if errors is None:
                errors = [StorageError("fsync interrupted")] * len(cells)
            if not self._to_host(self._report_hosted, cells, marks, errors, left):
                assert self._token is not None
                with contextlib.suppress(trio.RunFinishedError):  # run() waits for every report
                    self._token.run_sync_soon(self._report, cells, marks, errors, left)

    def _to_host(self, callback: Callable[..., None], *args: Any) -> bool:
        """Have the host loop call ``callback(*args)``; False when there is none (or it
        has closed)."""
        via = self.report_via
        if via is None:
            return False
        try:
            via(callback, *args)
        except RuntimeError:  # the loop has closed
            return False
        return True

    def report_to_host(self, call_soon_threadsafe: Callable[..., object] | None) -> None:
        """Report rounds through ``call_soon_threadsafe``, the host loop's of a guest run
        (``trio.lowlevel.start_guest_run``) hosted on the run's thread; None: by
        waking the run (``TrioToken.run_sync_soon``). A report then runs on that
        thread between two ticks of the run, where trio lets the host wake tasks,
        and releases the replies there: a caller waiting in the host loop (the HTTP
        server's) gets its answer without the run taking a turn at all (its I/O
        wait, a thread in guest mode, is not woken, nor its entry queue)."""
        self.report_via = call_soon_threadsafe

    def _report_hosted(self, cells: list[Durable], marks: list[int], errors: list[BaseException | None],
                       left: list[int]) -> None:
        """``_report`` in the host loop, between two ticks of the run: with the run's lock
        (``parked``), which no code of the run holds there, unless another thread has
        it (a blocking caller: then the report goes the run's way). Starts the round
        of what was written meanwhile, as the run's end of a batch would."""
        parked = self.parked
        if parked is not None and not parked.lock.acquire(blocking=False):
            assert self._token is not None
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._report, cells, marks, errors, left)
            return
        try:
            self._report(cells, marks, errors, left)
            if self._hooked:
                self._at_end_of_batch(wake=False)
        finally:
            if parked is not None:
                parked.lock.release()

    def _report(self, cells: list[Durable], marks: list[int], errors: list[BaseException | None],
                left: list[int]) -> None:
        """In the trio run: release what one chunk made durable (or could not)."""
        self._in_flight -= 1
        for cell, mark, error in zip(cells, marks, errors, strict=True):
            try:
                self._release_in_order(cell, mark, error)
            except Exception:  # a callback here must not raise: trio would end the whole run
                log.exception("group commit: releasing the replies of a journal failed")
        left[0] -= 1
        if left[0] == 0:
            self._slots.release()
        if not self._in_flight and self._drained is not None:
            self._drained.set()
            self._drained = None

    def _note_round(self, cells: list[Durable]) -> None:
        """A round of ``cells`` starts: their outcomes are released in round order."""
        for cell in cells:
            self._pending.setdefault(id(cell), deque()).append([cell.written, _UNREPORTED])

    def _release_in_order(self, cell: Durable, mark: int, error: BaseException | None) -> None:
        """Note one round's outcome for ``cell`` and release the outcomes known, oldest
        round first. Rounds of one journal overlap and may report out of order: a later
        round's success must not release the replies of an earlier round before that
        round's outcome is known (the earlier one may have failed, and a later fsync of
        the same file can succeed past a lost write: Linux reports a writeback error
        once), so it waits for the earlier round."""
        pending = self._pending.get(id(cell))
        if pending is None:  # (not started by a round: released as it comes)
            release_through(cell, mark, error)
            return
        for entry in pending:
            if entry[0] == mark and entry[1] is _UNREPORTED:
                entry[1] = error
                break
        else:
            release_through(cell, mark, error)
            return
        while pending and pending[0][1] is not _UNREPORTED:
            done_mark, done_error = pending.popleft()
            release_through(cell, done_mark, done_error)
        if not pending:
            del self._pending[id(cell)]

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
