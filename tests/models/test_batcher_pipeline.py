"""The embedding batcher keeps the model busy and fair: a large request is cut and
does not hold up the small ones that came after it, a text repeated in a call is
embedded once, a request nobody waits for any more is not embedded, ``embed_each``
has the next chunks embedded while the caller stores one, and a query does not wait
behind texts to store."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest
import trio
import trio.testing

from mnemex.errors import EmbedderError
from mnemex.models.batcher import EmbeddingBatcher
from mnemex.models.hashing import HashingEmbedder

PLAIN = HashingEmbedder(dim=32)


class Slow(HashingEmbedder):
    """The hashing embedder, too slow to be called inline (a millisecond a call),
    recording each call's texts; a text with ``boom`` in it fails its call."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        time.sleep(0.001)
        if any("boom" in text for text in texts):
            raise RuntimeError("the model broke")
        return super().embed(texts)


class Held(Slow):
    """Slow, and its calls of texts to store wait until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.query_calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.release.wait(10)
        return super().embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.query_calls.append(list(texts))
        return HashingEmbedder.embed(self, texts)


async def test_a_large_request_is_cut_and_the_small_one_behind_it_goes_in_the_next_call() -> None:
    embedder = Slow()
    batcher = EmbeddingBatcher(embedder, batch_size=4)
    large = [f"large {i}" for i in range(10)]
    small = ["small 0", "small 1"]
    results: dict[str, np.ndarray] = {}

    async def embed(name: str, texts: list[str]) -> None:
        results[name] = await batcher.embed(texts)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(embed, "large", large)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(embed, "small", small)
        await trio.testing.wait_all_tasks_blocked()
        await nursery.start(batcher.run)
        with trio.fail_after(10):
            while len(results) < 2:
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    assert embedder.calls == [large[:4], [*small, *large[4:6]], large[6:10]]
    np.testing.assert_allclose(results["large"], PLAIN.embed(large), atol=1e-6)
    np.testing.assert_allclose(results["small"], PLAIN.embed(small), atol=1e-6)


async def test_a_text_repeated_in_one_call_is_embedded_once() -> None:
    embedder = Slow()
    batcher = EmbeddingBatcher(embedder, batch_size=64)
    first = batcher.embed_nowait(["tea", "coffee", "tea"])
    second = batcher.embed_nowait(["coffee", "water"])
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        with trio.fail_after(10):
            one, two = await first.vectors(), await second.vectors()
        nursery.cancel_scope.cancel()
    assert embedder.calls == [["tea", "coffee", "water"]]
    assert batcher.texts == 3
    np.testing.assert_allclose(one, PLAIN.embed(["tea", "coffee", "tea"]), atol=1e-6)
    np.testing.assert_allclose(two, PLAIN.embed(["coffee", "water"]), atol=1e-6)


async def test_texts_nobody_waits_for_any_more_are_not_embedded() -> None:
    embedder = Slow()
    batcher = EmbeddingBatcher(embedder, batch_size=64)
    with trio.move_on_after(0.01):
        await batcher.embed(["given up"])  # cancelled while queued: the batcher is not running yet
    dropped = batcher.embed_nowait(["dropped"])
    dropped.withdraw()
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        with trio.fail_after(10):
            await batcher.embed(["wanted"])
        nursery.cancel_scope.cancel()
    assert embedder.calls == [["wanted"]]


async def test_embed_each_has_the_next_chunks_embedded_while_one_is_handled() -> None:
    embedder = Slow()
    batcher = EmbeddingBatcher(embedder, batch_size=4)
    chunks = [[f"chunk {c} text {i}" for i in range(2)] for c in range(5)]
    handled: list[int] = []

    async def handle(index: int, vectors: np.ndarray) -> None:
        np.testing.assert_allclose(vectors, PLAIN.embed(chunks[index]), atol=1e-6)
        known = {text for call in embedder.calls for text in call} | \
            {text for request in batcher._texts.queue for text in request.texts}
        # a call's worth of the texts after this chunk is embedded or queued
        assert {text for chunk in chunks[index + 1:index + 3] for text in chunk} <= known
        handled.append(index)
        await trio.sleep(0.005)  # the actor storing them

    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        with trio.fail_after(10):
            await batcher.embed_each(chunks, handle)
        nursery.cancel_scope.cancel()
    assert handled == [0, 1, 2, 3, 4]
    assert embedder.calls[0] == [*chunks[0], *chunks[1]]  # both queued before the first call


async def test_embed_each_withdraws_the_chunks_after_a_failed_one() -> None:
    embedder = Slow()
    batcher = EmbeddingBatcher(embedder, batch_size=2)
    chunks = [["first"], ["second"], ["third"], ["fourth"], ["fifth"], ["sixth"]]

    async def handle(index: int, vectors: np.ndarray) -> None:
        raise KeyError(index)

    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        with pytest.raises(KeyError), trio.fail_after(10):
            await batcher.embed_each(chunks, handle)
        await batcher.embed(["after"])  # the queue is empty again: this is the next call
        nursery.cancel_scope.cancel()
    embedded = [text for call in embedder.calls for text in call]
    assert "fifth" not in embedded and "sixth" not in embedded
    assert embedder.calls[-1] == ["after"]


async def test_a_failing_embedder_fails_every_request_of_its_call_and_the_next_call_works() -> None:
    embedder = Slow()
    batcher = EmbeddingBatcher(embedder, batch_size=64)
    broken = batcher.embed_nowait(["a boom"])
    with_it = batcher.embed_nowait(["beside it"])
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        for request in (broken, with_it):
            with pytest.raises(EmbedderError, match="the model broke"):
                await request.vectors()
        np.testing.assert_allclose(await batcher.embed(["fine"]), PLAIN.embed(["fine"]), atol=1e-6)
        nursery.cancel_scope.cancel()


async def test_a_query_does_not_wait_behind_a_call_of_texts_to_store() -> None:
    embedder = Held()
    batcher = EmbeddingBatcher(embedder, batch_size=64)
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        storing = batcher.embed_nowait([f"memory {i}" for i in range(50)])
        await trio.sleep(0.01)  # its call is running, held
        with trio.fail_after(5):
            query = await batcher.embed_queries(["what does she drink?"])
        assert embedder.query_calls == [["what does she drink?"]]
        assert not storing._done.is_set()
        embedder.release.set()
        with trio.fail_after(10):
            await storing.vectors()
        nursery.cancel_scope.cancel()
    np.testing.assert_allclose(query, PLAIN.embed(["what does she drink?"]), atol=1e-6)
