"""Responses items and pop through the runtime: refs and the blocking client, a restart
on disk replaying pops, live streams, extraction and archiving of item sessions, and
the HTTP API, which reads item sessions but takes only chat messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

import mnemex
from mnemex.server import Server, ServerSettings

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "I live in Lisbon. What's the weather?"},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Lisbon"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "It is sunny in Lisbon.", "annotations": []}]},
]


def memory() -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing")


async def test_items_pop_and_the_newest_history_through_the_async_ref(tmp_path: Path) -> None:
    config = mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")
    async with mnemex.open_runtime(config) as rt:
        agent = rt.agent("assistant")
        appended = await agent.append_items("s1", ITEMS, query_id="q1")
        assert (appended.first_sequence, appended.count) == (1, 5)
        assert [m.message for m in await agent.history("s1")] == ITEMS
        assert [m.message for m in await agent.history("s1", last=2)] == ITEMS[-2:]
        popped = await agent.pop("s1")
        assert popped is not None and popped.message == ITEMS[-1] and popped.sequence == 5
        assert popped.query_id == "q1"
        assert await agent.pop("nobody") is None
        assert (await agent.append_items("s1", [ITEMS[-1]])).first_sequence == 6
        await agent.pop("s1")
    async with mnemex.open_runtime(config) as rt:  # replayed from the journal
        agent = rt.agent("assistant")
        assert [m.message for m in await agent.history("s1")] == ITEMS[:-1]
        assert (await agent.append_items("s1", [ITEMS[-1]])).first_sequence == 7


def test_the_blocking_client_appends_items_and_pops() -> None:
    with mnemex.Client(memory()) as client:
        agent = client.agent("assistant")
        assert agent.append_items("s", ITEMS).count == 5
        assert [m.message for m in agent.history("s", last=1)] == ITEMS[-1:]
        popped = agent.pop("s")
        assert popped is not None and popped.message == ITEMS[-1]
        assert agent.stats().sessions["s"].message_count == 4
        assert agent.delete_session("s") and agent.pop("s") is None


async def test_a_live_stream_shows_items_and_goes_on_after_a_pop() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("assistant")
        await agent.append_items("s", ITEMS[:1])
        async with agent.subscribe("s", from_beginning=True) as stream:
            assert [(await anext(stream)).kind for _ in range(2)] == ["message", "live"]
            await agent.pop("s")
            await agent.append_items("s", ITEMS[1:3])
            got = [await anext(stream), await anext(stream)]
            assert [event.message.message for event in got if event.message] == ITEMS[1:3]
            await agent.complete("s")
            assert [event.kind async for event in stream] == ["completed"]


async def test_extraction_reads_the_messages_of_an_item_session_and_skips_the_rest() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        await rt.agent("assistant").append_items("s1", ITEMS)
        done = await rt.extract("assistant", "s1", user_id="ana", app_name="chat")
        assert done.status == "committed" and (done.first, done.upto) == (0, 5)
        contents = [m.content for m in (await rt.scope(user_id="ana", app_name="chat").memories()).memories]
        assert any("Lisbon" in content for content in contents)


async def test_archiving_an_item_session_keeps_its_messages_with_text() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        await rt.agent("assistant").append_items("s1", ITEMS)
        added = await rt.archive("assistant", "s1", user_id="ana", app_name="chat")
        assert added.added == 2
        memories = (await rt.scope(user_id="ana", app_name="chat").memories()).memories
        assert sorted(m.content for m in memories) == ["I live in Lisbon. What's the weather?",
                                                       "It is sunny in Lisbon."]


async def test_http_reads_item_sessions_and_takes_only_chat_messages(tmp_path: Path) -> None:
    config = mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")
    async with mnemex.open_runtime(config) as rt:  # items are written through the API, not over HTTP
        await rt.agent("default").append_items("s1", ITEMS)
    server = Server(config, ServerSettings(host="127.0.0.1", port=0, agent="default"))
    await trio.to_thread.run_sync(server.start)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as http:
            refused = await http.post("/messages", json={"session_id": "chat", "messages": ITEMS[1:2]})
            assert refused.status_code == 400 and "role" in refused.json()["error"]
            body = (await http.get("/messages", params={"session_id": "s1"})).json()
            assert [record["message"] for record in body["messages"]] == ITEMS
            context = (await http.get("/context", params={"session_id": "s1"})).json()
            assert context["messages"] == ITEMS
    finally:
        await trio.to_thread.run_sync(server.close)
