"""Google ADK on mnemex: MnemexSessionService and MnemexMemoryService.

ADK's own session contract (../shared/conformance/adk_sessions: 31 tests for each backend,
ADK's three beside mnemex) runs in a subprocess under its own pytest.ini (asyncio mode);
the rest are plain functions running their coroutine with ``asyncio.run`` (ADK is
asyncio; the project's pytest runs trio, and these never enter trio's mode): a
``Runner`` with ``preload_memory`` and ``load_memory`` on a scripted model, where
sessions, events and each kind of state are stored, restarts on disk, errors, and
ADK's memory cases (CJK text, ranking, ids)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.adk.tools import load_memory, preload_memory
from google.genai import types

import mnemex
from mnemex.integrations.adk import MnemexMemoryService, MnemexSessionService

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def run(make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(make())  # type: ignore[arg-type]


def memory() -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing")


def on_disk(path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(path / "data"), embedder="hashing")


@pytest.fixture
def client() -> Any:
    with mnemex.Client(memory()) as client:
        yield client


def text(value: str, role: str = "user") -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=value)])


def event(author: str, words: str | None = None, *, id: str | None = None, timestamp: float | None = None,
          **actions: Any) -> Event:
    fields: dict[str, Any] = {"author": author, "invocation_id": "inv"}
    if words is not None:
        fields["content"] = text(words, "user" if author == "user" else "model")
    if id is not None:
        fields["id"] = id
    if timestamp is not None:
        fields["timestamp"] = timestamp
    if actions:
        fields["actions"] = EventActions(**actions)
    return Event(**fields)


# -- ADK's session contract ---------------------------------------------------------------
def _shared() -> Path | None:
    for candidate in (REPO.parent / "shared", Path("/work/shared")):
        if (candidate / "conformance" / "adk_sessions" / "pytest.ini").exists():
            return candidate
    return None


@pytest.mark.slow
def test_adks_session_contract_passes_for_mnemex_and_adks_own_backends(tmp_path: Path) -> None:
    shared = _shared()
    if shared is None:
        pytest.skip("ADK's session contract is not here: it lives in ../shared/conformance/adk_sessions "
                    "beside the repository (or /work/shared)")
    pytest.importorskip("pytest_asyncio", reason="ADK's session contract runs on pytest-asyncio (test extra)")
    pytest.importorskip("aiosqlite", reason="ADK's database backend needs google-adk[db] (test extra)")
    suite = shared / "conformance" / "adk_sessions"
    report = tmp_path / "report.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(suite / "pytest.ini"),
         "--rootdir", str(suite), f"--junitxml={report}", "--basetemp", str(tmp_path / "runs"), str(suite)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    outcomes: dict[str, dict[str, int]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        backend = name[name.rindex("[") + 1:-1] if name.endswith("]") else "?"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = kinds[0] if kinds else "passed"
        if outcome == "skipped" and "xfail" in (case.find("skipped").get("type", "") or ""):  # type: ignore[union-attr]
            outcome = "xfailed"
        outcomes.setdefault(backend, {}).setdefault(outcome, 0)
        outcomes[backend][outcome] += 1
    assert outcomes.get("mnemex") == {"passed": 31}, (outcomes, done.stdout[-3000:])
    for backend in ("in_memory", "database", "sqlite"):  # ADK's own: the suite is sound on this machine
        assert set(outcomes.get(backend, {})) <= {"passed", "xfailed"}, (backend, outcomes,
                                                                          done.stdout[-3000:])
        assert sum(outcomes[backend].values()) == 31
    assert done.returncode == 0, done.stdout[-3000:]


# -- a Runner with memory -----------------------------------------------------------------
class RecallModel(BaseLlm):
    """A scripted model: with ``call_load_memory`` it first asks the load_memory tool for
    ``query``; it answers with the last line a memory tool put in its request (a past
    user message), or 'I don't know'."""

    model: str = "recall"
    call_load_memory: bool = False
    query: str = ""

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        parts = [part for content in llm_request.contents for part in content.parts or ()]
        responses = [part.function_response for part in parts if part.function_response is not None]
        if self.call_load_memory and not responses:
            call = types.FunctionCall(name="load_memory", args={"query": self.query}, id="call-1")
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        lines = [line for part in parts if part.text for line in part.text.splitlines()]
        for response in responses:  # load_memory's answer: {"result": LoadMemoryResponse(memories=[...])}
            for found in getattr((response.response or {}).get("result"), "memories", []):
                lines += [f"{found.author}: {part.text}" for part in found.content.parts or () if part.text]
        recalled = [line.removeprefix("user: ") for line in lines if line.startswith("user: ")]
        answer = recalled[-1] if recalled else "I don't know"
        yield LlmResponse(content=text(answer, "model"))


async def ask(runner: Runner, user_id: str, session_id: str, words: str) -> str:
    answer = ""
    async for produced in runner.run_async(user_id=user_id, session_id=session_id, new_message=text(words)):
        if produced.is_final_response() and produced.content and produced.content.parts:
            answer = produced.content.parts[0].text or ""
    return answer


@pytest.mark.parametrize("tool", ["preload_memory", "load_memory"])
def test_a_runner_remembers_an_earlier_session_through_mnemex(client: mnemex.Client, tool: str) -> None:
    async def main() -> None:
        sessions, memories = MnemexSessionService(client), MnemexMemoryService(client)
        model = RecallModel(call_load_memory=tool == "load_memory", query="dog")
        agent = LlmAgent(name="assistant", model=model, instruction="Answer from memory.",
                         tools=[preload_memory if tool == "preload_memory" else load_memory])
        runner = Runner(app_name="pets", agent=agent, session_service=sessions, memory_service=memories)
        first = await sessions.create_session(app_name="pets", user_id="ada")
        assert await ask(runner, "ada", first.id, "My dog is called Rex") == "I don't know"
        stored = await sessions.get_session(app_name="pets", user_id="ada", session_id=first.id)
        assert stored is not None and stored.events[0].author == "user"
        assert {e.author for e in stored.events[1:]} == {"assistant"}  # its answer (and a tool call, result)
        await memories.add_session_to_memory(stored)
        second = await sessions.create_session(app_name="pets", user_id="ada")
        assert await ask(runner, "ada", second.id, "What is my dog called?") == "My dog is called Rex"
        other = await sessions.create_session(app_name="pets", user_id="bob")
        assert await ask(runner, "bob", other.id, "What is my dog called?") == "I don't know"
        listed = await sessions.list_sessions(app_name="pets", user_id="ada")
        assert [s.id for s in listed.sessions] == [first.id, second.id]

    run(main)


# -- sessions and state -------------------------------------------------------------------
def test_each_kind_of_state_is_kept_where_it_belongs_and_temp_state_nowhere(client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexSessionService(client)
        session = await service.create_session(app_name="shop", user_id="ada", session_id="s1", state={
            "cart": ["book"], "app:currency": "EUR", "user:name": "Ada", "temp:scratch": 1})
        assert session.state == {"cart": ["book"], "app:currency": "EUR", "user:name": "Ada"}
        await service.append_event(session, event("user", "add a pen", state_delta={
            "cart": ["book", "pen"], "temp:step": 2, "user:vip": True, "app:sale": None}))
        assert session.state["temp:step"] == 2 and session.state["cart"] == ["book", "pen"]
        assert client.state(app_name="shop").get() == {"currency": "EUR", "sale": None}
        assert client.state(app_name="shop", user_id="ada").get() == {"name": "Ada", "vip": True}
        read = client.agent("adk:shop").read_session("ada/s1")
        assert read is not None and read.header.values() == {"cart": ["book", "pen"]}
        got = await service.get_session(app_name="shop", user_id="ada", session_id="s1")
        assert got is not None and "temp:step" not in got.state
        assert got.state == {"cart": ["book", "pen"], "app:currency": "EUR", "app:sale": None,
                             "user:name": "Ada", "user:vip": True}
        assert "temp:step" not in got.events[0].actions.state_delta
        assert await service.get_user_state(app_name="shop", user_id="ada") == {"name": "Ada", "vip": True}

    run(main)


def test_sessions_events_and_state_survive_a_restart(tmp_path: Path) -> None:
    async def write(client: mnemex.Client) -> Session:
        service = MnemexSessionService(client)
        session = await service.create_session(app_name="app", user_id="u/1", state={"step": 1})
        for n in range(5):
            await service.append_event(session, event("user", f"message {n}", timestamp=100.0 + n,
                                                      state_delta={"step": n, "user:seen": n}))
        return session

    async def read(client: mnemex.Client, session: Session) -> None:
        service = MnemexSessionService(client)
        got = await service.get_session(app_name="app", user_id="u/1", session_id=session.id)
        assert got == session  # events, state and last update time, as the writer saw them
        recent = await service.get_session(app_name="app", user_id="u/1", session_id=session.id,
                                           config=GetSessionConfig(num_recent_events=2))
        assert recent is not None and [e.timestamp for e in recent.events] == [103.0, 104.0]
        listed = await service.list_sessions(app_name="app")
        assert [(s.user_id, s.id, s.events) for s in listed.sessions] == [("u/1", session.id, [])]

    with mnemex.Client(on_disk(tmp_path)) as client:
        session = run(lambda: write(client))
    with mnemex.Client(on_disk(tmp_path)) as client:
        run(lambda: read(client, session))


def test_errors_of_the_contract_and_bad_input(client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexSessionService(client)
        session = await service.create_session(app_name="a", user_id="u", session_id="s", state={"k": 1})
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="a", user_id="u", session_id=" s ", state={"app:x": 1})
        assert client.state(app_name="a").get() == {}  # a refused create stores nothing
        await service.delete_session(app_name="a", user_id="u", session_id="s")
        with pytest.raises(SessionNotFoundError):
            await service.append_event(session, event("user", "late", state_delta={"user:x": 1}))
        assert await service.get_user_state(app_name="a", user_id="u") == {}  # nor a refused event
        await service.delete_session(app_name="a", user_id="u", session_id="s")  # deleting again: nothing
        with pytest.raises(mnemex.InvalidInput, match="app_name"):
            await service.get_session(app_name="", user_id="u", session_id="s")
        with pytest.raises(mnemex.InvalidInput, match="session_id"):
            await service.get_session(app_name="a", user_id="u", session_id="  ")
        partial = Event(author="model", invocation_id="inv", partial=True, content=text("str", "model"))
        assert await service.append_event(session, partial) is partial

    run(main)


def test_concurrent_appends_to_one_session_are_all_kept_with_their_state(client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexSessionService(client)
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        await asyncio.gather(*(service.append_event(session, event("user", f"m{n}", timestamp=1000.0 + n,
                                                                   state_delta={f"k{n}": n, "user:last": n}))
                               for n in range(20)))
        got = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert got is not None and sorted(e.content.parts[0].text for e in got.events) == sorted(
            f"m{n}" for n in range(20))
        assert {k: v for k, v in got.state.items() if k.startswith("k")} == {f"k{n}": n for n in range(20)}
        assert got.state["user:last"] in range(20)

    run(main)


def test_an_append_cancelled_in_flight_is_stored_before_the_cancellation_is_raised(
        client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexSessionService(client)
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        task = asyncio.create_task(service.append_event(session, event("user", "kept", state_delta={"k": 1})))
        await asyncio.sleep(0)  # the write is handed to the runtime
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        got = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert got is not None and [e.content.parts[0].text for e in got.events] == ["kept"]
        assert got.state == {"k": 1}

    run(main)


def test_a_client_that_prunes_stored_messages_is_refused() -> None:
    with mnemex.Client(mnemex.Config(data_dir=None, embedder="hashing", agent_retain="pruned")) as client, \
            pytest.raises(mnemex.InvalidInput, match="retain"):
        MnemexSessionService(client)


# -- memory -------------------------------------------------------------------------------
def session_of(user_id: str, *events: Event, app_name: str = "app", id: str = "s") -> Session:
    return Session(app_name=app_name, user_id=user_id, id=id, last_update_time=1.0, events=list(events))


def texts(found: Any) -> list[str]:
    return [memory.content.parts[0].text for memory in found.memories]


def test_memory_entries_carry_id_author_timestamp_and_stay_with_their_user(client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexMemoryService(client)
        await service.add_session_to_memory(session_of(
            "ada", event("user", "I like to code in Python.", id="e1", timestamp=54321.0),
            event("user", None, id="e2"), event("assistant", "Python is great.", id="e3", timestamp=54322.0)))
        await service.add_session_to_memory(session_of("bob", event("user", "A secret about Python.",
                                                                    id="e4")))
        found = await service.search_memory(app_name="app", user_id="ada", query="python")
        assert texts(found) == ["Python is great.", "I like to code in Python."]  # a tie: the newest first
        first = found.memories[1]
        assert first.author == "user" and first.timestamp == "1970-01-01T15:05:21+00:00" and first.id
        assert first.custom_metadata["event_id"] == "e1" and found.memories[0].content.role == "model"
        assert not (await service.search_memory(app_name="app", user_id="ada", query="secret")).memories
        assert not (await service.search_memory(app_name="other", user_id="ada", query="python")).memories

    run(main)


def test_an_event_is_stored_once_by_id_and_a_forgotten_one_not_again(client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexMemoryService(client)
        session = session_of("ada", event("user", "The deploy is ready.", id="e1"))
        await service.add_session_to_memory(session)
        await service.add_events_to_memory(app_name="app", user_id="ada", session_id="s",
                                           events=[event("user", "Changed text, same event.", id="e1"),
                                                   event("user", "A new fact.", id="e2")])
        scope = client.scope(user_id="ada", app_name="app")
        assert [m.content for m in scope.memories().memories] == ["The deploy is ready.", "A new fact."]
        found = await service.search_memory(app_name="app", user_id="ada", query="deploy")
        await service.delete_memory(app_name="app", user_id="ada", memory_id=found.memories[0].id)
        await service.delete_memory(app_name="app", user_id="ada", memory_id=found.memories[0].id)
        await service.add_session_to_memory(session)
        assert [m.content for m in scope.memories().memories] == ["A new fact."]

    run(main)


def test_explicit_memories_are_stored_with_their_author_and_metadata(client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexMemoryService(client)
        await service.add_memory(app_name="app", user_id="ada", custom_metadata={"source": "profile"},
                                 memories=[MemoryEntry(content=text("Ada is allergic to peanuts"),
                                                       author="doctor", custom_metadata={"level": 3})])
        found = await service.search_memory(app_name="app", user_id="ada", query="peanuts")
        assert texts(found) == ["Ada is allergic to peanuts"] and found.memories[0].author == "doctor"
        assert found.memories[0].custom_metadata == {"source": "profile", "level": 3}
        with pytest.raises(mnemex.InvalidInput, match="no text"):
            await service.add_memory(app_name="app", user_id="ada",
                                     memories=[MemoryEntry(content=types.Content())])

    run(main)


def nfd(value: str) -> str:
    return unicodedata.normalize("NFD", value)


# ADK's own table of non-Latin cases for its memory service (event text, query, hits)
NON_LATIN = [
    ("私の名前は太郎です", "太郎", 1), ("私の名前は太郎です", "天気", 0),
    ("我喜欢机器学习", "机器学习", 1), ("我喜欢机器学习", "天气预报", 0),
    ("제 이름은 민수입니다", "민수입니다", 1), ("Меня зовут Алексей", "Алексей", 1),
    ("太郎 works at ABC Corp", "太郎", 1), ("太郎 works at ABC Corp", "ABC", 1),
    ("私はPythonでADKを使っています", "Python", 1), ("私はPythonでADKを使っています", "adk", 1),
    ("我用Python写代码", "python", 1), ("私はPythonでADKを使っています", "使って", 1),
    ("私はPythonでADKを使っています", "Java", 0), ("I like to code in Python.", "thon", 0),
    ("私はPythonでADKを使っています", "thon", 0), (nfd("私はCaféでADKを使っています"), "Café", 1),
    (nfd("私はCaféでADKを使っています"), "café", 1), (nfd("私はCaféでADKを使っています"), "Ruby", 0),
    (nfd("Meet at the Café"), "Café", 1), ("Meet at the Café", nfd("Café"), 1),
    (nfd("プログラミングを学ぶ"), "プログラミング", 1), (nfd("제 이름은 민수입니다"), "민수입니다", 1),
]


def test_text_in_any_script_is_found_as_adks_own_service_finds_it(client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexMemoryService(client)
        for n, (words, _, _) in enumerate(NON_LATIN):
            await service.add_session_to_memory(session_of(f"user{n}", event("user", words, id=f"e{n}")))
        for n, (words, query, hits) in enumerate(NON_LATIN):
            found = await service.search_memory(app_name="app", user_id=f"user{n}", query=query)
            assert len(found.memories) == hits, (words, query)

    run(main)


def test_the_most_matching_words_rank_first_and_at_most_top_k_come_back(client: mnemex.Client) -> None:
    async def main() -> None:
        service = MnemexMemoryService(client)
        await service.add_session_to_memory(session_of(
            "ada", *(event("user", t, id=t, timestamp=1.0)
                     for t in ("The deploy is ready.", "Ready.", "The deploy status is ready."))))
        found = await service.search_memory(app_name="app", user_id="ada", query="deploy status ready")
        assert texts(found) == ["The deploy status is ready.", "The deploy is ready.", "Ready."]
        notes = [event("user", f"note {i} about work", id=f"n{i}", timestamp=1.0) for i in range(20)]
        notes.append(event("user", "the backlog note about work", id="b", timestamp=1.0))
        await service.add_session_to_memory(session_of("bob", *notes))
        found = await service.search_memory(app_name="app", user_id="bob", query="work backlog note")
        assert texts(found) == ["the backlog note about work"] + [f"note {i} about work" for i in range(9)]

    run(main)
