"""``Bridge.ask``: an ask made from the server's asyncio loop goes to the kernel
there, between two ticks of the trio guest run, with no trio task; a write of an
idle actor is journaled and applied at once (beside writes still waiting for
their fsync), and its reply comes back through the loop once durable, the
group commit's threads reporting to the loop (``Runtime.report_to_host``).

The kernel's guarantees hold on this way too: replies only once durable and in
order, a failed fsync answers every write it held StorageError and the actor
goes back to what is durable, a cancelled asker abandons its answer and not its
write, an actor's Emits reach its subscribers in order; and when another thread
holds the run's lock the ask goes through the run instead.

Each test runs a uvloop loop hosting the runtime's trio run as a guest, as
``mnemex serve`` does. The counter kind is made to take its writes inline; the
storage keeps journals in memory with an fsync the test holds (``gate``) or fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import outcome
import pytest
import trio
import uvloop
from gated_storage import GatedStorage

import mnemex
from mnemex import StorageError
from mnemex.lowlevel import ActorKind, ActorRef, Runtime, open_actor_runtime
from mnemex.server._bridge import READ_AHEAD, Bridge
from mnemex.testing import Add, Entries, Fail, Get, counter_kind

INLINE = dataclasses.replace(counter_kind(), inline_write=lambda c: type(c) in (Add, Fail))


@dataclasses.dataclass
class Hosted:
    bridge: Bridge
    runtime: Runtime
    storage: GatedStorage
    ref: ActorRef
    run_calls: list[int]  # how many times the run took asks queued for it (its entry queue)
    activations: list[int]  # how many times the kernel started an actor's task


def started(ready: asyncio.Future[Any], done: asyncio.Future[outcome.Outcome[None]]) -> Callable[
        [outcome.Outcome[None]], None]:
    """The guest run's done callback: a run that ends before it is ready fails
    ``ready`` with its error (the test would wait for it forever)."""

    def finished(result: outcome.Outcome[None]) -> None:
        done.set_result(result)
        if not ready.done():
            ready.set_exception(result.error if isinstance(result, outcome.Error)
                                else RuntimeError("the guest run ended before it was ready"))

    return finished


def hosted(test: Callable[[Hosted], Awaitable[None]], kind: ActorKind = INLINE) -> None:
    """Run ``test`` on a uvloop loop hosting a runtime (``kind``: the inline counter
    kind) as a trio guest, its commit reporting to the loop, as the server sets it up."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        storage = GatedStorage()
        cfg = mnemex.Config(data_dir=None, restore_backoff=0.0)
        Ready = tuple[Bridge, Runtime, trio.lowlevel.TrioToken, trio.Event]
        ready: asyncio.Future[Ready] = loop.create_future()
        done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

        async def guest() -> None:
            stop = trio.Event()
            async with open_actor_runtime(cfg, [kind], storage=storage) as runtime, \
                    trio.open_nursery() as nursery:
                runtime.report_to_host(loop.call_soon_threadsafe)
                ready.set_result((Bridge(nursery, loop), runtime, trio.lowlevel.current_trio_token(), stop))
                await stop.wait()

        trio.lowlevel.start_guest_run(guest, run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                                      run_sync_soon_not_threadsafe=loop.call_soon,
                                      done_callback=started(ready, done), host_uses_signal_set_wakeup_fd=True)
        bridge, runtime, token, stop = await ready
        ref = runtime.ref("counter", "c")
        try:
            assert await bridge.ask(ref, Add(1)) == 1  # loads the actor (in its task)
            run_calls, activations = [0], [0]
            start_pending, activate = bridge._start_pending, runtime._activate

            def counted_start() -> None:
                run_calls[0] += bool(bridge._asks)
                start_pending()

            def counted_activate(cell: Any) -> None:
                activations[0] += 1
                activate(cell)

            bridge._start_pending = counted_start  # type: ignore[method-assign]
            runtime._activate = counted_activate  # type: ignore[method-assign]
            await test(Hosted(bridge, runtime, storage, ref, run_calls, activations))
        finally:
            if storage.gate is not None:
                storage.gate.set()
            token.run_sync_soon(stop.set)
            (await done).unwrap()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


async def entered(storage: GatedStorage) -> None:
    """Until a held fsync has begun."""
    assert await asyncio.to_thread(storage.entered.wait, 10)


def test_writes_are_taken_in_the_loop_beside_one_waiting_for_its_fsync_and_answered_in_order_once_durable(
        ) -> None:
    async def test(h: Hosted) -> None:
        gate = h.storage.hold()
        answered: list[int] = []
        first = asyncio.ensure_future(h.bridge.ask(h.ref, Add(5)))
        first.add_done_callback(lambda f: answered.append(f.result()))
        await entered(h.storage)  # journaled, applied, its fsync held
        second = asyncio.ensure_future(h.bridge.ask(h.ref, Add(2)))
        second.add_done_callback(lambda f: answered.append(f.result()))
        await asyncio.sleep(0)  # the second ask's step: taken at once, beside the first
        store = h.storage.store("counter", ("c",))
        assert store.commands() == [Add(1), Add(5), Add(2)]
        assert not first.done() and not second.done()  # neither is durable yet
        gate.set()
        assert await asyncio.gather(first, second) == [6, 8]
        assert answered == [6, 8]
        assert h.run_calls == [0] and h.activations == [0]  # no trio task, nothing through the run

    hosted(test)


def test_a_failed_fsync_answers_every_write_it_held_storage_error_and_the_actor_goes_back_to_what_is_durable(
        ) -> None:
    async def test(h: Hosted) -> None:
        gate = h.storage.hold()
        first = asyncio.ensure_future(h.bridge.ask(h.ref, Add(10)))
        await entered(h.storage)
        second = asyncio.ensure_future(h.bridge.ask(h.ref, Add(20)))
        await asyncio.sleep(0)
        h.storage.fail = True
        gate.set()
        for write in (first, second):
            with pytest.raises(StorageError, match=r"Input/output error|did not become durable"):
                await write
        h.storage.fail = False
        h.storage.gate = None
        assert await h.bridge.ask(h.ref, Get()) == (1, 1)  # reloaded: neither write is there
        assert await h.bridge.ask(h.ref, Add(2)) == 3
        assert await h.bridge.ask(h.ref, Entries()) == [("", 1), ("", 2)]

    hosted(test)


def test_a_refused_write_is_answered_its_error_and_changes_nothing() -> None:
    async def test(h: Hosted) -> None:
        with pytest.raises(mnemex.InvalidInput, match="rejected on purpose"):
            await h.bridge.ask(h.ref, Fail())
        assert await h.bridge.ask(h.ref, Add(2)) == 3
        assert h.storage.store("counter", ("c",)).commands() == [Add(1), Add(2)]

    hosted(test)


def test_a_cancelled_asker_abandons_its_answer_but_not_its_write() -> None:
    async def test(h: Hosted) -> None:
        gate = h.storage.hold()
        asker = asyncio.ensure_future(h.bridge.ask(h.ref, Add(3)))
        await entered(h.storage)
        asker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asker
        gate.set()
        h.storage.gate = None
        assert await h.bridge.ask(h.ref, Add(1)) == 5  # after the abandoned one, durable

    hosted(test)


@contextlib.asynccontextmanager
async def lock_held_by_another_thread(h: Hosted) -> AsyncIterator[None]:
    """The body runs while another thread holds the run's lock (``parked.lock``);
    the thread lets it go when the body ends."""
    parked = h.runtime.parked
    assert parked is not None
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with parked.lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert await asyncio.to_thread(held.wait, 10)
        yield
    finally:
        release.set()
        await asyncio.to_thread(thread.join, 10)


def test_an_ask_while_another_thread_holds_the_runs_lock_goes_through_the_run() -> None:
    async def test(h: Hosted) -> None:
        async with lock_held_by_another_thread(h):
            asker = asyncio.ensure_future(h.bridge.ask(h.ref, Add(4)))
            await asyncio.sleep(0)  # its step: the lock is taken, so it is queued for the run
            assert len(h.bridge._asks) == 1
        assert await asker == 5
        assert h.run_calls == [1]

    hosted(test)


def test_batched_asks_are_sent_in_the_loops_next_turn_together_in_the_order_made() -> None:
    async def test(h: Hosted) -> None:
        asks = [asyncio.ensure_future(h.bridge.ask_batched(h.ref, Add(n))) for n in (2, 3, 4)]
        await asyncio.sleep(0)  # each caller's step: queued, nothing sent yet
        store = h.storage.store("counter", ("c",))
        assert store.commands() == [Add(1)] and len(h.bridge._batched) == 3
        assert await asyncio.gather(*asks) == [3, 6, 10]
        assert store.commands() == [Add(1), Add(2), Add(3), Add(4)]
        assert h.run_calls == [0] and h.activations == [0]  # no trio task, nothing through the run
        assert await h.bridge.ask_batched(h.ref, Get()) == (10, 4)  # a read through the mailbox

    hosted(test)


def test_a_batched_ask_whose_caller_gave_up_before_it_was_sent_is_never_sent() -> None:
    async def test(h: Hosted) -> None:
        kept = asyncio.ensure_future(h.bridge.ask_batched(h.ref, Add(2)))
        dropped = asyncio.ensure_future(h.bridge.ask_batched(h.ref, Add(100)))
        await asyncio.sleep(0)  # both queued
        dropped.cancel()
        assert await kept == 3
        with pytest.raises(asyncio.CancelledError):
            await dropped
        assert h.storage.store("counter", ("c",)).commands() == [Add(1), Add(2)]
        assert await h.bridge.ask(h.ref, Get()) == (3, 2)

    hosted(test)


def test_a_batched_ask_while_another_thread_holds_the_runs_lock_goes_through_the_run() -> None:
    async def test(h: Hosted) -> None:
        async with lock_held_by_another_thread(h):
            asker = asyncio.ensure_future(h.bridge.ask_batched(h.ref, Add(4)))
            for _ in range(100):  # the caller's step, then the batch's: queued for the run
                await asyncio.sleep(0)
                if h.bridge._asks or h.run_calls != [0]:
                    break
            assert not h.bridge._batched and (h.bridge._asks or h.run_calls == [1])
        assert await asker == 5
        assert h.run_calls == [1]

    hosted(test)


def test_a_batched_ask_after_the_bridge_closed_is_refused() -> None:
    async def test(h: Hosted) -> None:
        h.bridge.close()
        with pytest.raises(mnemex.ActorClosed, match="shutting down"):
            await h.bridge.ask_batched(h.ref, Get())

    hosted(test)


def reading_ahead(told: list[list[Any]], fail: bool = False) -> ActorKind:
    """The inline counter kind, its Get read inline, its read-aheads noted in ``told``
    (or, ``fail``, raising)."""
    def read_ahead(behaviour: Any, commands: Any) -> None:
        if fail:
            raise RuntimeError("a broken read-ahead")
        told.append(list(commands))

    return dataclasses.replace(INLINE, inline_read=lambda c: type(c) is Get, read_ahead=read_ahead)


def test_an_actor_asked_several_reads_in_one_batch_hears_of_them_first_in_groups() -> None:
    told: list[list[Any]] = []

    async def test(h: Hosted) -> None:
        reads = [Get() for _ in range(READ_AHEAD + 4)]
        asks = [asyncio.ensure_future(h.bridge.ask_batched(h.ref, read)) for read in reads]
        assert await asyncio.gather(*asks) == [(1, 1)] * len(reads)
        # the read-ahead's commands are the very objects asked, in order, READ_AHEAD at a time;
        # then (the batch asked) that nothing more is coming
        assert [len(group) for group in told] == [READ_AHEAD, 4, 0]
        assert all(a is b for a, b in zip([c for group in told for c in group], reads, strict=True))
        told.clear()
        assert await h.bridge.ask_batched(h.ref, Get()) == (1, 1)  # one alone: nothing to share
        assert told == []
        assert h.run_calls == [0] and h.activations == [0]

    hosted(test, reading_ahead(told))


def test_a_read_whose_caller_gave_up_is_not_read_ahead_and_what_was_made_is_let_go_after() -> None:
    told: list[list[Any]] = []

    async def test(h: Hosted) -> None:
        reads = [Get() for _ in range(3)]
        asks = [asyncio.ensure_future(h.bridge.ask_batched(h.ref, read)) for read in reads]
        await asyncio.sleep(0)  # each caller's step: queued; the batch is asked after this step
        asks[1].cancel()
        assert await asks[0] == (1, 1) and await asks[2] == (1, 1)
        with pytest.raises(asyncio.CancelledError):
            await asks[1]
        # told of the two still wanted, then (the batch asked) that nothing more is coming
        assert [[id(c) for c in run] for run in told] == [[id(reads[0]), id(reads[2])], []]

    hosted(test, reading_ahead(told))


async def behind_a_held_write(h: Hosted, commands: list[Any]) -> tuple[asyncio.Future[Any], list[Any]]:
    """Add(2) taken inline with its fsync held (``h.storage.gate``), then ``commands``
    asked batched: all queued in the actor's mailbox behind it. Returns the write's
    answer and the asks'."""
    h.storage.gate = threading.Event()
    write = asyncio.ensure_future(h.bridge.ask(h.ref, Add(2)))
    await entered(h.storage)
    asks = [asyncio.ensure_future(h.bridge.ask_batched(h.ref, command)) for command in commands]
    for _ in range(3):  # the callers' steps, then the batch's
        await asyncio.sleep(0)
    assert not h.bridge._batched
    return write, asks


def test_the_actors_task_reads_ahead_each_run_of_reads_between_its_writes() -> None:
    told: list[list[Any]] = []

    async def test(h: Hosted) -> None:
        first, second = [Get(), Get()], [Get(), Get()]
        write, asks = await behind_a_held_write(h, [*first, Add(3), *second])
        # (not read ahead from the loop: the actor holds a write that is not durable)
        assert all(len(run) == 2 for run in told)
        h.storage.gate.set()  # type: ignore[union-attr]
        assert await write == 3
        assert await asyncio.gather(*asks) == [(3, 2), (3, 2), 6, (6, 3), (6, 3)]
        assert [[id(c) for c in run] for run in told] == [[id(c) for c in run] for run in (first, second)]

    hosted(test, reading_ahead(told))


def test_the_actors_task_tells_a_long_run_of_reads_read_ahead_max_at_a_time() -> None:
    told: list[list[Any]] = []

    async def test(h: Hosted) -> None:
        write, asks = await behind_a_held_write(h, [Get() for _ in range(40)])
        h.storage.gate.set()  # type: ignore[union-attr]
        assert await write == 3
        assert await asyncio.gather(*asks) == [(3, 2)] * 40
        assert [len(run) for run in told] == [16, 16, 8]

    hosted(test, reading_ahead(told))


def test_an_idle_actor_is_told_only_of_the_reads_that_lead_its_batch() -> None:
    told: list[list[Any]] = []

    async def test(h: Hosted) -> None:
        commands = [Get(), Get(), Add(2), Get()]
        asks = [asyncio.ensure_future(h.bridge.ask_batched(h.ref, command)) for command in commands]
        assert await asyncio.gather(*asks) == [(1, 1), (1, 1), 3, (3, 2)]
        assert [id(c) for c in told[0]] == [id(commands[0]), id(commands[1])]

    hosted(test, reading_ahead(told))


def test_a_read_ahead_that_fails_is_logged_and_the_reads_are_answered(
        caplog: pytest.LogCaptureFixture) -> None:
    async def test(h: Hosted) -> None:
        asks = [asyncio.ensure_future(h.bridge.ask_batched(h.ref, Get())) for _ in range(3)]
        assert await asyncio.gather(*asks) == [(1, 1)] * 3

    hosted(test, reading_ahead([], fail=True))
    assert any("read-ahead" in record.getMessage() and record.exc_info for record in caplog.records)


def test_an_agents_appends_taken_in_the_loop_reach_its_subscribers_in_order(tmp_path: Any) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()
        ready: asyncio.Future[tuple[Bridge, Any]] = loop.create_future()
        seen: list[str] = []
        subscribed = loop.create_future()
        finished = loop.create_future()

        async def guest() -> None:
            config = mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")
            async with mnemex.open_runtime(config) as rt, trio.open_nursery() as nursery:
                rt.kernel.report_to_host(loop.call_soon_threadsafe)
                agent = rt.agent("a")
                await agent.append("s", [{"role": "user", "content": "first"}])  # the agent loaded
                ready.set_result((Bridge(nursery, loop), agent))
                async with agent.subscribe("s") as stream:
                    subscribed.set_result(None)
                    async for event in stream:
                        if event.message is not None:
                            seen.append(event.message.message["content"])
                            if len(seen) == 5:
                                break
                finished.set_result(None)

        trio.lowlevel.start_guest_run(guest, run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                                      run_sync_soon_not_threadsafe=loop.call_soon,
                                      done_callback=started(ready, done), host_uses_signal_set_wakeup_fd=True)
        bridge, agent = await ready
        await subscribed
        asks = [bridge.ask(agent.ref, agent.append_command("s", [{"role": "user", "content": f"m{n}"}]))
                for n in range(5)]
        replies = await asyncio.gather(*asks)
        assert [reply.first_sequence for reply in replies] == [2, 3, 4, 5, 6]
        await finished
        assert seen == ["m0", "m1", "m2", "m3", "m4"]
        (await done).unwrap()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
