"""AgentMemory, sans-io: conversations, validation, pages, turns, TTL, events, snapshots."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from agent_support import (
    CharTokens,
    Driver,
    assistant,
    make,
    state_lines,
    system,
    tool,
    user,
)

import mnemex
import mnemex.lowlevel
from mnemex.conversations.behaviour import AgentMemory, AgentSettings
from mnemex.conversations.protocol import (
    AppendMessages,
    CompleteSession,
    DeleteAllSessions,
    DeleteSession,
    EntriesAppended,
    ExpireSessions,
    FindExpired,
    GetHistory,
    GetStats,
    ListMessages,
    ListSessions,
    ListTurns,
    MaxMessages,
    PopMessage,
    SearchTurns,
    SessionCounts,
    SessionEnded,
    SetPolicy,
    SetTtl,
    TokenBudget,
    Turn,
    WatchSession,
    session_topic,
)
from mnemex.conversations.tokens import EstimatedTokens
from mnemex.conversations.validation import messages_to_raw


def raw_append(driver: Driver, session_id: str, *payloads: bytes, **fields: Any) -> Any:
    return driver.send(AppendMessages(session_id=session_id, messages=[msgspec.Raw(p) for p in payloads],
                                      timestamp=driver.tick(), **fields))


# -- validation -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("payload", "error", "match", "field"),
    [
        (b'{"role":"wizard","content":"x"}', mnemex.InvalidInput, "role 'wizard'", "$.messages[1].role"),
        (b'{"role":"","content":"x"}', mnemex.InvalidInput, "role empty", "$.messages[1].role"),
        (b'{"content":"x"}', mnemex.InvalidInput, "missing required field `role`", "$.messages[1]"),
        (b"null", mnemex.InvalidInput, "got `null`", "$.messages[1]"),
        (b"{}", mnemex.InvalidInput, "missing required field `role`", "$.messages[1]"),
        (b'{"role":"user","content":42}', mnemex.InvalidInput, "Expected `str | array",
         "$.messages[1].content"),
        (b'{"role":"user","content":{"a":1}}', mnemex.InvalidInput, "Expected `str | array",
         "$.messages[1].content"),
        (b'{"role":"user","content":[{"text":"no type"}]}', mnemex.InvalidInput, "`type`",
         "$.messages[1].content[0]"),
        (b'{"role":"user"}', mnemex.InvalidInput, "has no content", "$.messages[1].content"),
        (b'{"role":"user","content":null}', mnemex.InvalidInput, "has no content",
         "$.messages[1].content"),
        (b'{"role":"tool","content":"r"}', mnemex.InvalidInput, "without tool_call_id",
         "$.messages[1].tool_call_id"),
        (b'{"role":"tool","tool_call_id":"nope","content":"r"}', mnemex.InvalidInput,
         "answers tool call 'nope'", "$.messages[1].tool_call_id"),
        (b'{"role":"user","content":"x","tool_calls":[{"id":"c"}]}', mnemex.InvalidInput,
         "only assistant messages call tools", "$.messages[1].tool_calls"),
        (b'{"role":"assistant","content":null,"tool_calls":[{"id":""}]}', mnemex.InvalidInput, "empty id",
         "$.messages[1].tool_calls[0].id"),
        (b'{"role":"user","content":"x"', mnemex.InvalidInput, "not valid JSON", "$.messages[1]"),
        (b'{"role":"user","content":"' + b"x" * 2000 + b'"}', mnemex.TooLarge,
         "is 2,028 bytes; the limit is 2,000 \\(config.conversations.max_message_bytes\\)", "$.messages[1]"),
    ],
)
def test_bad_messages_are_rejected_whole_with_the_field_named(payload: bytes, error: type[Exception],
                                                              match: str, field: str) -> None:
    driver = Driver(make(max_message_bytes=2000))
    driver.append("s", user("kept"))
    before = state_lines(driver.memory)
    with pytest.raises(error, match=match) as info:
        raw_append(driver, "s", b'{"role":"user","content":"first is fine"}', payload)
    assert getattr(info.value, "field", None) == field
    assert state_lines(driver.memory) == before  # nothing half-stored
    assert driver.memory.sequence == 1


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"session_id": ""}, "session_id must be a non-empty string"),
        ({"session_id": "a\nb"}, "control character"),
        ({"session_id": "x" * 2000}, "the limit is 1,024"),
        ({"query_id": ""}, "query_id must be a non-empty string"),
        ({"timestamp": float("nan")}, "timestamp must be seconds"),
        ({"turn": Turn(input_tokens=-1)}, "turn.input_tokens must be an integer >= 0"),
    ],
)
def test_bad_append_fields_are_rejected(fields: dict[str, Any], match: str) -> None:
    memory = make()
    command: dict[str, Any] = {"session_id": "s", "messages": messages_to_raw([user("hi")]),
                               "timestamp": 1.0, **fields}
    with pytest.raises(mnemex.InvalidInput, match=match):
        memory.handle(AppendMessages(**command))
    assert memory.sessions == {} and memory.sequence == 0


def test_messages_are_stored_verbatim_with_extra_fields_and_null_content() -> None:
    driver = Driver(make())
    call = b'{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",' \
           b'"function":{"name":"f","arguments":"{\\"q\\": 1}"}}],"x-trace":{"span":[1,2]}}'
    result = b'{"tool_call_id":"c1","role":"tool","name":"f","content":"42",  "extra":null}'
    parts = (b'{"role":"user","content":[{"type":"text","text":"look"},'
             b'{"type":"image_url","image_url":{"url":"u"}}]}')
    raw_append(driver, "s", call, result, parts)
    history = driver.send(GetHistory(session_id="s", now=driver.clock))
    assert [bytes(entry.message) for entry in history] == [call, result, parts]
    assert history[2].tokens == 4 + len("look") + 85


def test_tool_results_may_answer_calls_of_an_earlier_append() -> None:
    driver = Driver(make())
    driver.append("s", user("go"), assistant(None, "c1"))
    driver.append("s", tool("c1", "done"))
    with pytest.raises(mnemex.InvalidInput, match="answers tool call 'c1'"):
        driver.append("other", tool("c1", "done"))  # calls belong to their session


def test_an_empty_append_stores_nothing_and_creates_no_session() -> None:
    driver = Driver(make())
    reply = driver.append("s")
    assert reply.count == 0 and reply.message_count == 0
    assert driver.memory.sessions == {} and driver.memory.sequence == 0


# -- pages ---------------------------------------------------------------------------------
def test_pages_are_oldest_first_with_stable_offsets_and_sequences() -> None:
    driver = Driver(make())
    for i in range(5):
        driver.append("a", user(f"a{i}"), query_id="q1" if i < 3 else "q2")
        driver.append("b", user(f"b{i}"))
    page = driver.send(ListMessages(session_id="a", limit=2, offset=1))
    assert [msgspec.json.decode(e.message)["content"] for e in page.entries] == ["a1", "a2"]
    assert (page.total, page.limit, page.offset) == (5, 2, 1)
    driver.append("a", user("a5"))
    again = driver.send(ListMessages(session_id="a", limit=2, offset=1))
    assert again.entries == page.entries and again.total == 6  # appends do not shift earlier pages
    everything = driver.send(ListMessages(limit=None))
    assert [e.sequence for e in everything.entries] == list(range(1, 12))
    assert everything.total == 11
    middle = driver.send(ListMessages(limit=3, offset=4))
    assert [e.sequence for e in middle.entries] == [5, 6, 7]
    by_query = driver.send(ListMessages(query_id="q1", limit=None))
    assert [msgspec.json.decode(e.message)["content"] for e in by_query.entries] == ["a0", "a1", "a2"]
    assert driver.send(ListMessages(session_id="a", query_id="q2", limit=1, offset=1)).total == 2
    empty = driver.send(ListMessages(session_id="unknown"))
    assert empty.entries == [] and empty.total == 0
    with pytest.raises(mnemex.InvalidInput, match="offset must be an integer >= 0"):
        driver.send(ListMessages(offset=-1))


def test_sessions_and_stats_count_messages_and_queries() -> None:
    driver = Driver(make())
    driver.append("a", user("1"), query_id="q1")
    driver.append("a", user("2"), query_id="q2")
    driver.append("a", user("3"))
    driver.append("b", user("x"), query_id="q1")
    driver.send(CompleteSession(session_id="b", timestamp=driver.tick()))
    infos = driver.send(ListSessions(now=driver.clock))
    assert [(i.session_id, i.message_count, i.query_count, i.completed) for i in infos] == [
        ("a", 3, 2, False), ("b", 1, 1, True)]
    stats = driver.send(GetStats(now=driver.clock))
    assert (stats.total_sessions, stats.total_messages, stats.completed_sessions) == (2, 4, 1)
    assert stats.sessions == {"a": SessionCounts(3, 2), "b": SessionCounts(1, 1)}
    assert stats.last_sequence == 4


# -- completion, deletion, events ------------------------------------------------------------
def test_appends_emit_their_entries_and_completion_ends_the_topic() -> None:
    driver = Driver(make())
    driver.append("s", user("hi"), assistant("hello"))
    emit = driver.emitted[-1]
    assert emit.topic == session_topic("s") and not emit.last
    assert isinstance(emit.event, EntriesAppended) and [e.sequence for e in emit.event.entries] == [1, 2]
    reply = driver.send(CompleteSession(session_id="s", timestamp=driver.tick()))
    assert reply.existed and reply.message_count == 2
    assert driver.emitted[-1].event == SessionEnded("completed") and driver.emitted[-1].last
    assert driver.send(WatchSession(session_id="s")).completed
    driver.append("s", user("again"))  # a later append reopens the session
    assert not driver.send(WatchSession(session_id="s")).completed
    unknown = driver.send(CompleteSession(session_id="nope", timestamp=driver.tick()))
    assert not unknown.existed and driver.emitted[-1].event == SessionEnded("completed")


def test_delete_removes_a_session_and_ends_its_topic() -> None:
    driver = Driver(make())
    driver.append("a", user("1"))
    driver.append("b", user("2"))
    deleted = driver.send(DeleteSession(session_id="a", timestamp=driver.tick()))
    assert deleted.session_ids == ["a"] and deleted.messages_removed == 1
    assert driver.emitted[-1].event == SessionEnded("deleted")
    assert driver.send(GetHistory(session_id="a")) == []
    assert driver.send(DeleteSession(session_id="a", timestamp=driver.tick())).session_ids == []
    everything = driver.send(DeleteAllSessions(timestamp=driver.tick()))
    assert everything.session_ids == ["b"] and driver.memory.sessions == {}
    assert driver.memory.sequence == 2  # sequences are never reused


def test_watch_gives_the_history_only_when_asked() -> None:
    driver = Driver(make())
    assert driver.send(WatchSession(session_id="s")).exists is False
    driver.append("s", user("1"), user("2"))
    assert driver.send(WatchSession(session_id="s")).entries == []
    assert len(driver.send(WatchSession(session_id="s", from_beginning=True)).entries) == 2


# -- TTL ---------------------------------------------------------------------------------------
def test_expired_sessions_disappear_on_access_and_in_a_sweep() -> None:
    driver = Driver(make())
    driver.send(SetTtl(seconds=100.0))
    driver.append("old", user("1"), at=1000.0)
    driver.append("new", user("2"), at=1090.0)
    assert driver.send(GetHistory(session_id="old", now=1099.0)) != []
    assert driver.send(GetHistory(session_id="old", now=1100.0)) == []  # hidden at once
    assert [i.session_id for i in driver.send(ListSessions(now=1150.0))] == ["new"]
    assert driver.send(FindExpired(now=1150.0)) == ["old"]
    assert "old" in driver.memory.sessions  # a read changes nothing
    swept = driver.send(ExpireSessions(now=1150.0))
    assert swept.session_ids == ["old"] and "old" not in driver.memory.sessions
    assert driver.emitted[-1].event == SessionEnded("expired")
    driver.append("new", user("3"), at=1195.0)  # activity renews the TTL
    assert driver.send(FindExpired(now=1250.0)) == []


def test_an_append_to_an_expired_session_starts_it_afresh() -> None:
    driver = Driver(make())
    driver.send(SetTtl(seconds=10.0))
    driver.append("s", user("before"), at=100.0)
    driver.append("s", user("after"), at=200.0)
    history = driver.send(GetHistory(session_id="s", now=200.0))
    assert [msgspec.json.decode(e.message)["content"] for e in history] == ["after"]
    with pytest.raises(mnemex.InvalidInput, match="seconds > 0"):
        driver.send(SetTtl(seconds=0))


# -- turns ----------------------------------------------------------------------------------------
def test_turn_records_carry_metadata_and_fill_in_the_rest() -> None:
    driver = Driver(make())
    driver.append("s", user("what is the weather in Paris?"))
    first = driver.append("s", assistant(None, "c1"), tool("c1", "sunny, 24 degrees"),
                          turn=Turn(input_tokens=120, output_tokens=15, metadata={"model": "m"})).turn
    assert first.iteration == 1 and first.tool_calls == ["fn_c1"] and first.message_count == 3
    assert (first.first_sequence, first.last_sequence) == (2, 3)
    assert first.input_tokens == 120 and first.metadata == {"model": "m"}
    second = driver.append("s", assistant("It is sunny in Paris."), turn=Turn(iteration=7)).turn
    assert second.iteration == 7 and second.tool_calls == []
    assert driver.send(ListTurns(session_id="s")) == [first, second]


def test_search_turns_finds_what_the_agent_did_before() -> None:
    driver = Driver(make())
    driver.append("a", assistant("I booked the flight to Lisbon"), turn=Turn())
    driver.append("a", assistant("The invoice total is 420 euros"), turn=Turn())
    driver.append("b", assistant(None, "c9"), tool("c9", "flight search results"), turn=Turn())
    hits = driver.send(SearchTurns(query="flight to Lisbon", top_k=5))
    assert [h.turn.session_id for h in hits] == ["a", "b"] and hits[0].score > hits[1].score
    assert driver.send(SearchTurns(query="invoice", session_id="b")) == []
    driver.send(DeleteSession(session_id="a", timestamp=driver.tick()))
    assert [h.turn.session_id for h in driver.send(SearchTurns(query="flight"))] == ["b"]
    assert driver.send(SearchTurns(query="the of")) == []  # stop words only


# -- snapshots ----------------------------------------------------------------------------------
def test_snapshot_and_restore_give_the_same_state_and_views() -> None:
    driver = Driver(make(TokenBudget(600, keep_recent_turns=2)))
    driver.send(SetPolicy(policy=MaxMessages(3), session_id="b"))
    driver.send(SetTtl(seconds=10_000.0))
    driver.append("a", system("sys"), user("hi " * 50), assistant("yo " * 50), turn=Turn(iteration=1))
    for i in range(8):
        driver.append("a", user(f"q{i} " * 10), assistant(f"a{i} " * 10), query_id=f"q{i}")
    driver.append("b", user("b"))
    driver.context("a")
    driver.run_jobs()
    driver.send(CompleteSession(session_id="b", timestamp=driver.tick()))
    driver.snapshot()
    driver.append("a", user("after the snapshot"))
    restored = driver.rebuilt()
    assert state_lines(restored) == state_lines(driver.memory)
    for session_id in ("a", "b"):
        assert driver.context(session_id) == Driver(restored).context(session_id, at=driver.clock)
    assert restored.policy_for("b") == MaxMessages(3) and restored.ttl == 10_000.0


def test_a_snapshot_made_under_another_token_counter_is_recounted() -> None:
    driver = Driver(make())
    driver.append("s", user("x" * 400))
    driver.snapshot()
    settings = AgentSettings(counter=EstimatedTokens())
    assert driver.image is not None
    restored = AgentMemory.restore("agent", driver.image, settings)
    assert restored.sessions["s"].entries[0].tokens == 4 + 100
    same = AgentMemory.restore("agent", driver.image, AgentSettings(counter=CharTokens()))
    assert same.sessions["s"].entries[0].tokens == 4 + 400


def test_unknown_commands_are_a_handler_bug() -> None:
    with pytest.raises(TypeError, match="cannot handle"):
        make().handle("nope")


def test_pretty_printed_messages_are_compacted_and_never_break_a_journal_line() -> None:
    pretty = b'{\n  "role": "user",\n  "content": "line one\\nline two",\n  "x": [1, 2]\n}'
    compact = b'{"role":"user","content":"line one\\nline two","x":[1,2]}'
    assert messages_to_raw([pretty]) == [msgspec.Raw(compact)]
    driver = Driver(make())
    with pytest.raises(mnemex.InvalidInput, match="raw line break"):
        raw_append(driver, "s", pretty)
    assert driver.memory.sessions == {}
    with pytest.raises(mnemex.InvalidInput, match="not valid JSON"):
        messages_to_raw([b"{\n oops"])


def test_snapshots_encode_each_entry_once_and_restore_from_the_lines() -> None:
    driver = Driver(make())
    driver.append("s", user("one"), user("two"))
    first, _ = state_lines(driver.memory)
    conv = driver.memory.sessions["s"]
    assert conv.lines == []  # the writer's lines are the actor's from its next command on
    driver.append("s", user("three"))
    assert conv.lines == first[1:3]
    assert [bytes(e.message) for e in conv.entries[:2]] == [
        msgspec.json.encode(user(text)) for text in ("one", "two")]
    second, _ = state_lines(driver.memory)
    assert second[1:3] == first[1:3]
    driver.send(GetStats(now=driver.tick()))
    assert len(conv.lines) == 3  # only the new entry was encoded
    driver.snapshot()
    restored = driver.rebuilt()
    assert restored.sessions["s"].lines == conv.lines
    assert state_lines(restored) == state_lines(driver.memory)


def test_a_snapshot_is_taken_in_the_turn_and_encoded_later_as_it_was() -> None:
    """The actor's turn copies references; the writer (later, another thread) encodes
    the state of that moment, whatever the actor did meanwhile."""
    def build() -> Driver:
        driver = Driver(make())
        driver.append("a", user("one"), assistant("two"))
        driver.append("b", user("bee"))
        driver.send(SetPolicy(policy=MaxMessages(3), session_id="b"))
        return driver

    driver, twin = build(), build()
    data = driver.memory.snapshot()
    assert driver.memory.sessions["a"].lines == []  # nothing encoded in the turn
    driver.append("a", user("three"))
    driver.send(DeleteSession(session_id="b", timestamp=driver.tick()))
    driver.append("c", user("new"))
    assert callable(data.records)
    assert (list(data.records()), dict(data.extra)) == state_lines(twin.memory)
    driver.append("a", user("four"))
    lines, _ = state_lines(driver.memory)
    driver.snapshot()
    assert state_lines(driver.rebuilt()) == (lines, state_lines(driver.memory)[1])


@pytest.mark.parametrize("change", ["pop", "delete and append", "prune"])
def test_a_session_changed_while_its_snapshot_is_written_keeps_its_own_entries(change: str) -> None:
    def build() -> Driver:
        driver = Driver(make(retain="pruned"))
        driver.send(SetPolicy(policy=MaxMessages(2), session_id="s"))
        driver.append("s", *(user(f"m{i}") for i in range(6)))
        return driver

    def apply(driver: Driver) -> None:
        if change == "pop":
            driver.send(PopMessage(session_id="s", timestamp=driver.tick()))
        elif change == "delete and append":
            driver.send(DeleteSession(session_id="s", timestamp=driver.tick()))
            driver.append("s", user("again"))
        else:  # retain="pruned" rebuilds the session once enough can go
            driver.append("s", *(user(f"n{i}") for i in range(70)))

    driver, twin = build(), build()
    data = driver.memory.snapshot()
    apply(driver)
    apply(twin)
    list(data.records() if callable(data.records) else data.records)  # the writer ends after the change
    assert driver.memory._encoded
    driver.send(GetStats(now=driver.tick()))
    twin.send(GetStats(now=twin.tick()))
    assert not driver.memory._encoded
    conv, same = driver.memory.sessions["s"], twin.memory.sessions["s"]
    assert [e.sequence for e in conv.entries] == [e.sequence for e in same.entries]
    assert [msgspec.json.encode(e) for e in conv.entries[:len(conv.lines)]] == conv.lines
    assert state_lines(driver.memory) == state_lines(twin.memory)
    driver.snapshot()
    assert state_lines(driver.rebuilt()) == state_lines(twin.memory)


def test_a_writers_lines_are_adopted_a_bounded_number_a_command() -> None:
    driver = Driver(make())
    for i in range(3):
        driver.append("s", *(user(f"m{i}-{j}") for j in range(400)))
    data = driver.memory.snapshot()
    list(data.records() if callable(data.records) else data.records)
    conv = driver.memory.sessions["s"]
    driver.send(GetStats(now=driver.tick()))
    assert len(conv.lines) == 512
    driver.send(GetStats(now=driver.tick()))
    assert len(conv.lines) == 1024
    driver.send(GetStats(now=driver.tick()))
    assert len(conv.lines) == 1200 and not driver.memory._encoded
    assert [msgspec.json.encode(e) for e in conv.entries] == conv.lines


def test_a_snapshot_soon_after_another_adopts_nothing_itself() -> None:
    """A snapshot before the last writer's lines were all adopted (a quiet agent's
    interval or final snapshot) takes them as encoded lines: it adopts none in its
    turn, later commands still adopt at most 512 each, and nothing is encoded twice
    or lost."""
    driver, twin = Driver(make()), Driver(make())  # the twin takes no snapshot before the second
    for d in (driver, twin):
        for i in range(3):
            d.append("s", *(user(f"m{i}-{j}") for j in range(400)))
        d.append("t", user("other"))
    first = driver.memory.snapshot()
    list(first.records() if callable(first.records) else first.records)
    conv = driver.memory.sessions["s"]
    for d in (driver, twin):
        d.send(GetStats(now=d.tick()))
    assert len(conv.lines) == 512  # one bounded step
    second = driver.memory.snapshot()  # 688 lines of "s" not adopted yet
    assert len(conv.lines) == 512  # the snapshot's turn took none back
    expected = twin.memory.snapshot()
    for d in (driver, twin):
        d.append("s", user("after"))
    assert len(conv.lines) == 1024
    assert callable(second.records) and callable(expected.records)
    assert list(second.records()) == list(expected.records())
    steps = []
    for _ in range(10):  # bounded: three steps are enough
        before = len(conv.lines)
        driver.send(GetStats(now=driver.tick()))
        steps.append(len(conv.lines) - before)
        if not driver.memory._encoded:
            break
    assert not driver.memory._encoded and max(steps) <= 512
    assert len(conv.lines) == 1200  # the entry appended after the second snapshot: encoded by the next
    assert [msgspec.json.encode(e) for e in conv.entries[:1200]] == conv.lines
    driver.snapshot()
    assert state_lines(driver.rebuilt()) == state_lines(driver.memory)


def test_a_corrupt_snapshot_record_is_corrupt_data() -> None:
    driver = Driver(make())
    driver.append("s", user("one"))
    driver.snapshot()
    assert driver.image is not None
    broken = mnemex.lowlevel.Image([driver.image.records[0], b'{"sequence":"x"}'], driver.image.extra, {})
    with pytest.raises(mnemex.CorruptData, match="snapshot record 1"):
        AgentMemory.restore("agent", broken, driver.settings)
    orphan = mnemex.lowlevel.Image([driver.image.records[1]], driver.image.extra, {})
    with pytest.raises(mnemex.CorruptData, match="comes before any session"):
        AgentMemory.restore("agent", orphan, driver.settings)


def test_config_sets_the_default_policy_ttl_retention_and_summarizer() -> None:
    from mnemex.conversations.summaries import ExtractiveSummarizer, LLMSummarizer

    config = mnemex.Config(agent_policy="token_budget", agent_max_context_tokens=4000,
                           agent_trigger_ratio=0.5, agent_keep_recent_turns=2, agent_session_ttl=60,
                           agent_retain="pruned",
                           agent_summarizer="llm", agent_llm_base_url="http://127.0.0.1:1/v1")
    settings = AgentSettings.from_config(config)
    assert settings.default_policy == TokenBudget(4000, 0.5, 2)
    assert (settings.ttl, settings.retain) == (60, "pruned")
    assert isinstance(settings.summarizer, LLMSummarizer)
    assert settings.summarizer.url == "http://127.0.0.1:1/v1/chat/completions"
    assert AgentSettings.from_config(mnemex.Config(agent_policy="none")).default_policy == mnemex.Stateless()
    default = AgentSettings.from_config(mnemex.Config())
    assert default.default_policy == MaxMessages(100) and isinstance(default.summarizer, ExtractiveSummarizer)
    for bad, match in [({"agent_trigger_ratio": 1.5}, "agent_trigger_ratio"),
                       ({"agent_max_context_tokens": 8}, "agent_max_context_tokens"),
                       ({"agent_session_ttl": 0}, "agent_session_ttl"),
                       ({"agent_llm_base_url": "ftp://x"}, "agent_llm_base_url")]:
        with pytest.raises(mnemex.InvalidInput, match=match):
            mnemex.Config(**bad)
    with pytest.raises(mnemex.InvalidInput, match="agent_policy"):
        mnemex.load_config('agent_policy = "sometimes"\n')


@pytest.mark.parametrize(
    ("policy", "match"),
    [(lambda: MaxMessages(0), "MaxMessages.n"), (lambda: TokenBudget(8), "max_context_tokens"),
     (lambda: TokenBudget(100, trigger_ratio=0), "trigger_ratio"),
     (lambda: TokenBudget(100, keep_recent_turns=0), "keep_recent_turns")],
)
def test_policies_are_checked_when_built(policy: Any, match: str) -> None:
    with pytest.raises(mnemex.InvalidInput, match=match):
        policy()


def test_an_expired_session_behind_a_fresher_one_still_starts_afresh() -> None:
    driver = Driver(make())
    driver.send(SetTtl(seconds=50.0))
    driver.append("a", user("a"), at=200.0)
    driver.append("b", user("old b"), at=100.0)  # clocks of two callers disagree
    driver.append("b", user("new b"), at=180.0)
    history = driver.send(GetHistory(session_id="b", now=180.0))
    assert [msgspec.json.decode(e.message)["content"] for e in history] == ["new b"]
    assert driver.emitted[-2].event == SessionEnded("expired")


def test_a_long_history_leaves_the_cyclic_collector_nothing_per_message_or_query() -> None:
    """Each query id's positions are kept where the GC does not look: with one list a
    query, a full collection walked the whole history (0.7 s at 300,000 queries)."""
    import gc

    driver = Driver(make())
    for i in range(300):
        driver.append(f"s{i % 3}", user(f"m{i}"), assistant(f"a{i}"), query_id=f"q{i}")
    memory = driver.memory
    buckets = [bucket for conv in memory.sessions.values() for bucket in conv.by_query.values()]
    assert len(buckets) == 300 and not any(map(gc.is_tracked, buckets))
    page = driver.send(ListMessages(query_id="q7", limit=None))
    assert [msgspec.json.decode(e.message)["content"] for e in page.entries] == ["m7", "a7"]
    driver.send(PopMessage(session_id="s1", timestamp=driver.tick()))
    conv = memory.sessions["s1"]
    assert [conv.entries[p].query_id for p in conv.query_positions("q298")] == ["q298"]
