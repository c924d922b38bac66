"""The bridge from the server's asyncio loop into a trio guest run on the same
thread: order, outcomes, cancellation, iteration with backpressure, and closing.

Each test runs a uvloop event loop hosting a trio guest run, as ``mnemex serve``
does; nothing sleeps: each side waits on what the other observably did.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import outcome
import pytest
import trio
import trio.testing
import uvloop

from mnemex import ActorClosed, InvalidInput
from mnemex.server._bridge import Bridge


def hosted(test: Callable[[Bridge], Awaitable[None]]) -> None:
    """Run ``test(bridge)`` on a uvloop loop whose trio guest run offers ``bridge``;
    the trio run ends (its nursery drained) once the test returns."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[tuple[Bridge, trio.lowlevel.TrioToken, trio.Event]] = loop.create_future()
        done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

        async def guest() -> None:
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                ready.set_result((Bridge(nursery, loop), trio.lowlevel.current_trio_token(), stop))
                await stop.wait()
                nursery.cancel_scope.cancel()

        trio.lowlevel.start_guest_run(guest, run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                                      run_sync_soon_not_threadsafe=loop.call_soon,
                                      done_callback=done.set_result, host_uses_signal_set_wakeup_fd=True)
        bridge, token, stop = await ready
        try:
            await test(bridge)
        finally:
            token.run_sync_soon(stop.set)
            (await done).unwrap()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


def test_a_call_returns_the_trio_functions_value_and_runs_in_trio() -> None:
    async def in_trio(a: int, *, b: int) -> tuple[int, str]:
        await trio.sleep(0)
        return a + b, trio.lowlevel.current_task().name

    async def test(bridge: Bridge) -> None:
        value, task = await bridge.call(in_trio, 2, b=3)
        assert value == 5
        assert "_run" in task  # a trio task of the bridge's nursery

    hosted(test)


def test_each_callers_calls_run_in_its_order_beside_other_callers() -> None:
    """A connection's requests are answered one at a time, so its calls follow one
    another; calls of different connections interleave freely."""
    seen: list[tuple[int, int]] = []

    async def record(caller: int, i: int) -> None:
        seen.append((caller, i))
        await trio.sleep(0)

    async def caller(bridge: Bridge, who: int) -> None:
        for i in range(100):
            await bridge.call(record, who, i)

    async def test(bridge: Bridge) -> None:
        await asyncio.gather(*(caller(bridge, who) for who in range(8)))
        for who in range(8):
            assert [i for c, i in seen if c == who] == list(range(100))
        assert len({c for c, _ in seen[:40]}) > 1  # they did run side by side

    hosted(test)


def test_an_exception_comes_back_as_raised() -> None:
    async def refuse() -> None:
        await trio.sleep(0)
        raise InvalidInput("no such thing", field="thing")

    async def test(bridge: Bridge) -> None:
        with pytest.raises(InvalidInput, match="no such thing") as caught:
            await bridge.call(refuse)
        assert caught.value.field == "thing"
        assert await bridge.call(trio.sleep, 0) is None  # the bridge still works

    hosted(test)


def test_cancelling_a_cancellable_caller_cancels_the_wait_and_keeps_what_was_done() -> None:
    done_before_wait: list[str] = []
    trio_saw: asyncio.Future[str] | None = None

    async def work_then_wait() -> None:
        done_before_wait.append("appended")  # like a command already in an actor's mailbox
        assert waiting is not None
        waiting.set_result(None)
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            assert trio_saw is not None
            trio_saw.set_result("cancelled")
            raise

    waiting: asyncio.Future[None] | None = None

    async def test(bridge: Bridge) -> None:
        nonlocal waiting, trio_saw
        loop = asyncio.get_running_loop()
        waiting, trio_saw = loop.create_future(), loop.create_future()
        caller = asyncio.ensure_future(bridge.cancellable(work_then_wait))
        await waiting
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert await trio_saw == "cancelled"
        assert done_before_wait == ["appended"]

    hosted(test)


def test_a_call_cancelled_before_it_started_never_runs() -> None:
    ran: list[int] = []

    async def run(i: int) -> None:
        ran.append(i)

    async def test(bridge: Bridge) -> None:
        first = asyncio.ensure_future(bridge.call(run, 1))
        second = asyncio.ensure_future(bridge.call(run, 2))
        await asyncio.sleep(0)  # both made and queued; the trio run has not picked them up
        second.cancel()
        await first
        with pytest.raises(asyncio.CancelledError):
            await second
        assert await bridge.call(run, 3) is None
        assert ran == [1, 3]

    hosted(test)


def test_cancelling_a_plain_caller_abandons_the_answer_but_the_work_runs_to_its_end() -> None:
    finished: list[str] = []

    async def slow(gate: trio.Event) -> str:
        await gate.wait()
        finished.append("done")
        return "answer nobody reads"

    async def test(bridge: Bridge) -> None:
        gate = await bridge.call(_make_event)
        caller = asyncio.ensure_future(bridge.call(slow, gate))
        await bridge.call(trio.testing.wait_all_tasks_blocked)  # slow() waits at its gate
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await bridge.call(_set, gate)
        await bridge.call(trio.testing.wait_all_tasks_blocked)
        assert finished == ["done"]

    hosted(test)


async def _make_event() -> trio.Event:
    return trio.Event()


async def _set(event: trio.Event) -> None:
    event.set()


def test_after_close_a_call_is_refused_with_actor_closed() -> None:
    async def test(bridge: Bridge) -> None:
        bridge.close()
        with pytest.raises(ActorClosed, match="shutting down"):
            await bridge.call(trio.sleep, 0)

    hosted(test)


def test_iterate_yields_every_item_in_order_and_the_producer_stays_within_the_buffer() -> None:
    produced: list[int] = []

    async def numbers() -> AsyncIterator[int]:
        for i in range(100):
            produced.append(i)
            yield i
            await trio.sleep(0)

    async def test(bridge: Bridge) -> None:
        received: list[int] = []
        async for item in bridge.iterate(numbers, buffer=8):
            received.append(item)
            # the trio side never runs more than the buffer ahead of this reader
            assert len(produced) - len(received) <= 8, (len(produced), len(received))
            if item % 10 == 0:  # a slow reader: let the producer run as far as it may
                for _ in range(5):
                    await bridge.call(trio.sleep, 0)
        assert received == list(range(100))

    hosted(test)


def test_leaving_an_iteration_closes_the_trio_iterator_at_once() -> None:
    closed: list[str] = []

    async def endless() -> AsyncIterator[int]:
        i = 0
        try:
            while True:
                yield i
                i += 1
                await trio.sleep(0)
        finally:
            closed.append("closed in trio")

    async def test(bridge: Bridge) -> None:
        items = bridge.iterate(endless, buffer=4)
        assert [await anext(items) for _ in range(3)] == [0, 1, 2]
        await items.aclose()  # type: ignore[attr-defined]
        for _ in range(10):  # the trio side's close, observed through the bridge itself
            if closed:
                break
            await bridge.call(trio.sleep, 0)
        assert closed == ["closed in trio"]

    hosted(test)


def test_an_error_while_iterating_reaches_the_reader_after_the_items_before_it() -> None:
    async def failing() -> AsyncIterator[str]:
        yield "first"
        raise InvalidInput("the source broke")

    async def test(bridge: Bridge) -> None:
        received: list[Any] = []
        with pytest.raises(InvalidInput, match="the source broke"):
            async for item in bridge.iterate(failing):
                received.append(item)
        assert received == ["first"]

    hosted(test)
