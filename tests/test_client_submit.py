"""``Client.submit``: a call of the async API started in the runtime's thread without
waiting, its outcome in a Future (what asyncio hosts await with
``asyncio.wrap_future``); the call runs to its end whoever waits for it."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

import mnemex


def config() -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing")


def test_a_submitted_call_returns_its_result_through_a_future() -> None:
    with mnemex.Client(config()) as client:
        scope = client.runtime.scope(user_id="u", app_name="a")
        future = client.submit(scope.remember, "tea with milk")
        assert isinstance(future, concurrent.futures.Future)
        memory_id = future.result(timeout=30)
        assert client.scope(user_id="u", app_name="a").get(memory_id).content == "tea with milk"


def test_a_submitted_call_raises_its_error_through_the_future() -> None:
    with mnemex.Client(config()) as client:
        scope = client.runtime.scope(user_id="u", app_name="a")
        with pytest.raises(mnemex.InvalidInput):
            client.submit(scope.remember, "").result(timeout=30)
        with pytest.raises(mnemex.NotFound):
            client.submit(scope.get, "nope").result(timeout=30)


def test_asyncio_awaits_a_submitted_call_and_a_cancelled_waiter_leaves_it_running() -> None:
    async def main(client: mnemex.Client) -> str:
        scope = client.runtime.scope(user_id="u", app_name="a")
        waiter = asyncio.ensure_future(asyncio.wrap_future(client.submit(scope.remember, "first")))
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return await asyncio.wrap_future(client.submit(scope.remember, "second"))

    with mnemex.Client(config()) as client:
        asyncio.run(main(client))
        assert client.scope(user_id="u", app_name="a").count() == 2  # the cancelled wait's call ran too


def test_submitting_to_a_closed_client_is_refused() -> None:
    client = mnemex.Client(config())
    scope = client.runtime.scope(user_id="u", app_name="a")
    client.close()
    with pytest.raises(mnemex.ActorClosed):
        client.submit(scope.remember, "late")
