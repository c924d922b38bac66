"""Models made by the tests, so that bring-your-own-model is tested without
downloading one: a WordLevel ``tokenizer.json`` over a small vocabulary, tiny ONNX
graphs built with the ``onnx`` package (a sentence embedder whose token vectors
are rows of a known table, a cross-encoder whose logit counts the words a query
and a text share), and a fake model server on 127.0.0.1 answering OpenAI-style
``/v1/embeddings`` and Cohere-style ``/v1/rerank`` deterministically."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from mnemex.models.hashing import HashingEmbedder

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
WORDS = ["the", "user", "works", "as", "a", "nurse", "at", "hospital", "lives", "in", "berlin", "likes",
         "tea", "coffee", "what", "does", "do", "for", "work", "where", "query:", "passage:"]
VOCAB = {token: i for i, token in enumerate(SPECIALS + WORDS)}
DIM = 8
TABLE = np.random.default_rng(20).normal(size=(len(VOCAB), DIM)).astype(np.float32)
"""The tiny embedder's token vectors: row i is token i's."""


def token_ids(text: str, max_length: int = 512) -> list[int]:
    """What the tiny tokenizer makes of ``text``: [CLS] words [SEP], unknown words [UNK]."""
    ids = [VOCAB.get(word, VOCAB["[UNK]"]) for word in text.lower().split()]
    return [VOCAB["[CLS]"], *ids[:max_length - 2], VOCAB["[SEP]"]]


def write_tokenizer(path: Path) -> Path:
    """A BERT-shaped WordLevel tokenizer over VOCAB, saved as ``tokenizer.json``
    (with padding on, as many exported tokenizers have it)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    tokenizer = Tokenizer(WordLevel(VOCAB, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", VOCAB["[CLS]"]), ("[SEP]", VOCAB["[SEP]"])])
    tokenizer.enable_padding(pad_id=VOCAB["[PAD]"], pad_token="[PAD]")
    tokenizer.save(str(path))
    return path


def _save(graph: Any, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime releases since 1.15 read
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def _ids_input(name: str) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"])


def write_embedder(path: Path, *, output: str = "last_hidden_state", declared_dim: int | str = DIM,
                   extra_input: str | None = None, sentence: bool = False, normalized: bool = False,
                   scale: float = 1.0) -> Path:
    """A sentence-embedding graph: token vectors are rows of TABLE (times ``scale``),
    output as ``output`` (batch, tokens, dim). ``sentence``: the graph pools
    itself (the mean of the tokens the mask keeps), giving (batch, dim), and
    ``normalized`` L2-normalises that. ``declared_dim`` is the width the output
    declares; ``extra_input`` adds an input mnemex does not feed."""
    table = helper.make_tensor("table", TensorProto.FLOAT, TABLE.shape, (TABLE * scale).flatten().tolist())
    inputs = [_ids_input("input_ids"), _ids_input("attention_mask")]
    if extra_input is not None:
        inputs.append(_ids_input(extra_input))
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["tokens"], axis=0)]
    if sentence:
        axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
        last = helper.make_tensor("last", TensorProto.INT64, [1], [-1])
        nodes += [
            helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["mask", "last"], ["mask3"]),
            helper.make_node("Mul", ["tokens", "mask3"], ["kept"]),
            helper.make_node("ReduceSum", ["kept", "axes"], ["sums"], keepdims=0),
            helper.make_node("ReduceSum", ["mask3", "axes"], ["counts"], keepdims=0),
            helper.make_node("Div", ["sums", "counts"], ["means" if normalized else output]),
        ]
        if normalized:
            nodes.append(helper.make_node("LpNormalization", ["means"], [output], axis=-1, p=2))
        shape: list[int | str] = ["batch", declared_dim]
        initializers = [table, axes, last]
    else:
        nodes.append(helper.make_node("Identity", ["tokens"], [output]))
        shape = ["batch", "tokens", declared_dim]
        initializers = [table]
    graph = helper.make_graph(nodes, "tiny-embedder", inputs,
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)], initializers)
    return _save(graph, path)


def write_cross_encoder(path: Path, *, labels: int = 1, flat: bool = False) -> Path:
    """A cross-encoder graph: the logit of a pair is the number of (query word,
    text word) pairs that are the same word (special tokens count for nothing),
    from input_ids, attention_mask and token_type_ids, as ``logits`` (batch,
    ``labels``): more than one label repeats it (a classifier, which a reranker
    must refuse). ``flat``: ``logits`` is (batch,)."""
    size = len(VOCAB)
    eye = np.eye(size, dtype=np.float32)
    eye[:len(SPECIALS)] = 0
    one_hot = helper.make_tensor("one_hot", TensorProto.FLOAT, eye.shape, eye.flatten().tolist())
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    last = helper.make_tensor("last", TensorProto.INT64, [1], [-1])
    repeats = helper.make_tensor("repeats", TensorProto.INT64, [2], [1, labels])
    nodes = [
        helper.make_node("Gather", ["one_hot", "input_ids"], ["tokens"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["second"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "second"], ["first"]),
        helper.make_node("Mul", ["mask", "first"], ["query_mask"]),
        helper.make_node("Mul", ["mask", "second"], ["text_mask"]),
        helper.make_node("Unsqueeze", ["query_mask", "last"], ["query_mask3"]),
        helper.make_node("Unsqueeze", ["text_mask", "last"], ["text_mask3"]),
        helper.make_node("Mul", ["tokens", "query_mask3"], ["query_tokens"]),
        helper.make_node("Mul", ["tokens", "text_mask3"], ["text_tokens"]),
        helper.make_node("ReduceSum", ["query_tokens", "axes"], ["query_counts"], keepdims=0),
        helper.make_node("ReduceSum", ["text_tokens", "axes"], ["text_counts"], keepdims=0),
        helper.make_node("Mul", ["query_counts", "text_counts"], ["both"]),
        helper.make_node("ReduceSum", ["both", "last"], ["logits" if flat else "shared"],
                         keepdims=int(not flat)),
    ]
    if not flat:
        nodes.append(helper.make_node("Tile", ["shared", "repeats"], ["logits"]))
    graph = helper.make_graph(
        nodes, "tiny-cross-encoder",
        [_ids_input("input_ids"), _ids_input("attention_mask"), _ids_input("token_type_ids")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       ["batch"] if flat else ["batch", labels])],
        [one_hot, one, axes, last, repeats])
    return _save(graph, path)


def shared_words(query: str, text: str) -> int:
    """What the tiny cross-encoder's logit is: pairs of equal known words."""
    known = [word for word in query.lower().split() if word in VOCAB]
    return sum(text.lower().split().count(word) for word in known if word not in SPECIALS)


# -- a fake model server -----------------------------------------------------------------------------
class ModelServer:
    """``POST /v1/embeddings``: vectors of HashingEmbedder(dim) of each input (dim:
    the request's ``dimensions``, else ``dim``), listed in reverse order with their
    indexes. ``POST /v1/rerank``: each document's share of the query's words as
    ``relevance_score``, best first (``shape = "tei"``: a bare list of ``{index,
    score}``). ``fail(status, times)`` answers the next requests with an error;
    ``answer(body)`` answers the next one with ``body`` as it is. ``requests`` and
    ``headers`` hold what came in."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim
        self.shape = "cohere"
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._failures: list[int] = []
        self._answers: list[bytes] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def fail(self, status: int, times: int = 1) -> None:
        with self._lock:
            self._failures.extend([status] * times)

    def answer(self, body: bytes) -> None:
        with self._lock:
            self._answers.append(body)

    def _respond(self, path: str, request: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
        with self._lock:
            self.requests.append(request)
            self.headers.append(headers)
            if self._failures:
                return self._failures.pop(0), b'{"error": {"message": "a fake failure"}}'
            if self._answers:
                return 200, self._answers.pop(0)
        if path == "/v1/embeddings":
            embedder = HashingEmbedder(dim=request.get("dimensions", self.dim))
            vectors = embedder.embed(request["input"]) * 3.0  # not unit: the client normalises
            data = [{"object": "embedding", "index": i, "embedding": vectors[i].tolist()}
                    for i in reversed(range(len(vectors)))]
            return 200, json.dumps({"object": "list", "data": data, "model": request["model"]}).encode()
        if path == "/v1/rerank":
            words = set(request["query"].lower().split())
            scores = [len(words & set(text.lower().split())) / max(1, len(words))
                      for text in request["documents"]]
            order = sorted(range(len(scores)), key=lambda i: -scores[i])
            if self.shape == "tei":
                return 200, json.dumps([{"index": i, "score": scores[i]} for i in order]).encode()
            results = [{"index": i, "relevance_score": scores[i]} for i in order]
            return 200, json.dumps({"results": results}).encode()
        return 404, b'{"error": "Not found"}'

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                status, answer = server._respond(self.path, json.loads(body),
                                                 {k.lower(): v for k, v in self.headers.items()})
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


