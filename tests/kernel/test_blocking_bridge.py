"""The blocking bridge's short way (``BlockingBridge.ask``): no trio task for the
caller; a read of an idle actor answered, a write of an idle actor journaled and
applied, in the caller's thread while the run is parked (or in the callback that
brings the ask in), the write's reply released by the group commit.
The kernel's guarantees hold on it: a caller's asks in its order, a read after a
write sees it, nothing read before it is durable, a refused or crashing write
changes nothing, an fsync that fails undoes the write; the default timeout and an
interrupt still end a call.

The counter kind is made to take its reads and writes inline; the storage keeps
journals in memory with an fsync the test can hold (``gate``) or fail."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing
from gated_storage import GatedStorage, count_activations
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.errors import ActorCrashed, InvalidInput, StorageError, Timeout
from mnemex.kernel import ActorKind, BlockingBridge, Runtime
from mnemex.lowlevel import open_actor_runtime
from mnemex.testing import Add, Crash, Entries, Fail, Get, Slow, counter_kind

INLINE = dataclasses.replace(counter_kind(), inline_read=lambda c: type(c) in (Get, Entries),
                             inline_write=lambda c: type(c) in (Add, Fail, Crash, Slow))


@contextmanager
def bridge(kind: ActorKind = INLINE, **config: Any) -> Iterator[tuple[BlockingBridge[Runtime], GatedStorage]]:
    storage = GatedStorage()
    cfg = mnemex.Config(data_dir=None, restore_backoff=0.0, **config)
    with BlockingBridge(lambda: open_actor_runtime(cfg, [kind], storage=storage)) as opened:
        yield opened, storage


def ask(opened: BlockingBridge[Runtime], command: Any, key: str = "c", **kwargs: Any) -> Any:
    return opened.ask(opened.runtime, "counter", (key,), command, **kwargs)


def counting(counts: dict[str, int], name: str, fn: Any) -> Any:
    """``fn``, counting in ``counts[name]`` the calls it took (answered or journaled)."""

    def counted(*args: Any) -> Any:
        out = fn(*args)
        counts[name] += bool(out[0] if isinstance(out, tuple) else out)
        return out

    return counted


@pytest.mark.parametrize("inline", [True, False])
def test_reads_and_writes_of_an_idle_actor_start_no_task_when_its_kind_takes_them_inline(
        inline: bool) -> None:
    with bridge(INLINE if inline else counter_kind()) as (opened, _):
        assert ask(opened, Add(1)) == 1  # the first one loads the actor, in its task
        started = count_activations(opened.runtime)
        in_caller = {"read_parked": 0, "write_parked": 0}
        for name in in_caller:
            setattr(opened.runtime, name, counting(in_caller, name, getattr(opened.runtime, name)))
        for n in range(2, 12):
            assert ask(opened, Add(1)) == n
            assert ask(opened, Get()) == (n, n)
        if inline:
            assert started[0] == 0
            # the run is idle between two calls: most are handled in the caller's thread
            assert in_caller["read_parked"] > 0 and in_caller["write_parked"] > 0
        else:
            assert started[0] >= 10  # a write waits for its commit: its task ends meanwhile
            assert in_caller == {"read_parked": 0, "write_parked": 0}


def test_a_read_waits_for_the_write_before_it_to_be_durable() -> None:
    with bridge() as (opened, storage):
        ask(opened, Add(1))
        storage.gate = gate = threading.Event()
        storage.entered.clear()
        replies: dict[str, Any] = {}
        writer = threading.Thread(target=lambda: replies.setdefault("write", ask(opened, Add(5))))
        writer.start()
        assert storage.entered.wait(10)  # applied and journaled, its fsync held
        reader = threading.Thread(target=lambda: replies.setdefault("read", ask(opened, Get())))
        reader.start()
        reader.join(0.2)
        assert reader.is_alive() and not replies  # not answered from a state that is not durable
        gate.set()
        writer.join(10)
        reader.join(10)
        assert replies == {"write": 6, "read": (6, 2)}


def test_an_fsync_that_fails_undoes_an_inline_write() -> None:
    with bridge() as (opened, storage):
        assert ask(opened, Add(1)) == 1
        storage.fail = True
        with pytest.raises(StorageError, match="Input/output error"):
            ask(opened, Add(10))
        storage.fail = False
        assert ask(opened, Get()) == (1, 1)  # reloaded from what is durable
        assert ask(opened, Add(2)) == 3
        assert storage.store("counter", ("c",)).commands() == [Add(1), Add(2)]


def test_a_refused_write_changes_nothing_and_leaves_no_journal_line() -> None:
    with bridge() as (opened, storage):
        ask(opened, Add(1))
        with pytest.raises(InvalidInput, match="rejected on purpose"):
            ask(opened, Fail())
        assert ask(opened, Add(2)) == 3
        assert storage.store("counter", ("c",)).commands() == [Add(1), Add(2)]


def test_a_refused_write_behind_one_whose_fsync_fails_is_handled_again() -> None:
    # The refusal is made on a state holding the write before it; when that write's
    # fsync fails, the refusal is not answered StorageError with it (it wrote
    # nothing) but handled again on the durable state, as in a batch.
    with bridge() as (opened, storage):
        ask(opened, Add(1))
        storage.gate = gate = threading.Event()
        storage.entered.clear()
        replies: dict[str, Any] = {}

        def call(name: str, command: Any) -> None:
            try:
                replies[name] = ask(opened, command)
            except Exception as exc:  # the reply is what the test checks
                replies[name] = exc

        writer = threading.Thread(target=call, args=("write", Add(10)))
        writer.start()
        assert storage.entered.wait(10)  # the write is applied; its fsync is held
        refused = threading.Thread(target=call, args=("refused", Fail()))
        refused.start()
        refused.join(0.2)
        assert refused.is_alive() and "refused" not in replies  # waits for the write before it
        storage.fail = True
        gate.set()
        writer.join(10)
        refused.join(10)
        storage.fail = False
        assert isinstance(replies["write"], StorageError)
        assert isinstance(replies["refused"], InvalidInput), replies["refused"]
        assert ask(opened, Get()) == (1, 1)
        assert storage.store("counter", ("c",)).commands() == [Add(1)]


@pytest.mark.parametrize("command", [Crash(), Slow()], ids=["crash", "effects"])
def test_an_inline_write_that_crashes_or_gives_effects_is_undone_by_a_reload(command: Any) -> None:
    with bridge() as (opened, storage):
        ask(opened, Add(1))
        with pytest.raises(ActorCrashed):
            ask(opened, command)
        assert ask(opened, Get()) == (1, 1)  # not the crashed state: rebuilt from the store
        assert ask(opened, Add(2)) == 3
        assert storage.store("counter", ("c",)).commands() == [Add(1), Add(2)]
        assert opened.runtime.stats().crashes == 1


def test_the_default_timeout_ends_a_call_waiting_for_a_commit() -> None:
    with bridge(ask_timeout=0.3) as (opened, storage):
        ask(opened, Add(1))
        storage.gate = gate = threading.Event()
        opener = threading.Timer(5, gate.set)  # if the timeout never came, the call ends anyway
        opener.start()
        try:
            with pytest.raises(Timeout, match="may still be applied"):
                ask(opened, Add(1))
            with pytest.raises(Timeout):  # an explicit timeout, the ordinary way
                ask(opened, Add(1), timeout=0.2)
        finally:
            gate.set()
            opener.cancel()
        storage.gate = None
        assert ask(opened, Get()) == (3, 3)  # both were applied, as the message warns


def test_an_interrupted_caller_gives_up_its_call_and_the_bridge_goes_on() -> None:
    if threading.current_thread() is not threading.main_thread():  # pragma: no cover
        pytest.skip("signals reach the main thread only")
    with bridge() as (opened, storage):
        ask(opened, Add(1))
        gate = storage.hold()

        def interrupt_once_held() -> None:
            # the caller is interrupted while its write waits for the held fsync (a timer
            # could fire before the write got there on a loaded machine)
            if storage.entered.wait(10):
                os.kill(os.getpid(), signal.SIGINT)

        interrupt = threading.Thread(target=interrupt_once_held)
        interrupt.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                ask(opened, Add(5))
        finally:
            gate.set()
            interrupt.join()
        storage.gate = None
        assert ask(opened, Add(1)) == 7  # the interrupted write was applied; its answer dropped
        assert ask(opened, Get()) == (7, 3)


def test_an_ask_that_finds_the_mailbox_full_goes_the_ordinary_way() -> None:
    with bridge() as (opened, _):
        runtime = opened.runtime
        full = [0]

        def no_room(*args: Any, **kwargs: Any) -> bool:
            full[0] += 1
            return False

        runtime.ask_nowait = no_room  # type: ignore[method-assign]
        assert ask(opened, Add(2)) == 2
        assert ask(opened, Get()) == (2, 1)
        assert full[0] >= 1  # the read may be answered in the caller's thread first


async def test_ask_nowait_sends_nothing_when_the_mailbox_is_full() -> None:
    cfg = mnemex.Config(data_dir=None, mailbox_size=1)
    async with open_actor_runtime(cfg, [INLINE], storage=GatedStorage()) as rt:
        answers: list[Any] = []
        done = trio.Event()

        class Waiter:
            done = False

            def resolve(self, value: Any) -> None:
                answers.append(value)
                done.set()

        assert rt.ask_nowait("counter", "c", Add(1), Waiter())  # queued: the actor is loading
        assert not rt.ask_nowait("counter", "c", Add(2), Waiter())
        with trio.fail_after(10):
            await done.wait()
        assert answers == [1]
        assert await rt.ask("counter", "c", Get()) == (1, 1)
        # the actor is idle now: a read is answered at once, a write journaled at once
        # and answered once durable, neither starting the actor's task
        await trio.testing.wait_all_tasks_blocked()  # its task has lingered and ended
        started = count_activations(rt)
        assert rt.ask_nowait("counter", "c", Get(), Waiter())
        assert answers == [1, (1, 1)]
        done = trio.Event()
        assert rt.ask_nowait("counter", "c", Add(5), Waiter())
        assert answers == [1, (1, 1)]  # not before its fsync
        with trio.fail_after(10):
            await done.wait()
        assert answers == [1, (1, 1), 6] and started == [0]
        with pytest.raises(mnemex.UnknownActorKind):
            rt.ask_nowait("nope", "c", Get(), Waiter())
        with pytest.raises(InvalidInput):
            rt.ask_nowait("counter", "", Get(), Waiter())


Op = tuple[str, int]  # ("add", n) or ("get", 0)


def run_callers(opened: BlockingBridge[Runtime], key: str, plans: Sequence[Sequence[Op]]) -> list[list[Any]]:
    replies: list[list[Any]] = [[] for _ in plans]
    start = threading.Barrier(len(plans))

    def caller(index: int) -> None:
        start.wait(10)
        for op, n in plans[index]:
            command = Add(n, sender=f"t{index}") if op == "add" else Get()
            replies[index].append(ask(opened, command, key))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(plans))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return replies


def test_callers_on_many_threads_keep_their_order_and_read_their_writes() -> None:
    ops = st.lists(st.one_of(st.tuples(st.just("add"), st.integers(1, 9)), st.just(("get", 0))),
                   min_size=1, max_size=12)
    with bridge() as (opened, _):
        examples = iter(range(10_000))

        @settings(max_examples=25, deadline=None)
        @given(plans=st.lists(ops, min_size=1, max_size=3))
        def check(plans: list[list[Op]]) -> None:
            key = f"c{next(examples)}"
            replies = run_callers(opened, key, plans)
            log = ask(opened, Entries(), key)
            for index, plan in enumerate(plans):
                mine = [n for sender, n in log if sender == f"t{index}"]
                assert mine == [n for op, n in plan if op == "add"]  # in its order, each once
                added, seen = 0, 0
                for (op, n), reply in zip(plan, replies[index], strict=True):
                    if op == "add":
                        added += 1
                        assert reply >= n
                    else:
                        _total, length = reply
                        # it sees its own writes, and never a state older than one it saw
                        assert length >= max(added, seen)
                        seen = length
            assert ask(opened, Get(), key) == (sum(n for plan in plans for op, n in plan if op == "add"),
                                               sum(op == "add" for plan in plans for op, _ in plan))

        check()
