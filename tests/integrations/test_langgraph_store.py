"""MnemexStore, LangGraph's BaseStore on mnemex: against LangGraph's own InMemoryStore
as the oracle (a stateful comparison of puts, deletes, gets, filtered searches,
semantic searches and namespace listings), batches all or none, concurrent
batches, restarts, TTL, and a graph using the store.

LangGraph is asyncio: async tests run their coroutine with ``asyncio.run``."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

pytest.importorskip("langgraph")

from langchain_core.embeddings import Embeddings
from langgraph.graph import START, StateGraph
from langgraph.store.base import GetOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

import mnemex
from mnemex.integrations.langgraph import MnemexStore


class LetterEmbeddings(Embeddings):
    """Deterministic embeddings: letter frequencies projected on fixed random rows."""

    def __init__(self, dims: int = 24) -> None:
        rng = random.Random(5)
        self.dims = dims
        self.rows = {c: [rng.gauss(0, 1) for _ in range(dims)] for c in "abcdefghijklmnopqrstuvwxyz0123456789 "}

    def _one(self, text: str) -> list[float]:
        counts = Counter(c for c in text.lower() if c in self.rows)
        vector = [sum(n * self.rows[c][i] for c, n in counts.items()) for i in range(self.dims)]
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else [1.0] + [0.0] * (self.dims - 1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


INDEX: Any = {"embed": LetterEmbeddings(), "dims": 24, "fields": ["text", "tags[*]"]}


def memory() -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing")


def on_disk(path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(path / "data"), embedder="hashing")


def as_dicts(items: list[Any]) -> list[tuple[Any, ...]]:
    return [(tuple(i.namespace), i.key, i.value) for i in items]


NAMESPACES = [("docs",), ("docs", "u1"), ("docs", "u2"), ("users", "u1", "prefs"), ("users", "u2")]
WORDS = ["python", "pasta", "rust", "tea", "garden", "music", "chess", "travel"]
TAGS = ["code", "food", "hobby", "sport"]  # never a text: InMemoryStore mixes up equal texts of one item


class StoreAgainstInMemory(RuleBasedStateMachine):
    """Every operation on a MnemexStore and on LangGraph's InMemoryStore (same model)
    gives the same answer."""

    def __init__(self) -> None:
        super().__init__()
        self.client = mnemex.Client(memory())
        self.ours = MnemexStore(self.client, index=INDEX)
        self.theirs = InMemoryStore(index=INDEX)

    def teardown(self) -> None:
        self.client.close()

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from("abcdef"),
          words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), n=st.integers(0, 5),
          tags=st.lists(st.sampled_from(TAGS), max_size=2, unique=True), indexed=st.booleans())
    def put(self, ns: tuple[str, ...], key: str, words: list[str], n: int, tags: list[str],
            indexed: bool) -> None:
        value = {"text": " ".join(words), "n": n, "tags": tags}
        # InMemoryStore keeps the old vectors of an item put again: all of them when it is
        # put unindexed, those of the paths the new value lacks (fewer tags) otherwise; an
        # item put again is a new item, so theirs is emptied of the old one first
        self.theirs.delete(ns, key)
        for store in (self.ours, self.theirs):
            store.put(ns, key, value, index=None if indexed else False)

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from("abcdef"))
    def delete(self, ns: tuple[str, ...], key: str) -> None:
        for store in (self.ours, self.theirs):
            store.delete(ns, key)

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from("abcdef"))
    def get(self, ns: tuple[str, ...], key: str) -> None:
        ours, theirs = self.ours.get(ns, key), self.theirs.get(ns, key)
        assert (ours is None) == (theirs is None)
        if ours is not None and theirs is not None:
            assert (ours.namespace, ours.key, ours.value) == (theirs.namespace, theirs.key, theirs.value)

    @rule(prefix=st.sampled_from([(), ("docs",), ("users",), ("docs", "u1")]),
          flt=st.sampled_from([None, {"n": 3}, {"n": {"$gt": 2}}, {"n": {"$lte": 1}, "text": "tea"},
                               {"n": {"$ne": 0}}]))
    def search_filtered(self, prefix: tuple[str, ...], flt: dict[str, Any] | None) -> None:
        ours = self.ours.search(prefix, filter=flt, limit=100)
        theirs = self.theirs.search(prefix, filter=flt, limit=100)
        assert sorted(as_dicts(ours)) == sorted(as_dicts(theirs))
        assert all(item.score is None for item in ours)

    @rule(prefix=st.sampled_from([(), ("docs",), ("users", "u1")]), query=st.sampled_from(WORDS),
          limit=st.integers(1, 6), offset=st.integers(0, 3))
    def search_semantic(self, prefix: tuple[str, ...], query: str, limit: int, offset: int) -> None:
        ours = self.ours.search(prefix, query=query, limit=limit, offset=offset)
        theirs = self.theirs.search(prefix, query=query, limit=limit, offset=offset)
        # scored hits: the same cosines in the same order (equal scores may swap)
        ours_scored = [i for i in ours if i.score is not None]
        theirs_scored = [i for i in theirs if i.score is not None]
        assert [s.score for s in ours_scored] == pytest.approx([s.score for s in theirs_scored], abs=1e-5)
        every = [i for i in self.theirs.search(prefix, query=query, limit=1000) if i.score is not None]
        for a, b in zip(ours_scored, theirs_scored, strict=True):
            tied = [o for o in every if abs(o.score - b.score) < 1e-5]  # type: ignore[operator]
            if len(tied) == 1:
                assert (a.namespace, a.key) == (b.namespace, b.key)
        # the items that are not indexed come after, unscored (InMemoryStore forgets the
        # offset for them, and their order is not defined: compare them on a first page
        # that holds them all)
        assert all(i.score is None for i in ours[len(ours_scored):])
        assert len(ours) == len(theirs) or offset > 0
        if offset == 0 and len(theirs) < limit:
            assert sorted(as_dicts(ours[len(ours_scored):])) == sorted(as_dicts(theirs[len(theirs_scored):]))

    @rule(prefix=st.sampled_from([None, ("docs",), ("users", "*")]), suffix=st.sampled_from([None, ("u2",)]),
          depth=st.sampled_from([None, 1, 2]))
    def list_namespaces(self, prefix: tuple[str, ...] | None, suffix: tuple[str, ...] | None,
                        depth: int | None) -> None:
        # InMemoryStore lists a namespace emptied (or only deleted from) as if it held items
        held = [ns for ns, items in self.theirs._data.items() if items]
        theirs = self.theirs.list_namespaces(prefix=prefix, suffix=suffix)
        theirs = [ns for ns in theirs if ns in held]
        if depth is not None:
            theirs = sorted({ns[:depth] for ns in theirs})
        assert self.ours.list_namespaces(prefix=prefix, suffix=suffix, max_depth=depth) == theirs


StoreAgainstInMemory.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
TestStoreAgainstInMemory = StoreAgainstInMemory.TestCase


def test_a_failed_batch_stores_nothing() -> None:
    with mnemex.Client(memory()) as client:
        store = MnemexStore(client, index=INDEX)
        store.put(("docs",), "a", {"text": "kept"})
        too_big = {"text": "x" * 20_000}
        with pytest.raises(mnemex.TooLarge):
            store.batch([PutOp(("docs",), "a", {"text": "changed"}), PutOp(("docs",), "b", {"text": "new"}),
                         PutOp(("docs",), "c", too_big)])
        assert store.get(("docs",), "a").value == {"text": "kept"}  # type: ignore[union-attr]
        assert store.get(("docs",), "b") is None
        with pytest.raises(mnemex.InvalidInput):
            store.batch([PutOp(("docs",), "b", {"text": "new"}), PutOp(("bad.label",), "x", {"a": 1})])
        assert store.get(("docs",), "b") is None


def test_reads_in_a_batch_see_the_store_before_its_puts() -> None:
    with mnemex.Client(memory()) as client:
        store = MnemexStore(client)
        store.put(("ns",), "k", {"v": 1})
        got, _, search = store.batch([GetOp(("ns",), "k"), PutOp(("ns",), "k", {"v": 2}), SearchOp(("ns",))])
        assert got.value == {"v": 1} and [i.value for i in search] == [{"v": 1}]  # type: ignore[union-attr]
        assert store.get(("ns",), "k").value == {"v": 2}  # type: ignore[union-attr]


def test_the_same_value_under_two_keys_is_two_items() -> None:
    with mnemex.Client(memory()) as client:
        store = MnemexStore(client, index=INDEX)
        store.put(("a",), "1", {"text": "same"})
        store.put(("b",), "2", {"text": "same"})
        store.delete(("a",), "1")
        assert store.get(("b",), "2").value == {"text": "same"}  # type: ignore[union-attr]
        assert [i.key for i in store.search(("b",), query="same")] == ["2"]


def test_an_item_is_found_by_the_best_of_its_indexed_fields() -> None:
    with mnemex.Client(memory()) as client:
        store = MnemexStore(client, index=INDEX)
        store.put(("docs",), "multi", {"text": "zzz qqq", "tags": ["music", "garden"]})
        store.put(("docs",), "plain", {"text": "musical"})
        hits = store.search(("docs",), query="garden")
        assert hits[0].key == "multi" and hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_concurrent_async_batches_never_interleave() -> None:
    async def main(store: MnemexStore) -> None:
        async def writer(tag: str) -> None:
            for _ in range(5):
                await store.abatch([PutOp(("kv",), str(i), {"tag": tag}) for i in range(10)])

        await asyncio.gather(*(writer(t) for t in "xyz"))

    with mnemex.Client(memory()) as client:
        store = MnemexStore(client)
        asyncio.run(main(store))
        values = {item.value["tag"] for item in store.search(("kv",), limit=100)}
        assert len(store.search(("kv",), limit=100)) == 10 and len(values) == 1


def test_the_store_survives_a_restart_with_its_vectors(tmp_path: Path) -> None:
    with mnemex.Client(on_disk(tmp_path)) as client:
        store = MnemexStore(client, index=INDEX)
        for i, word in enumerate(WORDS):
            store.put(("docs", f"u{i % 2}"), word, {"text": word, "tags": [word[::-1]]})
        before = [(i.key, i.score) for i in store.search(("docs",), query="pasta", limit=3)]
    with mnemex.Client(on_disk(tmp_path)) as client:
        store = MnemexStore(client, index=INDEX)
        assert [(i.key, i.score) for i in store.search(("docs",), query="pasta", limit=3)] == before
        assert store.list_namespaces() == [("docs", "u0"), ("docs", "u1")]


def test_a_store_with_another_model_is_refused_rather_than_mixing_vectors() -> None:
    with mnemex.Client(memory()) as client:
        MnemexStore(client, index=INDEX).put(("d",), "a", {"text": "x"})
        other = MnemexStore(client, index={"embed": LetterEmbeddings(dims=8), "dims": 8})
        with pytest.raises(mnemex.InvalidInput, match="never mixed"):
            other.put(("d",), "b", {"text": "y"})


def test_items_expire_refresh_on_read_and_are_swept() -> None:
    with mnemex.Client(memory()) as client:
        store = MnemexStore(client, ttl={"default_ttl": 10.0, "refresh_on_read": True})
        store.put(("t",), "long", {"v": 2})
        store.put(("t",), "forever", {"v": 3}, ttl=None)
        # last, and long enough (600 ms) to be listed below on a busy machine too
        store.put(("t",), "short", {"v": 1}, ttl=0.01)
        long_id = client.scope(user_id="store", app_name="langgraph").memories_in(("t",)).memories
        first = {r.key: r.expires_at for r in long_id}
        assert first["forever"] is None and first["long"] is not None
        deadline = time.time() + 5
        while time.time() <= (first["short"] or 0) and time.time() < deadline:
            time.sleep(0.005)
        assert store.get(("t",), "short") is None
        assert store.get(("t",), "long") is not None
        again = {r.key: r.expires_at for r in
                 client.scope(user_id="store", app_name="langgraph").memories_in(("t",)).memories}
        assert again["long"] > first["long"]  # type: ignore[operator]
        assert [i.key for i in store.search(("t",))] in (["forever", "long"], ["long", "forever"])
        assert store.sweep_ttl() == 1


def test_a_graph_reads_and_writes_the_store() -> None:
    from langgraph.runtime import Runtime

    def remember(state: dict[str, Any], runtime: Runtime[Any]) -> dict[str, Any]:
        assert runtime.store is not None
        runtime.store.put(("memories", state["user"]), state["fact"][:8], {"text": state["fact"]})
        hits = runtime.store.search(("memories", state["user"]), query=state["fact"], limit=1)
        return {"found": hits[0].value["text"]}

    builder = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    with mnemex.Client(memory()) as client:
        graph = builder.compile(store=MnemexStore(client, index=INDEX))
        result = graph.invoke({"user": "ada", "fact": "likes chess"})
        assert result["found"] == "likes chess"


def test_bad_input_is_refused() -> None:
    with mnemex.Client(memory()) as client:
        store = MnemexStore(client)
        with pytest.raises(mnemex.InvalidInput):
            store.batch([PutOp((), "k", {"a": 1})])
        with pytest.raises(mnemex.InvalidInput):
            store.batch([PutOp(("a.b",), "k", {"a": 1})])
        with pytest.raises(mnemex.InvalidInput):
            store.search(("x",), filter={"n": {"$regex": "a"}})
        with pytest.raises(mnemex.InvalidInput):
            MnemexStore(client, index={"embed": LetterEmbeddings(), "dims": 0})
        with pytest.raises(mnemex.InvalidInput):
            MnemexStore("data")  # type: ignore[arg-type]


def test_an_async_store_embeds_with_an_async_model() -> None:
    model = LetterEmbeddings()

    async def aembed(texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(0)
        return model.embed_documents(texts)

    async def main(store: MnemexStore) -> list[str]:
        await store.aput(("docs",), "tea", {"text": "green tea"})
        await store.aput(("docs",), "chess", {"text": "chess openings"})
        return [item.key for item in await store.asearch(("docs",), query="tea", limit=1)]

    with mnemex.Client(memory()) as client:
        store = MnemexStore(client, index={"embed": aembed, "dims": 24, "fields": ["text"]})
        assert asyncio.run(main(store)) == ["tea"]
