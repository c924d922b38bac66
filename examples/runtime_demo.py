"""A tour of the actor runtime with the small ``counter`` kind from mnemex.testing.

Run: python examples/runtime_demo.py [DATA_DIR]

It asks and tells a few actors, shows an error and a crash being contained,
runs a slow job beside an actor, then restarts the runtime on the same data
directory and shows that every acknowledged command survived.
"""

from __future__ import annotations

import sys
import tempfile

import trio

import mnemex
from mnemex.testing import Add, Crash, Done, Fail, Get, Slow, counter_kind


async def main(data_dir: str) -> None:
    config = mnemex.Config(data_dir=data_dir)
    async with mnemex.open_runtime(config, kinds=[counter_kind()]) as rt:
        alice = rt.ref("counter", "alice")
        print("ask  Add(2)            ->", await alice.ask(Add(2)))
        await alice.tell(Add(3))
        print("tell Add(3); ask Get() ->", await alice.ask(Get()))

        try:
            await alice.ask(Fail("this command is rejected"))
        except mnemex.InvalidInput as exc:
            print("a rejected command      ->", type(exc).__name__, exc)

        try:
            await alice.ask(Crash())
        except mnemex.ActorCrashed as exc:
            print("a handler bug           ->", type(exc).__name__, "; cause:", repr(exc.__cause__))
        print("state after the crash   ->", await alice.ask(Get()), "(the last accepted state)")

        print("slow job started        ->", await alice.ask(Slow(seconds=0.2)))
        print("asks answered meanwhile ->", [await alice.ask(Add(1)) for _ in range(3)])
        while await alice.ask(Done()) == 0:
            await trio.sleep(0.05)
        print("slow job finished       -> its result came back as a message")

        for i in range(100):
            await rt.tell("counter", f"user-{i}", Add(i))
        print("runtime stats           ->", rt.stats())

    async with mnemex.open_runtime(config, kinds=[counter_kind()]) as rt:
        print("after a restart         ->", await rt.ask("counter", "alice", Get()),
              "and user-99 =", await rt.ask("counter", "user-99", Get()))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(main, tmp)
