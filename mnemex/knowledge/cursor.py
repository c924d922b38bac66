"""The extraction cursor of one conversation session: which of its messages were
extracted, when the next extraction job starts, and what a job's result does.

Messages of a session have positions 0, 1, 2... (never reused). A job turns the
messages [first, upto) into facts beside the scope actor; its result comes back
later. The cursor starts at most one job at a time and moves only when a job's
result is committed, so every message is covered by exactly one committed job or
one dead letter, also across crashes.

Its state has two layers:

* durable, changed only by the journaled events ``committed`` and ``failed``, and
  snapshotted as a ``CursorState``: ``done`` (every position below it is covered),
  the ``attempts`` and ``retry_at`` of the range at ``done``, the dead letters and
  two counters. Replaying the events from a snapshot rebuilds it exactly (under the
  same settings: ``max_attempts`` and the backoff decide what a failure does).
* transient, lost at a restart and rebuilt by later offers: ``known`` (positions
  below it exist), the tokens pending, the time of the last offer, the job in
  flight and a count of jobs started (which keeps job ids unique).

::

    IDLE ──offer──> PENDING ──buffer, idle, flush──> IN_FLIGHT ──committed──> IDLE or PENDING
                                                      │    ^
                                      failed, expired │    │ retry_at passed (due), flush
                                                      v    │
                                                     BACKOFF

The ``max_attempts``-th failure of a range makes it a dead letter instead: the
cursor moves past it, to IDLE or PENDING. ``retry_dead`` retries a dead letter in
any phase but IN_FLIGHT. The phase is derived from the state; ``_STARTS`` is the
one table of what may start a job in which phase.

The host, live: ``offer`` as messages arrive, ``flush`` to extract now (and before
pruning or compression drops messages below ``upto``), ``due`` when ``next_due``
comes; run each ``Start``'s job. When a result (or an ``Expired``) comes, ask
``is_current(job_id)``: if so, journal the event, then apply it with its job id
(``committed`` / ``failed``, which then return True); if not, drop it unjournaled
(the late result of an expired job). On recovery, apply the journaled events to
the restored cursor with ``job_id=None``: replay, by range.
"""

from __future__ import annotations

import bisect
import collections
import enum
import math
from typing import Final, Literal

import msgspec

from mnemex._checks import check_int
from mnemex._time import check_seconds
from mnemex.errors import InvalidInput, NotFound

__all__ = ["Cursor", "CursorSettings", "CursorState", "DeadLetter", "Expired", "Phase", "Start",
           "Ticket", "Trigger"]

Trigger = Literal["buffer", "idle", "retry", "flush", "dead_letter"]
"""What started a job: ``turns`` messages or ``tokens`` tokens pending (``buffer``),
no offer for ``idle`` seconds, a failure's backoff ended (``retry``), an explicit
``flush``, a ``dead_letter`` retried."""


class Phase(enum.Enum):
    """Where a cursor stands."""

    __hash__ = object.__hash__  # identity: cheap table lookups

    IDLE = "idle"            # nothing pending, no job in flight
    PENDING = "pending"      # messages wait for a trigger
    IN_FLIGHT = "in_flight"  # a job runs
    BACKOFF = "backoff"      # the range at done failed; its retry waits for retry_at


_STARTS: Final[dict[Trigger, frozenset[Phase]]] = {
    "buffer": frozenset({Phase.PENDING}),
    "idle": frozenset({Phase.PENDING}),
    "retry": frozenset({Phase.BACKOFF}),
    "flush": frozenset({Phase.PENDING, Phase.BACKOFF}),
    "dead_letter": frozenset({Phase.IDLE, Phase.PENDING, Phase.BACKOFF}),
}


def _check_duration(value: object, what: str, *, positive: bool) -> None:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or value < 0 or (positive and value == 0)):
        raise InvalidInput(f"{what} must be a finite number of seconds {'> 0' if positive else '>= 0'}, "
                           f"got {value!r}", field=what)


class CursorSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When jobs start and how failures are retried; checked when built or decoded."""

    turns: int = 6
    """Start a job when this many messages are pending (>= 1)."""
    tokens: int = 2_000
    """Or when the pending messages hold this many tokens, as offered (>= 1)."""
    idle: float = 300.0
    """Seconds without a new message after which anything pending is extracted (0: never)."""
    job_timeout: float = 120.0
    """Seconds a job may run; at its deadline it counts as failed with reason ``timeout``."""
    max_attempts: int = 3
    """Failures of a range after which it becomes a dead letter and the cursor moves past it."""
    backoff: float = 5.0
    """Seconds from the first failure to its retry; doubled for each further failure."""
    max_backoff: float = 300.0
    """The longest wait before a retry (>= ``backoff``)."""
    max_batch: int = 50
    """Messages one job covers at most; a longer pending run is extracted in consecutive jobs."""

    def __post_init__(self) -> None:
        for name in ("turns", "tokens", "max_attempts", "max_batch"):
            check_int(getattr(self, name), f"settings.{name}", 1)
        for name in ("idle", "job_timeout", "backoff", "max_backoff"):
            _check_duration(getattr(self, name), f"settings.{name}", positive=name == "job_timeout")
        if self.max_backoff < self.backoff:
            raise InvalidInput(f"settings.max_backoff {self.max_backoff} is below settings.backoff "
                               f"{self.backoff}", field="settings.max_backoff")


class Ticket(msgspec.Struct, frozen=True, kw_only=True):
    """One job: extract the messages [first, upto). ``attempt`` counts from 1 (the
    failures of the range before it, plus one); ``deadline`` is ``started_at`` plus
    the job timeout; ``trigger``: what started it; ``dead_letter``: it retries the
    dead letter [first, upto)."""

    job_id: str
    first: int
    upto: int
    attempt: int
    started_at: float
    deadline: float
    trigger: Trigger
    dead_letter: bool = False


class Start(msgspec.Struct, frozen=True):
    """Run the ticket's job beside the actor and bring its result back."""

    ticket: Ticket


class Expired(msgspec.Struct, frozen=True):
    """The ticket's job reached its deadline: journal its failure with ``reason``, then
    apply it (``failed(ticket.job_id, ticket.first, ticket.upto, reason, now)``)."""

    ticket: Ticket
    reason: str = "timeout"


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """Messages [first, upto) that failed ``attempts`` times, the last with ``reason``
    at ``at`` (seconds since the epoch). The cursor moved past them; ``retry_dead``
    tries them again."""

    first: int
    upto: int
    reason: str
    attempts: int
    at: float


class CursorState(msgspec.Struct, frozen=True, kw_only=True):
    """The durable layer (see the module doc): what a snapshot holds. ``dead`` is
    sorted by position; ``committed`` counts jobs committed, ``failures`` failures."""

    done: int = 0
    attempts: int = 0
    retry_at: float | None = None
    dead: tuple[DeadLetter, ...] = ()
    committed: int = 0
    failures: int = 0


_Target = Literal["range", "dead"]


class Cursor:
    """The extraction cursor of one session (see the module doc). ``now`` is always
    seconds since the epoch, given by the caller; positions are ints >= 0."""

    __slots__ = ("_attempts", "_committed", "_dead", "_done", "_failures", "_job", "_known",
                 "_last_offer", "_retry_at", "_segments", "_started", "_tokens", "settings")

    def __init__(self, settings: CursorSettings | None = None) -> None:
        self.settings = settings if settings is not None else CursorSettings()
        self._done = 0
        self._attempts = 0
        self._retry_at: float | None = None
        self._dead: list[DeadLetter] = []
        self._committed = 0
        self._failures = 0
        # kept by reset_transient: a job id is never reused by this object
        self._started = 0
        self.reset_transient()

    def reset_transient(self) -> None:
        """Forget what a restart forgets: the job in flight, the messages offered, the
        pending tokens. Later offers rebuild them; a result of the forgotten job is
        then late."""
        self._known = self._done
        # the offers not yet covered: (first, upto, tokens), in order
        self._segments: collections.deque[tuple[int, int, int]] = collections.deque()
        self._tokens = 0
        self._last_offer: float | None = None
        self._job: Ticket | None = None

    # -- what the cursor holds ----------------------------------------------------
    @property
    def phase(self) -> Phase:
        if self._job is not None:
            return Phase.IN_FLIGHT
        if self._known == self._done:
            return Phase.IDLE
        return Phase.PENDING if self._retry_at is None else Phase.BACKOFF

    @property
    def done(self) -> int:
        """Every position below it is covered by a committed job or a dead letter."""
        return self._done

    @property
    def known(self) -> int:
        """Positions below it exist (as offered; ``done`` after a restart)."""
        return self._known

    @property
    def pending(self) -> int:
        """Messages offered and not yet covered."""
        return self._known - self._done

    @property
    def pending_tokens(self) -> int:
        """Tokens of the pending messages, as offered (cut pro rata inside an offer)."""
        return self._tokens

    @property
    def in_flight(self) -> Ticket | None:
        """The job running now, if any (a flush returns None while there is one)."""
        return self._job

    def is_current(self, job_id: str) -> bool:
        """Whether ``job_id`` is the job in flight: its result is to be journaled and
        applied; any other result is late and is dropped."""
        return self._job is not None and self._job.job_id == job_id

    def dead_letters(self) -> tuple[DeadLetter, ...]:
        """The dead letters, by position."""
        return tuple(self._dead)

    # -- starting jobs -----------------------------------------------------------------
    def offer(self, known: int, tokens: int, now: float) -> Start | None:
        """Messages below position ``known`` exist; ``tokens``: the estimated tokens of
        those new since the last offer (a ``known`` not above the last is ignored).
        Starts a job when ``turns`` messages or ``tokens`` tokens are pending, none is
        in flight and no backoff runs."""
        check_int(known, "known", 0)
        check_int(tokens, "tokens", 0)
        now = check_seconds(now, "now")
        if known > self._known:
            self._segments.append((self._known, known, tokens))
            self._tokens += tokens
            self._known = known
            self._last_offer = now
        return self._start_batch("buffer", now, self._known) if self._is_full() else None

    def flush(self, now: float, upto: int | None = None) -> Start | None:
        """Start a job for what is pending below ``upto`` (default: everything offered),
        whatever the thresholds and the backoff; at most ``max_batch`` messages, so
        the caller flushes again until ``done >= upto``. None when nothing is pending
        there, or while a job is in flight (see ``in_flight``): wait for it."""
        now = check_seconds(now, "now")
        end = self._known
        if upto is not None:
            check_int(upto, "upto", 0)
            if upto > self._known:
                raise InvalidInput(f"flush upto {upto} is past the messages offered ({self._known}); "
                                   f"offer them first", field="upto")
            end = upto
        return self._start_batch("flush", now, end) if end > self._done else None

    def due(self, now: float) -> Start | Expired | None:
        """The timer: an ``Expired`` for a job in flight at its deadline (returned
        until its failure is applied), a ``Start`` when the buffer is full, when no
        offer came for ``idle`` seconds or when a backoff ended; else None."""
        now = check_seconds(now, "now")
        if self._job is not None:
            return Expired(self._job) if now >= self._job.deadline else None
        upcoming = self._upcoming(now)
        if upcoming is None or upcoming[0] > now:
            return None
        return self._start_batch(upcoming[1], now, self._known)

    def next_due(self, now: float) -> float | None:
        """When ``due`` should be called next (``now`` or earlier: at once); None when
        nothing will be due without a new offer, flush or result."""
        now = check_seconds(now, "now")
        if self._job is not None:
            return self._job.deadline
        upcoming = self._upcoming(now)
        return None if upcoming is None else upcoming[0]

    def retry_dead(self, first: int, now: float) -> Start | None:
        """Start a job for the dead letter at position ``first`` (its commit removes
        it); None while a job is in flight. NotFound when no dead letter starts there."""
        check_int(first, "first", 0)
        now = check_seconds(now, "now")
        i = bisect.bisect_left(self._dead, first, key=lambda letter: letter.first)
        if i == len(self._dead) or self._dead[i].first != first:
            raise NotFound(f"no dead letter starts at position {first}")
        letter = self._dead[i]
        return self._start("dead_letter", now, letter.first, letter.upto, letter.attempts + 1)

    def _is_full(self) -> bool:
        return self.pending >= self.settings.turns or self._tokens >= self.settings.tokens

    def _upcoming(self, now: float) -> tuple[float, Trigger] | None:
        """The next start the timer owes (when, trigger), with no job in flight."""
        phase = self.phase
        if phase is Phase.BACKOFF and self._retry_at is not None:
            return self._retry_at, "retry"
        if phase is Phase.PENDING:
            if self._is_full():
                return now, "buffer"
            if self.settings.idle > 0 and self._last_offer is not None:
                return self._last_offer + self.settings.idle, "idle"
        return None

    def _start_batch(self, trigger: Trigger, now: float, end: int) -> Start | None:
        upto = min(end, self._done + self.settings.max_batch)
        return self._start(trigger, now, self._done, upto, self._attempts + 1)

    def _start(self, trigger: Trigger, now: float, first: int, upto: int, attempt: int) -> Start | None:
        if self.phase not in _STARTS[trigger]:
            return None
        self._started += 1
        self._job = Ticket(job_id=f"{first}-{upto}.a{attempt}.j{self._started}", first=first, upto=upto,
                           attempt=attempt, started_at=now, deadline=now + self.settings.job_timeout,
                           dead_letter=trigger == "dead_letter", trigger=trigger)
        return Start(self._job)

    # -- results: the journaled events ---------------------------------------------
    def committed(self, job_id: str | None, first: int, upto: int, now: float) -> bool:
        """The facts of [first, upto) were committed. True: accepted (``done`` moved to
        ``upto``, or the dead letter is gone). False: a result to drop unjournaled.

        Live (``job_id`` given): accepted only for the job in flight, whose range it
        must repeat (InvalidInput otherwise). Replay (``job_id`` None, on a cursor with
        no job in flight): accepted when ``first`` is ``done`` or [first, upto) is a
        dead letter; the journal is trusted for messages not offered since the restart.
        """
        now = check_seconds(now, "now")
        target = self._match(job_id, first, upto)
        if target is None:
            return False
        self._committed += 1
        if target == "dead":
            del self._dead[self._dead_index(first, upto)]
        else:
            self._advance(upto)
        return True

    def failed(self, job_id: str | None, first: int, upto: int, reason: str, now: float) -> bool:
        """The job over [first, upto) failed with ``reason``; accepted (True) or not like
        ``committed``. A failure of the range at ``done`` sets ``retry_at`` (``backoff``
        doubled per earlier failure, at most ``max_backoff``); its ``max_attempts``-th
        makes [first, upto) a dead letter and moves ``done`` past it. A failed dead
        letter retry stays a dead letter (one attempt more)."""
        if not isinstance(reason, str) or not reason:
            raise InvalidInput(f"reason must be a non-empty string, got {reason!r}", field="reason")
        now = check_seconds(now, "now")
        target = self._match(job_id, first, upto)
        if target is None:
            return False
        self._failures += 1
        if target == "dead":
            i = self._dead_index(first, upto)
            self._dead[i] = DeadLetter(first=first, upto=upto, reason=reason,
                                       attempts=self._dead[i].attempts + 1, at=now)
            return True
        self._attempts += 1
        if self._attempts >= self.settings.max_attempts:
            self._dead.append(DeadLetter(first=first, upto=upto, reason=reason, attempts=self._attempts,
                                         at=now))
            self._advance(upto)
        else:
            self._retry_at = now + min(self.settings.max_backoff,
                                       self.settings.backoff * 2.0 ** min(self._attempts - 1, 64))
        return True

    def _match(self, job_id: str | None, first: int, upto: int) -> _Target | None:
        """What a result applies to (the job in flight is then over), or None to drop it."""
        check_int(first, "first", 0)
        check_int(upto, "upto", 1)
        if upto <= first:
            raise InvalidInput(f"a job's range [{first}, {upto}) is empty", field="upto")
        job = self._job
        if job_id is None:
            if job is not None:
                raise InvalidInput(f"replay (job_id None) is for a restored cursor, but job {job.job_id} "
                                   f"is in flight", field="job_id")
            if first == self._done:
                return "range"
            return "dead" if self._dead_index(first, upto) >= 0 else None
        if not isinstance(job_id, str):
            raise InvalidInput(f"job_id must be a string or None, got {job_id!r}", field="job_id")
        if job is None or job.job_id != job_id:
            return None
        if (first, upto) != (job.first, job.upto):
            raise InvalidInput(f"job {job_id} covers [{job.first}, {job.upto}), not [{first}, {upto})",
                               field="upto" if first == job.first else "first")
        self._job = None
        return "dead" if job.dead_letter else "range"

    def _dead_index(self, first: int, upto: int) -> int:
        """Where the dead letter [first, upto) is in the list; -1 when there is none."""
        i = bisect.bisect_left(self._dead, first, key=lambda letter: letter.first)
        found = i < len(self._dead) and self._dead[i].first == first and self._dead[i].upto == upto
        return i if found else -1

    def _advance(self, to: int) -> None:
        """The range at ``done`` is covered up to ``to``: its failures are over."""
        self._done = to
        self._known = max(self._known, to)
        self._attempts = 0
        self._retry_at = None
        segments = self._segments
        while segments and segments[0][1] <= to:
            self._tokens -= segments.popleft()[2]
        if segments and segments[0][0] < to:
            first, upto, tokens = segments[0]
            kept = tokens * (upto - to) // (upto - first)
            self._tokens -= tokens - kept
            segments[0] = (to, upto, kept)

    # -- snapshots -----------------------------------------------------------------------
    def snapshot(self) -> CursorState:
        """The durable layer."""
        return CursorState(done=self._done, attempts=self._attempts, retry_at=self._retry_at,
                           dead=tuple(self._dead), committed=self._committed, failures=self._failures)

    @classmethod
    def restore(cls, state: CursorState, settings: CursorSettings | None = None) -> Cursor:
        """A cursor with ``state`` as its durable layer and nothing transient (nothing
        offered beyond ``done``, no job in flight)."""
        cursor = cls(settings)
        cursor._done = check_int(state.done, "state.done", 0)
        cursor._attempts = check_int(state.attempts, "state.attempts", 0)
        if state.retry_at is not None:
            cursor._retry_at = check_seconds(state.retry_at, "state.retry_at")
        edge = 0
        for letter in state.dead:
            if not edge <= letter.first < letter.upto <= state.done:
                raise InvalidInput(f"state.dead: [{letter.first}, {letter.upto}) overlaps another dead "
                                   f"letter or is not below done ({state.done})", field="state.dead")
            edge = letter.upto
        cursor._dead = list(state.dead)
        cursor._committed = check_int(state.committed, "state.committed", 0)
        cursor._failures = check_int(state.failures, "state.failures", 0)
        cursor.reset_transient()
        return cursor

    def __repr__(self) -> str:
        job = self._job.job_id if self._job is not None else None
        return (f"<Cursor {self.phase.value} done={self._done} known={self._known} attempts={self._attempts} "
                f"dead={len(self._dead)} job={job}>")
