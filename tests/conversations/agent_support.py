"""Helpers for driving AgentMemory sans-io: build messages, send commands, run the
summary jobs a context read asks for, snapshot and restore."""

from __future__ import annotations

from typing import Any

import msgspec

from mnemex.conversations.behaviour import (
    AgentMemory,
    AgentSettings,
    agent_codec,
    encode_agent_command,
    is_agent_write,
)
from mnemex.conversations.protocol import AppendMessages, ContextWindow, GetContext, Policy, Turn
from mnemex.conversations.summaries import Summarizer, SummaryRequest
from mnemex.conversations.validation import messages_to_raw
from mnemex.effects import Emit, Image, Job, JobResult, Step


class CharTokens:
    """One token per character: budgets in tests are easy to reason about."""

    @property
    def name(self) -> str:
        return "chars"

    def count(self, text: str) -> int:
        return len(text)


class RecordingSummarizer:
    """Summaries named after what they were given, so folding can be checked."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        first = request.messages[0].get("content") if request.messages else None
        last = request.messages[-1].get("content") if request.messages else None
        folded = f" after <{request.previous}>" if request.previous else ""
        return f"S{len(self.requests)}: {len(request.messages)} messages {first}..{last}{folded}"


class FailingSummarizer:
    def summarize(self, request: SummaryRequest) -> str:
        raise RuntimeError("model unavailable")


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, *calls: str, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, **extra}
    if calls:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": f"fn_{c}", "arguments": "{}"}} for c in calls]
    return message


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def make(policy: Policy | None = None, *, summarizer: Summarizer | None = None,
         **settings: Any) -> AgentMemory:
    options: dict[str, Any] = {"counter": CharTokens(), **settings}
    if policy is not None:
        options["default_policy"] = policy
    if summarizer is not None:
        options["summarizer"] = summarizer
    return AgentMemory("agent", AgentSettings(**options))


def unwrap(out: Any) -> Any:
    return out.reply if isinstance(out, Step) else out


def effects_of(out: Any) -> tuple[Any, ...]:
    return out.effects if isinstance(out, Step) else ()


class Driver:
    """An AgentMemory with its journal (encoded journaled commands), as the kernel
    keeps it: restart() rebuilds from the last snapshot + journal."""

    def __init__(self, memory: AgentMemory) -> None:
        self.memory = memory
        self.settings = memory.settings
        self.journal: list[bytes] = []
        self.image: Image | None = None
        self.clock = 1000.0
        self.emitted: list[Emit] = []
        self.jobs: list[Job] = []

    def send(self, command: Any) -> Any:
        payload = encode_agent_command(command) if is_agent_write(command) else b""
        out = self.memory.handle(command)
        if is_agent_write(command):
            self.journal.append(payload)
        for effect in effects_of(out):
            if isinstance(effect, Emit):
                self.emitted.append(effect)
            elif isinstance(effect, Job):
                self.jobs.append(effect)
        return unwrap(out)

    def tick(self, seconds: float = 1.0) -> float:
        self.clock += seconds
        return self.clock

    def append(self, session_id: str, *messages: Any, query_id: str | None = None,
               turn: Turn | None = None, at: float | None = None) -> Any:
        return self.send(AppendMessages(session_id=session_id, messages=messages_to_raw(messages),
                                        timestamp=self.tick() if at is None else at,
                                        query_id=query_id, turn=turn))

    def context(self, session_id: str, max_tokens: int | None = None,
                at: float | None = None) -> ContextWindow:
        window = self.send(GetContext(session_id=session_id, now=self.tick(0.0) if at is None else at,
                                      max_tokens=max_tokens))
        assert isinstance(window, ContextWindow)
        return window

    def run_jobs(self, fail: bool = False) -> list[Any]:
        """Run every pending job now and deliver its result as the kernel would."""
        replies = []
        while self.jobs:
            job = self.jobs.pop(0)
            if fail:
                result = JobResult(error=RuntimeError("job failed on purpose"))
            else:
                try:
                    result = JobResult(value=job.work())
                except Exception as exc:
                    result = JobResult(error=exc)
            replies.append(self.send(job.deliver(result)))
        return replies

    def snapshot(self) -> None:
        data = self.memory.snapshot()
        records = list(data.records() if callable(data.records) else data.records)
        self.image = Image(records, dict(msgspec.json.decode(msgspec.json.encode(dict(data.extra)))), {})
        self.journal.clear()

    def rebuilt(self) -> AgentMemory:
        memory = (AgentMemory("agent", self.settings) if self.image is None
                  else AgentMemory.restore("agent", self.image, self.settings))
        for payload in self.journal:
            memory.handle(agent_codec.decode(payload))
        return memory

    def restart(self) -> None:
        self.jobs.clear()  # a job pending at a crash is lost
        self.memory = self.rebuilt()


def state_lines(memory: AgentMemory) -> tuple[list[bytes], dict[str, Any]]:
    data = memory.snapshot()
    return list(data.records() if callable(data.records) else data.records), dict(data.extra)


def dicts(window: ContextWindow) -> list[dict[str, Any]]:
    return [msgspec.json.decode(raw) for raw in window.messages]


def contents(window: ContextWindow) -> list[Any]:
    return [m.get("content") for m in dicts(window)]
