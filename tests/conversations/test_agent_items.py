"""AgentMemory, sans-io: OpenAI Responses items (stored verbatim, checked only as far
as they are read, kept whole per model response by pruning) and pop (the newest
message taken back: journaled, O(1), consistent with summaries, turns and replay)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from agent_support import (
    Driver,
    RecordingSummarizer,
    assistant,
    contents,
    dicts,
    make,
    state_lines,
    system,
    tool,
    user,
)

import mnemex
from mnemex.conversations.behaviour import AgentSettings
from mnemex.conversations.protocol import (
    AppendItems,
    ApplySummary,
    GetHistory,
    KeepAll,
    ListTurns,
    MaxMessages,
    PopMessage,
    Popped,
    Stateless,
    TokenBudget,
    Turn,
)
from mnemex.conversations.tokens import EstimatedTokens
from mnemex.conversations.validation import messages_to_raw
from mnemex.effects import JobResult, Step


# -- items as the OpenAI Agents SDK stores them -----------------------------------------
def said(text: str, role: str = "user") -> dict[str, Any]:
    """The short message form (``EasyInputMessage``): what a user's input becomes."""
    return {"role": role, "content": text}


def reply(text: str, number: int = 1) -> dict[str, Any]:
    """A model's output message item."""
    return {"id": f"msg_{number}", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call(call_id: str, name: str = "get_weather", arguments: str = '{"city":"Paris"}') -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
            "id": f"fc_{call_id}", "status": "completed"}


def output(call_id: str, text: str = "sunny") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def reasoning(text: str = "think", number: int = 1) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{number}", "summary": [{"type": "summary_text", "text": text}]}


def add(driver: Driver, session_id: str, *items: Any, **fields: Any) -> Any:
    return driver.send(AppendItems(session_id=session_id, items=messages_to_raw(items),
                                   timestamp=driver.tick(), **fields))


def pop(driver: Driver, session_id: str) -> Popped:
    popped = driver.send(PopMessage(session_id=session_id, timestamp=driver.tick()))
    assert isinstance(popped, Popped)
    return popped


def history(driver: Driver, session_id: str, last: int | None = None) -> list[dict[str, Any]]:
    entries = driver.send(GetHistory(session_id=session_id, now=driver.clock, last=last))
    return [msgspec.json.decode(entry.message) for entry in entries]


def test_items_of_every_shape_are_stored_and_returned_as_given() -> None:
    driver = Driver(make())
    items = [
        {"role": "developer", "content": "be brief"},
        said("weather in Paris?"),
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and Rome"},
                                                        {"type": "input_image", "image_url": "data:..."}]},
        reasoning(),
        call("c1"),
        call("c2", arguments='{"city":"Rome"}'),
        output("c1"),
        output("c2", "rain"),
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "x"}},
        reply("Sunny in Paris, rain in Rome"),
        {"type": "some_future_item", "payload": {"nested": [1, 2.5, None]}, "ünïcode": "数据"},
    ]
    appended = add(driver, "s", *items)
    assert (appended.count, appended.message_count) == (len(items), len(items))
    assert history(driver, "s") == items
    entries = driver.send(GetHistory(session_id="s", now=driver.clock))
    assert [(e.item, e.role) for e in entries[:4]] == [
        ("message", "developer"), ("message", "user"), ("message", "user"), ("reasoning", "")]
    assert entries[4].tool_call_ids == ("c1",) and entries[6].tool_call_id == "c1"


@pytest.mark.parametrize(
    ("payload", "error", "match", "field"),
    [
        (b"[1, 2]", mnemex.InvalidInput, "not a Responses item", "$.items[1]"),
        (b"null", mnemex.InvalidInput, "not a Responses item", "$.items[1]"),
        (b'{"type":""}', mnemex.InvalidInput, "empty type", "$.items[1].type"),
        (b'{"type":7}', mnemex.InvalidInput, "Expected `str | null`", "$.items[1].type"),
        (b'{"role":"wizard","content":"x"}', mnemex.InvalidInput, "role 'wizard'", "$.items[1].role"),
        (b'{"type":"message","content":"x"}', mnemex.InvalidInput, "role none", "$.items[1].role"),
        (b'{"role":"tool","tool_call_id":"c","content":"x"}', mnemex.InvalidInput,
         "a chat tool result goes through append", "$.items[1].role"),
        (b'{"role":3}', mnemex.InvalidInput, "Expected `str | null`", "$.items[1].role"),
        (b'{"type":"reasoning"', mnemex.InvalidInput, "not valid JSON", "$.items[1]"),
        (b'{"type":"function_call_output","output":"' + b"x" * 2000 + b'"}', mnemex.TooLarge,
         "item 1 is 2,04[0-9] bytes; the limit is 2,000", "$.items[1]"),
    ],
)
def test_bad_items_are_rejected_whole_with_the_field_named(payload: bytes, error: type[Exception], match: str,
                                                           field: str) -> None:
    driver = Driver(make(max_message_bytes=2000))
    add(driver, "s", said("kept"))
    before = state_lines(driver.memory)
    with pytest.raises(error, match=match) as info:
        driver.send(AppendItems(session_id="s", timestamp=driver.tick(),
                                items=[msgspec.Raw(b'{"type":"reasoning"}'), msgspec.Raw(payload)]))
    assert getattr(info.value, "field", None) == field
    assert state_lines(driver.memory) == before
    assert driver.memory.sequence == 1


def test_an_object_with_neither_type_nor_role_is_kept_whole_as_an_untyped_item() -> None:
    # what a session wrapper stores through another (the SDK's EncryptedSession: envelopes)
    driver = Driver(make())
    envelope = {"__enc__": 1, "v": 1, "kid": "hkdf-1", "payload": "gAAAAB" + "x" * 40}
    add(driver, "s", said("q"), envelope, {}, call("c1"), output("c1"))
    entries = driver.send(GetHistory(session_id="s", now=driver.clock))
    assert history(driver, "s") == [said("q"), envelope, {}, call("c1"), output("c1")]
    assert [(e.item, e.role, e.joined) for e in entries[1:4]] == [
        ("untyped", "", False), ("untyped", "", False), ("function_call", "", False)]
    assert entries[1].tokens == 4 + len(msgspec.json.encode(envelope))  # counted whole


def test_chat_appends_still_refuse_items_without_a_role() -> None:
    driver = Driver(make())
    with pytest.raises(mnemex.InvalidInput, match="missing required field `role`"):
        driver.append("s", user("hi"), call("c1"))
    assert driver.memory.sessions == {}


def test_an_output_need_not_answer_a_call_of_the_session() -> None:
    # items are the SDK's: an output whose call was trimmed away by the host is stored as given
    driver = Driver(make())
    assert add(driver, "s", output("gone")).count == 1


# -- which items start a context -----------------------------------------------------------
@pytest.mark.parametrize(
    ("items", "joined"),
    [
        ([said("q"), call("c1"), output("c1"), reply("a")], [False, False, True, False]),
        ([said("q"), reasoning(), call("c1"), output("c1")], [False, False, True, True]),
        ([said("q"), call("c1"), call("c2"), output("c1"), output("c2")], [False, False, True, True, True]),
        ([said("q"), reasoning(), reply("a"), call("c1"), output("c1"), reasoning(number=2), reply("b", 2)],
         [False, False, True, True, True, False, True]),
        # input never joins: a user message after a dangling reasoning item starts a unit
        ([reasoning(), said("q"), {"role": "system", "content": "s"}], [False, False, False]),
        ([{"type": "web_search_call", "id": "w"}, reply("a")], [False, True]),
        ([{"type": "mcp_approval_request", "id": "r"}, {"type": "mcp_approval_response",
                                                      "approval_request_id": "r", "approve": True}],
         [False, True]),
    ],
)
def test_items_of_one_model_response_and_outputs_join_the_item_before(items: list[dict[str, Any]],
                                                                      joined: list[bool]) -> None:
    driver = Driver(make())
    for item in items:  # one by one: joining looks at the session's previous entry too
        add(driver, "s", item)
    entries = driver.send(GetHistory(session_id="s", now=driver.clock))
    assert [e.joined for e in entries] == joined


def test_chat_messages_never_join() -> None:
    driver = Driver(make())
    driver.append("s", user("q"), assistant(None, "c1"), tool("c1", "r"), assistant("a"))
    add(driver, "s", call("c2"))
    assert [e.joined for e in driver.send(GetHistory(session_id="s", now=driver.clock))] == [False] * 5


def test_max_messages_keeps_a_model_response_and_its_outputs_whole() -> None:
    driver = Driver(make(MaxMessages(3)))
    add(driver, "s", {"role": "system", "content": "sys"}, said("q1"), reply("a1"), said("q2"),
        reasoning(), call("c1"), call("c2"), output("c1"), output("c2"))
    # the newest unit (reasoning, two calls, two outputs) is larger than 3: it goes alone,
    # with the system message, never cut in the middle
    assert [m.get("type", m.get("role")) for m in dicts(driver.context("s"))] == [
        "system", "reasoning", "function_call", "function_call", "function_call_output",
        "function_call_output"]
    add(driver, "s", reply("done", 2), said("q3"))
    assert [m.get("type", m.get("role")) for m in dicts(driver.context("s"))] == [
        "system", "message", "user"]


def test_a_max_tokens_cut_never_starts_on_an_output_or_after_reasoning() -> None:
    driver = Driver(make(KeepAll()))
    add(driver, "s", said("q" * 40), reasoning("r" * 40), call("c1", arguments="{}"),
        output("c1", "o" * 10))
    for budget in range(1, 120):
        view = dicts(driver.context("s", max_tokens=budget))
        assert view[0].get("type") not in ("function_call_output", "function_call")


def test_items_are_counted_by_what_they_say() -> None:
    driver = Driver(make())
    add(driver, "s", said("abcd"), reply("ab"), call("c", name="fn", arguments="xyz"), output("c", "12345"),
        reasoning("why"), {"type": "reasoning", "summary": [], "encrypted_content": "E" * 10},
        {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "u"}]},
        {"type": "computer_call", "call_id": "k", "action": {"x": 1}})
    entries = driver.send(GetHistory(session_id="s", now=driver.clock))
    computer = len(msgspec.json.encode({"type": "computer_call", "call_id": "k", "action": {"x": 1}}))
    assert [e.tokens for e in entries] == [4 + 4, 4 + 2, 4 + 2 + 3, 4 + 5, 4 + 3, 4 + 10, 4 + 85,
                                           4 + computer]


def test_token_budget_compresses_an_item_session_into_a_function_call_and_its_output() -> None:
    summarizer = RecordingSummarizer()
    driver = Driver(make(TokenBudget(200, 0.5, 1), summarizer=summarizer))
    for turn in range(6):
        add(driver, "s", said(f"question {turn} " + "x" * 20), reasoning("r" * 10, turn), call(f"c{turn}"),
            output(f"c{turn}", "y" * 20), reply(f"answer {turn}", turn))
    driver.context("s")
    (applied,) = driver.run_jobs()
    assert applied.applied
    view = dicts(driver.context("s"))
    pair = view[:2]
    assert pair[0] == {"type": "function_call", "call_id": "memory_compress_1", "name": "memory_compress",
                       "arguments": "{}"}
    assert pair[1]["type"] == "function_call_output" and pair[1]["call_id"] == "memory_compress_1"
    assert pair[1]["output"].startswith("[Previous Conversation Summary]\nS1: ")
    # then the newest turn's units that fit, never starting inside a response
    assert view[-1] == reply("answer 5", 5) and view[2].get("type") not in ("function_call_output",
                                                                             "function_call")
    # the summarizer read chat messages: the items as user, assistant and tool messages
    roles = {m["role"] for m in summarizer.requests[0].messages}
    assert roles == {"user", "assistant", "tool"}
    assert any(m.get("tool_calls") for m in summarizer.requests[0].messages)


# -- pop -----------------------------------------------------------------------------------------
def test_pop_takes_the_newest_message_back_and_its_number_is_never_reused() -> None:
    driver = Driver(make())
    add(driver, "s", said("one"), reply("two"), said("three"))
    popped = pop(driver, "s")
    assert popped.entry is not None and popped.entry.stored().message == said("three")
    assert (popped.entry.sequence, popped.message_count) == (3, 2)
    assert history(driver, "s") == [said("one"), reply("two")]
    assert add(driver, "s", said("four")).first_sequence == 4
    assert [pop(driver, "s").entry is not None for _ in range(3)] == [True, True, True]
    empty = pop(driver, "s")
    assert (empty.entry, empty.message_count) == (None, 0)
    assert pop(driver, "nobody").entry is None
    assert "s" in driver.memory.sessions  # emptied, not deleted (clear is delete_session)


def test_pop_works_on_chat_sessions_and_forgets_the_calls_it_took_back() -> None:
    driver = Driver(make())
    driver.append("s", user("q"), assistant(None, "c1"))
    assert pop(driver, "s").entry is not None
    with pytest.raises(mnemex.InvalidInput, match="answers tool call 'c1'"):
        driver.append("s", tool("c1", "late"))


def test_pop_is_journaled_and_a_pop_of_nothing_is_not() -> None:
    driver = Driver(make())
    nothing = driver.memory.handle(PopMessage(session_id="s", timestamp=1.0))
    assert isinstance(nothing, Step) and nothing.unchanged and nothing.reply.entry is None
    add(driver, "s", said("a"), said("b"))
    pop(driver, "s")
    assert len(driver.journal) == 2 and b'"type":"agent.pop"' in driver.journal[-1]
    before = state_lines(driver.memory)
    driver.restart()
    assert state_lines(driver.memory) == before
    assert history(driver, "s") == [said("a")]


def test_pop_unwinds_every_index_as_if_the_message_had_never_been_appended() -> None:
    popped = Driver(make())
    add(popped, "s", {"role": "system", "content": "sys"}, said("q"), call("c1"), output("c1"))
    popped.append("s", system("late system"), user("u"), assistant(None, "c9"), query_id="q9")
    for _ in range(4):
        pop(popped, "s")
    never = Driver(make())
    add(never, "s", {"role": "system", "content": "sys"}, said("q"), call("c1"))
    got, want = popped.memory.sessions["s"], never.memory.sessions["s"]
    for name in ("cum", "sys_idx", "sys_cum", "user_idx", "calls", "items"):
        assert getattr(got, name) == getattr(want, name), name
    assert got.by_query == want.by_query and list(got.query_positions(None)) == [0, 1, 2]
    assert list(got.query_positions("q9")) == [] and "q9" not in got.by_query
    assert got.tokens == want.tokens and got.last_append == 2


def test_pop_rewrites_nothing_that_was_snapshotted() -> None:
    driver = Driver(make())
    add(driver, "s", *[said(f"m{i}") for i in range(50)])
    driver.snapshot()
    assert len(history(driver, "s")) == 50  # a command: the snapshot's lines are now the session's
    conv = driver.memory.sessions["s"]
    lines = conv.lines
    first = lines[0]
    pop(driver, "s")
    assert conv.lines is lines and conv.lines[0] is first and len(lines) == 49
    assert len(driver.journal) == 1 and len(driver.journal[0]) < 100
    driver.restart()
    assert len(history(driver, "s")) == 49


def test_after_popping_the_latest_append_the_stateless_context_is_the_newest_unit() -> None:
    driver = Driver(make(Stateless()))
    add(driver, "s", said("q1"), call("c1"), output("c1"))
    add(driver, "s", said("q2"))
    assert contents(driver.context("s")) == ["q2"]
    pop(driver, "s")
    assert [m.get("type", "message") for m in dicts(driver.context("s"))] == [
        "function_call", "function_call_output"]


def test_pop_drops_a_summary_that_stood_for_the_message_and_ignores_one_being_made() -> None:
    driver = Driver(make(TokenBudget(120, 0.5, 1), summarizer=RecordingSummarizer()))
    for turn in range(4):
        driver.append("s", user(f"q{turn} " + "x" * 30), assistant(f"a{turn} " + "y" * 30))
    driver.context("s")
    (applied,) = driver.run_jobs()
    conv = driver.memory.sessions["s"]
    assert applied.applied and conv.summary is not None
    through = conv.summary.through
    # pops down to the message the summary starts after: the summary still holds
    while conv.entries[-1].sequence >= through:
        pop(driver, "s")
    assert conv.summary is not None
    pop(driver, "s")  # one it stands for
    assert conv.summary is None
    assert driver.context("s").summary_version == 0
    # a summary asked for before a pop arrives late: ignored, and asked for again
    driver.append("s", user("more " + "z" * 60), assistant("ok " + "w" * 60))
    driver.context("s")
    assert driver.jobs
    pop(driver, "s")
    driver.append("s", assistant("again " + "w" * 60))
    (late,) = driver.run_jobs()
    assert not late.applied
    driver.context("s")
    assert driver.jobs  # pending was cleared by the pop: a new summary is asked for
    assert [reply.applied for reply in driver.run_jobs()] == [True]
    before = state_lines(driver.memory)
    driver.restart()
    assert state_lines(driver.memory) == before


def test_a_summary_made_before_a_pop_is_ignored_also_after_a_restart() -> None:
    driver = Driver(make(TokenBudget(120, 0.5, 1), summarizer=RecordingSummarizer()))
    for turn in range(4):
        driver.append("s", user(f"q{turn} " + "x" * 30), assistant(f"a{turn} " + "y" * 30))
    driver.context("s")
    (job,) = driver.jobs
    pop(driver, "s")
    driver.snapshot()
    driver.memory = driver.rebuilt()
    result = job.deliver(JobResult(value=job.work()))
    assert isinstance(result, ApplySummary) and result.pops == 0
    assert not driver.send(result).applied


def test_pop_trims_the_turn_record_of_the_messages_it_takes_back() -> None:
    driver = Driver(make())
    add(driver, "s", said("q"))
    add(driver, "s", reasoning(), call("c1"), output("c1"), turn=Turn(input_tokens=5))
    pop(driver, "s")
    (record,) = driver.send(ListTurns(session_id="s", now=driver.clock))
    assert (record.first_sequence, record.last_sequence, record.message_count) == (2, 3, 3)
    pop(driver, "s")
    pop(driver, "s")
    assert driver.send(ListTurns(session_id="s", now=driver.clock)) == []


def test_history_gives_the_newest_last_messages_in_order() -> None:
    driver = Driver(make())
    add(driver, "s", *[said(f"m{i}") for i in range(6)])
    assert [m["content"] for m in history(driver, "s", last=2)] == ["m4", "m5"]
    assert len(history(driver, "s", last=10)) == 6
    assert history(driver, "s", last=0) == [] and history(driver, "nobody", last=3) == []
    with pytest.raises(mnemex.InvalidInput, match="last"):
        history(driver, "s", last=-1)


def test_a_snapshot_under_another_counter_recounts_items_as_items() -> None:
    driver = Driver(make())
    add(driver, "s", said("abcdefgh"), call("c", name="fn", arguments="xyz"), reasoning("why"))
    driver.snapshot()
    restored = driver.rebuilt()  # the same counter: counts kept
    settings = AgentSettings(counter=EstimatedTokens())
    other = type(restored).restore("agent", driver.image, settings)  # type: ignore[arg-type]
    assert [e.tokens for e in restored.sessions["s"].entries] == [4 + 8, 4 + 2 + 3, 4 + 3]
    assert [e.tokens for e in other.sessions["s"].entries] == [4 + 2, 4 + 1 + 1, 4 + 1]
    assert [e.item for e in other.sessions["s"].entries] == ["message", "function_call", "reasoning"]


def test_the_summary_pair_takes_the_shape_of_the_session() -> None:
    driver = Driver(make(TokenBudget(120, 0.5, 1), summarizer=RecordingSummarizer()))
    for turn in range(4):
        driver.append("s", user(f"q{turn} " + "x" * 30), assistant(f"a{turn} " + "y" * 30))
    driver.context("s")
    driver.run_jobs()
    assert "tool_calls" in dicts(driver.context("s"))[0]  # chat: an assistant tool call
    add(driver, "s", reply("an item now"))
    assert dicts(driver.context("s"))[0]["type"] == "function_call"
    pop(driver, "s")
    assert "tool_calls" in dicts(driver.context("s"))[0]
