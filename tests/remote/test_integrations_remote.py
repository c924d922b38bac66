"""The framework adapters over ``mnemex.Client(url=...)``: what several workers of
``adk web`` or of the LangGraph server share through one ``mnemex serve``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, TypedDict

import pytest
from remote_servers import config_at, served, url_of

import mnemex


def test_adk_sessions_and_memory_through_a_remote_client(tmp_path: Path) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events import Event
    from google.genai import types

    from mnemex.integrations.adk import MnemexMemoryService, MnemexSessionService

    with served(config_at(tmp_path)) as server, mnemex.Client(url=url_of(server)) as one, \
            mnemex.Client(url=url_of(server)) as other:  # two workers
        async def main() -> tuple[Any, Any]:
            created = await MnemexSessionService(one).create_session(
                app_name="app", user_id="u", state={"app:theme": "dark", "step": 1})
            event = Event(author="user", invocation_id="i1", content=types.Content(
                role="user", parts=[types.Part(text="I love hiking in the Alps")]))
            await MnemexSessionService(one).append_event(created, event)
            seen = await MnemexSessionService(other).get_session(app_name="app", user_id="u",
                                                                 session_id=created.id)
            assert seen is not None
            await MnemexMemoryService(other).add_session_to_memory(seen)
            found = await MnemexMemoryService(one).search_memory(app_name="app", user_id="u", query="hiking")
            return seen, found

        seen, found = asyncio.run(main())
    assert [e.content.parts[0].text for e in seen.events] == ["I love hiking in the Alps"]
    assert seen.state == {"app:theme": "dark", "step": 1}
    assert "hiking" in found.memories[0].content.parts[0].text


def test_langgraph_checkpoints_and_store_through_a_remote_client(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from langgraph.graph import END, START, StateGraph

    from mnemex.integrations.langgraph import MnemexSaver, MnemexStore

    class Counter(TypedDict):
        n: int

    def step(state: Counter) -> Counter:
        return {"n": state["n"] + 1}

    graph = StateGraph(Counter)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_edge("step", END)
    thread: Any = {"configurable": {"thread_id": "t1"}}
    with served(config_at(tmp_path)) as server:
        with mnemex.Client(url=url_of(server)) as one:
            app = graph.compile(checkpointer=MnemexSaver(one))
            assert app.invoke({"n": 1}, thread) == {"n": 2}
            MnemexStore(one).put(("users", "u1"), "prefs", {"drink": "tea"})
        with mnemex.Client(url=url_of(server)) as other:  # another worker sees both
            app = graph.compile(checkpointer=MnemexSaver(other))
            assert app.get_state(thread).values == {"n": 2}
            assert app.invoke({"n": 5}, thread) == {"n": 6}
            item = MnemexStore(other).get(("users", "u1"), "prefs")
            assert item is not None and item.value == {"drink": "tea"}
