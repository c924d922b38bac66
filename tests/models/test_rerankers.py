"""Rerankers (config.models.reranker): a cross-encoder from an ONNX graph made by the
test, whose logit counts the words a query and a text share (model_fakes); an HTTP
rerank endpoint on a fake server; running one beside the actors; and a scope's
search reordered by one, through the runtime."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from model_fakes import ModelServer, shared_words, write_cross_encoder, write_tokenizer

import mnemex
from mnemex.errors import InvalidInput, ModelError
from mnemex.models import rerankers
from mnemex.models.rerankers import (
    HttpReranker,
    OnnxCrossEncoder,
    Reranker,
    rerank_beside,
    reranker_from_config,
)

QUERY = "where does the user work"
TEXTS = ["the user works as a nurse at the hospital", "likes tea", "the user lives in berlin",
         "where the user likes to work", ""]


# -- a cross-encoder on disk ---------------------------------------------------------------------------
def test_the_score_of_a_pair_is_the_cross_encoders_logit(cross_encoder_dir: Path) -> None:
    reranker = OnnxCrossEncoder(cross_encoder_dir, score="logit")
    assert isinstance(reranker, Reranker)
    scores = reranker.rerank(QUERY, TEXTS)
    assert scores.dtype == np.float32
    # the graph counts shared words from token_type_ids: the pair template put the query first
    assert scores.tolist() == [shared_words(QUERY, text) for text in TEXTS] == [3, 0, 2, 4, 0]


def test_the_sigmoid_keeps_the_order_in_zero_to_one(cross_encoder_dir: Path) -> None:
    logits = OnnxCrossEncoder(cross_encoder_dir, score="logit").rerank(QUERY, TEXTS)
    scores = OnnxCrossEncoder(cross_encoder_dir).rerank(QUERY, TEXTS)
    np.testing.assert_allclose(scores, 1 / (1 + np.exp(-logits.astype(np.float64))), rtol=0, atol=1e-6)
    assert OnnxCrossEncoder(cross_encoder_dir).rerank(QUERY, []).shape == (0,)


def test_a_pair_longer_than_max_length_is_cut(cross_encoder_dir: Path) -> None:
    long = "the user works " * 20
    assert OnnxCrossEncoder(cross_encoder_dir, score="logit", max_length=12).rerank(QUERY, [long])[0] < \
        OnnxCrossEncoder(cross_encoder_dir, score="logit").rerank(QUERY, [long])[0]


def test_one_logit_a_pair_may_come_flat(tmp_path: Path) -> None:
    write_cross_encoder(tmp_path / "model.onnx", flat=True)
    write_tokenizer(tmp_path / "tokenizer.json")
    assert OnnxCrossEncoder(tmp_path, score="logit").rerank(QUERY, TEXTS).tolist() == [3, 0, 2, 4, 0]


def test_a_classifier_of_several_labels_is_refused(tmp_path: Path) -> None:
    write_cross_encoder(tmp_path / "model.onnx", labels=3)
    write_tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(InvalidInput, match="gives 3 values a pair in logits") as info:
        OnnxCrossEncoder(tmp_path)
    assert info.value.field == "models.reranker_path"


def test_its_files_and_digest_are_checked_naming_the_reranker_settings(cross_encoder_dir: Path,
                                                                       tmp_path: Path) -> None:
    digest = hashlib.sha256((cross_encoder_dir / "model.onnx").read_bytes()).hexdigest()
    assert OnnxCrossEncoder(cross_encoder_dir, sha256=digest).name == f"onnx:{digest[:12]}"
    with pytest.raises(InvalidInput) as info:
        OnnxCrossEncoder(cross_encoder_dir, sha256="f" * 64)
    assert info.value.field == "models.reranker_sha256"
    with pytest.raises(InvalidInput) as info:
        OnnxCrossEncoder(tmp_path / "missing")
    assert info.value.field == "models.reranker_path"
    with pytest.raises(InvalidInput) as info:
        OnnxCrossEncoder(cross_encoder_dir / "model.onnx", tokenizer=tmp_path / "missing.json")
    assert info.value.field == "models.reranker_tokenizer"
    (cross_encoder_dir / "model.onnx").write_bytes(b"\x08\x01garbage")
    with pytest.raises(ModelError, match="could not load"):
        OnnxCrossEncoder(cross_encoder_dir)


# -- a rerank endpoint --------------------------------------------------------------------------------
def test_the_endpoint_scores_each_document_in_the_callers_order(model_server: ModelServer) -> None:
    reranker = HttpReranker(f"{model_server.base_url}/rerank", model="tiny-rerank")
    assert isinstance(reranker, Reranker) and reranker.name.endswith("/v1/rerank:tiny-rerank")
    scores = reranker.rerank("user work", ["likes tea", "the user works", "user work"])
    assert scores.tolist() == [0.0, 0.5, 1.0]  # answered best first, put back in order
    assert model_server.requests[-1] == {"model": "tiny-rerank", "query": "user work",
                                         "documents": ["likes tea", "the user works", "user work"],
                                         "top_n": 3}
    reranker.close()


def test_a_bare_list_of_scores_is_read_too_and_no_model_is_named_when_none_is_set(
        model_server: ModelServer) -> None:
    model_server.shape = "tei"
    reranker = HttpReranker(f"{model_server.base_url}/rerank")
    assert reranker.rerank("user work", ["likes tea", "user work"]).tolist() == [0.0, 1.0]
    assert "model" not in model_server.requests[-1]
    assert reranker.rerank("anything", []).shape == (0,) and len(model_server.requests) == 1


@pytest.mark.parametrize(("answer", "problem"), [
    (b'{"results": [{"index": 0, "relevance_score": 0.5}]}', "scored 1 of the 2 documents"),
    (b'{"results": [{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.1}]}',
     "repeated"),
    (b'{"results": [{"index": 0, "relevance_score": 0.5}, {"index": 7, "relevance_score": 0.1}]}',
     "out of range"),
    (b'{"results": [{"index": 0}, {"index": 1, "relevance_score": 0.1}]}', "without a score"),
    (b'{"ranking": []}', "something else than a ranking"),
])
def test_an_answer_that_does_not_score_each_document_once_is_refused(model_server: ModelServer,
                                                                      answer: bytes, problem: str) -> None:
    model_server.answer(answer)
    with pytest.raises(ModelError, match=problem):
        HttpReranker(f"{model_server.base_url}/rerank").rerank("q", ["a", "b"])


def test_the_rerank_endpoint_is_retried_then_named(model_server: ModelServer,
                                                   no_backoff: list[float]) -> None:
    reranker = HttpReranker(f"{model_server.base_url}/rerank", retries=1)
    model_server.fail(502)
    assert reranker.rerank("user", ["user"]).tolist() == [1.0]
    model_server.fail(500, times=2)
    with pytest.raises(ModelError, match=r"rerank endpoint http://127\.0\.0\.1:\d+/v1/rerank answered 500"):
        reranker.rerank("user", ["user"])
    assert no_backoff == [0.25, 0.25]


# -- beside the actors ---------------------------------------------------------------------------------
class Broken:
    name = "broken"

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def rerank(self, query: str, texts: Sequence[str]) -> object:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_a_failing_reranker_is_a_model_error_naming_it() -> None:
    with pytest.raises(ModelError, match=r"reranker 'broken' failed on 2 texts: RuntimeError\('oom'\)"):
        await rerank_beside(Broken(RuntimeError("oom")), "q", ["a", "b"])  # type: ignore[arg-type]
    with pytest.raises(ModelError, match=r"scores of shape \(3,\) for 2 texts"):
        await rerank_beside(Broken(np.zeros(3)), "q", ["a", "b"])  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="not finite"):
        await rerank_beside(Broken(np.array([0.0, np.nan])), "q", ["a", "b"])  # type: ignore[arg-type]
    scores = await rerank_beside(Broken(np.array([1, 2])), "q", ["a", "b"])  # type: ignore[arg-type]
    assert scores.dtype == np.float32 and scores.tolist() == [1.0, 2.0]


# -- from the configuration, in a scope ----------------------------------------------------------------
def test_config_names_the_reranker_and_what_it_needs(cross_encoder_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rerankers, "_loaded", {})
    assert reranker_from_config(mnemex.Config()) is None
    for settings, field in (({"reranker": "onnx"}, "models.reranker_path"),
                            ({"reranker": "http"}, "models.reranker_url"),
                            ({"reranker": "http", "reranker_url": "ftp://x"}, "models.reranker_url"),
                            ({"rerank_candidates": 0}, "models.rerank_candidates")):
        with pytest.raises(InvalidInput) as info:
            mnemex.Config(**settings)
        assert info.value.field == field
    config = mnemex.Config(reranker="onnx", reranker_path=str(cross_encoder_dir))
    first = reranker_from_config(config)
    assert isinstance(first, OnnxCrossEncoder)
    assert reranker_from_config(config.replace(rerank_candidates=5)) is first
    assert reranker_from_config(config.replace(reranker_score="logit")) is not first


MEMORIES = ["the user works as a nurse at the hospital", "the user likes tea", "the user lives in berlin",
            "the user likes coffee", "the user works"]


async def test_a_search_is_reordered_by_the_reranker_and_cut_to_top_k(
        model_server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rerankers, "_loaded", {})
    config = mnemex.Config(data_dir=None, embedder="hashing", reranker="http", rerank_candidates=4,
                           reranker_url=f"{model_server.base_url}/rerank")
    async with mnemex.open_runtime(config) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        await scope.remember_many(MEMORIES)
        query = "where does the user work at the hospital"
        result = await scope.search(query, top_k=2, mode="keyword")
        sent = model_server.requests[-1]
        assert sent["query"] == query and len(sent["documents"]) == 4  # rerank_candidates of the search
        words = set(query.split())
        best = sorted(sent["documents"], key=lambda text: -len(words & set(text.split())))[:2]
        assert [hit.memory.content for hit in result.hits] == best
        assert [hit.scores["rerank"] for hit in result.hits] == pytest.approx(
            [len(words & set(text.split())) / len(words) for text in best])
        assert all(0 <= hit.score <= 1 and "keyword" in hit.scores for hit in result.hits)
        # more asked for than the candidates: every hit is reranked, none is cut
        assert len((await scope.search(query, top_k=5, mode="keyword", min_score=None)).hits) == 5
        assert len(model_server.requests[-1]["documents"]) == 5
        assert best[0] in await scope.recall(query, top_k=1, mode="keyword")  # what a model is shown


async def test_a_cross_encoder_reranks_a_scopes_hybrid_search(
        cross_encoder_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rerankers, "_loaded", {})
    config = mnemex.Config(data_dir=None, embedder="hashing", reranker="onnx",
                           reranker_path=str(cross_encoder_dir), reranker_score="logit")
    async with mnemex.open_runtime(config) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        await scope.remember_many(MEMORIES)
        query = "where does the user work"
        result = await scope.search(query, top_k=3, min_score=None)
        logits = [hit.scores["rerank"] for hit in result.hits]
        assert logits == sorted(logits, reverse=True)
        assert logits == [shared_words(query, hit.memory.content) for hit in result.hits]
        assert result.hits[0].memory.content == "the user works as a nurse at the hospital"


async def test_a_reranker_that_cannot_load_fails_when_the_runtime_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rerankers, "_loaded", {})
    config = mnemex.Config(data_dir=None, embedder="hashing", reranker="onnx",
                           reranker_path=str(tmp_path / "no-model"))
    with pytest.raises(BaseException) as info:  # raised inside the runtime's nursery, for now
        async with mnemex.open_runtime(config):
            pass  # pragma: no cover
    error = info.value
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, InvalidInput) and error.field == "models.reranker_path"
    assert "does not exist" in str(error)
