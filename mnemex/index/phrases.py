"""Phrase and entity matching with an Aho-Corasick automaton (pyahocorasick).

A phrase is compared as its words (see :func:`~mnemex.index.tokenizer.words`):
normalised word runs joined by single spaces, so ``"New  York"``, ``"new york"``
and ``"NEW-YORK"`` are one phrase, and a phrase matches only whole words
(``"york"`` is not found in ``"yorkshire"``). In a script written without spaces
the words are the characters interleaved with their pairs (``"東京"`` is ``"東
東京 京"``), whose stream for a name is a stretch of the stream of any text that
holds it: ``"東京"`` is found in ``"東京都に住む"``. One pass over a text finds
every registered phrase in it, however many are registered.

:class:`PhraseMatcher` is the set of phrases; :class:`EntityIndex` adds which
documents carry which entity, so a query that names an entity can boost the
documents about it; its state round-trips through :meth:`EntityIndex.to_sidecar`
and :meth:`EntityIndex.from_sidecar` without normalising every name again.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, Self

import ahocorasick
import numpy as np
import numpy.typing as npt

from mnemex.errors import InvalidInput
from mnemex.index._select import Allowed, allowed_ids, check_doc_id, check_top_k, missing
from mnemex.index._sidecar import (
    Sidecar,
    SidecarIndex,
    TermsByDoc,
    corrupt,
    doc_ids_checksum,
    pack_sidecar,
)
from mnemex.index.tokenizer import words, words_scheme

__all__ = ["EntityIndex", "PhraseMatcher", "normalize_phrase"]

_MAGIC = b"MNXENTS\x00"
_SIDECAR_ARRAYS: dict[str, np.dtype[Any]] = {
    "vocab": np.dtype(np.uint8),       # entity names (normalised), UTF-8, NUL-separated
    "name_docs": np.dtype(np.int64),   # documents per name
    "postings": np.dtype(np.int32),    # their doc ids, name after name
    "doc_ids": np.dtype(np.int32),     # every document, entities or not, in insertion order
}


def normalize_phrase(phrase: str, *, fold_accents: bool = False) -> str:
    """The form phrases are compared in: normalised words (the indexed form of
    :func:`~mnemex.index.tokenizer.words`) joined by one space; empty when *phrase*
    has no word characters."""
    return " ".join(words(phrase, unigrams=True, fold_accents=fold_accents))


class PhraseMatcher:
    """A multiset of phrases and a lazily rebuilt automaton that finds them.

    ``add`` counts: a phrase added twice stays until it is removed twice, so
    several documents may share an entity. ``find`` rebuilds the automaton
    after changes (O(total phrase length)), then costs O(len(text) + matches)."""

    def __init__(self, phrases: Iterable[str] = (), *, fold_accents: bool = False) -> None:
        self.fold_accents = fold_accents
        """Fold accents in phrases and texts alike (see the tokenizer)."""
        self._counts: dict[str, int] = {}
        self._automaton: ahocorasick.Automaton | None = None
        for phrase in phrases:
            self.add(phrase)

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, phrase: object) -> bool:
        return isinstance(phrase, str) and self._key_of(phrase) in self._counts

    def phrases(self) -> list[str]:
        """Every registered phrase (normalised), sorted."""
        return sorted(self._counts)

    def add(self, phrase: str) -> str:
        """Register *phrase*; returns its normalised form. InvalidInput when it has
        no words."""
        key = _key(phrase, self.fold_accents)
        self._add_key(key)
        return key

    def remove(self, phrase: str) -> None:
        """Take back one ``add`` of *phrase* (or of the phrase whose normalised form
        *phrase* is); a phrase that is not registered is ignored."""
        self._remove_key(self._key_of(phrase))

    def _add_key(self, key: str) -> None:
        self._counts[key] = self._counts.get(key, 0) + 1
        if self._counts[key] == 1:
            self._automaton = None

    def _remove_key(self, key: str) -> None:
        count = self._counts.get(key)
        if count is None:
            return
        if count > 1:
            self._counts[key] = count - 1
        else:
            del self._counts[key]
            self._automaton = None

    def find(self, text: str) -> set[str]:
        """The registered phrases (normalised) that occur in *text* as whole words."""
        if not self._counts:
            return set()
        automaton = self._automaton
        if automaton is None:
            automaton = ahocorasick.Automaton()
            for key in self._counts:
                automaton.add_word(f" {key} ", key)
            automaton.make_automaton()
            self._automaton = automaton
        found: set[str] = set()
        haystack = f" {self._normal(text)} "
        for _end, key in automaton.iter(haystack):
            found.add(key)
        return found

    def _normal(self, text: str) -> str:
        return normalize_phrase(text, fold_accents=self.fold_accents)

    def _key_of(self, phrase: str) -> str:
        # A registered normalised form stands for itself: normalising is not idempotent
        # in scripts without spaces (the characters of "東 東京 京" are words again).
        return phrase if phrase in self._counts else self._normal(phrase)


class EntityIndex(SidecarIndex):
    """Which documents carry which entity names, and a search that finds the
    documents whose entities are named in a query.

    ``search`` ranks by the number of distinct matched entities, then by lower
    doc id, and returns (doc_id, matched_count)."""

    sidecar_magic = _MAGIC
    sidecar_name = "entity"
    sidecar_arrays = _SIDECAR_ARRAYS

    def __init__(self, *, fold_accents: bool = False) -> None:
        self.fold_accents = fold_accents
        """Fold accents in names and texts alike (see the tokenizer)."""
        self._matcher = PhraseMatcher(fold_accents=fold_accents)
        self._docs_of: dict[str, set[int]] = {}
        # A doc's names; None for a doc restored from a sidecar, whose names are
        # read off _docs_of when it is removed (see _names_of_restored).
        self._entities_of: dict[int, tuple[str, ...] | None] = {}
        self._restored: TermsByDoc | None = None

    def __len__(self) -> int:
        return len(self._entities_of)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._entities_of

    def entities(self) -> list[str]:
        return self._matcher.phrases()

    def add(self, doc_id: int, entities: Iterable[str]) -> None:
        doc_id = check_doc_id(doc_id)
        if doc_id in self._entities_of:
            raise InvalidInput(f"doc {doc_id} is already in the entity index; use update", field="doc_id")
        self._add_keys(doc_id, [_key(e, self.fold_accents) for e in entities])

    def remove(self, doc_id: int) -> None:
        if doc_id not in self._entities_of:
            raise missing(doc_id, "entity index")
        keys = self._entities_of.pop(doc_id)
        if keys is None:
            keys = self._names_of_restored(doc_id)
        for key in keys:
            self._matcher._remove_key(key)
            holders = self._docs_of[key]
            holders.discard(doc_id)
            if not holders:
                del self._docs_of[key]

    def update(self, doc_id: int, entities: Iterable[str]) -> None:
        if doc_id not in self._entities_of:
            raise missing(doc_id, "entity index")
        keys = [_key(e, self.fold_accents) for e in entities]
        self.remove(doc_id)
        self._add_keys(doc_id, keys)

    def _add_keys(self, doc_id: int, keys: Iterable[str]) -> None:
        """Index *doc_id* as carrying the names *keys*, normalised already."""
        distinct = tuple(dict.fromkeys(keys))
        for key in distinct:
            self._matcher._add_key(key)
            self._docs_of.setdefault(key, set()).add(doc_id)
        self._entities_of[doc_id] = distinct

    def find(self, text: str) -> set[str]:
        """Registered entity names (normalised) that occur in *text*."""
        return self._matcher.find(text)

    # -- persistence -----------------------------------------------------------------
    def to_sidecar(self) -> bytes:
        """The whole index as one blob for :meth:`from_sidecar`: the doc count and
        ids checksum, then each name's documents as raw arrays."""
        docs_of, entities_of = self._docs_of, self._entities_of
        counts = np.fromiter(map(len, docs_of.values()), dtype=np.int64, count=len(docs_of))
        header = {
            "kind": "entities",
            "docs": len(entities_of),
            "ids_checksum": doc_ids_checksum(entities_of.keys()),
            "params": {"words": words_scheme(self.fold_accents)},
            "names": len(docs_of),
        }
        arrays: dict[str, npt.NDArray[Any]] = {
            "vocab": np.frombuffer("\x00".join(docs_of).encode(), dtype=np.uint8),
            "name_docs": counts,
            "postings": np.fromiter(itertools.chain.from_iterable(docs_of.values()), dtype=np.int32,
                                    count=int(counts.sum())),
            "doc_ids": np.fromiter(entities_of, dtype=np.int32, count=len(entities_of)),
        }
        return pack_sidecar(_MAGIC, header, arrays)

    @classmethod
    def from_sidecar(cls, data: bytes | memoryview, *, fold_accents: bool = False) -> Self:
        """The index serialised in *data* by :meth:`to_sidecar`, for these settings (as
        for the constructor). CorruptData, naming what is wrong, when *data* is
        damaged, truncated, of another format version, or was built with another
        normalisation (then it is stale: rebuild the index from the records)."""
        return cls(fold_accents=fold_accents)._load_words_sidecar(data, words_scheme(fold_accents))

    def _load(self, sidecar: Sidecar) -> None:
        header, arrays, data = sidecar.header, sidecar.arrays, sidecar.data
        start, stop = sidecar.spans["vocab"]
        names = data[start:stop].decode("utf-8").split("\x00") if stop > start else []
        counts, postings, doc_ids = arrays["name_docs"], arrays["postings"], arrays["doc_ids"]
        if not len(names) == len(counts) == int(header["names"]):
            raise corrupt("entity", f"{len(names)} names in the vocabulary, {len(counts)} posting counts")
        if int(counts.sum()) != len(postings) or (len(counts) and int(counts.min()) < 1):
            raise corrupt("entity", "posting counts do not add up to the postings")
        if len(doc_ids) != int(header["docs"]) or (len(doc_ids) and int(doc_ids.min()) < 0):
            raise corrupt("entity", f"{len(doc_ids)} doc ids, the header says {header['docs']}")
        ascending = np.sort(doc_ids)
        if np.any(np.diff(ascending) == 0):
            raise corrupt("entity", "a doc id is repeated")
        if len(postings) and not np.isin(postings, ascending, assume_unique=False).all():
            raise corrupt("entity", "a posting names a document that is not indexed")

        flat = postings.tolist()
        bounds = np.concatenate(([0], np.cumsum(counts))).tolist()
        docs_of = {name: set(flat[lo:hi]) for name, (lo, hi) in
                   zip(names, itertools.pairwise(bounds), strict=True)}
        if any(len(holders) != n for holders, n in zip(docs_of.values(), counts.tolist(), strict=True)):
            raise corrupt("entity", "a name lists a document twice")
        self._docs_of = docs_of
        self._entities_of = dict.fromkeys(doc_ids.tolist())
        self._matcher._counts = {name: len(holders) for name, holders in docs_of.items()}
        self._matcher._automaton = None

    def _names_of_restored(self, doc_id: int) -> tuple[str, ...]:
        """The names of a document restored from a sidecar and not changed since,
        read off the postings (every name whose documents hold it)."""
        if self._restored is None:
            docs_of = self._docs_of
            counts = np.fromiter(map(len, docs_of.values()), dtype=np.int64, count=len(docs_of))
            postings = np.fromiter(itertools.chain.from_iterable(docs_of.values()), dtype=np.int64,
                                   count=int(counts.sum()))
            self._restored = TermsByDoc(list(docs_of), counts, postings)
        return self._restored.terms_of(doc_id)

    def search(self, query: str, top_k: int = 10, allowed: Allowed = None) -> list[tuple[int, int]]:
        top_k = check_top_k(top_k)
        counts: dict[int, int] = {}
        for key in self._matcher.find(query):
            for doc_id in self._docs_of[key]:
                counts[doc_id] = counts.get(doc_id, 0) + 1
        if allowed is not None:
            permitted = set(allowed_ids(allowed).tolist())
            counts = {d: c for d, c in counts.items() if d in permitted}
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:top_k]


def _key(phrase: str, fold_accents: bool) -> str:
    if not isinstance(phrase, str):
        raise InvalidInput(f"a phrase must be a str, got {type(phrase).__name__}", field="phrase")
    key = normalize_phrase(phrase, fold_accents=fold_accents)
    if not key:
        raise InvalidInput(f"phrase {phrase!r} has no words to match", field="phrase")
    return key
