"""Phrase and entity matching with an Aho-Corasick automaton (pyahocorasick).

A phrase is compared as its words (see :func:`~mnemex.index.tokenizer.words`):
case-folded word runs joined by single spaces, so ``"New  York"``, ``"new york"``
and ``"NEW-YORK"`` are one phrase, and a phrase matches only whole words
(``"york"`` is not found in ``"yorkshire"``). One pass over a text finds every
registered phrase in it, however many are registered.

:class:`PhraseMatcher` is the set of phrases; :class:`EntityIndex` adds which
documents carry which entity, so a query that names an entity can boost the
documents about it.
"""

from __future__ import annotations

from collections.abc import Iterable

import ahocorasick

from mnemex.errors import InvalidInput
from mnemex.index._select import Allowed, allowed_ids, check_doc_id, check_top_k, missing
from mnemex.index.tokenizer import words

__all__ = ["EntityIndex", "PhraseMatcher", "normalize_phrase"]


def normalize_phrase(phrase: str) -> str:
    """The form phrases are compared in: case-folded words joined by one space
    (empty when *phrase* has no word characters)."""
    return " ".join(words(phrase))


class PhraseMatcher:
    """A multiset of phrases and a lazily rebuilt automaton that finds them.

    ``add`` counts: a phrase added twice stays until it is removed twice, so
    several documents may share an entity. ``find`` rebuilds the automaton
    after changes (O(total phrase length)), then costs O(len(text) + matches)."""

    def __init__(self, phrases: Iterable[str] = ()) -> None:
        self._counts: dict[str, int] = {}
        self._automaton: ahocorasick.Automaton | None = None
        for phrase in phrases:
            self.add(phrase)

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, phrase: object) -> bool:
        return isinstance(phrase, str) and normalize_phrase(phrase) in self._counts

    def phrases(self) -> list[str]:
        """Every registered phrase (normalised), sorted."""
        return sorted(self._counts)

    def add(self, phrase: str) -> str:
        """Register *phrase*; returns its normalised form. InvalidInput when it has
        no words."""
        key = _key(phrase)
        self._counts[key] = self._counts.get(key, 0) + 1
        if self._counts[key] == 1:
            self._automaton = None
        return key

    def remove(self, phrase: str) -> None:
        """Take back one ``add`` of *phrase*; a phrase that is not registered is ignored."""
        key = normalize_phrase(phrase)
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
        haystack = f" {normalize_phrase(text)} "
        for _end, key in automaton.iter(haystack):
            found.add(key)
        return found


class EntityIndex:
    """Which documents carry which entity names, and a search that finds the
    documents whose entities are named in a query.

    ``search`` ranks by the number of distinct matched entities, then by lower
    doc id, and returns (doc_id, matched_count)."""

    def __init__(self) -> None:
        self._matcher = PhraseMatcher()
        self._docs_of: dict[str, set[int]] = {}
        self._entities_of: dict[int, tuple[str, ...]] = {}

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
        keys = tuple(dict.fromkeys(_key(e) for e in entities))
        for key in keys:
            self._matcher.add(key)
            self._docs_of.setdefault(key, set()).add(doc_id)
        self._entities_of[doc_id] = keys

    def remove(self, doc_id: int) -> None:
        keys = self._entities_of.pop(doc_id, None)
        if keys is None:
            raise missing(doc_id, "entity index")
        for key in keys:
            self._matcher.remove(key)
            holders = self._docs_of[key]
            holders.discard(doc_id)
            if not holders:
                del self._docs_of[key]

    def update(self, doc_id: int, entities: Iterable[str]) -> None:
        if doc_id not in self._entities_of:
            raise missing(doc_id, "entity index")
        keys = [_key(e) for e in entities]
        self.remove(doc_id)
        self.add(doc_id, keys)

    def find(self, text: str) -> set[str]:
        """Registered entity names (normalised) that occur in *text*."""
        return self._matcher.find(text)

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


def _key(phrase: str) -> str:
    if not isinstance(phrase, str):
        raise InvalidInput(f"a phrase must be a str, got {type(phrase).__name__}", field="phrase")
    key = normalize_phrase(phrase)
    if not key:
        raise InvalidInput(f"phrase {phrase!r} has no words to match", field="phrase")
    return key
