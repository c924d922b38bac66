"""Short-term memory through the runtime: refs, restarts on disk, subscriptions,
TTL sweeps, the blocking client and the agent-loop helpers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from waiting import eventually

import mnemex
from mnemex.conversations.kind import sweep_expired_sessions
from mnemex.conversations.protocol import (
    ExpireSessions,
    FindExpired,
    MaxMessages,
    Stateless,
    StreamEvent,
    TokenBudget,
)


def memory() -> mnemex.Config:
    return mnemex.Config(data_dir=None)


def on_disk(path: Path, **overrides: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=str(path / "data"), **overrides)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


async def test_append_context_and_pages_through_the_runtime() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        first = await agent.append("s1", [{"role": "system", "content": "be brief"},
                                          mnemex.ChatMessage(role="user", content="I'm John, I write Java")])
        assert (first.first_sequence, first.count, first.message_count) == (1, 2, 2)
        call = assistant(None, tool_calls=[{"id": "c1", "type": "function",
                                            "function": {"name": "lookup", "arguments": "{}"}}])
        await agent.append("s1", [call, {"role": "tool", "tool_call_id": "c1", "content": "Java 21"}],
                           query_id="q1")
        assert await agent.context("s1") == [
            {"role": "system", "content": "be brief"}, user("I'm John, I write Java"), call,
            {"role": "tool", "tool_call_id": "c1", "content": "Java 21"}]
        page = await agent.messages(session_id="s1", limit=2, offset=1)
        assert [m.sequence for m in page.messages] == [2, 3] and page.total == 4
        assert page.messages[1].query_id == "q1" and page.messages[1].message == call
        assert (await agent.messages(limit=None)).total == 4
        assert (await agent.messages(session_id="nope")).messages == []
        assert [s.session_id for s in await agent.sessions()] == ["s1"]
        stats = await agent.stats()
        assert (stats.total_sessions, stats.total_messages, stats.sessions["s1"].query_count) == (1, 4, 1)
        with pytest.raises(mnemex.InvalidInput, match="role 'robot'"):
            await agent.append("s1", [{"role": "robot", "content": "x"}])
        assert len(await agent.history("s1")) == 4


async def test_returned_messages_are_copies_the_caller_may_change() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        await agent.append("s", [user("hi")])
        context = await agent.context("s")
        context[0]["content"] = "changed"
        (await agent.history("s"))[0].message["content"] = "changed too"
        assert await agent.context("s") == [user("hi")]


async def test_a_restart_keeps_history_policy_ttl_summary_and_sequences(tmp_path: Path) -> None:
    async with mnemex.open_runtime(on_disk(tmp_path)) as rt:
        agent = rt.agent("bot", policy=TokenBudget(400, keep_recent_turns=2), ttl=86_400)
        await agent.set_policy(MaxMessages(3), session_id="short")
        for i in range(12):
            await agent.append("long", [user(f"question {i} " * 4), assistant(f"answer {i} " * 4)])
        await agent.append("short", [user("a"), assistant("b"), user("c"), assistant("d")])
        assert (await agent.context_view("long")).pending_summary
        async def summarized() -> bool:
            return (await agent.context_view("long")).summary_version > 0

        await eventually(summarized, what="the summary (made in a worker thread)")
        before_context = await agent.context("long")
        before_all = await agent.messages(limit=None)
    async with mnemex.open_runtime(on_disk(tmp_path)) as rt:
        agent = rt.agent("bot")  # no policy given: the journaled one is kept
        view = await agent.context_view("long")
        assert view.policy == TokenBudget(400, keep_recent_turns=2) and view.summary_version == 1
        assert await agent.context("long") == before_context
        assert await agent.messages(limit=None) == before_all
        assert len(await agent.context("short")) == 3
        assert (await agent.stats()).ttl == 86_400
        again = await agent.append("short", [user("e")])
        assert again.first_sequence == before_all.total + 1


async def test_a_passivated_agent_comes_back_with_everything(tmp_path: Path) -> None:
    async with mnemex.open_runtime(on_disk(tmp_path)) as rt:
        agent = rt.agent("bot", policy=Stateless())
        await agent.append("s", [user("one")])
        await agent.append("s", [user("two")])
        await rt.passivate("agent", "bot")
        assert rt.live_keys("agent") == []
        assert await agent.context("s") == [user("two")]
        assert len(await agent.history("s")) == 2


async def test_policy_given_at_creation_is_journaled_once_per_runtime() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        for _ in range(5):
            await rt.agent("bot", policy=MaxMessages(2)).append("s", [user("x")])
        assert len(await rt.agent("bot").context("s")) == 2
        asks_before = rt.stats().asks
        await rt.agent("bot", policy=MaxMessages(2)).stats()
        assert rt.stats().asks == asks_before + 1  # no SetPolicy again


# -- subscriptions ------------------------------------------------------------------------
async def collect(stream: Any, into: list[StreamEvent]) -> None:
    async for event in stream:
        into.append(event)


async def test_subscribe_gives_history_then_a_live_marker_then_live_messages_until_completed() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        await agent.append("s", [user("old 1"), user("old 2")])
        events: list[StreamEvent] = []
        async with agent.subscribe("s", from_beginning=True) as stream, trio.open_nursery() as nursery:
            nursery.start_soon(collect, stream, events)  # ends with the stream, on completion
            await agent.append("s", [user("new 1")])
            await agent.append("s", [user("new 2")])
            await agent.complete("s")
        kinds = [(e.kind, e.live, e.message.message["content"] if e.message else None) for e in events]
        assert kinds == [("message", False, "old 1"), ("message", False, "old 2"), ("live", False, None),
                         ("message", True, "new 1"), ("message", True, "new 2"), ("completed", False, None)]
        assert [e.message.sequence for e in events if e.message] == [1, 2, 3, 4]


async def test_subscribe_without_from_beginning_starts_live_and_a_completed_session_ends_at_once() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        await agent.append("s", [user("old")])
        stream = agent.subscribe("s")
        await stream.open()
        await agent.append("s", [user("new")])
        await agent.delete_session("s")
        events = [event async for event in stream]
        assert [e.kind for e in events] == ["live", "message", "deleted"]
        await agent.append("done", [user("x")])
        await agent.complete("done")
        replay = [e.kind async for e in agent.subscribe("done", from_beginning=True)]
        assert replay == ["message", "completed"]


async def test_unknown_sessions_are_not_found_unless_waited_for() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        with pytest.raises(mnemex.NotFound, match="no session 'ghost'"):
            await agent.subscribe("ghost").open()
        events: list[StreamEvent] = []
        async with trio.open_nursery() as nursery:
            stream = agent.subscribe("later", wait_for_session=True, timeout=5)
            await stream.open()
            nursery.start_soon(collect, stream, events)
            await agent.append("later", [user("here")])
            await agent.complete("later")
        assert [e.kind for e in events] == ["live", "message", "completed"]


async def test_waiting_for_a_session_that_never_comes_times_out(
        autojump_clock: trio.testing.MockClock) -> None:
    async with mnemex.open_runtime(memory()) as rt:
        stream = rt.agent("bot").subscribe("never", wait_for_session=True, timeout=30)
        assert (await stream.__anext__()).kind == "live"
        started = trio.current_time()
        with pytest.raises(mnemex.Timeout, match="did not appear within 30 s"):
            await stream.__anext__()
        assert trio.current_time() - started == pytest.approx(30)


async def test_a_slow_subscriber_is_dropped_without_blocking_appends_or_others() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        await agent.append("s", [user("start")])
        slow = agent.subscribe("s", buffer=2)
        await slow.open()
        fast_events: list[StreamEvent] = []
        async with trio.open_nursery() as nursery:
            fast = agent.subscribe("s", buffer=2)
            await fast.open()
            nursery.start_soon(collect, fast, fast_events)
            for i in range(10):
                await agent.append("s", [user(f"m{i}")])
                await trio.testing.wait_all_tasks_blocked()
            await agent.complete("s")
        slow_events = [event async for event in slow]
        assert [e.kind for e in slow_events][-1] == "error"
        assert "fell 2 events behind" in slow_events[-1].detail
        assert [e.kind for e in fast_events].count("message") == 10 and fast_events[-1].kind == "completed"


async def test_closing_a_stream_frees_its_subscription_at_once() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        await agent.append("s", [user("x")])
        async with agent.subscribe("s") as stream:
            assert (await stream.__anext__()).kind == "live"
        for i in range(5):  # more than the buffer: nobody is there to overflow
            await agent.append("s", [user(f"{i}")])
        assert [event async for event in stream] == []


# -- TTL -------------------------------------------------------------------------------------
async def test_expired_sessions_go_on_access_on_cleanup_and_in_the_sweep(tmp_path: Path) -> None:
    async with mnemex.open_runtime(on_disk(tmp_path)) as rt:
        agent = rt.agent("bot", ttl=60)
        await agent.append("a", [user("x")])
        await agent.append("b", [user("y")])
        assert await agent.cleanup_expired() == []
        later = time.time() + 61
        assert sorted(await rt.ask("agent", "bot", FindExpired(now=later))) == ["a", "b"]
        assert await sweep_expired_sessions(rt.kernel, now=later) == 1
        assert await agent.sessions() == [] and await agent.history("a") == []
        assert await sweep_expired_sessions(rt.kernel, now=later) == 0  # nothing left: nothing journaled
        await agent.append("c", [user("z")])
        deleted = await rt.ask("agent", "bot", ExpireSessions(now=time.time() + 61))
        assert deleted.session_ids == ["c"]
    async with mnemex.open_runtime(on_disk(tmp_path)) as rt:
        assert await rt.agent("bot").sessions() == []  # the deletions were journaled


# -- blocking client and helpers ---------------------------------------------------------------
def test_the_blocking_client_offers_the_same_agent_calls(tmp_path: Path) -> None:
    with mnemex.Client(on_disk(tmp_path)) as client:
        agent = client.agent("bot", policy=MaxMessages(2))
        agent.append("s", [user("1"), user("2"), user("3")])
        assert agent.context("s") == [user("2"), user("3")]
        assert agent.messages("s").total == 3
    with mnemex.Client(on_disk(tmp_path)) as client:
        assert len(client.agent("bot").history("s")) == 3


async def test_the_agent_loop_helpers_store_turns_and_give_the_context() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        context = await agent.context_for_model_call("s", [user("book a flight to Lisbon")], query_id="q1")
        assert context == [user("book a flight to Lisbon")]
        turn = await agent.record_turn("s", [assistant("Booked flight TP123 to Lisbon.")], iteration=1,
                                 usage={"prompt_tokens": 50, "completion_tokens": 9}, query_id="q1")
        assert (turn.iteration, turn.input_tokens, turn.output_tokens) == (1, 50, 9)
        assert await agent.turns("s") == [turn]
        hits = await agent.search_turns("Lisbon flight")
        assert hits and hits[0].turn == turn
        with pytest.raises(mnemex.InvalidInput, match="at least one message"):
            await agent.record_turn("s", [])


async def test_bad_stream_arguments_are_rejected_before_anything_is_registered() -> None:
    async with mnemex.open_runtime(memory()) as rt:
        agent = rt.agent("bot")
        with pytest.raises(mnemex.InvalidInput, match="session_id"):
            agent.subscribe("")
        with pytest.raises(mnemex.InvalidInput, match="timeout"):
            agent.subscribe("s", timeout=0)
        with pytest.raises(mnemex.InvalidInput, match="policy must be"):
            rt.agent("bot", policy="lots")  # type: ignore[arg-type]
        with pytest.raises(mnemex.InvalidInput):
            rt.agent("")
