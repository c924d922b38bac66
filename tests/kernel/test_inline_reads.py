"""Reads answered in the asking task (``ActorKind.inline_read``, ``inline_when``): an
``ask`` from a task of the run for a read the kind names, of an idle, loaded actor
whose every write is durable, is answered there, as the actor would answer it next,
without a mailbox round trip. So a read still sees every write acknowledged before
it was sent: a read behind a write that is queued, or applied but not yet durable,
goes through the mailbox, behind it."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from gated_storage import GatedStorage, count_activations
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.effects import Behaviour
from mnemex.kernel import ActorKind
from mnemex.kernel._slices import INLINE_STREAK, InlineSlices
from mnemex.lowlevel import open_actor_runtime
from mnemex.testing import Add, Counter, Entries, Get, counter_kind

WHEN: list[bool] = []
"""What the next ``inline_when`` calls answer (True once the list is empty)."""


def _reads(command: Any) -> bool:
    return type(command) is Get or type(command) is Entries


def _when(behaviour: Behaviour, command: Any) -> bool:
    assert isinstance(behaviour, Counter)
    return WHEN.pop(0) if WHEN else True


INLINE: ActorKind = dataclasses.replace(counter_kind(), inline_read=_reads, inline_when=_when)


async def test_a_read_of_an_idle_actor_is_answered_without_starting_its_task() -> None:
    async with open_actor_runtime(mnemex.Config(data_dir=None), [INLINE], storage=GatedStorage()) as rt:
        assert await rt.ask("counter", "c", Add(2)) == 2  # loads the actor, in its task
        await trio.testing.wait_all_tasks_blocked()  # its task lingered and ended
        started = count_activations(rt)
        for _ in range(5):
            assert await rt.ask("counter", "c", Get()) == (2, 1)
        assert await rt.ask("counter", "c", Entries()) == [("", 2)]
        assert started == [0]
        assert await rt.ask("counter", "c", Add(3)) == 5  # a write takes the mailbox
        assert started == [1]


async def test_a_read_the_behaviour_does_not_take_inline_goes_through_the_mailbox() -> None:
    WHEN[:] = [False]
    async with open_actor_runtime(mnemex.Config(data_dir=None), [INLINE], storage=GatedStorage()) as rt:
        assert await rt.ask("counter", "c", Add(1)) == 1
        await trio.testing.wait_all_tasks_blocked()
        started = count_activations(rt)
        assert await rt.ask("counter", "c", Get()) == (1, 1)  # inline_when said no
        assert started == [1]
        await trio.testing.wait_all_tasks_blocked()
        assert await rt.ask("counter", "c", Get()) == (1, 1)
        assert started == [1]


async def test_a_read_behind_a_write_not_yet_durable_waits_for_it_in_the_mailbox() -> None:
    storage = GatedStorage()
    async with open_actor_runtime(mnemex.Config(data_dir=None), [INLINE], storage=storage) as rt:
        assert await rt.ask("counter", "c", Add(1)) == 1
        await trio.testing.wait_all_tasks_blocked()
        gate = storage.hold()
        answers: dict[str, Any] = {}

        async def ask(name: str, command: Any) -> None:
            answers[name] = await rt.ask("counter", "c", command)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "add", Add(10))
            await trio.to_thread.run_sync(storage.entered.wait, 10)  # applied, its fsync held
            started = count_activations(rt)
            nursery.start_soon(ask, "get", Get())
            await trio.testing.wait_all_tasks_blocked()
            assert answers == {}  # neither answered while the write is not durable
            assert started == [1]  # the read went to the actor's task
            gate.set()
        assert answers == {"add": 11, "get": (11, 2)}


async def test_a_queued_write_is_seen_by_the_read_sent_after_it() -> None:
    async with open_actor_runtime(mnemex.Config(data_dir=None), [INLINE], storage=GatedStorage()) as rt:
        assert await rt.ask("counter", "c", Add(1)) == 1
        await trio.testing.wait_all_tasks_blocked()
        await rt.tell("counter", "c", Add(4))  # queued, not handled yet
        assert await rt.ask("counter", "c", Get()) == (5, 2)


# -- the order guarantee, under interleavings hypothesis chooses -----------------------------------
steps = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["add", "get", "pause"]), st.integers(1, 9)),
                 min_size=1, max_size=40)


@given(steps)
@settings(max_examples=60, deadline=None)
def test_every_read_sees_the_writes_acknowledged_before_it_and_none_not_sent_yet(
        plan: list[tuple[int, str, int]]) -> None:
    """Four tasks run their part of ``plan`` (adds, reads, pauses of one scheduling
    round; the journal's group commit runs in its threads, as in a server); each
    read's total is at least the sum of the adds acknowledged before it was sent and
    at most the sum of those sent before it was answered."""

    async def main() -> None:
        storage = GatedStorage()
        acked = sent = 0
        async with open_actor_runtime(mnemex.Config(data_dir=None), [INLINE], storage=storage) as rt:
            assert await rt.ask("counter", "c", Add(0)) == 0

            async def worker(me: int) -> None:
                nonlocal acked, sent
                for who, what, n in plan:
                    if who != me:
                        continue
                    if what == "add":
                        sent += n
                        await rt.ask("counter", "c", Add(n))
                        acked += n
                    elif what == "get":
                        floor = acked
                        total, _ = await rt.ask("counter", "c", Get())
                        assert floor <= total <= sent
                    else:
                        await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                for me in range(4):
                    nursery.start_soon(worker, me)
            assert (await rt.ask("counter", "c", Get()))[0] == acked == sent

    trio.run(main)


# -- how inline reads share the run (kernel._slices) -------------------------------------------------
def test_an_inline_read_is_a_schedule_point_at_the_end_of_each_streak_and_slice() -> None:
    slices = InlineSlices(streak=4, seconds=1.0)
    due = [slices.is_due(10.0) for _ in range(9)]
    assert due == [True, False, False, False, True, False, False, False, True]
    assert not slices.is_due(10.5)
    assert slices.is_due(11.0)  # a slice after the last one, whatever the count
    assert not slices.is_due(11.2)


@pytest.mark.parametrize(("streak", "seconds"), [(0, 1.0), (True, 1.0), (2.0, 1.0), (4, -0.5),
                                                 (4, float("nan")), (4, "1")])
def test_slices_refuse_what_is_no_count_or_no_duration(streak: Any, seconds: Any) -> None:
    with pytest.raises(ValueError):
        InlineSlices(streak, seconds)


@contextlib.asynccontextmanager
async def streaks_only() -> AsyncIterator[tuple[Any, list[int]]]:
    """A runtime whose counter ``c`` holds 1 and is idle, where only the streak ends a
    run of inline reads (no slice of time: what a busy machine does to a loop's
    timing does not matter then); with the count of actor tasks started from here."""
    async with open_actor_runtime(mnemex.Config(data_dir=None), [INLINE], storage=GatedStorage()) as rt:
        assert await rt.ask("counter", "c", Add(1)) == 1
        await trio.testing.wait_all_tasks_blocked()
        rt._slices = InlineSlices(INLINE_STREAK, math.inf)
        yield rt, count_activations(rt)


async def test_a_task_reading_inline_in_a_loop_lets_the_others_run_once_a_streak() -> None:
    async with streaks_only() as (rt, started):
        turns = 0
        done = False

        async def other() -> None:
            nonlocal turns
            for _ in range(10_000):
                if done:
                    return
                turns += 1
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            before = turns
            for _ in range(5 * INLINE_STREAK):
                assert await rt.ask("counter", "c", Get()) == (1, 1)
            ran = turns - before
            done = True
        assert started == [0]  # every read inline
        # five streaks, five schedule points: the other task (runnable all along) ran once
        # after each, give or take the batch the loop began and ended in, not once a read
        assert 4 <= ran <= 6


async def test_a_cancelled_caller_gets_cancelled_at_an_inline_read_that_is_no_schedule_point() -> None:
    async with streaks_only() as (rt, started):
        assert await rt.ask("counter", "c", Get()) == (1, 1)  # the first of a streak yields
        reached = False
        with trio.CancelScope() as scope:
            scope.cancel()
            await rt.ask("counter", "c", Get())
            reached = True
        assert scope.cancelled_caught
        assert not reached
        assert started == [0]


async def test_a_deadline_around_a_loop_of_inline_reads_ends_the_loop() -> None:
    async with open_actor_runtime(mnemex.Config(data_dir=None), [INLINE], storage=GatedStorage()) as rt:
        assert await rt.ask("counter", "c", Add(1)) == 1
        await trio.testing.wait_all_tasks_blocked()
        started = count_activations(rt)
        reads = 0
        with trio.move_on_after(0.05) as scope:
            for _ in range(500_000):
                await rt.ask("counter", "c", Get())
                reads += 1
        assert scope.cancelled_caught  # noticed at a slice's schedule point, long before the count
        assert reads > 1
        assert started == [0]
