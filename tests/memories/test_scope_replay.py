"""ScopeMemory.replay: a journal applied in runs (a run of Remember and AddSession
commands indexed together) gives the state that handling each command does, to the
bit: the same records, docs, session contexts and search scores."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scope_support import EMBEDDER, KEY, Driver, restored

import mnemex
from mnemex.memories.behaviour import ScopeMemory, scope_codec
from mnemex.memories.kind import scope_kind
from mnemex.memories.protocol import AddSession, Forget, Remember, Touch, UpdateMemory
from mnemex.memories.snapshot import encode_vector

WORDS = ["tea", "coffee", "hiking", "paint", "lake", "sunrise", "dog", "cat", "Paris", "guitar", "the",
         "and", "charity", "race", "kids", "camping", "don't", "Anna's", "café"]
QUERIES = ["tea", "lake sunrise", "paint the dog", "camping kids charity", "Paris café", '"lake sunrise"',
           "guitar don't", "anna"]


def vector(content: str) -> bytes:
    return encode_vector(EMBEDDER.embed([content])[0])


# One step of a journal: ("remember", [(content, session)]), ("session", session, [content]),
# ("forget", pick), ("update", pick, content, session), ("touch", pick).
texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=7).map(" ".join)
sessions = st.sampled_from([None, "s1", "s2", "s3"])
steps = st.one_of(
    st.tuples(st.just("remember"), st.lists(st.tuples(texts, sessions), min_size=1, max_size=4)),
    st.tuples(st.just("session"), st.sampled_from(["s1", "s2", "s4"]), st.lists(texts, min_size=1, max_size=4)),
    st.tuples(st.just("forget"), st.integers(0, 10_000)),
    st.tuples(st.just("update"), st.integers(0, 10_000), texts, sessions),
    st.tuples(st.just("touch"), st.integers(0, 10_000)),
)


def build(plan: list[tuple[Any, ...]], window: int) -> tuple[Driver, list[bytes]]:
    """Handle the plan live, one command at a time; the journal of accepted commands."""
    driver = Driver(context_window=window)
    journal: list[bytes] = []
    for step in plan:
        live = sorted(driver.memory.doc_of)
        command: Any
        if step[0] == "remember":
            memories = [driver.new(content, session_id=session) for content, session in step[1]]
            command = Remember(memories=memories, embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=driver.tick())
        elif step[0] == "session":
            memories = [driver.new(content, session_id=step[1]) for content in step[2]]
            command = AddSession(session_id=step[1], memories=memories, embedder=EMBEDDER.name,
                                 dim=EMBEDDER.dim, now=driver.tick())
        elif not live:
            continue
        elif step[0] == "forget":
            command = Forget(ids=[live[step[1] % len(live)]], now=driver.tick())
        elif step[0] == "update":
            command = UpdateMemory(id=live[step[1] % len(live)], now=driver.tick(), content=step[2],
                                   session_id=step[3], vector=vector(step[2]), embedder=EMBEDDER.name,
                                   dim=EMBEDDER.dim)
        else:
            command = Touch(ids=[live[step[1] % len(live)]], counts=[1], now=driver.tick())
        try:
            driver.send(command)
        except mnemex.InvalidInput:
            continue  # refused (an update onto another memory's content): not journaled
        journal.append(scope_codec.encode(command))
    return driver, journal


def searches(memory: ScopeMemory) -> list[Any]:
    driver = Driver(memory)
    driver.now = 10_000.0
    out = []
    for query in QUERIES:
        for mode in ("keyword", "fulltext", "vector", "hybrid"):
            hits = driver.search(query, mode, top_k=20, min_score=-1.0).hits
            out.append([(hit.memory.id, hit.score, sorted(hit.scores.items())) for hit in hits])
    return out


def same_state(a: ScopeMemory, b: ScopeMemory) -> None:
    assert list(a.records()) == list(b.records())
    assert a.doc_of == b.doc_of and a.free == b.free and a.docs == b.docs
    assert a.sessions == b.sessions
    assert a.content_bytes == b.content_bytes and a.clock == b.clock
    assert len(a.bm25) == len(b.bm25) and len(a.keyword) == len(b.keyword)
    assert searches(a) == searches(b)


@settings(max_examples=50, deadline=None)
@given(plan=st.lists(steps, max_size=25), window=st.sampled_from([0, 1, 2]))
def test_replay_in_runs_rebuilds_what_handling_each_command_built(plan: list[tuple[Any, ...]],
                                                                  window: int) -> None:
    driver, journal = build(plan, window)
    live = driver.memory
    one_by_one = ScopeMemory(KEY, live.settings)
    for payload in journal:
        one_by_one.handle(scope_codec.decode(payload))
    in_runs = ScopeMemory(KEY, live.settings)
    in_runs.replay(scope_codec.decode(payload) for payload in journal)
    same_state(in_runs, one_by_one)
    same_state(in_runs, live)
    # and onto a restored snapshot: replay the tail after the first half
    half = len(journal) // 2
    head = ScopeMemory(KEY, live.settings)
    head.replay(scope_codec.decode(payload) for payload in journal[:half])
    tail = restored(head)
    tail.replay(scope_codec.decode(payload) for payload in journal[half:])
    assert list(tail.records()) == list(live.records())
    # a restore re-reads the vectors as stored (float32): scores agree to float32 precision,
    # and as scores are rounded to 6 places, two that close may round one step apart
    for got, want in zip(searches(tail), searches(live), strict=True):
        assert [hit[0] for hit in got] == [hit[0] for hit in want]
        assert [hit[1] for hit in got] == pytest.approx([hit[1] for hit in want], abs=2e-6)


def test_a_run_of_session_memories_gives_each_its_final_context() -> None:
    driver = Driver(context_window=1)
    commands = [Remember(memories=[driver.new(text, session_id="s1", id=f"m{i}")], embedder=EMBEDDER.name,
                         dim=EMBEDDER.dim, now=driver.tick())
                for i, text in enumerate(["what did you paint", "a lake at sunrise", "all orange", "nice"])]
    for command in commands:
        driver.send(command)
    replayed = ScopeMemory(KEY, driver.memory.settings)
    replayed.replay(commands)
    # "a lake at sunrise" is found through its neighbour's words, as live
    hits = Driver(replayed).search("paint orange", "fulltext").hits
    assert [hit.memory.id for hit in hits] == [hit.memory.id for hit in driver.search("paint orange",
                                                                                         "fulltext").hits]
    assert "m1" in [hit.memory.id for hit in hits]
    assert searches(replayed) == searches(driver.memory)


def test_a_refused_command_in_a_run_is_skipped_as_handle_refuses_it() -> None:
    # the kernel writes a line before handling its command: a process killed in between
    # can leave the line of a command the handler refuses, which replay must refuse too
    driver = Driver()
    good = Remember(memories=[driver.new("tea")], embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=driver.tick())
    clash = Remember(memories=[driver.new("coffee", id=good.memories[0].id)], embedder=EMBEDDER.name,
                     dim=EMBEDDER.dim, now=driver.tick())
    later = Remember(memories=[driver.new("cake")], embedder=EMBEDDER.name, dim=EMBEDDER.dim,
                     now=driver.tick())
    driver.send(good)
    with pytest.raises(mnemex.InvalidInput, match="is taken by other content"):
        driver.send(clash)
    driver.send(later)
    replayed = ScopeMemory(KEY, driver.memory.settings)
    replayed.replay([good, clash, later])
    assert sorted(replayed.doc_of) == sorted(driver.memory.doc_of)
    assert searches(replayed) == searches(driver.memory)


def test_the_scope_kind_replays_through_the_behaviour() -> None:
    kind = scope_kind(mnemex.Config(embedder="hashing"))
    driver = Driver()
    command = Remember(memories=[driver.new("tea and cake")], embedder=EMBEDDER.name, dim=EMBEDDER.dim,
                       now=driver.tick())
    memory = kind.create(KEY)
    kind.replay(memory, [command])
    assert isinstance(memory, ScopeMemory) and len(memory) == 1
    with pytest.raises(TypeError, match="replays into a ScopeMemory"):
        kind.replay(object(), [command])  # type: ignore[arg-type]
