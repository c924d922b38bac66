"""The cell lifecycle's one table, and the one turn the kernel and the simulation share."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.kernel._lifecycle import CellState, IllegalMove, Lifecycle
from mnemex.kernel._turn import take_turn
from mnemex.testing import Add, Crash, Entries, Fail, Get, Simulation, counter_kind

LEGAL = {
    (CellState.LOADING, CellState.RUNNING), (CellState.LOADING, CellState.CRASHED),
    (CellState.LOADING, CellState.STOPPING), (CellState.RUNNING, CellState.STOPPING),
    (CellState.RUNNING, CellState.CRASHED), (CellState.STOPPING, CellState.STOPPED),
    (CellState.CRASHED, CellState.QUARANTINED),
}


def reach(state: CellState) -> Lifecycle:
    """A lifecycle moved to ``state`` by legal moves."""
    paths = {
        CellState.LOADING: [], CellState.RUNNING: [CellState.RUNNING],
        CellState.STOPPING: [CellState.STOPPING], CellState.STOPPED: [CellState.STOPPING, CellState.STOPPED],
        CellState.CRASHED: [CellState.CRASHED], CellState.QUARANTINED: [CellState.CRASHED, CellState.QUARANTINED],
    }
    life = Lifecycle()
    for step in paths[state]:
        life.move(step)
    return life


@pytest.mark.parametrize("start", list(CellState), ids=lambda s: s.value)
@pytest.mark.parametrize("to", list(CellState), ids=lambda s: s.value)
def test_only_the_moves_of_the_table_are_allowed(start: CellState, to: CellState) -> None:
    life = reach(start)
    if (start, to) in LEGAL:
        life.move(to)
        assert life.state is to
    else:
        with pytest.raises(IllegalMove, match=f"no move from {start.value} to {to.value}"):
            life.move(to)
        assert life.state is start


def test_a_stopped_or_quarantined_cell_goes_nowhere() -> None:
    assert Lifecycle.allowed(CellState.STOPPED) == frozenset()
    assert Lifecycle.allowed(CellState.QUARANTINED) == frozenset()


def test_a_turn_refuses_a_mnemex_error_and_reports_a_crash() -> None:
    kind = counter_kind()
    counter = kind.create(("c",))
    done = take_turn(kind, counter, Add(2, sender="a"))
    assert (done.reply, done.refused, done.crash) == (2, False, None) and done.payload is not None
    read = take_turn(kind, counter, Get())
    assert read.payload is None  # reads are not journaled
    refused = take_turn(kind, counter, Fail())
    assert refused.refused and isinstance(refused.reply, mnemex.InvalidInput) and refused.payload is None
    crashed = take_turn(kind, counter, Crash())
    assert isinstance(crashed.crash, RuntimeError) and crashed.payload is None


COMMANDS = st.lists(st.one_of(
    st.builds(Add, st.integers(-5, 5), sender=st.sampled_from(["a", "b"])),
    st.just(Get()), st.just(Fail()), st.just(Crash()), st.just(Entries())), max_size=25)


def outcome(value: Any) -> Any:
    if isinstance(value, BaseException):
        return type(value).__name__
    return value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(COMMANDS)
def test_the_simulation_and_the_kernel_answer_and_journal_alike(commands: list[Any]) -> None:
    simulation = Simulation([counter_kind()])
    for command in commands:
        simulation.send("caller", "counter", ("c",), command)
    simulated = [outcome(d.error if d.error is not None else d.reply) for d in simulation.run(lambda n: 0)]

    async def kernel() -> tuple[list[Any], list[bytes]]:
        answers: list[Any] = []
        async with mnemex.open_runtime(mnemex.Config(data_dir=None), kinds=[counter_kind()]) as rt:
            for command in commands:
                try:
                    answers.append(await rt.ask("counter", "c", command))
                except mnemex.MnemexError as exc:
                    answers.append(exc)
            store = rt.kernel._storage.store("counter", ("c",))
            journal = [entry.payload for entry in store.recover().journal] if store.exists() else []
        return [outcome(a) for a in answers], journal

    answered, journal = trio.run(kernel)
    assert answered == simulated
    actor = simulation.actors.get(("counter", ("c",)))
    assert journal == (actor.journal if actor is not None else [])
