"""A scope's searches answered in the asking task (the scope kind's ``inline_read`` and
``inline_when``: ``ScopeMemory.searches_inline``): only where the search is a plain
read, one that changes nothing and plans no job; through the runtime they find what
the actor's turn finds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import trio.testing
from scope_support import run_work

import mnemex
from mnemex.effects import Job, JobResult, Step
from mnemex.knowledge.categories import Category
from mnemex.memories import behaviour
from mnemex.memories.behaviour import GraphReady
from mnemex.memories.kind import scope_kind
from mnemex.memories.protocol import NewMemory, Remember, Search, SetCategories
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


# -- "no job can come due": noted once, until a command changes the scope ------------------------
def quiet_scope(count: int = 20) -> tuple[behaviour.ScopeMemory, HashingEmbedder]:
    """A scope of ``count`` of TEXTS under its HNSW threshold (30): no job is wanted."""
    embedder = HashingEmbedder()
    kind = scope_kind(mnemex.Config(data_dir=None, embedder="hashing", hnsw_threshold=30), embedder)
    scope = kind.create(("a", "u"))
    assert isinstance(scope, behaviour.ScopeMemory)
    remember(scope, embedder, range(count), now=1_000.0)
    return scope, embedder


def remember(scope: behaviour.ScopeMemory, embedder: HashingEmbedder, which: range, now: float) -> Any:
    vectors = embedder.embed([TEXTS[i] for i in which])
    return scope.handle(Remember(memories=[NewMemory(id=f"m{i:02d}", content=TEXTS[i],
                                                     vector=encode_vector(vectors[row]))
                                           for row, i in enumerate(which)],
                                 embedder=embedder.name, dim=embedder.dim, now=now))


TIMES = (0.0, 999.0, 1_000.0, 1_000.5, 1_001.0, 1_030.0, 1_100.0, 1_000_000.0, 2e11)


def assert_inline_as_looked_for(scope: behaviour.ScopeMemory, embedder: HashingEmbedder) -> None:
    """At each of TIMES, ``searches_inline`` answers what looking for jobs at that time
    and at the scope's clock answers (what it did before it noted anything)."""
    for now in TIMES:
        due = scope._wants_jobs(now) or scope._wants_jobs(scope.clock)
        assert scope.searches_inline(vector_search(embedder, now=now)) is not due, now


def test_a_scope_where_no_job_can_come_due_notes_it_once_and_looks_for_none_until_a_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scope, embedder = quiet_scope()
    assert_inline_as_looked_for(scope, embedder)
    assert scope._no_jobs_due is True
    looked: list[float] = []
    plain = behaviour.ScopeMemory._wants_jobs

    def counted(self: behaviour.ScopeMemory, now: float) -> bool:
        looked.append(now)
        return plain(self, now)

    monkeypatch.setattr(behaviour.ScopeMemory, "_wants_jobs", counted)
    for now in TIMES:  # at any time, however late: no look
        search = vector_search(embedder, now=now)
        assert scope.searches_inline(search)
        assert not isinstance(scope.handle(search), Step)  # (the noted search: the note stays)
    assert looked == []
    scope.handle(vector_search(embedder, now=1_002.0))  # a search not noted first: it looks again
    assert scope._no_jobs_due is None
    assert scope.searches_inline(vector_search(embedder))
    assert looked == [math.inf] and scope._no_jobs_due is True


def test_a_write_that_makes_a_job_wanted_is_seen_by_the_next_search_and_the_clock_then_counts() -> None:
    scope, embedder = quiet_scope()
    assert scope.searches_inline(vector_search(embedder)) and scope._no_jobs_due is True
    planned = remember(scope, embedder, range(20, 40), now=1_010.0)  # past the threshold: a build
    assert isinstance(planned, Step) and planned.effects
    assert scope._no_jobs_due is None
    # the build in flight: no job due until its plan goes stale, then one is (a new plan)
    assert_inline_as_looked_for(scope, embedder)
    assert scope._no_jobs_due is False
    assert scope.searches_inline(vector_search(embedder, now=1_011.0))
    assert not scope.searches_inline(vector_search(embedder, now=2e11))


def test_across_a_jobs_life_the_note_follows_it_planned_stale_delivered() -> None:
    scope, embedder = small_graph_scope()  # the graph's build planned at 1,000
    assert_inline_as_looked_for(scope, embedder)
    late = vector_search(embedder, now=1_000_000.0)
    assert not scope.searches_inline(late)  # its plan stale: a search plans it again
    replanned = scope.handle(late)
    assert isinstance(replanned, Step)
    [job] = [effect for effect in replanned.effects if isinstance(effect, Job)]
    assert_inline_as_looked_for(scope, embedder)
    scope.handle(job.deliver(JobResult(value=run_work(job.work))))  # the graph delivered and adopted
    assert scope.vectors is not None and scope.vectors.mode == "hnsw"
    assert_inline_as_looked_for(scope, embedder)
    assert scope._no_jobs_due is True  # nothing wanted any more
    scope.handle(GraphReady(None, "RuntimeError: a later build failed"))  # (a failure is a change too)
    assert scope._no_jobs_due is None
    assert_inline_as_looked_for(scope, embedder)


def test_a_reclassification_started_and_finished_is_seen_by_the_note() -> None:
    scope, embedder = quiet_scope()
    assert scope.searches_inline(vector_search(embedder)) and scope._no_jobs_due is True
    started = scope.handle(SetCategories(categories=[Category(name="hobbies", description="hiking, camping")],
                                         now=1_020.0))
    jobs = [effect for effect in getattr(started, "effects", ()) if isinstance(effect, Job)]
    assert jobs  # the re-classification's first batch, planned
    assert_inline_as_looked_for(scope, embedder)
    assert not scope.searches_inline(vector_search(embedder, now=2e11))  # (its plan stale by then)
    for _ in range(10):  # (20 memories: one batch)
        if not jobs:
            break
        job = jobs.pop(0)
        done = scope.handle(job.deliver(JobResult(value=run_work(job.work))))
        jobs += [effect for effect in getattr(done, "effects", ()) if isinstance(effect, Job)]
    assert not jobs and not scope.categories.reclassifying
    assert_inline_as_looked_for(scope, embedder)
    assert scope._no_jobs_due is True


def test_a_replay_leaves_no_note_behind() -> None:
    scope, embedder = quiet_scope()
    assert scope.searches_inline(vector_search(embedder)) and scope._no_jobs_due is True
    vectors = embedder.embed(TEXTS[20:40])
    scope.replay([Remember(memories=[NewMemory(id=f"m{i:02d}", content=TEXTS[i],
                                               vector=encode_vector(vectors[row]))
                                     for row, i in enumerate(range(20, 40))],
                           embedder=embedder.name, dim=embedder.dim, now=1_010.0)])
    assert scope._no_jobs_due is None
    assert_inline_as_looked_for(scope, embedder)
    assert not scope.searches_inline(vector_search(embedder))  # 40 memories, no graph planned: one is due
