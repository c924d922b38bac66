"""Ingest at the model's pace: a ``remember_many`` sent as several Remember commands,
and ``rt.remember_many`` across scopes, have the texts of the next commands
embedded while one is stored (fewer model calls than commands), keep their ids in
the order given, and stay all or none across scopes when a later embedding fails."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest

import mnemex
from mnemex.errors import EmbedderError
from mnemex.memories.kind import scope_kind
from mnemex.models.hashing import HashingEmbedder


class Slow(HashingEmbedder):
    """The hashing embedder, too slow to be called inline, recording its calls; a
    text with ``boom`` in it fails its call."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        time.sleep(0.001)
        if any("boom" in text for text in texts):
            raise RuntimeError("the model broke")
        return super().embed(texts)


def config(**overrides: object) -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing", embedder_dim=32, **overrides)  # type: ignore[arg-type]


async def test_the_commands_of_one_remember_many_are_embedded_ahead_of_their_store() -> None:
    embedder = Slow()
    cfg = config(max_memories_per_command=3)
    texts = [f"memory number {i} about tea" for i in range(12)]
    async with mnemex.open_runtime(cfg, kinds=[scope_kind(cfg, embedder)]) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        ids = await scope.remember_many(texts)
        assert [(await scope.get(memory_id)).content for memory_id in ids] == texts
        assert await scope.count() == 12
    assert embedder.calls == [texts]  # four commands, their texts queued at once: one call


async def test_memories_of_several_scopes_are_embedded_together_and_keep_their_order() -> None:
    embedder = Slow()
    cfg = config()
    items = [("chat", user, {"content": f"{user} likes {drink}"})
             for drink in ("tea", "coffee", "water") for user in ("alice", "bob", "carol")]
    async with mnemex.open_runtime(cfg, kinds=[scope_kind(cfg, embedder)]) as rt:
        ids = await rt.remember_many(items)
        for (app, user, fields), memory_id in zip(items, ids, strict=True):
            assert (await rt.scope(user_id=user, app_name=app).get(memory_id)).content == fields["content"]
    assert len(embedder.calls) == 1 and sorted(embedder.calls[0]) == sorted(f["content"] for *_, f in items)


async def test_a_failed_embedding_in_a_later_scope_undoes_what_the_earlier_ones_stored() -> None:
    embedder = Slow()
    cfg = config(embed_batch_size=2, max_memories_per_command=2)
    async with mnemex.open_runtime(cfg, kinds=[scope_kind(cfg, embedder)]) as rt:
        alice = rt.scope(user_id="alice", app_name="chat")
        kept = await alice.remember("alice had this before")
        items = [("chat", "alice", {"content": "alice likes tea"}),
                 ("chat", "alice", {"content": "alice had this before"}),
                 ("chat", "bob", {"content": "bob likes coffee"}),
                 ("chat", "bob", {"content": "bob lives in Leeds"}),
                 ("chat", "carol", {"content": "carol says boom"})]
        with pytest.raises(EmbedderError, match="the model broke"):
            await rt.remember_many(items)
        assert len(embedder.calls) == 4  # alice's first memory, alice's batch, bob's batch: stored; carol's
        assert [memory.id for memory in (await alice.memories()).memories] == [kept]
        assert await rt.scope(user_id="bob", app_name="chat").count() == 0
        assert await rt.scope(user_id="carol", app_name="chat").count() == 0
