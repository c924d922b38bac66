"""AgentMemory against a simple model (hypothesis stateful): random appends, context
reads with compressions (delivered, failed or lost), completions, deletions, policy
changes, snapshots and restarts. The history must always be exactly what was
appended, every context view must be a valid chat within its budget, and replay
must rebuild the live state line for line."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from agent_support import Driver, RecordingSummarizer, make, state_lines
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import mnemex
from mnemex.conversations.protocol import (
    CompleteSession,
    DeleteSession,
    GetHistory,
    ListMessages,
    MaxMessages,
    Policy,
    SetPolicy,
    Stateless,
    TokenBudget,
    WatchSession,
)

SESSIONS = ("s1", "s2")
POLICIES: list[Policy] = [MaxMessages(3), MaxMessages(12), TokenBudget(240, keep_recent_turns=1),
                          TokenBudget(420, 0.5, 2), TokenBudget(300, 0.9, 3), Stateless()]
# mostly repeated words (so budgets fill up), sometimes any short unicode text
TEXT = st.builds(lambda word, n: word * n, st.sampled_from(["lorem ", "ипсум ", "数据 ", "🧠"]),
                 st.integers(3, 30)) | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)),
                                               max_size=8)


@st.composite
def turns(draw: Any, ids: Any) -> list[dict[str, Any]]:
    """A valid run of messages: plain ones and assistant tool chains."""
    out: list[dict[str, Any]] = []
    kinds = st.sampled_from(["user", "assistant", "system", "chain"])
    for kind in draw(st.lists(kinds, min_size=1, max_size=5)):
        if kind == "chain":
            calls = [f"call{next(ids)}" for _ in range(draw(st.integers(1, 2)))]
            out.append({"role": "assistant", "content": None,
                        "tool_calls": [{"id": c, "type": "function",
                                        "function": {"name": "f", "arguments": draw(TEXT)}} for c in calls]})
            out.extend({"role": "tool", "tool_call_id": c, "content": draw(TEXT)} for c in calls)
        else:
            out.append({"role": kind, "content": draw(TEXT)})
    return out


def is_summary(message: dict[str, Any]) -> bool:
    if message.get("role") == "tool":
        return str(message.get("tool_call_id", "")).startswith("memory_compress_")
    calls = message.get("tool_calls") or ()
    return any(str(call.get("id", "")).startswith("memory_compress_") for call in calls)


class AgentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count()
        self.driver = Driver(make(summarizer=RecordingSummarizer()))
        self.model: dict[str, list[dict[str, Any]]] = {}
        self.last_append: dict[str, list[dict[str, Any]]] = {}
        self.completed: set[str] = set()
        self.policy: Policy = MaxMessages()

    @initialize(policy=st.sampled_from(POLICIES))
    def start(self, policy: Policy) -> None:
        self.policy = policy
        self.driver.send(SetPolicy(policy=policy))

    @rule(session=st.sampled_from(SESSIONS), data=st.data())
    def append(self, session: str, data: Any) -> None:
        messages = data.draw(turns(self.ids))
        reply = self.driver.append(session, *messages)
        assert reply.count == len(messages)
        if messages:
            self.model.setdefault(session, []).extend(messages)
            self.last_append[session] = messages
            self.completed.discard(session)

    @rule(session=st.sampled_from(SESSIONS))
    def append_an_orphan_tool_result(self, session: str) -> None:
        before = state_lines(self.driver.memory)
        with pytest.raises(mnemex.InvalidInput):
            self.driver.append(session, {"role": "user", "content": "fine"},
                               {"role": "tool", "tool_call_id": f"missing{next(self.ids)}", "content": "x"})
        assert state_lines(self.driver.memory) == before

    @rule(session=st.sampled_from(SESSIONS), max_tokens=st.none() | st.integers(1, 400),
          then=st.sampled_from(["deliver", "fail", "keep pending"]))
    def context(self, session: str, max_tokens: int | None, then: str) -> None:
        self.check_context(session, max_tokens)
        if then == "deliver":
            self.deliver_summaries()
        elif then == "fail":
            self.driver.run_jobs(fail=True)

    def check_context(self, session: str, max_tokens: int | None) -> None:
        window = self.driver.context(session, max_tokens=max_tokens)
        view = [msgspec.json.decode(raw) for raw in window.messages]
        history = self.model.get(session, [])
        if not history:
            assert view == []
            return
        # a valid chat: every tool result follows its call
        calls: set[str] = set()
        for message in view:
            calls |= {c["id"] for c in message.get("tool_calls") or ()}
            if message["role"] == "tool":
                assert message["tool_call_id"] in calls
        # never empty, always ending with the newest message
        assert view and view[-1] == history[-1]
        # what is not the summary is a subsequence of the history
        stored = [m for m in view if not is_summary(m)]
        position = iter(history)
        assert all(any(m == h for h in position) for m in stored)
        if not isinstance(self.policy, Stateless):
            systems = [m for m in history if m["role"] == "system"]
            assert [m for m in stored if m["role"] == "system"] == systems
        else:
            assert all(m in self.last_append[session] for m in stored)
        budget = max_tokens if max_tokens is not None else (
            self.policy.max_context_tokens if isinstance(self.policy, TokenBudget) else None)
        if budget is not None and not window.over_budget:
            assert window.tokens <= budget
        event(f"context under {type(self.policy).__name__}")
        event(f"context: summary={window.summary_version > 0} over_budget={window.over_budget}")

    @rule()
    def deliver_summaries(self) -> None:
        for reply in self.driver.run_jobs():
            event(f"summary applied: {reply.applied}")

    @rule(session=st.sampled_from(SESSIONS))
    def complete(self, session: str) -> None:
        self.driver.send(CompleteSession(session_id=session, timestamp=self.driver.tick()))
        if session in self.model:
            self.completed.add(session)

    @rule(session=st.sampled_from(SESSIONS))
    def delete(self, session: str) -> None:
        reply = self.driver.send(DeleteSession(session_id=session, timestamp=self.driver.tick()))
        assert reply.session_ids == ([session] if session in self.model else [])
        self.model.pop(session, None)
        self.completed.discard(session)

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
    def history_is_what_was_appended(self) -> None:
        for session in SESSIONS:
            entries = self.driver.send(GetHistory(session_id=session, now=self.driver.clock))
            assert [msgspec.json.decode(e.message) for e in entries] == self.model.get(session, [])
            assert [e.sequence for e in entries] == sorted(e.sequence for e in entries)
            watch = self.driver.send(WatchSession(session_id=session))
            assert watch.exists == (session in self.model)
            assert watch.completed == (session in self.completed)
        page = self.driver.send(ListMessages(limit=None))
        assert page.total == sum(len(v) for v in self.model.values())
        sequences = [e.sequence for e in page.entries]
        assert sequences == sorted(set(sequences))


AgentMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=50, deadline=None)
test_agent_memory_against_a_model = AgentMachine.TestCase


# Generated rule sequences are mostly short; long programs of operations, weighted
# towards appends and reads, reach deep histories, repeated compressions and
# restarts in between.
_ids = itertools.count(1_000_000)
_APPEND = st.tuples(st.just("append"), st.sampled_from(SESSIONS), turns(_ids))
_CONTEXT = st.tuples(st.just("context"), st.sampled_from(SESSIONS), st.none() | st.integers(1, 400),
                     st.sampled_from(["deliver", "deliver", "fail", "keep pending"]))
OPERATION = st.one_of(
    *[_APPEND] * 6,
    *[_CONTEXT] * 4,
    st.tuples(st.just("complete"), st.sampled_from(SESSIONS)),
    st.tuples(st.just("delete"), st.sampled_from(SESSIONS)),
    st.tuples(st.just("change_policy"), st.sampled_from(POLICIES)),
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("restart")),
)


@settings(max_examples=40, deadline=None)
@given(policy=st.sampled_from(POLICIES), program=st.lists(OPERATION, min_size=20, max_size=80))
def test_long_programs_keep_history_views_and_replay_right(policy: Policy, program: list[Any]) -> None:
    machine = AgentMachine()
    machine.start(policy)
    for name, *args in program:
        if name == "append":
            session, messages = args
            reply = machine.driver.append(session, *messages)
            assert reply.count == len(messages)
            machine.model.setdefault(session, []).extend(messages)
            machine.last_append[session] = messages
            machine.completed.discard(session)
        else:
            getattr(machine, name)(*args)
        machine.history_is_what_was_appended()
    before = state_lines(machine.driver.memory)
    machine.driver.restart()
    assert state_lines(machine.driver.memory) == before
