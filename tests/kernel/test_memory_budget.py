"""The live actors' memory budget (config.kernel.max_live_bytes): the kernel adds
up each live actor's own ``live_bytes()`` estimate every BUDGET_PERIOD and, over the
budget, passivates the least recently used idle actors; and the estimates of the
two real kinds stay close to what they really allocate."""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc
from typing import Any

import pytest
import trio
import trio.testing

import mnemex
from mnemex.effects import Image, Key
from mnemex.kernel import ActorKind
from mnemex.kernel._kernel import BUDGET_PERIOD, live_bytes_budget
from mnemex.testing import Add, Counter, Get, counter_kind


class Sized(Counter):
    """A counter that says it holds 1,000 bytes per unit of its total."""

    def live_bytes(self) -> int:
        return 1_000 * self.total


def sized_kind() -> ActorKind:
    def restore(key: Key, image: Image) -> Sized:
        counter = Counter.restore(key, image)
        return Sized(key, counter.log, counter.done)

    return dataclasses.replace(counter_kind("sized"), create=Sized, restore=restore)


def config(**kernel: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=None, **kernel)


async def test_over_the_budget_the_least_recently_used_idle_actors_are_passivated(autojump_clock: Any) -> None:
    async with mnemex.open_runtime(config(max_live_bytes=10_000), kinds=[sized_kind()]) as rt:
        for i in range(8):  # 8 actors of 2,000 bytes: 16,000 > 10,000
            await rt.ask("sized", f"s{i}", Add(2))
        assert rt.stats().live == 8
        await trio.sleep(BUDGET_PERIOD * 1.5)
        await trio.testing.wait_all_tasks_blocked()
        stats = rt.stats()
        # under nine tenths of the budget: the four most recently used stay (8,000 bytes)
        assert stats.live == 4
        assert {key[0] for _, key in rt.live_keys()} == {"s4", "s5", "s6", "s7"}
        assert stats.budget_passivations == 4
        assert stats.live_bytes == 16_000  # the count that triggered it
        await trio.sleep(BUDGET_PERIOD)
        assert rt.stats().live_bytes == 8_000
        for i in range(8):  # nothing was lost: the passivated come back as they were
            assert await rt.ask("sized", f"s{i}", Get()) == (2, 1)


async def test_within_the_budget_nothing_is_passivated(autojump_clock: Any) -> None:
    async with mnemex.open_runtime(config(max_live_bytes=100_000), kinds=[sized_kind()]) as rt:
        for i in range(8):
            await rt.ask("sized", f"s{i}", Add(2))
        await trio.sleep(BUDGET_PERIOD * 5)
        assert rt.stats().live == 8 and rt.stats().budget_passivations == 0
        assert rt.stats().live_bytes == 16_000


async def test_an_actor_larger_than_the_budget_still_serves(autojump_clock: Any) -> None:
    """The budget passivates idle actors; one in use keeps going, and an actor that
    declares no estimate counts nothing."""
    async with mnemex.open_runtime(config(max_live_bytes=5_000),
                                   kinds=[sized_kind(), counter_kind()]) as rt:
        await rt.ask("counter", "plain", Add(1))
        for n in range(1, 30):  # the big one grows past the budget while in use
            assert await rt.ask("sized", "big", Add(1)) == n
            await trio.sleep(BUDGET_PERIOD / 3)
        assert await rt.ask("sized", "big", Get()) == (29, 29)


async def test_an_estimate_is_taken_again_only_for_actors_active_since(autojump_clock: Any) -> None:
    async with mnemex.open_runtime(config(max_live_bytes=10**9), kinds=[sized_kind()]) as rt:
        await rt.ask("sized", "a", Add(1))
        await rt.ask("sized", "b", Add(1))
        await trio.sleep(BUDGET_PERIOD * 1.5)
        assert rt.stats().live_bytes == 2_000
        await rt.ask("sized", "a", Add(4))
        await trio.sleep(BUDGET_PERIOD)
        assert rt.stats().live_bytes == 6_000


def test_the_default_budget_is_half_the_physical_memory() -> None:
    assert live_bytes_budget(123) == 123
    assert 0 < live_bytes_budget(None) < 1 << 50


def test_the_budget_must_be_positive() -> None:
    with pytest.raises(mnemex.InvalidInput, match="max_live_bytes"):
        mnemex.Config(data_dir=None, max_live_bytes=0)


# -- the real kinds' estimates against what they allocate ----------------------------
def _estimate_and_allocation(kind: str, fill: Any) -> tuple[int, int]:
    """(the live_bytes() of the actors ``fill(rt)`` made, what tracemalloc saw
    allocated while it made them) in a runtime warmed by a few actors of each kind."""
    out: list[int] = []

    async def main() -> None:
        async with mnemex.open_runtime(mnemex.Config(data_dir=None, embedder="hashing")) as rt:
            for warm in range(5):
                await rt.scope(user_id=f"warm{warm}", app_name="app").remember("warming up")
                await rt.agent(f"warm{warm}").append("s", [{"role": "user", "content": "warming up"}])
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                keys = await fill(rt)
                gc.collect()
                out.append(tracemalloc.get_traced_memory()[0] - before)
            finally:
                tracemalloc.stop()
            out.append(sum(rt.kernel._cells[(kind, key)].behaviour.live_bytes() for key in keys))

    trio.run(main)
    allocated, estimate = out
    return estimate, allocated


@pytest.mark.parametrize(("count", "scopes"), [(1, 200), (300, 1), (3000, 1)])
def test_a_scope_estimates_its_bytes_within_a_third_of_what_it_allocates(count: int, scopes: int) -> None:
    """tracemalloc sees Python's and numpy's allocations (the vectors: exact mode,
    below hnsw_threshold); the scopes' estimates are within [0.67, 1.5] of them."""
    texts = [f"memory {i} about topic {i % 97}, the apple{i % 13} by the river{i % 7}" for i in range(count)]

    async def fill(rt: Any) -> list[Key]:
        for user in range(scopes):
            scope = rt.scope(user_id=f"user{user}", app_name="app")
            for start in range(0, count, 500):
                await scope.remember_many([f"{text} ({user})" for text in texts[start:start + 500]])
        return [("app", f"user{user}") for user in range(scopes)]

    estimate, allocated = _estimate_and_allocation("scope", fill)
    assert 0.67 <= estimate / allocated <= 1.5, (estimate, allocated)


@pytest.mark.parametrize(("messages", "sessions", "agents"), [(1, 1, 200), (300, 10, 1), (3000, 100, 1)])
def test_an_agent_estimates_its_bytes_within_a_third_of_what_it_allocates(messages: int, sessions: int,
                                                                          agents: int) -> None:
    async def fill(rt: Any) -> list[Key]:
        for name in range(agents):
            agent = rt.agent(f"agent{name}")
            for i in range(messages):
                await agent.append(f"s{i % sessions}", [
                    {"role": "user", "content": f"message {i}: hello, here is what I wanted to say"}])
        return [(f"agent{name}",) for name in range(agents)]

    estimate, allocated = _estimate_and_allocation("agent", fill)
    assert 0.67 <= estimate / allocated <= 1.5, (estimate, allocated)
