"""Tools for testing actors: a deterministic simulation of the runtime's delivery
semantics, and a small ``counter`` kind the kernel's own tests and benchmarks use.

``Simulation`` runs behaviours sans-io, exactly as the kernel would — per-sender
FIFO, journal of accepted commands through the kind's codec, reload from the
journal after a crash, snapshot + restore — but lets the caller (typically
hypothesis) choose which sender's next message is delivered next. So a later
actor can be property-tested under every interleaving without trio and without
timing luck::

    sim = Simulation([my_kind])
    sim.send("alice", "scope", ("app", "u1"), Remember(...))
    sim.send("bob", "scope", ("app", "u1"), Search(...))
    sim.run(hypothesis_chooser(data))          # data = st.data() drawn in the test
    sim.check_replay("scope", ("app", "u1"))   # journal replay == live state
"""

from __future__ import annotations

import inspect
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from mnemex._protocol import Command, JsonCodec
from mnemex.effects import (
    Behaviour,
    Effect,
    Emit,
    Forward,
    Image,
    Job,
    JobResult,
    Key,
    SnapshotData,
    Step,
    Tell,
)
from mnemex.errors import ActorCrashed, InvalidInput
from mnemex.kernel import ActorKind
from mnemex.kernel._turn import take_turn

__all__ = [
    "Add",
    "Crash",
    "Delivered",
    "Done",
    "Entries",
    "Fail",
    "Get",
    "Simulation",
    "Slow",
    "SlowDone",
    "counter_kind",
    "hypothesis_chooser",
]


# -- the counter kind ------------------------------------------------------------
class Add(Command, frozen=True, tag="counter.add"):
    """Add ``n``; ``sender`` and ``n`` are logged so tests can check order."""

    n: int = 1
    sender: str = ""


class Get(Command, frozen=True, tag="counter.get"):
    """Read the counter: replies (total, log length). Not journaled."""


class Done(Command, frozen=True, tag="counter.done"):
    """Read how many Slow jobs finished. Not journaled."""


class Entries(Command, frozen=True, tag="counter.entries"):
    """Read the whole log of (sender, n). Not journaled."""


class Fail(Command, frozen=True, tag="counter.fail"):
    """Rejected with InvalidInput; the state must not change."""

    message: str = "rejected on purpose"


class Crash(Command, frozen=True, tag="counter.crash"):
    """Mutates the state, then raises RuntimeError: a handler bug. The kernel must
    answer ActorCrashed and keep the last accepted state."""


class Slow(Command, frozen=True, tag="counter.slow"):
    """Starts a job beside the actor that sleeps ``seconds`` (in a thread) or, with
    ``gate`` set, waits for ``SLOW_GATES[gate]`` (a trio.Event, as a task)."""

    seconds: float = 0.0
    gate: str | None = None


class SlowDone(Command, frozen=True, tag="counter.slow_done"):
    """Delivered when a Slow job finished: adds ``n`` to ``done``."""

    label: str = ""


CounterCommand = Add | Get | Done | Entries | Fail | Crash | Slow | SlowDone
_counter_codec: JsonCodec[CounterCommand] = JsonCodec(CounterCommand, "counter command")
_record = msgspec.json.Encoder()
_decode_entry = msgspec.json.Decoder(tuple[str, int])

SLOW_GATES: dict[str, trio.Event] = {}


class Counter:
    """A tiny behaviour: a total and the log of (sender, n) it was built from."""

    def __init__(self, key: Key, log: list[tuple[str, int]] | None = None, done: int = 0) -> None:
        self.key = key
        self.log: list[tuple[str, int]] = log or []
        self.total = sum(n for _, n in self.log)
        self.done = done

    def handle(self, command: Any) -> Any:
        match command:
            case Add(n=n, sender=sender):
                self.log.append((sender, n))
                self.total += n
                return self.total
            case Get():
                return (self.total, len(self.log))
            case Done():
                return self.done
            case Entries():
                return list(self.log)
            case Fail(message=message):
                raise InvalidInput(message, field="message")
            case Crash():
                self.total += 1_000_000
                raise RuntimeError("counter crashed on purpose")
            case Slow(seconds=seconds, gate=gate):
                return Step("started", (Job(_slow_work(seconds, gate), _slow_done, name="counter.slow"),))
            case SlowDone():
                self.done += 1
                return self.done
            case _:
                raise TypeError(f"counter cannot handle {command!r}")

    def snapshot(self) -> SnapshotData:
        log = list(self.log)
        return SnapshotData(records=lambda: [_record.encode(entry) for entry in log],
                            extra={"total": self.total, "done": self.done})

    @classmethod
    def restore(cls, key: Key, image: Image) -> Counter:
        log = [_decode_entry.decode(line) for line in image.records]
        return cls(key, log, int(image.extra.get("done", 0)))


def _slow_work(seconds: float, gate: str | None) -> Callable[[], Any]:
    if gate is not None:
        event = SLOW_GATES.setdefault(gate, trio.Event())

        async def wait_gate() -> str:
            await event.wait()
            return gate

        return wait_gate

    def sleep() -> str:
        time.sleep(seconds)
        return f"slept {seconds}"

    return sleep


def _slow_done(result: JobResult) -> SlowDone:
    return SlowDone(label=str(result.value if result.error is None else result.error))


def counter_kind(name: str = "counter") -> ActorKind:
    """The ``counter`` kind: for tests, examples and the runtime benchmark."""
    return ActorKind(
        name=name,
        create=Counter,
        restore=Counter.restore,
        encode=_counter_codec.encode,
        decode=_counter_codec.decode,
        is_journaled=lambda command: not isinstance(command, Get | Done | Entries),
    )


# -- deterministic simulation ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Delivered:
    """One delivery: who sent what to whom, and the reply or the error."""

    ticket: int
    sender: str
    kind: str
    key: Key
    command: Any
    reply: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class _SimActor:
    behaviour: Behaviour
    journal: list[bytes] = field(default_factory=list)
    image: Image | None = None


class Simulation:
    """The kernel's delivery semantics without trio, in an order the caller picks."""

    def __init__(self, kinds: Iterable[ActorKind]) -> None:
        self.kinds = {kind.name: kind for kind in kinds}
        self.actors: dict[tuple[str, Key], _SimActor] = {}
        self._queues: dict[str, deque[tuple[int, str, Key, Any]]] = {}
        self._tickets = itertools.count()
        self.delivered: list[Delivered] = []
        self.emitted: list[tuple[str, Key, Emit]] = []
        """Every Emit effect, in order, with the kind and key that emitted it."""

    def send(self, sender: str, kind: str, key: Key, command: Any) -> int:
        """Queue ``command``; messages of one sender are delivered in send order."""
        if kind not in self.kinds:
            raise InvalidInput(f"no actor kind {kind!r} in this simulation")
        ticket = next(self._tickets)
        self._queues.setdefault(sender, deque()).append((ticket, kind, key, command))
        return ticket

    @property
    def pending(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    def _actor(self, kind: str, key: Key) -> _SimActor:
        actor = self.actors.get((kind, key))
        if actor is None:
            actor = self.actors[(kind, key)] = _SimActor(self.kinds[kind].create(key))
        return actor

    def step(self, choice: int) -> Delivered:
        """Deliver the next message of the ``choice``-th sender that has one."""
        senders = sorted(name for name, queue in self._queues.items() if queue)
        if not senders:
            raise IndexError("nothing to deliver")
        sender = senders[choice % len(senders)]
        ticket, kind_name, key, command = self._queues[sender].popleft()
        kind = self.kinds[kind_name]
        actor = self._actor(kind_name, key)
        turn = take_turn(kind, actor.behaviour, command)
        if turn.refused:
            result = Delivered(ticket, sender, kind_name, key, command, error=turn.reply)
        elif turn.crash is not None:
            crashed = ActorCrashed(f"{kind_name} {key!r} crashed: {turn.crash!r}")
            crashed.__cause__ = turn.crash
            actor.behaviour = self._rebuild(kind, key, actor)
            result = Delivered(ticket, sender, kind_name, key, command, error=crashed)
        else:
            if turn.payload is not None:
                actor.journal.append(turn.payload)
            result = Delivered(ticket, sender, kind_name, key, command, reply=turn.reply)
            self._perform(kind_name, key, turn.effects)
        self.delivered.append(result)
        return result

    def _perform(self, kind: str, key: Key, effects: tuple[Effect, ...]) -> None:
        """Perform effects. A Forward is delivered like a Tell and a Job's result like
        any other: the simulation records replies per delivery, not per caller."""
        me = f"{kind}:{'/'.join(key)}"
        for effect in effects:
            if isinstance(effect, Emit):
                self.emitted.append((kind, key, effect))
            elif isinstance(effect, Tell | Forward):
                self.send(me, effect.kind, effect.key, effect.command)
            else:
                try:
                    work = effect.work
                    value = trio.run(work) if _is_coroutine_function(work) else work()
                    result = JobResult(value=value)
                except Exception as exc:
                    result = JobResult(error=exc)
                self.send(f"job:{me}:{effect.name}", kind, key, effect.deliver(result))

    def run(self, choose: Callable[[int], int], *, limit: int = 100_000) -> list[Delivered]:
        """Deliver until nothing is pending; ``choose(n)`` picks among n senders."""
        out: list[Delivered] = []
        while self.pending and len(out) < limit:
            senders = sum(1 for queue in self._queues.values() if queue)
            out.append(self.step(choose(senders)))
        return out

    def _rebuild(self, kind: ActorKind, key: Key, actor: _SimActor) -> Behaviour:
        behaviour = kind.create(key) if actor.image is None else kind.restore(key, actor.image)
        kind.replay(behaviour, (kind.decode(payload) for payload in actor.journal))
        return behaviour

    def snapshot(self, kind: str, key: Key) -> None:
        """Snapshot the actor and cut its journal, as the kernel does."""
        actor = self._actor(kind, key)
        data = actor.behaviour.snapshot()
        records = list(data.records() if callable(data.records) else data.records)
        sidecars = data.sidecars() if callable(data.sidecars) else (data.sidecars or {})
        actor.image = Image(records, dict(data.extra), dict(sidecars))
        actor.journal.clear()

    def restart(self, kind: str, key: Key) -> None:
        """Drop the live behaviour and rebuild it from snapshot + journal."""
        actor = self._actor(kind, key)
        actor.behaviour = self._rebuild(self.kinds[kind], key, actor)

    def state_lines(self, kind: str, key: Key) -> tuple[list[bytes], dict[str, Any]]:
        data = self._actor(kind, key).behaviour.snapshot()
        records = list(data.records() if callable(data.records) else data.records)
        return records, dict(data.extra)

    def check_replay(self, kind: str, key: Key) -> None:
        """Assert that snapshot + journal replay gives the live state, line for line."""
        actor = self._actor(kind, key)
        rebuilt = self._rebuild(self.kinds[kind], key, actor)
        live = self.state_lines(kind, key)
        data = rebuilt.snapshot()
        again = (list(data.records() if callable(data.records) else data.records), dict(data.extra))
        if live != again:
            raise AssertionError(f"{kind} {key!r}: replay differs from live state:\n{live}\n{again}")


def _is_coroutine_function(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn)


def hypothesis_chooser(data: Any) -> Callable[[int], int]:
    """A ``choose`` for Simulation.run that lets hypothesis pick (and shrink) the
    delivery order; ``data`` is the object drawn from ``st.data()``."""
    from hypothesis import strategies as st

    def choose(n: int) -> int:
        return int(data.draw(st.integers(0, max(n - 1, 0)), label="deliver"))

    return choose
