"""The blocking bridge: a runtime on a background thread for hosts that are not trio.

The bridge thread runs ``trio.run``; every blocking call hops into it with
``trio.from_thread.run`` and waits. Calls are safe from any number of threads
(and from asyncio through ``asyncio.to_thread``). Closing the bridge shuts the
runtime down cleanly (drain, snapshot) and joins the thread.

An ask of one actor (``ask``) takes a shorter way: a callback queued on the run
(``TrioToken.run_sync_soon``) puts it in the actor's mailbox with a waiter whose
answer releases a lock the calling thread waits on, so no trio task is started for
the caller; a read or write the actor's kind takes inline is handled in that
callback (see ``Runtime.ask_nowait``). Shorter still, while the run is parked
waiting for I/O (most of the time for an idle runtime) such a read is answered in
the calling thread itself, and such a write journaled there and its group commit
handed to the commit threads from there (the run answers it once durable): the
kernel holds a lock whenever the run executes and lets go of it only around its
I/O wait (``ParkedRun``), so a caller that takes it knows no code of the run
executes until it lets go (the run waits for it before going on); see
``Runtime.read_parked`` and ``Runtime.write_parked``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

import trio

from mnemex.config import DEFAULT, UseDefault
from mnemex.effects import Key
from mnemex.errors import ActorClosed, Timeout
from mnemex.kernel._kernel import ActorRef, Runtime, _timeout_error

__all__ = ["BlockingBridge", "BlockingRef"]

R = TypeVar("R")
T = TypeVar("T")

_POLL = 0.5  # how often a waiting caller checks that the runtime's thread still runs
# how long a read waits for the run to park (it parks as soon as it has nothing to
# run: after the write a caller just made, say) before it is sent the other way
_PARK_WAIT = 0.0002


class _ThreadWaiter:
    """The caller's side of one ``BlockingBridge.ask``: resolved in the runtime's
    thread (by the kernel, as any waiter), waited for in the caller's. ``done``
    once answered or given up (an answer then is dropped)."""

    __slots__ = ("_lock", "done", "value")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self._lock = threading.Lock()
        self._lock.acquire()

    def resolve(self, value: Any) -> None:
        if self.done:
            return
        self.done = True
        self.value = value
        self._lock.release()

    def wait(self, alive: Callable[[], bool], limit: float | None = None) -> bool | None:
        """Wait for the answer: True once it is in ``value``; False if the runtime's
        thread ended without one; None after ``limit`` seconds (given up: an answer
        after that is dropped)."""
        lock = self._lock
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            left = _POLL if deadline is None else min(_POLL, deadline - time.monotonic())
            if left > 0 and lock.acquire(timeout=left):
                return True
            if not alive():
                return lock.acquire(blocking=False)
            if deadline is not None and time.monotonic() >= deadline:
                self.done = True
                return True if lock.acquire(blocking=False) else None


class BlockingBridge(Generic[R]):
    """Runs ``opener()`` (an async context manager yielding a runtime) on its own
    thread until ``close()``. ``start_timeout`` bounds start-up; an error while
    opening (a locked data directory, say) is raised here, in the caller's thread."""

    def __init__(self, opener: Callable[[], AbstractAsyncContextManager[R]], *,
                 start_timeout: float = 60.0, name: str = "mnemex-runtime") -> None:
        self._opener = opener
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        # the asks sent to the run and not answered yet: while there are any, reads do
        # not take the run's lock (a caller reading in a loop would hold the GIL and
        # keep the run, and those asks, waiting)
        self._waiting: set[_ThreadWaiter] = set()
        self._clock: trio.abc.Clock | None = None
        self._stop: trio.Event | None = None
        self._runtime: R | None = None
        self._failure: BaseException | None = None  # raised after start-up, not yet reported
        self._ending = False  # the run is ending without close(): a failure is on its way
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        if not self._ready.wait(start_timeout):
            raise Timeout(f"the runtime did not start within {start_timeout:g} s")
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # never lost: to the opening thread, or the next call
            if not self._ready.is_set():
                self._error = exc
            else:
                self._failure = exc
        finally:
            self._ready.set()

    def _raise_failure(self) -> None:
        """Raise what ended the runtime after start-up, once; later calls get ActorClosed."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    async def _serve(self) -> None:
        self._stop = trio.Event()
        self._clock = trio.lowlevel.current_clock()
        async with self._opener() as runtime:
            self._runtime = runtime
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            try:
                await self._stop.wait()
            except trio.Cancelled:
                # a task of the run failed: calls that reach the closing runtime now must
                # report that failure, not the ActorClosed the shutdown gives them
                self._ending = True
                raise

    @property
    def runtime(self) -> R:
        """The runtime object; use it only from inside ``call``."""
        if self._runtime is None:
            raise ActorClosed("the client is closed")
        return self._runtime

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float | None = None) -> T:
        """Run ``await fn(*args)`` in the runtime's thread and return its result."""
        self._raise_failure()
        if self._closed or self._token is None:
            raise ActorClosed("the client is closed")

        async def run() -> T:
            if timeout is None:
                return await fn(*args)
            with trio.move_on_after(timeout):
                return await fn(*args)
            raise Timeout(f"{getattr(fn, '__name__', 'call')} took longer than {timeout:g} s")

        try:
            return trio.from_thread.run(run, trio_token=self._token)
        except trio.RunFinishedError as exc:
            self._thread.join()
            self._raise_failure()
            raise ActorClosed("the client's runtime has stopped") from exc
        except ActorClosed:
            if self._ending:
                self._thread.join()
                self._raise_failure()
            raise

    def ask(self, kernel: Runtime, kind: str, key: str | Key, command: Any, *,
            timeout: float | UseDefault | None = DEFAULT) -> Any:
        """``await kernel.ask(kind, key, command, timeout=timeout)`` in the runtime's
        thread, by the short way (see the module docstring) when ``timeout`` is
        DEFAULT or None."""
        if timeout is not DEFAULT and timeout is not None:
            return self.call(functools.partial(kernel.ask, kind, key, command, timeout=timeout))
        self._raise_failure()
        token, clock = self._token, self._clock
        if self._closed or token is None:
            raise ActorClosed("the client is closed")
        registered = kernel.kinds.get(kind)
        parked = kernel.parked
        waiter = _ThreadWaiter()
        taken = False
        if registered is not None and parked is not None and clock is not None and type(key) is tuple:
            inline_read, inline_write = registered.inline_read, registered.inline_write
            if (inline_read is not None and inline_read(command) and not self._waiting and not parked.wanted
                    and parked.lock.acquire(timeout=_PARK_WAIT)):
                try:  # the run is parked: a read of an idle actor is answered here
                    answered, value = kernel.read_parked(kind, key, command, clock.current_time())
                finally:
                    parked.lock.release()
                if answered:
                    if isinstance(value, BaseException):
                        raise value
                    return value
            elif (inline_write is not None and inline_write(command) and not parked.wanted
                    and parked.lock.acquire(timeout=_PARK_WAIT)):
                try:  # the run is parked: a write of an idle actor is journaled here
                    taken = kernel.write_parked(kind, key, command, waiter, clock.current_time())
                finally:
                    parked.lock.release()
        if not taken:
            try:
                token.run_sync_soon(self._start_ask, kernel, (kind, key, command, timeout is DEFAULT), waiter)
            except trio.RunFinishedError as exc:
                self._thread.join()
                self._raise_failure()
                raise ActorClosed("the client's runtime has stopped") from exc
        # a write taken in this thread has no deadline in the run: this thread keeps it
        limit = kernel.config.kernel.ask_timeout if taken and timeout is DEFAULT else None
        self._waiting.add(waiter)
        try:
            outcome = waiter.wait(self._thread.is_alive, limit)
        except BaseException:  # interrupted (KeyboardInterrupt): the answer, if any, is dropped
            waiter.done = True
            raise
        finally:
            self._waiting.discard(waiter)
        if outcome is None:  # only a write taken in this thread has a limit here: its key is a tuple
            assert limit is not None and isinstance(key, tuple)
            raise _timeout_error(kind, key, command, limit)
        if not outcome:
            waiter.done = True
            self._thread.join()
            self._raise_failure()
            raise ActorClosed("the client's runtime stopped during the call")
        value = waiter.value
        if isinstance(value, BaseException):
            if isinstance(value, ActorClosed) and self._ending:
                self._thread.join()
                self._raise_failure()
            raise value
        return value

    @staticmethod
    def _start_ask(kernel: Runtime, request: tuple[str, str | Key, Any, bool], waiter: _ThreadWaiter) -> None:
        """In the runtime's thread: send the ask (kind, key, command, with the default
        timeout or none); it must not raise (trio would end the run)."""
        kind, key, command, limit = request
        try:
            if kernel.ask_nowait(kind, key, command, waiter, limit=limit):
                return
        except Exception as exc:  # ActorClosed, ActorCrashed: the caller's to raise
            waiter.resolve(exc)
            return

        async def ask() -> None:  # the mailbox is full: wait for room as any ask
            try:
                value = await kernel.ask(kind, key, command, timeout=DEFAULT if limit else None)
            except trio.Cancelled:
                waiter.resolve(ActorClosed("the client's runtime stopped during the call"))
                raise
            except Exception as exc:
                waiter.resolve(exc)
            else:
                waiter.resolve(value)

        try:
            trio.lowlevel.spawn_system_task(ask, name="blocking ask")
        except Exception as exc:  # the run is ending
            waiter.resolve(ActorClosed(f"the client's runtime is stopping: {exc}"))

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Start ``await fn(*args)`` in the runtime's thread and return at once: a
        Future settled with its outcome (``asyncio.wrap_future`` awaits it from an event
        loop without a worker thread). The call runs to its end even if nobody waits
        for the Future any more; cancelling the Future does not stop it."""
        self._raise_failure()
        token = self._token
        if self._closed or token is None:
            raise ActorClosed("the client is closed")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # from here on it can only be settled

        async def run() -> None:
            try:
                result = await fn(*args)
            except trio.Cancelled:
                future.set_exception(ActorClosed("the client's runtime stopped during the call"))
                raise
            except Exception as exc:  # to the caller, through the Future
                future.set_exception(exc)
            else:
                future.set_result(result)

        try:
            token.run_sync_soon(functools.partial(trio.lowlevel.spawn_system_task, run,
                                                  name=getattr(fn, "__name__", "call")))
        except trio.RunFinishedError as exc:
            raise ActorClosed("the client's runtime has stopped") from exc
        return future

    def close(self) -> None:
        """Shut the runtime down cleanly and join its thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        stop, token = self._stop, self._token
        if stop is not None and token is not None:
            try:
                trio.from_thread.run_sync(stop.set, trio_token=token)
            except trio.RunFinishedError:
                pass
        self._thread.join()
        self._raise_failure()

    def __enter__(self: BlockingBridgeT) -> BlockingBridgeT:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


BlockingBridgeT = TypeVar("BlockingBridgeT", bound=BlockingBridge[Any])


class BlockingRef:
    """A blocking ActorRef: the same ask/tell, waiting in the calling thread."""

    __slots__ = ("_bridge", "_ref")

    def __init__(self, bridge: BlockingBridge[Any], ref: Any) -> None:
        self._bridge = bridge
        self._ref = ref

    @property
    def kind(self) -> str:
        return str(self._ref.kind)

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(self._ref.key)

    def ask(self, command: Any, *, timeout: float | UseDefault | None = DEFAULT) -> Any:
        ref = self._ref
        if isinstance(ref, ActorRef):  # in-process: the bridge's short way
            return self._bridge.ask(ref.runtime, ref.kind, ref.key, command, timeout=timeout)
        return self._bridge.call(functools.partial(ref.ask, command, timeout=timeout))

    def tell(self, command: Any) -> None:
        self._bridge.call(self._ref.tell, command)

