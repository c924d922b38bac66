"""The extractive summarizer and the default token estimate."""

from __future__ import annotations

import pytest
from agent_support import assistant, tool, user

from mnemex.conversations.summaries import (
    ExtractiveSummarizer,
    SummaryRequest,
    transcript,
    truncate_to_tokens,
)
from mnemex.conversations.tokens import EstimatedTokens, TokenCounter, content_text, message_tokens

COUNTER = EstimatedTokens()


def summarize(messages: list[dict[str, object]], target: int, previous: str | None = None) -> str:
    return ExtractiveSummarizer().summarize(SummaryRequest(previous, messages, target, COUNTER))


CONVERSATION = [
    user("Hi there. I'm John Carter and I write Java at Acme."),
    assistant("Nice to meet you. How can I help today?"),
    user("Well, it is a nice day. The weather is fine."),
    user("We decided to migrate the billing service to Kotlin by March 15."),
    assistant(None, "c1"),
    tool("c1", "Ticket BILL-4312 created with priority 2."),
    assistant("Okay. Sure. Sounds good."),
]


def test_extractive_summary_keeps_names_numbers_and_decisions_within_the_target() -> None:
    text = summarize(CONVERSATION, 60)
    assert COUNTER.count(text) <= 60
    assert "John Carter" in text
    assert "March 15" in text
    assert "BILL-4312" in text
    assert "weather" not in text  # small talk goes first
    assert text.index("John Carter") < text.index("March 15")  # original order kept


def test_extractive_summary_folds_in_the_previous_one_and_is_deterministic() -> None:
    previous = "user: My dog is called Rex and she is 7."
    text = summarize(CONVERSATION, 80, previous=previous)
    assert text.splitlines()[0] == previous  # the old summary's facts come first, as they were
    assert text == summarize(CONVERSATION, 80, previous=previous)


def test_extractive_summary_of_one_huge_sentence_is_cut_to_the_target() -> None:
    text = summarize([user("word " * 5000)], 50)
    assert 0 < COUNTER.count(text) <= 50 and text.endswith("…")
    assert summarize([], 50) == ""


def test_extractive_summary_splits_unicode_sentences() -> None:
    chinese = "我叫李雷。我在北京工作\uff0c预算是 300 元\uff01天气很好。"
    text = summarize([user(chinese), user("Ich heiße Jürgen.")], 40)
    assert "300" in text and "Jürgen" in text


def test_transcript_names_roles_and_tool_calls() -> None:
    lines = transcript([user("hi"), assistant(None, "c1"), tool("c1", "ok")]).splitlines()
    assert lines == ["user: hi", "assistant: called fn_c1({})", "tool result: ok"]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("abcd", 1), ("abcde", 2), ("x" * 400, 100), ("日本", 2), ("🧠", 1), ("é" * 4, 2)],
)
def test_the_default_estimate_is_a_quarter_of_the_utf8_bytes(text: str, tokens: int) -> None:
    assert COUNTER.count(text) == tokens
    assert isinstance(COUNTER, TokenCounter)


def test_message_tokens_count_overhead_parts_and_tool_calls() -> None:
    text, others = content_text([{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {}}])
    assert (text, others) == ("abcd", 1)
    assert message_tokens(COUNTER, text, others, ["fn", "{}"]) == 4 + 1 + 85 + 1 + 1


def test_truncate_to_tokens_cuts_at_a_word_boundary() -> None:
    text = truncate_to_tokens("alpha beta gamma delta epsilon", 5, COUNTER)
    assert text == "alpha beta gamma…" and COUNTER.count(text) <= 5
    assert truncate_to_tokens("short", 5, COUNTER) == "short"
