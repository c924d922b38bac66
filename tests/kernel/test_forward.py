"""Answering effects: Forward hands a caller on to another actor, and a Job with
``answers=True`` answers its caller only when its result has been handled; the
sending actor's mailbox moves on meanwhile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import trio

import mnemex
from mnemex.effects import Forward, Image, Job, JobResult, Key, Step
from mnemex.kernel import ActorKind
from mnemex.testing import Add, Get, counter_kind


@dataclass(frozen=True)
class Pass:
    """Forward ``command`` to counter ``target``."""

    target: str
    command: Any


@dataclass(frozen=True)
class Later:
    """Answer after ``gate`` opens, through a Job that answers."""

    gate: trio.Event
    value: int
    fail: bool = False


@dataclass(frozen=True)
class Finished:
    value: int
    error: str = ""


@dataclass(frozen=True)
class Ping:
    pass


class Relay:
    def __init__(self, key: Key) -> None:
        self.key = key
        self.finished = 0

    def handle(self, command: Any) -> Any:
        match command:
            case Pass(target=target, command=inner):
                return Step("not sent", (Forward("counter", (target,), inner),))
            case Later(gate=gate, value=value, fail=fail):
                async def work() -> int:
                    await gate.wait()
                    if fail:
                        raise RuntimeError("the slow work failed")
                    return value

                def deliver(result: JobResult) -> Finished:
                    if result.error is not None:
                        return Finished(0, str(result.error))
                    return Finished(int(result.value))

                return Step("not sent", (Job(work, deliver, name="relay.later", answers=True),))
            case Finished(value=value, error=error):
                if error:
                    raise mnemex.InvalidInput(f"later failed: {error}")
                self.finished += 1
                return value * 10
            case Ping():
                return "pong"
        raise TypeError(command)


def relay_kind() -> ActorKind:
    def restore(key: Key, image: Image) -> Relay:
        return Relay(key)

    return ActorKind(name="relay", create=Relay, restore=restore, encode=lambda c: b"{}",
                     decode=lambda b: None, is_journaled=lambda c: False)


def runtime() -> Any:
    return mnemex.open_runtime(mnemex.Config(data_dir=None), kinds=[counter_kind(), relay_kind()])


async def test_a_forwarded_command_is_answered_by_the_actor_it_went_to() -> None:
    async with runtime() as rt:
        relay = rt.ref("relay", "r")
        assert await relay.ask(Pass("c1", Add(5))) == 5
        assert await relay.ask(Pass("c1", Add(2))) == 7
        assert await rt.ask("counter", "c1", Get()) == (7, 2)
        # an error of the target reaches the caller; an unknown kind too
        with pytest.raises(mnemex.InvalidInput, match="boom"):
            await relay.ask(Pass("c1", mnemex.testing.Fail("boom")))
        with pytest.raises(mnemex.InvalidInput, match="empty"):
            await relay.ask(Pass("", Add(1)))


async def test_a_forward_from_a_tell_is_a_tell() -> None:
    async with runtime() as rt:
        await rt.tell("relay", "r", Pass("c2", Add(3)))
        await trio.testing.wait_all_tasks_blocked()  # the relay forwarded, the counter added
        assert (await rt.ask("counter", "c2", Get()))[0] == 3


async def test_an_answering_job_answers_late_without_blocking_the_mailbox() -> None:
    async with runtime() as rt, trio.open_nursery() as nursery:
        relay = rt.ref("relay", "r")
        gate = trio.Event()
        answers: list[Any] = []

        async def ask_later() -> None:
            answers.append(await relay.ask(Later(gate, 4)))

        nursery.start_soon(ask_later)
        await trio.testing.wait_all_tasks_blocked()
        assert answers == []
        assert await relay.ask(Ping()) == "pong"  # the actor serves others meanwhile
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert answers == [40]


async def test_a_failed_answering_job_gives_its_caller_the_error() -> None:
    async with runtime() as rt:
        gate = trio.Event()
        gate.set()
        with pytest.raises(mnemex.InvalidInput, match="the slow work failed"):
            await rt.ref("relay", "r").ask(Later(gate, 1, fail=True))
