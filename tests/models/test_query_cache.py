"""Query vectors are kept (``config.models.query_cache_size``): a query asked again
is not embedded again, in a search, across scopes and in the knowledge layer's
look-up of related memories; the least recently used is dropped first; 0 keeps
none; a failed embedding keeps nothing."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import pytest
import trio

import mnemex
from mnemex.errors import EmbedderError
from mnemex.memories.kind import scope_kind
from mnemex.models.batcher import EmbeddingBatcher
from mnemex.models.hashing import HashingEmbedder
from mnemex.models.query_cache import QueryCache

PLAIN = HashingEmbedder(dim=32)


class Counting(HashingEmbedder):
    """The hashing embedder, counting the queries it embeds; fails while ``broken``."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.queries: list[str] = []
        self.broken = False

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if self.broken:
            raise RuntimeError("the model is down")
        self.queries.extend(texts)
        return HashingEmbedder.embed(self, texts)


async def embedded(batcher: EmbeddingBatcher, *queries: str) -> np.ndarray:
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        vectors = await batcher.embed_queries(list(queries))
        nursery.cancel_scope.cancel()
    return vectors


async def test_a_query_asked_again_is_not_embedded_again() -> None:
    embedder = Counting()
    batcher = EmbeddingBatcher(embedder, batch_size=64, query_cache_size=8)
    first = await embedded(batcher, "what does she drink?")
    again = await embedded(batcher, "what does she drink?", "where does she live?", "what does she drink?")
    assert embedder.queries == ["what does she drink?", "where does she live?"]
    np.testing.assert_array_equal(again[0], first[0])
    np.testing.assert_array_equal(again[2], first[0])
    np.testing.assert_allclose(again, PLAIN.embed(["what does she drink?", "where does she live?",
                                                   "what does she drink?"]), atol=1e-6)
    assert (batcher.query_cache.hits, batcher.query_cache.misses) == (2, 2)


async def test_the_least_recently_used_query_is_dropped_first() -> None:
    embedder = Counting()
    batcher = EmbeddingBatcher(embedder, batch_size=64, query_cache_size=2)
    for query in ("one", "two", "one", "three"):  # "two" is the least recently used when "three" comes
        await embedded(batcher, query)
    assert len(batcher.query_cache) == 2
    embedder.queries.clear()
    await embedded(batcher, "one")
    await embedded(batcher, "three")
    await embedded(batcher, "two")
    assert embedder.queries == ["two"]


async def test_size_zero_keeps_nothing() -> None:
    embedder = Counting()
    batcher = EmbeddingBatcher(embedder, batch_size=64, query_cache_size=0)
    for _ in range(3):
        await embedded(batcher, "again")
    assert embedder.queries == ["again"] * 3 and len(batcher.query_cache) == 0


async def test_a_failed_embedding_keeps_nothing_and_a_caller_cannot_change_a_kept_vector() -> None:
    embedder = Counting()
    batcher = EmbeddingBatcher(embedder, batch_size=64, query_cache_size=8)
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        embedder.broken = True
        with pytest.raises(EmbedderError, match="the model is down"):
            await batcher.embed_queries(["tea?"])
        embedder.broken = False
        vectors = await batcher.embed_queries(["tea?"])
        vectors[0, :] = 7.0  # the caller's copy
        np.testing.assert_allclose(await batcher.embed_queries(["tea?"]), PLAIN.embed(["tea?"]), atol=1e-6)
        nursery.cancel_scope.cancel()
    assert embedder.queries == ["tea?"]


def test_vectors_are_kept_per_embedder_and_refuse_changes() -> None:
    cache = QueryCache(4)
    cache.put("model-a", "tea?", np.ones(3, dtype=np.float32))
    assert cache.get("model-b", "tea?") is None
    kept = cache.get("model-a", "tea?")
    assert kept is not None
    with pytest.raises(ValueError, match="read-only"):
        kept[0] = 2.0
    with pytest.raises(ValueError, match=">= 0"):
        QueryCache(-1)


def test_the_config_field_defaults_to_1024_and_refuses_a_negative_size() -> None:
    assert mnemex.Config().models.query_cache_size == 1024
    assert mnemex.Config(query_cache_size=0).models.query_cache_size == 0
    with pytest.raises((mnemex.InvalidInput, msgspec.ValidationError)):
        mnemex.Config(query_cache_size=-1)


async def test_searches_of_one_query_in_several_scopes_embed_it_once() -> None:
    embedder = Counting()
    config = mnemex.Config(data_dir=None, embedder="hashing", embedder_dim=32)
    async with mnemex.open_runtime(config, kinds=[scope_kind(config, embedder)]) as rt:
        for user in ("alice", "bob"):
            await rt.scope(user_id=user, app_name="chat").remember("She drinks green tea every morning")
        for user in ("alice", "bob", "alice"):
            result = await rt.scope(user_id=user, app_name="chat").search("green tea in the morning",
                                                                          mode="vector", min_score=None)
            assert result.hits
        both = [("chat", "alice"), ("chat", "bob")]
        await rt.search("green tea in the morning", scopes=both, mode="hybrid")
    assert embedder.queries == ["green tea in the morning"]
