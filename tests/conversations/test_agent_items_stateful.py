"""AgentMemory with Responses items and pops against a list model (hypothesis stateful):
appends of item runs (reasoning, parallel calls, outputs, messages) and of chat
turns, pops, context reads with summaries delivered, failed or kept pending, policy
changes, snapshots and restarts. The history is always what was appended minus what
was popped, every context is a valid input (systems, then a suffix of the history
that starts outside any model response, with every output after its call), and
replay rebuilds the state line for line."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
from agent_support import Driver, RecordingSummarizer, make, state_lines
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mnemex.conversations.protocol import (
    AppendItems,
    GetHistory,
    ListMessages,
    MaxMessages,
    Policy,
    PopMessage,
    SetPolicy,
    Stateless,
    TokenBudget,
)
from mnemex.conversations.validation import messages_to_raw

POLICIES: list[Policy] = [MaxMessages(3), MaxMessages(10), TokenBudget(200, 0.5, 1), TokenBudget(400, 0.8, 2),
                          Stateless()]
TEXT = st.builds(lambda word, n: word * n, st.sampled_from(["lorem ", "数据 ", "🧠"]), st.integers(1, 20))


@st.composite
def item_run(draw: Any, ids: Any) -> list[dict[str, Any]]:
    """Items as the SDK stores a turn: input, then model responses and tool outputs."""
    out: list[dict[str, Any]] = []
    kinds = st.sampled_from(["user", "system", "response", "tools"])
    for kind in draw(st.lists(kinds, min_size=1, max_size=4)):
        if kind in ("user", "system"):
            out.append({"role": kind, "content": draw(TEXT)})
        elif kind == "response":
            if draw(st.booleans()):
                out.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": draw(TEXT)}]})
            out.append({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": draw(TEXT)}]})
        else:
            calls = [f"call{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            if draw(st.booleans()):
                out.append({"type": "reasoning", "summary": [], "encrypted_content": draw(TEXT)})
            out.extend({"type": "function_call", "call_id": c, "name": "f", "arguments": draw(TEXT)}
                       for c in calls)
            out.extend({"type": "function_call_output", "call_id": c, "output": draw(TEXT)}
                       for c in draw(st.permutations(calls)))
    return out


@st.composite
def chat_run(draw: Any, ids: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind in draw(st.lists(st.sampled_from(["user", "assistant", "chain"]), min_size=1, max_size=3)):
        if kind == "chain":
            c = f"call{next(ids)}"
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c, "type": "function", "function": {"name": "f", "arguments": draw(TEXT)}}]})
            out.append({"role": "tool", "tool_call_id": c, "content": draw(TEXT)})
        else:
            out.append({"role": kind, "content": draw(TEXT)})
    return out


def kind(message: dict[str, Any]) -> str:
    return str(message.get("type") or "message")


def is_output(message: dict[str, Any]) -> bool:
    return kind(message).endswith("_output") or message.get("role") == "tool"


def is_model(message: dict[str, Any]) -> bool:
    """Part of a model response (items only: chat messages never join)."""
    if "type" not in message:
        return False
    return kind(message) in ("reasoning", "function_call") or message.get("role") == "assistant"


def is_summary(message: dict[str, Any]) -> bool:
    ids = [message.get("call_id"), message.get("tool_call_id")]
    ids += [c.get("id") for c in message.get("tool_calls") or ()]
    return any(str(i).startswith("memory_compress_") for i in ids if i)


class ItemsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count()
        self.driver = Driver(make(summarizer=RecordingSummarizer()))
        self.model: dict[str, list[dict[str, Any]]] = {}
        self.policy: Policy = MaxMessages()

    @initialize(policy=st.sampled_from(POLICIES))
    def start(self, policy: Policy) -> None:
        self.policy = policy
        self.driver.send(SetPolicy(policy=policy))

    @rule(data=st.data())
    def append_items(self, data: Any) -> None:
        items = data.draw(item_run(self.ids))
        self.driver.send(AppendItems(session_id="items", items=messages_to_raw(items),
                                     timestamp=self.driver.tick()))
        self.model.setdefault("items", []).extend(items)

    @rule(data=st.data())
    def append_chat(self, data: Any) -> None:
        messages = data.draw(chat_run(self.ids))
        self.driver.append("chat", *messages)
        self.model.setdefault("chat", []).extend(messages)

    @rule(session=st.sampled_from(["items", "chat"]), times=st.integers(1, 4))
    def pop(self, session: str, times: int) -> None:
        for _ in range(times):
            popped = self.driver.send(PopMessage(session_id=session, timestamp=self.driver.tick()))
            model = self.model.get(session, [])
            if model:
                assert popped.entry is not None and msgspec.json.decode(popped.entry.message) == model.pop()
            else:
                assert popped.entry is None
            assert popped.message_count == len(model)

    @rule(session=st.sampled_from(["items", "chat"]), max_tokens=st.none() | st.integers(1, 300),
          then=st.sampled_from(["deliver", "fail", "keep pending"]))
    def context(self, session: str, max_tokens: int | None, then: str) -> None:
        window = self.driver.context(session, max_tokens=max_tokens)
        view = [msgspec.json.decode(raw) for raw in window.messages]
        history = self.model.get(session, [])
        if not history:
            assert view == []
        else:
            self.check_view(session, view, history)
            budget = max_tokens if max_tokens is not None else (
                self.policy.max_context_tokens if isinstance(self.policy, TokenBudget) else None)
            if budget is not None and not window.over_budget:
                assert window.tokens <= budget
            event(f"{session} context: summary={window.summary_version > 0} over={window.over_budget}")
        if then == "deliver":
            for reply in self.driver.run_jobs():
                event(f"summary applied: {reply.applied}")
        elif then == "fail":
            self.driver.run_jobs(fail=True)

    def check_view(self, session: str, view: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
        assert view and view[-1] == history[-1]
        summary = [m for m in view if is_summary(m)]
        if session == "items":
            assert all("type" in m for m in summary)  # an item session gets an item pair
        stored = [m for m in view if not is_summary(m)]
        # systems (kept wherever they stand; under Stateless those of the latest append),
        # then a suffix of the history that starts on a unit
        valid = []
        for start in range(len(history) + 1):
            tail = history[start:]
            head = stored[:len(stored) - len(tail)]
            if len(tail) > len(stored) or stored[len(head):] != tail:
                continue
            systems = [m for m in history[:start] if m.get("role") in ("system", "developer")]
            stateless = isinstance(self.policy, Stateless)
            if head != (systems[len(systems) - len(head):] if stateless else systems):
                continue
            first = tail[0] if tail else None
            inside = first is not None and is_model(first) and start > 0 and is_model(history[start - 1])
            valid.append(first is None or first.get("role") in ("system", "developer")
                         or (not is_output(first) and not inside))
        assert any(valid), f"not systems + a suffix of the history starting on a unit: {view}"
        seen: set[str] = set()
        for message in view:
            seen |= {c["id"] for c in message.get("tool_calls") or ()}
            if kind(message) == "function_call":
                seen.add(message["call_id"])
            if is_output(message):
                assert message.get("call_id", message.get("tool_call_id")) in seen

    @rule(policy=st.sampled_from(POLICIES))
    def change_policy(self, policy: Policy) -> None:
        self.policy = policy
        self.driver.send(SetPolicy(policy=policy))

    @rule()
    def snapshot(self) -> None:
        self.driver.snapshot()

    @rule()
    def restart(self) -> None:
        before = state_lines(self.driver.memory)
        self.driver.restart()
        assert state_lines(self.driver.memory) == before

    @invariant()
    def history_is_appends_minus_pops(self) -> None:
        for session in ("items", "chat"):
            entries = self.driver.send(GetHistory(session_id=session, now=self.driver.clock))
            assert [msgspec.json.decode(e.message) for e in entries] == self.model.get(session, [])
            conv = self.driver.memory.sessions.get(session)
            if conv is not None:
                assert conv.tokens == sum(e.tokens for e in entries)
                assert len(conv.cum) == len(entries) + 1
        sequences = [e.sequence for e in self.driver.send(ListMessages(limit=None)).entries]
        assert sequences == sorted(set(sequences))


ItemsMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
test_items_and_pops_against_a_model = ItemsMachine.TestCase
