"""Long-term memory through ``mnemex.open_runtime``: isolation between scopes under
random concurrent operations, persistence round trips, multi-scope search,
sessions, archiving an agent's session, batched access counts, the embedding
batcher, the HNSW graph beside the actor, and embedder changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waiting import eventually

import mnemex
import mnemex.lowlevel
from mnemex._ids import IdClock
from mnemex.memories.context import format_as_context
from mnemex.memories.protocol import Event, SearchRequest, Session
from mnemex.memories.service import MemoryService
from mnemex.models import batcher as batcher_module
from mnemex.models.batcher import EmbeddingBatcher
from mnemex.models.hashing import HashingEmbedder

WORDS = ["tea", "coffee", "Java", "hiking", "Paris", "dog", "guitar", "bank", "painting", "camping"]
SCOPES = [("chat", "alice"), ("chat", "bob"), ("mail", "alice")]
MODES = ["keyword", "fulltext", "vector", "hybrid"]


def config(tmp_path: Path | None = None, **overrides: Any) -> mnemex.Config:
    """The runtime's behaviour, not the model's: the hashing embedder unless a test
    names another (the default model has tests of its own)."""
    overrides.setdefault("embedder", "hashing")
    return mnemex.Config(data_dir=str(tmp_path) if tmp_path is not None else None, **overrides)


def signature(result: mnemex.SearchResult) -> list[tuple[str, float, dict[str, float], str, str]]:
    return [(h.memory.id, h.score, h.scores, h.app_name, h.user_id) for h in result.hits]


# -- isolation ------------------------------------------------------------------------------
OPERATIONS = st.lists(st.tuples(
    st.sampled_from(["remember", "remember", "search", "forget", "session", "count"]),
    st.integers(0, len(SCOPES) - 1),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    st.sampled_from(MODES),
    st.integers(0, 3),
), min_size=1, max_size=25)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workers=st.lists(OPERATIONS, min_size=1, max_size=4))
def test_search_never_returns_another_scopes_memory(workers: list[list[Any]]) -> None:
    stored: dict[tuple[str, str], set[str]] = {scope: set() for scope in SCOPES}
    started: dict[tuple[str, str], int] = dict.fromkeys(SCOPES, 0)  # writes sent, maybe not answered

    async def main() -> None:
        async with mnemex.open_runtime(config(touch_interval=0.01)) as rt:
            service = MemoryService(rt.scope_services())

            async def worker(number: int, operations: list[Any]) -> None:
                for step, (what, which, words, mode, pause) in enumerate(operations):
                    for _ in range(pause):
                        await trio.lowlevel.checkpoint()
                    app, user = SCOPES[which]
                    scope = rt.scope(user_id=user, app_name=app)
                    text = " ".join(words)
                    tag = f"[scope {which}]"  # what each memory says about where it belongs
                    if what in ("remember", "session"):
                        started[(app, user)] += 1
                    if what == "remember":
                        stored[(app, user)].add(await scope.remember(f"{text} ({number}.{step}) {tag}"))
                    elif what == "session":
                        session = Session(f"s{number}.{step}", app, user,
                                                 events=[Event("user", f"{text} {tag}", 1.0 + step)])
                        added = await service.add_session(session)
                        stored[(app, user)].update(added.ids)
                    elif what == "forget" and stored[(app, user)]:
                        await scope.forget(sorted(stored[(app, user)])[0])
                    elif what == "count":
                        assert await scope.count() <= started[(app, user)]
                    else:
                        result = await scope.search(text, top_k=10, mode=mode, min_score=-1.0)
                        # (an id may be stored before its writer saw the reply: check the tag)
                        for hit in result.hits:
                            assert (hit.app_name, hit.user_id) == (app, user)
                            assert hit.memory.content.endswith(tag)
                        response = await service.search(SearchRequest(query=text, user_id=user,
                                                                             app_name=app))
                        assert all(m.content.endswith(tag) for m in response.memories)

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    for number, operations in enumerate(workers):
                        nursery.start_soon(worker, number, operations)
            # afterwards, every word searched in every scope finds only that scope's memories
            for app, user in SCOPES:
                scope = rt.scope(user_id=user, app_name=app)
                for mode in MODES:
                    result = await scope.search(" ".join(WORDS), top_k=100, mode=mode, min_score=-1.0)
                    assert {h.memory.id for h in result.hits} <= stored[(app, user)]
                page = await scope.memories(limit=None)
                assert {m.id for m in page.memories} <= stored[(app, user)]

    trio.run(main)


# -- persistence ----------------------------------------------------------------------------
CORPUS = [
    ("I write Java at a bank", {"importance": 0.8, "categories": ["work"]}),
    ("My dog is called Rex", {"entities": ["Rex"]}),
    ("I went hiking near Paris last summer", {"entities": ["Paris"], "timestamp": 1_700_000_000.0}),
    ("I play guitar in a band", {"metadata": {"since": 2015}}),
    ("Tea in the morning, coffee after lunch", {"author": "user"}),
]
QUERIES = ["what does the user do at the bank", "Rex the dog", "Paris hiking", "music band guitar", "coffee"]


async def test_search_results_are_identical_after_a_restart(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    before: dict[tuple[str, str], Any] = {}
    async with mnemex.open_runtime(cfg) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        ids = [await scope.remember(text, **fields) for text, fields in CORPUS]
        await scope.remember_many([f"filler memory number {i} about tea" for i in range(40)])
        await scope.forget(ids[3])
        await scope.update(ids[0], importance=0.9)
        await scope.add_session(Session("s1", "chat", "alice", events=[
            Event("user", "I adopted a cat in Paris", 1_710_000_000.0)]))
        count = await scope.count()
        for query in QUERIES:
            for mode in MODES:
                before[(query, mode)] = signature(await scope.search(query, mode=mode, min_score=-1.0))
    async with mnemex.open_runtime(cfg) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        assert await scope.count() == count
        for (query, mode), expected in before.items():
            after = signature(await scope.search(query, mode=mode, min_score=-1.0))
            # access counts moved on (the searches above were counted); rankings did not
            assert [(i, s) for i, s, *_ in after] == [(i, s) for i, s, *_ in expected], (query, mode)
            assert after == expected or mode == "hybrid"


def test_journal_replay_through_the_kinds_codec_gives_the_same_state() -> None:
    from mnemex.memories.protocol import Forget, NewMemory, Remember, Touch
    from mnemex.memories.snapshot import encode_vector
    from mnemex.testing import Simulation

    kind = mnemex.lowlevel.scope_kind(config())
    embedder = kind.embedder
    assert embedder is not None
    sim = Simulation([kind])
    key = ("chat", "alice")
    for number, (text, _) in enumerate(CORPUS):
        memory = NewMemory(id=f"m{number}", content=text, vector=encode_vector(embedder.embed([text])[0]))
        sim.send(f"writer{number % 2}", "scope", key,
                 Remember(memories=[memory], embedder=embedder.name, dim=embedder.dim, now=10.0 + number))
    sim.send("writer0", "scope", key, Forget(ids=["m1"], now=20.0))
    sim.send("writer1", "scope", key, Touch(ids=["m2", "m0"], now=21.0))
    sim.run(lambda n: 0)
    assert all(d.error is None for d in sim.delivered)
    sim.check_replay("scope", key)
    sim.snapshot("scope", key)
    sim.restart("scope", key)
    sim.check_replay("scope", key)


# -- multi-scope search ----------------------------------------------------------------------------
async def test_multi_scope_search_merges_one_comparable_ranking() -> None:
    async with mnemex.open_runtime(config()) as rt:
        alice = rt.scope(user_id="alice", app_name="chat")
        bob = rt.scope(user_id="bob", app_name="chat")
        await alice.remember_many(["I love hiking in the Alps", "I write Java code", "tea every day"])
        await bob.remember_many(["hiking boots for sale", "my bank account", "Java beans coffee"] +
                                [f"bob filler {i}" for i in range(30)])
        for mode in MODES:
            scopes = [("chat", "alice"), ("chat", "bob"), ("chat", "carol")]
            merged = await rt.search("hiking Java", scopes=scopes, top_k=4, mode=mode, min_score=-1.0)
            scores = [h.score for h in merged.hits]
            assert scores == sorted(scores, reverse=True)
            assert {(h.app_name, h.user_id) for h in merged.hits} <= {("chat", "alice"), ("chat", "bob")}
            # each scope's own best hit keeps its score in the merged ranking
            own = await alice.search("hiking Java", top_k=1, mode=mode, min_score=-1.0)
            assert own.hits[0].score in scores or own.hits[0].score <= scores[-1]
        keyword = await rt.search("hiking", scopes=[("chat", "alice"), ("chat", "bob")], mode="keyword")
        assert {h.memory.content for h in keyword.hits} == {"I love hiking in the Alps",
                                                            "hiking boots for sale"}
        assert all(h.score == 1.0 for h in keyword.hits)
        with pytest.raises(mnemex.InvalidInput, match="app_name, user_id"):
            await rt.search("x", scopes=[("chat", "")])


# -- sessions -------------------------------------------------------------------------------------
async def test_add_session_is_idempotent_and_skips_events_without_text() -> None:
    async with mnemex.open_runtime(config(max_content_bytes=64)) as rt:
        service = MemoryService(rt.scope_services())
        session = Session("s1", "chat", "alice", events=[
            Event("user", "I moved to Lisbon in May", 1_714_000_000.0),
            Event("model", {"parts": [{"text": "Lisbon is lovely"}]}, 1_714_000_001.0),
            Event("model", None, 1_714_000_002.0),
            Event("model", {"parts": [{"function_call": {"name": "x"}}]}, 1_714_000_003.0),
            Event("user", " ".join(f"word{i}" for i in range(30)), 1_714_000_004.0),  # cut in pieces
        ])
        first = await service.add_session(session)
        assert first.added == len(first.ids) >= 4
        again = await service.add_session(session)
        assert again.added == 0 and again.ids == first.ids
        scope = rt.scope(user_id="alice", app_name="chat")
        assert await scope.count() == first.added
        request = SearchRequest(query="where did I move? Lisbon", user_id="alice", app_name="chat")
        response = await service.search(request)
        assert [m.content for m in response.memories][:2] == ["I moved to Lisbon in May", "Lisbon is lovely"]
        assert response.memories[0].author == "user"
        assert response.memories[0].timestamp == "2024-04-24T23:06:40Z"
        other = await service.search(SearchRequest(query="Lisbon", user_id="bob", app_name="chat"))
        assert other.memories == []
        with pytest.raises(mnemex.InvalidInput, match="not to this scope"):
            await rt.scope(user_id="bob", app_name="chat").add_session(session)


async def test_archive_moves_an_agents_session_into_memory() -> None:
    async with mnemex.open_runtime(config()) as rt:
        agent = rt.agent("assistant")
        await agent.append("s1", [
            {"role": "system", "content": "be kind"},
            {"role": "user", "content": "I'm allergic to peanuts"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "note", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "noted"},
            {"role": "assistant", "content": [{"type": "text", "text": "I'll remember that."}]},
        ])
        added = await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert added.added == 2
        again = await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert again.added == 0
        scope = rt.scope(user_id="alice", app_name="chat")
        page = await scope.memories(limit=None)
        assert [(m.author, m.content, m.session_id, m.source) for m in page.memories] == [
            ("user", "I'm allergic to peanuts", "s1", "session"),
            ("assistant", "I'll remember that.", "s1", "session")]
        assert len(await agent.history("s1")) == 5  # the agent keeps its session
        with pytest.raises(mnemex.NotFound):
            await rt.archive("assistant", "nope", user_id="alice", app_name="chat")


# -- access counts, batching ------------------------------------------------------------------------
async def test_searches_touch_their_hits_with_one_journal_line_per_interval(tmp_path: Path) -> None:
    cfg = config(tmp_path, touch_interval=3600.0)
    async with mnemex.open_runtime(cfg) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        [mid] = await scope.remember_many(["I drink green tea"])
        journal = next(tmp_path.rglob("journal.jsonl"))
        lines = len(journal.read_bytes().splitlines())
        for _ in range(25):
            assert (await scope.search("tea", mode="keyword")).hits
        assert len(journal.read_bytes().splitlines()) == lines  # no write per search
        assert (await scope.get(mid)).access_count == 0
        assert await rt.flush_touches() == 1
        record = await scope.get(mid)
        assert record.access_count == 25 and record.last_accessed_at > 0
        assert len(journal.read_bytes().splitlines()) == lines + 1
        await scope.search("tea", mode="keyword")
    async with mnemex.open_runtime(cfg) as rt:  # the last interval was flushed at shutdown
        assert (await rt.scope(user_id="alice", app_name="chat").get(mid)).access_count == 26


async def test_the_batcher_gathers_concurrent_texts_into_few_calls() -> None:
    async with mnemex.open_runtime(config(embed_batch_size=64)) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        batcher = rt.scope_services().batcher
        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(scope.remember, f"memory number {i}")
        assert await scope.count() == 40
        assert batcher.texts == 40 and batcher.calls < 40
        many = await scope.remember_many([f"bulk {i}" for i in range(150)])  # cut into calls of 64
        assert len(many) == 150 and batcher.calls >= 3


async def test_one_preempted_query_embed_does_not_send_the_next_queries_through_the_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hops = 0
    run_sync = trio.to_thread.run_sync

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return await run_sync(*args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)

    class SteadyClock:
        """Every timed call takes 2 microseconds: this machine's load (a test suite
        beside, CI) must not decide what the test is about, the batcher's reading of
        one slow call among fast ones."""

        now = 0.0

        def perf_counter(self) -> float:
            self.now += 1e-6
            return self.now

    monkeypatch.setattr(batcher_module, "time", SteadyClock())
    batcher = EmbeddingBatcher(HashingEmbedder(dim=64), batch_size=64)
    query = "what is the dog called?"
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        for _ in range(50):  # measured beside until it is known to be fast, then inline
            before = hops
            await batcher.embed([query])
            if hops == before:
                break
        else:
            pytest.fail("a short query to the hashing embedder never ran inline")
        for _ in range(5):  # the window of recent timings holds inline calls only (not the cold first ones)
            await batcher.embed([query])
        before = hops
        batcher._observe([query], 0.05)  # one call the scheduler held up for 50 ms
        for _ in range(20):
            await batcher.embed([query])
        assert hops == before
        for _ in range(3):  # an embedder that really became slow goes beside again
            batcher._observe([query], 0.05)
        await batcher.embed([query])
        assert hops == before + 1
        nursery.cancel_scope.cancel()


async def test_ids_sort_by_creation_time() -> None:
    clock = IdClock()
    ids = [clock.next(1_700_000_000.0 + i * 0.0001) for i in range(50)]
    ids += [clock.next(1_600_000_000.0)]  # a clock that went back still gives a later id
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and all(len(i) == 26 for i in ids)


# -- the HNSW graph, embedder changes -------------------------------------------------------------------
async def test_the_graph_is_built_beside_the_actor_and_survives_a_restart(tmp_path: Path) -> None:
    cfg = config(tmp_path, hnsw_threshold=200)
    async with mnemex.open_runtime(cfg) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        await scope.remember_many([f"memory {i} about {WORDS[i % 10]} and {WORDS[(i * 7) % 10]}"
                                   for i in range(300)])
        async def graph_built() -> bool:
            return (await scope.stats()).vector_mode == "hnsw"

        await eventually(graph_built, what="the HNSW graph, built in a worker thread", timeout=30)
        expected = signature(await scope.search("Paris guitar", mode="vector", min_score=-1.0))
    async with mnemex.open_runtime(cfg) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        stats = await scope.stats()
        assert stats.vector_mode == "hnsw" and not stats.graph_pending  # from the sidecar, not rebuilt
        got = signature(await scope.search("Paris guitar", mode="vector", min_score=-1.0))
        assert [(i, s) for i, s, *_ in got] == [(i, s) for i, s, *_ in expected]


async def test_a_scope_refuses_vectors_of_another_embedder_after_a_config_change(tmp_path: Path) -> None:
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        await rt.scope(user_id="u", app_name="a").remember("made with 384 dimensions")
    async with mnemex.open_runtime(config(tmp_path, embedder_dim=64)) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        with pytest.raises(mnemex.InvalidInput, match=r"set config\.models\.embedder back"):
            await scope.remember("made with 64 dimensions")
        with pytest.raises(mnemex.InvalidInput, match="never mixed"):
            await scope.search("dimensions", mode="hybrid")
        assert (await scope.search("dimensions", mode="fulltext")).hits  # text search still works
        assert await scope.count() == 1


# -- the blocking client and the tool --------------------------------------------------------------
def test_client_scope_blocks_in_the_calling_thread() -> None:
    with mnemex.Client(config()) as client:
        scope = client.scope(user_id="alice", app_name="chat")
        mid = scope.remember("User writes Java", importance=0.7)
        result = scope.search("what language does the user use? Java", top_k=5)
        assert result.hits[0].memory.id == mid
        assert client.search("Java", scopes=[("chat", "alice")]).hits[0].memory.id == mid
        assert scope.recall("Java") == "<mnemex-memory>\n[User Memory]\n- User writes Java\n</mnemex-memory>"


async def test_the_memory_tool_runs_a_models_call() -> None:
    async with mnemex.open_runtime(config()) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        await scope.remember_many(["I am vegetarian", "My sister lives in Oslo"])
        arguments = '{"query": "vegetarian food", "top_k": 1}'
        call = {"id": "call_1", "type": "function",
                "function": {"name": "search_memory_tool", "arguments": arguments}}
        message = await mnemex.execute_memory_tool(scope, call)
        assert message == {"role": "tool", "tool_call_id": "call_1",
                           "content": "<mnemex-memory>\n[User Memory]\n- I am vegetarian\n</mnemex-memory>"}
        nothing = await mnemex.execute_memory_tool(scope, {"query": "quantum chromodynamics"})
        assert "nothing relevant" in nothing["content"]
        with pytest.raises(mnemex.InvalidInput, match="arguments"):
            await mnemex.execute_memory_tool(scope, '{"question": "x"}')
        with pytest.raises(mnemex.InvalidInput, match="not search_memory_tool"):
            other = {"id": "c", "function": {"name": "other", "arguments": "{}"}}
            await mnemex.execute_memory_tool(scope, other)
        tool = mnemex.SEARCH_MEMORY_TOOL["function"]
        assert tool["name"] == "search_memory_tool" and tool["description"].startswith(
            "Search and recall relevant memories about the user.")


async def test_remember_refuses_oversized_content_before_embedding() -> None:
    async with mnemex.open_runtime(config()) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        with pytest.raises(mnemex.TooLarge, match=r"the limit is 10,240 \(config\.memories\.max_content_bytes\)"):
            await scope.remember("é" * 6000)
        with pytest.raises(mnemex.InvalidInput, match="unknown memory field"):
            await scope.remember("x", colour="red")
        assert rt.scope_services().batcher.texts == 0


async def test_fields_accept_datetimes_and_iso_strings_and_update_reembeds() -> None:
    from datetime import UTC, datetime

    async with mnemex.open_runtime(config()) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        first = await scope.remember("met Ana in Porto", timestamp=datetime(2024, 5, 1, tzinfo=UTC))
        second = await scope.remember("flew to Rome", timestamp="2024-06-01T12:00:00Z", categories=["trip"])
        assert (await scope.get(first)).timestamp == 1_714_521_600.0
        assert (await scope.get(second)).timestamp == 1_717_243_200.0
        assert await scope.count({"timestamp_after": "2024-05-15"}) == 1
        with pytest.raises(mnemex.InvalidInput, match="ISO 8601"):
            await scope.remember("x", timestamp="last tuesday")
        updated = await scope.update(second, content="flew to Milan", importance=0.9)
        assert updated.content == "flew to Milan" and updated.categories == ("trip",)
        hits = (await scope.search("Milan", mode="vector", min_score=0.3)).hits
        assert [h.memory.id for h in hits] == [second]
        assert await scope.forget_where({"categories": "trip"}) == [second]
        assert await scope.forget(first) and not await scope.forget(first)


def test_format_as_context_puts_each_memory_on_one_line() -> None:
    records = [mnemex.MemoryRecord(id="1", content="likes\n  green tea"),
               mnemex.MemoryRecord(id="2", content="a b")]
    assert format_as_context(records) == \
        "<mnemex-memory>\n[User Memory]\n- likes green tea\n- a b\n</mnemex-memory>"
    assert format_as_context([]) == ""


class _GatedEmbedder:
    """A hashing embedder that waits for a gate (a thread event) and can fail."""

    def __init__(self) -> None:
        import threading

        self.inner = HashingEmbedder(dim=64)
        self.name, self.dim = "gated", 64
        self.gate = threading.Event()
        self.fail = False
        self.calls = 0

    def embed(self, texts: Any) -> Any:
        self.calls += 1
        if not self.gate.wait(10):
            raise RuntimeError("gate never opened")
        if self.fail:
            raise RuntimeError("model exploded")
        return self.inner.embed(texts)


async def test_archive_embeds_beside_the_scope_while_agent_and_scope_keep_serving(tmp_path: Path) -> None:
    embedder = _GatedEmbedder()
    cfg = config(tmp_path)
    async with mnemex.open_runtime(cfg, kinds=[mnemex.lowlevel.scope_kind(cfg, embedder)]) as rt:
        agent = rt.agent("assistant")
        await agent.append("s1", [{"role": "user", "content": "My sister lives in Oslo", "name": "ann"},
                                  {"role": "assistant", "content": "Nice, Norway!"}])
        scope = rt.scope(user_id="alice", app_name="chat")
        results: list[mnemex.SessionAdded] = []
        async with trio.open_nursery() as nursery:
            async def archive() -> None:
                results.append(await rt.archive("assistant", "s1", user_id="alice", app_name="chat"))

            nursery.start_soon(archive)
            async def embedding() -> bool:
                return embedder.calls > 0

            await eventually(embedding, what="the session's embedding to start (in a worker thread)")
            # the embedding is pending: both actors still answer at once
            with trio.fail_after(2):
                await agent.append("s1", [{"role": "user", "content": "and my brother in Rome"}])
                assert await scope.count() == 0
            assert results == []
            embedder.gate.set()
        [added] = results
        assert added.added == 2 and len(added.ids) == 2
        memories = (await scope.memories(limit=None)).memories
        assert [(m.author, m.content) for m in memories] == [("ann", "My sister lives in Oslo"),
                                                              ("assistant", "Nice, Norway!")]
        assert memories[0].metadata == {"event_id": "assistant/s1/1", "role": "user"}
        assert memories[0].id < memories[1].id  # ids from one block, in order
        # the second archive embeds only the message that is new
        calls = embedder.calls
        again = await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert (again.added, again.ids[:2]) == (1, added.ids)
        assert embedder.calls == calls + 1
        hits = (await scope.search("Oslo sister", mode="vector", min_score=0.0)).hits
        assert hits[0].memory.content == "My sister lives in Oslo"
    # journaled as an AddSession with its vectors: a restart needs no model
    calls = embedder.calls
    async with mnemex.open_runtime(cfg, kinds=[mnemex.lowlevel.scope_kind(cfg, embedder)]) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        assert await scope.count() == 3
        assert embedder.calls == calls
        hits = (await scope.search("brother Rome", mode="vector", min_score=0.0)).hits
        assert hits[0].memory.content == "and my brother in Rome"


async def test_a_failed_archive_stores_nothing_and_says_why() -> None:
    embedder = _GatedEmbedder()
    embedder.gate.set()
    embedder.fail = True
    cfg = config()
    async with mnemex.open_runtime(cfg, kinds=[mnemex.lowlevel.scope_kind(cfg, embedder)]) as rt:
        await rt.agent("assistant").append("s1", [{"role": "user", "content": "I like chess"}])
        with pytest.raises(mnemex.MnemexError, match="model exploded"):
            await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert await rt.scope(user_id="alice", app_name="chat").count() == 0
        await rt.agent("assistant").append("s2", [{"role": "system", "content": "be brief"}])
        with pytest.raises(mnemex.NotFound, match="no session 's2' with text"):
            await rt.archive("assistant", "s2", user_id="alice", app_name="chat")
        for bad in ("", 3):
            with pytest.raises(mnemex.InvalidInput, match="user_id"):
                await rt.archive("assistant", "s1", user_id=bad, app_name="chat")  # type: ignore[arg-type]


async def test_the_default_model_finds_a_paraphrase_that_shares_no_word() -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=None)) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        [job, _pet, _trip] = await scope.remember_many([
            "I'm a software developer at a bank", "We adopted a grey cat called Miso",
            "Next spring we fly to Lisbon"])
        for mode in ("vector", "hybrid"):
            hits = (await scope.search("what does the user do for work?", mode=mode)).hits
            assert hits and hits[0].memory.id == job, mode
        assert (await scope.stats()).embedder == "minilm-l6-v2-int8"


@pytest.mark.parametrize("metadata", [{"a": {1, 2}}, {"a": object()}, {"a": float("nan")}, {"a": (1, 2)},
                                      {1: "x"}, {"deep": [[[]]] * 1 + [{"x": float("inf")}]}])
async def test_metadata_that_is_not_json_is_refused_before_embedding_and_before_the_actor(
        metadata: dict[Any, Any]) -> None:
    async with mnemex.open_runtime(config()) as rt:
        scope = rt.scope(user_id="u", app_name="a")
        with pytest.raises(mnemex.InvalidInput, match="metadata"):
            await scope.remember("hello", metadata=metadata)
        [mid] = await scope.remember_many(["hello"])
        with pytest.raises(mnemex.InvalidInput, match="metadata"):
            await scope.update(mid, metadata=metadata)
        assert rt.scope_services().batcher.texts == 1 and rt.stats().crashes == 0
        assert (await scope.get(mid)).metadata == {}


async def test_a_raw_command_that_cannot_be_journaled_is_refused_and_crashes_nothing() -> None:
    from mnemex.memories.protocol import NewMemory, Remember

    async with mnemex.open_runtime(config()) as rt:
        bad = Remember(memories=[NewMemory(id="m1", content="x", metadata={"a": object()})], now=1.0)
        with pytest.raises(mnemex.InvalidInput, match="cannot be journaled"):
            await rt.ask("scope", ("a", "u"), bad)
        assert rt.stats().crashes == 0 and await rt.scope(user_id="u", app_name="a").count() == 0
