"""MnemexSession, the OpenAI Agents SDK's session on mnemex: the protocol with any item
shape, the SDK's Runner with tools and reasoning through it, O(1) pops, limits and
settings as SQLiteSession has them, persistence, sharing a data directory, threads,
loops and cancellation.

The SDK is asyncio: each test is a plain function running its coroutine with
``asyncio.run`` (the project's pytest runs trio; these never enter trio's mode)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Summary

import mnemex
from mnemex.integrations.openai_agents import MnemexSession

T = TypeVar("T")
NO_TRACING = RunConfig(tracing_disabled=True)

ITEMS: list[Any] = [
    {"role": "user", "content": "weather in Paris and Rome?"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "two cities"}],
     "encrypted_content": "gAAAA..."},
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"Paris"}',
     "id": "fc_1"},
    {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city":"Rome"}',
     "id": "fc_2"},
    {"type": "function_call_output", "call_id": "c2", "output": "rain"},
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "sun"}]},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "Sun in Paris, rain in Rome.", "annotations": []}]},
]


def memory() -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing")


def on_disk(path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(path / "data"), embedder="hashing")


def run(make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(make())  # type: ignore[arg-type]


@pytest.fixture
def client() -> Any:
    with mnemex.Client(memory()) as client:
        yield client


def test_it_is_a_session_of_the_sdk(client: mnemex.Client) -> None:
    session = MnemexSession("s", client)
    assert isinstance(session, Session)
    assert isinstance(session.session_settings, SessionSettings) and session.session_settings.limit is None


def test_items_of_any_shape_come_back_as_given_and_pop_newest_first(client: mnemex.Client) -> None:
    async def main() -> None:
        session = MnemexSession("s", client)
        assert await session.pop_item() is None
        await session.add_items(ITEMS)
        await session.add_items([])
        assert await session.get_items() == ITEMS
        assert await session.pop_item() == ITEMS[-1]
        assert await session.pop_item() == ITEMS[-2]
        assert await session.get_items() == ITEMS[:-2]
        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.add_items(ITEMS[:1])
        assert await session.get_items() == ITEMS[:1]

    run(main)


def test_sessions_of_one_agent_are_apart_and_agents_are_apart(client: mnemex.Client) -> None:
    async def main() -> None:
        one, two, other = MnemexSession("a", client), MnemexSession("b", client), MnemexSession(
            "a", client, agent="other")
        await one.add_items(ITEMS[:2])
        await two.add_items(ITEMS[2:3])
        assert await two.pop_item() == ITEMS[2]
        assert await one.get_items() == ITEMS[:2] and await other.get_items() == []
        await one.clear_session()
        assert await two.get_items() == []

    run(main)


@pytest.mark.parametrize(("limit", "settings", "expected"), [
    (2, None, ITEMS[-2:]), (100, None, ITEMS), (0, None, []), (-1, None, ITEMS), (None, None, ITEMS),
    (None, SessionSettings(limit=3), ITEMS[-3:]), (1, {"limit": 5}, ITEMS[-1:]), (None, {"limit": 0}, []),
])
def test_get_items_reads_the_newest_limit_items_in_order(client: mnemex.Client, limit: int | None,
                                                         settings: Any, expected: list[Any]) -> None:
    async def main() -> list[Any]:
        session = MnemexSession("s", client, session_settings=settings)
        await session.add_items(ITEMS)
        return await session.get_items(limit)

    assert run(main) == expected


def test_unknown_session_settings_are_refused(client: mnemex.Client) -> None:
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        MnemexSession("s", client, session_settings={"limitt": 1})


def test_what_json_cannot_hold_or_what_is_not_an_item_stores_nothing(client: mnemex.Client) -> None:
    async def main() -> None:
        session = MnemexSession("s", client)
        with pytest.raises(TypeError):
            await session.add_items([ITEMS[0], {"role": "user", "content": object()}])  # type: ignore[list-item]
        with pytest.raises(mnemex.InvalidInput, match="role 'critic'"):
            await session.add_items([ITEMS[0], {"role": "critic", "content": "x"}])  # type: ignore[list-item]
        assert await session.get_items() == []
        await session.add_items(ITEMS[:1])
        assert await session.get_items() == ITEMS[:1]

    run(main)


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return {"Paris": "sun", "Rome": "rain"}.get(city, "fog")


def test_the_runner_keeps_calls_outputs_and_reasoning_in_the_session(client: mnemex.Client) -> None:
    async def main() -> None:
        session = MnemexSession("conversation", client, agent="assistant")
        model = ScriptedModel()
        agent = Agent(name="assistant", model=model, tools=[weather])
        thinking = ResponseReasoningItem(id="rs_1", type="reasoning",
                                         summary=[Summary(text="look both up", type="summary_text")])
        model.enqueue([thinking, function_call("weather", {"city": "Paris"}, call_id="c1"),
                       function_call("weather", {"city": "Rome"}, call_id="c2")])
        model.enqueue([assistant_message("Sun in Paris, rain in Rome.")])
        first = await Runner.run(agent, "Weather in Paris and Rome?", session=session, run_config=NO_TRACING)
        assert first.final_output == "Sun in Paris, rain in Rome."
        stored = await session.get_items()
        assert [item.get("type", "message") for item in stored] == [
            "message", "reasoning", "function_call", "function_call", "function_call_output",
            "function_call_output", "message"]
        outputs = {item["output"] for item in stored if item.get("type") == "function_call_output"}
        assert outputs == {"sun", "rain"}

        model.enqueue([assistant_message("You asked about Paris and Rome.")])
        streamed = Runner.run_streamed(agent, "What did I ask?", session=session, run_config=NO_TRACING)
        async for _ in streamed.stream_events():
            pass
        assert model.calls[-1].input[:len(stored)] == stored  # the history went to the model
        assert len(await session.get_items()) == len(stored) + 2

        # a correction: take the last exchange back, as the SDK's docs show with pop_item
        assert (await session.pop_item() or {}).get("role") == "assistant"
        assert (await session.pop_item() or {}).get("content") == "What did I ask?"
        assert await session.get_items() == stored

    run(main)


def test_pop_takes_one_small_journal_line_whatever_the_session_holds(tmp_path: Path) -> None:
    async def main(session: MnemexSession, journal: Callable[[], int]) -> None:
        await session.add_items([{"role": "user", "content": f"message {i} " + "x" * 200}
                                 for i in range(3000)])
        before = journal()
        for _ in range(10):
            await session.pop_item()
        assert journal() - before < 10 * 200  # a pop line is ~120 bytes; the session holds ~700 KB
        assert len(await session.get_items()) == 2990

    with mnemex.Client(on_disk(tmp_path)) as client:
        def journal() -> int:
            return sum(p.stat().st_size for p in (tmp_path / "data" / "agents").rglob("journal.jsonl"))

        asyncio.run(main(MnemexSession("long", client), journal))


def test_sessions_survive_a_restart_and_share_a_data_directory_they_opened(tmp_path: Path) -> None:
    async def write() -> None:
        one, two = MnemexSession("one", on_disk(tmp_path)), MnemexSession("two", tmp_path / "data")
        assert one.client is two.client  # one runtime per data directory
        await one.add_items(ITEMS)
        await one.pop_item()
        await two.add_items(ITEMS[:1])
        one.close()
        one.close()
        assert await two.get_items() == ITEMS[:1]  # still open: two uses it
        for closed_call in (one.get_items(), one.add_items([]), one.pop_item(), one.clear_session()):
            with pytest.raises(mnemex.ActorClosed, match="MnemexSession 'one' is closed"):
                await closed_call
        two.close()

    asyncio.run(write())
    with mnemex.Client(on_disk(tmp_path)) as client:  # the directory was released
        assert run(MnemexSession("one", client).get_items) == ITEMS[:-1]
        assert run(MnemexSession("two", client).get_items) == ITEMS[:1]


def test_threads_with_their_own_loops_share_a_session(client: mnemex.Client) -> None:
    session = MnemexSession("s", client)

    def add(i: int) -> None:
        asyncio.run(session.add_items([{"role": "user", "content": f"m{i}"}]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(add, range(40)))
    items = run(session.get_items)
    assert sorted(item["content"] for item in items) == sorted(f"m{i}" for i in range(40))


def test_a_cancelled_write_completes_before_the_cancellation_is_raised(client: mnemex.Client) -> None:
    async def main() -> None:
        session = MnemexSession("s", client)
        await session.add_items(ITEMS[:1])
        for write in (session.add_items(ITEMS[1:3]), session.pop_item(), session.clear_session()):
            task = asyncio.ensure_future(write)
            await asyncio.sleep(0)  # started: the call is on its way to the runtime
            task.cancel()
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert task.cancelled()
            if write.__qualname__.endswith("add_items"):
                assert await session.get_items() == ITEMS[:3]
            elif write.__qualname__.endswith("pop_item"):
                assert await session.get_items() == ITEMS[:2]
        assert await session.get_items() == []

    run(main)


def test_a_pruned_session_gives_the_context_under_the_policy_whole_per_response(
        client: mnemex.Client) -> None:
    client.agent("openai-agents").set_policy(mnemex.MaxMessages(n=4), session_id="s")

    async def main() -> None:
        session = MnemexSession("s", client, pruned=True)
        await session.add_items(ITEMS)
        # reasoning, two calls and their outputs are one response: more than 4, kept whole
        assert await session.get_items() == ITEMS[-1:]
        await session.add_items([{"role": "user", "content": "thanks"}])
        assert await session.get_items() == [ITEMS[-1], {"role": "user", "content": "thanks"}]
        assert await session.get_items(1) == [{"role": "user", "content": "thanks"}]

    run(main)
    assert len(client.agent("openai-agents").history("s")) == len(ITEMS) + 1  # nothing was dropped
