"""A scope's extraction cursors: when the jobs that turn a session's messages
into facts start, and what their results do.

Each session the scope extracts from has a ``knowledge.cursor.Cursor``. The
commands here are not journaled (they start work; they change nothing durable):

* ``ExtractSession``: messages below ``known`` exist in a session; ``mode`` says
  whether to extract ``now`` (the caller waits for the job's result: the job
  answers it), to ``flush`` (start a job now, answer at once) or only
  ``if_needed`` (when the buffer is full). It brings the ``read`` callable a job
  reads the messages through. ``RetryDeadLetter`` retries a dead letter; ``CursorTick`` is the timer.
* a job runs ``settings.extract`` beside the actor (read the messages, ask the
  extractor, embed the facts) and comes back as the journaled ``ApplyExtraction``
  or ``ExtractionFailed``, which the behaviour applies with ``commit`` and
  ``fail`` here: the cursor moves only with a committed job, exactly once per
  message, also across crashes (replay applies the same commands by range).

Timers (the idle trigger, retries after a backoff, a job's deadline) are one job
at a time sleeping through ``settings.timer`` until the earliest cursor is due.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from mnemex._checks import check_int
from mnemex._time import check_seconds
from mnemex.effects import Job, JobResult
from mnemex.errors import ExtractionError, InvalidInput, NotFound
from mnemex.knowledge.cursor import Cursor, CursorSettings, CursorState, DeadLetter, Expired, Start, Ticket
from mnemex.knowledge.facts import SourceMessage
from mnemex.memories.fields import check_memory_id
from mnemex.memories.protocol import ApplyExtraction, Extracted, ExtractionFailed, JobUsage, NewFact

__all__ = [
    "CursorInfo",
    "CursorTick",
    "ExtractSession",
    "ExtractionFailure",
    "ExtractionJob",
    "ExtractionOutcome",
    "Extractions",
    "GetCursors",
    "ReadMessages",
    "RetryDeadLetter",
]

ReadMessages = Callable[[int, int], Awaitable[Sequence[SourceMessage]]]
"""Reads the messages of positions [first, upto) of a session (fewer when some are gone)."""

# -- commands (never journaled) --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ExtractSession:
    """Messages of session ``session_id`` below position ``known`` exist (``tokens``:
    estimated tokens of those new since the last offer). ``mode`` ``now``: extract
    what is pending (below ``upto`` if given) and answer with the job's result;
    ``flush``: the same, answering at once; ``if_needed``: start a job only when
    the buffer is full, answer at once."""

    session_id: str
    read: ReadMessages
    known: int
    now: float
    tokens: int = 0
    mode: Literal["now", "flush", "if_needed"] = "now"
    upto: int | None = None


@dataclass(frozen=True, slots=True)
class RetryDeadLetter:
    """Extract the dead letter of ``session_id`` starting at ``first`` again."""

    session_id: str
    first: int
    read: ReadMessages
    now: float


@dataclass(frozen=True, slots=True)
class CursorTick:
    """The timer came: ``now`` read beside the actor."""

    now: float


class GetCursors(msgspec.Struct, frozen=True, tag="scope.get_cursors"):
    """The extraction state of every session (or of ``session_id``)."""

    session_id: str | None = None


class CursorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One session's extraction state: ``done`` (messages below it were extracted or
    are dead letters), ``known`` (offered since the scope was loaded), ``phase``,
    the job in flight, the dead letters, jobs committed and failures."""

    session_id: str
    done: int
    known: int
    phase: str
    in_flight: str | None
    dead_letters: list[DeadLetter]
    committed: int
    failures: int
    retry_at: float | None = None


# -- what a job is given and gives back --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ExtractionJob:
    """One job for ``settings.extract``: the messages [first, upto) of ``session_id``
    in scope (app_name, user_id), read through ``read``. The runner gives the facts
    their ids (they are journaled with them)."""

    app_name: str
    user_id: str
    session_id: str
    first: int
    upto: int
    job_id: str
    attempt: int
    read: ReadMessages
    categories: Mapping[str, str] = field(default_factory=dict)
    """The scope's category catalog (name -> description), for the extractor."""


@dataclass(frozen=True, slots=True)
class ExtractionOutcome:
    """What a job found: facts ready to store (ids, vectors and targets resolved),
    the ids the extractor was offered, the extractor's name and usage, and the
    embedder of the vectors."""

    facts: list[NewFact]
    offered: list[str]
    extractor: str
    finished_at: float
    usage: JobUsage = field(default_factory=JobUsage)
    embedder: str | None = None
    dim: int = 0


@dataclass(frozen=True, slots=True)
class ExtractionFailure:
    """A job that could not extract: ``reason`` (as ExtractionError's) and why."""

    reason: str
    message: str
    finished_at: float
    usage: JobUsage = field(default_factory=JobUsage)


RunExtraction = Callable[[ExtractionJob], Awaitable[ExtractionOutcome | ExtractionFailure]]
Timer = Callable[[float], Awaitable[float]]
"""Sleeps ``seconds`` (beside the actor) and returns the time then."""


# -- the scope's cursors ---------------------------------------------------------------------------
@dataclass(slots=True)
class _Session:
    cursor: Cursor
    read: ReadMessages | None = None


class Extractions:
    """The extraction cursors of one scope and the jobs they start (see the module doc)."""

    __slots__ = ("app_name", "catalog", "run", "sessions", "settings", "timer", "timer_at", "user_id")

    def __init__(self, app_name: str, user_id: str, settings: CursorSettings,
                 run: RunExtraction | None, timer: Timer | None) -> None:
        self.app_name = app_name
        self.user_id = user_id
        self.settings = settings
        self.run = run
        self.timer = timer
        self.sessions: dict[str, _Session] = {}
        self.timer_at: float | None = None  # transient: when the sleeping timer job wakes
        # the scope's category catalog as jobs show it (set by the scope: memories.categories)
        self.catalog: Callable[[], Mapping[str, str]] = dict

    def __len__(self) -> int:
        return len(self.sessions)

    def _session(self, session_id: str) -> _Session:
        found = self.sessions.get(session_id)
        if found is None:
            found = self.sessions[session_id] = _Session(Cursor(self.settings))
        return found

    # -- starting --------------------------------------------------------------------------------
    def request(self, cmd: ExtractSession) -> tuple[Extracted | None, list[Job]]:
        """An ExtractSession: (the reply now, or None when the job answers; jobs)."""
        session_id = check_memory_id(cmd.session_id, "session_id")
        now = check_seconds(cmd.now, "now")
        known = check_int(cmd.known, "known", 0)
        tokens = check_int(cmd.tokens, "tokens", 0)
        if cmd.mode not in ("now", "flush", "if_needed"):
            raise InvalidInput(f"mode is {cmd.mode!r}; use now, flush or if_needed", field="mode")
        if self.run is None:
            raise InvalidInput("this scope kind has no extractor (open it through open_runtime)",
                               field="extract")
        if not callable(cmd.read):
            raise InvalidInput("read must be a callable giving a session's messages", field="read")
        session = self._session(session_id)
        cursor = session.cursor
        session.read = cmd.read
        start = cursor.offer(known, tokens, now)
        if cmd.mode == "if_needed":
            jobs = [self._job(session_id, session, start.ticket)] if start is not None else []
            status = "in_flight" if cursor.in_flight is not None else (
                "buffered" if cursor.pending else "nothing_new")
            return self._reply(session_id, status), jobs + self._timer(now)
        if start is None:
            start = cursor.flush(now, None if cmd.upto is None else min(cmd.upto, cursor.known))
        if start is None:
            status = "in_flight" if cursor.in_flight is not None else "nothing_new"
            return self._reply(session_id, status), self._timer(now)
        if cmd.mode == "flush":
            return self._reply(session_id, "in_flight"), [self._job(session_id, session, start.ticket),
                                                          *self._timer(now)]
        return None, [self._job(session_id, session, start.ticket, answers=True), *self._timer(now)]

    def retry(self, cmd: RetryDeadLetter) -> tuple[Extracted | None, list[Job]]:
        session_id = check_memory_id(cmd.session_id, "session_id")
        now = check_seconds(cmd.now, "now")
        session = self.sessions.get(session_id)
        if session is None:
            raise NotFound(f"session {session_id!r} of scope ({self.app_name!r}, {self.user_id!r}) has no "
                           f"dead letters")
        if self.run is None:
            raise InvalidInput("this scope kind has no extractor (open it through open_runtime)",
                               field="extract")
        start = session.cursor.retry_dead(cmd.first, now)
        session.read = cmd.read
        if start is None:
            return self._reply(session_id, "in_flight"), []
        return None, [self._job(session_id, session, start.ticket, answers=True), *self._timer(now)]

    def tick(self, now: float) -> list[Job]:
        """The timer: expired jobs fail (journaled through a job that delivers the
        failure), due cursors start their jobs; then the next timer."""
        now = check_seconds(now, "now")
        self.timer_at = None
        jobs: list[Job] = []
        for session_id, session in self.sessions.items():
            due = session.cursor.due(now)
            if isinstance(due, Expired):
                jobs.append(self._expire(session_id, due.ticket, now))
            elif isinstance(due, Start):
                if session.read is None:  # nothing to read with since the restart: wait for an offer
                    session.cursor.reset_transient()
                    continue
                jobs.append(self._job(session_id, session, due.ticket))
        return jobs + self._timer(now)

    def _job(self, session_id: str, session: _Session, ticket: Ticket, *, answers: bool = False) -> Job:
        run, read = self.run, session.read
        assert run is not None and read is not None
        job = ExtractionJob(self.app_name, self.user_id, session_id, ticket.first, ticket.upto, ticket.job_id,
                            ticket.attempt, read, self.catalog())

        async def work() -> ExtractionOutcome | ExtractionFailure:
            return await run(job)

        def deliver(result: JobResult) -> ApplyExtraction | ExtractionFailed:
            outcome = result.value
            if result.error is not None:  # not a failure the runner reports: a bug, or cancelled
                error = result.error
                outcome = ExtractionFailure(error.reason if isinstance(error, ExtractionError) else "error",
                                            f"{type(error).__name__}: {error}", ticket.started_at)
            if isinstance(outcome, ExtractionFailure):
                return ExtractionFailed(session_id=session_id, first=job.first, upto=job.upto,
                                        reason=outcome.reason, message=outcome.message[:2000],
                                        usage=outcome.usage, now=outcome.finished_at, job=job.job_id)
            assert isinstance(outcome, ExtractionOutcome)
            return ApplyExtraction(session_id=session_id, first=job.first, upto=job.upto,
                                   facts=outcome.facts, offered=outcome.offered, extractor=outcome.extractor,
                                   usage=outcome.usage, embedder=outcome.embedder, dim=outcome.dim,
                                   now=outcome.finished_at, job=job.job_id, classify=True)

        return Job(work, deliver, name=f"scope.extract {self.app_name}/{self.user_id}/{session_id}",
                   answers=answers)

    def _expire(self, session_id: str, ticket: Ticket, now: float) -> Job:
        failure = ExtractionFailed(session_id=session_id, first=ticket.first, upto=ticket.upto,
                                   reason="timeout", message=f"job {ticket.job_id} ran past its deadline "
                                   f"({self.settings.job_timeout:g} s)", now=now, job=ticket.job_id)
        return Job(lambda: None, lambda _: failure, name=f"scope.extract-expired {session_id}")

    def _timer(self, now: float) -> list[Job]:
        """A job sleeping until the earliest cursor is due, unless one sleeps already
        that wakes no later."""
        timer = self.timer
        if timer is None:
            return []
        due = [at for s in self.sessions.values() if (at := s.cursor.next_due(now)) is not None]
        if not due:
            return []
        at = max(now, min(due))
        if self.timer_at is not None and self.timer_at <= at:
            return []
        self.timer_at = at
        delay = at - now

        async def sleep() -> float:
            return await timer(delay)

        def wake(result: JobResult) -> CursorTick:
            return CursorTick(result.value if result.error is None else at)

        return [Job(sleep, wake, name=f"scope.extract-timer {self.app_name}/{self.user_id}")]

    # -- results (journaled) ------------------------------------------------------------------------
    def accepts(self, session_id: str, job: str | None) -> bool:
        """Whether a live result of ``job`` is current (else: late, dropped unjournaled)."""
        if job is None:
            return True
        session = self.sessions.get(session_id)
        return session is not None and session.cursor.is_current(job)

    def commit(self, session_id: str, job: str | None, first: int, upto: int, now: float) -> bool:
        """Advance the session's cursor past [first, upto) (``job`` None: replay, by range)."""
        return self._session(session_id).cursor.committed(job, first, upto, now)

    def fail(self, session_id: str, job: str | None, cmd: ExtractionFailed,
             now: float) -> tuple[Extracted, list[Job]]:
        cursor = self._session(session_id).cursor
        dead_before = len(cursor.dead_letters())
        if not cursor.failed(job, cmd.first, cmd.upto, cmd.reason or "error", now):
            return Extracted(session_id=session_id, status="expired", first=cmd.first, upto=cmd.upto,
                             error=f"{cmd.reason}: {cmd.message}"), []
        status: Literal["failed", "dead_letter"] = \
            "dead_letter" if len(cursor.dead_letters()) > dead_before else "failed"
        reply = Extracted(session_id=cmd.session_id, status=status, first=cmd.first, upto=cmd.upto,
                          usage=cmd.usage, error=f"{cmd.reason}: {cmd.message}",
                          retry_at=cursor.snapshot().retry_at)
        return reply, self._timer(now) if job is not None else []

    def _reply(self, session_id: str, status: Any) -> Extracted:
        cursor = self.sessions[session_id].cursor
        return Extracted(session_id=session_id, status=status, first=cursor.done, upto=cursor.known)

    # -- reads and snapshots --------------------------------------------------------------------------
    def info(self, session_id: str | None = None) -> list[CursorInfo]:
        chosen: Iterable[tuple[str, _Session]] = self.sessions.items() if session_id is None else (
            [(session_id, self.sessions[session_id])] if session_id in self.sessions else [])
        out = []
        for name, session in chosen:
            cursor, state = session.cursor, session.cursor.snapshot()
            job = cursor.in_flight
            out.append(CursorInfo(session_id=name, done=cursor.done, known=cursor.known,
                                  phase=cursor.phase.value,
                                  in_flight=job.job_id if job is not None else None,
                                  dead_letters=list(cursor.dead_letters()), committed=state.committed,
                                  failures=state.failures, retry_at=state.retry_at))
        return out

    def to_extra(self) -> dict[str, Any]:
        return {name: msgspec.to_builtins(session.cursor.snapshot())
                for name, session in self.sessions.items()}

    def load_extra(self, data: Mapping[str, Any]) -> None:
        for name, state in data.items():
            self.sessions[name] = _Session(Cursor.restore(msgspec.convert(state, CursorState), self.settings))

