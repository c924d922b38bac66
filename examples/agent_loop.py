"""An agent loop with short-term memory, driven by a scripted model.

Run: python examples/agent_loop.py [DATA_DIR]

Each turn the loop calls ``agent.context_for_model_call`` before the model (it
stores the new user message and returns the pruned, compressed context) and
``agent.record_turn`` after it (it stores the model's reply with the turn's
token usage). The scripted model calls a tool once, so the loop also shows a
tool chain being stored and kept whole. A small TokenBudget makes compression
happen within a few turns; the summary arrives as a ``memory_compress`` tool
result. Finally the runtime restarts on the same directory and the agent
searches what it did before.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import trio

import mnemex

QUESTIONS = [
    "Hi, I'm John. I write Java at Acme and I'm moving to Lisbon in March.",
    "What's the weather like in Lisbon?",
    "Remember that my budget for the flat is 1,500 euros a month.",
    "Which neighbourhoods would you suggest for a developer?",
    "And how far are they from the office near Saldanha?",
    "Great. What did I say my budget was?",
]


class ScriptedModel:
    """Stands in for a chat completion API: answers from a script, calls a weather
    tool when asked about the weather, and reports token usage like an API does."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, int]]:
        self.calls += 1
        prompt_tokens = sum(len(json.dumps(m)) // 4 for m in messages)
        last = messages[-1]
        if last["role"] == "user" and "weather" in str(last["content"]):
            reply = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{self.calls}", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Lisbon"})}}]}
        elif last["role"] == "tool":
            reply = {"role": "assistant", "content": f"It is {last['content']} in Lisbon today."}
        else:
            summary = next((m["content"] for m in messages if m["role"] == "tool"
                            and str(m.get("tool_call_id", "")).startswith("memory_compress")), None)
            seen = f" (I remember: {summary.splitlines()[1][:60]}...)" if summary else ""
            reply = {"role": "assistant",
                     "content": f"Answer #{self.calls} to: {str(last['content'])[:40]}{seen}"}
        return reply, {"prompt_tokens": prompt_tokens, "completion_tokens": len(json.dumps(reply)) // 4}


def run_tool(call: dict[str, Any]) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 24°C"}


async def agent_turn(agent: mnemex.AgentRef, model: ScriptedModel, session: str, question: str,
                     query_id: str) -> str:
    new: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for iteration in range(1, 5):
        context = await agent.context_for_model_call(session, new, query_id=query_id)
        reply, usage = model.complete(context)
        tool_results = [run_tool(call) for call in reply.get("tool_calls") or ()]
        # the reply and the tool results it caused are stored together: a chain is never split
        await agent.record_turn(session, [reply, *tool_results], usage=usage,
                                iteration=iteration, query_id=query_id)
        if not tool_results:
            return str(reply["content"])
        new = []  # the tool results are stored; the next call only needs the context
    return "(gave up after 4 iterations)"


async def main(data_dir: str) -> None:
    config = mnemex.Config(data_dir=data_dir)
    async with mnemex.open_runtime(config) as rt:
        agent = rt.agent("assistant", policy=mnemex.TokenBudget(max_context_tokens=200, keep_recent_turns=2))
        await agent.append("chat-1", [{"role": "system", "content": "You are a relocation assistant."}])
        model = ScriptedModel()
        for number, question in enumerate(QUESTIONS, 1):
            answer = await agent_turn(agent, model, "chat-1", question, query_id=f"q{number}")
            view = await agent.context_view("chat-1")
            print(f"user: {question}\n  bot: {answer}")
            print(f"  memory: {view.stored} stored, {view.kept} in context, {view.tokens} tokens, "
                  f"summary v{view.summary_version} of {view.summarized} messages"
                  f"{' (pending)' if view.pending_summary else ''}")
            await trio.sleep(0.05)  # let a pending summary land, as the next user message would
        await agent.complete("chat-1")

    async with mnemex.open_runtime(config) as rt:  # a restart: everything is still there
        agent = rt.agent("assistant")
        stats = await agent.stats()
        print(f"\nafter a restart: {stats.total_messages} messages, {stats.turns} turns, "
              f"policy {stats.policy}")
        for hit in await agent.search_turns("weather Lisbon", top_k=2):
            print(f"  turn {hit.turn.iteration} of {hit.turn.query_id} (score {hit.score:.2f}): "
                  f"tools {hit.turn.tool_calls}, {hit.turn.input_tokens} tokens in")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(main, tmp)
