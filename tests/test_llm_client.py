"""LLMClient, the one OpenAI-compatible chat completions client: what it sends,
what it takes from an answer, how it retries and backs off, how it falls back
from a JSON Schema to JSON mode to none and remembers it, and the errors it
raises (sans-io through httpx.MockTransport, and over real HTTP to FakeLLM)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import mnemex
import mnemex._llm
from mnemex._llm import Completion, LLMCallError, LLMClient, TokenUsage, client_from_config
from mnemex.config import LLMConfig
from mnemex.errors import InvalidInput, ModelError
from mnemex.testing import FakeLLM

SCHEMA = {"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]}
HELLO = [{"role": "user", "content": "hello"}]


def answer(content: str | None = "hi", *, finish_reason: str | None = "stop", usage: Any = None,
           model: str | None = "served-model") -> dict[str, Any]:
    body: dict[str, Any] = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                         "finish_reason": finish_reason}]}
    if usage is not None:
        body["usage"] = usage
    if model is not None:
        body["model"] = model
    return body


class Script:
    """A MockTransport answering from a list of (status, body or exception) in turn."""

    def __init__(self, *steps: tuple[int, Any] | Exception, headers: dict[str, str] | None = None) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict[str, Any]] = []
        self.headers = headers or {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.bodies.append(json.loads(request.content))
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            raise step
        status, body = step
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.Response(status, content=content, headers=self.headers)

    def client(self, **options: Any) -> LLMClient:
        settings: dict[str, Any] = {"base_url": "http://llm.test/v1", "model": "tiny", "backoff": 0.0,
                                    "retries": 2, **options}
        return LLMClient(transport=httpx.MockTransport(self), **settings)


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    waits: list[float] = []
    monkeypatch.setattr(mnemex._llm, "_sleep", waits.append)
    yield waits


def test_a_completion_carries_text_reason_usage_model_and_format() -> None:
    script = Script((200, answer("the text", finish_reason="length",
                                 usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})))
    completion = script.client().complete(HELLO, max_tokens=50)
    assert completion == Completion(text="the text", finish_reason="length", usage=TokenUsage(7, 3, 10),
                                    model="served-model", response_format="none")
    sent = script.bodies[0]
    assert sent == {"model": "tiny", "messages": HELLO, "temperature": 0.0, "max_tokens": 50}
    assert str(script.requests[0].url) == "http://llm.test/v1/chat/completions"


def test_usage_and_model_missing_or_odd_are_tolerated() -> None:
    odd = {"prompt_tokens": 5, "completion_tokens": None, "total_tokens": "x"}
    completion = Script((200, answer(usage=odd, model=None))).client().complete(HELLO)
    assert completion.usage == TokenUsage(5, 0, 5) and completion.model == "tiny"
    assert Script((200, answer())).client().complete(HELLO).usage == TokenUsage()


def test_the_key_is_read_from_the_environment_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    script = Script((200, answer()))
    client = script.client(api_key_env="TEST_LLM_KEY", headers={"x-team": "memory"})
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)
    client.complete(HELLO)
    monkeypatch.setenv("TEST_LLM_KEY", "sk-1")
    client.complete(HELLO)
    monkeypatch.setenv("TEST_LLM_KEY", "")
    client.complete(HELLO)
    assert [r.headers.get("authorization") for r in script.requests] == [None, "Bearer sk-1", None]
    assert all(r.headers["x-team"] == "memory" for r in script.requests)


def test_a_schema_is_asked_for_as_structured_output() -> None:
    script = Script((200, answer('{"facts": []}')))
    completion = script.client().complete(HELLO, json_schema=SCHEMA, schema_name="facts_answer")
    assert script.bodies[0]["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "facts_answer", "schema": SCHEMA, "strict": False}}
    assert completion.response_format == "json_schema"


@pytest.mark.parametrize("refusal", [
    (400, {"error": {"message": "Invalid parameter: 'response_format' of type 'json_schema' is not supported "
                                "with this model.", "param": "response_format"}}),
    (422, {"detail": "json_schema: unknown field"}),
    (400, {"error": "structured output is not supported"}),
])
def test_a_refused_format_falls_back_and_is_remembered(refusal: tuple[int, Any]) -> None:
    script = Script(refusal, (200, answer("{}")))
    client = script.client()
    assert client.complete(HELLO, json_schema=SCHEMA).response_format == "json_object"
    assert client.complete(HELLO, json_schema=SCHEMA).response_format == "json_object"
    formats = [b["response_format"]["type"] for b in script.bodies]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert client.response_format == "json_object"
    assert script.client().response_format == "json_schema"  # per client: another one tries again
    client.complete(HELLO)  # no schema: no response_format at all
    assert "response_format" not in script.bodies[-1]


def test_json_object_refused_too_falls_back_to_none() -> None:
    refused = (400, {"error": {"message": "response_format is not supported"}})
    script = Script(refused, refused, (200, answer("{}")))
    client = script.client()
    assert client.complete(HELLO, json_schema=SCHEMA).response_format == "none"
    assert [b.get("response_format", {}).get("type") for b in script.bodies] == ["json_schema", "json_object",
                                                                                  None]
    client.complete(HELLO, json_schema=SCHEMA)
    assert "response_format" not in script.bodies[-1] and len(script.bodies) == 4


def test_a_400_about_something_else_is_an_error_without_fallback_or_retry() -> None:
    script = Script((400, {"error": {"message": "model 'tiny' does not exist"}}))
    with pytest.raises(LLMCallError) as error:
        script.client().complete(HELLO, json_schema=SCHEMA)
    assert error.value.reason == "http" and error.value.status == 400 and len(script.requests) == 1
    assert str(error.value).startswith("LLM endpoint http://llm.test/v1/chat/completions answered 400: ")
    assert "does not exist" in str(error.value)


def test_the_message_quotes_at_most_200_characters_of_the_body() -> None:
    with pytest.raises(LLMCallError) as error:
        Script((403, b"x" * 5000)).client().complete(HELLO)
    assert error.value.detail == f"answered 403: {'x' * 200!r}"


def test_5xx_and_429_are_retried_with_a_growing_bounded_backoff(no_sleep: list[float]) -> None:
    script = Script((500, {"error": "a"}), (502, {"error": "b"}), (429, {"error": "c"}),
                    (503, {"error": "d"}))
    with pytest.raises(LLMCallError) as error:
        script.client(retries=3, backoff=1.5).complete(HELLO)
    assert error.value.reason == "http" and error.value.status == 503
    assert "answered 503" in str(error.value) and "(4 attempts)" in str(error.value)
    assert no_sleep == [1.5, 3.0, 4.0]  # doubling, never past 4 s
    assert len(script.requests) == 4


def test_a_429_retry_after_is_honoured_up_to_the_bound(no_sleep: list[float]) -> None:
    script = Script((429, {"error": "slow down"}), (429, {"error": "slow down"}), (200, answer()),
                    headers={"retry-after": "2"})
    assert script.client(backoff=0.1).complete(HELLO).text == "hi"
    assert no_sleep == [2.0, 2.0]
    script = Script((429, {"error": "slow down"}), (200, answer()), headers={"retry-after": "3600"})
    script.client().complete(HELLO)
    assert no_sleep[-1] == 4.0


def test_transport_failures_are_retried_then_named(no_sleep: list[float]) -> None:
    script = Script(httpx.ConnectError("connection refused"), (200, answer("back")))
    assert script.client().complete(HELLO).text == "back"
    with pytest.raises(LLMCallError) as error:
        Script(httpx.ConnectError("connection refused")).client(retries=1).complete(HELLO)
    assert error.value.reason == "unreachable" and error.value.status is None
    assert "request failed" in str(error.value) and "(2 attempts)" in str(error.value)
    with pytest.raises(LLMCallError) as error:
        Script(httpx.ReadTimeout("slow")).client(retries=0, timeout=3).complete(HELLO)
    assert error.value.reason == "timeout"
    assert str(error.value) == ("LLM endpoint http://llm.test/v1/chat/completions timed out after 3 s "
                                "(ReadTimeout) (1 attempt)")
    assert isinstance(error.value, ModelError) and isinstance(error.value, mnemex.MnemexError)


@pytest.mark.parametrize(("body", "says"), [
    (b"<html>bad gateway</html>", "not a chat completion"),
    (json.dumps({"choices": []}).encode(), "without choices[0].message.content"),
    (json.dumps({"choices": [{"message": {"role": "assistant", "content": None}}]}).encode(), "without"),
    (json.dumps({"choices": [{"message": {"content": 3}}]}).encode(), "not a chat completion"),
    (json.dumps({"object": "error"}).encode(), "without choices[0].message.content"),
])
def test_an_answer_without_content_is_malformed_and_not_retried(body: bytes, says: str) -> None:
    script = Script((200, body))
    with pytest.raises(LLMCallError) as error:
        script.client().complete(HELLO)
    assert error.value.reason == "malformed" and says in str(error.value) and len(script.requests) == 1
    assert "http://llm.test/v1/chat/completions" in str(error.value)


def test_an_empty_content_is_an_answer() -> None:
    assert Script((200, answer(""))).client().complete(HELLO).text == ""


@pytest.mark.parametrize(("options", "says"), [
    ({"base_url": "llm.test/v1"}, "http(s) URL"),
    ({"model": " "}, "model is empty"),
    ({"timeout": 0}, "timeout must be > 0"),
    ({"retries": -1}, "retries must be >= 0"),
    ({"backoff": -1.0}, "backoff must be >= 0"),
])
def test_bad_settings_are_refused_at_once(options: dict[str, Any], says: str) -> None:
    settings = {"base_url": "http://llm.test/v1", "model": "tiny", **options}
    with pytest.raises(InvalidInput, match=says.replace("(", r"\(").replace(")", r"\)")):
        LLMClient(**settings)


def test_the_url_is_the_base_url_and_chat_completions() -> None:
    assert LLMClient(base_url="https://api.example/v1/", model="m").url == "https://api.example/v1/chat/completions"


# -- over real HTTP ------------------------------------------------------------------------
@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(model="fake") as fake:
        yield fake


def test_against_the_fake_server_a_call_is_one_request(llm: FakeLLM) -> None:
    llm.add("hello", "hi there", usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
    client = LLMClient(base_url=llm.base_url, model="tiny")
    completion = client.complete(HELLO, json_schema=SCHEMA)
    assert (completion.text, completion.usage, completion.model) == ("hi there", TokenUsage(3, 2, 5), "tiny")
    assert llm.calls == 1 and llm.requests[0]["messages"] == HELLO


def test_against_the_fake_server_a_slow_answer_times_out_within_the_bound(llm: FakeLLM) -> None:
    llm.slow(2.0)
    client = LLMClient(base_url=llm.base_url, model="tiny", timeout=0.2, retries=1, backoff=0.05)
    with pytest.raises(LLMCallError) as error:
        client.complete(HELLO)
    assert error.value.reason == "timeout" and "timed out after 0.2 s" in str(error.value)
    assert llm.calls == 2


def test_the_fake_server_lists_its_model_and_refuses_other_routes(llm: FakeLLM) -> None:
    with httpx.Client() as http:
        assert http.get(f"{llm.base_url}/models").json()["data"][0]["id"] == "fake"
        assert http.post(f"{llm.base_url}/embeddings", json={}).status_code == 404
        assert http.post(f"{llm.base_url}/chat/completions", content=b"{nope").status_code == 400
    assert llm.calls == 0


def test_the_fake_server_binds_loopback_and_stops_on_exit() -> None:
    with FakeLLM() as fake:
        url = fake.base_url
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    with pytest.raises(RuntimeError, match="not running"):
        fake.base_url  # noqa: B018
    with pytest.raises(LLMCallError) as error:
        LLMClient(base_url=url, model="tiny", timeout=1, retries=0).complete(HELLO)
    assert error.value.reason == "unreachable"


def test_a_callable_match_sees_the_whole_request(llm: FakeLLM) -> None:
    wants_json: Callable[[dict[str, Any]], bool] = lambda body: "response_format" in body  # noqa: E731
    llm.add(wants_json, {"facts": ["structured"]})
    client = LLMClient(base_url=llm.base_url, model="tiny")
    assert client.complete(HELLO, json_schema=SCHEMA).text == '{"facts":["structured"]}'
    assert client.complete(HELLO).text == '{"facts": []}'


def test_the_official_openai_client_talks_to_the_fake_server(llm: FakeLLM) -> None:
    import openai

    llm.add("where do I live", "In Berlin.", usage={"prompt_tokens": 4, "completion_tokens": 3,
                                                    "total_tokens": 7})
    with openai.OpenAI(base_url=llm.base_url, api_key="sk-test", max_retries=0) as client:
        reply = client.chat.completions.create(model="tiny", messages=[
            {"role": "user", "content": "where do I live?"}])
        assert [m.id for m in client.models.list()] == ["fake"]
    assert reply.choices[0].message.content == "In Berlin." and reply.usage is not None
    assert reply.usage.total_tokens == 7 and reply.choices[0].finish_reason == "stop"
    assert llm.headers[0]["authorization"] == "Bearer sk-test"


# -- configuration ------------------------------------------------------------------------------
def test_the_llm_section_and_its_flat_names() -> None:
    assert mnemex.Config().llm == LLMConfig()
    assert LLMConfig().base_url is None and LLMConfig().retries == 2 and LLMConfig().max_output_tokens == 2048
    config = mnemex.Config(llm_base_url="http://127.0.0.1:11434/v1", llm_model="llama3.2")
    assert (config.llm.base_url, config.llm_model) == ("http://127.0.0.1:11434/v1", "llama3.2")
    from_file = mnemex.load_config('[llm]\nbase_url = "http://h/v1"\ntimeout = 5\n')
    assert from_file.llm == LLMConfig(base_url="http://h/v1", timeout=5)
    assert mnemex.load_config(config.to_dict()) == config
    with pytest.raises(InvalidInput, match=r"config\.llm\.base_url is 'ftp://x'") as error:
        mnemex.Config(llm_base_url="ftp://x")
    assert error.value.field == "llm.base_url"
    with pytest.raises(InvalidInput, match=r"config\.llm\.temperature"):
        mnemex.load_config("[llm]\ntemperature = 3\n")


def test_client_from_config_takes_the_environment_over_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MNEMEX_LLM_BASE_URL", "MNEMEX_LLM_MODEL", "MNEMEX_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert client_from_config(LLMConfig()) is None
    settings = LLMConfig(base_url="http://file/v1", model="file-model", api_key_env="FILE_KEY", timeout=7,
                         retries=1, temperature=0.5)
    client = client_from_config(settings)
    assert client is not None
    taken = (client.url, client.model, client.api_key_env, client.timeout, client.retries, client.temperature)
    assert taken == ("http://file/v1/chat/completions", "file-model", "FILE_KEY", 7.0, 1, 0.5)
    monkeypatch.setenv("MNEMEX_LLM_BASE_URL", "http://env/v1")
    monkeypatch.setenv("MNEMEX_LLM_MODEL", "env-model")
    monkeypatch.setenv("MNEMEX_LLM_API_KEY", "sk-env")
    client = client_from_config(settings)
    assert client is not None
    assert (client.url, client.model, client.api_key_env) == ("http://env/v1/chat/completions", "env-model",
                                                              "MNEMEX_LLM_API_KEY")
