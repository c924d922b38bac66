"""A scope's searches answered in the asking task (the scope kind's ``inline_read`` and
``inline_when``: ``ScopeMemory.searches_inline``): only where the search is a plain
read, one that changes nothing and plans no job; through the runtime they find what
the actor's turn finds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import trio.testing

import mnemex
from mnemex.effects import Step
from mnemex.memories import behaviour
from mnemex.memories.kind import scope_kind
from mnemex.memories.protocol import NewMemory, Remember, Search
from mnemex.memories.snapshot import encode_vector
from mnemex.models.hashing import HashingEmbedder

TEXTS = [f"Person {i % 5} went {['hiking', 'to the beach', 'camping', 'to a concert'][i % 4]} on day {i}"
         for i in range(40)]


def small_graph_scope() -> tuple[behaviour.ScopeMemory, HashingEmbedder]:
    """A scope of 40 memories whose HNSW threshold (30) is passed: a graph is due."""
    embedder = HashingEmbedder()
    kind = scope_kind(mnemex.Config(data_dir=None, embedder="hashing", hnsw_threshold=30), embedder)
    scope = kind.create(("a", "u"))
    assert isinstance(scope, behaviour.ScopeMemory)
    vectors = embedder.embed(TEXTS)
    scope.handle(Remember(memories=[NewMemory(id=f"m{i:02d}", content=text, vector=encode_vector(vectors[i]))
                                    for i, text in enumerate(TEXTS)],
                          embedder=embedder.name, dim=embedder.dim, now=1_000.0))
    return scope, embedder


def vector_search(embedder: HashingEmbedder, now: Any = 1_001.0) -> Search:
    return Search(query="who went hiking?", vector=encode_vector(embedder.embed(["who went hiking?"])[0]),
                  embedder=embedder.name, dim=embedder.dim, mode="vector", now=now)


def test_a_search_that_would_plan_a_job_is_not_inline_and_one_that_would_not_changes_nothing() -> None:
    scope, embedder = small_graph_scope()
    assert scope.graph_pending_since == 1_000.0  # the remember planned the graph
    assert scope.searches_inline(vector_search(embedder))  # its build is in flight
    late = vector_search(embedder, now=1_000_000.0)
    assert not scope.searches_inline(late)  # that plan is stale by then: the search would plan again
    planned = scope.handle(late)
    assert isinstance(planned, Step) and planned.effects  # the build job
    assert scope.graph_pending_since == 1_000_000.0
    search = vector_search(embedder, now=1_000_001.0)
    assert scope.searches_inline(search)
    answered = scope.handle(search)
    assert not isinstance(answered, Step)
    assert scope.graph_pending_since == 1_000_000.0
    assert [hit.memory.id for hit in answered.hits] == [hit.memory.id for hit in planned.reply.hits]


@pytest.mark.parametrize("now", ["soon", float("nan"), float("inf"), None, True])
def test_a_search_with_a_time_that_is_no_finite_number_is_left_to_the_handler(now: Any) -> None:
    scope, embedder = small_graph_scope()  # the graph planned: nothing else due
    assert scope.searches_inline(vector_search(embedder))
    assert not scope.searches_inline(vector_search(embedder, now=now))


def test_only_searches_of_scopes_under_the_beside_size_are_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    scope, embedder = small_graph_scope()
    assert scope.searches_inline(vector_search(embedder))
    assert not scope.searches_inline(Remember(memories=[], now=3_000.0))
    monkeypatch.setattr(behaviour, "BESIDE_MIN_MEMORIES", len(TEXTS))
    assert not scope.searches_inline(vector_search(embedder))  # searched beside the actor instead


async def searched(inline: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], int]:
    """Store TEXTS, then search them in three modes, with or without inline reads;
    the hits and how many of the searches the scope took inline."""
    taken = [0]
    plain = behaviour.ScopeMemory.searches_inline

    def counted(scope: behaviour.ScopeMemory, command: Any) -> bool:
        answer = inline and plain(scope, command)
        taken[0] += answer
        return answer

    monkeypatch.setattr(behaviour.ScopeMemory, "searches_inline", counted)
    async with mnemex.open_runtime(mnemex.Config(data_dir=None, embedder="hashing")) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        await scope.remember_many(TEXTS)
        await trio.testing.wait_all_tasks_blocked()  # its write durable, the actor idle
        found = []
        for query in ("who went hiking?", "day 17", "Person 3 at a concert"):
            for mode in ("vector", "fulltext", "keyword"):
                result = await scope.search(query, top_k=5, mode=mode, min_score=None)  # type: ignore[arg-type]
                found.append([(hit.memory.content, hit.score, hit.scores) for hit in result.hits])
        return found, taken[0]


async def test_searches_answered_inline_find_what_the_actors_turn_finds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    inline, taken = await searched(True, monkeypatch)
    mailbox, none = await searched(False, monkeypatch)
    assert inline == mailbox
    assert all(hits for hits in inline)
    assert (taken, none) == (9, 0)


def test_the_query_vector_a_ref_sends_is_the_unit_mean_of_its_wordings() -> None:
    rows = HashingEmbedder().embed(["what does the user do?", "what do I do?"])
    mean = rows.mean(axis=0)
    assert float(np.sqrt(mean.dot(mean))) == float(np.linalg.norm(mean))


def test_a_search_found_to_plan_no_job_is_a_plain_read_only_if_it_is_the_next_command_handled() -> None:
    scope, embedder = small_graph_scope()  # the graph's build in flight: nothing due
    noted = vector_search(embedder)
    assert scope.searches_inline(noted)
    assert not isinstance(scope.handle(noted), Step)  # the next command: answered as a plain read
    assert scope.searches_inline(noted)
    scope.handle(vector_search(embedder))  # another command came between
    scope.graph_pending_since = None  # (as if that build was lost: one is due again)
    planned = scope.handle(noted)
    assert isinstance(planned, Step) and planned.effects  # looked for jobs again, and planned the build
    assert scope.graph_pending_since == noted.now
