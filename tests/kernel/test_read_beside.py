"""Reads beside the actor (``ActorKind.read_beside``): a run of such reads in a batch
runs in worker threads, side by side, and the actor handles nothing else until all
have returned. So a read sees every command sent before it and none sent after it,
replies keep their order, a read that refuses answers only its caller and one that
breaks is a crash like any other.

The counter kind is given a ``read_beside`` for ``Get`` whose reply is the total it
read and the thread it read it in; a read may wait at a barrier that opens only
when as many reads wait at it (threads, not time: a read run alone would time out)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest
import trio

import mnemex
from mnemex.effects import Behaviour, Beside
from mnemex.errors import ActorCrashed, InvalidInput
from mnemex.kernel import ActorKind, Runtime, _kernel
from mnemex.lowlevel import open_actor_runtime
from mnemex.testing import Add, Counter, Entries, Get, counter_kind

BARRIERS: list[threading.Barrier | None] = []
"""What the next planned reads wait at, in mailbox order (each planned read takes one)."""
BROKEN: list[BaseException] = []
"""What the next planned reads raise, in mailbox order."""


def plan_read(behaviour: Behaviour, command: Any) -> Beside | None:
    if type(command) is not Get:
        return None
    assert isinstance(behaviour, Counter)
    barrier = BARRIERS.pop(0) if BARRIERS else None
    error = BROKEN.pop(0) if BROKEN else None

    def run() -> tuple[int, int]:
        seen = behaviour.total
        if barrier is not None:
            barrier.wait()
        if error is not None:
            raise error
        return seen, threading.get_ident()

    return Beside(run)


BESIDE: ActorKind = dataclasses.replace(counter_kind(), read_beside=plan_read)


class Answers:
    """Waiters for ``Runtime.ask_nowait``: every reply (or error) by position."""

    def __init__(self, count: int) -> None:
        self.values: list[Any] = [None] * count
        self.left = count
        self.all_in = trio.Event()

    def waiter(self, position: int) -> Any:
        answers = self

        class Waiter:
            done = False

            def resolve(self, value: Any) -> None:
                answers.values[position] = value
                answers.left -= 1
                if answers.left == 0:
                    answers.all_in.set()

        return Waiter()


async def batch(rt: Runtime, commands: list[Any]) -> list[Any]:
    """Send ``commands`` to counter "c" in this order without waiting in between (one
    batch for the actor), then wait for every answer."""
    answers = Answers(len(commands))
    for position, command in enumerate(commands):
        assert rt.ask_nowait(BESIDE.name, "c", command, answers.waiter(position))
    with trio.fail_after(30):
        await answers.all_in.wait()
    return answers.values


@pytest.fixture(autouse=True)
def _fresh_plans() -> Any:
    BARRIERS.clear()
    BROKEN.clear()
    yield
    BARRIERS.clear()
    BROKEN.clear()


async def test_reads_run_side_by_side_in_worker_threads_and_see_exactly_the_writes_before_them() -> None:
    together = threading.Barrier(2, timeout=20)
    BARRIERS.extend([together, together])  # the first two reads wait for each other
    async with open_actor_runtime(mnemex.Config(data_dir=None), [BESIDE]) as rt:
        replies = await batch(rt, [Add(1), Get(), Get(), Add(10), Get(), Add(100)])
        assert replies[0] == 1 and replies[3] == 11 and replies[5] == 111
        (first, first_thread), (second, second_thread) = replies[1], replies[2]
        third, third_thread = replies[4]
        assert (first, second, third) == (1, 1, 11)
        assert first_thread != second_thread  # both waited at the barrier: side by side
        assert threading.get_ident() not in (first_thread, second_thread, third_thread)
        assert await rt.ask(BESIDE.name, "c", Entries()) == [("", 1), ("", 10), ("", 100)]


def plan_quick_read(behaviour: Behaviour, command: Any) -> Beside | None:
    plan = plan_read(behaviour, command)
    return dataclasses.replace(plan, quick=True) if plan is not None else None


QUICK: ActorKind = dataclasses.replace(counter_kind(), name="quick", read_beside=plan_quick_read)


async def test_a_quick_read_alone_in_its_run_is_read_in_the_actors_task_while_nothing_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    idle = [True]
    monkeypatch.setattr(_kernel, "_loop_is_idle", lambda: idle[0])
    async with open_actor_runtime(mnemex.Config(data_dir=None), [BESIDE, QUICK]) as rt:
        for kind in (BESIDE.name, QUICK.name):
            assert await rt.ask(kind, "c", Add(5)) == 5
        seen, thread = await rt.ask(QUICK.name, "c", Get())
        assert seen == 5 and thread == threading.get_ident()  # nothing else waits: the actor's task
        seen, thread = await rt.ask(BESIDE.name, "c", Get())
        assert seen == 5 and thread != threading.get_ident()  # not quick: a worker thread
        idle[0] = False
        seen, thread = await rt.ask(QUICK.name, "c", Get())
        assert seen == 5 and thread != threading.get_ident()  # something else waits
        idle[0] = True
        replies = await batch(rt, [Get(), Get()])  # (two in one run: threads, whatever the loop does)
        assert threading.get_ident() not in {thread for _, thread in replies}
        rt.report_to_host(lambda *args: None)  # a host loop's guest: it cannot tell the host is idle
        seen, thread = await rt.ask(QUICK.name, "c", Get())
        assert seen == 5 and thread != threading.get_ident()
        rt.report_to_host(None)


async def test_a_quick_read_goes_to_a_worker_thread_while_another_actor_takes_a_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two actors woken in one turn of the loop do not see each other's task as ready
    (the turn's tasks have left the run queue): each counts the other taking a batch."""
    monkeypatch.setattr(_kernel, "_loop_is_idle", lambda: True)
    gate = threading.Barrier(2, timeout=20)
    async with open_actor_runtime(mnemex.Config(data_dir=None), [BESIDE, QUICK]) as rt:
        assert await rt.ask(QUICK.name, "a", Add(1)) == 1
        assert await rt.ask(BESIDE.name, "b", Add(2)) == 2
        BARRIERS.append(gate)  # b's read waits in its thread: b's batch is not done
        held = Answers(1)
        assert rt.ask_nowait(BESIDE.name, "b", Get(), held.waiter(0))
        with trio.fail_after(20):
            while rt._processing != 1:
                await trio.sleep(0.001)
        seen, thread = await rt.ask(QUICK.name, "a", Get())
        assert seen == 1 and thread != threading.get_ident()  # b takes a batch: a worker thread
        await trio.to_thread.run_sync(gate.wait)  # b's read goes on
        with trio.fail_after(20):
            await held.all_in.wait()
        assert held.values[0][0] == 2
        seen, thread = await rt.ask(QUICK.name, "a", Get())
        assert seen == 1 and thread == threading.get_ident()  # alone again: the actor's task


async def test_the_loop_is_idle_only_while_no_task_is_ready_and_no_callback_waits() -> None:
    assert _kernel._loop_is_idle()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.lowlevel.checkpoint)  # ready to run from now until it has run
        assert not _kernel._loop_is_idle()
    assert _kernel._loop_is_idle()
    token = trio.lowlevel.current_trio_token()
    ran = trio.Event()
    token.run_sync_soon(ran.set)  # as a bridged ask or a thread's result comes in
    assert not _kernel._loop_is_idle()
    await ran.wait()
    assert _kernel._loop_is_idle()


async def test_no_read_threads_answer_every_read_in_the_actors_turn() -> None:
    async with open_actor_runtime(mnemex.Config(data_dir=None, read_threads=0), [BESIDE]) as rt:
        replies = await batch(rt, [Add(2), Get(), Add(3), Get()])
        assert replies == [2, (2, 1), 5, (5, 2)]  # the handler's own reply: (total, entries)


async def test_one_thread_runs_the_reads_of_a_batch_one_after_another_in_order() -> None:
    async with open_actor_runtime(mnemex.Config(data_dir=None, read_threads=1), [BESIDE]) as rt:
        replies = await batch(rt, [Add(1), *[Get() for _ in range(20)], Add(1), Get()])
        assert [reply[0] for reply in replies[1:21]] == [1] * 20
        assert len({reply[1] for reply in replies[1:21]}) == 1
        assert replies[21] == 2 and replies[22][0] == 2


async def test_a_read_that_refuses_answers_only_its_caller() -> None:
    BROKEN.extend([InvalidInput("no such thing", field="what")])
    async with open_actor_runtime(mnemex.Config(data_dir=None), [BESIDE]) as rt:
        replies = await batch(rt, [Add(4), Get(), Get(), Add(1)])
        assert isinstance(replies[1], InvalidInput) and "no such thing" in str(replies[1])
        assert replies[2][0] == 4 and replies[3] == 5
        assert rt.stats().crashes == 0


async def test_a_read_that_breaks_is_a_crash_and_the_actor_keeps_its_accepted_state() -> None:
    BROKEN.extend([RuntimeError("a bug in the read")])
    async with open_actor_runtime(mnemex.Config(data_dir=None), [BESIDE]) as rt:
        replies = await batch(rt, [Add(4), Get(), Add(1)])
        assert replies[0] == 4
        assert isinstance(replies[1], ActorCrashed) and "a bug in the read" in str(replies[1])
        assert replies[2] == 5  # the write after it is handled once the actor is rebuilt
        assert (await rt.ask(BESIDE.name, "c", Get()))[0] == 5
        assert rt.stats().crashes == 1


async def test_a_planning_that_breaks_is_a_crash_too() -> None:
    def broken_plan(behaviour: Behaviour, command: Any) -> Beside | None:
        raise RuntimeError("the plan broke")

    kind = dataclasses.replace(counter_kind(), read_beside=broken_plan)
    async with open_actor_runtime(mnemex.Config(data_dir=None), [kind]) as rt:
        assert await rt.ask(kind.name, "c", Add(3)) == 3
        with pytest.raises(ActorCrashed, match="the plan broke"):
            await rt.ask(kind.name, "c", Get())
        assert await rt.ask(kind.name, "c", Add(1)) == 4


async def test_many_callers_see_their_own_acknowledged_writes() -> None:
    seen: list[tuple[int, int]] = []

    async def caller(rt: Runtime, me: int, rounds: int, next_step: Callable[[], None]) -> None:
        for _ in range(rounds):
            total = await rt.ask(BESIDE.name, "c", Add(1))
            read, _thread = await rt.ask(BESIDE.name, "c", Get())
            seen.append((total, read))
            next_step()

    steps = [0]

    def step() -> None:
        steps[0] += 1

    async with open_actor_runtime(mnemex.Config(data_dir=None), [BESIDE]) as rt:
        async with trio.open_nursery() as nursery:
            for me in range(8):
                nursery.start_soon(caller, rt, me, 25, step)
        assert steps[0] == 200
        assert all(read >= total for total, read in seen)  # a read sees the write acknowledged before it
        assert (await rt.ask(BESIDE.name, "c", Get()))[0] == 200
