"""The same calls in-process and through ``mnemex.connect`` give the same answers
(ids and clock readings aside: each side makes its own) and raise the same errors."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest
import trio

import mnemex
from mnemex.memories.protocol import Session
from mnemex.remote import RemoteRuntime

Runtime = mnemex.MnemexRuntime | RemoteRuntime

# what each side makes for itself: ids from its own clock, times, access counts, timings
_OWN = frozenset({"id", "ids", "timestamp", "created_at", "updated_at", "last_accessed_at", "access_count",
                  "ingested_at", "superseded_by", "merged_into", "seconds", "first_id", "memory_id",
                  "ids_added", "merged", "sequence_at", "at", "now", "valid_at", "last_touched",
                  "first_seen", "last_seen"})


_MEMORY_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")


def plain(value: Any) -> Any:
    """``value`` as builtins, without what each side makes for itself."""
    value = msgspec.json.decode(msgspec.json.encode(value))  # Raw messages as their JSON

    def strip(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: strip(v) for k, v in item.items() if k not in _OWN and not k.endswith("_at")}
        if isinstance(item, list):
            return [strip(v) for v in item]
        if isinstance(item, str) and _MEMORY_ID.fullmatch(item):
            return "<id>"  # an id one side made, inside a list
        return item

    return strip(value)


def hits(result: mnemex.SearchResult) -> list[tuple[str, float]]:
    return [(hit.memory.content, round(hit.score, 6)) for hit in result.hits]


FACTS = ["User writes Java at work", "User lives in Lisbon", "User likes green tea",
         "The user's sister is called Ana", "User plays the cello on weekends",
         "User prefers dark mode in every editor", "User is allergic to peanuts"]


async def scope_session(rt: Runtime) -> dict[str, Any]:
    """Every scope call once; what each answered, as builtins."""
    out: dict[str, Any] = {}
    scope = rt.scope(user_id="alice", app_name="chat")
    ids = [await scope.remember(FACTS[0], importance=0.9, categories=["work"])]
    ids += await scope.remember_many([*FACTS[1:5], {"content": FACTS[5], "metadata": {"topic": "ui"}}])
    out["duplicate_same_id"] = await scope.remember(FACTS[0]) == ids[0]
    for mode in ("keyword", "fulltext", "vector", "hybrid"):
        out[f"search_{mode}"] = hits(await scope.search("where does the user live?", 5, mode))
        out[f"search_java_{mode}"] = hits(await scope.search("java", 3, mode, None))
    out["filtered"] = hits(await scope.search("user", 10, "keyword", filter={"categories": "work"}))
    out["get"] = plain(await scope.get(ids[1]))
    out["update"] = plain(await scope.update(ids[2], content="User likes jasmine tea", importance=0.2))
    out["search_after_update"] = hits(await scope.search("jasmine", 3, "fulltext"))
    out["history"] = plain(await scope.history(ids[2]))
    out["forget"] = await scope.forget(ids[3])
    out["forget_again"] = await scope.forget(ids[3])
    out["forget_many"] = len(await scope.forget_many([ids[4], "nope"]))
    out["forget_where"] = len(await scope.forget_where({"metadata": {"topic": "ui"}}))
    out["count"] = await scope.count()
    out["count_history"] = await scope.count(include_history=True)
    out["memories"] = plain(await scope.memories(limit=2, offset=1))
    out["stats"] = plain(await scope.stats())
    out["recall"] = await scope.recall("java")
    session = Session(id="s9", app_name="chat", user_id="alice", events=[
        mnemex.memories.protocol.Event(author="user", content="I moved to Porto last year", timestamp=1.7e9),
        mnemex.memories.protocol.Event(author="assistant", content="Porto is lovely", timestamp=1.7e9 + 1)])
    out["add_session"] = plain(await scope.add_session(session))
    out["add_session_again"] = plain(await scope.add_session(session))
    report = await scope.ingest(b"# Notes\n\nThe user keeps bees on the roof.\n", "text/markdown",
                                title="notes", extract=False)
    out["ingest"] = plain(report)
    out["documents"] = plain(await scope.documents())
    out["search_document"] = hits(await scope.search("bees", 3, "fulltext"))
    out["forget_document"] = len(await scope.forget_document(report.document.id))
    out["across"] = hits(await rt.search("tea", [("chat", "alice"), ("chat", "bob")], 5, mode="fulltext"))
    out["many_scopes"] = len(await rt.remember_many([("chat", "bob", {"content": "Bob likes tea"}),
                                                     ("chat", "carol", {"content": "Carol likes coffee"})]))
    everyone = [("chat", "alice"), ("chat", "bob"), ("chat", "carol")]
    out["across_after"] = hits(await rt.search("likes", everyone, 5, mode="keyword"))
    out["export"] = (await _export(rt))
    return out


async def _export(rt: Runtime) -> list[Any]:
    import io

    out = io.StringIO()
    header = await rt.export_data(out, [("chat", "bob")], include_vectors=False)
    return [header.scopes, header.memories, len(out.getvalue().splitlines())]


async def agent_session(rt: Runtime) -> dict[str, Any]:
    out: dict[str, Any] = {}
    agent = rt.agent("bot", policy=mnemex.MaxMessages(4))
    out["append"] = plain(await agent.append("s1", [{"role": "user", "content": "I'm John, I write Java"},
                                                    {"role": "assistant", "content": "Hi John"}]))
    out["items"] = plain(await agent.append_items("s1", [{"type": "function_call", "call_id": "c1",
                                                          "name": "f", "arguments": "{}"},
                                                         {"type": "function_call_output", "call_id": "c1",
                                                          "output": "42"}]))
    await agent.append("s1", [{"role": "user", "content": "what is my name?", "extra": [1, 2]}],
                       query_id="q1")
    out["history"] = plain(await agent.history("s1"))
    out["history_last"] = plain(await agent.history("s1", last=2))
    out["context"] = await agent.context("s1")
    out["context_view"] = plain(await agent.context_view("s1", max_tokens=50))
    out["messages"] = plain(await agent.messages("s1", limit=2, offset=1))
    out["messages_query"] = plain(await agent.messages(query_id="q1"))
    out["pop"] = plain(await agent.pop("s1"))
    out["pop_unknown"] = await agent.pop("nope")
    out["sessions"] = plain(await agent.sessions())
    out["stats"] = plain(await agent.stats())
    out["record_turn"] = plain(await agent.record_turn("s2", [{"role": "user", "content": "tea please"},
                                                              {"role": "assistant", "content": "here"}],
                                                       usage={"prompt_tokens": 3}))
    out["turns"] = plain(await agent.turns("s2"))
    out["search_turns"] = plain(await agent.search_turns("tea"))
    out["complete"] = plain(await agent.complete("s2"))
    out["archive"] = plain(await rt.archive("bot", "s1", user_id="john", app_name="chat"))
    out["archived_count"] = await rt.scope(user_id="john", app_name="chat").count()
    out["set_policy"] = plain(await agent.set_policy(mnemex.KeepAll()))
    out["set_ttl"] = plain(await agent.set_ttl(3600.0))
    out["expired"] = await agent.cleanup_expired()
    out["delete"] = await agent.delete_session("s2")
    out["delete_unknown"] = await agent.delete_session("s2")
    out["delete_all"] = plain(await agent.delete_all())
    out["after"] = plain(await agent.sessions())
    return out


async def test_scope_calls_answer_alike_in_process_and_remote(
        local: mnemex.MnemexRuntime, remote: RemoteRuntime) -> None:
    here = await scope_session(local)
    there = await scope_session(remote)
    assert here.keys() == there.keys()
    for name in here:
        assert there[name] == here[name], name
    assert here["search_hybrid"] and here["search_java_vector"]  # the comparisons compared something


async def test_agent_calls_answer_alike_in_process_and_remote(
        local: mnemex.MnemexRuntime, remote: RemoteRuntime) -> None:
    here = await agent_session(local)
    there = await agent_session(remote)
    for name in here:
        assert there[name] == here[name], name
    assert len(here["history"]) == 5


async def test_extraction_runs_on_the_server(local: mnemex.MnemexRuntime, remote: RemoteRuntime) -> None:
    results = []
    for rt in (local, remote):
        agent = rt.agent("bot")
        await agent.append("s1", [{"role": "user", "content": "My name is John and I live in Berlin."},
                                  {"role": "user", "content": "Remember that I like hiking."}])
        extracted = await rt.extract("bot", "s1", user_id="john", app_name="chat")
        page = await rt.scope(user_id="john", app_name="chat").memories()
        results.append((extracted.status, sorted(m.content for m in page.memories)))
    assert results[0] == results[1]
    assert results[0][1]


ERRORS: list[tuple[str, Any]] = [
    ("empty content", lambda rt: rt.scope(user_id="u", app_name="a").remember("")),
    ("bad importance", lambda rt: rt.scope(user_id="u", app_name="a").remember("x", importance=3)),
    ("too large", lambda rt: rt.scope(user_id="u", app_name="a").remember("x" * 20_000)),
    ("unknown field", lambda rt: rt.scope(user_id="u", app_name="a").remember("x", colour="red")),
    ("unknown id", lambda rt: rt.scope(user_id="u", app_name="a").get("m-nope")),
    ("unknown history", lambda rt: rt.scope(user_id="u", app_name="a").history("m-nope")),
    ("update unknown", lambda rt: rt.scope(user_id="u", app_name="a").update("m-nope", importance=0.1)),
    ("empty filter", lambda rt: rt.scope(user_id="u", app_name="a").forget_where({})),
    ("bad filter", lambda rt: rt.scope(user_id="u", app_name="a").search("x", filter={"nope": 1})),
    ("bad top_k", lambda rt: rt.scope(user_id="u", app_name="a").search("x", 0)),
    ("bad mode", lambda rt: rt.scope(user_id="u", app_name="a").search("x", 3, "magic")),
    ("bad message", lambda rt: rt.agent("bot").append("s", [{"role": "wizard", "content": "x"}])),
    ("tool without call", lambda rt: rt.agent("bot").append("s", [{"role": "tool", "content": "x",
                                                                    "tool_call_id": "c9"}])),
    ("empty session id", lambda rt: rt.agent("bot").append("", [{"role": "user", "content": "x"}])),
    ("bad batch", lambda rt: rt.remember_many([("a", "u", {"content": "ok"}), ("a", "v", {"content": ""})])),
    ("archive unknown", lambda rt: rt.archive("bot", "nope", user_id="u", app_name="a")),
    ("unknown document", lambda rt: rt.scope(user_id="u", app_name="a").extract_document("d-nope")),
]


@pytest.mark.parametrize(("name", "call"), ERRORS, ids=[name for name, _ in ERRORS])
async def test_errors_are_the_same_exceptions_remotely(name: str, call: Any, local: mnemex.MnemexRuntime,
                                                       remote: RemoteRuntime) -> None:
    raised = []
    for rt in (local, remote):
        with pytest.raises(mnemex.MnemexError) as info:
            await call(rt)
        raised.append((type(info.value), getattr(info.value, "field", None)))
    assert raised[1] == raised[0]


async def test_a_failed_batch_stores_nothing_remotely(remote: RemoteRuntime) -> None:
    with pytest.raises(mnemex.InvalidInput) as info:
        await remote.remember_many([("a", "u", {"content": "kept?"}), ("a", "v", {"content": "x" * 20_000})])
    assert info.value.field == "memories[1].content"
    assert await remote.scope(user_id="u", app_name="a").count() == 0


async def test_session_stream_alike(local: mnemex.MnemexRuntime, remote: RemoteRuntime) -> None:
    seen: list[list[Any]] = []
    for rt in (local, remote):
        agent = rt.agent("bot")
        await agent.append("s1", [{"role": "user", "content": "one"}])
        events: list[Any] = []
        async with agent.subscribe("s1", from_beginning=True) as stream, trio.open_nursery() as nursery:
            async def write(agent: mnemex.AgentRef = agent) -> None:
                await agent.append("s1", [{"role": "assistant", "content": "two"}])
                await agent.relay("s1", {"object": "chat.completion.chunk", "n": 1})
                await agent.complete("s1")

            async for event in stream:
                events.append((event.kind, event.live, event.message.message if event.message else None,
                               bytes(event.chunk) if event.chunk else None))
                if event.kind == "live":
                    nursery.start_soon(write)
        seen.append(events)
    assert seen[1] == seen[0]
    assert [kind for kind, *_ in seen[0]] == ["message", "live", "message", "chunk", "completed"]


async def test_a_stream_of_an_unknown_session_is_not_found_or_waits(remote: RemoteRuntime) -> None:
    agent = remote.agent("bot")
    with pytest.raises(mnemex.NotFound):
        async with agent.subscribe("nobody"):
            pass
    with trio.fail_after(10):
        async with agent.subscribe("later", wait_for_session=True, timeout=5) as stream, \
                trio.open_nursery() as nursery:
            nursery.start_soon(agent.append, "later", [{"role": "user", "content": "here"}])
            kinds = []
            async for event in stream:
                kinds.append(event.kind)
                if event.kind == "message":
                    break
    assert kinds == ["live", "message"]


async def test_closing_a_stream_frees_it_on_the_server(remote: RemoteRuntime) -> None:
    agent = remote.agent("bot")
    await agent.append("s1", [{"role": "user", "content": "one"}])
    for _ in range(3):
        async with agent.subscribe("s1") as stream:
            assert (await stream.__anext__()).kind == "live"
    await agent.append("s1", [{"role": "user", "content": "two"}])  # nobody left to tell: no error
    assert len(await agent.history("s1")) == 2


async def state_and_checkpoints(rt: Runtime) -> dict[str, Any]:
    from mnemex.checkpoints.protocol import Blob

    out: dict[str, Any] = {}
    app, user = rt.state(app_name="chat"), rt.state(app_name="chat", user_id="alice")
    await app.update({"theme": "dark", "n": 1})
    await user.update({"lang": "pt"})
    await app.update({"n": 2}, remove=["theme"])
    out["app"] = await app.get()
    out["user"] = await user.get(["lang", "missing"])
    await user.clear()
    out["cleared"] = await user.get()
    threads = rt.checkpoints()
    await threads.put("t1", "c1", Blob("json", b'{"v": 1}'), metadata={"step": 1})
    await threads.put("t1", "c2", Blob("json", b'{"v": 2}'), metadata={"step": 2}, parent_id="c1")
    out["latest"] = plain(await threads.get("t1"))
    out["list"] = plain(await threads.list("t1"))
    out["deleted"] = await threads.delete_thread("t1")
    out["after"] = plain(await threads.get("t1"))
    return out


async def test_state_and_checkpoints_answer_alike(local: mnemex.MnemexRuntime, remote: RemoteRuntime) -> None:
    here = await state_and_checkpoints(local)
    there = await state_and_checkpoints(remote)
    assert there == here
    assert here["app"] == {"n": 2} and here["latest"] is not None


async def keyed_categories_and_sessions(rt: Runtime) -> dict[str, Any]:
    out: dict[str, Any] = {}
    scope = rt.scope(user_id="alice", app_name="store")
    put = await scope.put([
        {"id": "k1", "content": "User likes tea", "namespace": ["prefs"], "key": "drink"},
        {"id": "k2", "content": "User lives in Porto", "namespace": ["facts"], "key": "home"}])
    out["put"] = plain(put)
    out["replace"] = plain(await scope.put([{"id": "k1", "content": "User likes coffee",
                                             "namespace": ["prefs"], "key": "drink"}]))
    out["get_replaced"] = (await scope.get("k1")).content
    out["namespaces"] = plain(await scope.list_namespaces())
    out["search_keyed"] = hits(await scope.search("coffee", 3, "fulltext"))
    out["categories"] = plain(await scope.categories())
    out["facets"] = plain(await scope.facets())
    out["forget_expired"] = await scope.forget_expired()
    agent = rt.agent("adk")
    out["create"] = plain(await agent.create_session("s1", {"step": 1}))
    out["create_again"] = plain(await agent.create_session("s1", {"step": 9}))
    out["update_state"] = plain(await agent.update_state("s1", {"step": 2}, remove=[]))
    await agent.append("s1", [{"role": "user", "content": "hello"}])
    out["read"] = plain(await agent.read_session("s1"))
    out["read_unknown"] = await agent.read_session("nope")
    out["headers"] = plain(await agent.session_headers())
    return out


async def test_keyed_memories_categories_and_session_headers_answer_alike(
        local: mnemex.MnemexRuntime, remote: RemoteRuntime) -> None:
    here = await keyed_categories_and_sessions(local)
    there = await keyed_categories_and_sessions(remote)
    for name in here:
        assert there[name] == here[name], name
    assert here["get_replaced"] == "User likes coffee"


async def entity_graph(rt: Runtime) -> dict[str, Any]:
    out: dict[str, Any] = {}
    scope = rt.scope(user_id="alice", app_name="graph")
    await scope.remember_many(["Ana lives in Porto with Bruno", "Bruno works at Acme in Lisbon",
                               "Ana plays the cello"])
    out["declare"] = plain(await scope.declare_entity("Ana Silva", "person", aliases=["Ana"]))
    out["entities"] = plain(await scope.entities())
    out["entity"] = plain(await scope.entity("Ana"))
    out["related"] = plain(await scope.related("Ana", 2))
    out["merge"] = plain(await scope.merge_entities(["Bruno"], into="Ana Silva"))
    out["unmerge"] = plain(await scope.unmerge_entity("Bruno"))
    out["stats"] = plain(await scope.graph_stats())
    out["unknown"] = await _error_of(scope.entity("Nobody"))
    return out


async def _error_of(call: Any) -> Any:
    try:
        return plain(await call)
    except mnemex.MnemexError as exc:
        return type(exc).__name__


async def test_the_entity_graph_answers_alike(local: mnemex.MnemexRuntime, remote: RemoteRuntime) -> None:
    here = await entity_graph(local)
    there = await entity_graph(remote)
    for name in here:
        assert there[name] == here[name], name
    assert here["entities"] and here["unknown"] == "NotFound"
