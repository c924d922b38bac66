"""Summarizers: what compresses the old part of a conversation.

A Summarizer turns the previous summary (if any) and a run of messages into a
new summary of about ``target_tokens``. It runs beside the actor, in a worker
thread (never inside a handler), so it may block on I/O; what it returns is
journaled, so it need not be deterministic.

Two come with mnemex:

* ``ExtractiveSummarizer`` needs no model: it keeps the most salient sentences
  (names, numbers, decisions, what the user said about themselves) within the
  token target, in their original order, folding in the previous summary.
* ``LLMSummarizer`` asks any OpenAI-compatible ``/v1/chat/completions``
  endpoint (OpenAI, vLLM, llama.cpp, Ollama...) through mnemex's one LLM client
  (``mnemex._llm.LLMClient``), with timeouts and retries; a failure raises
  SummaryError and the conversation stays usable (the context is cut to the
  budget until a later attempt succeeds).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from mnemex._llm import LLMCallError, LLMClient
from mnemex.conversations.tokens import EstimatedTokens, TokenCounter, content_text
from mnemex.errors import SummaryError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "SummaryRequest",
    "Summarizer",
    "transcript",
    "truncate_to_tokens",
]


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What to summarize: ``previous`` (the summary being folded in, or None), then
    ``messages`` (chat messages as dicts, oldest first), into about
    ``target_tokens`` tokens as counted by ``counter``."""

    previous: str | None
    messages: Sequence[Mapping[str, Any]]
    target_tokens: int
    counter: TokenCounter = field(default_factory=EstimatedTokens)


@runtime_checkable
class Summarizer(Protocol):
    """Makes a summary. Called in a worker thread; may block; raises on failure."""

    def summarize(self, request: SummaryRequest) -> str: ...


def _message_line(message: Mapping[str, Any]) -> str:
    role = str(message.get("role", "?"))
    text, _ = content_text(message.get("content"))
    calls = message.get("tool_calls") or ()
    parts = [text.strip()] if text.strip() else []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            parts.append(f"called {function.get('name', '?')}({function.get('arguments', '')})")
    if role in ("tool", "function"):
        role = f"{role} result"
    return f"{role}: {' '.join(parts)}" if parts else ""


def transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages as plain text, one ``role: text`` line each."""
    return "\n".join(line for line in map(_message_line, messages) if line)


def truncate_to_tokens(text: str, target_tokens: int, counter: TokenCounter) -> str:
    """``text`` cut (at a word boundary where possible) to at most ``target_tokens``."""
    if counter.count(text) <= target_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # longest prefix that fits
        mid = (lo + hi + 1) // 2
        if counter.count(text[:mid]) + 1 <= target_tokens:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo]
    if not text[lo].isspace():  # mid-word: back to the last space, unless that loses too much
        space = cut.rfind(" ")
        if space > lo // 2:
            cut = cut[:space]
    return cut.rstrip() + "…"


# -- extractive ------------------------------------------------------------------------
_ENDS: Final = ".!?\u3002\uff01\uff1f"  # ASCII and CJK full stops, exclamation and question marks
_SENTENCE: Final = re.compile(f"[^{_ENDS}\\n]+(?:[{_ENDS}]+|$)", re.MULTILINE)
_NUMBER: Final = re.compile(r"\d")
_NAME: Final = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
_DECISION: Final = re.compile(
    r"\b(decid\w*|agree\w*|chose|choose|will|won't|must|need\w*|plan\w*|deadline|prefer\w*|"
    r"always|never|remember|important|confirm\w*|book\w*|order\w*|schedul\w*|"
    r"budget|because|todo|next step\w*|result\w*|error|fail\w*|fix\w*)\b",
    re.IGNORECASE,
)
_SELF: Final = re.compile(r"\b(I am|I'm|my|I live|I work|I like|I love|I hate|I want|call me)\b",
                          re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Sentence:
    order: int
    prefix: str
    text: str
    score: float


class ExtractiveSummarizer:
    """A summary made of the conversation's own sentences, chosen by salience: numbers,
    proper names, decisions and plans, what the user says about themselves, and
    what an earlier summary already kept. Deterministic, no model, no I/O."""

    __slots__ = ()

    def summarize(self, request: SummaryRequest) -> str:
        counter = request.counter
        candidates: list[_Sentence] = []
        order = 0
        if request.previous:
            for line in request.previous.splitlines():
                for sentence in _sentences(line):
                    candidates.append(_Sentence(order, "", sentence, _salience(sentence) + 2.0))
                    order += 1
        count = len(request.messages)
        for position, message in enumerate(request.messages):
            role = str(message.get("role", ""))
            line = _message_line(message)
            if not line:
                continue
            body = line.split(": ", 1)[1]
            recency = position / max(count, 1)
            bonus = 1.0 if role == "user" else 0.0
            for sentence in _sentences(body):
                candidates.append(_Sentence(order, f"{role}: " if role else "",
                                            sentence, _salience(sentence) + bonus + recency))
                order += 1
        if not candidates:
            return ""
        chosen: list[_Sentence] = []
        seen: set[str] = set()
        used = 0
        for candidate in sorted(candidates, key=lambda s: (-s.score, -s.order)):
            key = candidate.text.casefold()
            if key in seen:
                continue
            cost = counter.count(candidate.prefix + candidate.text) + 1
            if used + cost > request.target_tokens:
                continue
            seen.add(key)
            chosen.append(candidate)
            used += cost
        if not chosen:  # one sentence larger than the whole target: keep its start
            best = max(candidates, key=lambda s: (s.score, s.order))
            return truncate_to_tokens(best.prefix + best.text, request.target_tokens, counter)
        chosen.sort(key=lambda s: s.order)
        return "\n".join(s.prefix + s.text for s in chosen)

    def __repr__(self) -> str:
        return "ExtractiveSummarizer()"


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if len(s.strip()) > 1]


def _salience(sentence: str) -> float:
    score = 1.0
    if _NUMBER.search(sentence):
        score += 2.0
    score += min(3, len(_NAME.findall(sentence))) * 1.0
    if _DECISION.search(sentence):
        score += 2.0
    if _SELF.search(sentence):
        score += 2.0
    if sentence.endswith("?"):
        score -= 0.5  # questions matter less than their answers
    return score


# -- LLM -------------------------------------------------------------------------------
_SYSTEM_PROMPT: Final = (
    "You compress conversations for an AI agent's memory. Write a concise summary of the "
    "conversation below so the agent can continue it without the original messages. Keep every "
    "name, number, date, identifier, decision, commitment, open question and user preference; "
    "keep what tools were called and what they returned when it matters. If a previous summary "
    "is given, fold it in: the result replaces it. Write plain text, no preamble, at most "
    "{target} tokens."
)


class LLMSummarizer:
    """Summaries from an OpenAI-compatible chat completions endpoint.

    ``base_url`` is the API root as OpenAI clients take it (``https://api.openai.com/v1``,
    ``http://127.0.0.1:8000/v1``); the request goes to ``{base_url}/chat/completions``.
    The API key is read from the environment variable ``api_key_env`` at each call
    (no header when it is unset, for local servers). ``timeout`` bounds each
    attempt in seconds; ``retries`` more attempts follow a timeout, a connection
    error or a 5xx/429 answer. A transcript above ``max_input_tokens`` is first
    cut down extractively. Raises SummaryError when no attempt succeeds.
    """

    def __init__(self, *, base_url: str = "https://api.openai.com/v1", model: str = "gpt-4o-mini",
                 api_key_env: str = "OPENAI_API_KEY", timeout: float = 30.0, retries: int = 1,
                 max_input_tokens: int = 24_000, temperature: float = 0.2,
                 headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"LLMSummarizer base_url must be an http(s) URL, got {base_url!r}")
        if not timeout > 0:
            raise ValueError(f"LLMSummarizer timeout must be > 0 seconds, got {timeout!r}")
        self.client = LLMClient(base_url=base_url, model=model, api_key_env=api_key_env, timeout=timeout,
                                retries=max(0, retries), headers=headers, temperature=temperature,
                                transport=transport)
        self.max_input_tokens = max_input_tokens

    @property
    def url(self) -> str:
        """Where summaries are asked for: ``{base_url}/chat/completions``."""
        return self.client.url

    @property
    def model(self) -> str:
        """The model asked."""
        return self.client.model

    def __repr__(self) -> str:
        return f"LLMSummarizer(url={self.url!r}, model={self.model!r})"

    def _messages(self, request: SummaryRequest) -> list[dict[str, str]]:
        text = transcript(request.messages)
        budget = self.max_input_tokens
        if request.counter.count(text) > budget:
            text = ExtractiveSummarizer().summarize(
                SummaryRequest(None, request.messages, budget, request.counter))
        user = f"Conversation:\n{text}"
        if request.previous:
            user = f"Previous summary:\n{request.previous}\n\n{user}"
        return [{"role": "system", "content": _SYSTEM_PROMPT.format(target=request.target_tokens)},
                {"role": "user", "content": user}]

    def summarize(self, request: SummaryRequest) -> str:
        try:
            completion = self.client.complete(self._messages(request),
                                              max_tokens=max(64, int(request.target_tokens * 1.2)))
        except LLMCallError as exc:
            raise SummaryError(f"summary endpoint {exc.url} {exc.detail}") from exc
        text = completion.text.strip()
        if not text:
            raise SummaryError(f"summary endpoint {self.url} gave an empty summary")
        return truncate_to_tokens(text, request.target_tokens, request.counter)
