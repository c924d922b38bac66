"""LLMExtractor over real HTTP against FakeLLM on 127.0.0.1: one call per job,
structured output falling back as the server allows, one retry on an unusable
answer, failures as ExtractionError with their reason, usage summed, and the
MNEMEX_LLM_* environment over the config."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemex._llm import LLMCallError, LLMClient
from mnemex.config import LLMConfig
from mnemex.errors import ExtractionError, InvalidInput
from mnemex.knowledge.facts import (
    ExtractedFact,
    ExtractionRequest,
    Extractor,
    OfferedMemory,
    SourceMessage,
    Usage,
)
from mnemex.knowledge.llm import LLMExtractor, extractor_from_config
from mnemex.knowledge.prompt import PROMPT_VERSION
from mnemex.testing import FakeLLM

BERLIN = {"facts": [{"content": "The user lives in Berlin.", "kind": "fact", "categories": ["Personal"],
                     "confidences": [0.9], "importance": 0.7, "entities": ["Berlin"], "relation": "updates",
                     "target": 1, "attributed_to": "user", "valid_at": None, "messages": [5]}]}
LIVES_IN_BERLIN = ExtractedFact(content="The user lives in Berlin.", categories=("personal",),
                                confidences=(0.9,), importance=0.7, entities=("Berlin",), relation="updates",
                                target=1, attributed_to="user", messages=(5,))
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def request(text: str = "I moved to Berlin last month.") -> ExtractionRequest:
    return ExtractionRequest(
        session_id="s1",
        messages=[SourceMessage(5, "user", text, speaker="Alice", time=1714564800.0),
                  SourceMessage(6, "assistant", "Berlin is lovely in spring. Do you like it?")],
        context=[SourceMessage(4, "assistant", "Where do you live these days?")],
        offered=[OfferedMemory(1, "m-paris", "The user lives in Paris.")],
        observed_at=1714564800.0,
        categories={"personal": "facts about the user", "work": "jobs and projects"},
    )


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


def extractor(llm: FakeLLM, **options: float) -> LLMExtractor:
    settings = {"timeout": 5.0, "retries": 0, "backoff": 0.01, **options}
    client = LLMClient(base_url=llm.base_url, model="tiny", **settings)  # type: ignore[arg-type]
    return LLMExtractor(client, max_output_tokens=512)


def test_one_call_extracts_the_facts_the_model_gives(llm: FakeLLM) -> None:
    llm.add("I moved to Berlin", BERLIN, usage=USAGE)
    x = extractor(llm)
    assert isinstance(x, Extractor) and x.name == f"llm:tiny:{PROMPT_VERSION}"
    result = x.extract(request())
    assert result.facts == [LIVES_IN_BERLIN]
    assert result.extractor == f"llm:tiny:{PROMPT_VERSION}"
    assert result.usage == Usage(100, 20, 120, calls=1)
    assert llm.calls == 1


def test_the_request_shows_messages_context_memories_time_and_catalog(llm: FakeLLM) -> None:
    extractor(llm).extract(request())
    sent = llm.requests[0]
    assert sent["model"] == "tiny" and sent["max_tokens"] == 512 and sent["temperature"] == 0.0
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["facts"]
    system, user = sent["messages"]
    assert system["role"] == "system" and "USER" in system["content"]
    prompt = user["content"]
    assert "#5 user (Alice), 2024-05-01T12:00:00Z:\nI moved to Berlin last month." in prompt
    assert "#6 assistant:\nBerlin is lovely" in prompt
    assert "[1] The user lives in Paris." in prompt
    assert "- personal: facts about the user" in prompt
    context, new = prompt.split("New messages")
    assert "context only" in context and "#4 assistant" in context and "#4" not in new
    assert "Time of the new messages: 2024-05-01T12:00:00Z" in prompt


def test_nothing_to_extract_is_an_empty_result_not_an_error(llm: FakeLLM) -> None:
    result = extractor(llm).extract(request("hi!"))
    assert result.facts == [] and result.usage.calls == 1 and llm.calls == 1


def test_no_message_to_show_means_no_call(llm: FakeLLM) -> None:
    x = extractor(llm)
    empty = ExtractionRequest(session_id="s1", messages=[])
    assert x.extract(empty).facts == [] and x.extract(empty).usage == Usage()
    only_system = ExtractionRequest(session_id="s1", messages=[
        SourceMessage(0, "system", "You are helpful."),
        SourceMessage(1, "user", "<mnemex-memory>The user lives in Paris.</mnemex-memory>")])
    assert x.extract(only_system).facts == []
    assert llm.calls == 0


def test_a_server_without_json_schema_gets_json_object_and_later_calls_go_straight_to_it(
        llm: FakeLLM) -> None:
    llm.refuse_schema()
    llm.add("I moved to Berlin", BERLIN)
    x = extractor(llm)
    assert x.extract(request()).facts == [LIVES_IN_BERLIN]
    assert [r["response_format"]["type"] for r in llm.requests] == ["json_schema", "json_object"]
    assert x.extract(request()).usage.calls == 1
    assert [r["response_format"]["type"] for r in llm.requests][2:] == ["json_object"]
    assert x.client.response_format == "json_object"


def test_a_server_without_structured_output_gets_the_prompt_alone(llm: FakeLLM) -> None:
    llm.refuse_schema(json_object=True)
    llm.add("I moved to Berlin", BERLIN)
    x = extractor(llm)
    assert x.extract(request()).facts == [LIVES_IN_BERLIN]
    assert [r.get("response_format", {}).get("type") for r in llm.requests] == \
        ["json_schema", "json_object", None]
    x.extract(request())
    assert "response_format" not in llm.requests[-1] and llm.calls == 4


def test_an_unusable_answer_is_retried_once_with_what_was_wrong(llm: FakeLLM) -> None:
    llm.malformed("Sure! The user lives in Berlin.")
    llm.add("could not be used", BERLIN, usage=USAGE)
    result = extractor(llm).extract(request())
    assert result.facts == [LIVES_IN_BERLIN] and llm.calls == 2
    retry = llm.requests[1]["messages"]
    assert retry[:2] == llm.requests[0]["messages"]
    assert retry[2] == {"role": "assistant", "content": "Sure! The user lives in Berlin."}
    assert retry[3]["role"] == "user" and "holds no JSON object" in retry[3]["content"]
    shown = sum(len(message["content"]) for message in llm.requests[0]["messages"])
    assert result.usage.calls == 2
    assert result.usage.prompt_tokens == 100 + shown // 4 + 1  # the fake's estimate for the first answer
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_an_answer_cut_off_is_not_echoed_back(llm: FakeLLM) -> None:
    llm.add(lambda body: len(body["messages"]) == 2, '{"facts": [{"content": "The user li',
            finish_reason="length")
    llm.add("could not be used", BERLIN)
    assert extractor(llm).extract(request()).facts == [LIVES_IN_BERLIN]
    retry = llm.requests[1]["messages"]
    assert len(retry) == 3 and "cut off at the token limit" in retry[2]["content"]


def test_two_unusable_answers_raise_malformed(llm: FakeLLM) -> None:
    llm.malformed('{"type": "object", "properties": {"facts": {}}}')
    llm.malformed("I cannot help with that.")
    with pytest.raises(ExtractionError) as error:
        extractor(llm).extract(request())
    assert error.value.reason == "malformed" and llm.calls == 2
    assert "no usable facts in two answers" in str(error.value)
    assert "holds no JSON object" in str(error.value) and "echoes the JSON schema" in str(error.value)


def test_a_slow_model_times_out(llm: FakeLLM) -> None:
    llm.slow(2.0)
    started = time.monotonic()
    with pytest.raises(ExtractionError) as error:
        extractor(llm, timeout=0.2).extract(request())
    assert error.value.reason == "timeout" and "timed out after 0.2 s" in str(error.value)
    assert isinstance(error.value.__cause__, LLMCallError)
    assert time.monotonic() - started < 1.5


def test_an_unreachable_endpoint_is_reported_as_such() -> None:
    with socket.socket() as probe:  # a port nobody listens on: bound, then released
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = LLMClient(base_url=f"http://127.0.0.1:{port}/v1", model="tiny", timeout=2, retries=1,
                       backoff=0.01)
    with pytest.raises(ExtractionError) as error:
        LLMExtractor(client).extract(request())
    assert error.value.reason == "unreachable"
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in str(error.value)
    assert "(2 attempts)" in str(error.value)


def test_a_5xx_is_retried_and_the_next_answer_counts(llm: FakeLLM) -> None:
    llm.fail(500)
    llm.fail(503)
    llm.add("I moved to Berlin", BERLIN, usage=USAGE)
    result = extractor(llm, retries=2).extract(request())
    assert result.facts == [LIVES_IN_BERLIN] and llm.calls == 3
    assert result.usage == Usage(100, 20, 120, calls=1)  # a failed attempt reports no tokens


def test_5xx_past_the_retries_is_an_http_error(llm: FakeLLM) -> None:
    llm.fail(502, times=5)
    with pytest.raises(ExtractionError) as error:
        extractor(llm, retries=1).extract(request())
    assert error.value.reason == "http" and llm.calls == 2
    assert "answered 502" in str(error.value) and "(2 attempts)" in str(error.value)


def test_a_4xx_is_not_retried(llm: FakeLLM) -> None:
    llm.fail(401, body='{"error": {"message": "invalid api key"}}')
    with pytest.raises(ExtractionError, match=r"answered 401.*invalid api key") as error:
        extractor(llm, retries=3).extract(request())
    assert error.value.reason == "http" and llm.calls == 1


def test_categories_outside_the_catalog_are_dropped(llm: FakeLLM) -> None:
    llm.add("I moved", {"facts": [{"content": "a", "categories": ["WORK", "hobby", "personal"],
                                   "confidences": [0.4, 0.5, 0.6]}]})
    (found,) = extractor(llm).extract(request()).facts
    assert (found.categories, found.confidences) == (("work", "personal"), (0.4, 0.6))


def test_relations_only_to_offered_memories_and_messages_only_from_the_new_ones(llm: FakeLLM) -> None:
    llm.add("I moved", {"facts": [
        {"content": "a", "relation": "duplicate", "target": 2, "messages": [4, 5, 6]},
        {"content": "b", "relation": "extends", "target": 1}]})
    facts = extractor(llm).extract(request()).facts
    assert [(f.relation, f.target, f.messages) for f in facts] == [(None, None, (5, 6)), ("extends", 1, ())]


def test_the_environment_overrides_the_config(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMEX_LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("MNEMEX_LLM_MODEL", "env-model")
    monkeypatch.setenv("MNEMEX_LLM_API_KEY", "sk-from-mnemex")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai")
    x = extractor_from_config(LLMConfig(base_url=None, model="file-model", max_output_tokens=99))
    assert x is not None and x.name == f"llm:env-model:{PROMPT_VERSION}"
    x.extract(request())
    assert llm.requests[0]["model"] == "env-model" and llm.requests[0]["max_tokens"] == 99
    assert llm.headers[0]["authorization"] == "Bearer sk-from-mnemex"


def test_the_config_alone_and_no_endpoint_at_all(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MNEMEX_LLM_BASE_URL", "MNEMEX_LLM_MODEL", "MNEMEX_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MY_KEY", "sk-mine")
    assert extractor_from_config(LLMConfig()) is None
    x = extractor_from_config(LLMConfig(base_url=llm.base_url, model="file-model", api_key_env="MY_KEY"))
    assert x is not None and x.name == f"llm:file-model:{PROMPT_VERSION}"
    x.extract(request())
    assert llm.requests[0]["model"] == "file-model" and llm.headers[0]["authorization"] == "Bearer sk-mine"
    monkeypatch.setenv("MNEMEX_LLM_BASE_URL", "ftp://nowhere")
    with pytest.raises(InvalidInput, match="MNEMEX_LLM_BASE_URL must be an http"):
        extractor_from_config(LLMConfig())


def test_threads_extract_at_once(llm: FakeLLM) -> None:
    llm.add("I moved to Berlin", BERLIN)
    x = extractor(llm)
    results: list[list[ExtractedFact]] = []
    threads = [threading.Thread(target=lambda: results.append(x.extract(request()).facts)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == [[LIVES_IN_BERLIN]] * 8 and llm.calls == 8


def test_a_recording_replays_through_the_extractor(tmp_path: Path) -> None:
    recording = tmp_path / "answers.jsonl"
    recording.write_text("\n".join([
        json.dumps({"match": "I moved to Berlin", "content": BERLIN, "usage": USAGE}),
        "",
        json.dumps({"match": "my cat", "content": '{"facts": ["The user has a cat."]}'}),
        json.dumps({"content": {"facts": ["default answer"]}}),
    ]) + "\n")
    with FakeLLM.from_recording(recording) as llm:
        x = extractor(llm)
        assert x.extract(request()).facts == [LIVES_IN_BERLIN]
        assert x.extract(request("my cat is grey")).facts == [ExtractedFact(content="The user has a cat.")]
        assert x.extract(request("something else")).facts == [ExtractedFact(content="default answer")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"match": "x", "content": "y"}) + "\n{not json\n")
    with pytest.raises(InvalidInput, match=r"bad\.jsonl:2"):
        FakeLLM.from_recording(bad)
