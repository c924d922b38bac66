"""Embedders: text to L2-normalised float32 vectors.

:class:`Embedder` is what the vector search needs from a model. The one here,
:class:`HashingEmbedder`, works offline with no model at all: it is *lexical*.
Two texts are close when they share words, word pairs or word pieces (character
n-grams catch "paint"/"painting", "Sweden"/"Swedish" and typos), and it knows
nothing of meaning: "what does she do for work?" and "I'm a nurse" share no
features and score about 0. Use it for tests, tiny installs, or beside BM25;
use a sentence-embedding model for paraphrases.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import operator
from array import array
from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from mnemex.errors import InvalidInput
from mnemex.index.tokenizer import ENGLISH_STOP_WORDS, words

__all__ = ["Embedder", "HashingEmbedder", "l2_normalize"]

F32Matrix = npt.NDArray[np.float32]

_Part = tuple[bytes, bytes, int, bool]
"""The features of a word or of a pair of words: their columns (int64) and values
(float64) as bytes, how many, and whether the word is a stop word."""
_COLUMNS = operator.itemgetter(0)
_VALUES = operator.itemgetter(1)
_SIZE = operator.itemgetter(2)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.

    ``name`` identifies the model and its settings (a scope refuses to mix vectors
    of two names); ``embed`` returns a float32 array of shape (len(texts), dim)
    whose rows have L2 norm 1 (or 0 for a text with nothing to embed). It may be
    slow: call it beside an actor, in batches, never inside a handler.

    An embedder whose model embeds a search query unlike a stored text (an
    instruction or a prefix, as e5 and bge models want) also has
    ``embed_queries(texts)``, of the same shape; searches embed their query with it
    (see mnemex.models.batcher)."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> F32Matrix: ...


def l2_normalize(vectors: npt.ArrayLike) -> F32Matrix:
    """Rows scaled to unit L2 norm as float32 (all-zero rows stay zero)."""
    matrix = np.array(vectors, dtype=np.float32, copy=True, ndmin=2)
    norms = np.linalg.norm(matrix, axis=1)
    nonzero = norms > 0
    matrix[nonzero] /= norms[nonzero, None]
    return matrix


class HashingEmbedder:
    """Signed feature hashing of word unigrams, word bigrams and character
    3-5-grams (within words, with ``<`` ``>`` boundary markers), L2-normalised.

    Each feature is hashed with BLAKE2b (stable across processes and machines,
    unlike Python's salted ``hash``) to a dimension and a sign. Weights: a word
    1.0 (a stop word 0.25, and no n-grams), a pair of consecutive non-stop words
    ``bigram_weight``, and a word's character n-grams together
    ``char_weight`` (each n-gram ``char_weight / sqrt(n-grams in the word)``).
    Features of a word (and of each pair of words) are computed once and cached, so
    throughput grows as the vocabulary repeats (the n-grams of a call's new words
    are hashed once in the call); a batch's features are summed by one numpy call.
    Deterministic: equal inputs give bit-equal outputs."""

    cosine_scale = (0.1, 0.6, 0.0)
    """(floor, ceiling, crowded) of its cosines (mnemex.memories.ranking.CosineScale),
    by bench/quality.py: the best match of a query with no answer scores 0.11 (median);
    90% of LoCoMo evidence turns score below 0.38, but as its cosines only count shared
    words, hybrid search does better reading them up to 0.6 (LoCoMo recall@10 0.735
    against 0.717, above full text alone, 0.720); its scopes count as crowded always
    (its nearest memories to a question are no denser on LoCoMo than elsewhere)."""

    _CACHE_LIMIT = 500_000

    def __init__(self, dim: int = 384, *, bigram_weight: float = 0.7, char_weight: float = 0.8,
                 stop_weight: float = 0.25, ngram_range: tuple[int, int] = (3, 5)) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 8:
            raise InvalidInput(f"dim is {dim!r}; it must be an int >= 8", field="dim")
        low, high = ngram_range
        if not 1 <= low <= high:
            raise InvalidInput(f"ngram_range is {ngram_range}; it must be (low, high), 1 <= low <= high",
                               field="ngram_range")
        for label, value in (("bigram_weight", bigram_weight), ("char_weight", char_weight),
                             ("stop_weight", stop_weight)):
            if not (math.isfinite(value) and value >= 0):
                raise InvalidInput(f"{label} is {value}; it must be a finite number >= 0", field=label)
        self.dim = dim
        self.bigram_weight = float(bigram_weight)
        self.char_weight = float(char_weight)
        self.stop_weight = float(stop_weight)
        self.ngram_range = (low, high)
        self.name = (f"hashing-v1-d{dim}-b{bigram_weight:g}-c{char_weight:g}-s{stop_weight:g}"
                     f"-n{low}{high}")
        self._word_cache: dict[str, _Part] = {}
        self._pair_cache: dict[str, _Part] = {}  # (each one of ``_pair_parts``)
        self._pair_parts: dict[int, _Part] = {}  # by 2 * column + (sign > 0): see ``_learn``

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"

    def embed(self, texts: Sequence[str]) -> F32Matrix:
        """Vectors for *texts*: float32, shape (len(texts), dim), unit rows (zero rows
        for texts without a word)."""
        if isinstance(texts, str):
            raise InvalidInput("embed takes a sequence of texts, not one str", field="texts")
        n = len(texts)
        parts: list[_Part | None] = []
        per_text = array("q")
        # where the call's words and pairs not known yet go in ``parts``: their features
        # are found together once every text is read (one pass of hashing for the call)
        new_words: dict[str, list[int]] = {}
        new_pairs: dict[str, list[int]] = {}
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInput(f"texts must be str, got {type(text).__name__}", field="texts")
            start = len(parts)
            self._parts(text, parts, new_words, new_pairs)
            per_text.append(len(parts) - start)
        if new_words or new_pairs:
            self._learn(parts, new_words, new_pairs)
        found = cast("list[_Part]", parts)
        matrix: npt.NDArray[np.float64]
        if found:
            # every feature of the batch in the order it was found, summed per (row,
            # column) by one bincount: each cell adds its terms in the text's order
            sizes = np.fromiter(map(_SIZE, found), dtype=np.int64, count=len(found))
            part_rows = np.repeat(np.arange(n, dtype=np.int64), np.frombuffer(per_text, dtype=np.int64))
            flat = (np.repeat(part_rows, sizes) * self.dim
                    + np.frombuffer(b"".join(map(_COLUMNS, found)), dtype=np.int64))
            sums = np.bincount(flat, weights=np.frombuffer(b"".join(map(_VALUES, found)), dtype=np.float64),
                               minlength=n * self.dim)
            matrix = sums.reshape(n, self.dim).astype(np.float64, copy=False)
        else:
            matrix = np.zeros((n, self.dim), dtype=np.float64)
        norms = np.linalg.norm(matrix, axis=1)
        nonzero = norms > 0
        matrix[nonzero] /= norms[nonzero, None]
        return matrix.astype(np.float32)

    # -- insides ---------------------------------------------------------------------
    def _parts(self, text: str, parts: list[_Part | None], new_words: dict[str, list[int]],
               new_pairs: dict[str, list[int]]) -> None:
        """Append the features of ``text`` to ``parts``: each word's (kept per word),
        and after each word that is not a stop word its pair with the one before. A
        word or pair not known yet is appended as None, its place noted in
        ``new_words`` or ``new_pairs`` (filled by ``_learn``)."""
        previous: str | None = None
        cache = self._word_cache
        pairs = self._pair_cache if self.bigram_weight > 0 else None
        append = parts.append
        for word in words(text):
            part = cache.get(word)
            if part is not None:
                append(part)
                if part[3]:  # a stop word: no pair
                    continue
            else:
                places = new_words.get(word)
                if places is None:
                    places = new_words[word] = []
                places.append(len(parts))
                append(None)
                if word in ENGLISH_STOP_WORDS:
                    continue
            if previous is not None and pairs is not None:
                pair = f"{previous} {word}"
                known = pairs.get(pair)
                if known is None:
                    places = new_pairs.get(pair)
                    if places is None:
                        places = new_pairs[pair] = []
                    places.append(len(parts))
                append(known)
            previous = word

    def _learn(self, parts: list[_Part | None], new_words: dict[str, list[int]],
               new_pairs: dict[str, list[int]]) -> None:
        """The features of a call's new words and pairs, hashed together: put in
        ``parts`` where noted and kept for later calls. Each feature is what
        ``_hash`` gives; a word's are its own then its character n-grams (each n-gram
        of the call hashed once), with the weights the class docstring gives."""
        stops = ENGLISH_STOP_WORDS
        sizes = range(self.ngram_range[0], self.ngram_range[1] + 1)
        listed = list(new_words)
        grams_of = [[] if not self.char_weight > 0 or word in stops else
                     [marked[i : i + size] for marked in (f"<{word}>",) for size in sizes
                      for i in range(len(marked) - size + 1)] for word in listed]
        grams = dict.fromkeys(itertools.chain.from_iterable(grams_of))
        # every feature hashed once: the words', then the n-grams', then the pairs'
        keys = [*("w:" + word for word in listed), *("c:" + gram for gram in grams),
                *("b:" + pair for pair in new_pairs)]
        # each from a copy of one fresh 8-byte BLAKE2b state: the same digests as
        # blake2b(key, digest_size=8), without reading the parameters once a key
        # (most of the cost of a short key)
        fresh = hashlib.blake2b(digest_size=8)
        digests: list[bytes] = []
        add = digests.append
        for key in keys:
            state = fresh.copy()
            state.update(key.encode())
            add(state.digest())
        hashed = np.frombuffer(b"".join(digests), dtype="<u8")
        columns = (hashed % np.uint64(self.dim)).astype(np.int64)
        signs = np.where(hashed >> np.uint64(63) != 0, 1.0, -1.0)
        word_cache, pair_cache = self._word_cache, self._pair_cache
        if len(word_cache) + len(new_words) > self._CACHE_LIMIT:
            word_cache.clear()
        if len(pair_cache) + len(new_pairs) > self._CACHE_LIMIT:
            pair_cache.clear()
        # each word's features: its own (weight 1, a stop word's stop_weight), then its n-grams'
        gram_at = dict(zip(grams, range(len(listed), len(listed) + len(grams)), strict=True))
        at: list[int] = []
        weights: list[float] = []
        bounds = [0]
        for index, word in enumerate(listed):
            at.append(index)
            word_grams = grams_of[index]
            if word_grams:
                weights.append(1.0)
                at += map(gram_at.__getitem__, word_grams)
                weights += [self.char_weight / math.sqrt(len(word_grams))] * len(word_grams)
            else:
                weights.append(self.stop_weight if word in stops else 1.0)
            bounds.append(len(at))
        if listed:
            picked = np.array(at, dtype=np.int64)
            word_columns = columns[picked].tobytes()
            word_values = (signs[picked] * np.array(weights, dtype=np.float64)).tobytes()
            for index, (word, places) in enumerate(new_words.items()):
                first, last = 8 * bounds[index], 8 * bounds[index + 1]
                part = (word_columns[first:last], word_values[first:last], bounds[index + 1] - bounds[index],
                        word in stops)
                word_cache[word] = part
                for place in places:
                    parts[place] = part
        if new_pairs:
            # a pair's one feature is one of 2 * dim (column, sign): the part of each is made
            # once and shared by every pair that has it (the same bytes as a part of its own)
            shared = self._pair_parts
            start = len(listed) + len(grams)
            codes = (2 * columns[start:] + (signs[start:] > 0)).tolist()
            pair_columns = pair_values = b""
            for index, (code, (pair, places)) in enumerate(zip(codes, new_pairs.items(), strict=True)):
                made = shared.get(code)
                if made is None:  # (two threads may both make one: the same bytes either way)
                    if not pair_columns:
                        pair_columns = columns[start:].tobytes()
                        pair_values = (signs[start:] * self.bigram_weight).tobytes()
                    cut = 8 * index
                    made = shared[code] = (pair_columns[cut:cut + 8], pair_values[cut:cut + 8], 1, False)
                pair_cache[pair] = made
                for place in places:
                    parts[place] = made

    def _hash(self, kind: str, feature: str) -> tuple[int, float]:
        """One feature's column and sign (what ``_learn`` computes for many at once)."""
        digest = hashlib.blake2b(f"{kind}:{feature}".encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, (1.0 if value >> 63 else -1.0)
