"""The entity graph of a scope: who and what its memories mention, and how they relate.

Two kinds of state, kept apart:

* **derived** from the memories, rebuilt from the records whenever a scope is
  restored (so it never disagrees with them): each memory's *mentions*, the name
  keys (:func:`~mnemex.knowledge.entities.name_key`) of the entities it names in
  its ``entities`` field (from the caller or the extractor), found in its text by
  the offline patterns (:mod:`mnemex.knowledge.entities`, when ``detect``), and
  found by the gazetteer: the declared entities' names and aliases, matched in
  the text with one Aho-Corasick pass;
* **journaled**: declared entities (a name, a type, aliases: what an app knows
  of its cast, e.g. a game master's NPCs) and merges (alias records: ``name`` is
  ``into``), each undone by an unmerge. Their order is kept, so resolution is the
  same after a restart.

Resolution joins name keys into entities, deterministically and all at once over
the current names (so the order memories arrived in never matters): keys equal
but for spaces and hyphens (``"black-tower"``, ``"blacktower"``), a key one letter
longer than another of at least six letters (a typo: ``"gandross"``), an acronym
and the multi-word name whose initials it is (``"nasa"`` and ``"national
aeronautics and space administration"``), a declared entity and its aliases,
and the merges. Each entity is named by its representative key: the declared
one, else the merge target, else the name it speaks under most, else its most
mentioned name.

Edges: a memory mentions an entity; two entities relate when one memory mentions
both (the memory states the relation; the edge's weight is how many do). Queries
(``find``, ``neighbours``, ``related``, ``expansion``) read the graph; none of
them changes it. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import ahocorasick
import msgspec
import numpy as np
import numpy.typing as npt

from mnemex._repeats import Repeats
from mnemex.index import normalize_phrase
from mnemex.index._held import HeldDocs
from mnemex.index._select import members
from mnemex.knowledge.entities import DETECTION_VERSION, initials, is_acronym, mentions, name_key
from mnemex.knowledge.resolution import NameVectors, nearest_merges

__all__ = ["DEFAULT_TYPE", "Declared", "EntityGraph", "Expansion", "Merge"]

DEFAULT_TYPE: Final = "other"
"""The type of an entity nobody declared and nothing typed (speakers are ``person``)."""

_MIN_TYPO_LENGTH: Final = 6
_STRONG: Final = 1
_SPEAKER: Final = 2
_ACRONYM: Final = 4


@dataclass(frozen=True, slots=True)
class Declared:
    """An entity an app declared: its name as written, type, aliases as written."""

    name: str
    type: str = DEFAULT_TYPE
    aliases: tuple[str, ...] = ()
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Merge:
    """An alias record: the entity of ``name`` is the entity of ``into`` (undone by an
    unmerge of ``name``); ``how`` it was decided: ``manual`` (a merge command) or
    ``embedding`` (the names' vectors were ``score`` close: ``knowledge.resolution``)."""

    name: str
    into: str
    at: float = 0.0
    how: str = "manual"
    score: float | None = None


@dataclass(frozen=True, slots=True, weakref_slot=True, eq=False)
class Expansion:
    """What the graph adds to a query: the entities it names (representative keys),
    their other names (``aliases``), the names of their strongest neighbours and the
    docs that mention them. Equal and hashed by identity (the graph gives the same
    object while it does not change; its arrays have no equality of their own)."""

    entities: tuple[str, ...]
    aliases: tuple[str, ...]
    neighbours: tuple[str, ...]
    docs: Docs
    """The memories that name an entity of the query, ascending."""
    spoken: Docs = field(default_factory=lambda: _NO_DOCS)
    """Of ``docs``, those whose speaker (or author) is a named entity, ascending."""
    each: tuple[tuple[Docs, Docs], ...] = ()
    """Per named entity: the docs that mention it, and those it says."""
    named_words: frozenset[str] = frozenset()
    """The query's words that name the entities (normalised)."""

    def lifts(self, docs: Sequence[int], mention_only: float) -> list[float]:
        """How much of the query's entities each of ``docs`` is about, 0..1: the mean
        over the named entities of 1 (it says it), ``mention_only`` (it names it: 1
        for an entity that says no memory) or 0."""
        each = self.each
        if not each:
            return [0.0 for _ in docs]
        # summed entity by entity, in the entities' order (each doc's sum in that order);
        # an entity that never speaks is only ever named: naming it counts fully
        asked = np.array(docs, dtype=np.int64)
        totals = np.zeros(len(asked), dtype=np.float64)
        for mentioning, saying in each:
            says = members(asked, saying)
            totals[says] += 1.0
            named = mention_only if len(saying) else 1.0
            if named:
                totals[members(asked, mentioning) & ~says] += named
        out: list[float] = (totals / len(each)).tolist()
        return out


Docs = npt.NDArray[np.int64]
"""Memories as a sorted array of doc ids (read-only: memos share them)."""

_NO_DOCS: Final[Docs] = np.zeros(0, dtype=np.int64)
_NO_DOCS.flags.writeable = False


def _sorted_docs(docs: Iterable[int]) -> Docs:
    """``docs`` (distinct ids) as a :data:`Docs` array."""
    out = np.fromiter(docs, dtype=np.int64)
    out.sort()
    out.flags.writeable = False
    return out


@dataclass(slots=True)
class _Resolution:
    root: dict[str, str] = field(default_factory=dict)          # key -> representative key
    members: dict[str, list[str]] = field(default_factory=dict)  # representative -> keys, sorted


def _union(arrays: Iterable[Docs]) -> Docs:
    """The docs of any of ``arrays`` (each ascending), ascending: marked in a mask of
    the doc ids when they are many (a sort of 100,000 took 35% of a hybrid search's
    time at 300,000 memories), sorted when they are few among large ids."""
    parts = [part for part in arrays if len(part)]
    count = sum(map(len, parts))
    if not count:
        return _NO_DOCS
    size = max(int(part[-1]) for part in parts) + 1
    if count * 16 < size:
        out = np.unique(np.concatenate(parts))
    else:
        mask = np.zeros(size, dtype=np.bool_)
        for part in parts:
            mask[part] = True
        out = np.flatnonzero(mask).astype(np.int64, copy=False)
    out.flags.writeable = False
    return out


class _ByDoc:
    """Each memory's mentions, in a list indexed by its doc id (a scope's docs are
    its slots, dense from 0): 8 bytes a slot. A dict of int keys held ~70 bytes a
    memory (71 MB at 1,000,000). Read as a mapping of the docs that have mentions."""

    __slots__ = ("_count", "slots")

    def __init__(self) -> None:
        self.slots: list[Mentions | None] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, doc: int) -> bool:
        slots = self.slots
        return 0 <= doc < len(slots) and slots[doc] is not None

    def get(self, doc: int) -> Mentions | None:
        slots = self.slots
        return slots[doc] if 0 <= doc < len(slots) else None

    def __getitem__(self, doc: int) -> Mentions:
        found = self.get(doc)
        if found is None:
            raise KeyError(doc)
        return found

    def __setitem__(self, doc: int, mentions: Mentions) -> None:
        if doc < 0:
            raise ValueError(f"a doc id is never negative, got {doc}")
        slots = self.slots
        if doc >= len(slots):
            slots.extend([None] * (doc + 1 - len(slots)))
        if slots[doc] is None:
            self._count += 1
        slots[doc] = mentions

    def placed(self, count: int) -> None:
        """Count ``count`` docs whose mentions a caller wrote into ``slots`` itself."""
        self._count += count

    def pop(self, doc: int) -> Mentions | None:
        """The mentions of ``doc`` taken out (None: it had none)."""
        found = self.get(doc)
        if found is not None:
            self.slots[doc] = None
            self._count -= 1
            if not self._count:
                self.slots = []
        return found

    def clear(self) -> None:
        self.slots, self._count = [], 0

    def __iter__(self) -> Iterator[int]:
        """The docs that have mentions, ascending."""
        return (doc for doc, found in enumerate(self.slots) if found is not None)

    def values(self) -> Iterator[Mentions]:
        return (found for found in self.slots if found is not None)

    def items(self) -> Iterator[tuple[int, Mentions]]:
        return ((doc, found) for doc, found in enumerate(self.slots) if found is not None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _ByDoc):
            return NotImplemented
        return len(self) == len(other) and all(other.get(doc) == found for doc, found in self.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"_ByDoc({dict(self.items())})"



def _own_docs(expansion: Expansion) -> int:
    """The memories an expansion holds in sets of its own: the unions of several
    entities' sets (one entity's are the graph memo's, shared)."""
    return len(expansion.docs) + len(expansion.spoken) if len(expansion.each) > 1 else 0


_MEMO_MAX: Final = 4096
"""Entries the graph's memo of neighbours, entities' memories and speakers'
memories holds at most."""
_EXPANSIONS_MAX: Final = 64
_EXPANSION_DOCS_MAX: Final = 50_000
"""Query expansions the graph keeps at most (the least recently used go first), and
memories their own sets may hold in all. An expansion of one entity shares the
memo's sets of its memories; one of several holds their unions, thousands of
memories in a large scope (expansions kept by the hundred, each with copies of its
entities' sets, raised a 100,000-memory scope's RSS by 400 MB, and by 80 MB when
only the copies were left; unions of 200,000 memories in all held 40 MB)."""


class EntityGraph:
    """The entity graph of one scope; see the module doc."""

    # slots: one graph per live scope, with more attributes than Python shares a
    # dict's keys for (30): each would carry a dict of its own (~1.6 KB)
    __slots__ = ("_acronyms", "_changes", "_expansion_docs", "_expansions", "_expansions_lock",
                 "_expansions_of", "_finder", "_gazetteer", "_groups", "_memo", "_memo_state", "_mentions",
                 "_name_docs", "_relations", "_resolution", "_resolutions",
                 "_speakers", "_strong", "_surfaces", "_unembedded", "apart", "declared", "detect",
                 "fold_accents", "merges", "typed", "types", "vectors")

    def __init__(self, *, detect: bool = True, fold_accents: bool = True) -> None:
        self.detect = detect
        self.fold_accents = fold_accents
        # a memory's names; per name, its flags (_STRONG | _SPEAKER | _ACRONYM) and how it
        # was written ("": by the gazetteer); one tuple of the three, shared (see _shared)
        self._mentions = _ByDoc()
        self._name_docs: dict[str, HeldDocs] = {}
        self._surfaces: dict[str, Counter[str]] = {}
        self._strong: Counter[str] = Counter()       # docs naming a key otherwise than as a weak mention
        self._speakers: Counter[str] = Counter()     # docs naming a key as their speaker
        self._acronyms: Counter[str] = Counter()     # docs writing a key as an acronym
        self.declared: dict[str, Declared] = {}      # key -> declaration, in declaration order
        self.merges: dict[str, Merge] = {}           # key of name -> merge, in merge order
        self.types: dict[str, dict[str, int]] = {}   # key -> type -> times an extractor gave it
        self.vectors = NameVectors()                  # key -> its name's vector (journaled)
        # memory id -> the typed relations it states, (source key, type, target key) (journaled)
        self.typed: dict[str, tuple[tuple[str, str, str], ...]] = {}
        # pairs an unmerge kept apart from the vectors (a set: as a dict, 64 bytes empty, not 216)
        self.apart: dict[tuple[str, str], None] = {}
        self._unembedded: set[str] = set()           # names of entities without a vector yet
        self._gazetteer: ahocorasick.Automaton | None = None
        self._groups: list[list[str]] | None = None   # how names group: changes with the names
        self._resolution: _Resolution | None = None   # groups with representatives: with the counts
        self._finder: ahocorasick.Automaton | None = None
        self._changes = 0  # memories added or removed: what the relation count depends on
        self._resolutions = 0
        # neighbours and speakers' memories, by entity, as of (changes, resolutions): a
        # query naming an entity of thousands of memories reads them once per change
        # (both start as the process's empty dict, replaced before their first use: the
        # memo state (-1, -1) is no graph's, and _expansions_of None no memo)
        self._memo_state: tuple[int, int] = (-1, -1)
        self._memo: dict[tuple[Any, ...], Any] = _NOT_MADE
        self._expansions: dict[tuple[Any, ...], Expansion] = _NOT_MADE  # least recently used first
        self._expansions_of: dict[tuple[Any, ...], Any] | None = None  # the memo they belong with
        self._expansion_docs = 0
        self._expansions_lock = threading.Lock()
        self._relations: tuple[tuple[int, int], int] | None = None

    def __len__(self) -> int:
        """How many entities the graph holds."""
        return len(self._resolved().members)

    def __bool__(self) -> bool:
        """Whether the graph has an entity (cheap: no resolution)."""
        return bool(self._strong) or bool(self.declared)

    @property
    def names(self) -> int:
        """How many names (keys) its memories mention (cheap: no resolution)."""
        return len(self._name_docs)

    @property
    def mentions(self) -> int:
        """Memory-mentions-entity edges (a memory naming two names of one entity counts twice)."""
        root = self._resolved().root
        return sum(key in root for names, _, _ in self._mentions.values() for key in names)

    def key(self, name: str) -> str:
        return name_key(name, fold_accents=self.fold_accents)

    # -- derived: the mentions of each memory ---------------------------------------------------
    def add(self, doc: int, content: str, author: str | None = None, entities: Iterable[str] = ()) -> None:
        """Index the mentions of memory ``doc`` (replacing what it had)."""
        if doc in self._mentions:
            self.remove(doc)
        self._changes += 1
        keys: dict[str, tuple[int, str]] = {}
        for name in entities:
            self._note(keys, name, "entity")
        if self.detect:
            for mention in mentions(content, author):
                self._note(keys, mention.surface, mention.kind)
        if self.declared:
            for key in self._gazetteer_find(content):
                flag, surface = keys.get(key, (0, ""))
                keys[key] = (flag | _STRONG, surface)
        if keys:
            self._place(doc, keys)

    def _place(self, doc: int, keys: Mapping[str, tuple[int, str]]) -> None:
        """Index the mentions of ``doc`` (key -> (flags, spelling))."""
        self._changes += 1
        self._resolution = None  # mention counts choose the representatives
        flags, written = zip(*keys.values(), strict=True)
        self._mentions[doc] = _shared(tuple(keys), flags, written)
        surfaces, name_docs = self._surfaces, self._name_docs
        for key, (flag, surface) in keys.items():
            self._count(key, flag, 1)
            _hold(surfaces, name_docs, key, surface, doc)

    def _note(self, keys: dict[str, tuple[int, str]], surface: str, kind: str) -> None:
        noted = _noted(surface, kind, self.fold_accents)
        if noted is None:
            return
        key, flag, written = noted
        had = keys.get(key)
        keys[key] = (flag, written) if had is None else (had[0] | flag, had[1] or written)

    def _count(self, key: str, flag: int, step: int) -> None:
        """Count a doc's mention of ``key`` in (or out); a key's first or last strong,
        speaker or acronym mention changes how names group."""
        if flag & _STRONG:
            self._step(self._strong, key, step, strong=True)
        if flag & _SPEAKER:
            self._step(self._speakers, key, step)
        if flag & _ACRONYM:
            self._step(self._acronyms, key, step)

    def _step(self, counter: Counter[str], key: str, step: int, strong: bool = False) -> None:
        count = counter.get(key, 0) + step
        if count <= 0:
            counter.pop(key, None)
            self._regroup()
            if strong:
                self._unembedded.discard(key)
            return
        counter[key] = count
        if step > 0 and count == 1:
            self._regroup()
            if strong and key not in self.vectors:
                self._unembedded.add(key)

    def _regroup(self) -> None:
        self._groups = None
        self._resolution = self._finder = None

    def remove(self, doc: int) -> None:
        found = self._mentions.pop(doc)
        if found is None:
            return
        self._changes += 1
        self._resolution = None
        names, flags, surfaces = found
        for key, flag, surface in zip(names, flags, surfaces, strict=True):
            self._count(key, flag, -1)
            written = self._surfaces.get(key)
            if surface and written is not None:
                written[surface] -= 1
                if written[surface] <= 0:
                    del written[surface]
                if not written:
                    del self._surfaces[key]
            holders = self._name_docs[key]
            holders.discard(doc)
            if not len(holders):
                del self._name_docs[key]

    def names_of(self, doc: int) -> tuple[str, ...]:
        found = self._mentions.get(doc)
        return found[0] if found is not None else ()

    def rebuild(self, items: Iterable[tuple[int, str, str | None, Sequence[str]]]) -> None:
        """Index every memory again (after the gazetteer changed): (doc, content,
        author, entities) of each."""
        self._mentions.clear()
        self._strong.clear()
        self._name_docs.clear()
        self._surfaces.clear()
        self._speakers.clear()
        self._acronyms.clear()
        self._unembedded = {key for key in self._declared_keys() if key not in self.vectors}
        self._regroup()
        for doc, content, author, entities in items:
            self.add(doc, content, author, entities)

    # -- journaled: declarations and merges -----------------------------------------------------
    def declare(self, declared: Declared) -> None:
        """Declare (or re-declare) an entity; the caller rebuilds the mentions after."""
        key = self.key(declared.name)
        self.declared[key] = declared
        self._unembedded.update(name for name in (key, *map(self.key, declared.aliases))
                                if len(name) >= 2 and name not in self.vectors)
        self._gazetteer = None
        self._regroup()

    def note_types(self, types: Mapping[str, str]) -> None:
        """Types an extractor gave names (journaled with its facts): an entity's type
        is the one given most often to its names, unless it was declared."""
        for name, kind in types.items():
            key = self.key(name)
            if len(key) >= 2 and kind:
                given = self.types.setdefault(key, {})
                given[kind] = given.get(kind, 0) + 1

    def note_relations(self, memory_id: str, relations: Iterable[tuple[str, str, str]]) -> None:
        """Typed relations a memory states (an extractor's, journaled with its facts),
        added to those it stated before."""
        kept = dict.fromkeys(self.typed.get(memory_id, ()))
        for source, kind, target in relations:
            a, b = self.key(source), self.key(target)
            if len(a) >= 2 and len(b) >= 2 and a != b and kind:
                kept.setdefault((a, kind, b), None)
        if kept:
            self.typed[memory_id] = tuple(kept)

    def relations_between(self, entity: str, other: str) -> list[tuple[str, str, str, str]]:
        """The typed relations between two entities, either way: (source entity, type,
        target entity, the id of the memory that states it), in memory order."""
        root = self._resolved().root
        out = []
        for memory_id in sorted(self.typed):
            for a, kind, b in self.typed[memory_id]:
                ends = (root.get(a, a), root.get(b, b))
                if ends in ((entity, other), (other, entity)):
                    out.append((ends[0], kind, ends[1], memory_id))
        return out

    def merge(self, merge: Merge) -> None:
        self.merges[self.key(merge.name)] = merge
        self._regroup()

    def unmerge(self, name: str) -> Merge | Declared | None:
        """Undo what made ``name`` an alias: its merge record, or its place among a
        declared entity's aliases (that declaration is returned changed); None when
        neither did."""
        key = self.key(name)
        merge = self.merges.pop(key, None)
        if merge is not None:
            if merge.how == "embedding":  # the vectors will not join these two again
                self.apart[_pair(key, self.key(merge.into))] = None
            self._regroup()
            return merge
        for owner, declared in self.declared.items():
            kept = tuple(alias for alias in declared.aliases if self.key(alias) != key)
            if len(kept) != len(declared.aliases):
                changed = Declared(declared.name, declared.type, kept, declared.at)
                self.declared[owner] = changed
                self._gazetteer = None
                self._regroup()
                return changed
        return None

    def _gazetteer_find(self, text: str) -> list[str]:
        automaton = self._gazetteer
        if automaton is None:
            automaton = ahocorasick.Automaton()
            for declared in self.declared.values():
                for name in (declared.name, *declared.aliases):
                    alias = self.key(name)
                    if len(alias) >= 2:
                        automaton.add_word(f" {alias} ", alias)
            if len(automaton):
                automaton.make_automaton()
            self._gazetteer = automaton
        if not len(automaton):
            return []
        haystack = f" {normalize_phrase(text, fold_accents=self.fold_accents)} "
        return list(dict.fromkeys(key for _end, key in automaton.iter(haystack)))

    def _declared_keys(self) -> set[str]:
        keys: set[str] = set()
        for key, declared in self.declared.items():
            keys.add(key)
            keys.update(alias for alias in map(self.key, declared.aliases) if len(alias) >= 2)
        return keys

    # -- journaled: the names' vectors (knowledge.resolution) ------------------------------------
    def unembedded(self, limit: int) -> list[str]:
        """Up to ``limit`` names of entities that have no vector yet, in key order."""
        if not self._unembedded:
            return []
        return sorted(self._unembedded)[:limit]

    def key_type(self, key: str) -> str | None:
        """The type of one name: its declaration's (or that of the entity it is a
        declared alias of), else the one extractors gave it most, else ``person`` for
        a speaker; None when nothing says."""
        declared = self.declared.get(key)
        if declared is not None:
            return declared.type
        for owner in self.declared.values():
            if any(self.key(alias) == key for alias in owner.aliases):
                return owner.type
        given = self.types.get(key)
        if given:
            return min(given.items(), key=lambda item: (-item[1], item[0]))[0]
        return "person" if self._speakers.get(key) else None

    def place_vectors(self, keys: Sequence[str], rows: Any, embedder: str, threshold: float,
                      at: float) -> list[Merge]:
        """Keep the vectors of names (rows of unit float32, the embedder's) and record
        the merges they decide (``knowledge.resolution.nearest_merges``): a name of
        an entity joins the nearest other entity of a compatible type at
        ``threshold`` or closer, unless both are declared, both speak, an unmerge
        kept them apart, or one of them is an alias by record already. Names of
        another embedder than the vectors held are refused (ValueError)."""
        if self.vectors.embedder is not None and embedder != self.vectors.embedder:
            raise ValueError(f"the graph holds name vectors of {self.vectors.embedder!r}, not {embedder!r}")
        owners = {key: key for key in self.declared}
        for key, declared in self.declared.items():
            owners.update((alias, key) for alias in map(self.key, declared.aliases) if alias not in owners)

        def live(key: str) -> bool:  # a name of an entity now (what the resolution groups)
            return key in self._strong or key in owners or key in self.merges or key in merge_targets

        merge_targets = {self.key(merge.into) for merge in self.merges.values()}

        def allowed(key: str, other: str) -> bool:
            if not live(key) or not live(other):
                return False
            if key in owners and other in owners:
                return False  # two declared entities stay two until an app merges them
            if self._speakers.get(key) and self._speakers.get(other):
                return False  # two voices are two people
            if _pair(key, other) in self.apart:
                return False
            mine, theirs = self.key_type(key), self.key_type(other)
            if mine is not None and theirs is not None and mine != theirs:
                return False
            if _merged_one(key, other) is None:
                return False
            root = self._resolved().root  # last: the one slow question, asked of close pairs only
            return root.get(key) != root.get(other)

        def _merged_one(key: str, other: str) -> tuple[str, str] | None:
            # the alias is a name that is neither declared nor merged by record already
            for name, into in ((key, other), (other, key)):
                if name not in owners and name not in self.merges:
                    return name, into
            return None

        decided = nearest_merges(self.vectors, keys, rows, embedder, threshold=threshold, allowed=allowed)
        self._unembedded.difference_update(keys)
        made = []
        for key, other, score in decided:
            chosen = _merged_one(key, other)
            if chosen is None:
                continue
            merge = Merge(chosen[0], chosen[1], at, "embedding", score)
            self.merge(merge)
            made.append(merge)
        return made

    # -- resolution ---------------------------------------------------------------------------
    def _resolved(self) -> _Resolution:
        if self._resolution is None:
            self._resolution = self._resolve()
            self._resolutions += 1
        return self._resolution

    def _resolve(self) -> _Resolution:
        if self._groups is None:
            self._groups = self._grouped()
        merge_targets = {self.key(merge.into) for merge in self.merges.values()}
        out = _Resolution()
        for keys_of in self._groups:
            representative = keys_of[0] if len(keys_of) == 1 else self._representative(keys_of, merge_targets)
            out.members[representative] = keys_of
            for key in keys_of:
                out.root[key] = representative
        return out

    def _grouped(self) -> list[list[str]]:
        """The name keys, grouped into entities (each group sorted)."""
        keys: set[str] = set(self._strong)  # a name only ever met as a weak mention is no entity
        for key, declared in self.declared.items():
            keys.add(key)
            keys.update(k for k in map(self.key, declared.aliases) if len(k) >= 2)
        for key, merge in self.merges.items():
            keys.add(key)
            keys.add(self.key(merge.into))
        keys.discard("")
        parent = {key: key for key in keys}

        def find(key: str) -> str:
            while parent[key] != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        def union(a: str, b: str) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        ordered = sorted(keys)
        compact: dict[str, str] = {}
        for key in ordered:  # spaces and hyphens aside
            squeezed = key.replace(" ", "")
            if squeezed in compact:
                union(compact[squeezed], key)
            else:
                compact[squeezed] = key
        for key in ordered:  # one letter more: a typo of a long single-word name
            if " " not in key and len(key) > _MIN_TYPO_LENGTH:
                for i in range(len(key)):
                    shorter = key[:i] + key[i + 1:]
                    if shorter in parent and " " not in shorter:
                        union(shorter, key)
                        break
        speakers = sorted(key for key in ordered if self._speakers.get(key) and " " not in key)
        for key in ordered:  # a short form of exactly one person's name ("mel", "melanie")
            if " " not in key and 3 <= len(key) <= 5 and not self._speakers.get(key):
                longer = [name for name in speakers if len(name) > len(key) and name.startswith(key)]
                if len(longer) == 1:
                    union(key, longer[0])
        acronyms = {key for key in ordered if self._acronyms.get(key)}
        if acronyms:
            for key in ordered:
                if " " in key:
                    letters = initials(key)
                    if letters in acronyms:
                        union(letters, key)
        for key, declared in self.declared.items():
            for alias in declared.aliases:
                alias_key = self.key(alias)
                if len(alias_key) >= 2:
                    union(alias_key, key)
        for key, merge in self.merges.items():
            union(key, self.key(merge.into))
        groups: dict[str, list[str]] = {}
        for key in ordered:
            groups.setdefault(find(key), []).append(key)
        return list(groups.values())

    def _representative(self, keys: list[str], merge_targets: set[str]) -> str:
        declared = [key for key in self.declared if key in keys]
        if declared:
            return declared[0]
        targets = [key for key in keys if key in merge_targets and key not in self.merges]
        if targets:
            return targets[0]
        return min(keys, key=lambda key: (-self._speakers.get(key, 0), -len(self._name_docs.get(key, ())),
                                          len(key), key))

    def resolve(self, name: str) -> str | None:
        """The entity (representative key) of a name or any alias; None when unknown."""
        key = self.key(name)
        return self._resolved().root.get(key) if key else None

    def resolve_key(self, key: str) -> str:
        """The entity of a name key the graph holds (the key itself when unknown)."""
        return self._resolved().root.get(key, key)

    def relations(self) -> int:
        """Entity-relates-entity edges: the pairs of entities some memory names both
        (counted again only after a change)."""
        self._resolved()
        state = (self._changes, self._resolutions)
        if self._relations is not None and self._relations[0] == state:
            return self._relations[1]
        root = self._resolved().root
        pairs: set[tuple[str, str]] = set()
        for names, _, _ in self._mentions.values():
            if len(names) > 1:
                entities = sorted({root[key] for key in names if key in root})
                pairs.update((a, b) for i, a in enumerate(entities) for b in entities[i + 1:])
        self._relations = (state, len(pairs))
        return len(pairs)

    def entities(self) -> list[str]:
        """Every entity's representative key, sorted."""
        return sorted(self._resolved().members)

    def keys_of(self, entity: str) -> list[str]:
        return self._resolved().members.get(entity, [])

    def docs_of(self, entity: str) -> set[int]:
        """The memories that mention the entity by any of its names."""
        return set(self._docs_array(entity).tolist())

    def _docs_array(self, entity: str) -> Docs:
        """:meth:`docs_of` as an ascending array."""
        held = [holders.array() for key in self.keys_of(entity)
                if (holders := self._name_docs.get(key)) is not None]
        return held[0] if len(held) == 1 else _union(held)

    def actor_docs(self, actor_id: str) -> set[int]:
        """The memories that mention the entity ``actor_id`` names, by any of its
        names: an actor's memories through the graph (``scope.actor_memories``)."""
        entity = self.resolve(actor_id)
        return self.docs_of(entity) if entity is not None else set()

    def _memoized(self) -> dict[tuple[Any, ...], Any]:
        """The memo of derived answers, emptied when the graph changed since."""
        self._resolved()
        state = (self._changes, self._resolutions)
        if state != self._memo_state or len(self._memo) >= _MEMO_MAX:
            self._memo_state, self._memo = state, {}
        return self._memo

    def _mentioning(self, entity: str) -> Docs:
        """``docs_of(entity)`` as a sorted array, memoized until the graph changes:
        every kept expansion naming the entity shares this one array (a frozenset
        was ~45 bytes a memory: 36 MB of memos after 300 searches of a scope of
        300,000; 8 here)."""
        found: Docs = self._read_entity(entity)[0]
        return found

    def spoken_by(self, entity: str) -> Docs:
        """The memories the entity is the speaker (or author) of, ascending (memoized
        until the graph changes)."""
        found: Docs = self._read_entity(entity)[1]
        return found

    def _read_entity(self, entity: str) -> tuple[Docs, Docs, dict[str, list[int]]]:
        """The entity's memories, those it says (both ascending), and per other
        entity the memories that name both (ascending), read in one pass over the
        entity's memories and memoized until the graph changes. (They were three
        passes, each reading every memory's names again, paid by the first search
        naming an entity of a large scope after any write: most of the graph's 21 ms a
        search over 200 questions of a scope of 1,000,000.)"""
        memo = self._memoized()
        found: tuple[Docs, Docs, dict[str, list[int]]] | None = memo.get(("read", entity))
        if found is not None:
            return found
        root = self._resolved().root
        keys = self.keys_of(entity)
        speaking = {key for key in keys if self._speakers.get(key)}
        mentions = cast("list[Mentions]", self._mentions.slots)  # (each doc held has its mentions)
        docs = self._docs_array(entity)
        spoken: list[int] = []
        shared: dict[str, list[int]] = {}
        for doc in docs.tolist():
            names, flags, _ = mentions[doc]
            if len(names) == 1:  # (most memories: the entity's name alone)
                if flags[0] & _SPEAKER and names[0] in speaking:
                    spoken.append(doc)
                continue
            said = False
            for name, flag in zip(names, flags, strict=True):
                if flag & _SPEAKER and name in speaking:
                    said = True
                other = root.get(name)
                if other is not None and other != entity:
                    held = shared.get(other)
                    if held is None:
                        shared[other] = [doc]
                    elif held[-1] != doc:  # (an entity named twice in a memory counts once)
                        held.append(doc)
            if said:
                spoken.append(doc)
        docs.flags.writeable = False
        found = memo[("read", entity)] = (docs, _sorted_docs(spoken), shared)
        return found

    def display_name(self, entity: str) -> str:
        """How the entity is written: its declaration, else its representative key's
        most frequent spelling."""
        declared = self.declared.get(entity)
        if declared is not None:
            return declared.name
        surfaces = self._surfaces.get(entity)
        if surfaces:
            return min(surfaces.items(), key=lambda item: (-item[1], item[0]))[0]
        for merge in self.merges.values():
            if self.key(merge.into) == entity:
                return merge.into
        return entity

    def aliases(self, entity: str) -> list[str]:
        """Every other way the entity is written (declared aliases, merged names,
        spellings of its keys), without repeats of its display name."""
        shown = self.display_name(entity)
        out: dict[str, None] = {}
        declared = self.declared.get(entity)
        if declared is not None:
            out.update(dict.fromkeys(declared.aliases))
        for key in self.keys_of(entity):
            surfaces = self._surfaces.get(key)
            if surfaces:
                out.update(dict.fromkeys(sorted(surfaces, key=lambda s: (-surfaces[s], s))))
            else:
                out.setdefault(self._written(key), None)
        seen = {self.key(shown)}
        kept = []
        for alias in out:
            alias_key = self.key(alias)
            if alias_key not in seen:
                seen.add(alias_key)
                kept.append(alias)
        return kept

    def _written(self, key: str) -> str:
        for merge in self.merges.values():
            if self.key(merge.name) == key:
                return merge.name
            if self.key(merge.into) == key:
                return merge.into
        return key

    def type_of(self, entity: str) -> str:
        declared = self.declared.get(entity)
        if declared is not None:
            return declared.type
        for key in self.keys_of(entity):
            owner = self.declared.get(key)
            if owner is not None:
                return owner.type
        given: Counter[str] = Counter()
        for key in self.keys_of(entity):
            given.update(self.types.get(key, {}))
        if given:
            return min(given.items(), key=lambda item: (-item[1], item[0]))[0]
        if any(self._speakers.get(key) for key in self.keys_of(entity)):
            return "person"
        return DEFAULT_TYPE

    # -- reading the graph ----------------------------------------------------------------------
    def find(self, text: str) -> list[str]:
        """The entities a text names (by any name or alias), in order of first match."""
        return self._found(normalize_phrase(text, fold_accents=self.fold_accents))

    def _found(self, normal: str) -> list[str]:
        """``find`` of a text already normalised (``normalize_phrase``)."""
        automaton = self._finder
        if automaton is None:
            automaton = ahocorasick.Automaton()
            for key in self._resolved().root:
                automaton.add_word(f" {key} ", key)
            if len(automaton):
                automaton.make_automaton()
            self._finder = automaton
        if not len(automaton):
            return []
        haystack = f" {normal} "
        found: dict[str, None] = {}
        # the longest name wins where names overlap ("black tower" over "tower")
        root = self._resolved().root
        spans = sorted(((end - len(key), end, root[key]) for end, key in automaton.iter(haystack)),
                       key=lambda span: (span[0], span[0] - span[1]))
        reach = -1
        for start, end, entity in spans:
            if start >= reach:
                found.setdefault(entity, None)
                reach = end
        return list(found)

    def neighbours(self, entity: str, *, limit: int | None = None,
                   total: int | None = None) -> list[tuple[str, int, list[int]]]:
        """The entities that share a memory with ``entity``: (entity, how many memories
        mention both, those memories, oldest doc first), strongest first: by shared
        memories weighted by how specific the neighbour is (an entity every memory
        names tells little), then by name. Memoized until the graph changes (the
        lists are shared: do not change them)."""
        memo = self._memoized()
        ranked: list[tuple[str, int, list[int]]] | None = memo.get(("neighbours", entity, total))
        if ranked is None:
            ranked = memo[("neighbours", entity, total)] = self._neighbours(entity, total)
        return ranked if limit is None else ranked[:limit]

    def _neighbours(self, entity: str, total: int | None) -> list[tuple[str, int, list[int]]]:
        shared = self._read_entity(entity)[2]
        if not shared:
            return []
        count = total if total is not None else max(1, len(self._mentions))

        def strength(item: tuple[str, list[int]]) -> tuple[float, str]:
            other, docs = item
            spread = max(1, sum(len(self._name_docs.get(key, ())) for key in self.keys_of(other)))
            return -len(docs) * math.log(1.0 + count / spread), other

        return [(other, len(docs), docs) for other, docs in sorted(shared.items(), key=strength)]

    def related(self, entity: str, depth: int = 1, *,
                limit: int = 50) -> list[tuple[str, int, str, int]]:
        """Entities within ``depth`` hops (1 or 2): (entity, hops, the entity it is
        reached through, shared memories on that hop), nearest and strongest first."""
        seen = {entity}
        out: list[tuple[str, int, str, int]] = []
        frontier = [entity]
        for hops in range(1, depth + 1):
            following: list[str] = []
            for source in frontier:
                for other, weight, _docs in self.neighbours(source, limit=limit):
                    if other in seen:
                        continue
                    seen.add(other)
                    out.append((other, hops, source, weight))
                    following.append(other)
            frontier = following
        return out[: limit * depth]

    def expansion(self, query: str, *, neighbours: int = 3) -> Expansion | None:
        """What a query gains from the graph (None: it names no entity). Memoized until
        the graph changes: it depends only on the entities the query names and the
        query's words that name them (the same object is returned for each query that
        names them so; do not change it)."""
        normal = normalize_phrase(query, fold_accents=self.fold_accents)
        found = self._found(normal)
        if not found:
            return None
        asked = set(normal.split(" "))
        named_words = frozenset(word for entity in found for key in self.keys_of(entity)
                                for word in key.split(" ") if word in asked)
        memo_key = (tuple(found), named_words, neighbours)
        # searches of a large scope run side by side (beside its actor): the kept
        # expansions change under a lock; one is built outside it
        with self._expansions_lock:
            kept = self._kept_expansions()
            made = kept.pop(memo_key, None)
            if made is not None:
                kept[memo_key] = made
                return made
        made = self._expansion(found, named_words, neighbours)
        with self._expansions_lock:
            kept = self._kept_expansions()
            if memo_key in kept:  # another search kept it meanwhile
                return kept[memo_key]
            self._expansion_docs += _own_docs(made)
            while kept and (len(kept) >= _EXPANSIONS_MAX
                            or self._expansion_docs > _EXPANSION_DOCS_MAX):
                self._expansion_docs -= _own_docs(kept.pop(next(iter(kept))))
            kept[memo_key] = made
        return made

    def _kept_expansions(self) -> dict[tuple[Any, ...], Expansion]:
        """The expansions kept (under ``_expansions_lock``): none once the graph changed."""
        memo = self._memoized()
        if self._expansions_of is not memo:  # the graph changed: they are out of date
            self._expansions_of, self._expansions, self._expansion_docs = memo, {}, 0
        return self._expansions

    def _expansion(self, found: list[str], asked: frozenset[str], neighbours: int) -> Expansion:
        """``expansion`` of a query naming ``found`` with the words ``asked`` of their
        names (an alias all of whose words the query holds adds nothing)."""
        aliases: dict[str, None] = {}
        near: dict[str, None] = {}
        # the entities' sets are the memo's (shared by every expansion naming them);
        # only an expansion of several entities holds unions of its own
        each = tuple((self._mentioning(entity), self.spoken_by(entity)) for entity in found)
        if len(each) == 1:
            docs, spoken = each[0]
        else:
            docs = _union(mentioning for mentioning, _ in each)
            spoken = _union(saying for _, saying in each)
        for entity in found:
            for key in self.keys_of(entity):
                if not set(key.split(" ")) <= asked:
                    aliases.setdefault(key, None)
            for other, _weight, _docs in self.neighbours(entity, limit=neighbours):
                if other not in found:
                    near.setdefault(other, None)
        return Expansion(tuple(found), tuple(aliases), tuple(near), docs, spoken, each, asked)

    # -- persistence ------------------------------------------------------------------------------
    def to_sidecar(self) -> bytes:
        """The mentions of every memory, so a restart need not find them again (see
        ``load_sidecar``): a header; each memory's doc and the row of its mentions in a
        table of the distinct ones, as two int32 arrays; then the table's rows, in
        pieces of ``_PIECE``, each encoded on its own. A scope's memories repeat few
        combinations of names (1,000,000 memories: 25,205 rows of 4,077 names), so a
        restart places them with a pass over the rows and array operations, not a
        decoded tuple and a loop a memory (5-8 s at 1,000,000; now about 0.5 s)."""
        slots = self._mentions.slots
        docs: list[int] = []
        rows: list[int] = []
        row_of_object: dict[int, int] = {}  # (the tuples are shared: most are found by identity)
        row_of: dict[Mentions, int] = {}
        for doc, found in enumerate(slots):
            if found is None:
                continue
            row = row_of_object.get(id(found))
            if row is None:
                row = row_of.setdefault(found, len(row_of))
                row_of_object[id(found)] = row
            docs.append(doc)
            rows.append(row)
        table = list(row_of)
        pieces = [msgspec.Raw(_encode_sidecar(_Rows(
            names=[names for names, _, _ in part], flags=[flags for _, flags, _ in part],
            surfaces=[surfaces for _, _, surfaces in part])))
            for part in (table[start : start + _PIECE] for start in range(0, len(table), _PIECE))]
        return _encode_sidecar(_Table(
            version=DETECTION_VERSION, detect=self.detect, fold_accents=self.fold_accents,
            gazetteer=self._gazetteer_signature(), docs=np.array(docs, dtype="<i4").data,
            rows=np.array(rows, dtype="<i4").data, pieces=pieces))

    def sidecar_fits(self, data: bytes | memoryview) -> bool:
        """Whether a sidecar's header says it was made with these settings and
        declarations (a look at the header only; ``load_sidecar`` checks the rest). A
        sidecar of the earlier, whole form is not decoded here: True."""
        header = _decoded(data, (_decode_table, _decode_pieces))
        return header is None or self._made_here(header)

    def _made_here(self, header: _Table | _Pieces | _Sidecar) -> bool:
        """Whether a sidecar's header names this detection, these settings and these
        declarations."""
        return (header.version, header.detect, header.fold_accents, header.gazetteer) == (
            DETECTION_VERSION, self.detect, self.fold_accents, self._gazetteer_signature())

    def load_sidecar(self, data: bytes | memoryview, docs: Iterable[int]) -> bool:
        """Take the mentions from a sidecar of ``to_sidecar`` when it was made with these
        settings and declarations over exactly ``docs`` (the memories that have mentions
        are among them); False, with no mentions placed, otherwise. The earlier forms
        (pieces of memories, each memory's mentions in full; before them, one piece of
        them all) are still read."""
        header = _decoded(data, (_decode_table, _decode_pieces, _decode_sidecar))
        if header is None or not self._made_here(header):
            return False
        self.rebuild(())
        try:
            if isinstance(header, _Table):
                placed = self._place_table(header, docs)
            else:
                placed = self._place_pieces(header, docs)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            self.rebuild(())
            return False
        self._changes += placed
        self._unembedded.update(key for key in self._strong if key not in self.vectors)
        self._regroup()
        return True

    def _place_pieces(self, header: _Pieces | _Sidecar, docs: Iterable[int]) -> int:
        """The mentions of a sidecar of an earlier form placed into an empty graph, a
        piece at a time (the caller regroups it); the count of docs placed. ValueError
        for pieces that do not fit ``docs`` or the count the header gives."""
        # the owner's int object of each doc (shared, where the sidecar decodes one more a memory)
        owned = {doc: doc for doc in docs}
        pieces = iter(header.pieces) if isinstance(header, _Pieces) else iter((header,))
        shared = Repeats()  # (one object for each name, spelling and tuple that repeats)
        placed = 0
        for raw in pieces:
            piece = raw if isinstance(raw, _Sidecar) else _decode_piece(raw)
            placed += self._place_rows(_rows_of(piece, owned), shared)
        if isinstance(header, _Pieces) and placed != header.count:
            raise ValueError(f"the pieces hold {placed} memories, the header says {header.count}")
        return placed

    def _place_table(self, table: _Table, docs: Iterable[int]) -> int:
        """The mentions of a sidecar's table placed into an empty graph (the caller
        regroups it): the state adding each memory gives, built per row of the table
        and with array operations per name, the rows taken in the order the docs first
        name them (that of adding doc by doc: the counters' and holders' order too);
        the count of docs placed. ValueError, with nothing placed, for a table that does
        not fit ``docs`` (a doc of no memory, docs not ascending, a row of no mentions,
        rows of other lengths)."""
        held = np.frombuffer(table.docs, dtype="<i4").astype(np.int64)
        rows = np.frombuffer(table.rows, dtype="<i4").astype(np.int64)
        if len(held) != len(rows):
            raise ValueError("a table of other lengths")
        if len(held) and (held[0] < 0 or bool((held[1:] <= held[:-1]).any())):
            raise ValueError("a table's docs not ascending")
        owner = np.fromiter(docs, dtype=np.int64)
        if len(held):
            # (a doc past the owner's last is none of its memories: no array is sized by it)
            if not len(owner) or owner.min() < 0 or held[-1] > owner.max():
                raise ValueError("a table holds docs of no memory")
            known = np.zeros(int(owner.max()) + 1, dtype=np.bool_)
            known[owner] = True
            if not known[held].all():
                raise ValueError("a table holds docs of no memory")
        shared = Repeats()  # (one object for each name, spelling and tuple that repeats)
        seen, first = shared.get, shared.tuple_of
        distinct: list[Mentions] = []
        for raw in table.pieces:
            piece = _decode_rows(raw)
            if not len(piece.names) == len(piece.flags) == len(piece.surfaces):
                raise ValueError("a piece of rows of other lengths")
            for given_names, given_flags, given_surfaces in zip(piece.names, piece.flags, piece.surfaces,
                                                                 strict=True):
                if not len(given_names) == len(given_flags) == len(given_surfaces):
                    raise ValueError("a row of other lengths")
                names, flags, surfaces = _distinct_names(seen(given_names) or first(given_names),
                                                         seen(given_flags) or first(given_flags),
                                                         seen(given_surfaces) or first(given_surfaces))
                triple = (names, flags, surfaces)
                distinct.append(seen(triple) or shared.setdefault(triple, triple))
        if len(rows) and (rows.min() < 0 or rows.max() >= len(distinct)):
            raise ValueError("a doc's row is not in the table")
        # from here nothing fails: the graph is filled
        uses = np.bincount(rows, minlength=len(distinct))
        ends = np.cumsum(uses)
        grouped = held[np.argsort(rows, kind="stable")]  # the docs of each row, ascending, row after row
        named, first_at = np.unique(rows, return_index=True)
        strong, speakers, acronyms = self._strong, self._speakers, self._acronyms
        spellings_of = self._surfaces
        docs_of: dict[str, list[npt.NDArray[np.int64]]] = {}
        for row in named[np.argsort(first_at)].tolist():
            names, flags, surfaces = distinct[row]
            count = int(uses[row])
            group = grouped[ends[row] - count : ends[row]]
            for key, flag, surface in zip(names, flags, surfaces, strict=True):
                if flag & _STRONG:
                    strong[key] += count
                if flag & _SPEAKER:
                    speakers[key] += count
                if flag & _ACRONYM:
                    acronyms[key] += count
                _spell(spellings_of, key, surface, count)
                docs_of.setdefault(key, []).append(group)
        name_docs = self._name_docs
        for key, groups in docs_of.items():
            name_docs[key] = HeldDocs.of(groups[0] if len(groups) == 1 else np.sort(np.concatenate(groups)))
        table_of = np.empty(len(distinct), dtype=object)
        for row, triple in enumerate(distinct):
            table_of[row] = triple
        slots = np.full(int(held[-1]) + 1 if len(held) else 0, None, dtype=object)
        slots[held] = table_of[rows]
        self._mentions.slots = slots.tolist()
        self._mentions.placed(len(held))
        return len(held)

    def _place_rows(self, rows: Iterable[tuple[int, tuple[str, ...], tuple[int, ...], tuple[str, ...]]],
                    shared: Repeats) -> int:
        """``_place`` of many docs (doc, names, flags, spellings) into a graph being
        loaded (the caller regroups it once they are all there): the same state,
        counted in one pass without a call per name (a restore of 1,000,000 memories
        places millions of names); the count placed. ``shared`` gives one object for
        each name, spelling and tuple of them that repeats: a sidecar decodes a string
        per mention (at 300,000 memories, 2.3 million objects, 111 MB; a scope that
        found the mentions itself shares them through the detector's caches).
        ValueError for a doc placed before (never in a sidecar written here: a damaged
        one, whose doc would be held twice by its names)."""
        mentions = self._mentions.slots  # (read and written here: a method call a doc would slow a restore)
        strong, speakers, acronyms = self._strong, self._speakers, self._acronyms
        spellings_of, name_docs = self._surfaces, self._name_docs
        seen, first = shared.get, shared.tuple_of
        placed = 0
        try:
            for doc, given_names, given_flags, given_surfaces in rows:
                if doc >= len(mentions):
                    mentions.extend([None] * (doc + 1 - len(mentions)))
                elif doc < 0 or mentions[doc] is not None:
                    raise ValueError(f"memory {doc} is placed twice" if doc >= 0 else f"{doc} is no doc id")
                # (a tuple seen: its strings were shared)
                names, flags, surfaces = _distinct_names(seen(given_names) or first(given_names),
                                                         seen(given_flags) or first(given_flags),
                                                         seen(given_surfaces) or first(given_surfaces))
                triple = (names, flags, surfaces)
                mentions[doc] = seen(triple) or shared.setdefault(triple, triple)
                placed += 1
                for key, flag, surface in zip(names, flags, surfaces, strict=True):
                    if flag & _STRONG:
                        strong[key] += 1
                    if flag & _SPEAKER:
                        speakers[key] += 1
                    if flag & _ACRONYM:
                        acronyms[key] += 1
                    _hold(spellings_of, name_docs, key, surface, doc)
        finally:
            self._mentions.placed(placed)
        return placed

    def _gazetteer_signature(self) -> list[list[str]]:
        return [[declared.name, *declared.aliases] for declared in self.declared.values()]

    def to_extra(self) -> dict[str, Any]:
        """The journaled part, for a snapshot's header (empty when there is none)."""
        out: dict[str, Any] = {}
        if self.declared:
            out["declared"] = [{"name": d.name, "type": d.type, "aliases": list(d.aliases), "at": d.at}
                               for d in self.declared.values()]
        if self.merges:
            out["merges"] = [{"name": m.name, "into": m.into, "at": m.at}
                             | ({"how": m.how, "score": m.score} if m.how != "manual" else {})
                             for m in self.merges.values()]
        if self.types:
            out["types"] = {key: dict(given) for key, given in self.types.items()}
        if len(self.vectors):
            out["vectors"] = self.vectors.to_extra()
        if self.apart:
            out["apart"] = [list(pair) for pair in sorted(self.apart)]
        if self.typed:
            out["relations"] = {memory_id: [list(r) for r in rels] for memory_id, rels in self.typed.items()}
        return out

    def load_extra(self, extra: Mapping[str, Any]) -> None:
        for item in extra.get("declared") or ():
            aliases = tuple(str(a) for a in item.get("aliases") or ())
            self.declare(Declared(str(item["name"]), str(item.get("type") or DEFAULT_TYPE), aliases,
                                  float(item.get("at") or 0.0)))
        for item in extra.get("merges") or ():
            score = item.get("score")
            self.merge(Merge(str(item["name"]), str(item["into"]), float(item.get("at") or 0.0),
                             str(item.get("how") or "manual"), float(score) if score is not None else None))
        for key, given in (extra.get("types") or {}).items():
            self.types[str(key)] = {str(kind): int(count) for kind, count in given.items()}
        self.vectors.load_extra(extra.get("vectors") or {})
        self.apart.update(dict.fromkeys(_pair(str(a), str(b)) for a, b in extra.get("apart") or ()))
        for memory_id, rels in (extra.get("relations") or {}).items():
            self.typed[str(memory_id)] = tuple((str(a), str(k), str(b)) for a, k, b in rels)
        self._unembedded.difference_update(self.vectors.row)



def _rows_of(piece: _Piece | _Sidecar, owned: Mapping[int, int]) -> Iterator[
        tuple[int, tuple[str, ...], tuple[int, ...], tuple[str, ...]]]:
    """A sidecar piece's rows (doc, names, flags, spellings), each doc the owner's int
    object; ValueError (before any row) when it holds other docs or rows of other
    lengths."""
    if not set(piece.docs) <= owned.keys() or not len(piece.docs) == len(piece.names) == \
            len(piece.flags) == len(piece.surfaces) or any(
                not len(n) == len(f) == len(s) for n, f, s in zip(piece.names, piece.flags, piece.surfaces,
                                                                   strict=True)):
        raise ValueError("a piece holds other docs, or rows of other lengths")
    return zip(map(owned.__getitem__, piece.docs), piece.names, piece.flags, piece.surfaces, strict=True)


def _decoded(data: bytes | memoryview, forms: Iterable[Callable[[bytes | memoryview], _Header]]
             ) -> _Header | None:
    """``data`` decoded by the first of ``forms`` it fits (the sidecar's forms, newest
    first); None when it fits none."""
    for decode in forms:
        try:
            return decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return None


def _distinct_names(names: tuple[str, ...], flags: tuple[int, ...],
                    surfaces: tuple[str, ...]) -> Mentions:
    """A sidecar's mentions of a memory with each name once, its last flag and spelling
    kept, as adding the memory counts them (never needed for a sidecar written here: a
    memory's names are a dict's keys)."""
    if len(names) > 1 and len(set(names)) < len(names):
        keys = dict(zip(names, zip(flags, surfaces, strict=True), strict=True))
        names, flags = tuple(keys), tuple(flag for flag, _ in keys.values())
        surfaces = tuple(surface for _, surface in keys.values())
    return names, flags, surfaces


def _spell(spellings_of: dict[str, Counter[str]], key: str, surface: str, count: int) -> None:
    """Count ``surface`` as a spelling of ``key`` ``count`` times (none for ""); the
    Counter is made only for a new key."""
    if surface:
        spellings = spellings_of.get(key)
        if spellings is None:
            spellings = spellings_of[key] = Counter()
        spellings[surface] += count


def _hold(spellings_of: dict[str, Counter[str]], name_docs: dict[str, HeldDocs], key: str, surface: str,
          doc: int) -> None:
    """Count ``surface`` as a spelling of ``key`` (none for "") and ``doc`` among the
    memories naming it; the Counter and the holders are made only for a new key."""
    _spell(spellings_of, key, surface, 1)
    holders = name_docs.get(key)
    if holders is None:
        name_docs[key] = HeldDocs(doc)
    else:
        holders.add(doc)


Mentions = tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]
"""A memory's names, their flags and their spellings, name by name."""

_SHARED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_SHARED_MAX: Final = 1 << 15


def _shared(names: tuple[str, ...], flags: tuple[int, ...], surfaces: tuple[str, ...]) -> Mentions:
    """A memory's mentions as a tuple equal to one seen lately (by any graph of the
    process), of tuples equal to ones seen lately, where there are: most memories
    repeat another's (a flag tuple nearly always; the names of a user's few people and
    places often), and four tuples a memory cost 60-100 bytes each (at 100,000
    memories, 30 MB). What is kept is let go at ``_SHARED_MAX`` tuples, and kept
    again as it comes."""
    shared = _SHARED
    if len(shared) >= _SHARED_MAX:
        shared.clear()
    keep = shared.setdefault
    triple = (keep(names, names), keep(flags, flags), keep(surfaces, surfaces))
    return cast("Mentions", keep(triple, triple))


_NOT_MADE: Final[dict[Any, Any]] = {}
"""What a graph's memo and expansions are until made (never written)."""

_NOTED: dict[tuple[str, str, bool], tuple[str, int, str] | None] = {}
_NOTED_MAX: Final = 16_384


def _noted(surface: str, kind: str, fold_accents: bool) -> tuple[str, int, str] | None:
    """What a mention of ``surface`` as ``kind`` notes: its key, its flags and its
    spelling (None for a key shorter than two characters). Kept for the mentions
    seen last: most memories name a name some other memory named."""
    at = (surface, kind, fold_accents)
    noted = _NOTED.get(at, _UNNOTED)
    if noted is not _UNNOTED:
        return noted
    key = name_key(surface, fold_accents=fold_accents)
    if len(key) < 2:
        noted = None
    else:
        flag = 0 if kind == "weak" else _STRONG
        if kind == "speaker":
            flag |= _SPEAKER
        elif kind == "acronym" or is_acronym(surface.strip()):
            flag |= _ACRONYM
        noted = (key, flag, surface.strip())
    if len(_NOTED) >= _NOTED_MAX:
        _NOTED.clear()
    _NOTED[at] = noted
    return noted


_UNNOTED: Final = ("", -1, "")


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


class _Sidecar(msgspec.Struct, array_like=True):
    version: int
    detect: bool
    fold_accents: bool
    gazetteer: list[list[str]]
    docs: list[int]
    names: list[tuple[str, ...]]
    flags: list[tuple[int, ...]]
    surfaces: list[tuple[str, ...]]


class _Piece(msgspec.Struct, array_like=True):
    """Some memories' mentions, in a sidecar of :class:`_Pieces`."""

    docs: list[int]
    names: list[tuple[str, ...]]
    flags: list[tuple[int, ...]]
    surfaces: list[tuple[str, ...]]


class _Table(msgspec.Struct, array_like=True, tag="table"):
    """The sidecar: what made it; the docs with mentions (int32, ascending) and the row
    of each one's mentions (int32) in a table of the distinct ones; the table's rows in
    pieces, each a :class:`_Rows` encoded on its own. (:class:`_Pieces` and
    :class:`_Sidecar` are the earlier forms, still read.)"""

    version: int
    detect: bool
    fold_accents: bool
    gazetteer: list[list[str]]
    docs: memoryview
    rows: memoryview
    pieces: list[msgspec.Raw]


class _Rows(msgspec.Struct, array_like=True):
    """Rows of a :class:`_Table`: the names, flags and spellings of each."""

    names: list[tuple[str, ...]]
    flags: list[tuple[int, ...]]
    surfaces: list[tuple[str, ...]]


class _Pieces(msgspec.Struct, array_like=True):
    """The earlier sidecar: what made it, the count of memories with mentions, and
    their mentions in pieces, each a :class:`_Piece` encoded on its own (:class:`_Sidecar`
    is the form before, one piece of them all)."""

    version: int
    detect: bool
    fold_accents: bool
    gazetteer: list[list[str]]
    count: int
    pieces: list[msgspec.Raw]


_Header = _Table | _Pieces | _Sidecar
"""A graph sidecar decoded, of any of its forms."""

_PIECE: Final = 8192
"""Rows of the sidecar's table encoded (and decoded) together."""

_encode_sidecar = msgspec.msgpack.Encoder().encode
_decode_sidecar = msgspec.msgpack.Decoder(_Sidecar).decode
_decode_pieces = msgspec.msgpack.Decoder(_Pieces).decode
_decode_piece = msgspec.msgpack.Decoder(_Piece).decode
_decode_table = msgspec.msgpack.Decoder(_Table).decode
_decode_rows = msgspec.msgpack.Decoder(_Rows).decode
