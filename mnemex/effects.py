"""What behaviours return to the runtime: replies with effects, snapshots, and
what they are restored from.

Plain data, no trio: behaviours (``mnemex.conversations``, ``mnemex.memories``) build
these without depending on the runtime; the kernel (``mnemex.kernel``) performs them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "STOP_WAIT",
    "Behaviour",
    "Beside",
    "Effect",
    "Emit",
    "Forward",
    "Image",
    "Job",
    "JobResult",
    "Key",
    "Sidecar",
    "SidecarWriter",
    "SnapshotData",
    "Step",
    "Tell",
]

Key = tuple[str, ...]

SidecarWriter = Callable[[str], None]
"""Writes a sidecar into the file at the path it is given (a library's own save)."""

Sidecar = bytes | SidecarWriter | Iterable[bytes | memoryview]
"""A sidecar as a snapshot gives it: bytes, a writer, or chunks of bytes made as they
are written (in the writer's thread): a large sidecar streams to disk instead of
being one bytes object."""


@dataclass(frozen=True, slots=True)
class SnapshotData:
    """A consistent copy of an actor's state, taken inside the actor (cheaply) and
    written beside it. ``records`` may be a callable that encodes the lines: it runs
    in a worker thread, so it must only read what was copied. ``sidecars`` likewise;
    a sidecar may be bytes, chunks or a writer (:data:`Sidecar`). ``required`` names sidecars
    without which the snapshot cannot be restored (a recovery that finds one missing
    or damaged uses an older snapshot); the others only make a restart fast. ``done``,
    when given, is called in the writer's thread once the write ended (written or
    failed): what the copies borrowed may be given back."""

    records: Sequence[bytes] | Callable[[], Iterable[bytes]]
    extra: Mapping[str, Any] = field(default_factory=dict)
    sidecars: Mapping[str, Sidecar] | Callable[[], Mapping[str, Sidecar]] | None = None
    required: frozenset[str] = frozenset()
    done: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True)
class Image:
    """What a behaviour is restored from: the record lines of its newest snapshot,
    the snapshot's ``extra`` header field and any sidecars that read back fine
    (bytes, or a read-only view of the file mapped in memory: copy what you keep),
    and, for those that are files, their paths (a library that loads from a file
    reads it there)."""

    records: Sequence[bytes]
    extra: Mapping[str, Any]
    sidecars: Mapping[str, bytes | memoryview]
    sidecar_paths: Mapping[str, str] = field(default_factory=dict)


class Behaviour(Protocol):
    """An actor's behaviour: synchronous, deterministic, owning its state.

    ``handle`` returns a reply (or a Step carrying a reply and effects). It must
    validate before it mutates: when it raises a MnemexError the state must be
    as it was. Any other exception counts as a crash: the kernel answers
    ActorCrashed and reloads the actor from its persisted state.
    """

    def handle(self, command: Any) -> Any: ...

    def snapshot(self) -> SnapshotData:
        """Its state, for a snapshot. A behaviour may also have ``snapshot_wanted``, true
        while it holds work no journal line does (a structure built beside it, indexes
        rebuilt at its load): the kernel then snapshots it on a timer or at close even
        when its journal is short (``config.storage.snapshot_min_growth``), and sets it
        true again when a snapshot taken could not be written. And it may have
        ``final_snapshot()``: the same, taken as the actor closes (passivation,
        shutdown), after which nothing changes its state: what it gives may be views
        of the state itself instead of copies (a method of its class: a wrapper
        forwarding attributes to another behaviour defines its own or has none)."""
        ...


@dataclass(frozen=True, slots=True)
class JobResult:
    """The outcome of a Job: ``value`` when it returned, ``error`` when it raised."""

    value: Any = None
    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """Slow work to run beside the actor: ``work`` runs in a worker thread (or as a
    trio task when it is a coroutine function); ``deliver`` turns its JobResult
    into a command that is sent back to the same actor through its mailbox (and
    journaled like any other command). A job pending at a crash is lost; a
    behaviour that must finish it re-issues it when restored.

    With ``answers=True`` the job continues the command whose Step carried it:
    that command's caller is not answered with the Step's reply but with the
    reply (or error) to the delivered command, so a handler can answer only
    after slow work without blocking its mailbox. At most one effect of a Step
    may answer (this or a Forward).

    ``stop``: for work in a thread that can end early when asked (between steps):
    called when the runtime closes with the job under way; the runtime then waits
    for the thread (at most ``STOP_WAIT`` seconds) rather than leave it running,
    since a thread inside native code when the process exits aborts it. Without
    ``stop`` such a thread is left to finish (or die with the process)."""

    work: Callable[[], Any] | Callable[[], Awaitable[Any]]
    deliver: Callable[[JobResult], Any]
    name: str = "job"
    answers: bool = False
    stop: Callable[[], None] | None = None


STOP_WAIT = 60.0
"""Seconds a closing runtime waits for the thread of a Job it asked to stop."""


@dataclass(frozen=True, slots=True)
class Tell:
    """Send ``command`` to another actor (fire and forget) once this step is written."""

    kind: str
    key: Key
    command: Any


@dataclass(frozen=True, slots=True)
class Emit:
    """Publish ``event`` to this actor's live subscribers of ``topic`` (see
    Runtime.subscribe). Delivered in order, after the step's journal write;
    a subscriber that falls behind its buffer is dropped, never waited for.
    ``last=True`` ends the topic's subscriptions after this event."""

    topic: str
    event: Any
    last: bool = False


@dataclass(frozen=True, slots=True)
class Forward:
    """Hand ``command`` to another actor, whose reply (or error) answers the
    command whose Step carried this effect: the Step's own reply is not sent.
    Actor to actor with no waiting in between: the sender's mailbox moves on at
    once. From a told command (no caller) it is a Tell."""

    kind: str
    key: Key
    command: Any


Effect = Job | Tell | Emit | Forward


@dataclass(frozen=True, slots=True)
class Step:
    """A reply plus effects the runtime performs after the command is durable.
    ``unchanged``: the command changed nothing (deleting what is not there), so it is
    not journaled; replaying it would do nothing either. An actor that only ever got
    such commands leaves nothing on disk."""

    reply: Any
    effects: tuple[Effect, ...] = ()
    unchanged: bool = False


@dataclass(frozen=True, slots=True)
class Beside:
    """A read a behaviour answers beside its actor (``ActorKind.read_beside``):
    ``run()`` gives the reply (or raises the MnemexError refusing it) in a worker
    thread, while the actor's own thread goes on serving others. It must only read
    the behaviour, which changes under it in no way meanwhile: the kernel runs it
    beside the other reads of the same run of commands, and handles nothing of that
    actor until every one has returned. ``effects`` are performed as a Step's, after
    the reply (planned when the read was, on the actor's thread)."""

    run: Callable[[], Any]
    effects: tuple[Effect, ...] = ()
    quick: bool = False
    """``run`` takes about a millisecond at most: alone in its run of reads, while
    nothing else of the trio run is ready or due (and no host loop runs it as a
    guest), the kernel calls it in the actor's task, where a worker thread would only
    add its wake-ups."""
