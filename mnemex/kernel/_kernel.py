"""The actor kernel: spawn on demand, bounded mailboxes, ask/tell, journaling,
supervision, passivation and snapshots, all inside one trio nursery.

Each live actor is one trio task reading a bounded memory channel. It takes
every message waiting in its mailbox as one batch, writes the journal lines of
its journaled commands in one write, runs the behaviour's ``handle`` on each
(the line of a command it refuses is cut again; a write whose line could not be
written is refused without being handled: see ``Runtime._process``), and hands
the replies to the durability policy: released at once (``never``), after an
fsync of its own (``always``) or after the next group commit (``batch``).
Replies of one actor are released in the order the commands arrived, so
per-sender FIFO holds for replies as for commands.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import itertools
import logging
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import outcome
import trio

from mnemex._gcpause import collector_paused
from mnemex.config import DEFAULT, Config, UseDefault
from mnemex.effects import (
    STOP_WAIT,
    Behaviour,
    Beside,
    Effect,
    Emit,
    Forward,
    Image,
    Job,
    JobResult,
    Key,
    SnapshotData,
    Tell,
)
from mnemex.errors import (
    ActorClosed,
    ActorCrashed,
    Busy,
    InvalidInput,
    MnemexError,
    NotOwner,
    StorageError,
    Timeout,
    UnknownActorKind,
)
from mnemex.kernel._commit import GroupCommitter, ParkedRun, hold, release_through
from mnemex.kernel._deadlines import AskDeadlines
from mnemex.kernel._elsewhere import Elsewhere, HandOver
from mnemex.kernel._kind import ActorKind
from mnemex.kernel._lifecycle import DOWN, FINAL, CellState, Lifecycle
from mnemex.kernel._mailbox import Mailbox, MailboxClosed
from mnemex.kernel._shutdown import ShutdownReport, ShutdownTally
from mnemex.kernel._slices import InlineSlices
from mnemex.kernel._turn import TurnResult, encode_turn, take_turn
from mnemex.persistence import (
    ActorStore,
    DataDir,
    MemoryStore,
    Ownership,
    Recovered,
    Storage,
    check_key,
    open_storage,
    vshard_of,
)

__all__ = ["ActorRef", "Runtime", "RuntimeStats", "ShutdownReport", "Subscription", "open_actor_runtime",
           "rebuild_behaviour"]

log = logging.getLogger("mnemex.runtime")

_MAX_BATCH: Final = 512
_LINGER: Final = 3
# Snapshot writes and loads that run in worker threads at once. Each holds a few
# files open (a snapshot, its sidecars, a journal being cut): bounded here, they
# stay within what storage.max_open_files leaves free, even when a shutdown
# snapshots 20,000 actors. More threads do not go faster (the work is fsyncs to
# one disk and decoding under the GIL): closing, then loading, 2,000 scopes took
# as long with 8 as with trio's default of 40.
_STORE_THREADS: Final = 8


class _Quarantined(Exception):
    """Raised inside a cell's task when it could not be (re)loaded."""


class _Control:
    """Kernel-internal mailbox messages; never reach a behaviour."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_STOP: Final = _Control("stop")
_PASSIVATE: Final = _Control("passivate")


class Subscription:
    """A live feed of one actor's events on one topic (see Runtime.subscribe).

    ``initial`` is the reply to the command handled when the subscription was
    registered (e.g. the history so far): no event is lost or repeated between it
    and the feed. Iterate to receive events; the feed ends when the topic ends
    (an Emit with ``last=True``), and raises Busy if this subscriber fell more
    than ``buffer`` events behind (it was dropped; others are unaffected), or
    ActorClosed when the runtime shuts down. ``aclose()`` unsubscribes at once.
    """

    def __init__(self, topic: str, buffer: int) -> None:
        self.topic = topic
        self.initial: Any = None
        self._send, self._recv = trio.open_memory_channel[Any](buffer)
        self._buffer = buffer
        self.error: BaseException | None = None
        self.closed = False

    def _push(self, event: Any) -> bool:
        """Called by the actor; returns False when this subscriber must be dropped."""
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self._end(Busy(f"subscriber of {self.topic!r} fell {self._buffer:,} events behind "
                           f"and was dropped"))
            return False
        except MailboxClosed:
            return False
        return True

    def _end(self, error: BaseException | None = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self._send.close()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            if self.error is not None:
                raise self.error from None
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.closed = True
        self._recv.close()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Subscribe:
    """Mailbox message: register a subscription and answer ``command`` in one turn."""

    __slots__ = ("command", "subscription")

    def __init__(self, subscription: Subscription, command: Any) -> None:
        self.subscription = subscription
        self.command = command


_UNSET: Final = object()


class _Waiter:
    """The caller's side of one ask: a parked task, rescheduled with the outcome.

    A reply can arrive before the caller has parked (a blocking send returns
    through a checkpoint after the actor already took and answered the
    message); it is then kept in ``early`` and picked up without parking.
    """

    __slots__ = ("done", "early", "parked", "task")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.done = False
        self.parked = False
        self.early: Any = _UNSET

    def abort(self, _: Any) -> trio.lowlevel.Abort:
        self.done = True  # cancelled: the actor will drop the answer
        return trio.lowlevel.Abort.SUCCEEDED

    def resolve(self, value: Any) -> None:
        if self.done:
            return
        self.done = True
        if not self.parked:
            self.early = value
        elif isinstance(value, BaseException):
            trio.lowlevel.reschedule(self.task, outcome.Error(value))
        else:
            trio.lowlevel.reschedule(self.task, outcome.Value(value))


def _unwrap(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


def _overdue(limit: float, kind: str, key: Key, command: Any) -> Timeout:
    return _timeout_error(kind, key, command, limit)


def _timeout_error(kind: str, key: Key, command: Any, limit: float) -> Timeout:
    return Timeout(f"no answer from {kind} {'/'.join(key)!r} to {type(command).__name__} "
                   f"within {limit:g} s; the command may still be applied")


class _Envelope:
    __slots__ = ("command", "waiter")

    def __init__(self, command: Any, waiter: _Waiter | None) -> None:
        self.command = command
        self.waiter = waiter


_LOADING, _RUNNING, _STOPPING = CellState.LOADING, CellState.RUNNING, CellState.STOPPING


def _answers_inline(cell: _Cell) -> bool:
    """Whether ``cell`` answers a read inline now (``ActorKind.inline_read``): loaded
    and running, idle (no task, nothing queued), holding no write that is not
    durable yet, nothing to recover."""
    return not (cell.state is not _RUNNING or cell.active or cell.redo or cell.diverged
                or cell.written > cell.synced or len(cell.mailbox) or cell.behaviour is None
                or (not cell.in_memory and cell.store.needs_recovery))


class _Cell(Lifecycle):
    """A live actor: its mailbox, behaviour, store and bookkeeping."""

    __slots__ = (
        "acks",
        "active",
        "behaviour",
        "closed_event",
        "crash",
        "crash_until",
        "diverged",
        "durable_seq",
        "in_memory",
        "journal_bytes",
        "key",
        "kind",
        "last_active",
        "live_bytes",
        "lost",
        "mailbox",
        "previous",
        "redo",
        "seq",
        "snap_bytes",
        "snap_seq",
        "snap_time",
        "snapshot_done",
        "store",
        "subscribers",
        "synced",
        "ts",
        "written",
    )

    def __init__(self, kind: ActorKind, key: Key, store: ActorStore, mailbox: int, now: float) -> None:
        self.kind = kind
        self.key = key
        self.store = store
        self.in_memory = type(store) is MemoryStore
        self.mailbox: Mailbox[_Envelope] = Mailbox(mailbox)
        self.behaviour: Behaviour | None = None
        self.state = CellState.LOADING
        self.seq = 0
        self.ts = 0
        self.snap_seq = 0
        self.snap_bytes = 0
        self.journal_bytes = 0
        self.snap_time = now
        # set while a snapshot is written beside the actor; done when it is
        self.snapshot_done: trio.Event | None = None
        self.last_active = now
        self.live_bytes = 0  # the behaviour's live_bytes() estimate (kernel.max_live_bytes)
        self.previous: _Cell | None = None
        self.active = False
        self.closed_event: trio.Event | None = None
        self.crash: BaseException | None = None
        self.crash_until = 0.0
        self.written = 0
        self.synced = 0
        self.acks: deque[tuple[int, Callable[[BaseException | None], None]]] | None = None
        self.subscribers: dict[str, list[Subscription]] | None = None
        # the last seq known durable, and whether the behaviour holds a write after it
        # whose fsync failed (it must be reloaded: see Runtime._recover_diverged)
        self.durable_seq = 0
        self.diverged = False
        # messages to handle before the mailbox: reads whose answers were computed on
        # a state that turned out not durable, and the rest of a batch cut short
        self.redo: deque[_Envelope] | None = None
        # its virtual shard's lease was lost: it stops without a snapshot (another
        # process owns its files now) and what waits for it gets this NotOwner
        self.lost: NotOwner | None = None

    def sync(self) -> None:
        self.store.sync()

    def covered(self) -> None:
        self.store.synced_by_fs()

    @property
    def closed(self) -> bool:
        """Its store is closed: a successor may load."""
        return self.state in FINAL

    async def wait_closed(self) -> None:
        if not self.closed:
            if self.closed_event is None:
                self.closed_event = trio.Event()
            await self.closed_event.wait()

    @property
    def name(self) -> str:
        return f"{self.kind.name} {'/'.join(self.key)!r}"


@dataclass(frozen=True, slots=True)
class RuntimeStats:
    """Counts for health checks and metrics; a plain snapshot, cheap to take."""

    live: int = 0
    """Actors loaded (or loading) now."""
    mailbox_depth: int = 0
    """Messages waiting in every mailbox."""
    asks: int = 0
    tells: int = 0
    spawns: int = 0
    passivations: int = 0
    crashes: int = 0
    live_bytes: int = 0
    """The live actors' estimated bytes at the last count (kernel.max_live_bytes)."""
    budget_passivations: int = 0
    """Actors passivated to keep within kernel.max_live_bytes."""

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


BUDGET_PERIOD: Final = 1.0
"""Seconds between two counts of the live actors' bytes against kernel.max_live_bytes."""


def live_bytes_budget(configured: int | None) -> int:
    """The live actors' byte budget: ``configured``, or (None) half the machine's
    physical memory (1 GiB where that cannot be read)."""
    if configured is not None:
        return configured
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (AttributeError, ValueError, OSError):
        return 1 << 30


_FEW_JOURNALS = 4
"""With ``fsync_method = "auto"``, a group-commit round of at most this many journals
fdatasyncs them rather than syncing the whole filesystem (which also waits for
every other file's writes there): one busy agent's round was 1.25x faster so
on a machine where other processes wrote (POST /messages, 16 connections)."""


class ActorRef:
    """A lightweight handle on one actor. Two refs to one key reach the same actor;
    holding a ref keeps nothing alive."""

    __slots__ = ("key", "kind", "runtime")

    def __init__(self, runtime: Runtime, kind: str, key: Key) -> None:
        self.runtime = runtime
        self.kind = kind
        self.key = key

    async def ask(self, command: Any, *, timeout: float | UseDefault | None = DEFAULT) -> Any:
        """Send ``command`` and wait for the reply (see Runtime.ask)."""
        return await self.runtime._ask_checked(self.kind, self.key, command, timeout)

    async def tell(self, command: Any) -> None:
        """Send ``command`` without waiting for its reply (see Runtime.tell)."""
        if not self.runtime._handed_over(HandOver(self.kind, self.key, command)):
            await self.runtime._deliver(self.kind, self.key, _Envelope(command, None))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ActorRef) and other.runtime is self.runtime
                and other.kind == self.kind and other.key == self.key)

    def __hash__(self) -> int:
        return hash((self.kind, self.key))

    def __repr__(self) -> str:
        return f"ActorRef({self.kind!r}, {self.key!r})"


class Runtime:
    """The kernel. Made by ``open_actor_runtime``; every task it starts lives in
    the nursery that context manager owns."""

    def __init__(self, config: Config, nursery: trio.Nursery, storage: Storage,
                 ownership: Ownership | None = None) -> None:
        self.config = config
        self._nursery = nursery
        self._storage = storage
        self.ownership = ownership
        """The virtual shards this runtime serves (None: every key, alone)."""
        self.elsewhere: Elsewhere | None = None
        """The host's way to the actors of virtual shards this runtime does not hold
        (a cluster's shard): Tells and Forwards to them, and this runtime's own
        ``tell`` to them, are handed to it (see ``mnemex.kernel._elsewhere``); None:
        they fail with NotOwner."""
        self._kinds: dict[str, ActorKind] = {}
        self._cells: OrderedDict[tuple[str, Key], _Cell] = OrderedDict()
        self._closing_cells: dict[tuple[str, Key], _Cell] = {}
        sync_fs = storage.syncfs if config.storage.fsync_method in ("auto", "syncfs") else None
        self._committer = GroupCommitter(config.storage.fsync_window, threads=config.storage.fsync_threads,
                                         sync_filesystem=sync_fs,
                                         few=_FEW_JOURNALS if config.storage.fsync_method == "auto" else 0)
        self._accepting = True
        self._running_cells = 0
        self._all_closed = trio.Event()
        self._all_closed.set()
        self._deadlines = AskDeadlines(_overdue)
        # kernel.max_live_bytes: the live actors' estimates added up, and the actors
        # that handled messages since they were last measured
        self._live_bytes = 0
        self._unmeasured: set[_Cell] = set()
        self._stats = {"asks": 0, "tells": 0, "spawns": 0, "passivations": 0, "crashes": 0,
                       "live_bytes": 0, "budget_passivations": 0}
        self._store_threads = trio.CapacityLimiter(_STORE_THREADS)
        self._slices = InlineSlices()  # which inline reads are schedule points
        read_threads = config.kernel.read_threads
        self._read_threads = trio.CapacityLimiter(read_threads) if read_threads else None
        # set when a host loop runs this trio run as its guest (``report_to_host``): the
        # run cannot see the host's own ready work, so a read never runs in its turn
        self._hosted = False
        # actors taking a batch from their mailbox now (a quick read alone runs in its
        # actor's task only while no other is: they may have been woken in the same turn)
        self._processing = 0
        self._shutdown: ShutdownTally | None = None  # counts closes once aclose() began
        self.shutdown_report: ShutdownReport | None = None
        """What the shutdown did (see aclose); None until it has finished."""
        self.started = time.time()
        self._token = trio.lowlevel.current_trio_token()

    @property
    def parked(self) -> ParkedRun | None:
        """The run's lock, let go of only while the run waits for I/O (see
        ``ParkedRun``; ``read_parked``, ``write_parked``); None before the group
        commit runs, or with a ``storage.fsync_window``."""
        return self._committer.parked

    # -- registration -----------------------------------------------------------
    def register(self, kind: ActorKind) -> None:
        """Register an actor kind; its name must be new, short, lowercase ascii."""
        if not kind.name.isascii() or not kind.name.isidentifier() or kind.name != kind.name.lower():
            raise UnknownActorKind(f"actor kind name {kind.name!r} must be a lowercase identifier")
        if kind.name in self._kinds:
            raise UnknownActorKind(f"actor kind {kind.name!r} is registered already")
        self._kinds[kind.name] = kind

    @property
    def kinds(self) -> Mapping[str, ActorKind]:
        return self._kinds

    def _kind(self, name: str) -> ActorKind:
        try:
            return self._kinds[name]
        except KeyError:
            known = ", ".join(sorted(self._kinds)) or "none"
            raise UnknownActorKind(f"no actor kind {name!r} is registered (known: {known})",
                                   field="kind") from None

    def ref(self, kind: str, key: str | Key) -> ActorRef:
        """A ref to the actor ``key`` of ``kind``; checks both, spawns nothing yet."""
        self._kind(kind)
        return ActorRef(self, kind, check_key(key, self.config.kernel.max_key_bytes, kind=kind))

    # -- asking ----------------------------------------------------------------
    async def ask(self, kind: str, key: str | Key, command: Any, *,
                  timeout: float | UseDefault | None = DEFAULT) -> Any:
        """Send ``command`` to the actor and return its reply. A read the kind
        answers inline (``ActorKind.inline_read``, ``inline_when``) of an idle, loaded
        actor holding no write that is not durable yet is answered in the calling
        task, as the actor would answer it next: no mailbox round trip; a cancel point,
        and a schedule point every few such reads (see ``mnemex.kernel._slices``). Any
        other command, or a read behind a queued or not yet durable write, goes through
        the mailbox, in order.

        Raises what the handler raised (a MnemexError), ActorCrashed (cause chained)
        when the handler or the actor's load broke, Busy when the mailbox is full
        under ``overload="fail"``, Timeout after ``timeout`` seconds (``DEFAULT``:
        ``config.kernel.ask_timeout``; ``None``: no limit), ActorClosed when the runtime
        is shutting down.
        """
        self._kind(kind)
        return await self._ask_checked(kind, check_key(key, self.config.kernel.max_key_bytes, kind=kind),
                                       command, timeout)

    async def tell(self, kind: str, key: str | Key, command: Any) -> None:
        """Send ``command`` without waiting for a reply. Waits only for mailbox room
        (or raises Busy under ``overload="fail"``). A handler error is logged."""
        self._kind(kind)
        checked = check_key(key, self.config.kernel.max_key_bytes, kind=kind)
        if not self._handed_over(HandOver(kind, checked, command)):
            await self._deliver(kind, checked, _Envelope(command, None))

    async def _ask_checked(self, kind: str, key: Key, command: Any,
                           timeout: float | UseDefault | None) -> Any:
        limit = (self.config.kernel.ask_timeout if timeout is DEFAULT
                 else math.inf if timeout is None else timeout)
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:  # NaN too
            raise InvalidInput(f"ask timeout must be a number of seconds > 0, None (no limit) or DEFAULT, "
                               f"got {limit!r}", field="timeout")
        cell = self._cells.get((kind, key))
        if cell is not None and cell.kind.inline_read is not None and self._accepting \
                and self._serves(kind, key):
            now = trio.current_time()
            turn = self._read_inline(cell, command, now)
            if turn is not None:
                # answered as the actor would answer it next (it is idle and every write it
                # took is durable): no mailbox; a cancel point, and a schedule point now and
                # then (kernel._slices)
                self._stats["asks"] += 1
                if self._slices.is_due(now):
                    await trio.lowlevel.checkpoint()
                else:
                    await trio.lowlevel.checkpoint_if_cancelled()
                return _unwrap(turn.reply)
        waiter = _Waiter(trio.lowlevel.current_task())
        envelope = _Envelope(command, waiter)
        self._stats["asks"] += 1
        if timeout is DEFAULT and self._try_deliver(kind, key, envelope):
            # Fast path: the mailbox had room. The default timeout is enforced by the
            # watchdog (deadlines of equal timeouts arrive in order: one deque, no
            # cancel scope per ask).
            if waiter.early is not _UNSET:
                return _unwrap(waiter.early)
            self._deadlines.add(waiter, limit, kind, key, command)
            waiter.parked = True
            return await trio.lowlevel.wait_task_rescheduled(waiter.abort)
        with trio.move_on_after(limit) as scope:
            await self._deliver(kind, key, envelope)
            if waiter.early is not _UNSET:
                return _unwrap(waiter.early)
            waiter.parked = True
            return await trio.lowlevel.wait_task_rescheduled(waiter.abort)
        if scope.cancelled_caught:
            waiter.done = True
            raise _timeout_error(kind, key, command, limit)
        raise AssertionError("unreachable")  # pragma: no cover

    def ask_nowait(self, kind: str, key: str | Key, command: Any, waiter: Any, *, limit: bool = True) -> bool:
        """Ask from a plain callback in the runtime's thread, where no task waits (the
        blocking bridge's): ``waiter.resolve(reply)`` (the value, or the error to
        raise) is called once, now or later, unless ``waiter.done`` is set first (the
        caller gave up). The ask goes through the mailbox as any other, in order,
        with the default ask timeout (``limit`` False: none); a read the kind answers
        inline (``ActorKind.inline_read``) of an idle, loaded actor holding no write
        that is not durable yet is answered here, as the actor would answer it next.
        False, and nothing sent, when the mailbox has no room now (ask the ordinary
        way then). Raises what ``ask`` raises before sending (an unknown kind, an
        invalid key, ActorClosed while shutting down, ActorCrashed for a quarantined
        actor). Also callable from a guest run's host loop on the run's thread,
        between two ticks of the run (where trio lets the host wake tasks), holding
        ``parked``'s lock when there is one: a write taken inline there needs
        ``start_commit`` afterwards, since no end of a batch of the run starts its
        round."""
        self._kind(kind)
        key = check_key(key, self.config.kernel.max_key_bytes, kind=kind)
        cell = self._cell_for(kind, key)
        self._stats["asks"] += 1
        now = trio.current_time()
        turn = self._read_inline(cell, command, now)
        if turn is not None:
            waiter.resolve(turn.reply)
            return True
        if self._write_inline(cell, command, waiter, None):
            if limit and not waiter.done:
                self._deadlines.add(waiter, self.config.kernel.ask_timeout, kind, key, command, now=now)
            return True
        try:
            cell.mailbox.put_nowait(_Envelope(command, waiter))
        except (trio.WouldBlock, MailboxClosed):
            self._stats["asks"] -= 1
            return False
        if not cell.active:
            self._activate(cell)
        if limit:
            self._deadlines.add(waiter, self.config.kernel.ask_timeout, kind, key, command, now=now)
        return True

    def read_parked(self, kind: str, key: Key, command: Any, now: float) -> tuple[bool, Any]:
        """``ask_nowait``'s inline read, made from another thread while the run is
        parked waiting for I/O: the caller holds the lock that keeps the run from
        going on (``parked``), so no kernel code of the run executes meanwhile (trio
        may be processing I/O events: see ParkedRun). Touches no trio object
        (``now``: the run's clock, read by the caller).
        ``(True, reply)`` when answered, ``(False, None)`` to ask the ordinary way
        (an actor not loaded or not idle, an unknown kind or key, a command the kind
        does not read inline, a runtime shutting down)."""
        ident = (kind, key)
        cell = self._cells.get(ident) if self._accepting and self._serves(kind, key) else None
        turn = None if cell is None else self._read_inline(cell, command, now)
        if turn is None:
            return False, None
        self._stats["asks"] += 1
        return True, turn.reply

    def read_ahead(self, kind: str, key: Key, commands: Sequence[Any]) -> None:
        """Tell the actor ``(kind, key)`` of ``commands``, about to be asked of it back to
        back: the hook (``ActorKind.read_ahead``) hears of the reads it names that lead
        them, ``read_ahead_max`` at most, and may prepare what they share; none: what it
        prepared will not be asked for (it may let it go). Only an actor that would
        answer them inline now hears of it (loaded, idle, every write durable); called
        where ``ask_nowait`` may be, just before asking them. A hint: nothing is asked,
        and an error of the hook is logged, not raised (the reads are answered without
        what it prepared)."""
        cell = self._cells.get((kind, key)) if self._accepting else None
        if cell is None:
            return
        actor_kind = cell.kind
        inline = actor_kind.inline_read
        if actor_kind.read_ahead is None or inline is None or not _answers_inline(cell) \
                or not self._serves(kind, key):
            return
        self._tell_ahead(cell, list(itertools.takewhile(inline, commands[:actor_kind.read_ahead_max])))

    def write_parked(self, kind: str, key: Key, command: Any, waiter: Any, now: float) -> bool:
        """``ask_nowait``'s inline write, made from another thread while the run is
        parked (as ``read_parked``): journaled and applied here, its group commit's
        round handed to the commit threads from here too; what only the run may do (a
        snapshot when one is due, a reload) is handed to the run. The reply goes to
        ``waiter`` (now, or once durable), with no deadline (the caller keeps its
        own). False when not taken: ask the ordinary way."""
        ident = (kind, key)
        cell = self._cells.get(ident) if self._accepting and self._serves(kind, key) else None
        if cell is None or (self.config.storage.fsync == "always" and not cell.in_memory):
            return False
        if not self._write_inline(cell, command, waiter, now):
            return False
        self._cells.move_to_end(ident)
        self._stats["asks"] += 1
        self._committer.round_from_parked()
        return True

    def start_commit(self) -> None:
        """Start the group commit's round of the journal lines written since the last
        round, where no end of a batch of the run would come to start it: from a
        guest run's host loop, on the run's thread between two of its ticks, after
        writes it made there with ``ask_nowait`` (holding ``parked``'s lock, as
        ``write_parked``'s caller does). Writes made in one turn of the host loop
        share a round this way. Nothing when every round's slot is taken: the
        round under way starts the next when it reports (``report_to_host``)."""
        self._committer.round_from_parked()

    def report_to_host(self, call_soon_threadsafe: Callable[..., object] | None) -> None:
        """Have the group commit's threads report through a guest run's host loop
        (``call_soon_threadsafe``; None: by waking the run), so that a write asked
        from that loop (``ask_nowait``) is answered there once durable without the
        run taking a turn (see GroupCommitter.report_to_host)."""
        self._hosted = call_soon_threadsafe is not None
        self._committer.report_to_host(call_soon_threadsafe)

    def _serves(self, kind: str, key: Key) -> bool:
        """True unless an ownership says this runtime does not hold the key's virtual
        shard now (the ordinary path then answers NotOwner)."""
        return self.ownership is None or self.ownership.serves(vshard_of(kind, key))

    def _read_inline(self, cell: _Cell, command: Any, now: float) -> TurnResult | None:
        """The turn of a read the kind answers inline (``ActorKind.inline_read``), when
        ``cell`` is loaded, idle (no task, nothing queued) and holds no write that is
        not durable yet: answered now, it is what the actor would answer next, and
        ``cell`` counted active at ``now`` (the run's clock) as a mailbox read counts
        it (idle time, the live-actor order, the memory budget's next measure). None
        otherwise, or when the handler broke the inline contract (it crashed or gave
        effects): the mailbox path handles the read again, crash handling included
        (the read changed nothing)."""
        kind = cell.kind
        inline = kind.inline_read
        if inline is None or not _answers_inline(cell) or not inline(command):
            return None
        behaviour = cell.behaviour
        assert behaviour is not None
        when = kind.inline_when
        if when is not None and not when(behaviour, command):
            return None
        turn = take_turn(kind, behaviour, command, None)
        if turn.crash is not None or turn.effects:
            return None
        cell.last_active = now
        self._unmeasured.add(cell)  # (a read may keep what later reads share)
        self._cells.move_to_end((kind.name, cell.key))
        return turn

    def _write_inline(self, cell: _Cell, command: Any, waiter: Any, now: float | None) -> bool:
        """Handle a write the kind takes inline (``ActorKind.inline_write``) of an idle,
        loaded actor here and now, as its task would handle a batch of that one
        message (journal line first, then the handler; a refusal's line cut again;
        the reply released once durable, after the writes before it; its Emits
        performed): the same outcome without starting the actor's task. False
        (nothing done) when the actor or the command does not qualify. Writes of
        the actor that are not durable yet do not stop it: as in a batch after
        them, its reply waits for them too, and if one of their fsyncs fails the
        actor has diverged and this reply is StorageError with theirs (no write is
        taken inline then, until the actor's task has reloaded it). A handler that
        crashes or gives effects other than Emit (which such a write must not) is
        answered ActorCrashed and the actor rebuilt from its store, in a task,
        before it takes another message. ``now``: the run's clock, given when
        called from another thread with the run parked (``write_parked``): what
        only the run may do is then handed to it, and an actor with subscribers is
        left to its task (an Emit wakes them: the run's business)."""
        inline = cell.kind.inline_write
        if (inline is None or cell.state is not _RUNNING or cell.active or cell.redo or cell.diverged
                or len(cell.mailbox) or (now is not None and cell.subscribers)
                or (not cell.in_memory and cell.store.needs_recovery) or not inline(command)):
            return False
        kind = cell.kind
        payload = encode_turn(kind, command)
        if type(payload) is not bytes:
            return False  # not journaled, or refused already: the mailbox path answers it
        assert cell.behaviour is not None
        later: Callable[..., Any] = _now if now is None else self._token.run_sync_soon
        at = trio.current_time() if now is None else now
        cell.last_active = at
        self._unmeasured.add(cell)
        ts = max(int(time.time() * 1000), cell.ts)
        seq = cell.seq + 1
        try:
            cell.store.append([(seq, ts, payload)])
        except MnemexError as exc:  # never applied
            log.error("%s: journal write failed: %s", cell.name, exc)
            waiter.resolve(exc)
            return True
        turn = take_turn(kind, cell.behaviour, command, payload)
        if turn.crash is not None or not _only_emits(turn.effects):
            self._cut_ahead(cell, seq - 1)
            self._stats["crashes"] += 1
            bug = turn.crash or TypeError(f"{type(command).__name__} is taken inline but gave effects "
                                          f"other than Emit")
            log.error("%s: handler crashed on %s", cell.name, type(command).__name__, exc_info=bug)
            error = ActorCrashed(f"{cell.name} crashed handling {type(command).__name__}: {bug!r}; "
                                 f"it was reloaded from its last accepted state")
            error.__cause__ = bug
            waiter.resolve(error)
            cell.active = True  # nothing else runs it until it is rebuilt
            later(functools.partial(self._nursery.start_soon, self._reload_and_run, cell,
                                    name=f"actor {kind.name}"))
            return True
        if turn.payload is None:  # refused, or changed nothing: its line comes off again
            self._cut_ahead(cell, seq - 1)
            # As in a batch: if a write before it does not become durable, this answer
            # (made on a state holding that write) is dropped and the command handled
            # again once the actor is back at its durable state.
            self._release(cell, [(waiter, turn.reply, _Envelope(command, waiter))], durable_needed=False)
        else:
            cell.seq = seq
            cell.written += 1
            cell.ts = ts
            cell.journal_bytes += len(payload)
            self._release(cell, [(waiter, turn.reply, None)], durable_needed=True)
        for effect in turn.effects:  # Emits only (checked above), performed as the actor's task would
            if isinstance(effect, Emit):
                self._emit(cell, effect)
        if now is None:
            self._maybe_snapshot(cell, at)
        elif self._snapshot_due(cell, now):
            later(self._maybe_snapshot, cell)
        return True

    async def _reload_and_run(self, cell: _Cell) -> None:
        """Rebuild a crashed actor from its store, then serve what arrived meanwhile."""
        try:
            await self._reload(cell)
        except BaseException as exc:  # could not be loaded, or cancelled on the way
            cell.active = False
            if cell.state is _STOPPING or cell.state is CellState.CRASHED:  # always so after _Quarantined
                with trio.CancelScope(shield=True):
                    self._finish(cell)
            if isinstance(exc, _Quarantined):
                return
            raise
        await self._run_cell(cell)

    def _try_deliver(self, kind_name: str, key: Key, envelope: _Envelope) -> bool:
        """Put ``envelope`` in the mailbox if there is room now; never waits."""
        cell = self._cell_for(kind_name, key)
        try:
            cell.mailbox.put_nowait(envelope)
        except trio.WouldBlock:
            return False
        except MailboxClosed:
            return False  # it passivated between lookup and send; the slow path respawns
        if not cell.active:
            self._activate(cell)
        return True

    async def _deliver(self, kind_name: str, key: Key, envelope: _Envelope) -> None:
        if envelope.waiter is None:
            self._stats["tells"] += 1
        while True:
            cell = self._cell_for(kind_name, key)
            try:
                cell.mailbox.put_nowait(envelope)
                if not cell.active:
                    self._activate(cell)
                return
            except trio.WouldBlock:
                if self.config.kernel.overload == "fail":
                    raise Busy(f"mailbox of {cell.name} is full "
                               f"({self.config.kernel.mailbox_size:,} messages, "
                               f"config.kernel.mailbox_size); retry later") from None
            except MailboxClosed:
                continue  # it passivated between lookup and send; the next lookup respawns
            try:
                await self._put(cell, envelope)
            except MailboxClosed:
                continue
            return

    def _cell_for(self, kind_name: str, key: Key) -> _Cell:
        if not self._accepting:
            raise ActorClosed(f"the runtime is shutting down; {kind_name} {'/'.join(key)!r} "
                              f"takes no messages")
        if self.ownership is not None:
            self.ownership.check(kind_name, key)  # NotOwner: the caller sends it to the owner
        ident = (kind_name, key)
        cell = self._cells.get(ident)
        if cell is not None:
            if cell.state in DOWN:
                if trio.current_time() < cell.crash_until:
                    raise ActorCrashed(f"{cell.name} could not be loaded: {cell.crash}; "
                                       f"not retried before {cell.crash_until - trio.current_time():.1f} s "
                                       f"(config.kernel.restore_quarantine)") from cell.crash
                del self._cells[ident]
            else:
                self._cells.move_to_end(ident)
                return cell
        return self._spawn(self._kind(kind_name), key)

    # -- lifecycle ---------------------------------------------------------------
    def _store(self, kind: ActorKind, key: Key) -> ActorStore:
        return self._storage.store(kind.name, key, keep=self.config.storage.snapshots_kept)

    def _spawn(self, kind: ActorKind, key: Key) -> _Cell:
        ident = (kind.name, key)
        now = trio.current_time()
        cell = _Cell(kind, key, self._store(kind, key), self.config.kernel.mailbox_size, now)
        cell.previous = self._closing_cells.get(ident)
        self._cells[ident] = cell
        self._stats["spawns"] += 1
        self._running_cells += 1
        self._all_closed = trio.Event() if self._all_closed.is_set() else self._all_closed
        if len(self._cells) > self.config.kernel.max_live_actors:
            self._evict_lru()
        return cell

    def _post(self, cell: _Cell, control: _Control) -> bool:
        """Queue a control message without waiting; False if the mailbox is full."""
        try:
            cell.mailbox.put_nowait(_Envelope(control, None))
        except (trio.WouldBlock, MailboxClosed):
            return False
        if not cell.active:
            self._activate(cell)
        return True

    async def _put(self, cell: _Cell, envelope: _Envelope) -> None:
        """Queue ``envelope``, waiting for room; raises MailboxClosed."""
        if not cell.active:
            self._activate(cell)
        await cell.mailbox.put(envelope)
        # the actor's task may have drained and gone idle while we waited for room
        if not cell.active:
            self._activate(cell)

    def _activate(self, cell: _Cell) -> None:
        """Start the task that drains ``cell``'s mailbox. An idle actor has no task
        (it is only its state and mailbox); one starts with its next message."""
        cell.active = True
        self._nursery.start_soon(self._run_cell, cell, name=f"actor {cell.kind.name}")

    def _evict_lru(self) -> None:
        excess = len(self._cells) - self.config.kernel.max_live_actors
        for cell in self._cells.values():
            if excess <= 0:
                break
            if (cell.state is _RUNNING and not cell.subscribers
                    and len(cell.mailbox) == 0 and self._post(cell, _PASSIVATE)):
                excess -= 1

    async def _run_cell(self, cell: _Cell) -> None:
        """Drain the mailbox (loading the actor first if needed) until it is empty
        for a moment, or the actor is stopped."""
        try:
            if cell.state is _LOADING:
                await self._load(cell)
            await self._serve(cell)
        except _Quarantined:
            pass  # stays registered as crashed until config.kernel.restore_quarantine passes
        except Exception as exc:  # a kernel bug must not take the whole runtime down
            log.exception("%s: kernel error", cell.name)
            self._fail_mailbox(cell, ActorCrashed(f"{cell.name} stopped on an internal error: {exc!r}"))
            self._unregister(cell)
            if cell.state is not _STOPPING and cell.state not in DOWN:
                cell.move(_STOPPING)
        finally:
            cell.active = False
            if cell.state is _STOPPING or cell.state is CellState.CRASHED:
                with trio.CancelScope(shield=True):
                    self._finish(cell)

    def _finish(self, cell: _Cell) -> None:
        try:
            cell.store.close()
        finally:
            ident = (cell.kind.name, cell.key)
            if self._closing_cells.get(ident) is cell:
                del self._closing_cells[ident]
            cell.move(CellState.STOPPED if cell.state is _STOPPING else CellState.QUARANTINED)
            if cell.closed_event is not None:
                cell.closed_event.set()
            self._running_cells -= 1
            if self._running_cells == 0:
                self._all_closed.set()

    async def _load(self, cell: _Cell) -> None:
        """Load the behaviour: fresh, or newest snapshot + journal. Retries with
        backoff; after the last failure the actor is quarantined (raises _Quarantined)
        and every queued ask is answered ActorCrashed."""
        if cell.previous is not None:
            await cell.previous.wait_closed()
            cell.previous = None
        cfg = self.config
        error: BaseException | None = None
        for attempt in range(cfg.kernel.restore_attempts):
            try:
                await self._restore(cell)
            except NotOwner as exc:
                self._refuse(cell, exc)
            except Exception as exc:
                error = exc
                log.warning("%s: load attempt %d/%d failed: %r", cell.name, attempt + 1,
                            cfg.kernel.restore_attempts, exc)
                if attempt + 1 < cfg.kernel.restore_attempts:
                    await trio.sleep(cfg.kernel.restore_backoff * 2**attempt)
            else:
                cell.move(_RUNNING)
                return
        assert error is not None
        self._quarantine(cell, error, f"could not be loaded after {cfg.kernel.restore_attempts} attempts")

    def _refuse(self, cell: _Cell, error: NotOwner) -> NoReturn:
        """The store refused to load the actor: its virtual shard is another
        process's now (the fence said so). Nothing is broken and nothing is retried:
        what waits gets ``error`` (the caller goes to the owner) and the cell stops,
        so a message after the lease is ours again loads a fresh one."""
        log.info("%s: not loaded: %s", cell.name, error)
        self._unregister(cell)
        cell.move(_STOPPING)
        self._fail_mailbox(cell, error)
        self._end_subscriptions(cell, error)
        raise _Quarantined

    def _quarantine(self, cell: _Cell, error: BaseException, what: str) -> NoReturn:
        self._stats["crashes"] += 1
        cell.move(CellState.CRASHED)
        cell.crash = error
        cell.crash_until = trio.current_time() + self.config.kernel.restore_quarantine
        crashed = ActorCrashed(f"{cell.name} {what}: {error!r}")
        crashed.__cause__ = error
        self._fail_mailbox(cell, crashed)
        cell.mailbox.close()
        raise _Quarantined

    async def _restore(self, cell: _Cell) -> None:
        kind, store = cell.kind, cell.store
        if not store.exists():
            if store.needs_recovery:
                # a failed write's cut took every line of a new actor, files and all: what
                # the store still owes (its refusal of writes) is settled by a recovery
                await self._in_thread(cell, store.recover, limiter=self._store_threads)
            cell.behaviour = kind.create(cell.key)
            cell.seq = cell.snap_seq = cell.durable_seq = 0
            return
        # Reading, restoring and replaying a large actor takes a while: all of it runs
        # in a worker thread so the other actors keep being served meanwhile.
        behaviour, recovered = (_rebuild(kind, cell.key, store) if cell.in_memory
                                else await trio.to_thread.run_sync(_rebuild, kind, cell.key, store,
                                                                   limiter=self._store_threads))
        header = recovered.header
        cell.behaviour = behaviour
        cell.seq = cell.durable_seq = recovered.last_seq
        cell.snap_seq = header.seq if header is not None else 0
        cell.snap_bytes = header.bytes if header is not None else 0
        cell.journal_bytes = sum(len(entry.payload) for entry in recovered.journal)
        cell.ts = recovered.journal[-1].ts if recovered.journal else (header.ts if header else 0)

    def _fail_mailbox(self, cell: _Cell, error: BaseException) -> None:
        redo, cell.redo = cell.redo, None
        for envelope in redo or ():
            if envelope.waiter is not None:
                envelope.waiter.resolve(error)
        while True:
            try:
                envelope = cell.mailbox.get_nowait()
            except trio.WouldBlock:
                return
            if envelope.waiter is not None:
                envelope.waiter.resolve(error)

    def _unregister(self, cell: _Cell) -> None:
        """Take the cell out of the live table: the next message spawns a successor,
        which waits for this one's store to close."""
        ident = (cell.kind.name, cell.key)
        if self._cells.get(ident) is cell:
            del self._cells[ident]
            self._closing_cells[ident] = cell
        cell.mailbox.close()

    async def _serve(self, cell: _Cell) -> None:
        mailbox = cell.mailbox
        asked = False
        while True:
            if cell.redo:
                batch = list(cell.redo)  # older than anything in the mailbox
                cell.redo.clear()
                asked = True
            else:
                try:
                    envelope = mailbox.get_nowait()
                except trio.WouldBlock:
                    if not asked:
                        return
                    # Linger a few scheduling rounds after answering an ask: a caller in a
                    # tight loop sends its next message right after our reply.
                    asked = False
                    for _ in range(_LINGER):
                        await trio.lowlevel.checkpoint()
                        if len(mailbox) or cell.redo:
                            break
                    else:
                        return
                    continue
                asked = envelope.waiter is not None
                batch = [envelope]
                del envelope
            while len(batch) < _MAX_BATCH:
                try:
                    batch.append(mailbox.get_nowait())
                except trio.WouldBlock:
                    break
            cell.last_active = trio.current_time()
            self._unmeasured.add(cell)
            self._processing += 1
            try:
                stop = await self._process(cell, batch)
            finally:
                self._processing -= 1
            del batch
            if cell.acks:
                # the replies wait for a group commit: no caller can send its next
                # message within a few scheduling rounds, so lingering is wasted
                asked = False
            if stop is _STOP or (stop is _PASSIVATE and len(mailbox) == 0 and not cell.redo):
                await self._close_cell(cell, passivated=stop is _PASSIVATE)
                return
            self._maybe_snapshot(cell)

    def _read_ahead_run(self, cell: _Cell, batch: list[_Envelope], *,
                        payloads: list[bytes | TurnResult | None], first: int, end: int) -> int:
        """Tell the behaviour (``ActorKind.read_ahead``) of the reads the kind answers
        inline that follow each other from ``first`` in ``batch`` (up to ``end``, the
        first command that is not one, ``read_ahead_max`` at most), when there are two
        or more: they are handled next, one after another. Returns where they end."""
        kind = cell.kind
        inline = kind.inline_read
        stop, last = first, min(end, first + kind.read_ahead_max)
        while stop < last and payloads[stop] is None and inline is not None:
            command = batch[stop].command
            if isinstance(command, _Control | _Subscribe) or not inline(command):
                break
            stop += 1
        if stop - first >= 2:
            self._tell_ahead(cell, [envelope.command for envelope in batch[first:stop]])
        return max(stop, first + 1)

    def _tell_ahead(self, cell: _Cell, reads: list[Any]) -> None:
        """The kind's ``read_ahead`` hook, told of ``reads`` (or, none, that nothing more
        is coming); its error is logged (the reads are answered without it)."""
        hook, behaviour = cell.kind.read_ahead, cell.behaviour
        if hook is None or behaviour is None:
            return
        self._unmeasured.add(cell)  # (what it prepares is the actor's until taken)
        try:
            hook(behaviour, reads)
        except Exception:
            log.exception("the read-ahead of %s failed; its reads are answered without it", cell.name)

    async def _process(self, cell: _Cell, batch: list[_Envelope]) -> _Control | None:
        """Handle a batch; returns a control message that ended it, if any.

        Journal first: the lines of the batch's journaled commands are written
        (one write) *before* any of them is handled, because a behaviour applies a
        command as it handles it and has no way to take it back. So a write whose
        line cannot be written (a full disk) is answered StorageError without ever
        being applied, and the reads beside it are answered as usual: nothing has
        to be undone, and the actor is not reloaded. Whether a command is
        journaled, and its line, are known before it is handled (``encode_turn``);
        whether the handler accepts it is not: a command it refuses, or that
        changes nothing, has its line cut off the journal again
        (``ActorStore.cut_after``, a truncation, which needs no room), with the
        lines after it, and the rest of the batch goes on in a new run whose lines
        are written one command at a time at first (then two, four...: a batch of
        refusals costs a write and a cut per command, not one per command
        squared). A line written ahead for a command never answered can survive
        a kill -9 (so recovery replays a refused command as a refusal: see
        ``handle_each``); one of an answered write never can.

        The fsync comes later (group commit): a line whose fsync fails was applied
        already, and so were the commands after it. Those are undone the only
        generic way, by reloading the actor from what is durable (see
        ``_recover_diverged``); its reads are handled again rather than answered
        with the write's error.
        """
        kind = cell.kind
        payloads: list[bytes | TurnResult | None] | None = None
        count = len(batch)
        start = 0
        window = count  # how many lines one run writes ahead
        control: _Control | None = None
        beside: dict[int, TurnResult] = {}  # turns of reads answered beside the actor, by position
        ahead_until = 0  # the batch's reads up to here were told of (``ActorKind.read_ahead``)
        while start < count:
            if cell.diverged or (not cell.in_memory and cell.store.needs_recovery):
                await self._recover_diverged(cell, batch[start:])
                return control
            behaviour = cell.behaviour
            assert behaviour is not None
            ts = max(int(time.time() * 1000), cell.ts)
            base = cell.seq
            if payloads is None:  # the first run: the whole batch
                payloads, lines = _journal_lines(kind, batch, base + 1, ts)
                end = count
            else:
                lines = []
                end = start
                while end < count:
                    payload = payloads[end]
                    if type(payload) is bytes:
                        if len(lines) == window:
                            break
                        lines.append((base + len(lines) + 1, ts, payload))
                    end += 1
            failed: MnemexError | None = None
            if lines:
                try:
                    cell.store.append(lines)
                except MnemexError as exc:
                    log.error("%s: journal write failed: %s", cell.name, exc)
                    failed = exc
            kept = 0
            kept_bytes = 0
            was_cut = False
            replies: list[_Reply] = []
            effects: list[tuple[Effect, _Waiter | None, Any, int]] = []
            crashed = False
            index = start
            while index < end:
                envelope = batch[index]
                payload = payloads[index]
                index += 1
                command = envelope.command
                if isinstance(command, _Control):
                    control = command
                    continue
                sub: Subscription | None = None
                if type(command) is _Subscribe:
                    sub, command = command.subscription, command.command
                    if command is None:
                        self._add_subscriber(cell, sub)
                        replies.append((envelope.waiter, None, None))
                        continue
                if isinstance(payload, bytes):
                    if failed is not None:  # its line could not be written: it is never applied
                        replies.append((envelope.waiter, failed, None))
                        continue
                    turn = take_turn(kind, behaviour, command, payload)
                    if turn.payload is None:
                        # refused, unchanged or crashed: its line comes off the journal, with
                        # the lines of the commands after it, which get new ones
                        self._cut_ahead(cell, base + kept)
                        end = index
                        was_cut = True
                    else:
                        kept += 1
                        kept_bytes += len(payload)
                elif payload is None:
                    if index > ahead_until and kind.read_ahead is not None:
                        ahead_until = self._read_ahead_run(cell, batch, payloads=payloads, first=index - 1,
                                                           end=end)
                    if index - 1 not in beside and sub is None and kind.read_beside is not None \
                            and self._read_threads is not None:
                        beside = await self._read_beside(cell, behaviour, batch, payloads=payloads,
                                                         first=index - 1, end=end)
                    answered = beside.pop(index - 1, None)
                    turn = answered if answered is not None else take_turn(kind, behaviour, command, None)
                else:
                    turn = payload  # refused: it cannot be journaled
                waiter = envelope.waiter
                again = envelope if waiter is not None and sub is None else None
                if turn.refused:
                    replies.append((waiter, turn.reply, again))
                    if envelope.waiter is None:
                        log.info("%s: told %s failed: %s", cell.name, type(command).__name__, turn.reply)
                    continue
                if turn.crash is not None:
                    bug = turn.crash
                    self._stats["crashes"] += 1
                    log.error("%s: handler crashed on %s", cell.name, type(command).__name__, exc_info=bug)
                    error = ActorCrashed(f"{cell.name} crashed handling {type(command).__name__}: {bug!r}; "
                                         f"it was reloaded from its last accepted state")
                    error.__cause__ = bug
                    replies.append((envelope.waiter, error, None))
                    if not was_cut and failed is None and kept < len(lines):
                        self._cut_ahead(cell, base + kept)  # lines of commands not handled yet
                    end = index
                    crashed = True
                    break
                if sub is not None:
                    self._add_subscriber(cell, sub)
                out = turn.reply
                if turn.effects:
                    answering = turn.answering
                    if turn.ignored_answers:
                        log.error("%s: %s returned %d effects that answer it; only the first does",
                                  cell.name, type(command).__name__, turn.ignored_answers + 1)
                    for position, effect in enumerate(turn.effects):
                        effects.append((effect, waiter if effect is answering else None, command, position))
                    if answering is not None:
                        waiter = None  # the answering effect carries the caller on
                    replies.append((waiter, out, None))
                elif turn.payload is None:
                    replies.append((waiter, out, again))
                else:
                    replies.append((waiter, out, None))
            start = end
            if kept:
                cell.seq = base + kept
                cell.written += 1
                cell.ts = ts
                cell.journal_bytes += kept_bytes
            window = 1 if was_cut else min(window * 2, count)
            self._release(cell, replies, durable_needed=kept > 0)
            for effect, waiter, origin, position in effects:
                await self._perform(cell, effect, waiter, origin, position)
            if crashed:
                beside.clear()  # read from a state the crash may have left half changed
                try:
                    await self._reload(cell)
                except _Quarantined:
                    error = ActorCrashed(f"{cell.name} is down: {cell.crash!r}")
                    for envelope in batch[start:]:
                        if envelope.waiter is not None:
                            envelope.waiter.resolve(error)
                    raise
        return control

    async def _read_beside(self, cell: _Cell, behaviour: Behaviour, batch: list[_Envelope], *,
                           payloads: list[bytes | TurnResult | None], first: int, end: int
                           ) -> dict[int, TurnResult]:
        """The turns of the run of reads from ``first`` (before ``end``) that the kind
        answers beside the actor (``ActorKind.read_beside``), by position in the batch;
        empty when the read at ``first`` is not one. They run in worker threads, side
        by side; this waits for all of them, so the actor changes in no way while they
        read it. A read whose planning or run breaks (not a MnemexError) is a crash, as
        in ``take_turn``: the run stops before it for the caller to handle it."""
        read_beside = cell.kind.read_beside
        assert read_beside is not None and self._read_threads is not None
        reads: list[tuple[int, Beside]] = []
        turns: dict[int, TurnResult] = {}
        position = first
        while position < end and payloads[position] is None:
            command = batch[position].command
            if type(command) is _Subscribe or isinstance(command, _Control):
                break
            try:
                plan = read_beside(behaviour, command)
            except Exception as exc:
                turns[position] = TurnResult(None, crash=exc)
                break
            if plan is None:
                break
            reads.append((position, plan))
            position += 1
        if not reads:
            return turns
        replies: list[Any] = [None] * len(reads)
        errors: list[BaseException | None] = [None] * len(reads)
        order = iter(range(len(reads)))  # shared by the threads: each takes the next read

        def work() -> None:
            for i in order:
                try:
                    replies[i] = reads[i][1].run()
                except BaseException as exc:  # sorted out below, in the actor's task
                    errors[i] = exc

        limiter = self._read_threads
        inline = False
        if len(reads) == 1 and reads[0][1].quick and not self._hosted and self._processing == 1:
            # A quick read alone in its run, while no other actor takes a batch and nothing
            # else of the trio run is ready nor due: a worker thread would leave the loop
            # as idle and only add its two wake-ups (~0.3 ms a vector search at 100,000
            # memories, of ~0.7 ms of work). (Another task woken in this loop turn is
            # seen once the turn has passed.)
            await trio.lowlevel.checkpoint()
            inline = self._processing == 1 and _loop_is_idle()
        if inline:
            work()
        else:
            async with trio.open_nursery() as nursery:
                for _ in range(min(int(limiter.total_tokens), len(reads))):
                    nursery.start_soon(functools.partial(trio.to_thread.run_sync, work, limiter=limiter))
        for (position, plan), reply, error in zip(reads, replies, errors, strict=True):
            if error is None:
                turns[position] = TurnResult(reply, effects=plan.effects)
            elif isinstance(error, MnemexError):
                # refused; what its planning started is still done (the reply is the error)
                turns[position] = TurnResult(error, effects=plan.effects, refused=not plan.effects)
            elif isinstance(error, Exception):
                turns[position] = TurnResult(None, crash=error)
            else:
                raise error
        return turns

    def _cut_ahead(self, cell: _Cell, seq: int) -> None:
        """Take the lines written ahead after ``seq`` off the journal. If that fails,
        the store refuses writes until it is recovered, which the next run sees."""
        try:
            cell.store.cut_after(seq)
        except MnemexError as exc:
            log.error("%s: lines written ahead of commands it did not accept could not be cut: %s",
                      cell.name, exc)

    def _release(self, cell: _Cell, replies: list[_Reply], durable_needed: bool) -> None:
        if not replies:
            return
        policy = "never" if cell.in_memory else self.config.storage.fsync
        if policy == "never":
            cell.synced = cell.written
            cell.durable_seq = cell.seq
            _answer(replies)
            return
        if not durable_needed and cell.written <= cell.synced:
            _answer(replies)
            return
        seq = cell.seq

        def release(error: BaseException | None) -> None:
            if error is None and not cell.diverged:
                cell.durable_seq = max(cell.durable_seq, seq)
                _answer(replies)
            else:
                self._answer_undurable(cell, replies, error)

        self._when_durable(cell, release, policy)

    def _when_durable(self, cell: _Cell, release: Callable[[BaseException | None], None],
                      policy: str) -> None:
        """Call ``release`` once everything ``cell`` has written is durable (with None)
        or could not be made so (with the error)."""
        if policy == "batch":
            self._committer.submit(cell, release)
        else:  # "always": this actor's own fsync, before its next batch
            hold(cell, cell.written, release)
            self._nursery.start_soon(self._sync_now, cell, cell.written)

    def _answer_undurable(self, cell: _Cell, replies: list[_Reply], error: BaseException | None) -> None:
        """Replies computed on a state holding a write whose line did not become
        durable: that write and the ones after it are answered StorageError (they
        are undone by a reload, see _recover_diverged); a read, or a command that
        changed nothing, is handled again once the actor is back at its durable
        state (unless the actor is stopping)."""
        cell.diverged = True
        if error is None:
            error = StorageError(f"{cell.name}: not stored: an earlier journal write of this actor did not "
                                 f"become durable, so this one, made after it, is dropped with it")
        requeued = False
        for waiter, _value, again in replies:
            if waiter is None:
                continue
            if again is not None and cell.state is _RUNNING:
                if cell.redo is None:
                    cell.redo = deque()
                cell.redo.append(again)
                requeued = True
            else:
                waiter.resolve(error)
        if requeued and not cell.active:
            self._activate(cell)

    async def _recover_diverged(self, cell: _Cell, rest: list[_Envelope]) -> None:
        """Go back to the durable state: after an fsync failed, the behaviour holds
        writes whose lines may be lost (and ones made after them). It cannot take
        them back, so every write not known durable is answered StorageError, the
        journal is cut after the last durable line (so neither this reload nor a
        restart replays a write that was answered an error) and the actor is
        rebuilt from its store; ``rest`` (not handled yet) and the reads waiting
        for those writes are handled afterwards. The one path that reloads on a
        storage fault, and it runs only when an fsync failed: a write that merely
        could not be written changed nothing (see _process)."""
        cell.diverged = True
        await self._flush(cell)
        if rest:
            if cell.redo is None:
                cell.redo = deque()
            cell.redo.extend(rest)
        await self._reload(cell)

    async def _sync_now(self, cell: _Cell, mark: int) -> None:
        release_through(cell, mark, await self._sync_error(cell))

    async def _sync_error(self, cell: _Cell) -> BaseException | None:
        """fsync the cell's journal; the error (a mnemex one) if it failed."""
        try:
            await self._in_thread(cell, cell.store.sync)
        except MnemexError as exc:
            return exc
        except OSError as exc:
            return StorageError(f"fsync of {cell.name}'s journal failed: {exc}")
        return None

    async def _reload(self, cell: _Cell) -> None:
        """After a crash or a write that did not become durable: rebuild the
        behaviour from the store, so the actor keeps exactly its last accepted
        state (its journal is first cut after the last durable line, if a write
        after it failed)."""
        await self._flush(cell)
        must_cut = cell.diverged or cell.store.needs_recovery
        self._forget_bytes(cell)
        cell.behaviour = None
        try:
            if must_cut:
                await self._in_thread(cell, cell.store.cut_after, cell.durable_seq)
            await self._restore(cell)
        except NotOwner as exc:
            self._refuse(cell, exc)
        except Exception as exc:
            log.exception("%s: reload failed", cell.name)
            self._quarantine(cell, exc, "could not be reloaded from its store")
        cell.synced = cell.written
        cell.diverged = False

    async def _flush(self, cell: _Cell) -> None:
        """Make everything written durable and release every pending reply (our own
        fsync covers every write made so far, whichever group commit is in flight:
        the store's syncs do not overlap and a failed one makes every later one
        fail, see ``ActorStore.sync``, so it cannot succeed past a round that
        failed). Once a write failed to become durable, the rest fail without an fsync."""
        if cell.written <= cell.synced:
            return
        error = None if cell.diverged else await self._sync_error(cell)
        release_through(cell, cell.written, error)

    async def _perform(self, cell: _Cell, effect: Effect, waiter: _Waiter | None, origin: Any = None,
                       position: int = 0) -> None:
        """Carry out one effect, number ``position`` of the step of command
        ``origin``; ``waiter`` is the caller an answering effect (Forward, Job with
        answers) answers in place of the handler."""
        if type(effect) is Emit:
            self._emit(cell, effect)
        elif type(effect) is Tell or type(effect) is Forward:
            what = "tell" if type(effect) is Tell else "forward"
            try:
                self._kind(effect.kind)
                target = check_key(effect.key, self.config.kernel.max_key_bytes, kind=effect.kind)
                if not self._handed_over(HandOver(effect.kind, target, effect.command, origin, position,
                                                  waiter)):
                    await self._deliver(effect.kind, target, _Envelope(effect.command, waiter))
            except MnemexError as exc:
                if waiter is not None:
                    waiter.resolve(exc)
                else:
                    log.warning("%s: %s to %s %r failed: %s", cell.name, what, effect.kind, effect.key, exc)
        elif type(effect) is Job:
            self._nursery.start_soon(self._run_job, cell.kind.name, cell.key, effect, waiter,
                                     name=effect.name)
        else:
            raise TypeError(f"unknown effect {effect!r}")

    def _handed_over(self, message: HandOver) -> bool:
        """Hand ``message`` to ``elsewhere`` when this runtime does not hold its key's
        virtual shard and has a host that reaches the one that does."""
        if self.elsewhere is None or self._serves(message.kind, message.key):
            return False
        self.elsewhere(message)
        return True

    def _add_subscriber(self, cell: _Cell, sub: Subscription) -> None:
        if cell.subscribers is None:
            cell.subscribers = {}
        cell.subscribers.setdefault(sub.topic, []).append(sub)

    def _emit(self, cell: _Cell, emit: Emit) -> None:
        subs = cell.subscribers.get(emit.topic) if cell.subscribers else None
        if not subs:
            return
        keep = [sub for sub in subs if not sub.closed and sub._push(emit.event)]
        if emit.last:
            for sub in keep:
                sub._end()
            keep = []
        assert cell.subscribers is not None
        if keep:
            cell.subscribers[emit.topic] = keep
        else:
            del cell.subscribers[emit.topic]

    def _end_subscriptions(self, cell: _Cell, error: BaseException | None) -> None:
        for subs in (cell.subscribers or {}).values():
            for sub in subs:
                sub._end(error)
        cell.subscribers = None

    async def subscribe(self, kind: str, key: str | Key, topic: str, command: Any = None, *,
                        buffer: int = 1024, timeout: float | UseDefault | None = DEFAULT) -> Subscription:
        """Register a live feed of the actor's ``Emit(topic, ...)`` events.

        ``command`` (a read, say the history so far) is handled in the same turn as
        the registration; its reply is ``subscription.initial``. An actor with live
        subscribers is not passivated for idleness.
        """
        if not isinstance(buffer, int) or buffer < 1:
            raise InvalidInput(f"subscription buffer must be an int >= 1, got {buffer!r}", field="buffer")
        subscription = Subscription(topic, buffer)
        self._kind(kind)
        checked = check_key(key, self.config.kernel.max_key_bytes, kind=kind)
        subscription.initial = await self._ask_checked(kind, checked, _Subscribe(subscription, command),
                                                       timeout)
        return subscription

    async def _run_job(self, kind: str, key: Key, job: Job, waiter: _Waiter | None) -> None:
        try:
            if _is_async(job.work):
                value = await job.work()
            elif job.stop is None:
                value = await trio.to_thread.run_sync(job.work, abandon_on_cancel=True)
            else:
                value = await _stoppable_in_thread(job)
            result = JobResult(value=value)
        except Exception as exc:
            result = JobResult(error=exc)
        try:
            command = job.deliver(result)
            await self._deliver(kind, key, _Envelope(command, waiter))
        except MnemexError as exc:
            log.warning("%s %r: result of job %s not delivered: %s", kind, key, job.name, exc)
            if waiter is not None:
                waiter.resolve(exc)
        except Exception as exc:
            log.exception("%s %r: job %s's deliver failed", kind, key, job.name)
            if waiter is not None:
                error = ActorCrashed(f"{kind} {'/'.join(key)!r}: job {job.name} could not deliver its "
                                     f"result: {exc!r}")
                error.__cause__ = exc
                waiter.resolve(error)

    # -- snapshots ---------------------------------------------------------------
    def _snapshot_due(self, cell: _Cell, now: float) -> bool:
        if cell.snapshot_done is not None or cell.seq == cell.snap_seq or cell.diverged:
            return False
        cfg = self.config
        # Enough commands, and a journal grown to a share of the last snapshot: a
        # snapshot then costs O(1) per command however large the state is.
        return ((cell.seq - cell.snap_seq >= cfg.storage.snapshot_every
                 and cell.journal_bytes >= cfg.storage.snapshot_growth * cell.snap_bytes)
                or (now - cell.snap_time >= cfg.storage.snapshot_interval and not self._journal_short(cell)))

    def _journal_short(self, cell: _Cell) -> bool:
        """Whether the journal since ``cell``'s last snapshot is too short for a
        snapshot on a timer or at close to be worth writing its whole state again
        (``config.storage.snapshot_min_growth``), and the behaviour holds no work
        that only a snapshot keeps (its ``snapshot_wanted``)."""
        return (cell.journal_bytes < self.config.storage.snapshot_min_growth * cell.snap_bytes
                and not getattr(cell.behaviour, "snapshot_wanted", False))

    def _maybe_snapshot(self, cell: _Cell, now: float | None = None) -> None:
        """Take a snapshot of ``cell`` if one is due (``now``: the run's clock, if read
        already in this turn)."""
        if self._snapshot_due(cell, trio.current_time() if now is None else now):
            behaviour = cell.behaviour
            assert behaviour is not None
            wanted = getattr(behaviour, "snapshot_wanted", False)
            data = behaviour.snapshot()
            cell.snapshot_done = trio.Event()
            self._nursery.start_soon(functools.partial(
                self._snapshot_beside, cell, data, cell.seq, cell.ts, cell.journal_bytes,
                wanted_by=behaviour if wanted else None))

    async def _snapshot_beside(self, cell: _Cell, data: SnapshotData, seq: int, ts: int,
                               journal_bytes: int, *, wanted_by: Any = None) -> None:
        """Write ``data``, taken at ``seq``; ``wanted_by``: the behaviour it was taken of,
        if that wanted one (``snapshot_wanted``, which taking it cleared): if the
        snapshot is not written, it wants one still."""
        written = False
        try:
            # a snapshot holds what the state holds: written only once all of that is
            # durable, it never keeps a write whose line then failed its fsync
            if not await self._until_durable(cell):
                log.error("%s: snapshot at seq %d not written: a journal write before it did not become "
                          "durable", cell.name, seq)
                return
            size = await self._in_thread(cell, _write_snapshot, cell.store, data, seq, ts,
                                         limiter=self._store_threads)
            written = True
        except Exception as exc:
            log.error("%s: snapshot at seq %d failed: %r", cell.name, seq, exc)
        else:
            cell.snap_seq = max(cell.snap_seq, seq)
            cell.snap_bytes = size
            cell.journal_bytes = max(0, cell.journal_bytes - journal_bytes)
        finally:
            if not written and wanted_by is not None and cell.behaviour is wanted_by:
                _wants_snapshot_again(wanted_by)
            cell.snap_time = trio.current_time()
            done, cell.snapshot_done = cell.snapshot_done, None
            assert done is not None
            done.set()

    async def _until_durable(self, cell: _Cell) -> bool:
        """Wait until everything ``cell`` has written so far is durable; False if
        some of it could not be made so."""
        policy = "never" if cell.in_memory else self.config.storage.fsync
        if policy == "never" or cell.written <= cell.synced:
            return not cell.diverged
        done = trio.Event()
        outcome: list[bool] = []

        def release(error: BaseException | None) -> None:
            outcome.append(error is None and not cell.diverged)
            done.set()

        self._when_durable(cell, release, policy)
        await done.wait()
        return outcome[0]

    async def _in_thread(self, cell: _Cell, fn: Callable[..., Any], *args: Any,
                         limiter: trio.CapacityLimiter | None = None) -> Any:
        """Blocking store work: a worker thread on disk, inline for memory stores
        (no thread, so tests under a mock clock never see time jump during it)."""
        if cell.in_memory:
            return fn(*args)
        return await trio.to_thread.run_sync(fn, *args, limiter=limiter)

    async def _close_cell(self, cell: _Cell, *, passivated: bool) -> None:
        """Stop taking messages, make everything durable, write the final snapshot."""
        self._unregister(cell)
        cell.move(_STOPPING)
        stopped = cell.lost if cell.lost is not None else ActorClosed(f"{cell.name} stopped")
        self._fail_mailbox(cell, stopped)
        self._end_subscriptions(cell, stopped)
        await self._flush(cell)
        if cell.lost is not None:  # its files are another process's now: touch nothing
            self._forget_bytes(cell)
            cell.behaviour = None
            return
        if cell.snapshot_done is not None:  # the one beside the actor finishes first
            await cell.snapshot_done.wait()
        tally = self._shutdown
        if cell.diverged or cell.store.needs_recovery:
            # the state holds writes that were answered StorageError: no snapshot of it;
            # the journal, cut after its last durable line, holds what was acknowledged
            what = "not snapshotted: a journal write did not become durable"
            try:
                await self._in_thread(cell, cell.store.cut_after, cell.durable_seq)
            except Exception as exc:
                what += f", and cutting the journal after its last durable line failed: {exc}"
            if tally is None:
                log.error("%s: %s", cell.name, what)
            else:
                tally.failed.append((cell.name, what))
        elif cell.seq != cell.snap_seq and cell.behaviour is not None:
            if self._journal_short(cell):
                await self._keep_journal(cell, tally)
            else:
                await self._final_snapshot(cell, cell.behaviour, tally)
        if tally is not None:
            tally.closed += 1
        if passivated:
            self._stats["passivations"] += 1
        self._forget_bytes(cell)
        cell.behaviour = None

    async def _final_snapshot(self, cell: _Cell, behaviour: Behaviour, tally: ShutdownTally | None) -> None:
        """Snapshot a closing actor (its journal holds commands since the last one)."""
        try:
            # (nothing changes the state once taken: a behaviour may lend it, not copy it)
            # (looked up on the class: a wrapper that forwards unknown attributes to the
            # behaviour it wraps must not hand out the inner one's, skipping its own snapshot)
            final = getattr(type(behaviour), "final_snapshot", None)
            data = final(behaviour) if final is not None else behaviour.snapshot()
            cell.snap_bytes = await self._in_thread(cell, _write_snapshot, cell.store, data,
                                                    cell.seq, cell.ts, limiter=self._store_threads)
            cell.snap_seq = cell.seq
            cell.journal_bytes = 0
        except Exception as exc:
            # the journal still holds every command: nothing is lost, recovery is slower
            if tally is None:
                log.error("%s: final snapshot failed: %r", cell.name, exc)
            else:  # the shutdown's report names it, with the others
                tally.failed.append((cell.name, f"{type(exc).__name__}: {exc}"))
        else:
            if tally is not None:
                tally.snapshots += 1

    async def _keep_journal(self, cell: _Cell, tally: ShutdownTally | None) -> None:
        """Leave a closing actor its short journal, replayed when it next loads, instead
        of a final snapshot. With fsync "never" nothing made it durable, as the
        snapshot's own fsync would have: done here."""
        try:
            if not cell.in_memory and self.config.storage.fsync == "never":
                await self._in_thread(cell, cell.store.sync, limiter=self._store_threads)
        except Exception as exc:
            if tally is None:
                log.error("%s: syncing its journal at close failed: %r", cell.name, exc)
            else:
                tally.failed.append((cell.name, f"journal sync: {type(exc).__name__}: {exc}"))
        else:
            if tally is not None:
                tally.journaled += 1

    async def passivate(self, kind: str, key: str | Key) -> None:
        """Snapshot and unload the actor now if it is live (tests, admin). It comes
        back on its next message."""
        ident = (kind, check_key(key, self.config.kernel.max_key_bytes, kind=kind))
        cell = self._cells.get(ident)
        if cell is None or cell.state in DOWN:
            return
        await self._close_with(cell, _PASSIVATE)

    async def _send_control(self, cell: _Cell, control: _Control) -> None:
        """Queue ``control`` for ``cell``, waiting for room if its mailbox is full
        (nothing to do if the mailbox closed meanwhile: the actor is stopping)."""
        if not self._post(cell, control):
            try:
                await self._put(cell, _Envelope(control, None))
            except MailboxClosed:
                pass

    async def _close_with(self, cell: _Cell, control: _Control) -> None:
        """Send ``control`` (passivate or stop) and wait until the actor closed."""
        await self._send_control(cell, control)
        await cell.wait_closed()

    def _cells_of(self, vshards: Iterable[int]) -> list[_Cell]:
        """The live actors of ``vshards``."""
        wanted = set(vshards)
        return [cell for (kind, key), cell in list(self._cells.items())
                if cell.state not in DOWN and vshard_of(kind, key) in wanted]

    async def passivate_vshards(self, vshards: Iterable[int]) -> int:
        """Snapshot and unload every live actor of ``vshards`` (before their leases
        are given up: the next owner starts from a snapshot). Returns how many."""
        cells = self._cells_of(vshards)
        async with trio.open_nursery() as nursery:
            for cell in cells:
                nursery.start_soon(self._close_with, cell, _PASSIVATE)
        return len(cells)

    async def drop_vshards(self, vshards: Iterable[int], error: NotOwner) -> int:
        """Unload every live actor of ``vshards`` at once, without a snapshot: their
        leases were lost, so their state may be stale and their files are another
        owner's. What waits for them gets ``error``. Returns how many."""
        cells = self._cells_of(vshards)
        for cell in cells:
            cell.lost = error
        async with trio.open_nursery() as nursery:
            for cell in cells:
                nursery.start_soon(self._close_with, cell, _STOP)
        return len(cells)

    async def _janitor(self) -> None:
        """Passivate actors idle longer than config.kernel.idle_timeout."""
        idle = self.config.kernel.idle_timeout
        period = min(max(idle / 4, 0.01), 30.0)
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            expired: list[tuple[str, Key]] = []
            for ident, cell in self._cells.items():
                if cell.last_active > now - idle:
                    break  # LRU order: the rest were active more recently
                if cell.subscribers:
                    continue  # live subscribers keep an actor loaded
                if cell.state is _RUNNING and len(cell.mailbox) == 0:
                    self._post(cell, _PASSIVATE)
                elif cell.state in DOWN and now >= cell.crash_until:
                    expired.append(ident)
            for ident in expired:
                del self._cells[ident]

    async def _budget(self) -> None:
        """Keep the live actors within ``config.kernel.max_live_bytes``: every
        BUDGET_PERIOD seconds, count the live actors' ``live_bytes()`` estimates
        and, when the total is over the budget, passivate the least recently used
        idle actors until it is under nine tenths of it."""
        budget = live_bytes_budget(self.config.kernel.max_live_bytes)
        while True:
            await trio.sleep(BUDGET_PERIOD)
            total = self.measure_live_bytes()
            if total > budget:
                self._shed(total - int(0.9 * budget))

    def measure_live_bytes(self) -> int:
        """The live actors' estimated bytes (see ``_budget``), now: the estimate is
        taken again for the actors that handled messages since the last count only,
        so a count costs what changed, not what is live."""
        unmeasured, self._unmeasured = self._unmeasured, set()
        total = self._live_bytes
        for cell in unmeasured:
            behaviour = cell.behaviour
            if behaviour is None or cell.state is not _RUNNING:
                continue
            measure = getattr(behaviour, "live_bytes", None)
            size = int(measure()) if measure is not None else 0
            total += size - cell.live_bytes
            cell.live_bytes = size
        self._live_bytes = total
        self._stats["live_bytes"] = total
        return total

    def _forget_bytes(self, cell: _Cell) -> None:
        """``cell``'s behaviour is let go: its estimate leaves the total."""
        self._live_bytes -= cell.live_bytes
        cell.live_bytes = 0
        self._unmeasured.discard(cell)

    def _shed(self, excess: int) -> None:
        """Passivate idle actors, least recently used first, until ``excess`` bytes
        of estimates are let go (or no idle actor is left)."""
        shed = 0
        for cell in self._cells.values():
            if excess <= 0:
                break
            if (cell.state is _RUNNING and cell.behaviour is not None and not cell.subscribers
                    and len(cell.mailbox) == 0 and not cell.active and self._post(cell, _PASSIVATE)):
                excess -= cell.live_bytes
                shed += 1
        self._stats["budget_passivations"] += shed

    # -- introspection -------------------------------------------------------------
    def stats(self) -> RuntimeStats:
        depth = sum(len(cell.mailbox)
                    for cell in self._cells.values() if cell.state is _RUNNING)
        return RuntimeStats(live=len(self._cells), mailbox_depth=depth, **self._stats)

    def journal_health(self) -> dict[str, Any]:
        """Journal lag for health checks: replies waiting for their fsync, fsync
        rounds so far and recent fsync latency (ms)."""
        pending = sum(len(cell.acks) for cell in self._cells.values() if cell.acks is not None)
        recent = sorted(self._committer.fsync_seconds)

        def quantile(q: float) -> float:
            return round(recent[min(len(recent) - 1, int(q * len(recent)))] * 1000, 3) if recent else 0.0

        health: dict[str, Any] = {
            "fsync": self.config.storage.fsync, "pending_acks": pending,
            "fsync_rounds": self._committer.rounds, "fsyncs": self._committer.fsyncs,
            "fsync_p50_ms": quantile(0.5), "fsync_p99_ms": quantile(0.99)}
        if isinstance(self._storage, DataDir):
            files = self._storage.open_files
            health.update(open_files=len(files), max_open_files=files.limit, open_files_evicted=files.evicted)
        return health

    def live_keys(self, kind: str | None = None) -> list[tuple[str, Key]]:
        return [ident for ident in self._cells if kind is None or ident[0] == kind]

    # -- shutdown -----------------------------------------------------------------
    async def aclose(self) -> ShutdownReport:
        """Stop accepting, drain every mailbox, snapshot every actor, wait for all.
        Returns what that did, and logs it (at ERROR if a final snapshot failed);
        a later call returns the same report."""
        if self.shutdown_report is not None:
            return self.shutdown_report
        self._accepting = False
        if self._shutdown is None:
            self._shutdown = ShutdownTally()
        for cell in list(self._cells.values()):
            if cell.state in (_LOADING, _RUNNING):
                await self._send_control(cell, _STOP)
        await self._all_closed.wait()
        return self._report_shutdown()

    def _report_shutdown(self) -> ShutdownReport:
        """The shutdown's report, made and logged once: when every actor closed, or
        when the shutdown timed out (the actors still closing are counted)."""
        if self.shutdown_report is None:
            tally = self._shutdown if self._shutdown is not None else ShutdownTally()
            report = self.shutdown_report = tally.report(unfinished=self._running_cells)
            if report.ok:
                log.info("shutdown: %s", report.describe())
            else:
                log.error("shutdown: %s", report.describe())
        return self.shutdown_report


_Reply = tuple[_Waiter | None, Any, _Envelope | None]
"""(who to answer, the answer, the envelope to handle again should the state it was
computed on turn out not durable: a read's, or None)."""


def _answer(replies: list[_Reply]) -> None:
    for waiter, value, _again in replies:
        if waiter is not None:
            waiter.resolve(value)


def _journal_lines(kind: ActorKind, batch: list[_Envelope], seq: int, ts: int) -> tuple[
        list[bytes | TurnResult | None], list[tuple[int, int, bytes]]]:
    """The journal payload of each message's command (see encode_turn), and the
    lines of the journaled ones, numbered from ``seq``."""
    is_journaled, encode = kind.is_journaled, kind.encode
    payloads: list[bytes | TurnResult | None] = []
    lines: list[tuple[int, int, bytes]] = []
    for envelope in batch:
        command = envelope.command
        if type(command) is _Subscribe:
            command = command.command
        if command is None or type(command) is _Control:
            payloads.append(None)
            continue
        try:
            payload = encode(command) if is_journaled(command) else None
        except Exception:
            payloads.append(encode_turn(kind, command))  # the refusal, or what it raises
            continue
        if payload is not None:
            lines.append((seq, ts, payload))
            seq += 1
        payloads.append(payload)
    return payloads, lines


_QUICK_READ: Final = 0.002
"""Seconds a quick read (``Beside.quick``) may take in the actor's task: it runs there
only when no deadline of the run falls due sooner."""


def _loop_is_idle() -> bool:
    """Whether no other task of this trio run is ready to run (of those the run queue
    holds: a task of the loop turn under way that has not run yet is not there), no
    callback from another thread (a bridged ask, a thread's result) waits to be taken
    and no deadline falls due within ``_QUICK_READ``: a quick read now delays nobody."""
    stats = trio.lowlevel.current_statistics()
    return (stats.tasks_runnable == 0 and stats.run_sync_soon_queue_size == 0
            and stats.seconds_to_next_deadline > _QUICK_READ)


def _now(fn: Callable[..., Any], *args: Any) -> None:
    fn(*args)


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn)


def rebuild_behaviour(kind: ActorKind, key: Key, recovered: Recovered) -> Behaviour:
    """The behaviour a snapshot and the journal after it describe: restored from
    the snapshot (or created fresh), then every journaled command replayed."""
    header = recovered.header
    with collector_paused():
        if header is None:
            behaviour = kind.create(key)
        else:
            behaviour = kind.restore(key, Image(recovered.records, header.extra, recovered.sidecars,
                                                recovered.sidecar_paths))
        kind.replay(behaviour, (kind.decode(entry.payload) for entry in recovered.journal))
    return behaviour




def _rebuild(kind: ActorKind, key: Key, store: ActorStore) -> tuple[Behaviour, Recovered]:
    recovered = store.recover()
    return rebuild_behaviour(kind, key, recovered), recovered


async def _stoppable_in_thread(job: Job) -> Any:
    """``job.work`` in a worker thread; if cancelled meanwhile (the runtime closes),
    ``job.stop()`` and a wait (shielded, at most STOP_WAIT seconds) for the thread
    to end, so no thread of ours is left in native code when the process exits.
    The thread is started here, whatever happens next (``trio.to_thread`` may be
    cancelled before it starts one, and then nothing would tell it ended)."""
    token = trio.lowlevel.current_trio_token()
    ended = trio.Event()
    results: list[outcome.Outcome[Any]] = []

    def report(result: outcome.Outcome[Any]) -> None:  # in the worker thread
        results.append(result)
        with contextlib.suppress(trio.RunFinishedError):  # (only once the wait gave up)
            token.run_sync_soon(ended.set)

    # a token of trio's thread limiter, as trio.to_thread would take (a cancel while
    # waiting for it starts no thread)
    async with trio.to_thread.current_default_thread_limiter():
        trio.lowlevel.start_thread_soon(job.work, report, name=f"mnemex job {job.name}")
        try:
            await ended.wait()
        except trio.Cancelled:
            assert job.stop is not None
            job.stop()
            with trio.CancelScope(shield=True), trio.move_on_after(STOP_WAIT) as waited:
                await ended.wait()
            if waited.cancelled_caught:
                log.warning("job %s did not stop within %.0f s of being asked", job.name, STOP_WAIT)
            raise
    return results[0].unwrap()


def _only_emits(effects: tuple[Any, ...]) -> bool:
    """True if every effect is an Emit (a write taken inline gives no other)."""
    for effect in effects:  # noqa: SIM110 - no generator made per inline write
        if type(effect) is not Emit:
            return False
    return True


def _wants_snapshot_again(behaviour: Any) -> None:
    """``behaviour`` wanted a snapshot, and the one taken was not written."""
    behaviour.snapshot_wanted = True


def _write_snapshot(store: ActorStore, data: SnapshotData, seq: int, ts: int) -> int:
    """Encode (in this worker thread) and write a snapshot; returns its body bytes."""
    try:
        records: Iterable[bytes] = _ceding(data.records() if callable(data.records) else data.records)
        sidecars = data.sidecars() if callable(data.sidecars) else data.sidecars
        # the records go to the store as they are made: it writes them a chunk at a time
        return store.write_snapshot(seq, ts, records, created=int(time.time() * 1000), extra=dict(data.extra),
                                    sidecars=sidecars, required=data.required)
    finally:
        if data.done is not None:
            data.done()


_CEDE_EVERY: Final = 512


def _ceding(records: Iterable[bytes]) -> Iterator[bytes]:
    """``records``, letting the other threads have the GIL every ``_CEDE_EVERY``: the
    records of a large actor keep the writer's thread busy for a long time (encoding,
    checksums), and the thread of the actors (the event loop's) would otherwise get
    the GIL back only once a switch interval (5 ms) at a time."""
    for count, line in enumerate(records, 1):
        yield line
        if not count % _CEDE_EVERY:
            time.sleep(0)


def _freeze_startup_heap(config: Config) -> None:
    if config.kernel.gc_freeze:
        _freeze_once()


@functools.cache
def _freeze_once() -> None:
    """Once per process, when the first runtime opens: move every object alive now
    (imported modules, the host's start-up state) out of the cyclic collector's
    sight. Full collections then scan only what the actors allocate, not tens of
    thousands of module objects, which keeps spawning and passivating cheap."""
    gc.freeze()


@asynccontextmanager
async def open_actor_runtime(config: Config, kinds: Iterable[ActorKind] = (), *,
                             storage: Storage | None = None,
                             ownership: Ownership | None = None) -> AsyncIterator[Runtime]:
    """Open the kernel on ``storage`` (default: the data directory ``config.storage.data_dir``
    names, locked while open, or memory when it is None), register ``kinds``, run
    until the block exits, then shut down cleanly (bounded by
    ``config.kernel.shutdown_timeout``) even when the block was cancelled or raised. A
    storage passed in is closed on exit too. With ``ownership`` the runtime serves
    only the keys of the virtual shards it holds (NotOwner for the rest); leases
    are taken and renewed by whoever hosts it (see LeaseKeeper)."""
    _freeze_startup_heap(config)
    store = storage if storage is not None else open_storage(
        config.storage.data_dir, max_open_files=config.storage.max_open_files)
    try:
        async with trio.open_nursery() as nursery:
            runtime = Runtime(config, nursery, store, ownership)
            for kind in kinds:
                runtime.register(kind)
            nursery.start_soon(runtime._janitor, name="mnemex janitor")
            nursery.start_soon(runtime._budget, name="mnemex memory budget")
            nursery.start_soon(runtime._deadlines.run, name="mnemex ask timeouts")
            nursery.start_soon(runtime._committer.run, name="mnemex group commit")
            try:
                yield runtime
            finally:
                with trio.CancelScope(shield=True) as shield:
                    shield.deadline = trio.current_time() + config.kernel.shutdown_timeout
                    await runtime.aclose()
                if shield.cancelled_caught:
                    log.error("shutdown did not finish within %s s (config.kernel.shutdown_timeout); "
                              "the journals hold every accepted command", config.kernel.shutdown_timeout)
                    runtime._report_shutdown()
                nursery.cancel_scope.cancel()
    finally:
        store.close()
