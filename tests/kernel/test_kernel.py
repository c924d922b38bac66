"""The actor kernel: asks, tells, errors, supervision, passivation, shutdown."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing
from waiting import eventually

import mnemex
from mnemex.effects import Image, Key
from mnemex.kernel import ActorKind
from mnemex.testing import SLOW_GATES, Add, Counter, Crash, Done, Fail, Get, Slow, counter_kind


def memory_config(**overrides: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=None, **overrides)


async def test_ask_returns_the_reply_and_two_refs_reach_one_actor() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        first, second = rt.ref("counter", "c1"), rt.ref("counter", ("c1",))
        assert first == second
        assert await first.ask(Add(2)) == 2
        assert await second.ask(Add(3)) == 5
        assert await rt.ask("counter", "c1", Get()) == (5, 2)
        assert rt.stats().spawns == 1


async def test_tell_is_applied_in_order_before_a_later_ask() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        for n in range(1, 101):
            await ref.tell(Add(n, sender="me"))
        assert await ref.ask(Get()) == (5050, 100)


async def test_unknown_kind_is_a_clear_error() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        with pytest.raises(mnemex.UnknownActorKind, match="no actor kind 'nope'.*known: .*counter"):
            rt.ref("nope", "x")
        with pytest.raises(mnemex.UnknownActorKind):
            await rt.ask("nope", "x", Get())


@pytest.mark.parametrize(
    ("key", "error", "match"),
    [
        ("", mnemex.InvalidInput, "empty"),
        ((), mnemex.InvalidInput, "non-empty"),
        (42, mnemex.InvalidInput, "got int"),
        (("a", 7), mnemex.InvalidInput, "must be str"),
        ("x" * 10_240, mnemex.TooLarge, "10,240 bytes; the limit is 1,024"),
        ("a\x00b", mnemex.InvalidInput, "U\\+0000"),
        ("line\nbreak", mnemex.InvalidInput, "U\\+000A"),
    ],
)
async def test_malformed_keys_are_rejected_with_a_clear_error(key: Any, error: type[Exception],
                                                                match: str) -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        with pytest.raises(error, match=match):
            rt.ref("counter", key)
        with pytest.raises(error, match=match):
            await rt.ask("counter", key, Get())
        assert rt.stats().spawns == 0


async def test_path_like_keys_are_ordinary_keys(tmp_path: Any) -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path / "d")),
                                   kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "../x", Add(1)) == 1
        assert await rt.ask("counter", "../../etc/passwd", Add(2)) == 2
    inside = {p.resolve() for p in (tmp_path / "d").rglob("*")}
    assert all(str(p).startswith(str((tmp_path / "d").resolve())) for p in inside)
    assert not (tmp_path / "x").exists()


async def test_handler_error_reaches_the_caller_and_the_actor_keeps_serving() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        await ref.ask(Add(5))
        with pytest.raises(mnemex.InvalidInput, match="nope"):
            await ref.ask(Fail("nope"))
        assert await ref.ask(Add(1)) == 6


async def test_crashing_handler_answers_actor_crashed_and_keeps_the_last_good_state() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        await ref.ask(Add(5))
        with pytest.raises(mnemex.ActorCrashed, match="crashed handling Crash") as info:
            await ref.ask(Crash())
        assert isinstance(info.value.__cause__, RuntimeError)
        # Crash mutated the total before raising; the reload undid it.
        assert await ref.ask(Get()) == (5, 1)
        assert await ref.ask(Add(1)) == 6
        assert rt.stats().crashes == 1


async def test_asks_queued_behind_a_crash_are_still_answered() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        results: list[Any] = []

        async def ask(command: Any) -> None:
            try:
                results.append(await ref.ask(command))
            except mnemex.MnemexError as exc:
                results.append(type(exc).__name__)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, Add(1))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ask, Crash())
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ask, Add(2))
        assert results == [1, "ActorCrashed", 3]


async def test_ask_timeout_raises_timeout_and_leaves_the_actor_healthy(autojump_clock: Any) -> None:
    attempts: list[int] = []

    def flaky_create(key: Key) -> Counter:
        attempts.append(1)
        if len(attempts) < 3:
            raise OSError("disk not ready")
        return Counter(key)

    kind = ActorKind("flaky", flaky_create, Counter.restore, counter_kind().encode, counter_kind().decode)
    cfg = memory_config(restore_backoff=10.0, restore_attempts=5)
    async with mnemex.open_runtime(cfg, kinds=[kind]) as rt:
        with pytest.raises(mnemex.Timeout, match="within 1 s"):
            await rt.ask("flaky", "k", Add(1), timeout=1)
        # the load goes on (backoff 10 s, then 20 s): a patient ask gets the answer,
        # and the timed-out Add was applied, not lost
        assert await rt.ask("flaky", "k", Add(1), timeout=100) == 2
        assert len(attempts) == 3


async def test_invalid_timeout_is_rejected() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        for bad in (0, -1, math.nan, True, "1"):
            with pytest.raises(mnemex.InvalidInput, match="timeout must be") as error:
                await rt.ask("counter", "c", Get(), timeout=bad)
            assert error.value.field == "timeout"


@pytest.mark.parametrize(("timeout", "gives_up_after"), [(mnemex.DEFAULT, 30.0), (None, None), (45.0, 45.0)])
async def test_an_ask_waits_the_configured_timeout_by_default_and_none_means_no_limit(
        autojump_clock: Any, timeout: Any, gives_up_after: float | None) -> None:
    def never_ready(key: Key) -> Counter:
        raise OSError("disk not ready")

    kind = ActorKind("stuck", never_ready, Counter.restore, counter_kind().encode, counter_kind().decode)
    # each load attempt fails; retries take 1000 s each, so the ask's own limit decides
    cfg = memory_config(ask_timeout=30.0, restore_backoff=1000.0, restore_attempts=2)
    async with mnemex.open_runtime(cfg, kinds=[kind]) as rt:
        start = trio.current_time()
        with pytest.raises((mnemex.Timeout, mnemex.ActorCrashed)) as error:
            await rt.ask("stuck", "k", Get(), timeout=timeout)
        waited = trio.current_time() - start
        if gives_up_after is None:  # no limit: it waited out every load attempt
            assert isinstance(error.value, mnemex.ActorCrashed) and waited >= 1000.0
        else:
            assert isinstance(error.value, mnemex.Timeout) and waited == pytest.approx(gives_up_after)


async def test_cancelled_caller_does_not_break_the_actor() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        with trio.CancelScope() as scope:
            scope.cancel()
            await ref.ask(Add(1))
        assert await ref.ask(Add(1)) in (1, 2)
        for _ in range(50):  # cancel at every point of an ask's life
            with trio.move_on_after(0):
                await ref.ask(Add(1))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ref.ask, Add(1))
                await trio.lowlevel.checkpoint()
                nursery.cancel_scope.cancel()
        total, count = await ref.ask(Get())
        assert total == count


async def test_restore_failure_is_retried_with_backoff_then_quarantined(autojump_clock: Any) -> None:
    attempts: list[float] = []

    def broken_create(key: Key) -> Counter:
        attempts.append(trio.current_time())
        raise OSError("cannot read")

    kind = ActorKind("broken", broken_create, Counter.restore, counter_kind().encode, counter_kind().decode)
    cfg = memory_config(restore_attempts=3, restore_backoff=1.0, restore_quarantine=60.0)
    async with mnemex.open_runtime(cfg, kinds=[kind]) as rt:
        start = trio.current_time()
        with pytest.raises(mnemex.ActorCrashed, match="could not be loaded after 3 attempts") as info:
            await rt.ask("broken", "k", Get())
        assert isinstance(info.value.__cause__, OSError)
        assert [round(t - start) for t in attempts] == [0, 1, 3]  # backoff 1 s then 2 s
        # quarantined: answered at once, no reload attempt, no hot loop
        with pytest.raises(mnemex.ActorCrashed, match="restore_quarantine"):
            await rt.ask("broken", "k", Get())
        assert len(attempts) == 3
        await trio.sleep(61)  # MockClock: the quarantine (60 s) passes at once
        with pytest.raises(mnemex.ActorCrashed):
            await rt.ask("broken", "k", Get())
        assert len(attempts) == 6


async def test_full_mailbox_fails_fast_under_the_fail_policy(autojump_clock: Any) -> None:
    def slow_create(key: Key) -> Counter:
        if trio.current_time() < 5:
            raise OSError("not yet")
        return Counter(key)

    kind = ActorKind("slow", slow_create, Counter.restore, counter_kind().encode, counter_kind().decode)
    cfg = memory_config(mailbox_size=2, overload="fail", restore_backoff=10.0)
    async with mnemex.open_runtime(cfg, kinds=[kind]) as rt:
        await rt.tell("slow", "k", Add(1))
        await rt.tell("slow", "k", Add(1))
        with pytest.raises(mnemex.Busy, match=r"mailbox of slow 'k' is full \(2 messages"):
            await rt.tell("slow", "k", Add(1))
        await trio.sleep(20)  # the actor loads (second attempt, t=10) and drains its mailbox
        assert await rt.ask("slow", "k", Get()) == (2, 2)


async def test_full_mailbox_makes_senders_wait_under_the_wait_policy(autojump_clock: Any) -> None:
    def slow_create(key: Key) -> Counter:
        if trio.current_time() < 5:
            raise OSError("not yet")
        return Counter(key)

    kind = ActorKind("slow", slow_create, Counter.restore, counter_kind().encode, counter_kind().decode)
    cfg = memory_config(mailbox_size=2, overload="wait", restore_backoff=10.0)
    async with mnemex.open_runtime(cfg, kinds=[kind]) as rt:
        sent: list[int] = []

        async def sender() -> None:
            for n in range(5):
                await rt.tell("slow", "k", Add(1))
                sent.append(n)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender)
            await trio.testing.wait_all_tasks_blocked()
            assert sent == [0, 1]  # the third waits for room: backpressure, no growth
            assert rt.stats().mailbox_depth <= 2
        assert await rt.ask("slow", "k", Get(), timeout=100) == (5, 5)


async def test_idle_actor_is_passivated_and_comes_back_transparently(autojump_clock: Any) -> None:
    async with mnemex.open_runtime(memory_config(idle_timeout=10.0), kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        await ref.ask(Add(7))
        assert rt.stats().live == 1
        await trio.sleep(30)  # MockClock: past idle_timeout, no real wait
        assert rt.stats().live == 0
        assert rt.stats().passivations == 1
        assert await ref.ask(Get()) == (7, 1)
        assert rt.stats().spawns == 2


async def test_max_live_actors_evicts_the_least_recently_used(autojump_clock: Any) -> None:
    async with mnemex.open_runtime(memory_config(max_live_actors=5), kinds=[counter_kind()]) as rt:
        for i in range(20):
            await rt.ask("counter", f"c{i}", Add(i))
        await trio.testing.wait_all_tasks_blocked()
        assert rt.stats().live <= 5
        assert {key[0] for _, key in rt.live_keys()} <= {f"c{i}" for i in range(14, 20)}
        for i in range(20):
            assert await rt.ask("counter", f"c{i}", Get()) == (i, 1)


async def test_explicit_passivation_keeps_state() -> None:
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        await rt.ask("counter", "c", Add(3))
        await rt.passivate("counter", "c")
        assert rt.stats().live == 0
        assert await rt.ask("counter", "c", Get()) == (3, 1)


async def test_slow_job_runs_beside_the_actor_while_other_asks_are_answered() -> None:
    SLOW_GATES.pop("g1", None)
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        assert await ref.ask(Slow(gate="g1")) == "started"
        for n in range(100):  # the job is pending all along
            assert await ref.ask(Add(1)) == n + 1
        assert await ref.ask(Done()) == 0
        SLOW_GATES["g1"].set()
        async def done() -> bool:
            return await ref.ask(Done()) > 0

        await eventually(done, what="the job's result (its thread woke on the gate)")
        assert await ref.ask(Get()) == (100, 100)


async def test_thread_job_result_comes_back_as_a_journaled_message(tmp_path: Any) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path))
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        started = trio.current_time()
        assert await ref.ask(Slow(seconds=0.3)) == "started"
        assert await ref.ask(Add(1)) == 1
        assert trio.current_time() - started < 0.25  # neither ask waited for the job
        async def done() -> bool:
            return await ref.ask(Done()) > 0

        await eventually(done, what="the job's result, from its worker thread")
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "c", Done()) == 1


async def test_shutdown_drains_every_mailbox_and_snapshots(tmp_path: Any) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path))
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        for i in range(10):
            for n in range(50):
                await rt.tell("counter", f"c{i}", Add(1, sender=str(n)))
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        for i in range(10):
            assert await rt.ask("counter", f"c{i}", Get()) == (50, 50)
        with pytest.raises(mnemex.ActorClosed):
            rt.kernel._accepting = False
            await rt.ask("counter", "c0", Get())
        rt.kernel._accepting = True


async def test_restart_from_disk_keeps_every_acknowledged_command(tmp_path: Any) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path), snapshot_every=7)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        for n in range(1, 51):
            assert await rt.ask("counter", "c", Add(n)) == n * (n + 1) // 2
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "c", Get()) == (1275, 50)


async def test_shutdown_answers_waiting_asks_with_actor_closed_or_a_reply() -> None:
    results: list[Any] = []
    async with mnemex.open_runtime(memory_config(), kinds=[counter_kind()]) as rt:

        async def ask() -> None:
            try:
                results.append(await rt.ask("counter", "c", Add(1)))
            except mnemex.ActorClosed:
                results.append("closed")

        for _ in range(20):
            rt.kernel._nursery.start_soon(ask)
    assert len(results) == 20


def test_restore_from_image_rebuilds_the_counter() -> None:
    counter = Counter(("k",))
    counter.handle(Add(2, sender="a"))
    counter.handle(Add(3, sender="b"))
    data = counter.snapshot()
    records = data.records() if callable(data.records) else data.records
    again = Counter.restore(("k",), Image(list(records), dict(data.extra), {}))
    assert (again.total, again.log) == (5, [("a", 2), ("b", 3)])


def test_a_snapshot_writer_cedes_the_gil_every_few_hundred_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large actor's snapshot keeps its writer's thread busy: it lets the actors'
    thread have the GIL every _CEDE_EVERY records, and writes every record as given."""
    from mnemex.kernel import _kernel

    ceded: list[int] = []
    written: list[bytes] = []
    lines = [b'{"n":%d}' % i for i in range(2 * _kernel._CEDE_EVERY + 7)]

    def records() -> Iterator[bytes]:
        for line in lines:
            written.append(line)
            yield line

    monkeypatch.setattr(_kernel.time, "sleep", lambda seconds: ceded.append(len(written)))
    assert list(_kernel._ceding(records())) == lines
    assert ceded == [_kernel._CEDE_EVERY, 2 * _kernel._CEDE_EVERY]
