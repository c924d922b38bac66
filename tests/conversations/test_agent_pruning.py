"""Pruning policies, sans-io: every edge the context view must get right."""

from __future__ import annotations

from typing import Any

import pytest
from agent_support import (
    Driver,
    FailingSummarizer,
    RecordingSummarizer,
    assistant,
    contents,
    dicts,
    make,
    system,
    tool,
    user,
)

from mnemex.conversations.conversation import SUMMARY_CLOSE, SUMMARY_OPEN
from mnemex.conversations.protocol import KeepAll, MaxMessages, PopMessage, SetPolicy, Stateless, TokenBudget
from mnemex.conversations.pruning import summary_target


def assert_valid_chat(messages: list[dict[str, Any]]) -> None:
    """What a chat API enforces: every tool result follows the call it answers."""
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "assistant":
            open_calls |= {call["id"] for call in message.get("tool_calls") or ()}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, messages


# -- MaxMessages ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "history", "expected"),
    [
        (5, [], []),
        (5, ["u1", "a1"], ["u1", "a1"]),
        (3, ["u1", "a1", "u2", "a2", "u3"], ["u2", "a2", "u3"]),
        (2, ["S0", "u1", "a1", "u2", "a2"], ["S0", "a2"]),
        (3, ["S0", "u1", "a1", "u2", "a2"], ["S0", "u2", "a2"]),
        # system messages everywhere: all kept, in place, and counted; the newest others fill the rest
        (5, ["S0", "u1", "S1", "a1", "u2", "S2", "a2"], ["S0", "S1", "u2", "S2", "a2"]),
        (6, ["S0", "u1", "S1", "a1", "S2"], ["S0", "u1", "S1", "a1", "S2"]),
        (4, ["S0", "u1", "S1", "a1", "S2"], ["S0", "S1", "a1", "S2"]),
        # the system messages alone fill n: the newest message is still kept (a context has its latest turn)
        (1, ["S0", "u1", "S1", "a1", "u2", "S2", "a2"], ["S0", "S1", "S2", "a2"]),
        (1, ["S0", "u1", "S1", "a1", "S2", "S3"], ["S0", "S1", "a1", "S2", "S3"]),
        (1, ["u1", "a1", "u2"], ["u2"]),
    ],
)
def test_max_messages_keeps_at_most_n_messages_system_messages_included(
        n: int, history: list[str], expected: list[str]) -> None:
    driver = Driver(make(MaxMessages(n)))
    for label in history:
        message = system(label) if label.startswith("S") else (user(label) if label.startswith("u")
                                                               else assistant(label))
        driver.append("s", message)
    window = driver.context("s")
    assert contents(window) == expected
    assert window.kept == len(expected) and window.stored == len(history)
    assert window.tokens == sum(4 + len(text) for text in expected)


def test_max_messages_never_starts_with_a_tool_result_cut_from_its_call() -> None:
    driver = Driver(make(MaxMessages(2)))
    driver.append("s", user("weather?"), assistant(None, "c1", "c2"), tool("c1", "rain"), tool("c2", "cold"),
                  assistant("rainy and cold"))
    window = driver.context("s")
    # the newest two are [tool c2, answer]: c2's call would be cut off, so only the answer is kept
    assert contents(window) == ["rainy and cold"]
    assert_valid_chat(dicts(window))


def test_max_messages_view_is_cut_further_by_max_tokens() -> None:
    driver = Driver(make(MaxMessages(10)))
    driver.append("s", system("sys"), user("a" * 20), assistant("b" * 20), user("c" * 20))
    assert contents(driver.context("s", max_tokens=7 + 24 + 24)) == ["sys", "b" * 20, "c" * 20]
    assert contents(driver.context("s", max_tokens=7 + 24)) == ["sys", "c" * 20]
    tight = driver.context("s", max_tokens=10)
    assert contents(tight) == ["sys", "c" * 20] and tight.over_budget


def test_max_messages_keeps_a_tool_chain_whole_or_leaves_it_out_whole() -> None:
    driver = Driver(make(MaxMessages(5)))
    driver.append("s", system("sys"), user("weather?"), assistant(None, "c1", "c2"), tool("c1", "rain"),
                  tool("c2", "cold"), assistant("rainy and cold"))
    window = driver.context("s")
    # 5 places: the system message, then the call with both results and the answer (4)
    assert contents(window)[0] == "sys" and len(contents(window)) == 5 and window.kept == 5
    assert_valid_chat(dicts(window))
    driver.send(SetPolicy(policy=MaxMessages(4)))
    # 3 places left: [result c1, result c2, answer] would cut the results from their call
    assert contents(driver.context("s")) == ["sys", "rainy and cold"]


# -- KeepAll ------------------------------------------------------------------------
def test_keep_all_sends_every_message_cut_only_by_max_tokens() -> None:
    driver = Driver(make(KeepAll()))
    driver.append("s", system("sys"), user("a" * 20), assistant("b" * 20))
    chat(driver, 40, size=1)
    window = driver.context("s")
    assert window.kept == window.stored == 83 and contents(window)[:3] == ["sys", "a" * 20, "b" * 20]
    assert contents(driver.context("s", max_tokens=7 + 2 * 9)) == ["sys", "q39 x", "a39 y"]


# -- Stateless ------------------------------------------------------------------------
def test_stateless_context_is_only_the_latest_append_but_history_keeps_all() -> None:
    driver = Driver(make(Stateless()))
    driver.append("s", system("sys"), user("first"))
    driver.append("s", assistant("reply"), user("second"))
    assert contents(driver.context("s")) == ["reply", "second"]
    assert len(driver.memory.sessions["s"]) == 4


def test_stateless_popped_down_to_system_messages_gives_them_not_an_empty_context() -> None:
    # found by hypothesis: the pops took the latest append and every unit before it,
    # and the view of what was left (one system message) was empty
    driver = Driver(make(MaxMessages(3)))
    driver.append("s", system("sys"), user("first"))
    driver.send(SetPolicy(policy=Stateless()))
    driver.append("s", user("second"), user("third"))
    for _ in range(3):
        driver.send(PopMessage(session_id="s", timestamp=driver.tick()))
    assert contents(driver.context("s")) == ["sys"]
    driver.snapshot()
    driver.restart()
    assert contents(driver.context("s")) == ["sys"]
    driver.append("s", user("fourth"))
    assert contents(driver.context("s")) == ["fourth"]


# -- TokenBudget ------------------------------------------------------------------------
def chat(driver: Driver, turns: int, size: int = 40, session: str = "s") -> None:
    for i in range(turns):
        driver.append(session, user(f"q{i} " + "x" * size), assistant(f"a{i} " + "y" * size))


def test_token_budget_below_the_trigger_keeps_everything_and_asks_for_no_summary() -> None:
    driver = Driver(make(TokenBudget(1000)))
    driver.append("s", system("be brief"))
    chat(driver, 5)
    window = driver.context("s")
    assert window.kept == 11 and not window.pending_summary and not driver.jobs
    assert window.tokens == sum(4 + len(c) for c in contents(window))


def test_token_budget_compresses_into_a_virtual_memory_compress_tool_call() -> None:
    summarizer = RecordingSummarizer()
    driver = Driver(make(TokenBudget(600, keep_recent_turns=2), summarizer=summarizer))
    driver.append("s", system("be brief"))
    chat(driver, 10)  # 20 messages of ~47 tokens: over 0.8 * 600
    pending = driver.context("s")
    assert pending.pending_summary and len(driver.jobs) == 1
    assert pending.tokens <= 600 and contents(pending)[0] == "be brief"  # fallback: cut to the budget
    assert driver.run_jobs()[0].applied
    window = driver.context("s")
    messages = dicts(window)
    assert messages[0] == system("be brief")
    call, result = messages[1], messages[2]
    assert call["role"] == "assistant" and call["content"] is None
    assert call["tool_calls"][0]["function"]["name"] == "memory_compress"
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert result["content"].startswith(SUMMARY_OPEN + "\n")
    assert result["content"].endswith("\n" + SUMMARY_CLOSE)
    assert "S1: 16 messages q0" in result["content"]
    # the last two user turns, with everything after them
    assert [m["content"][:2] for m in messages[3:]] == ["q8", "a8", "q9", "a9"]
    assert window.summarized == 16 and window.summary_version == 1 and window.tokens <= 600
    assert_valid_chat(messages)


def test_repeated_compression_folds_the_old_summary_into_the_new_one() -> None:
    summarizer = RecordingSummarizer()
    driver = Driver(make(TokenBudget(600, keep_recent_turns=2), summarizer=summarizer))
    chat(driver, 10)
    driver.context("s")
    driver.run_jobs()
    chat(driver, 10)
    driver.context("s")
    driver.run_jobs()
    assert len(summarizer.requests) == 2
    second = summarizer.requests[1]
    assert second.previous is not None and second.previous.startswith("S1:")
    assert second.messages[0]["content"].startswith("q8")  # starts where the first one stopped
    window = driver.context("s")
    assert window.summary_version == 2 and window.summarized == 36
    assert "after <S1:" in dicts(window)[1]["content"]


def test_a_tool_chain_is_never_split_at_the_compression_cut() -> None:
    driver = Driver(make(TokenBudget(500, keep_recent_turns=1), summarizer=RecordingSummarizer()))
    chat(driver, 4)
    driver.append("s", user("look it up"), assistant(None, "c1"), tool("c1", "r" * 60), assistant(None, "c2"),
                  tool("c2", "s" * 60), assistant("done"))
    driver.context("s")
    driver.run_jobs()
    for budget in (None, 400, 200, 120, 60):
        messages = dicts(driver.context("s", max_tokens=budget))
        assert_valid_chat(messages)
        assert messages[-1]["content"] == "done"


def test_when_the_recent_turns_alone_exceed_the_budget_only_the_current_chain_is_kept() -> None:
    driver = Driver(make(TokenBudget(400, keep_recent_turns=3), summarizer=RecordingSummarizer()))
    driver.append("s", system("sys"))
    driver.append("s", user("task " + "t" * 150), assistant(None, "c1"), tool("c1", "r" * 150),
                  assistant(None, "c2"), tool("c2", "s" * 100))
    driver.context("s")
    driver.run_jobs()
    messages = dicts(driver.context("s"))
    assert messages[0] == system("sys")
    assert messages[1]["tool_calls"][0]["function"]["name"] == "memory_compress"
    assert [m.get("tool_call_id") or m["tool_calls"][0]["id"] for m in messages[3:]] == ["c2", "c2"]
    assert_valid_chat(messages)


def test_a_single_message_larger_than_the_budget_is_sent_alone_and_flagged() -> None:
    driver = Driver(make(TokenBudget(200)))
    driver.append("s", system("sys"), user("hello"), assistant("hi"))
    driver.append("s", user("z" * 1000))
    window = driver.context("s")
    assert contents(window) == ["sys", "z" * 1000]
    assert window.over_budget and window.tokens > 200 and window.kept == 2


def test_system_messages_anywhere_survive_compression() -> None:
    driver = Driver(make(TokenBudget(600, keep_recent_turns=1), summarizer=RecordingSummarizer()))
    driver.append("s", system("S-start"))
    chat(driver, 4)
    driver.append("s", system("S-middle"))
    chat(driver, 4)
    driver.context("s")
    driver.run_jobs()
    window = driver.context("s")
    roles = [m["role"] for m in dicts(window)]
    assert contents(window)[:2] == ["S-start", "S-middle"]
    assert roles[2:4] == ["assistant", "tool"]  # the summary, after the system messages
    summarizer_input = driver.memory.settings.summarizer.requests[0].messages  # type: ignore[attr-defined]
    assert all(m["role"] != "system" for m in summarizer_input)


def test_empty_and_unknown_sessions_give_an_empty_context() -> None:
    driver = Driver(make(TokenBudget(500)))
    window = driver.context("nope")
    assert window.messages == [] and window.kept == 0 and window.budget == 500
    driver.append("s")  # no messages: nothing stored
    assert driver.context("s").messages == []


def test_unicode_is_stored_and_returned_verbatim_in_every_view() -> None:
    texts = ["héllo wörld", "日本語のテキスト", "emoji 🧠🚀 and ZWJ 👩‍💻", "مرحبا بالعالم",
             "\u0000 nul \\ \"quotes\""]
    for policy in (MaxMessages(3), TokenBudget(10_000), Stateless()):
        driver = Driver(make(policy))
        driver.append("s", *[user(t) for t in texts])
        assert contents(driver.context("s"))[-1] == texts[-1]
        assert [m["content"] for m in dicts(driver.context("s"))] == (
            texts[-3:] if isinstance(policy, MaxMessages) else texts)


def test_summary_target_follows_the_window() -> None:
    assert TokenBudget(1000).summary_tokens == 500
    assert TokenBudget(8192).summary_tokens == 819
    assert TokenBudget(100_000).summary_tokens == 4000
    assert summary_target(TokenBudget(8192)) == 819
    assert summary_target(TokenBudget(400)) == 100  # never more than a quarter of a small window


def test_a_failed_summary_keeps_the_conversation_usable_and_retries_after_a_back_off() -> None:
    driver = Driver(make(TokenBudget(600, keep_recent_turns=2), summarizer=FailingSummarizer(),
                         summary_retry=10.0))
    chat(driver, 10)
    assert driver.context("s").pending_summary
    assert driver.run_jobs() == [None]  # SummaryFailed is answered with nothing
    window = driver.context("s")
    assert not window.pending_summary and not driver.jobs and window.tokens <= 600
    assert window.summary_version == 0 and driver.memory.summaries_failed == 1
    assert contents(window)[-1].startswith("a9")
    driver.tick(11)
    assert driver.context("s").pending_summary and len(driver.jobs) == 1


def test_a_late_summary_for_a_deleted_and_recreated_session_is_ignored() -> None:
    driver = Driver(make(TokenBudget(600, keep_recent_turns=2), summarizer=RecordingSummarizer()))
    chat(driver, 10)
    driver.context("s")
    from mnemex.conversations.protocol import DeleteSession

    driver.send(DeleteSession(session_id="s", timestamp=driver.tick()))
    chat(driver, 10)
    replies = driver.run_jobs()
    assert not replies[0].applied
    assert driver.context("s").summary_version == 0


def test_a_summary_pending_at_a_crash_is_asked_for_again() -> None:
    driver = Driver(make(TokenBudget(600, keep_recent_turns=2), summarizer=RecordingSummarizer()))
    chat(driver, 10)
    assert driver.context("s").pending_summary
    driver.restart()  # the job is lost with the process
    assert driver.context("s").pending_summary and len(driver.jobs) == 1
    driver.run_jobs()
    assert driver.context("s").summary_version == 1


def test_a_session_policy_overrides_the_agent_policy() -> None:
    driver = Driver(make(MaxMessages(2)))
    chat(driver, 3, session="a")
    chat(driver, 3, session="b")
    driver.send(SetPolicy(policy=MaxMessages(4), session_id="b"))
    assert driver.context("a").kept == 2 and driver.context("b").kept == 4
    driver.send(SetPolicy(policy=Stateless()))
    assert driver.context("a").kept == 2 and driver.context("b").kept == 4  # the last append: one turn


def test_retain_pruned_forgets_what_no_view_can_show_again() -> None:
    driver = Driver(make(MaxMessages(3), retain="pruned"))
    driver.append("s", system("sys"))
    chat(driver, 60, size=1)
    conv = driver.memory.sessions["s"]
    assert len(conv) < 100 and conv.entries[0].role == "system"
    assert contents(driver.context("s"))[1:] == ["q59 x", "a59 y"]  # 3 messages, the system one counted
    budget = Driver(make(TokenBudget(600, keep_recent_turns=2), summarizer=RecordingSummarizer(),
                         retain="pruned"))
    chat(budget, 10)
    budget.context("s")
    budget.run_jobs()
    assert len(budget.memory.sessions["s"]) == 4
    assert budget.context("s").summarized == 16
