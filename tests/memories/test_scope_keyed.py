"""Keyed memories (memories.keyed), sans-io and through the runtime: create or
replace by id all or none (and concurrent batches that never interleave), dedupe
optional per write, several vectors per memory scored by the best, namespaces
listed from counts, expiry; each kept by snapshots and replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
from scope_support import KEY, restored, settings

import mnemex
from mnemex.effects import Step
from mnemex.errors import InvalidInput
from mnemex.memories.behaviour import ScopeMemory
from mnemex.memories.protocol import (
    ForgetExpired,
    GetMemory,
    ListMemories,
    ListNamespaces,
    NewMemory,
    PutMemories,
    RefreshExpiry,
    Remember,
    Search,
)
from mnemex.memories.snapshot import encode_vector

DIM = 4


def vec(*values: float) -> bytes:
    return encode_vector(np.array(values, dtype=np.float32))


def item(memory_id: str, content: str, *, namespace: tuple[str, ...] = ("docs",), vector: bytes | None = None,
         vectors: tuple[bytes, ...] = (), dedupe: bool = False, ttl: float | None = None,
         metadata: dict[str, Any] | None = None) -> NewMemory:
    return NewMemory(id=memory_id, content=content, namespace=namespace, key=memory_id, vector=vector,
                     vectors=vectors, dedupe=dedupe, ttl=ttl, metadata=metadata or {})


def put(scope: ScopeMemory, *memories: NewMemory, forget: tuple[str, ...] = (), now: float = 100.0) -> Any:
    reply = scope.handle(PutMemories(memories=list(memories), forget=list(forget), embedder="test", dim=DIM,
                                     now=now))
    return reply.reply if isinstance(reply, Step) else reply


def search(scope: ScopeMemory, query: bytes, top_k: int = 10, namespace: tuple[str, ...] | None = None,
           now: float = 100.0) -> list[tuple[str, float]]:
    result = scope.handle(Search(query="", vector=query, embedder="test", dim=DIM, top_k=top_k, mode="vector",
                                 min_score=-1.0, namespace=namespace, now=now))
    result = result.reply if isinstance(result, Step) else result
    return [(hit.memory.id, hit.scores["cosine"]) for hit in result.hits]


def scope() -> ScopeMemory:
    return ScopeMemory(KEY, settings())


def listed(memory: ScopeMemory, namespace: tuple[str, ...] = (), now: float = 100.0) -> list[str]:
    return [r.id for r in memory.handle(ListMemories(namespace=namespace, limit=None, now=now)).memories]


# -- gap 2: create or replace by id, all or none
def test_a_put_replaces_the_memory_of_its_id_keeping_when_it_was_created() -> None:
    memory = scope()
    put(memory, item("a", "first", vector=vec(1, 0, 0, 0)), now=100.0)
    reply = put(memory, item("a", "second", vector=vec(0, 1, 0, 0), metadata={"v": 2}), now=200.0)
    assert reply.ids == ["a"] and reply.replaced == [True]
    record = memory.handle(GetMemory(id="a"))
    assert (record.content, record.created_at, record.timestamp, record.metadata) == ("second", 100.0, 200.0,
                                                                                     {"v": 2})
    assert len(memory) == 1
    assert search(memory, vec(0, 1, 0, 0), top_k=1) == [("a", pytest.approx(1.0))]
    assert "first" not in memory.by_content


def test_a_batch_puts_and_forgets_together_and_the_last_put_of_an_id_counts() -> None:
    memory = scope()
    put(memory, item("a", "A"), item("b", "B"))
    reply = put(memory, item("c", "C1"), item("c", "C2"), forget=("a", "zzz"))
    assert reply.forgotten == ["a"]
    assert listed(memory) == ["b", "c"]
    assert memory.handle(GetMemory(id="c")).content == "C2"


@pytest.mark.parametrize("bad", [
    item("x", "bad vector", vector=vec(1, 2)),
    item("x", "zero vector", vector=vec(0, 0, 0, 0)),
    item("x", "extra without a first", vectors=(vec(1, 0, 0, 0),)),
    item("x", "", vector=vec(1, 0, 0, 0)),
    item("x", "bad ttl", ttl=-1),
    item("x", "bad namespace", namespace=("ok", "")),
])
def test_a_failed_batch_stores_nothing(bad: NewMemory) -> None:
    memory = scope()
    put(memory, item("a", "A", vector=vec(1, 0, 0, 0)))
    before = restored(memory)
    with pytest.raises(InvalidInput):
        put(memory, item("a", "replaced", vector=vec(0, 1, 0, 0)), item("b", "B"), bad, forget=("a",))
    assert list(memory.records()) == list(before.records())
    assert search(memory, vec(1, 0, 0, 0)) == [("a", pytest.approx(1.0))]


async def test_concurrent_batches_never_interleave(tmp_path: Path) -> None:
    config = mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")
    async with mnemex.open_runtime(config) as rt:
        store = rt.scope(user_id="u", app_name="kv")

        async def batch(tag: str) -> None:
            for _ in range(5):
                await store.put([{"id": f"k{i}", "content": f"{tag}{i}", "dedupe": False} for i in range(20)])
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for tag in "xyz":
                nursery.start_soon(batch, tag)
        page = await store.memories(limit=None)
        tags = {record.content[0] for record in page.memories}
        assert len(page.memories) == 20 and len(tags) == 1  # one batch's values, whole


# -- gap 1: dedupe is optional per write
def test_without_dedupe_the_same_content_is_kept_under_two_ids() -> None:
    memory = scope()
    reply = put(memory, item("a", "same"), item("b", "same"))
    assert reply.ids == ["a", "b"] and len(memory) == 2
    deduped = put(memory, item("c", "same", dedupe=True))
    assert deduped.ids == ["a"] and len(memory) == 2
    put(memory, forget=("a",))
    assert put(memory, item("d", "same", dedupe=True)).ids == ["b"]  # b now holds the content
    put(memory, forget=("b",))
    assert "same" not in memory.by_content and not memory.twins


def test_remember_without_dedupe_stores_a_second_copy() -> None:
    memory = scope()
    first = memory.handle(Remember(memories=[NewMemory(id="m1", content="tea")], now=1.0))
    second = memory.handle(Remember(memories=[NewMemory(id="m2", content="tea", dedupe=False)], now=2.0))
    again = memory.handle(Remember(memories=[NewMemory(id="m3", content="tea")], now=3.0))
    assert (first.ids, second.ids, again.ids) == (["m1"], ["m2"], ["m1"])
    assert len(memory) == 2


# -- gap 3: several vectors per memory
def test_a_memory_is_found_by_the_best_of_its_vectors() -> None:
    memory = scope()
    put(memory, item("a", "A", vector=vec(1, 0, 0, 0), vectors=(vec(0, 0, 1, 0),)),
        item("b", "B", vector=vec(0.9, 0.1, 0, 0)),
        item("c", "C", vector=vec(0, 1, 0, 0), namespace=("other",), vectors=(vec(0, 0, 0.9, 0.1),)))
    found = search(memory, vec(0, 0, 1, 0))
    assert [memory_id for memory_id, _ in found][:2] == ["a", "c"]
    assert found[0][1] == pytest.approx(1.0)
    assert [m for m, _ in search(memory, vec(0, 0, 1, 0), namespace=("docs",))] == ["a", "b"]
    assert [m for m, _ in search(memory, vec(1, 0, 0, 0), top_k=1)] == ["a"]
    put(memory, forget=("a",))
    assert [m for m, _ in search(memory, vec(0, 0, 1, 0), top_k=1)] == ["c"]


def test_multi_vector_search_agrees_with_brute_force() -> None:
    rng = np.random.default_rng(7)
    memory = scope()
    vectors: dict[str, list[np.ndarray]] = {}
    for i in range(60):
        rows = [rng.normal(size=DIM).astype(np.float32) for _ in range(int(rng.integers(1, 4)))]
        vectors[f"m{i:02}"] = rows
        put(memory, item(f"m{i:02}", f"c{i}", vector=encode_vector(rows[0]),
                         vectors=tuple(encode_vector(r) for r in rows[1:]),
                         namespace=("even",) if i % 2 == 0 else ("odd",)))
    for _ in range(10):
        query = rng.normal(size=DIM).astype(np.float32)
        best = {m: max(float(r @ query / np.linalg.norm(r) / np.linalg.norm(query)) for r in rows)
                for m, rows in vectors.items()}
        for namespace in (None, ("even",)):
            allowed = [m for m in best if namespace is None or int(m[1:]) % 2 == 0]
            expected = sorted(allowed, key=lambda m: -best[m])[:5]
            got = search(memory, encode_vector(query), top_k=5, namespace=namespace)
            assert [m for m, _ in got] == expected
            assert [s for _, s in got] == pytest.approx([best[m] for m in expected], abs=1e-5)


# -- gap 6: namespaces
def test_namespaces_are_listed_by_prefix_suffix_and_depth() -> None:
    memory = scope()
    put(memory, item("1", "a", namespace=("users", "u1", "prefs")), item("2", "b", namespace=("users", "u2")),
        item("3", "c", namespace=("docs", "v1")), item("4", "d", namespace=("users", "u1", "prefs")))

    def names(**kwargs: Any) -> list[tuple[str, ...]]:
        return memory.handle(ListNamespaces(**kwargs)).namespaces

    assert names() == [("docs", "v1"), ("users", "u1", "prefs"), ("users", "u2")]
    assert names(prefix=("users",)) == [("users", "u1", "prefs"), ("users", "u2")]
    assert names(suffix=("v1",)) == [("docs", "v1")]
    assert names(prefix=("*", "u1")) == [("users", "u1", "prefs")]
    assert names(max_depth=1) == [("docs",), ("users",)]
    assert names(limit=1, offset=1) == [("users", "u1", "prefs")]
    put(memory, forget=("1", "4"))
    assert names(prefix=("users",)) == [("users", "u2")]
    assert listed(memory, ("users",)) == ["2"]


# -- expiry
def test_an_expired_memory_is_hidden_refreshed_and_then_forgotten() -> None:
    memory = scope()
    put(memory, item("a", "A", ttl=10.0, vector=vec(1, 0, 0, 0)), item("b", "B", vector=vec(1, 0, 0, 0)),
        now=100.0)
    assert listed(memory, now=105.0) == ["a", "b"]
    assert memory.handle(RefreshExpiry(ids=["a", "b"], now=105.0)) == 1
    assert memory.handle(GetMemory(id="a")).expires_at == 115.0
    assert listed(memory, now=112.0) == ["a", "b"]
    assert [m for m, _ in search(memory, vec(1, 0, 0, 0), now=116.0)] == ["b"]
    assert memory.handle(ForgetExpired(now=116.0)).ids == ["a"]
    assert listed(memory) == ["b"]


# -- persistence: snapshots and replay keep it all
def test_a_snapshot_keeps_twins_extra_vectors_namespaces_and_expiries() -> None:
    memory = scope()
    put(memory, item("a", "same", vector=vec(1, 0, 0, 0), vectors=(vec(0, 0, 1, 0),), ttl=50.0),
        item("b", "same", namespace=("x", "y")))
    for sidecars in (True, False):
        back = restored(memory, sidecars=sidecars)
        assert list(back.records()) == list(memory.records())
        assert back.twins == memory.twins and back.by_content == memory.by_content
        assert back.handle(ListNamespaces()).namespaces == [("docs",), ("x", "y")]
        assert [m for m, _ in search(back, vec(0, 0, 1, 0), top_k=1)] == ["a"]
        assert back.keyed.expires == memory.keyed.expires


def test_a_snapshot_read_from_its_lines_alone_restores_memories_without_a_vector() -> None:
    memory = scope()
    memory.handle(Remember(memories=[NewMemory(id="m1", content="with", vector=vec(1, 0, 0, 0)),
                                     NewMemory(id="m2", content="without")], embedder="test", dim=DIM, now=1.0))
    back = restored(memory, sidecars=False)
    assert list(back.records()) == list(memory.records())
    assert back.vectors is not None and 0 in back.vectors and 1 not in back.vectors


def test_a_namespace_read_never_sees_memories_without_a_namespace() -> None:
    memory = scope()
    memory.handle(Remember(memories=[NewMemory(id="plain", content="plain memory")], now=1.0))
    assert listed(memory, ("docs",)) == [] and listed(memory, ()) == []
    put(memory, item("k", "keyed"))
    assert listed(memory, ("docs",)) == ["k"] and listed(memory, ()) == ["k"]
    assert [r.id for r in memory.handle(ListMemories(limit=None)).memories] == ["k", "plain"]
