"""The extraction cursor: each trigger, the one-job-in-flight rule, timeouts, backoff,
dead letters, late results and replay, table by table; then a stateful machine that
interleaves offers, ticks, flushes, results (in time, failed or late), restarts and
crashes, and checks after every step that committed jobs and dead letters cover
every extracted message exactly once and that replay rebuilds the durable state."""

from __future__ import annotations

import collections
import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mnemex.errors import InvalidInput, NotFound
from mnemex.knowledge.cursor import (
    Cursor,
    CursorSettings,
    CursorState,
    DeadLetter,
    Expired,
    Phase,
    Start,
    Ticket,
)

T0 = 1_000.0


def make(**changes: Any) -> Cursor:
    return Cursor(CursorSettings(**changes))


def started(result: Start | Expired | None) -> Ticket:
    assert isinstance(result, Start), result
    return result.ticket


def fail_until_dead(cursor: Cursor, now: float) -> float:
    """Fail the range at done until it is a dead letter; the time it happened."""
    while True:
        job = cursor.in_flight or started(cursor.flush(now))
        before = len(cursor.dead_letters())
        assert cursor.failed(job.job_id, job.first, job.upto, "malformed", now)
        if len(cursor.dead_letters()) > before:
            return now
        now += 1


# -- triggers ---------------------------------------------------------------------------------
def test_a_job_starts_when_turns_messages_are_pending() -> None:
    cursor = make(turns=3, tokens=10_000)
    assert cursor.offer(2, 10, T0) is None
    assert cursor.phase is Phase.PENDING
    job = started(cursor.offer(3, 5, T0 + 1))
    assert (job.first, job.upto, job.attempt, job.trigger) == (0, 3, 1, "buffer")
    assert (job.started_at, job.deadline) == (T0 + 1, T0 + 1 + 120.0)
    assert cursor.phase is Phase.IN_FLIGHT


def test_a_job_starts_when_tokens_are_pending() -> None:
    cursor = make(turns=100, tokens=500)
    assert cursor.offer(1, 499, T0) is None
    job = started(cursor.offer(2, 1, T0))
    assert (job.first, job.upto, job.trigger) == (0, 2, "buffer")


def test_an_offer_below_what_is_known_is_ignored() -> None:
    cursor = make(turns=4)
    cursor.offer(3, 30, T0)
    assert cursor.offer(2, 9_999, T0 + 1) is None
    assert (cursor.known, cursor.pending, cursor.pending_tokens) == (3, 3, 30)


def test_the_idle_trigger_extracts_what_waits_after_idle_seconds_without_an_offer() -> None:
    cursor = make(idle=60.0)
    cursor.offer(2, 10, T0)
    cursor.offer(3, 10, T0 + 30)
    assert cursor.next_due(T0 + 30) == T0 + 90
    assert cursor.due(T0 + 89) is None
    job = started(cursor.due(T0 + 90))
    assert (job.first, job.upto, job.trigger) == (0, 3, "idle")


def test_idle_zero_never_fires() -> None:
    cursor = make(idle=0.0)
    cursor.offer(2, 10, T0)
    assert cursor.next_due(T0) is None
    assert cursor.due(T0 + 1e6) is None


def test_nothing_is_due_when_nothing_is_pending() -> None:
    cursor = make()
    assert cursor.phase is Phase.IDLE
    assert cursor.next_due(T0) is None
    assert cursor.due(T0) is None
    assert cursor.flush(T0) is None


def test_flush_extracts_whatever_is_pending_whatever_the_thresholds() -> None:
    cursor = make(turns=100, tokens=100_000, idle=0.0)
    cursor.offer(2, 5, T0)
    job = started(cursor.flush(T0))
    assert (job.first, job.upto, job.trigger) == (0, 2, "flush")


def test_flush_while_a_job_is_in_flight_returns_none_and_in_flight_says_why() -> None:
    cursor = make(turns=2)
    job = started(cursor.offer(2, 5, T0))
    cursor.offer(4, 5, T0)
    assert cursor.flush(T0) is None
    assert cursor.in_flight == job
    assert cursor.committed(job.job_id, 0, 2, T0 + 1)
    assert cursor.in_flight is None
    assert started(cursor.flush(T0 + 1)).first == 2


def test_flush_upto_covers_only_the_messages_below_upto() -> None:
    cursor = make(turns=100)
    cursor.offer(10, 50, T0)
    job = started(cursor.flush(T0, upto=4))
    assert (job.first, job.upto) == (0, 4)
    assert cursor.committed(job.job_id, 0, 4, T0)
    assert cursor.flush(T0, upto=4) is None  # already covered
    assert cursor.flush(T0, upto=2) is None
    with pytest.raises(InvalidInput) as caught:
        cursor.flush(T0, upto=11)
    assert caught.value.field == "upto"


def test_a_flush_before_pruning_is_repeated_until_every_message_below_the_cut_is_covered() -> None:
    # pruning would drop messages below 120; 130 wait, more than two batches
    cursor = make(turns=1_000, tokens=10**9, max_batch=50)
    cursor.offer(130, 1_300, T0)
    jobs = []
    while cursor.done < 120:
        job = started(cursor.flush(T0, upto=120))
        jobs.append((job.first, job.upto))
        assert cursor.committed(job.job_id, job.first, job.upto, T0)
    assert jobs == [(0, 50), (50, 100), (100, 120)]
    assert (cursor.done, cursor.pending) == (120, 10)


def test_a_flush_before_pruning_gets_past_a_range_that_keeps_failing() -> None:
    cursor = make(max_attempts=2, turns=1_000)
    cursor.offer(5, 50, T0)
    fail_until_dead(cursor, T0)
    assert cursor.done == 5  # the cut may proceed: the range is kept as a dead letter
    assert [(d.first, d.upto) for d in cursor.dead_letters()] == [(0, 5)]


# -- one job at a time, batches ---------------------------------------------------------------
def test_only_one_job_is_in_flight_and_the_next_starts_when_it_is_committed() -> None:
    cursor = make(turns=2, max_batch=3)
    job = started(cursor.offer(2, 5, T0))
    assert cursor.offer(6, 5, T0 + 1) is None  # pending 6, but a job runs
    assert cursor.due(T0 + 2) is None
    assert cursor.next_due(T0 + 2) == job.deadline
    assert cursor.committed(job.job_id, 0, 2, T0 + 3)
    assert cursor.next_due(T0 + 3) == T0 + 3  # the buffer is still full: at once
    second = started(cursor.due(T0 + 3))
    assert (second.first, second.upto, second.trigger) == (2, 5, "buffer")


def test_a_long_pending_run_is_extracted_in_consecutive_batches() -> None:
    cursor = make(turns=1, max_batch=50)
    ranges = []
    result: Start | Expired | None = cursor.offer(120, 1_200, T0)
    while result is not None:
        job = started(result)
        ranges.append((job.first, job.upto))
        assert cursor.committed(job.job_id, job.first, job.upto, T0)
        result = cursor.due(T0)
    assert ranges == [(0, 50), (50, 100), (100, 120)]
    assert cursor.snapshot().committed == 3


def test_pending_tokens_shrink_with_what_is_committed() -> None:
    cursor = make(turns=1_000, tokens=10**9, max_batch=3)
    cursor.offer(2, 100, T0)
    cursor.offer(6, 40, T0)  # 10 tokens a message from 2 on
    job = started(cursor.flush(T0))
    assert cursor.committed(job.job_id, 0, 3, T0)
    assert cursor.pending_tokens == 30
    job = started(cursor.flush(T0))
    assert cursor.committed(job.job_id, 3, 6, T0)
    assert cursor.pending_tokens == 0


# -- timeouts, failures, backoff, dead letters --------------------------------------------------
def test_a_job_past_its_timeout_fails_then_is_retried_after_the_backoff() -> None:
    cursor = make(turns=2, job_timeout=120.0, backoff=5.0)
    job = started(cursor.offer(2, 5, T0))
    assert cursor.due(T0 + 119) is None
    expired = cursor.due(T0 + 120)
    assert expired == Expired(job, "timeout")
    assert cursor.due(T0 + 121) == expired  # until its failure is applied
    # the caller journals the failure, then applies it
    assert cursor.is_current(job.job_id)
    assert cursor.failed(job.job_id, job.first, job.upto, expired.reason, T0 + 121)
    state = cursor.snapshot()
    assert (state.attempts, state.retry_at, state.failures) == (1, T0 + 126, 1)
    assert cursor.phase is Phase.BACKOFF
    assert cursor.next_due(T0 + 121) == T0 + 126
    assert cursor.due(T0 + 125) is None
    retry = started(cursor.due(T0 + 126))
    assert (retry.first, retry.upto, retry.attempt, retry.trigger) == (0, 2, 2, "retry")
    assert retry.job_id != job.job_id
    # the first job's late result is not current: dropped, not journaled
    assert not cursor.is_current(job.job_id)
    assert not cursor.committed(job.job_id, 0, 2, T0 + 130)
    assert cursor.in_flight == retry
    assert cursor.committed(retry.job_id, 0, 2, T0 + 131)
    state = cursor.snapshot()
    assert (state.done, state.attempts, state.retry_at, state.committed) == (2, 0, None, 1)


@pytest.mark.parametrize(("backoff", "max_backoff", "delays"), [
    (5.0, 300.0, [5.0, 10.0, 20.0, 40.0]),
    (5.0, 12.0, [5.0, 10.0, 12.0, 12.0]),
    (0.0, 0.0, [0.0, 0.0, 0.0, 0.0]),
])
def test_the_backoff_doubles_per_failure_up_to_max_backoff(backoff: float, max_backoff: float,
                                                           delays: list[float]) -> None:
    cursor = make(backoff=backoff, max_backoff=max_backoff, max_attempts=10)
    cursor.offer(1, 1, T0)
    seen = []
    now = T0
    for _ in delays:
        job = started(cursor.flush(now))
        assert cursor.failed(job.job_id, 0, 1, "unreachable", now)
        retry_at = cursor.snapshot().retry_at
        assert retry_at is not None
        seen.append(retry_at - now)
        now = retry_at
    assert seen == delays


def test_an_offer_waits_for_the_backoff_but_a_flush_does_not() -> None:
    cursor = make(turns=2, backoff=30.0)
    job = started(cursor.offer(2, 5, T0))
    assert cursor.failed(job.job_id, 0, 2, "http", T0)
    assert cursor.offer(10, 5, T0 + 1) is None
    assert cursor.due(T0 + 29) is None
    job = started(cursor.flush(T0 + 2))
    assert (job.first, job.upto, job.attempt, job.trigger) == (0, 10, 2, "flush")


def test_after_max_attempts_the_range_is_a_dead_letter_and_the_session_moves_on() -> None:
    cursor = make(turns=3, max_attempts=3, backoff=1.0, max_batch=3)
    job = started(cursor.offer(5, 5, T0))
    now = T0
    for attempt in (1, 2, 3):
        assert job.attempt == attempt
        assert cursor.failed(job.job_id, 0, 3, f"malformed {attempt}", now)
        if attempt < 3:
            now = cursor.snapshot().retry_at or 0.0
            job = started(cursor.due(now))
    assert cursor.dead_letters() == (DeadLetter(first=0, upto=3, reason="malformed 3", attempts=3, at=now),)
    state = cursor.snapshot()
    assert (state.done, state.attempts, state.retry_at, state.failures) == (3, 0, None, 3)
    assert cursor.phase is Phase.PENDING  # 3 and 4 wait for their own trigger
    job = started(cursor.flush(now))
    assert (job.first, job.upto, job.attempt) == (3, 5, 1)


def test_a_dead_letter_can_be_retried_and_its_commit_clears_it() -> None:
    cursor = make(max_attempts=1, turns=1_000)
    cursor.offer(4, 5, T0)
    fail_until_dead(cursor, T0)
    cursor.offer(6, 5, T0)
    ordinary = started(cursor.flush(T0 + 1))
    assert cursor.retry_dead(0, T0 + 1) is None  # one job at a time
    assert cursor.committed(ordinary.job_id, 4, 6, T0 + 2)
    retry = started(cursor.retry_dead(0, T0 + 3))
    assert (retry.first, retry.upto, retry.attempt, retry.dead_letter, retry.trigger) == (
        0, 4, 2, True, "dead_letter")
    assert cursor.committed(retry.job_id, 0, 4, T0 + 4)
    assert cursor.dead_letters() == ()
    assert cursor.done == 6
    with pytest.raises(NotFound):
        cursor.retry_dead(0, T0 + 5)


def test_a_failed_dead_letter_retry_keeps_the_dead_letter_with_one_attempt_more() -> None:
    cursor = make(max_attempts=2, turns=1_000)
    cursor.offer(3, 5, T0)
    fail_until_dead(cursor, T0)
    retry = started(cursor.retry_dead(0, T0 + 10))
    assert cursor.failed(retry.job_id, 0, 3, "refused", T0 + 11)
    assert cursor.dead_letters() == (DeadLetter(first=0, upto=3, reason="refused", attempts=3, at=T0 + 11),)
    assert cursor.done == 3
    assert started(cursor.retry_dead(0, T0 + 12)).attempt == 4


def test_late_and_unknown_results_are_ignored() -> None:
    cursor = make(turns=2, job_timeout=10.0, backoff=1.0)
    job = started(cursor.offer(2, 5, T0))
    expired = cursor.due(T0 + 10)
    assert isinstance(expired, Expired)
    assert cursor.failed(job.job_id, 0, 2, "timeout", T0 + 10)
    assert not cursor.failed(job.job_id, 0, 2, "malformed", T0 + 10)  # its own late failure
    assert not cursor.committed(job.job_id, 0, 2, T0 + 10)  # no job in flight
    retry = started(cursor.due(T0 + 11))
    assert not cursor.committed(job.job_id, 0, 2, T0 + 12)
    assert not cursor.committed("no-such-job", 0, 2, T0 + 12)
    assert cursor.in_flight == retry
    assert cursor.snapshot() == CursorState(done=0, attempts=1, retry_at=T0 + 11, failures=1)


def test_a_result_is_accepted_once() -> None:
    cursor = make(turns=2)
    job = started(cursor.offer(2, 5, T0))
    assert cursor.committed(job.job_id, 0, 2, T0)
    assert not cursor.committed(job.job_id, 0, 2, T0)
    assert not cursor.failed(job.job_id, 0, 2, "late", T0)
    assert cursor.snapshot().committed == 1


@pytest.mark.parametrize(("first", "upto", "field"), [(0, 3, "upto"), (1, 2, "first"), (2, 2, "upto")])
def test_a_live_result_must_repeat_its_jobs_range(first: int, upto: int, field: str) -> None:
    cursor = make(turns=2)
    job = started(cursor.offer(2, 5, T0))
    before = cursor.snapshot()
    with pytest.raises(InvalidInput) as caught:
        cursor.committed(job.job_id, first, upto, T0)
    assert caught.value.field == field
    assert cursor.snapshot() == before
    assert cursor.in_flight == job  # nothing changed


def test_a_restart_forgets_the_job_and_what_was_offered_and_never_reuses_a_job_id() -> None:
    cursor = make(turns=2)
    job = started(cursor.offer(2, 5, T0))
    cursor.reset_transient()
    assert (cursor.in_flight, cursor.known, cursor.pending_tokens, cursor.phase) == (None, 0, 0, Phase.IDLE)
    again = started(cursor.offer(2, 5, T0 + 1))
    assert (again.first, again.upto, again.attempt) == (0, 2, 1)
    assert again.job_id != job.job_id
    assert not cursor.committed(job.job_id, 0, 2, T0 + 2)
    assert cursor.committed(again.job_id, 0, 2, T0 + 2)


# -- replay ---------------------------------------------------------------------------------------
def test_replay_applies_results_by_range_and_rebuilds_the_durable_state() -> None:
    live = make(turns=2, max_attempts=2, backoff=1.0, max_batch=2)
    journal: list[tuple[Any, ...]] = []
    job = started(live.offer(2, 5, T0))
    assert live.failed(job.job_id, 0, 2, "timeout", T0 + 1)
    journal.append(("failed", 0, 2, "timeout", T0 + 1))
    job = started(live.due(T0 + 2))
    assert live.failed(job.job_id, 0, 2, "malformed", T0 + 2)  # a dead letter now
    journal.append(("failed", 0, 2, "malformed", T0 + 2))
    job = started(live.offer(4, 5, T0 + 3))
    assert live.committed(job.job_id, 2, 4, T0 + 3)
    journal.append(("committed", 2, 4, T0 + 3))
    job = started(live.retry_dead(0, T0 + 4))
    assert live.committed(job.job_id, 0, 2, T0 + 4)
    journal.append(("committed", 0, 2, T0 + 4))

    replayed = Cursor.restore(CursorState(), live.settings)
    for event in journal:
        if event[0] == "committed":
            assert replayed.committed(None, *event[1:])
        else:
            assert replayed.failed(None, *event[1:])
    assert replayed.snapshot() == live.snapshot()
    assert replayed.snapshot() == CursorState(done=4, committed=2, failures=2)
    # a second replay of the same events is refused, range by range
    assert not replayed.committed(None, 2, 4, T0 + 3)
    assert not replayed.committed(None, 0, 2, T0 + 4)
    assert not replayed.failed(None, 0, 2, "malformed", T0 + 2)


def test_replay_accepts_only_the_range_at_done_or_an_exact_dead_letter() -> None:
    cursor = Cursor.restore(CursorState(done=10, dead=(DeadLetter(first=3, upto=6, reason="x", attempts=3,
                                                                   at=T0),)))
    assert not cursor.committed(None, 11, 12, T0)  # a gap
    assert not cursor.committed(None, 5, 12, T0)  # overlaps what is covered
    assert not cursor.committed(None, 3, 5, T0)  # part of a dead letter
    assert not cursor.failed(None, 0, 10, "x", T0)
    assert cursor.committed(None, 10, 12, T0)  # the journal says these messages existed
    assert (cursor.done, cursor.known) == (12, 12)
    assert cursor.committed(None, 3, 6, T0)
    assert cursor.dead_letters() == ()


def test_replay_is_refused_while_a_job_is_in_flight() -> None:
    cursor = make(turns=2)
    started(cursor.offer(2, 5, T0))
    with pytest.raises(InvalidInput) as caught:
        cursor.committed(None, 0, 2, T0)
    assert caught.value.field == "job_id"
    assert cursor.done == 0


def test_the_durable_state_survives_json_and_a_restore_keeps_the_backoff() -> None:
    cursor = make(turns=2, backoff=10.0)
    job = started(cursor.offer(2, 5, T0))
    assert cursor.failed(job.job_id, 0, 2, "unreachable", T0)
    state = msgspec.json.decode(msgspec.json.encode(cursor.snapshot()), type=CursorState)
    assert state == cursor.snapshot()
    restored = Cursor.restore(state, cursor.settings)
    assert restored.snapshot() == state
    assert restored.offer(2, 5, T0 + 1) is None  # backoff still running
    assert restored.next_due(T0 + 1) == T0 + 10
    assert started(restored.due(T0 + 10)).attempt == 2


def test_restore_refuses_dead_letters_that_overlap_or_pass_done() -> None:
    letter = DeadLetter(first=0, upto=5, reason="x", attempts=1, at=T0)
    with pytest.raises(InvalidInput):
        Cursor.restore(CursorState(done=4, dead=(letter,)))
    with pytest.raises(InvalidInput):
        Cursor.restore(CursorState(done=9, dead=(letter, letter)))


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("changes", "field"), [
    ({"turns": 0}, "settings.turns"), ({"tokens": -1}, "settings.tokens"),
    ({"max_attempts": 0}, "settings.max_attempts"), ({"max_batch": True}, "settings.max_batch"),
    ({"idle": -1.0}, "settings.idle"), ({"job_timeout": 0.0}, "settings.job_timeout"),
    ({"backoff": float("nan")}, "settings.backoff"), ({"max_backoff": 1.0}, "settings.max_backoff"),
])
def test_settings_are_checked_when_built_and_when_decoded(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        CursorSettings(**changes)
    assert caught.value.field == field
    if field != "settings.backoff":  # JSON has no NaN
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(msgspec.json.encode(changes), type=CursorSettings)


def test_settings_have_the_documented_defaults() -> None:
    assert msgspec.structs.asdict(CursorSettings()) == {
        "turns": 6, "tokens": 2_000, "idle": 300.0, "job_timeout": 120.0, "max_attempts": 3,
        "backoff": 5.0, "max_backoff": 300.0, "max_batch": 50}


@pytest.mark.parametrize(("call", "field"), [
    (lambda c: c.offer(-1, 0, T0), "known"),
    (lambda c: c.offer(1.5, 0, T0), "known"),
    (lambda c: c.offer(1, -3, T0), "tokens"),
    (lambda c: c.offer(1, 0, float("nan")), "now"),
    (lambda c: c.offer(1, 0, -1.0), "now"),
    (lambda c: c.flush(T0, upto=-1), "upto"),
    (lambda c: c.due("soon"), "now"),
    (lambda c: c.committed(None, -1, 2, T0), "first"),
    (lambda c: c.committed(None, 3, 3, T0), "upto"),
    (lambda c: c.failed(None, 0, 2, "", T0), "reason"),
    (lambda c: c.failed(7, 0, 2, "x", T0), "job_id"),
    (lambda c: c.retry_dead(True, T0), "first"),
])
def test_bad_arguments_raise_invalid_input_naming_the_field_and_change_nothing(call: Any, field: str) -> None:
    cursor = make(turns=100)
    cursor.offer(2, 5, T0)
    before = (cursor.snapshot(), cursor.known, cursor.pending_tokens, cursor.in_flight)
    with pytest.raises(InvalidInput) as caught:
        call(cursor)
    assert caught.value.field == field
    assert (cursor.snapshot(), cursor.known, cursor.pending_tokens, cursor.in_flight) == before


# -- the stateful machine -------------------------------------------------------------------------
SETTINGS = CursorSettings(turns=4, tokens=300, idle=40.0, job_timeout=60.0, max_attempts=2, backoff=5.0,
                          max_backoff=20.0, max_batch=5)
Event = tuple[Any, ...]  # ("committed", first, upto, now) | ("failed", first, upto, reason, now)


def replay(state: CursorState, events: list[Event]) -> Cursor:
    """A cursor rebuilt from a snapshot (through JSON) and the journal after it."""
    state = msgspec.json.decode(msgspec.json.encode(state), type=CursorState)
    cursor = Cursor.restore(state, SETTINGS)
    for event in events:
        if event[0] == "committed":
            assert cursor.committed(None, *event[1:]), event
        else:
            assert cursor.failed(None, *event[1:]), event
    return cursor


class CursorMachine(RuleBasedStateMachine):
    """The host's side: a session whose messages grow, a clock, extraction jobs that
    answer in time, fail, or answer late, a journal of the accepted events with
    snapshots, restarts (transient state lost) and crashes (rebuilt by replay)."""

    def __init__(self) -> None:
        super().__init__()
        self.cursor = Cursor(SETTINGS)
        self.now = T0
        self.messages = 0  # the session's messages: every offer so far was below this
        self.journal: list[Event] = []
        self.snapshots: list[tuple[int, CursorState]] = [(0, CursorState())]
        self.covered: collections.Counter[int] = collections.Counter()  # committed jobs per position
        self.current: Ticket | None = None  # the job the model believes in flight
        self.results: list[Ticket] = []  # jobs whose result may still come (in time or late)
        self.restarted_at = 0  # the journal's length at the last restart
        self.grown_at: float | None = None  # the last offer that told the cursor of new messages

    def take(self, result: Start | Expired | None) -> None:
        """Check a Start against the model, or journal and apply an Expired's failure."""
        if isinstance(result, Expired):
            assert self.current is not None and result.ticket == self.current
            self.fail(result.ticket, result.reason)  # the job itself may still answer, late
        elif isinstance(result, Start):
            job = result.ticket
            assert self.current is None, "a second job in flight"
            dead = {(d.first, d.upto): d for d in self.cursor.dead_letters()}
            if job.dead_letter:
                assert job.trigger == "dead_letter" and (job.first, job.upto) in dead
                assert job.attempt == dead[job.first, job.upto].attempts + 1
            else:
                assert job.first == self.cursor.done
                assert job.first < job.upto <= self.cursor.known <= self.messages
                assert job.upto - job.first <= SETTINGS.max_batch
                assert job.attempt == self.cursor.snapshot().attempts + 1
                assert not any(self.covered[p] for p in range(job.first, job.upto))
                retry_at = self.cursor.snapshot().retry_at
                full = self.cursor.pending >= SETTINGS.turns or self.cursor.pending_tokens >= SETTINGS.tokens
                if job.trigger != "flush":
                    assert job.upto == min(self.cursor.known, job.first + SETTINGS.max_batch)
                match job.trigger:
                    case "buffer":
                        assert retry_at is None and full
                    case "idle":
                        assert retry_at is None and self.grown_at is not None
                        assert self.now >= self.grown_at + SETTINGS.idle
                    case "retry":
                        assert retry_at is not None and retry_at <= self.now
                    case trigger:
                        assert trigger == "flush"
            assert job.deadline == job.started_at + SETTINGS.job_timeout == self.now + SETTINGS.job_timeout
            self.current = job
            self.results.append(job)

    def fail(self, job: Ticket, reason: str) -> None:
        assert self.cursor.is_current(job.job_id)
        attempts = self.cursor.snapshot().attempts
        self.journal.append(("failed", job.first, job.upto, reason, self.now))  # journal, then apply
        assert self.cursor.failed(job.job_id, job.first, job.upto, reason, self.now)
        self.current = None
        letter = DeadLetter(first=job.first, upto=job.upto, reason=reason, attempts=job.attempt, at=self.now)
        state = self.cursor.snapshot()
        if job.dead_letter:  # stays a dead letter; the range at done is not touched
            assert letter in state.dead and state.attempts == attempts
        elif attempts + 1 == SETTINGS.max_attempts:
            assert letter in state.dead
            assert (state.done, state.attempts, state.retry_at) == (job.upto, 0, None)
        else:
            assert state.retry_at == self.now + min(SETTINGS.max_backoff, SETTINGS.backoff * 2**attempts)

    @rule(more=st.integers(-3, 7), tokens=st.integers(0, 200))
    def offer(self, more: int, tokens: int) -> None:
        """The session grew by ``more`` messages; a negative ``more``: an offer below
        what the cursor knows (a stale one), which changes nothing."""
        if more < 0:
            before = (self.cursor.known, self.cursor.pending_tokens)
            self.take(self.cursor.offer(max(0, self.cursor.known + more), tokens, self.now))
            assert (self.cursor.known, self.cursor.pending_tokens) == before
            return
        self.messages += more
        if self.messages > self.cursor.known:
            self.grown_at = self.now
        self.take(self.cursor.offer(self.messages, tokens, self.now))

    @rule(seconds=st.sampled_from([1.0, 0.0, 4.0, 5.0, 10.0, 39.0, 40.0, 60.0, 100.0, None]))
    def tick(self, seconds: float | None) -> None:
        """Time passes (``None``: until ``next_due``, as a host sleeps); then the timer."""
        when = self.cursor.next_due(self.now)
        if seconds is None and when is None:
            return
        self.now = max(self.now, when) if seconds is None and when is not None else self.now + (seconds or 0)
        result = self.cursor.due(self.now)
        assert (result is not None) == (when is not None and when <= self.now)
        self.take(result)

    @rule(data=st.data())
    def flush(self, data: st.DataObject) -> None:
        upto = data.draw(st.none() | st.integers(0, self.cursor.known))
        end = self.cursor.known if upto is None else upto
        busy = self.cursor.in_flight is not None
        done = self.cursor.done
        result = self.cursor.flush(self.now, upto)
        if busy or end <= done:
            assert result is None
        else:
            assert isinstance(result, Start) and result.ticket.trigger == "flush"
            assert result.ticket.upto == min(end, done + SETTINGS.max_batch)
            self.take(result)

    @precondition(lambda self: self.results)
    @rule(data=st.data(), ok=st.booleans(), reason=st.sampled_from(["malformed", "unreachable"]),
          pick=st.integers(0, 3), again=st.booleans())
    def answer(self, data: st.DataObject, ok: bool, reason: str, pick: int, again: bool) -> None:
        """A job's result: mostly the job in flight's, else any (then often a late one)."""
        mine = [job for job in self.results if self.current is not None and job is self.current]
        job = mine[0] if mine and pick else data.draw(st.sampled_from(self.results))
        current = self.cursor.in_flight
        is_current = self.cursor.is_current(job.job_id)
        assert is_current == (current is not None and current.job_id == job.job_id)
        if is_current:
            # after a crash a new job may get an old job's id: then the range and attempt are the same
            assert current is not None and (job.first, job.upto, job.attempt) == (
                current.first, current.upto, current.attempt)
            if ok:
                self.journal.append(("committed", job.first, job.upto, self.now))
                assert self.cursor.committed(job.job_id, job.first, job.upto, self.now)
                self.covered.update(range(job.first, job.upto))
                self.current = None
            else:
                self.fail(job, reason)
        elif ok:
            assert not self.cursor.committed(job.job_id, job.first, job.upto, self.now)
        else:
            assert not self.cursor.failed(job.job_id, job.first, job.upto, reason, self.now)
        if not again:  # else the same result may come once more (a duplicate delivery)
            self.results.remove(job)

    @precondition(lambda self: self.cursor.dead_letters())
    @rule(data=st.data())
    def retry_dead(self, data: st.DataObject) -> None:
        letter = data.draw(st.sampled_from(self.cursor.dead_letters()))
        busy = self.cursor.in_flight is not None
        result = self.cursor.retry_dead(letter.first, self.now)
        assert (result is None) == busy
        self.take(result)

    @precondition(lambda self: len(self.journal) > self.snapshots[-1][0])
    @rule()
    def snapshot(self) -> None:
        """Snapshot the durable state; replaying the journal from every earlier snapshot
        gives it too."""
        for at, state in self.snapshots:
            assert replay(state, self.journal[at:]).snapshot() == self.cursor.snapshot()
        self.snapshots.append((len(self.journal), self.cursor.snapshot()))

    @precondition(lambda self: self.cursor.in_flight is not None or len(self.journal) > self.restarted_at)
    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        """A restart: the transient state is lost; a crash also loses the object, and
        the cursor is rebuilt from the newest snapshot and the journal after it."""
        if crash:
            at, state = self.snapshots[-1]
            rebuilt = replay(state, self.journal[at:])
            assert rebuilt.snapshot() == self.cursor.snapshot()
            self.cursor = rebuilt
        else:
            self.cursor.reset_transient()
        self.current = None
        self.restarted_at = len(self.journal)
        self.grown_at = None

    @invariant()
    def at_most_the_one_job_the_model_knows_is_in_flight(self) -> None:
        job = self.cursor.in_flight
        assert (job is None) == (self.current is None)
        assert job is None or self.current is None or job.job_id == self.current.job_id
        assert (self.cursor.phase is Phase.IN_FLIGHT) == (job is not None)

    @invariant()
    def committed_jobs_and_dead_letters_cover_every_done_message_exactly_once(self) -> None:
        done = self.cursor.done
        assert done <= self.cursor.known <= self.messages
        dead = self.cursor.dead_letters()
        assert all(a.upto <= b.first for a, b in itertools.pairwise(dead))
        lettered = collections.Counter(p for d in dead for p in range(d.first, d.upto))
        for position in range(self.messages + 1):
            assert self.covered[position] + lettered[position] == (1 if position < done else 0), position

    @invariant()
    def the_counters_count_the_journal(self) -> None:
        state = self.cursor.snapshot()
        assert state.committed == sum(1 for e in self.journal if e[0] == "committed")
        assert state.failures == sum(1 for e in self.journal if e[0] == "failed")
        assert state.attempts < SETTINGS.max_attempts
        assert self.cursor.pending == self.cursor.known - self.cursor.done >= 0
        assert self.cursor.pending_tokens >= 0


CursorMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=100, deadline=None)
test_cursor_against_a_model = CursorMachine.TestCase
