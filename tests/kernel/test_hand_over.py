"""A runtime serving part of a cluster hands Tells and Forwards for virtual shards
it does not hold to its host (``Runtime.elsewhere``), with the command that made
them and their place in its step (the host derives their request ids from those),
and a Forward's caller, which the host answers; without a host they fail with
NotOwner as before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

import mnemex
from mnemex.effects import Emit, Forward, Image, Key, Step, Tell
from mnemex.errors import NotOwner
from mnemex.kernel import ActorKind, HandOver, open_actor_runtime
from mnemex.persistence import Lease, Ownership, vshard_of
from mnemex.testing import Add, Get, counter_kind

HERE, THERE = ("here",), ("there",)


@dataclass(frozen=True)
class Pass:
    """Emit, then forward ``Add(n)`` to counter ``target`` (the Forward is effect 1)."""

    target: Key
    n: int


@dataclass(frozen=True)
class Shout:
    """Tell counter ``target`` ``Add(n)``; answer "told"."""

    target: Key
    n: int


class Relay:
    def __init__(self, key: Key) -> None:
        self.key = key

    def handle(self, command: Any) -> Any:
        match command:
            case Pass(target=target, n=n):
                return Step(None, (Emit("passed", n), Forward("counter", target, Add(n))))
            case Shout(target=target, n=n):
                return Step("told", (Tell("counter", target, Add(n)),))
        raise TypeError(command)


def _relay_kind() -> ActorKind:
    def restore(key: Key, image: Image) -> Relay:
        return Relay(key)

    return ActorKind(name="relay", create=Relay, restore=restore, encode=lambda c: b"{}",
                     decode=lambda b: None, is_journaled=lambda c: False)


def _holding(*actors: tuple[str, Key]) -> Ownership:
    """An ownership of the virtual shards of ``actors`` only (none of THERE's)."""
    ownership = Ownership("me")
    for kind, key in actors:
        vshard = vshard_of(kind, key)
        assert vshard != vshard_of("counter", THERE)
        ownership.grant(Lease(vshard=vshard, owner="me", epoch=1, expires=0.0), ownership.now(), 3600.0)
    return ownership


def _runtime() -> Any:
    return open_actor_runtime(mnemex.Config(data_dir=None), [counter_kind(), _relay_kind()],
                              ownership=_holding(("relay", ("r",)), ("counter", HERE)))


async def test_a_forward_to_a_shard_not_held_goes_to_the_host_which_answers_the_caller() -> None:
    handed: list[HandOver] = []
    async with _runtime() as rt, trio.open_nursery() as nursery:
        rt.elsewhere = handed.append
        assert await rt.ask("relay", ("r",), Pass(HERE, 2)) == 2  # held here: delivered here
        assert handed == []
        answers: list[Any] = []

        async def ask() -> None:
            try:
                answers.append(await rt.ask("relay", ("r",), Pass(THERE, 5)))
            except mnemex.Timeout as exc:
                answers.append(exc)

        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        [message] = handed
        assert (message.kind, message.key, message.command) == ("counter", THERE, Add(5))
        assert (message.origin, message.position) == (Pass(THERE, 5), 1)
        assert message.caller is not None and not message.caller.done
        message.caller.resolve(42)  # the reply of the actor's own shard
        await trio.testing.wait_all_tasks_blocked()
        assert answers == [42]
        # an error the host answers reaches the caller as itself
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        assert handed[1].caller is not None
        handed[1].caller.resolve(mnemex.Timeout("no shard served it"))
        await trio.testing.wait_all_tasks_blocked()
    assert answers[0] == 42 and isinstance(answers[1], mnemex.Timeout)


async def test_tells_to_a_shard_not_held_go_to_the_host_and_without_one_fail_with_not_owner() -> None:
    handed: list[HandOver] = []
    async with _runtime() as rt:
        rt.elsewhere = handed.append
        assert await rt.ask("relay", ("r",), Shout(THERE, 1)) == "told"
        await rt.tell("counter", THERE, Add(3))  # the runtime's own tell
        await rt.ref("counter", THERE).tell(Add(4))
        assert [(m.command, m.origin, m.position, m.caller) for m in handed] == [
            (Add(1), Shout(THERE, 1), 0, None), (Add(3), None, 0, None), (Add(4), None, 0, None)]
        await rt.tell("counter", HERE, Add(1))  # held: delivered here
        await trio.testing.wait_all_tasks_blocked()
        assert (await rt.ask("counter", HERE, Get()))[0] == 1 and len(handed) == 3
        rt.elsewhere = None
        with pytest.raises(NotOwner):
            await rt.ask("relay", ("r",), Pass(THERE, 1))
        with pytest.raises(NotOwner):
            await rt.tell("counter", THERE, Add(1))
