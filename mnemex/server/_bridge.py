"""The bridge from the HTTP server's asyncio loop into the runtime's trio run.

``mnemex serve`` runs uvicorn on uvloop; the runtime runs as a trio *guest* of
that loop, on the same thread (``trio.lowlevel.start_guest_run``). A request
handler is asyncio code; everything it asks of the runtime goes through
``Bridge.call``, which starts the call as a trio task and awaits its outcome as
an asyncio future. So a request crosses into trio once and back once.

Crossing in costs a wake-up of the trio run (its entry queue); calls made while
one wake-up is pending ride on it, so under load a whole batch of requests
crosses for the price of one. Crossing back is free: trio and asyncio share
the thread, so a trio task sets the asyncio future directly.

Order: a call starts after every call its caller awaited before it, so one
connection's requests (HTTP/1.1 answers them one at a time) reach the actors in
the order it sent them; concurrent calls, like concurrent requests, have no
order among themselves (trio starts a batch of new tasks in any order).
An ask of one actor (``Bridge.ask``) takes a shorter way: no trio task at all.
Between two ticks of the run its thread runs the loop's callbacks while the run
is parked at its I/O wait, where trio lets the host wake its tasks; there the
ask goes straight to the kernel (``Runtime.ask_nowait``, under the run's lock
``parked``, as a blocking caller's would): into the actor's mailbox, or, for a
write the kind takes inline (an append) of an idle actor, journaled and applied
at once. The writes of one turn of the loop then share a group-commit round,
whose threads report to this loop (``Runtime.report_to_host``): the reply
reaches its handler once its line is durable, and the run is not woken for any
of it. ``Bridge.ask_batched`` takes the same way one turn of the loop later, the
asks made meanwhile back to back (a scope's searches: see its docstring).

Cancellation: a request's call is never
cut short (uvicorn does not cancel a handler whose client left; its answer is
dropped). A stream's producer is ``cancellable``: when its reader goes, the trio
task is cancelled too, which ends its *wait*; a command already in an actor's
mailbox is still carried out and journaled. Backpressure is the server's own
(``max_concurrent_requests``): the bridge adds no queue of its own beyond the
calls not yet started, which it starts all at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, Generic, TypeVar

import trio

from mnemex import ActorClosed
from mnemex.lowlevel import ActorRef, Key, Runtime

__all__ = ["Bridge"]

T = TypeVar("T")

_END: Final = object()

READ_AHEAD: Final = 16
"""Batched asks a read-ahead covers at a time (``Bridge._ask_batch``): a scope's coarse
pass for 16 searches reads its int8 rows once, ~39 us a search against ~95 us for a
search alone (10,000 rows of 384 dimensions, caches cold; the products alone 23
against 54 us), and what it holds for them stays bounded (16 searches' bounds)."""


class _Call(Generic[T]):
    __slots__ = ("args", "cancellable", "fn", "future", "kwargs", "scope")

    def __init__(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], kwargs: dict[str, Any],
                 future: asyncio.Future[T], cancellable: bool) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.future = future
        self.cancellable = cancellable
        self.scope: trio.CancelScope | None = None


class _Answer:
    """The waiter of one ``Bridge.ask`` (the kernel's waiter protocol: ``done`` and
    ``resolve``): the kernel resolves it, in the run or in the host loop, both on
    this thread, and that settles the asker's asyncio future."""

    __slots__ = ("done", "future")

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.future = future
        self.done = False

    @property
    def abandoned(self) -> bool:
        """Whether nobody waits for it any more (its asker was cancelled)."""
        return self.done or self.future.done()

    def resolve(self, value: Any) -> None:
        if self.done:
            return
        self.done = True
        future = self.future
        if future.done():  # the asker was cancelled: nobody to answer
            return
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)


class Bridge:
    """Calls from asyncio code into one trio run hosted on the same thread.

    Made inside the trio run (it takes that run's token and a nursery of it, in
    which every call runs as a task); used from asyncio code on the same thread.
    """

    def __init__(self, nursery: trio.Nursery, loop: asyncio.AbstractEventLoop) -> None:
        self._nursery = nursery
        self._loop = loop
        self._token = trio.lowlevel.current_trio_token()
        # the run's context: what the kernel starts from the loop (an actor's task) runs
        # in it, as if started by the run, not in a request's asyncio context
        self._context = contextvars.copy_context()
        self._pending: deque[_Call[Any]] = deque()
        self._asks: deque[tuple[Runtime, ActorRef, Any, _Answer]] = deque()
        self._batched: deque[tuple[Runtime, ActorRef, Any, _Answer]] = deque()
        self._woken = False
        self._committing: set[Runtime] = set()
        self._closed = False

    # -- asyncio side -------------------------------------------------------------
    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await fn(*args, **kwargs)`` in the trio run, from asyncio. Exceptions come
        back as raised. Cancelling the caller abandons the answer, not the work: the
        trio task runs to its end (an actor's reply, bounded by ``kernel.ask_timeout``)."""
        return await self._submit(fn, args, kwargs, cancellable=False)

    async def cancellable(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Like ``call``, but cancelling the caller cancels the trio task too (a wait
        that only serves the caller, such as a stream's). Costs a cancel scope."""
        return await self._submit(fn, args, kwargs, cancellable=True)

    async def _submit(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], kwargs: dict[str, Any],
                      cancellable: bool) -> T:
        if self._closed:
            raise ActorClosed("the server is shutting down; retry against its successor")
        future: asyncio.Future[T] = self._loop.create_future()
        call = _Call(fn, args, kwargs, future, cancellable)
        self._pending.append(call)
        self._wake_run()
        try:
            return await future
        except asyncio.CancelledError:
            if call.scope is not None:
                self._token.run_sync_soon(call.scope.cancel)
            raise

    async def ask_batched(self, ref: ActorRef, command: Any) -> Any:
        """``ask``, taken a little later: in the loop's next turn, in one callback with
        every other batched ask made meanwhile, back to back, in the order made.
        Meant for reads the kernel answers inline (a search): run one after another,
        they find the actor's data still in the CPU's caches, where a search run in
        each request's handler, between the parsing, encoding and writing of others,
        finds it evicted (measured on POST /memory/search over 10,000 memories, 16
        connections: about 8% less server CPU per request than a search in each
        handler, or a trio task per search). Cancelling the caller abandons the
        answer, and the ask too while it is not sent yet."""
        if self._closed:
            raise ActorClosed("the server is shutting down; retry against its successor")
        future: asyncio.Future[Any] = self._loop.create_future()
        answer = _Answer(future)
        batched = self._batched
        batched.append((ref.runtime, ref, command, answer))
        if len(batched) == 1:
            self._loop.call_soon(self._ask_batch)
        try:
            return await future
        except asyncio.CancelledError:
            answer.done = True
            raise

    def _ask_batch(self) -> None:
        """In the loop: hand the batched asks to the kernel, in the order they came.
        Every ``READ_AHEAD`` of them, the actors asked twice or more among the next
        ``READ_AHEAD`` hear of their reads first (``Runtime.read_ahead``: a scope
        makes one pass over its vectors for all of its searches), and once the batch
        is asked, that nothing more is coming (what was not taken is let go)."""
        batched = self._batched
        ahead = 0  # asks left that a read-ahead covers
        told: set[tuple[Runtime, str, Key]] = set()
        while batched:
            if ahead == 0 and len(batched) > 1:
                told |= self._read_ahead(itertools.islice(batched, READ_AHEAD))
                ahead = READ_AHEAD
            ahead = max(0, ahead - 1)
            kernel, ref, command, answer = batched.popleft()
            if answer.abandoned:  # its caller gave up (was cancelled) before
                continue
            if not self._ask_here(kernel, ref, command, answer):
                self._asks.append((kernel, ref, command, answer))
                self._wake_run()
        for actor in told:
            self._tell_ahead(actor, ())

    def _read_ahead(self, asks: Iterable[tuple[Runtime, ActorRef, Any, _Answer]]
                    ) -> set[tuple[Runtime, str, Key]]:
        """Tell each actor asked twice or more in ``asks`` (by callers still waiting) of
        its commands, in order; returns the actors told."""
        by_actor: dict[tuple[Runtime, str, Key], list[Any]] = {}
        for kernel, ref, command, answer in asks:
            if not answer.abandoned:
                by_actor.setdefault((kernel, ref.kind, ref.key), []).append(command)
        told = set()
        for actor, commands in by_actor.items():
            if len(commands) >= 2:
                self._tell_ahead(actor, commands)
                told.add(actor)
        return told

    def _tell_ahead(self, actor: tuple[Runtime, str, Key], commands: Sequence[Any]) -> None:
        """``Runtime.read_ahead`` where ``_ask_here`` would ask (nothing when another
        thread has the run)."""
        kernel, kind, key = actor
        parked = kernel.parked
        if parked is not None and not parked.lock.acquire(blocking=False):
            return
        try:
            self._context.run(kernel.read_ahead, kind, key, commands)
        finally:
            if parked is not None:
                parked.lock.release()

    async def ask(self, ref: ActorRef, command: Any) -> Any:
        """``await ref.ask(command)`` (the default ask timeout) from asyncio, with no trio
        task: the kernel takes it here, between two ticks of the run (see the
        module's docstring); from the run, in a batch, when another thread holds the
        run's lock. Cancelling the caller abandons the answer, never the ask."""
        if self._closed:
            raise ActorClosed("the server is shutting down; retry against its successor")
        future: asyncio.Future[Any] = self._loop.create_future()
        answer = _Answer(future)
        kernel = ref.runtime
        if not self._ask_here(kernel, ref, command, answer):
            self._asks.append((kernel, ref, command, answer))
            self._wake_run()
        try:
            return await future
        except asyncio.CancelledError:
            answer.done = True
            raise

    def _ask_here(self, kernel: Runtime, ref: ActorRef, command: Any, answer: _Answer) -> bool:
        """Hand the ask to the kernel from the loop; False (nothing done) when another
        thread holds the run's lock. A write taken gets its round at the end of this
        turn of the loop, with the others made in it."""
        parked = kernel.parked
        if parked is not None and not parked.lock.acquire(blocking=False):
            return False
        try:
            if not self._context.run(kernel.ask_nowait, ref.kind, ref.key, command, answer):
                return False  # the mailbox is full: from the run, which waits for room
        except Exception as exc:  # ActorClosed, NotOwner, ActorCrashed: the asker's to raise
            answer.resolve(exc)
            return True
        finally:
            if parked is not None:
                parked.lock.release()
        if kernel not in self._committing:
            self._committing.add(kernel)
            self._loop.call_soon(self._start_commit, kernel)
        return True

    def _start_commit(self, kernel: Runtime) -> None:
        """In the loop, once per turn that asked ``kernel``: start the round of the writes
        taken inline meanwhile (the run would at the end of its next batch; it may
        not take one soon)."""
        self._committing.discard(kernel)
        parked = kernel.parked
        if parked is not None and not parked.lock.acquire(blocking=False):
            self._token.run_sync_soon(_nothing)  # another thread has the run: its next batch starts it
            return
        try:
            self._context.run(kernel.start_commit)
        finally:
            if parked is not None:
                parked.lock.release()

    async def iterate(self, source: Callable[[], AsyncIterator[T]], *, buffer: int = 64) -> AsyncIterator[T]:
        """The items of ``source()``, an async iterator of the trio run, as an asyncio
        async iterator. The trio side runs ahead of the reader by at most ``buffer``
        items, then waits; leaving (or cancelling) the iteration closes ``source``'s
        iterator in trio at once."""
        relay = _Relay()
        runner = asyncio.ensure_future(self.cancellable(relay.produce, source, buffer))
        try:
            while True:
                if not relay.items:
                    if runner.done():
                        runner.result()  # the producer's own failure, if any
                        return
                    relay.reader = self._loop.create_future()
                    await relay.reader
                    continue
                item = relay.items.popleft()
                if relay.full is not None and len(relay.items) <= buffer // 2:
                    self._token.run_sync_soon(relay.full.set)
                    relay.full = None
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            if not runner.done():
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner

    def close(self) -> None:
        """Refuse new calls (ActorClosed): the server is shutting down."""
        self._closed = True

    def _wake_run(self) -> None:
        """Have the run start what is pending: woken once for all that is submitted
        before it gets there."""
        if not self._woken:
            self._woken = True
            self._token.run_sync_soon(self._start_pending)

    # -- trio side ------------------------------------------------------------------
    def _start_pending(self) -> None:
        self._woken = False
        pending = self._pending
        while pending:
            call = pending.popleft()
            if call.future.done():  # cancelled before it started
                continue
            self._nursery.start_soon(self._run, call)
        asks = self._asks
        while asks:
            kernel, ref, command, answer = asks.popleft()
            if answer.done:
                continue
            try:
                if kernel.ask_nowait(ref.kind, ref.key, command, answer):
                    continue
            except Exception as exc:
                answer.resolve(exc)
                continue
            self._nursery.start_soon(self._ask_waiting, ref, command, answer)  # no room: wait for it

    @staticmethod
    async def _ask_waiting(ref: ActorRef, command: Any, answer: _Answer) -> None:
        try:
            value = await ref.ask(command)
        except trio.Cancelled:
            answer.resolve(ActorClosed("the server is shutting down; the request was not answered"))
            raise
        except Exception as exc:
            answer.resolve(exc)
        else:
            answer.resolve(value)

    async def _run(self, call: _Call[Any]) -> None:
        if not call.cancellable:
            await self._outcome(call)
            return
        with trio.CancelScope() as call.scope:
            if not call.future.done():
                await self._outcome(call)

    @staticmethod
    async def _outcome(call: _Call[Any]) -> None:
        """Run ``call`` and settle its future (unless its caller gave up on it)."""
        future = call.future
        try:
            result = await call.fn(*call.args, **call.kwargs)
        except trio.Cancelled:
            if not future.done():
                future.set_exception(ActorClosed("the server is shutting down; the request was not answered"))
            raise
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        if not future.done():
            future.set_result(result)


def _nothing() -> None:
    """A callback that only wakes the run (its batch's end starts a commit round)."""


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class _Relay:
    """What Bridge.iterate's two sides share: the items produced and not yet read,
    the reader's wake-up (an asyncio future) and the producer's (a trio event, set
    when the reader has made room)."""

    __slots__ = ("full", "items", "reader")

    def __init__(self) -> None:
        self.items: deque[Any] = deque()
        self.reader: asyncio.Future[None] | None = None
        self.full: trio.Event | None = None

    def _wake_reader(self) -> None:
        if self.reader is not None and not self.reader.done():
            self.reader.set_result(None)

    async def produce(self, source: Callable[[], AsyncIterator[Any]], buffer: int) -> None:
        """The trio side: iterate ``source()`` into ``items``, waiting while ``buffer``
        items are unread; then the end, or the failure, as the last item."""
        try:
            iterator = source()
            try:
                async for item in iterator:
                    self.items.append(item)
                    self._wake_reader()
                    if len(self.items) >= buffer:
                        self.full = trio.Event()
                        await self.full.wait()
            finally:
                closer = getattr(iterator, "aclose", None)
                if closer is not None:
                    with trio.CancelScope(shield=True):
                        await closer()
            self.items.append(_END)
        except Exception as exc:  # to the reader; a cancellation ends the call itself (ActorClosed)
            self.items.append(_Failure(exc))
        finally:
            self._wake_reader()
