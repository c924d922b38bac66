"""A scope's searches run beside its actor (``kernel.read_threads``): through the
runtime they find what they found in the actor's turn, and each finds every memory
whose remember was acknowledged before it was sent, while other callers write and
search the same scope at the same time. A small scope searches in the actor's turn
(``BESIDE_MIN_MEMORIES``); these tests lower that to search their scopes beside."""

from __future__ import annotations

import pytest
import trio

import mnemex
from mnemex.memories import behaviour
from mnemex.memories.kind import scope_kind
from mnemex.memories.protocol import NewMemory, Remember, Search
from mnemex.models.hashing import HashingEmbedder

TOPICS = ["hiking", "pottery", "painting", "camping", "a concert", "the beach", "a new job", "dogs"]


@pytest.fixture(autouse=True)
def _beside_at_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(behaviour, "BESIDE_MIN_MEMORIES", 0)


def config(read_threads: int) -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing", read_threads=read_threads)


async def stored_and_searched(read_threads: int) -> list[list[tuple[str, float]]]:
    async with mnemex.open_runtime(config(read_threads)) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        await scope.remember_many([f"Person {i % 7} talked about {TOPICS[i % len(TOPICS)]} on day {i}"
                                   for i in range(400)])
        queries = [f"who talked about {topic}?" for topic in TOPICS] + ["day 17", "Person 3"]
        found: list[list[tuple[str, float]]] = [[] for _ in queries]

        async def search(i: int, mode: str) -> None:
            result = await scope.search(queries[i], top_k=8, mode=mode)  # type: ignore[arg-type]
            found[i] = [(hit.memory.content, hit.score) for hit in result.hits]

        async with trio.open_nursery() as nursery:  # all at once: batches of several searches
            for i in range(len(queries)):
                nursery.start_soon(search, i, "hybrid" if i % 3 else "fulltext")
        return found


async def test_searches_beside_the_actor_find_what_they_found_in_its_turn() -> None:
    assert await stored_and_searched(2) == await stored_and_searched(0)


async def test_a_search_finds_every_memory_acknowledged_before_it_was_sent() -> None:
    missing: list[str] = []
    async with mnemex.open_runtime(config(2)) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        await scope.remember_many([f"background memory {i} about {TOPICS[i % len(TOPICS)]}"
                                   for i in range(300)])

        async def writer(me: int) -> None:
            for round_ in range(20):
                token = f"zq{me}x{round_}"
                await scope.remember(f"caller {me} wrote {token} in round {round_}")
                result = await scope.search(token, top_k=3, mode="fulltext")
                if not any(token in hit.memory.content for hit in result.hits):
                    missing.append(token)

        async def reader() -> None:
            for _ in range(60):
                await scope.search("what about the beach?", top_k=5)

        async with trio.open_nursery() as nursery:
            for me in range(6):
                nursery.start_soon(writer, me)
            for _ in range(3):
                nursery.start_soon(reader)
        assert missing == []
        assert await scope.count() == 300 + 6 * 20


def test_a_small_scope_searches_in_the_actors_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(behaviour, "BESIDE_MIN_MEMORIES", 3)
    kind = scope_kind(mnemex.Config(data_dir=None, embedder="hashing"), HashingEmbedder())
    scope = kind.create(("a", "u"))
    assert isinstance(scope, behaviour.ScopeMemory)
    search = Search(query="hiking", mode="fulltext", now=1_000.0)
    for n in range(3):
        assert scope.search_beside(search) is None  # fewer than 3 memories
        scope.handle(Remember(memories=[NewMemory(id=f"m{n}", content=f"hiking day {n}")], now=1_000.0))
    plan = scope.search_beside(search)
    assert plan is not None and [hit.memory.id for hit in plan.run().hits] == ["m0", "m1", "m2"]
