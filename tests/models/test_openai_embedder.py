"""An embedder over an OpenAI-compatible /v1/embeddings endpoint (config.models.embedder
= "openai"), against a fake model server on 127.0.0.1 (model_fakes.ModelServer),
whose vectors are the hashing embedder's: what is sent, batching, the dimension
learnt and checked at load, the API key, retries, refusals of malformed answers,
and a scope embedding through it."""

from __future__ import annotations

import socket

import numpy as np
import pytest
from model_fakes import ModelServer

import mnemex
from mnemex.errors import EmbedderError
from mnemex.models import embedders
from mnemex.models.embedders import OpenAIEmbedder, embedder_from_config
from mnemex.models.hashing import Embedder, HashingEmbedder

TEXTS = ["I work as a nurse", "We live in Berlin", "I like green tea", "My dog is called Rex", "Java"]


def embedder(server: ModelServer, **options: object) -> OpenAIEmbedder:
    options.setdefault("model", "tiny-embed")
    return OpenAIEmbedder(base_url=server.base_url, **options)  # type: ignore[arg-type]


def test_vectors_are_the_endpoints_in_the_callers_order_at_unit_length(model_server: ModelServer) -> None:
    client = embedder(model_server)
    assert isinstance(client, Embedder)
    assert (client.dim, client.name) == (16, "openai:tiny-embed:16")
    vectors = client.embed(TEXTS)  # the server lists them in reverse order, three times too long
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 16)
    np.testing.assert_allclose(vectors, HashingEmbedder(dim=16).embed(TEXTS), rtol=0, atol=1e-6)
    assert model_server.requests[-1] == {"model": "tiny-embed", "input": TEXTS}


def test_texts_go_in_batches_and_blank_ones_are_not_sent(model_server: ModelServer) -> None:
    client = embedder(model_server, batch_size=2)
    texts = ["I work as a nurse", "", "We live in Berlin", "  ", "I like green tea", "Java"]
    before = len(model_server.requests)
    vectors = client.embed(texts)
    sent = [request["input"] for request in model_server.requests[before:]]
    assert sent == [["I work as a nurse", "We live in Berlin"], ["I like green tea", "Java"]]
    assert not vectors[1].any() and not vectors[3].any()
    np.testing.assert_allclose(vectors[[0, 2, 4, 5]], HashingEmbedder(dim=16).embed(
        [texts[i] for i in (0, 2, 4, 5)]), rtol=0, atol=1e-6)
    assert client.embed([]).shape == (0, 16) and len(model_server.requests) == before + 2


def test_dimensions_are_asked_for_and_checked(model_server: ModelServer) -> None:
    client = embedder(model_server, dimensions=32)
    assert (client.dim, client.name) == (32, "openai:tiny-embed:32")
    assert all(request["dimensions"] == 32 for request in model_server.requests)
    model_server.answer(b'{"data": [{"index": 0, "embedding": [0.6, 0.8]}]}')  # a server ignoring it
    with pytest.raises(EmbedderError, match=r"vectors of 2 dimensions .*openai_dimensions is 24"):
        embedder(model_server, dimensions=24)


def test_a_query_and_a_stored_text_get_their_prefixes(model_server: ModelServer) -> None:
    client = embedder(model_server, query_prefix="query: ", document_prefix="passage: ")
    client.embed(["I like tea"])
    client.embed_queries(["what does she drink?"])
    assert [r["input"] for r in model_server.requests[-2:]] == [["passage: I like tea"],
                                                                 ["query: what does she drink?"]]
    assert client.name.startswith("openai:tiny-embed:16:") and client.name != embedder(model_server).name


def test_the_api_key_is_read_from_its_variable_at_each_call(model_server: ModelServer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINY_KEY", raising=False)
    client = embedder(model_server, api_key_env="TINY_KEY")
    assert "authorization" not in model_server.headers[-1]
    monkeypatch.setenv("TINY_KEY", "sk-test")
    client.embed(["tea"])
    assert model_server.headers[-1]["authorization"] == "Bearer sk-test"


def test_a_server_error_is_retried_with_backoff(model_server: ModelServer, no_backoff: list[float]) -> None:
    client = embedder(model_server, retries=2)
    model_server.fail(503, times=2)
    np.testing.assert_allclose(client.embed(["tea"]), HashingEmbedder(dim=16).embed(["tea"]), atol=1e-6)
    assert no_backoff == [0.25, 0.5]
    model_server.fail(429, times=3)
    with pytest.raises(EmbedderError, match=r"embeddings endpoint .*/v1/embeddings answered 429.*3 attempts"):
        client.embed(["tea"])


def test_a_client_error_is_not_retried(model_server: ModelServer, no_backoff: list[float]) -> None:
    client = embedder(model_server)
    before = len(model_server.requests)
    model_server.fail(400)
    with pytest.raises(EmbedderError, match=r"answered 400: .*a fake failure"):
        client.embed(["tea"])
    assert len(model_server.requests) == before + 1 and no_backoff == []


@pytest.mark.parametrize(("answer", "problem"), [
    (b"not json", "something else than an embeddings list"),
    (b'{"object": "list"}', "something else than an embeddings list"),
    (b'{"data": []}', r"answered 0 vectors .* for 2 texts"),
    (b'{"data": [{"index": 0, "embedding": [1, 0]}, {"index": 0, "embedding": [0, 1]}]}',
     r"answered 2 vectors \(indexes \[0, 0\]\)"),
    (b'{"data": [{"index": 0, "embedding": [1, 0]}, {"index": 1, "embedding": [0, 1, 0]}]}',
     r"vectors of \[2, 3\] dimensions"),
    (b'{"data": [{"index": 0, "embedding": [1, 0]}, {"index": 1, "embedding": [0, 1]}]}',
     "vectors of 2 dimensions; model 'tiny-embed' gave 16"),
])
def test_an_answer_that_is_not_one_vector_a_text_is_refused(model_server: ModelServer, answer: bytes,
                                                            problem: str) -> None:
    client = embedder(model_server)
    model_server.answer(answer)
    with pytest.raises(EmbedderError, match=problem):
        client.embed(["tea", "coffee"])


def test_an_endpoint_that_is_down_fails_when_the_embedder_is_made(no_backoff: list[float]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(EmbedderError, match=r"could not be reached.*\(2 attempts\)"):
        OpenAIEmbedder(base_url=f"http://127.0.0.1:{port}/v1", model="m", retries=1)


async def test_a_scope_stores_and_searches_through_the_endpoint(model_server: ModelServer,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "_loaded", {})
    config = mnemex.Config(data_dir=None, embedder="openai", openai_base_url=model_server.base_url,
                           openai_model="tiny-embed", openai_dimensions=64)
    shared = embedder_from_config(config)
    try:
        async with mnemex.open_runtime(config) as rt:
            scope = rt.scope(user_id="alice", app_name="chat")
            assert scope.embedder is shared and shared.name == "openai:tiny-embed:64"
            await scope.remember_many(TEXTS)
            result = await scope.search("green tea", top_k=1, mode="vector")
            assert [hit.memory.content for hit in result.hits] == ["I like green tea"]
    finally:
        assert isinstance(shared, OpenAIEmbedder)
        shared.close()
