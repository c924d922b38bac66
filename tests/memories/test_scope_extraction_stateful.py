"""Extraction through a scope under random interleavings of appends, triggers,
ticks, job results (in time, failed, late) and crashes with replay: every message
is covered by exactly one committed job or one dead letter, at most one job per
session is in flight, and replaying the journal onto the last snapshot rebuilds
the same memories and cursors without calling the extractor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from scope_support import KEY, run_work, settings, snapshot_image

from mnemex._ids import IdClock, id_at
from mnemex.effects import Image, Job, JobResult, Step
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
)
from mnemex.memories.protocol import ApplyExtraction, ExtractionFailed, ListMemories, NewFact

SESSIONS = ("s1", "s2")
IDS = IdClock()


class Extractor:
    """Facts named after the messages they cover; ``failing`` makes the next jobs fail.
    ``calls`` counts every job run."""

    def __init__(self) -> None:
        self.failing = False
        self.calls = 0

    async def __call__(self, job: ExtractionJob) -> ExtractionOutcome | ExtractionFailure:
        self.calls += 1
        if self.failing:
            return ExtractionFailure("unreachable", "connection refused", 0.0)
        messages = await job.read(job.first, job.upto)
        first_id = IDS.reserve(1.0, max(1, job.upto - job.first))
        facts = [NewFact(id=id_at(first_id, i), content=f"fact of {job.session_id} message {m.position}",
                         first=m.position, last=m.position) for i, m in enumerate(messages)]
        return ExtractionOutcome(facts, [], "rules", finished_at=0.0)


def reader(session_id: str) -> Any:
    async def read(first: int, upto: int) -> Sequence[SourceMessage]:
        return [SourceMessage(position=p, role="user", text=f"{session_id} {p}") for p in range(first, upto)]
    return read


class ExtractionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.extractor = Extractor()
        cursor = CursorSettings(turns=3, tokens=10_000, idle=50.0, job_timeout=30.0, max_attempts=2,
                                backoff=5.0, max_backoff=20.0, max_batch=4)
        self.settings = replace(settings(), extract=self.extractor, cursor=cursor)
        self.memory = ScopeMemory(KEY, self.settings)
        self.now = 1_000.0
        self.known = dict.fromkeys(SESSIONS, 0)
        self.jobs: list[Job] = []           # started, not yet delivered (some may be late)
        self.journal: list[Any] = []        # accepted results since the last snapshot
        self.image: Image | None = None
        self.committed: dict[str, list[tuple[int, int]]] = {s: [] for s in SESSIONS}

    # -- driving ------------------------------------------------------------------------------
    def _handle(self, command: Any) -> Any:
        step = self.memory.handle(command)
        effects = step.effects if isinstance(step, Step) else ()
        self.jobs += [e for e in effects if isinstance(e, Job) and "timer" not in e.name]
        accepted = not (isinstance(step, Step) and step.unchanged)
        if isinstance(command, ApplyExtraction | ExtractionFailed) and accepted:
            self.journal.append(command)
            if isinstance(command, ApplyExtraction):
                self.committed[command.session_id].append((command.first, command.upto))
        return step.reply if isinstance(step, Step) else step

    @rule(session=st.sampled_from(SESSIONS), count=st.integers(1, 5), now_mode=st.booleans())
    def append_and_offer(self, session: str, count: int, now_mode: bool) -> None:
        self.known[session] += count
        self.now += 1.0
        self._handle(ExtractSession(session_id=session, read=reader(session), known=self.known[session],
                                    now=self.now, tokens=count,
                                    mode="now" if now_mode else "if_needed"))

    @rule(seconds=st.sampled_from([1.0, 10.0, 40.0, 100.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        self._handle(CursorTick(now=self.now))

    @precondition(lambda self: bool(self.jobs))
    @rule(which=st.integers(0, 10), fail=st.booleans())
    def deliver(self, which: int, fail: bool) -> None:
        job = self.jobs.pop(which % len(self.jobs))
        self.extractor.failing = fail
        self.now += 1.0
        self._handle(job.deliver(JobResult(value=run_work(job.work))))

    @rule()
    def snapshot(self) -> None:
        self.image = snapshot_image(self.memory)
        self.journal = []

    @rule()
    def crash(self) -> None:
        """The process dies: rebuilt from the last snapshot plus the journal after it.
        Jobs in flight may still come back (late): they must change nothing."""
        calls = self.extractor.calls
        if self.image is None:
            self.memory = ScopeMemory(KEY, self.settings)
        else:
            self.memory = ScopeMemory.restore(KEY, self.image, self.settings)
        self.memory.replay(self.journal)
        assert self.extractor.calls == calls  # replay needs no extractor

    # -- what must always hold ------------------------------------------------------------------
    @invariant()
    def every_message_is_covered_once(self) -> None:
        for info in self.memory.handle(GetCursors()):
            spans = sorted(self.committed[info.session_id] + [(d.first, d.upto) for d in info.dead_letters])
            # the dead letters later retried and committed appear twice: a retry removes the letter
            edge = 0
            for first, upto in spans:
                assert first >= edge, f"{info.session_id}: [{first}, {upto}) covered twice"
                edge = upto
            assert edge == info.done <= self.known[info.session_id]

    @invariant()
    def one_job_in_flight_per_session(self) -> None:
        for info in self.memory.handle(GetCursors()):
            assert info.in_flight is None or info.phase == "in_flight"

    @invariant()
    def facts_match_committed_messages(self) -> None:
        stored = {r.content for r in self.memory.handle(ListMemories(limit=None, include_history=True)).memories}
        expected = {f"fact of {s} message {p}" for s, spans in self.committed.items()
                    for first, upto in spans for p in range(first, upto)}
        assert stored == expected

    @invariant()
    def replay_rebuilds_the_same_state(self) -> None:
        again = ScopeMemory(KEY, replace(self.settings, extract=None)) if self.image is None else \
            ScopeMemory.restore(KEY, self.image, replace(self.settings, extract=None))
        again.replay(self.journal)
        mine = self.memory.handle(ListMemories(limit=None, include_history=True)).memories
        assert again.handle(ListMemories(limit=None, include_history=True)).memories == mine
        assert durable(again) == durable(self.memory)


def durable(memory: ScopeMemory) -> dict[str, tuple[Any, ...]]:
    """The cursors' durable state, by session (a cursor only offered to is none)."""
    out = {}
    for info in memory.handle(GetCursors()):
        state = (info.done, info.dead_letters, info.committed, info.failures)
        if state != (0, [], 0, 0):
            out[info.session_id] = state
    return out


ExtractionMachine.TestCase.settings = hypothesis_settings(max_examples=200, stateful_step_count=50,
                                                          deadline=None)
TestExtraction = ExtractionMachine.TestCase
