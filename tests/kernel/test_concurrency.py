"""Concurrency properties of the kernel, with hypothesis choosing the workload,
the interleaving (checkpoints between sends), mailbox sizes and injected faults."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.testing import Add, Crash, Entries, Fail, Simulation, counter_kind, hypothesis_chooser

OPS = st.tuples(
    st.sampled_from(["ask", "ask", "tell", "fail", "crash"]),  # what
    st.integers(0, 3),  # which actor
    st.integers(0, 3),  # checkpoints to yield before it (the interleaving)
)


def _run_workload(cfg: mnemex.Config, senders: list[list[tuple[str, int, int]]]) -> None:
    answers: dict[tuple[int, int], list[Any]] = defaultdict(list)
    expected: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for s, ops in enumerate(senders):
        for i, (what, actor, _) in enumerate(ops):
            if what in ("ask", "tell"):
                expected[actor].append((f"s{s}", i))

    async def main() -> None:
        async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:

            async def sender(s: int, ops: list[tuple[str, int, int]]) -> None:
                for i, (what, actor, pause) in enumerate(ops):
                    for _ in range(pause):
                        await trio.lowlevel.checkpoint()
                    key = f"a{actor}"
                    if what == "tell":
                        await rt.tell("counter", key, Add(i, sender=f"s{s}"))
                        answers[(s, i)].append("told")
                        continue
                    command = {"ask": Add(i, sender=f"s{s}"), "fail": Fail(), "crash": Crash()}[what]
                    try:
                        answers[(s, i)].append(await rt.ask("counter", key, command))
                    except mnemex.InvalidInput:
                        answers[(s, i)].append("invalid")
                    except mnemex.ActorCrashed:
                        answers[(s, i)].append("crashed")

            with trio.fail_after(20):  # nothing deadlocks
                async with trio.open_nursery() as nursery:
                    for s, ops in enumerate(senders):
                        nursery.start_soon(sender, s, ops)
                for actor in range(4):
                    log = await rt.ask("counter", f"a{actor}", Entries())
                    # no loss, no duplicate, per-sender FIFO
                    for s in range(len(senders)):
                        mine = [entry for entry in log if entry[0] == f"s{s}"]
                        assert mine == [e for e in expected[actor] if e[0] == f"s{s}"], (actor, s, log)
                    assert sorted(log) == sorted(expected[actor])

    trio.run(main)
    for s, ops in enumerate(senders):
        for i, (what, _, _) in enumerate(ops):
            got = answers[(s, i)]
            assert len(got) == 1, (s, i, got)  # exactly one answer or one error
            want = {"ask": int, "tell": str, "fail": str, "crash": str}[what]
            assert isinstance(got[0], want)
            if what == "fail":
                assert got[0] == "invalid"
            if what == "crash":
                assert got[0] == "crashed"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    senders=st.lists(st.lists(OPS, max_size=25), min_size=1, max_size=6),
    mailbox=st.integers(1, 8),
)
def test_every_ask_gets_one_answer_in_order_with_no_loss_in_memory(
        senders: list[list[tuple[str, int, int]]], mailbox: int) -> None:
    _run_workload(mnemex.Config(data_dir=None, mailbox_size=mailbox), senders)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(
    senders=st.lists(st.lists(OPS, max_size=15), min_size=1, max_size=4),
    mailbox=st.integers(1, 8),
    fsync=st.sampled_from(["always", "batch", "never"]),
)
def test_every_ask_gets_one_answer_in_order_with_no_loss_on_disk(
        tmp_path_factory: Any, senders: list[list[tuple[str, int, int]]], mailbox: int, fsync: str) -> None:
    data_dir = tmp_path_factory.mktemp("concurrency")
    cfg = mnemex.Config(data_dir=str(data_dir), mailbox_size=mailbox, fsync=fsync,  # type: ignore[arg-type]
                        snapshot_every=5)
    _run_workload(cfg, senders)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), sends=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2),
                                                st.sampled_from(["add", "fail", "crash"])), max_size=40))
def test_simulation_keeps_per_sender_order_and_replays_to_the_same_state(
        data: st.DataObject, sends: list[tuple[int, int, str]]) -> None:
    sim = Simulation([counter_kind()])
    for i, (sender, actor, what) in enumerate(sends):
        command = {"add": Add(i, sender=f"s{sender}"), "fail": Fail(), "crash": Crash()}[what]
        sim.send(f"s{sender}", "counter", (f"a{actor}",), command)
        if data.draw(st.booleans(), label="snapshot now"):
            sim.snapshot("counter", (f"a{actor}",))
    delivered = sim.run(hypothesis_chooser(data))
    assert len(delivered) == len(sends)
    by_sender: dict[str, list[int]] = defaultdict(list)
    for item in delivered:
        by_sender[item.sender].append(item.ticket)
    assert all(tickets == sorted(tickets) for tickets in by_sender.values())
    for actor in range(3):
        key = (f"a{actor}",)
        sim.check_replay("counter", key)
        log = sim.state_lines("counter", key)[0]
        adds = [i for i, (_, a, what) in enumerate(sends) if a == actor and what == "add"]
        assert len(log) == len(adds)
