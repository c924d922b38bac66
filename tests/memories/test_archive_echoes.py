"""Archiving a session keeps who said what: each message's author and role, and an
assistant's echo of the user's statement stored merged into it (so the user's own
words are what searches find), decided once, journaled, and replayed without a
model; ``archive_merge_echoes = false`` keeps the raw transcript."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from echo_pairs import ECHOES, GENUINE
from scope_support import EMBEDDER, KEY, Driver, restored, run_work, settings

import mnemex
from mnemex._ids import IdClock
from mnemex.effects import Job, JobResult, Step
from mnemex.memories.behaviour import ScopeMemory, scope_codec
from mnemex.memories.protocol import (
    AddSession,
    Event,
    GetHistory,
    ListMemories,
    NewMemory,
    SearchMode,
    Session,
    SessionAdded,
    StoreSession,
)
from mnemex.memories.sessions import event_role, session_echoes, session_memories

MODES: list[SearchMode] = ["keyword", "fulltext", "vector", "hybrid"]
NURSE = "I work as a nurse at St. Mary's"
ECHO = "Great, so you're a nurse at St. Mary's hospital!"


def config(tmp_path: Path | None = None, **overrides: Any) -> mnemex.Config:
    overrides.setdefault("embedder", "hashing")
    return mnemex.Config(data_dir=str(tmp_path) if tmp_path is not None else None, **overrides)


def first_id(now: float = 1_700_000_000.0) -> str:
    return IdClock().reserve(now)


def session(*events: tuple[str, str], user_id: str = "alice", session_id: str = "s1") -> Session:
    return Session(session_id, "chat", user_id, events=[
        Event(author, text, 1_700_000_000.0 + i, id=f"e{i}") for i, (author, text) in enumerate(events)])


def echoes_of(*events: tuple[str, str]) -> list[tuple[str, str]]:
    """Each echo of a session as (echo text, the text it echoes)."""
    memories = session_memories(session(*events), first_id(), 10_240)
    text = {memory.id: memory.content for memory in memories}
    return [(text[echo], text[target]) for echo, target in session_echoes(memories).items()]


# -- the rule, on the labelled set it was measured on ------------------------------------------------
def test_the_echo_rule_merges_the_labelled_echoes_and_no_genuine_reply() -> None:
    merged = [reply for user, reply in ECHOES if echoes_of(("user", user), ("model", reply))]
    wrongly = [reply for user, reply in GENUINE if echoes_of(("user", user), ("model", reply))]
    assert wrongly == []
    assert len(merged) >= 29, sorted({reply for _, reply in ECHOES} - set(merged))


@pytest.mark.parametrize(("events", "expected"), [
    # the user's statement, echoed
    ([("user", NURSE), ("model", ECHO)], [(ECHO, NURSE)]),
    # a reply to a question is an answer
    ([("user", "What's the capital of Australia?"), ("model", "The capital of Australia is Canberra.")], []),
    # a number or a name the user did not say is something new
    ([("user", "I think the Eiffel Tower is in Berlin"),
      ("model", "The Eiffel Tower is in Paris, not Berlin.")], []),
    # only assistants and tools echo; the user repeating themself is the user's
    ([("user", NURSE), ("user", "so yes, a nurse at St. Mary's hospital")], []),
    ([("user", NURSE), ("tool", "saved: works as a nurse at St. Mary's")], [
        ("saved: works as a nurse at St. Mary's", NURSE)]),
    ([("user", NURSE), ("system", "the user is a nurse at St. Mary's")], []),
    # an echo restates the user's statement it matches best, the nearest on a tie
    ([("user", "I have a dog named Rex"), ("user", NURSE), ("model", "A dog named Rex, lovely.")], [
        ("A dog named Rex, lovely.", "I have a dog named Rex")]),
    # statements further back than ECHO_LOOKBACK user messages are not compared
    ([("user", NURSE)] + [("user", f"line {n} about topic{n}") for n in range(8)] + [("model", ECHO)], []),
    # an echo before any statement echoes nothing
    ([("model", ECHO), ("user", NURSE)], []),
])
def test_session_echoes(events: list[tuple[str, str]], expected: list[tuple[str, str]]) -> None:
    assert echoes_of(*events) == expected


@pytest.mark.parametrize(("author", "role", "expected"), [
    ("user", None, "user"), ("alice", None, "user"), ("User", None, "user"),
    ("root_agent", None, "assistant"), ("model", None, "assistant"), ("tool", None, "tool"),
    ("system", None, "system"),
    ("ann", "user", "user"), ("helper", "assistant", "assistant"),
])
def test_event_role(author: str, role: str | None, expected: str) -> None:
    assert event_role(Event(author, "text", role=role), "alice") == expected


def test_a_role_that_is_not_an_id_is_refused() -> None:
    bad = Session("s1", "chat", "alice", events=[Event("ann", "hello", role="")])
    with pytest.raises(mnemex.InvalidInput, match=r"events\[0\]\.role"):
        session_memories(bad, first_id(), 10_240)


# -- archiving through the runtime ----------------------------------------------------------------------
@pytest.mark.parametrize("embedder", ["hashing", "minilm"])
async def test_the_users_statement_is_found_first_and_the_echo_is_no_second_hit(embedder: str) -> None:
    async with mnemex.open_runtime(config(embedder=embedder)) as rt:
        await rt.agent("assistant").append("s1", [{"role": "user", "content": NURSE},
                                                  {"role": "assistant", "content": ECHO}])
        added = await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert added.added == 2 and added.merged == [added.ids[1]]
        scope = rt.scope(user_id="alice", app_name="chat")
        for mode in MODES:  # no cut: every active memory the mode finds at all
            hits = (await scope.search("where does the user work", mode=mode, min_score=None)).hits
            assert [hit.memory.content for hit in hits] == [NURSE], mode
        # the echo is kept, merged into the user's statement, and history shows it
        every = (await scope.search("where does the user work", mode="fulltext", include_history=True)).hits
        echo = next(hit.memory for hit in every if hit.memory.content == ECHO)
        assert (echo.status, echo.merged_into, echo.author) == ("merged", added.ids[0], "assistant")
        assert [(c.op, c.by, c.other) for c in echo.history] == [("merged", "archive", added.ids[0])]
        user = await scope.get(added.ids[0])
        assert (user.status, [(c.op, c.other) for c in user.history]) == ("active", [("absorbed", echo.id)])
        assert await scope.count() == 1 and await scope.count(include_history=True) == 2


async def test_archived_messages_keep_author_role_and_kind() -> None:
    async with mnemex.open_runtime(config()) as rt:
        await rt.agent("assistant").append("s1", [
            {"role": "user", "content": "My sister lives in Oslo", "name": "ann"},
            {"role": "assistant", "content": "Oslo is lovely in June.", "name": "helper"},
        ])
        await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        scope = rt.scope(user_id="alice", app_name="chat")
        page = await scope.memories(limit=None)
        assert [(m.author, m.metadata["role"], m.kind, m.source) for m in page.memories] == [
            ("ann", "user", "message", "session"), ("helper", "assistant", "message", "session")]
        # the role is a filter
        said = await scope.memories(filter={"metadata": {"role": "user"}})
        assert [m.content for m in said.memories] == ["My sister lives in Oslo"]


async def test_with_merging_off_the_archive_is_a_raw_transcript() -> None:
    async with mnemex.open_runtime(config(archive_merge_echoes=False)) as rt:
        await rt.agent("assistant").append("s1", [{"role": "user", "content": NURSE},
                                                  {"role": "assistant", "content": ECHO}])
        added = await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert (added.added, added.merged) == (2, [])
        scope = rt.scope(user_id="alice", app_name="chat")
        assert {m.status for m in (await scope.memories()).memories} == {"active"}
        assert await scope.count() == 2


async def test_archiving_twice_adds_nothing_and_merges_once(tmp_path: Path) -> None:
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        agent = rt.agent("assistant")
        await agent.append("s1", [{"role": "user", "content": NURSE}, {"role": "assistant", "content": ECHO}])
        first = await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        again = await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert (again.ids, again.added, again.merged) == (first.ids, 0, [])
        # a later turn echoing the same statement merges into it as well
        await agent.append("s1", [{"role": "assistant", "content": "A nurse at St. Mary's, noted."}])
        third = await rt.archive("assistant", "s1", user_id="alice", app_name="chat")
        assert (third.ids[:2], third.added, third.merged) == (first.ids, 1, [third.ids[2]])
        scope = rt.scope(user_id="alice", app_name="chat")
        user = await scope.get(first.ids[0])
        assert [c.other for c in user.history] == [first.ids[1], third.ids[2]]
        before = (await scope.memories(limit=None, include_history=True)).memories
    # replayed from the journal without a model: the same records
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        assert (await scope.memories(limit=None, include_history=True)).memories == before
        assert await scope.count() == 1


async def test_add_session_merges_echoes_across_commands() -> None:
    # one memory per command: the echo's statement was stored by the command before
    async with mnemex.open_runtime(config(max_memories_per_command=1)) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        added = await scope.add_session(session(("user", NURSE), ("root_agent", ECHO)))
        assert added.added == 2 and added.merged == [added.ids[1]]
        echo = await scope.get(added.ids[1])
        assert (echo.status, echo.merged_into, echo.author, echo.metadata) == (
            "merged", added.ids[0], "root_agent", {"event_id": "e1", "role": "assistant"})


async def test_an_echo_of_a_statement_stored_before_merges_into_that_memory() -> None:
    async with mnemex.open_runtime(config()) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        mid = await scope.remember(NURSE)
        added = await scope.add_session(session(("user", NURSE), ("model", ECHO)))
        assert added.ids[0] == mid and added.added == 1
        assert (await scope.get(added.ids[1])).merged_into == mid


# -- the actor, sans-io ---------------------------------------------------------------------------------
def new(memory_id: str, content: str, role: str, session_id: str = "s1") -> NewMemory:
    from mnemex.memories.snapshot import encode_vector

    return NewMemory(id=memory_id, content=content, vector=encode_vector(EMBEDDER.embed([content])[0]),
                     session_id=session_id, metadata={"role": role}, kind="message")


def add(memories: list[NewMemory], echo_of: dict[str, str], now: float = 2_000.0) -> AddSession:
    return AddSession(session_id="s1", memories=memories, embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=now,
                      echo_of=echo_of)


def records(memory: ScopeMemory) -> list[Any]:
    return memory.handle(ListMemories(limit=None, include_history=True)).memories  # type: ignore[no-any-return]


def test_replay_makes_the_same_merges_as_handle() -> None:
    commands = [
        add([new("a1", NURSE, "user"), new("a2", ECHO, "assistant")], {"a2": "a1"}),
        add([new("a3", "A nurse at St. Mary's, noted.", "assistant")], {"a3": "a1"}, 2_001.0),
        add([new("a4", "I have a dog", "user"), new("a5", "A dog, lovely!", "assistant")], {"a5": "a4"},
            2_002.0),
    ]
    handled = Driver().memory
    for command in commands:
        handled.handle(command)
    replayed = ScopeMemory(KEY, settings())
    replayed.replay([scope_codec.decode(scope_codec.encode(c)) for c in commands])
    assert records(replayed) == records(handled)
    assert [(r.id, r.status, r.merged_into) for r in records(handled)] == [
        ("a1", "active", None), ("a2", "merged", "a1"), ("a3", "merged", "a1"), ("a4", "active", None),
        ("a5", "merged", "a4")]
    assert records(restored(handled)) == records(handled)
    assert records(restored(handled, sidecars=False)) == records(handled)
    history = handled.handle(GetHistory(id="a1"))
    assert [r.id for r in history.related] == ["a2", "a3"]


def test_an_echo_whose_statement_is_gone_stays_active() -> None:
    memory = Driver().memory
    reply = memory.handle(add([new("a2", ECHO, "assistant")], {"a2": "nowhere"}))
    assert reply.merged == [] and records(memory)[0].status == "active"


@pytest.mark.parametrize(("echo_of", "message"), [
    ({"zz": "a1"}, "not one of the session's memories"),
    ({"a2": "a2"}, "echoes itself"),
    ({"a2": ""}, "echo_of"),
])
def test_a_bad_echo_of_is_refused_and_stores_nothing(echo_of: dict[str, str], message: str) -> None:
    memory = Driver().memory
    with pytest.raises(mnemex.InvalidInput, match=message):
        memory.handle(add([new("a1", NURSE, "user"), new("a2", ECHO, "assistant")], echo_of))
    assert len(memory) == 0


def test_an_add_session_journaled_before_echo_of_existed_still_replays() -> None:
    old = add([new("a1", NURSE, "user"), new("a2", ECHO, "assistant")], {})
    line = msgspec.json.decode(scope_codec.encode(old))
    del line["echo_of"]
    decoded = scope_codec.decode(msgspec.json.encode(line))
    assert isinstance(decoded, AddSession) and decoded.echo_of == {}
    memory = ScopeMemory(KEY, settings())
    memory.replay([decoded])
    assert [r.status for r in records(memory)] == ["active", "active"]


@pytest.mark.parametrize("with_embedder", [True, False])
def test_a_stored_session_becomes_one_journaled_add_session_with_its_echoes(with_embedder: bool) -> None:
    overrides = {} if with_embedder else {"embed": None, "embedder_name": None}
    memory = ScopeMemory(KEY, settings(**overrides))
    store = StoreSession(session=Session("s1", *KEY, events=[Event("user", NURSE), Event("model", ECHO)]),
                         first_id=first_id(), now=3_000.0)
    out = memory.handle(store)
    # nothing changes until the job's AddSession comes back (the write the journal keeps)
    assert isinstance(out, Step) and len(memory) == 0
    [job] = [effect for effect in out.effects if isinstance(effect, Job)]
    command = job.deliver(JobResult(run_work(job.work)))
    assert isinstance(command, AddSession) and len(command.echo_of) == 1
    assert all((m.vector is not None) == with_embedder for m in command.memories)
    reply = memory.handle(command)
    assert isinstance(reply, SessionAdded) and reply.merged == [reply.ids[1]]
    # the whole session again: nothing new, answered at once
    again = memory.handle(msgspec.structs.replace(store, first_id=first_id(4_000.0)))
    assert isinstance(again, SessionAdded) and (again.added, again.ids) == (0, reply.ids)
