"""The blocking bridge: a runtime on a background thread for non-trio hosts."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import mnemex
from mnemex.testing import Add, Entries, Get, counter_kind


def test_client_blocking_calls_reach_the_same_actor(tmp_path: Any) -> None:
    with mnemex.Client(mnemex.Config(data_dir=str(tmp_path)), kinds=[counter_kind()]) as client:
        ref = client.ref("counter", "c")
        assert ref.ask(Add(2)) == 2
        client.tell("counter", "c", Add(3))
        assert client.ask("counter", "c", Get()) == (5, 2)
        assert client.stats().live == 1
    # closing shut the runtime down cleanly: the state is on disk
    with mnemex.Client(mnemex.Config(data_dir=str(tmp_path)), kinds=[counter_kind()]) as client:
        assert client.ask("counter", "c", Get()) == (5, 2)


def test_client_is_safe_from_many_threads() -> None:
    with mnemex.Client(mnemex.Config(data_dir=None), kinds=[counter_kind()]) as client:
        def work(t: int) -> None:
            for i in range(50):
                client.ask("counter", "shared", Add(1, sender=f"t{t}-{i}"))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        log = client.ask("counter", "shared", Entries())
        assert len(log) == 400
        for t in range(8):  # each thread's asks arrived in its order
            mine = [sender for sender, _ in log if sender.startswith(f"t{t}-")]
            assert mine == [f"t{t}-{i}" for i in range(50)]


def test_client_is_usable_from_asyncio_via_to_thread() -> None:
    with mnemex.Client(mnemex.Config(data_dir=None), kinds=[counter_kind()]) as client:
        async def main() -> list[int]:
            return list(await asyncio.gather(*(
                asyncio.to_thread(client.ask, "counter", f"c{i}", Add(i)) for i in range(10))))

        assert asyncio.run(main()) == list(range(10))


def test_client_errors_are_mnemex_errors_raised_in_the_calling_thread() -> None:
    with mnemex.Client(mnemex.Config(data_dir=None), kinds=[counter_kind()]) as client:
        with pytest.raises(mnemex.UnknownActorKind):
            client.ask("nope", "c", Get())
        with pytest.raises(mnemex.InvalidInput):
            client.ask("counter", "", Get())


def test_client_start_error_is_raised_by_the_constructor(tmp_path: Any) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path))
    with mnemex.Client(cfg, kinds=[counter_kind()]), pytest.raises(mnemex.DataDirLocked):
        mnemex.Client(cfg, kinds=[counter_kind()])


def test_closed_client_refuses_calls() -> None:
    client = mnemex.Client(mnemex.Config(data_dir=None), kinds=[counter_kind()])
    client.close()
    client.close()  # idempotent
    with pytest.raises(mnemex.ActorClosed):
        client.ask("counter", "c", Get())
