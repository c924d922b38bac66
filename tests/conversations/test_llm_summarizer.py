"""LLMSummarizer against a fake OpenAI-compatible server on 127.0.0.1: answers,
retries on 5xx, timeouts, bad bodies, and a conversation that stays usable while
the model is down (sans-io and through the runtime)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from agent_support import Driver, assistant, make, user
from waiting import eventually

import mnemex
from mnemex.conversations.kind import agent_kind
from mnemex.conversations.protocol import TokenBudget
from mnemex.conversations.summaries import LLMSummarizer, SummaryRequest
from mnemex.errors import SummaryError


class FakeModel:
    """What the fake endpoint does next: a queue of behaviours, then ``default``."""

    def __init__(self) -> None:
        self.script: list[str] = []
        self.default = "ok"
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.delay = 1.0
        self.lock = threading.Lock()

    def next(self) -> str:
        with self.lock:
            return self.script.pop(0) if self.script else self.default


def serve(model: FakeModel) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            model.requests.append(json.loads(body))
            model.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.path != "/v1/chat/completions":
                return self.reply(404, b'{"error":"no such path"}')
            behaviour = model.next()
            if behaviour == "slow":
                time.sleep(model.delay)  # the fake model is slow on purpose: a timeout is under test
                return self.reply(200, b"{}", quiet=True)
            if behaviour.isdigit():
                return self.reply(int(behaviour), b'{"error":{"message":"upstream trouble"}}')
            if behaviour == "garbage":
                return self.reply(200, b"<html>not json</html>")
            if behaviour == "empty":
                return self.reply(200, json.dumps({"choices": [{"message": {"content": "  "}}]}).encode())
            text = f"User is John; {len(model.requests)} call(s)."
            payload = {"id": "x", "object": "chat.completion", "model": "fake",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}]}
            return self.reply(200, json.dumps(payload).encode())

        def reply(self, status: int, body: bytes, quiet: bool = False) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                if not quiet:
                    raise

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.fixture
def fake() -> Iterator[tuple[FakeModel, str]]:
    model = FakeModel()
    server, url = serve(model)
    try:
        yield model, url
    finally:
        server.shutdown()
        server.server_close()


def request(previous: str | None = None) -> SummaryRequest:
    return SummaryRequest(previous, [user("I'm John, I write Java"), assistant("Noted, John.")], 600)


def test_a_summary_comes_from_the_endpoint_with_key_model_and_target(fake: tuple[FakeModel, str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    model, url = fake
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    summarizer = LLMSummarizer(base_url=url, model="tiny", api_key_env="FAKE_KEY", timeout=5)
    assert summarizer.summarize(request(previous="Earlier: John likes tea.")) == "User is John; 1 call(s)."
    sent = model.requests[0]
    assert sent["model"] == "tiny" and "at most 600 tokens" in sent["messages"][0]["content"]
    assert "Previous summary:\nEarlier: John likes tea." in sent["messages"][1]["content"]
    assert "user: I'm John, I write Java" in sent["messages"][1]["content"]
    assert model.headers[0]["authorization"] == "Bearer sk-test"


def test_no_key_in_the_environment_sends_no_authorization(fake: tuple[FakeModel, str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model, url = fake
    monkeypatch.delenv("FAKE_KEY", raising=False)
    LLMSummarizer(base_url=url, api_key_env="FAKE_KEY").summarize(request())
    assert "authorization" not in model.headers[0]


def test_a_5xx_is_retried_and_then_reported(fake: tuple[FakeModel, str]) -> None:
    model, url = fake
    model.script = ["503"]
    assert LLMSummarizer(base_url=url, retries=1).summarize(request()).startswith("User is John")
    model.script = ["500", "502"]
    with pytest.raises(SummaryError, match=r"answered 502.*2 attempts"):
        LLMSummarizer(base_url=url, retries=1).summarize(request())


@pytest.mark.parametrize(
    ("behaviour", "match"),
    [("400", "answered 400"), ("garbage", "without choices"), ("empty", "empty summary")],
)
def test_bad_answers_raise_summary_error_at_once(fake: tuple[FakeModel, str], behaviour: str,
                                                 match: str) -> None:
    model, url = fake
    model.default = behaviour
    with pytest.raises(SummaryError, match=match):
        LLMSummarizer(base_url=url, retries=3).summarize(request())
    assert len(model.requests) == 1


def test_a_slow_endpoint_times_out_within_the_bound(fake: tuple[FakeModel, str]) -> None:
    model, url = fake
    model.default = "slow"
    started = time.monotonic()
    with pytest.raises(SummaryError, match=r"timed out after 0\.2 s"):
        LLMSummarizer(base_url=url, timeout=0.2, retries=1).summarize(request())
    assert time.monotonic() - started < 1.5


def test_a_refused_connection_is_a_summary_error() -> None:
    with pytest.raises(SummaryError, match="request failed"):
        LLMSummarizer(base_url="http://127.0.0.1:9/v1", timeout=1, retries=0).summarize(request())


def test_the_conversation_stays_usable_while_the_model_is_down(fake: tuple[FakeModel, str]) -> None:
    model, url = fake
    model.default = "500"
    driver = Driver(make(TokenBudget(600, keep_recent_turns=2),
                         summarizer=LLMSummarizer(base_url=url, timeout=1, retries=0), summary_retry=1.0))
    for i in range(12):
        driver.append("s", user(f"question {i} " * 4), assistant(f"answer {i} " * 4))
    assert driver.context("s").pending_summary
    driver.run_jobs()
    window = driver.context("s")  # falls back: cut to the budget, newest kept
    assert not window.pending_summary and window.tokens <= 600 and window.summary_version == 0
    assert driver.memory.summaries_failed == 1
    model.default = "ok"
    driver.tick(2)
    assert driver.context("s").pending_summary
    assert driver.run_jobs()[0].applied
    assert "User is John" in bytes(driver.context("s").messages[1]).decode()


async def test_through_the_runtime_a_failing_model_falls_back_then_recovers(
        fake: tuple[FakeModel, str]) -> None:
    model, url = fake
    model.default = "slow"
    model.delay = 0.5
    config = mnemex.Config(data_dir=None, agent_policy="token_budget", agent_max_context_tokens=400,
                           agent_summary_retry=1.0)
    summarizer = LLMSummarizer(base_url=url, timeout=0.2, retries=0)
    async with mnemex.open_runtime(config, kinds=[agent_kind(config, summarizer=summarizer)]) as rt:
        agent = rt.agent("bot")
        for i in range(10):
            await agent.append("s", [user(f"question {i} " * 5), assistant(f"answer {i} " * 5)])
        view = await agent.context_view("s")
        assert view.pending_summary and view.tokens <= 400
        async def failed() -> bool:
            return (await agent.stats()).summaries_failed > 0

        await eventually(failed, what="the summary to fail")
        view = await agent.context_view("s")
        assert not view.pending_summary and view.summary_version == 0 and view.tokens <= 400
        await agent.append("s", [user("still here?")])  # appends never wait for the model
        assert (await agent.context("s"))[-1] == user("still here?")
        model.default = "ok"
        async def summarized() -> bool:
            return (await agent.context_view("s")).summary_version > 0

        await eventually(summarized, what="the summary to be made", timeout=10)
        assert "User is John" in (await agent.context("s"))[1]["content"]
