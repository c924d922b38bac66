"""Rerankers: a second, slower look at a search's best candidates, reading the
query and each memory together (a cross-encoder) instead of comparing two vectors
made apart. Chosen by ``config.models.reranker``:

* ``none`` (the default): searches return the search's own order.
* ``onnx``: :class:`OnnxCrossEncoder`, a cross-encoder exported to ONNX on disk
  with its ``tokenizer.json`` (ms-marco MiniLM, bge-reranker, jina-reranker...).
* ``http``: :class:`HttpReranker`, a rerank endpoint of the shape Cohere, Jina,
  vLLM and Infinity serve.

A reranker is slow work (a model call per candidate): :func:`rerank_beside` runs it
in a worker thread, never inside an actor. Loaded once per process when the first
runtime that names it opens, like the embedders, so a missing or damaged model
fails there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

import msgspec
import numpy as np
import numpy.typing as npt
import trio

from mnemex.config import Config, ModelsConfig
from mnemex.errors import InvalidInput, MnemexError, ModelError
from mnemex.models.embedders import shared_model, texts_of
from mnemex.models.http import JsonEndpoint
from mnemex.models.onnx import TokenGraph

if TYPE_CHECKING:
    import httpx

__all__ = ["HttpReranker", "OnnxCrossEncoder", "Reranker", "rerank_beside", "reranker_from_config"]

F32Vector = npt.NDArray[np.float32]


@runtime_checkable
class Reranker(Protocol):
    """Scores how well each text answers a query.

    ``rerank`` returns one float32 score per text, in the texts' order, higher for
    a better answer (scores compare within one call; their scale is the model's).
    It may be slow: call it beside an actor (``rerank_beside``), never inside a
    handler. ``name`` identifies the model, for logs and errors."""

    name: str

    def rerank(self, query: str, texts: Sequence[str]) -> F32Vector: ...


# -- a cross-encoder on disk -------------------------------------------------------------------------
class OnnxCrossEncoder:
    """A cross-encoder exported to ONNX, with its ``tokenizer.json``: each (query,
    text) pair is encoded as the tokenizer's pair template puts them (``[CLS] query
    [SEP] text [SEP]`` for BERT), cut to ``max_length`` tokens (the longer side
    first), and the graph's one logit a pair is the score: squashed into 0..1
    (``score="sigmoid"``) or raw (``"logit"``); the order is the same either way.

    ``path``, ``tokenizer`` and ``sha256`` are found and checked as for
    :class:`mnemex.models.embedders.OnnxEmbedder`. The graph must take
    ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` if it wants) and
    give one logit a pair (``logits`` of shape (batch, 1), or (batch,)); a
    classifier of several labels is refused when it loads. ``name`` is
    ``onnx:<sha256[:12]>`` of the model file. Thread-safe."""

    def __init__(self, path: str | os.PathLike[str], *, tokenizer: str | os.PathLike[str] | None = None,
                 sha256: str | None = None, score: Literal["sigmoid", "logit"] = "sigmoid",
                 max_length: int = 512, threads: int | None = None) -> None:
        self._graph = graph = TokenGraph.from_export(
            path, tokenizer=tokenizer, sha256=sha256, max_length=max_length, threads=threads,
            settings="reranker", error=ModelError,
            remedy="check config.models.reranker_path (an ONNX export of a cross-encoder)",
            ranks=(2, 1), preferred=("logits",), expected="one logit a pair (batch, 1)")
        width = graph.probe(("a probe query", "a probe text"), "models.reranker_path")
        if width != 1:
            raise InvalidInput(f"config.models.reranker_path: {graph.source} gives {width} values a pair in "
                               f"{graph.output}; a cross-encoder for reranking gives one logit",
                               field="models.reranker_path")
        self.score = score
        self.name = f"onnx:{str(graph.sha256)[:12]}"

    def __repr__(self) -> str:
        return f"OnnxCrossEncoder({self._graph.source!r}, name={self.name!r})"

    def rerank(self, query: str, texts: Sequence[str]) -> F32Vector:
        """One score per text (see the class doc), float32."""
        batch = texts_of(texts, "rerank")
        if not isinstance(query, str):
            raise InvalidInput(f"query must be a string, got {type(query).__name__}", field="query")
        if not batch:
            return np.zeros(0, dtype=np.float32)
        logits = self._graph.pair_scores([(query, text) for text in batch])[:, 0]
        if self.score == "logit":
            return logits
        return np.asarray(0.5 * (1.0 + np.tanh(0.5 * logits)), dtype=np.float32)  # sigmoid, no overflow


# -- a rerank endpoint -------------------------------------------------------------------------------
class _Ranked(msgspec.Struct):
    index: int
    relevance_score: float | None = None
    score: float | None = None  # text-embeddings-inference's name for it


class _Ranking(msgspec.Struct):
    results: list[_Ranked]


_decode_ranking: Final = msgspec.json.Decoder(_Ranking | list[_Ranked])


class HttpReranker:
    """A rerank endpoint: ``POST url`` with ``{"model", "query", "documents",
    "top_n"}`` (``model`` left out when empty; ``top_n`` is every document), answered
    ``{"results": [{"index", "relevance_score"}, ...]}`` (Cohere, Jina, vLLM,
    Infinity; a bare list of ``{"index", "score"}`` is read too). Every document
    must come back scored exactly once. The API key, ``timeout`` and ``retries``
    as for :class:`mnemex.models.http.JsonEndpoint`. ``name`` is
    ``http:<url>`` (then ``:<model>``). Thread-safe."""

    def __init__(self, url: str, *, model: str = "", api_key_env: str | None = None, timeout: float = 30.0,
                 retries: int = 2, transport: httpx.BaseTransport | None = None) -> None:
        self.model = model
        self._endpoint = JsonEndpoint(url, what="rerank endpoint", error=ModelError, api_key_env=api_key_env,
                                      timeout=timeout, retries=retries, transport=transport)
        self.name = f"http:{url}" + (f":{model}" if model else "")

    def __repr__(self) -> str:
        return f"HttpReranker({self._endpoint.url!r}, model={self.model!r})"

    def close(self) -> None:
        """Close the connections kept open to the endpoint."""
        self._endpoint.close()

    def rerank(self, query: str, texts: Sequence[str]) -> F32Vector:
        """One score per text: the endpoint's ``relevance_score``. ModelError when the
        endpoint fails or does not score every text once."""
        batch = texts_of(texts, "rerank")
        if not batch:
            return np.zeros(0, dtype=np.float32)
        payload: dict[str, Any] = {"query": query, "documents": batch, "top_n": len(batch)}
        if self.model:
            payload["model"] = self.model
        body = self._endpoint.post(payload)
        url = self._endpoint.url
        try:
            answer = _decode_ranking.decode(body)
        except msgspec.DecodeError as exc:
            raise ModelError(f"rerank endpoint {url} answered something else than a ranking ({exc}): "
                             f"{body[:200].decode('utf-8', 'replace')!r}") from exc
        ranked = answer.results if isinstance(answer, _Ranking) else answer
        scores = np.full(len(batch), np.nan, dtype=np.float32)
        for item in ranked:
            value = item.relevance_score if item.relevance_score is not None else item.score
            if not 0 <= item.index < len(batch) or value is None or not np.isnan(scores[item.index]):
                raise ModelError(f"rerank endpoint {url} answered {item!r} for {len(batch)} documents "
                                 f"(an index out of range, repeated, or without a score)")
            scores[item.index] = value
        if np.isnan(scores).any():
            raise ModelError(f"rerank endpoint {url} scored {len(ranked)} of the {len(batch)} documents "
                             f"sent; it must score each one")
        return scores


# -- beside the actors -------------------------------------------------------------------------------
def _reranked(reranker: Reranker, query: str, texts: list[str]) -> F32Vector:
    try:
        scores = np.asarray(reranker.rerank(query, texts), dtype=np.float32)
    except MnemexError:
        raise
    except Exception as exc:
        raise ModelError(f"reranker {reranker.name!r} failed on {len(texts)} texts: {exc!r}") from exc
    if scores.shape != (len(texts),) or not np.isfinite(scores).all():
        raise ModelError(f"reranker {reranker.name!r} returned scores of shape {scores.shape} for "
                         f"{len(texts)} texts, or values that are not finite")
    return scores


async def rerank_beside(reranker: Reranker, query: str, texts: Sequence[str]) -> F32Vector:
    """``reranker.rerank(query, texts)`` in a worker thread, checked: one finite
    float32 score per text. Any failure is a ModelError naming the reranker."""
    return await trio.to_thread.run_sync(_reranked, reranker, query, list(texts))


# -- by name -----------------------------------------------------------------------------------------
_loaded: dict[tuple[Any, ...], Reranker] = {}

# the settings of config.models each reranker is made from
_SETTINGS: Final[dict[str, tuple[str, ...]]] = {
    "onnx": ("reranker_path", "reranker_tokenizer", "reranker_sha256", "reranker_score",
             "reranker_max_length"),
    "http": ("reranker_url", "reranker_model", "reranker_api_key_env", "reranker_timeout",
             "reranker_retries"),
}


def reranker_from_config(config: Config) -> Reranker | None:
    """The reranker ``config.models.reranker`` names (None for ``none``), loaded and
    shared across the process like the embedders: a missing or damaged model fails
    here, when the first runtime naming it opens; a failed load is not remembered."""
    models = config.models
    if models.reranker == "none":
        return None
    return shared_model(_loaded, models, models.reranker, _SETTINGS[models.reranker], _made)


def _made(models: ModelsConfig) -> Reranker:
    if models.reranker == "onnx":
        assert models.reranker_path is not None  # ModelsConfig refuses "onnx" without it
        return OnnxCrossEncoder(models.reranker_path, tokenizer=models.reranker_tokenizer,
                                sha256=models.reranker_sha256, score=models.reranker_score,
                                max_length=models.reranker_max_length)
    assert models.reranker_url is not None  # ModelsConfig refuses "http" without it
    return HttpReranker(models.reranker_url, model=models.reranker_model,
                        api_key_env=models.reranker_api_key_env or None, timeout=models.reranker_timeout,
                        retries=models.reranker_retries)
