"""What a live scope of one memory costs on a shard, in bytes: issue 22's bar is
100,000 scopes across 4 shards within 30.7 KB a scope (bench/ray.py --scopes
measures the shards' RSS). Here the scopes live in one runtime in this process,
served as a shard serves them (request ids deduplicated, journals on files), and
tracemalloc counts what they keep: a guard against gross regressions, no timing.
No Ray."""

from __future__ import annotations

import gc
import time
import tracemalloc
from pathlib import Path

import mnemex
from mnemex.index.vector import VectorIndex
from mnemex.knowledge.graph import EntityGraph
from mnemex.memories.behaviour import ScopeMemory
from mnemex.memories.protocol import NewMemory, Remember, Remembered
from mnemex.memories.snapshot import encode_vector
from mnemex.ray.requests import Deduplicating, Requested, request_kinds

WARM = 40
SCOPES = 300
BOUND = 26 * 1024
"""Bytes a scope may keep. Measured here: 29.2 KB before the trims of the scope's own
objects (slots, no empty deques, ...), 20.7 KB after; a shard's RSS adds what Ray and
its process keep."""
TEXT = "the user likes green tea"  # one text: the embedder's and tokenizer's caches stay as they are


async def test_an_idle_scope_of_one_memory_keeps_a_bounded_number_of_bytes(tmp_path: Path) -> None:
    config = mnemex.Config(data_dir=str(tmp_path), embedder="hashing")
    async with mnemex.open_runtime(config, kinds=request_kinds(config)) as rt:
        embedder = rt.scope_services().embedder
        vector = encode_vector(embedder.embed([TEXT])[0])

        async def store(i: int) -> None:
            command = Remember(memories=[NewMemory(id=f"m-{i}", content=TEXT, vector=vector)],
                               embedder=embedder.name, dim=embedder.dim, now=time.time(), classify=True)
            reply = await rt.kernel.ask("scope", ("bench", f"user-{i}"), Requested(f"r-{i}", command))
            assert isinstance(reply, Remembered) and reply.ids == [f"m-{i}"]

        for i in range(WARM):  # what every scope shares is made by the first ones
            await store(i)
        gc.collect()
        tracemalloc.start()
        try:
            for i in range(WARM, WARM + SCOPES):
                await store(i)
            gc.collect()
            kept, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(rt.kernel.live_keys("scope")) == WARM + SCOPES  # all live: none was passivated
        per_scope = kept / SCOPES
        assert per_scope <= BOUND, f"a live scope of one memory keeps {per_scope / 1024:.1f} KB"

        # what the bound rests on: the objects every live scope has keep no dict of
        # their own (more than 30 attributes: Python would not share its keys), and an
        # idle actor holds no queue
        cell = rt.kernel._cells[("scope", ("bench", f"user-{WARM}"))]
        behaviour = cell.behaviour
        assert isinstance(behaviour, Deduplicating) and isinstance(behaviour.inner, ScopeMemory)
        scope = behaviour.inner
        assert isinstance(scope.vectors, VectorIndex) and isinstance(scope.graph, EntityGraph)
        for item in (scope, scope.vectors, scope.graph):
            assert not hasattr(item, "__dict__"), type(item).__name__
        assert cell.mailbox.items is None and cell.acks is None
