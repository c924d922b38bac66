"""The blocking Client written out: every ref call typed, streams as iterators,
errors never dropped, and mypy --strict catching a misspelled method."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mnemex
from mnemex.testing import Add, counter_kind


def memory_config() -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing")


def test_the_blocking_agent_and_scope_make_every_call_of_the_async_refs() -> None:
    with mnemex.Client(memory_config()) as client:
        agent = client.agent("assistant", policy=mnemex.MaxMessages(n=10))
        appended = agent.append("s1", [{"role": "user", "content": "I'm John, I write Java"}])
        assert (appended.count, appended.message_count) == (1, 1)
        context = agent.context_for_model_call("s1", [{"role": "user", "content": "what do I write?"}])
        assert [m["content"] for m in context] == ["I'm John, I write Java", "what do I write?"]
        turn = agent.record_turn("s1", [{"role": "assistant", "content": "Java"}],
                                 usage={"prompt_tokens": 12, "completion_tokens": 1}, iteration=1)
        assert turn.input_tokens == 12 and agent.turns("s1")[-1].iteration == 1
        assert [h.turn.iteration for h in agent.search_turns("Java")] == [1]
        assert len(agent.history("s1")) == 3 and agent.messages("s1").total == 3
        assert [s.session_id for s in agent.sessions()] == ["s1"]
        assert agent.context_view("s1").kept == 3 and agent.stats().sessions["s1"].message_count == 3

        scope = client.scope(user_id="alice", app_name="chat")
        first = scope.remember("Alice writes Java at a bank", importance=0.7)
        ids = scope.remember_many(["Alice's dog is called Rex", {"content": "Alice lives in Lisbon"}])
        assert scope.count() == 3 and scope.get(first).importance == 0.7
        assert scope.update(ids[1], content="Alice lives in Berlin").content == "Alice lives in Berlin"
        assert scope.search("dog", mode="keyword").hits[0].memory.id == ids[0]
        assert "Rex" in scope.recall("dog", mode="keyword")
        assert scope.forget(ids[0]) and scope.forget_many([ids[1], "nope"]) == [ids[1]]
        assert [m.id for m in scope.memories().memories] == [first]
        added = client.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert added.added >= 2 and scope.stats().count == scope.count()
        hits = client.search("Java", [("chat", "alice")], mode="keyword").hits
        assert hits and all(hit.user_id == "alice" for hit in hits)
        assert scope.forget_where({"author": "user"}) and client.flush_touches() >= 0


def test_a_session_streams_through_a_blocking_iterator() -> None:
    with mnemex.Client(memory_config()) as client:
        agent = client.agent("bot")
        agent.append("s", [{"role": "user", "content": "hi"}])
        with agent.subscribe("s", from_beginning=True) as stream:
            first = next(stream)
            assert first.kind == "message" and first.message is not None
            assert next(stream).kind == "live"
            agent.append("s", [{"role": "assistant", "content": "hello"}])
            live = next(stream)
            assert live.live and live.message is not None and live.message.message["content"] == "hello"
            agent.complete("s")
            assert [event.kind for event in stream] == ["completed"]


def chain(error: BaseException | None) -> str:
    seen = []
    while error is not None:
        seen.append(repr(error))
        error = error.__cause__ or error.__context__
    return " <- ".join(seen)


def test_an_error_after_start_up_reaches_the_next_call_then_calls_are_refused() -> None:
    import trio

    client = mnemex.Client(mnemex.Config(data_dir=None), kinds=[counter_kind()])
    assert client.ask("counter", "c", Add(1)) == 1

    async def explode() -> None:
        raise RuntimeError("the runtime's task broke")

    # a failure inside the runtime's own trio run, after start-up: it ends the run
    trio.from_thread.run_sync(trio.lowlevel.spawn_system_task, explode, trio_token=client._bridge._token)
    client._bridge._thread.join(timeout=10)
    with pytest.raises(BaseException) as failure:
        client.ask("counter", "c", Add(1))
    assert not isinstance(failure.value, mnemex.ActorClosed)
    assert "the runtime's task broke" in chain(failure.value)
    with pytest.raises(mnemex.ActorClosed):  # reported once; then the client is simply closed
        client.ask("counter", "c", Add(1))
    client.close()


def test_close_raises_an_error_no_call_reported() -> None:
    import trio

    client = mnemex.Client(mnemex.Config(data_dir=None), kinds=[counter_kind()])

    async def explode() -> None:
        raise RuntimeError("broke while idle")

    trio.from_thread.run_sync(trio.lowlevel.spawn_system_task, explode, trio_token=client._bridge._token)
    client._bridge._thread.join(timeout=10)
    with pytest.raises(BaseException) as failure:
        client.close()
    assert "broke while idle" in chain(failure.value)
    client.close()  # reported once: closing again is quiet


SCRIPT = """
import mnemex

def main() -> None:
    with mnemex.Client(mnemex.Config(data_dir=None, embedder="hashing")) as client:
        agent = client.agent("assistant")
        agent.{method}("s1", [{{"role": "user", "content": "hi"}}])
        context: list[dict[str, object]] = agent.context("s1")
        hits = client.scope(user_id="alice", app_name="chat").search("java", top_k=3).hits
        print(context, [hit.memory.content for hit in hits])
"""


@pytest.mark.slow
@pytest.mark.parametrize(("method", "passes"), [("append", True), ("apend", False)])
def test_mypy_strict_checks_a_user_script_against_the_client(tmp_path: Path, method: str, passes: bool) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(SCRIPT.format(method=method)))
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
                         capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)
    if passes:
        assert run.returncode == 0, run.stdout + run.stderr
    else:
        assert run.returncode == 1 and '"BlockingAgent" has no attribute "apend"' in run.stdout, run.stdout
