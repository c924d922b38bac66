"""The knowledge side of a scope, sans-io: facts consolidated (the peers' reported
failures as regression tests), history, reads of active memories, and the
extraction cursors driven through their commands, with replay and restore."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from scope_support import KEY, restored, run_work, settings

from mnemex._ids import IdClock, id_at
from mnemex.effects import Job, JobResult, Step
from mnemex.errors import InvalidInput
from mnemex.knowledge.cursor import CursorSettings
from mnemex.knowledge.facts import SourceMessage
from mnemex.memories.behaviour import ScopeMemory
from mnemex.memories.extraction import (
    CursorTick,
    ExtractionFailure,
    ExtractionJob,
    ExtractionOutcome,
    ExtractSession,
    GetCursors,
    RetryDeadLetter,
)
from mnemex.memories.protocol import (
    ApplyExtraction,
    Extracted,
    ExtractionFailed,
    GetHistory,
    ListMemories,
    NewFact,
    Search,
)

LISBON = NewFact(id="M1", content="The user lives in Lisbon.", entities=("Lisbon",), attributed_to="user")


def apply(memory: ScopeMemory, facts: Sequence[NewFact], first: int, upto: int, *, offered: Sequence[str] = (),
          now: float = 100.0) -> Extracted:
    reply = memory.handle(ApplyExtraction(session_id="s1", first=first, upto=upto, facts=list(facts),
                                          offered=list(offered), now=now))
    return reply.reply if isinstance(reply, Step) else reply


def active(memory: ScopeMemory) -> list[str]:
    return [record.content for record in memory.handle(ListMemories()).memories]


def test_a_fact_stated_twice_is_one_active_memory() -> None:
    memory = ScopeMemory(KEY, settings())
    apply(memory, [LISBON], 0, 1)
    again = apply(memory, [NewFact(id="M2", content="the user lives in  Lisbon")], 1, 2, now=200.0)
    assert again.added == [] and again.reinforced == ["M1"]
    assert active(memory) == ["The user lives in Lisbon."]
    record = memory.record("M1")
    assert record is not None and record.reinforced == 1 and len(record.sources) == 2


def test_moving_supersedes_the_old_place_and_keeps_it_with_its_end() -> None:
    memory = ScopeMemory(KEY, settings())
    apply(memory, [LISBON], 0, 1)
    moved = apply(memory, [NewFact(id="M2", content="The user moved to Berlin.", entities=("Berlin",),
                                   attributed_to="user", relation="updates", target="M1", observed_at=300.0)],
                  1, 2, offered=["M1"], now=300.0)
    assert moved.superseded == ["M1"] and moved.added == ["M2"]
    assert active(memory) == ["The user moved to Berlin."]
    old = memory.record("M1")
    assert old is not None and old.status == "superseded" and old.superseded_by == "M2"
    assert old.invalid_at == 300.0
    hits = memory.handle(Search(query="where does the user live", mode="fulltext", now=400.0))
    assert [hit.memory.id for hit in getattr(hits, "reply", hits).hits] == ["M2"]
    everything = memory.handle(Search(query="lives Lisbon Berlin", mode="fulltext", include_history=True,
                                      now=400.0))
    assert {hit.memory.id for hit in getattr(everything, "reply", everything).hits} == {"M1", "M2"}
    then = memory.handle(ListMemories(as_of=150.0)).memories
    assert [record.id for record in then] == ["M1"]
    history = memory.handle(GetHistory(id="M2"))
    assert [r.id for r in history.related] == ["M1"]
    assert [(mid, change.op) for mid, change in history.changes] == [
        ("M1", "created"), ("M1", "superseded"), ("M2", "created"), ("M2", "supersedes")]


def test_an_update_without_a_shared_entity_links_a_conflict_and_ends_nothing() -> None:
    memory = ScopeMemory(KEY, settings())
    apply(memory, [NewFact(id="M1", content="Mary likes pizza.", entities=("Mary",))], 0, 1)
    reply = apply(memory, [NewFact(id="M2", content="John likes sushi.", entities=("John",),
                                   relation="updates", target="M1")], 1, 2, offered=["M1"])
    assert reply.superseded == [] and reply.linked == ["M1"]
    assert sorted(active(memory)) == ["John likes sushi.", "Mary likes pizza."]
    new = memory.record("M2")
    assert new is not None and new.links == ("M1",)
    assert any(change.note == "conflicts" for change in new.history)


def test_also_liking_burgers_supersedes_nothing() -> None:
    memory = ScopeMemory(KEY, settings())
    apply(memory, [NewFact(id="M1", content="The user likes pizza.", attributed_to="user")], 0, 1)
    reply = apply(memory, [NewFact(id="M2", content="The user also likes burgers.", attributed_to="user",
                                   relation="extends", target="M1")], 1, 2, offered=["M1"])
    assert reply.superseded == [] and sorted(active(memory)) == ["The user also likes burgers.",
                                                                  "The user likes pizza."]


def test_a_target_that_was_not_offered_is_dropped_with_its_relation() -> None:
    memory = ScopeMemory(KEY, settings())
    apply(memory, [LISBON], 0, 1)
    reply = apply(memory, [NewFact(id="M2", content="The user lives in Berlin.", entities=("Berlin",),
                                   attributed_to="user", relation="updates", target="M1")], 1, 2, offered=[])
    assert reply.superseded == [] and sorted(active(memory)) == ["The user lives in Berlin.",
                                                                  "The user lives in Lisbon."]


def test_a_close_duplicate_merges_and_keeps_its_wording() -> None:
    memory = ScopeMemory(KEY, settings())
    apply(memory, [NewFact(id="M1", content="The user works as a Java developer at a bank.")], 0, 1)
    reply = apply(memory, [NewFact(id="M2", content="The user works as a Java developer for a bank.",
                                   relation="duplicate", target="M1")], 1, 2, offered=["M1"])
    assert reply.merged == ["M2"] and reply.added == []
    assert active(memory) == ["The user works as a Java developer at a bank."]
    merged = memory.record("M2")
    assert merged is not None and merged.status == "merged" and merged.merged_into == "M1"
    target = memory.record("M1")
    assert target is not None and target.reinforced == 1


def test_stating_a_superseded_fact_again_makes_it_current_again() -> None:
    memory = ScopeMemory(KEY, settings())
    apply(memory, [LISBON], 0, 1)
    apply(memory, [NewFact(id="M2", content="The user lives in Berlin.", entities=("Berlin",),
                           attributed_to="user", relation="updates", target="M1")], 1, 2, offered=["M1"],
          now=200.0)
    back = apply(memory, [NewFact(id="M3", content="The user lives in Lisbon.", attributed_to="user")], 2, 3,
                 now=300.0)
    assert back.reinforced == ["M1"] and back.superseded == ["M2"]
    assert active(memory) == ["The user lives in Lisbon."]


def test_a_bad_fact_is_dropped_with_why_and_the_rest_is_stored() -> None:
    memory = ScopeMemory(KEY, settings(max_content_bytes=64))
    reply = apply(memory, [NewFact(id="M1", content="x" * 100), NewFact(id="M2", content="  "),
                           NewFact(id="M3", content="The user has a dog named Rex.", kind="not a kind!")], 0, 1)
    assert reply.added == [] and len(reply.dropped) == 3
    reply = apply(memory, [NewFact(id="M4", content="The user has a cat.", kind="fact")], 1, 2)
    assert reply.added == ["M4"]


def test_history_and_cursors_survive_a_snapshot() -> None:
    memory = ScopeMemory(KEY, settings())
    apply(memory, [LISBON], 0, 3)
    apply(memory, [NewFact(id="M2", content="The user lives in Berlin.", entities=("Berlin",),
                           attributed_to="user", relation="updates", target="M1")], 3, 5, offered=["M1"])
    again = restored(memory)
    assert again.handle(ListMemories(include_history=True)).memories == \
        memory.handle(ListMemories(include_history=True)).memories
    assert active(again) == ["The user lives in Berlin."]
    [info] = again.handle(GetCursors())
    assert info.done == 5 and info.committed == 2


# -- the cursors through the scope's commands -------------------------------------------------------
class Extractor:
    """What settings.extract runs: answers from a list, recording the jobs."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.jobs: list[ExtractionJob] = []

    async def __call__(self, job: ExtractionJob) -> ExtractionOutcome | ExtractionFailure:
        self.jobs.append(job)
        answer = self.answers.pop(0)
        if isinstance(answer, ExtractionFailure):
            return answer
        first_id = IDS.reserve(1.0, max(1, len(answer)))
        facts = [NewFact(id=id_at(first_id, i), content=text) for i, text in enumerate(answer)]
        return ExtractionOutcome(facts, [], "rules", finished_at=500.0)


async def _read(first: int, upto: int) -> Sequence[SourceMessage]:
    return [SourceMessage(position=p, role="user", text=f"message {p}") for p in range(first, upto)]


def scope_with(extractor: Extractor, **cursor: Any) -> ScopeMemory:
    return ScopeMemory(KEY, replace(settings(), extract=extractor, cursor=CursorSettings(**cursor)))


def run(memory: ScopeMemory, command: Any) -> tuple[Any, list[Any]]:
    """Handle ``command`` and every job it starts (timers left out), to the end:
    (the reply, the journaled commands)."""
    journal: list[Any] = []
    step = memory.handle(command)
    reply = step.reply if isinstance(step, Step) else step
    todo: list[Job] = list(step.effects) if isinstance(step, Step) else []
    while todo:
        job = todo.pop(0)
        if not isinstance(job, Job) or job.name.startswith("scope.extract-timer"):
            continue
        delivered = job.deliver(JobResult(value=run_work(job.work)))
        result = memory.handle(delivered)
        if isinstance(delivered, ApplyExtraction | ExtractionFailed) and not (
                isinstance(result, Step) and result.unchanged):
            journal.append(delivered)
        if job.answers:
            reply = result.reply if isinstance(result, Step) else result
        if isinstance(result, Step):
            todo += [effect for effect in result.effects if isinstance(effect, Job)]
    return reply, journal


IDS = IdClock()


def extract(known: int, *, now: float = 100.0, mode: str = "now") -> ExtractSession:
    return ExtractSession(session_id="s1", read=_read, known=known, now=now,
                          mode=mode)  # type: ignore[arg-type]


def test_extract_now_commits_the_job_and_answers_what_changed() -> None:
    extractor = Extractor([["The user is called Ana."]])
    memory = scope_with(extractor)
    reply, journal = run(memory, extract(3))
    assert reply.status == "committed" and (reply.first, reply.upto) == (0, 3) and len(reply.added) == 1
    assert [type(c).__name__ for c in journal] == ["ApplyExtraction"]
    # a second call extracts only what is new
    reply, _ = run(memory, extract(3, now=200.0))
    assert reply.status == "nothing_new" and len(extractor.jobs) == 1
    extractor.answers.append(["The user has a cat."])
    reply, _ = run(memory, extract(5, now=300.0))
    assert (reply.first, reply.upto) == (3, 5) and (extractor.jobs[-1].first, extractor.jobs[-1].upto) == (3, 5)


def test_if_needed_waits_for_the_buffer() -> None:
    extractor = Extractor([["The user likes tea."]])
    memory = scope_with(extractor, turns=4)
    reply, _ = run(memory, extract(2, mode="if_needed"))
    assert reply.status == "buffered" and extractor.jobs == []
    reply, journal = run(memory, extract(4, mode="if_needed", now=110.0))
    assert reply.status == "in_flight" and len(journal) == 1 and extractor.jobs[0].upto == 4


def test_failures_are_journaled_retried_then_dead_lettered_and_retryable() -> None:
    fail = ExtractionFailure("malformed", "no JSON in the answer", 150.0)
    extractor = Extractor([fail])
    memory = scope_with(extractor, max_attempts=2, backoff=1.0)
    reply, journal = run(memory, extract(2))
    assert reply.status == "failed" and reply.error is not None and reply.error.startswith("malformed")
    assert [type(c).__name__ for c in journal] == ["ExtractionFailed"]
    extractor.answers.append(fail)
    tick = memory.handle(CursorTick(now=160.0))  # the backoff ended: the retry starts
    jobs = [effect for effect in tick.effects if isinstance(effect, Job) and "timer" not in effect.name]
    assert len(jobs) == 1
    result = memory.handle(jobs[0].deliver(JobResult(value=run_work(jobs[0].work))))
    assert getattr(result, "reply", result).status == "dead_letter"
    [info] = memory.handle(GetCursors())
    assert info.done == 2 and [(d.first, d.upto, d.reason) for d in info.dead_letters] == [(0, 2, "malformed")]
    # the session keeps working, and the dead letter can be retried
    extractor.answers += [["The user is called Ana."], ["The user has a cat."]]
    reply, _ = run(memory, extract(3, now=170.0))
    assert reply.status == "committed" and (reply.first, reply.upto) == (2, 3)
    reply, _ = run(memory, RetryDeadLetter(session_id="s1", first=0, read=_read, now=180.0))
    assert reply.status == "committed" and (reply.first, reply.upto) == (0, 2)
    assert memory.handle(GetCursors())[0].dead_letters == []


def test_a_late_result_of_an_expired_job_changes_nothing() -> None:
    extractor = Extractor([["The user is called Ana."]])
    memory = scope_with(extractor, job_timeout=10.0)
    step = memory.handle(extract(2))
    [job] = [effect for effect in step.effects if isinstance(effect, Job) and "timer" not in effect.name]
    tick = memory.handle(CursorTick(now=200.0))  # past the deadline: a failure is journaled
    [expire] = [effect for effect in tick.effects if isinstance(effect, Job) and "timer" not in effect.name]
    failure = expire.deliver(JobResult(value=None))
    assert isinstance(failure, ExtractionFailed) and failure.reason == "timeout"
    memory.handle(failure)
    late = memory.handle(job.deliver(JobResult(value=run_work(job.work))))
    assert isinstance(late, Step) and late.unchanged and late.reply.status == "expired"
    assert active(memory) == []


def test_replay_rebuilds_memories_and_cursors_without_the_extractor() -> None:
    extractor = Extractor([["The user is called Ana."], ExtractionFailure("timeout", "slow", 200.0),
                           ["The user has a cat."]])
    memory = scope_with(extractor)
    journal: list[Any] = []
    for known in (2, 4):
        _, done = run(memory, extract(known, now=100.0 * known))
        journal += done
    _, done = run(memory, extract(4, now=900.0))
    journal += done
    replayed = ScopeMemory(KEY, settings())  # no extractor at all
    replayed.replay(journal)
    assert replayed.handle(ListMemories(include_history=True)).memories == \
        memory.handle(ListMemories(include_history=True)).memories
    assert [(i.done, i.committed, i.failures) for i in replayed.handle(GetCursors())] == \
        [(i.done, i.committed, i.failures) for i in memory.handle(GetCursors())]


def test_bad_arguments_name_the_field() -> None:
    memory = scope_with(Extractor([]))
    with pytest.raises(InvalidInput) as caught:
        memory.handle(extract(-1))
    assert caught.value.field == "known"
    with pytest.raises(InvalidInput) as caught:
        memory.handle(ApplyExtraction(session_id="", first=0, upto=1))
    assert caught.value.field == "session_id"
    with pytest.raises(InvalidInput):
        ScopeMemory(KEY, settings()).handle(extract(2))  # no extractor in this scope kind
