"""Entity resolution by embeddings: the last step after spelling (``knowledge.graph``).

A name the graph has not met before is embedded beside the scope actor (the
scope's embedder, the name's key as the text) and its vector comes back as a
journaled command; inside the actor, the name is compared with the names that
already have vectors, and when the nearest one of a compatible entity is at
least ``threshold`` close (cosine) it becomes an alias of it: a merge record
marked ``how="embedding"`` with its score, undone like any merge.

Precision first: a wrong merge hides an entity, a missed one only leaves two. So
besides the threshold (measured per embedder by ``bench/entity_resolution.py``
on a labelled set of name pairs, and journaled with each decision so a replay
under another configuration decides the same):

* two names that differ by a word that tells siblings apart (a number, an
  ordinal, a direction, a colour, a day or month, old/new, elder/younger...:
  ``"Session 1"``/``"Session 2"``, ``"North Korea"``/``"South Korea"``,
  ``"York"``/``"New York"``) are never merged by their vectors;
* nor are two names of one word each: a word's vector says little more than its
  spelling (``"Kelcor"`` and ``"Halkelcor"`` are 0.88 close for the hashing
  embedder), and the spelling rules decide those already; nor a one-word name and
  a longer name holding it (``"Lorvinmar"``, ``"Lorvinmar Vale"``: 0.86), nor two
  names of as many words that differ in one word that is no abbreviation nor a
  one-letter respelling of the other (``"John Smith"``, ``"Jane Smith"``);
* the graph adds its own vetoes (``EntityGraph.place_vectors``): other types,
  two declared entities, two speakers, a pair an unmerge kept apart.

Vectors are kept in float16 (what the journal line carries, so the actor decides on
exactly the numbers a replay reads back). Pure: no clock, no I/O, no model.
"""

from __future__ import annotations

import base64
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = ["SIMILARITY", "NameVectors", "decode_rows", "default_similarity", "encode_rows", "nearest_merges",
           "namesakes", "siblings", "vetoed"]

SIMILARITY: Final[Mapping[str, float]] = {
    "hashing-v1-d384-": 0.80,
    "minilm-l6-v2": 0.92,
}
"""The cosine at or above which two names are one entity, by embedder (the prefix
of its name: the hashing embedder in its default 384 dimensions only, fewer collide
more), measured by bench/entity_resolution.py on bench/data/entity_pairs.json: the
lowest threshold with no wrong merge there, plus a margin over the closest pair of
two entities (hashing: 0.68, ``"Washington"``/``"George Washington"``; MiniLM:
0.87, ``"Anbel"``/``"Anbelor"``). An embedder not listed resolves by spelling only
unless ``config.memories.entity_similarity`` sets one."""

_NUMBERS_TEXT: Final = (
    "zero one two three four five six seven eight nine ten eleven twelve first second third fourth fifth "
    "sixth seventh eighth ninth tenth last next i ii iii iv v vi vii viii ix x xi xii")
_NUMBER_WORDS: Final = frozenset(_NUMBERS_TEXT.split())
_CONTRASTS_TEXT: Final = (
    "north south east west northern southern eastern western upper lower inner outer left right old new "
    "elder younger older young senior junior big little great small high low front back top bottom red "
    "blue green yellow black white grey gray gold golden silver brown purple orange pink dark light "
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july "
    "august september october november december spring summer autumn winter fall morning evening night "
    "king queen prince princess lord lady sir dame mr mrs ms mother father brother sister son daughter "
    "uncle aunt grandmother grandfather mom dad kids wife husband")
_CONTRASTS: Final = frozenset(_CONTRASTS_TEXT.split())
"""Words that tell two members of one family apart: the names that differ by one
are siblings (``"King Aldric"`` and ``"Prince Aldric"``), not two spellings."""


def _telling(word: str) -> bool:
    return word.isdigit() or word in _NUMBER_WORDS or word in _CONTRASTS


def siblings(a: str, b: str) -> bool:
    """Whether two name keys differ by a word that tells siblings apart (a number,
    an ordinal, a direction, a colour, a time, a rank or kinship): such names are
    never merged by their vectors."""
    words_a, words_b = set(a.split(" ")), set(b.split(" "))
    return any(_telling(word) for word in words_a ^ words_b)


def vetoed(a: str, b: str) -> bool:
    """Whether two name keys are never merged by their vectors, however close:
    one word each, one word and a longer name holding it (``Paris`` and ``Paris
    Hilton``, ``Jordan`` and ``Michael Jordan``: only the context tells whether the
    longer name is the same one), :func:`siblings` or :func:`namesakes`."""
    one_a, one_b = " " not in a, " " not in b
    if (one_a and one_b) or (one_a and a in b.split(" ")) or (one_b and b in a.split(" ")):
        return True
    return siblings(a, b) or namesakes(a, b)


def _abbreviates(short: str, long: str) -> bool:
    """``short`` (4 letters at most) is an abbreviation of ``long``: its first letter,
    and its letters in order (``dr``/``doctor``, ``mt``/``mount``, ``corp``/``corporation``)."""
    if not short or len(short) > 4 or len(short) >= len(long) or short[0] != long[0]:
        return False
    rest = iter(long)
    return all(letter in rest for letter in short)


def _one_edit(a: str, b: str) -> bool:
    """Whether two words are one letter added, dropped or changed apart."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def namesakes(a: str, b: str) -> bool:
    """Whether two names of as many words differ in one word only, and those two
    words are neither an abbreviation of the other nor one letter apart: ``John
    Smith`` and ``Jane Smith``, ``Anbel Vale`` and ``Anbelor Vale`` (two people of
    one family), where ``Dr Chen``/``Doctor Chen`` and ``Saltmere Harbor``/``Saltmere
    Harbour`` are one."""
    words_a, words_b = a.split(" "), b.split(" ")
    if len(words_a) != len(words_b):
        return False
    differ = [(x, y) for x, y in zip(words_a, words_b, strict=True) if x != y]
    if len(differ) != 1:
        return False
    x, y = differ[0]
    return not (_abbreviates(x, y) or _abbreviates(y, x) or _one_edit(x, y))


def default_similarity(embedder: str | None) -> float | None:
    """The measured threshold of an embedder (by its name's prefix); None: none was
    measured for it."""
    if not embedder:
        return None
    for prefix, value in SIMILARITY.items():
        if embedder.startswith(prefix):
            return value
    return None


def encode_rows(matrix: npt.ArrayLike) -> str:
    """Unit rows as a journal carries them: float16, little-endian, base64."""
    rows = np.asarray(matrix, dtype=np.float32)
    return base64.b64encode(rows.astype("<f2").tobytes()).decode("ascii")


def decode_rows(data: str, count: int, dim: int) -> npt.NDArray[np.float32]:
    """The rows of :func:`encode_rows`; ValueError when the data is not ``count`` rows of ``dim``."""
    raw = base64.b64decode(data.encode("ascii"), validate=True)
    if len(raw) != 2 * count * dim:
        raise ValueError(f"{len(raw)} bytes of vectors; {count} names of dimension {dim} need "
                         f"{2 * count * dim}")
    return np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(count, dim)


_NO_NAMES: Final = np.zeros((0, 0), dtype=np.float32)
_NO_NAMES.flags.writeable = False

_SHARED_ROWS: weakref.WeakValueDictionary[tuple[str, str], npt.NDArray[np.float32]] = (
    weakref.WeakValueDictionary())
_SHARED_ROWS_LOCK: Final = threading.Lock()


def _shared_row(embedder: str, key: str,
                row: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float32], bool]:
    """A read-only matrix of the one row ``row``, and whether another graph made it:
    the one a graph holds for this name and embedder when it has the same values,
    else a new one (found by the next graph while one holds it). Graphs whose first
    name is the same (a city, a product: 20,000 users of one memory naming Lisbon)
    hold one copy instead of 1.5 KB each (384 dimensions)."""
    with _SHARED_ROWS_LOCK:
        found = _SHARED_ROWS.get((embedder, key))
        if found is not None and found.shape[1] == len(row) and np.array_equal(found[0], row):
            return found, True
        made = np.array(row, dtype=np.float32).reshape(1, len(row))
        made.flags.writeable = False
        _SHARED_ROWS[(embedder, key)] = made
        return made, False


class NameVectors:
    """The vectors of a graph's names, one row per name key, all of one embedder."""

    def __init__(self) -> None:
        self.embedder: str | None = None
        self.dim = 0
        self.keys: list[str] = []
        self.row: dict[str, int] = {}
        self._matrix: npt.NDArray[np.float32] = _NO_NAMES  # (shared until a name has a vector)
        self._borrowed = False  # the matrix is a first name's row another graph made (add)

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: object) -> bool:
        return key in self.row

    @property
    def matrix(self) -> npt.NDArray[np.float32]:
        return self._matrix[:len(self.keys)]

    @property
    def nbytes(self) -> int:
        """The bytes of the rows it holds, room to grow included (a first name's row
        shared by several graphs counted by the one that made it)."""
        return 0 if self._borrowed else int(self._matrix.nbytes)

    def add(self, keys: Sequence[str], rows: npt.NDArray[np.float32], embedder: str) -> None:
        """Keep the rows of ``keys`` (names that have one already keep theirs). Room
        grows by doubling, from what the first rows need: a scope of one or two names
        holds one or two rows (a first room of 64 rows of 384 dimensions was 98 KB a
        live scope); a first name alone, the row other graphs hold for it when it is
        the same (read only: a second name grows the room, a copy)."""
        if self.embedder is None:
            self.embedder, self.dim = embedder, int(rows.shape[1])
        fresh = [(key, i) for i, key in enumerate(keys) if key not in self.row]
        need = len(self.keys) + len(fresh)
        if need == 1 and not self.keys:
            key, i = fresh[0]
            self._matrix, self._borrowed = _shared_row(self.embedder, key, rows[i])
            self.row[key] = 0
            self.keys.append(key)
            return
        if need > self._matrix.shape[0]:
            grown = np.zeros((max(need, 2 * self._matrix.shape[0]), self.dim), dtype=np.float32)
            if self.keys:
                grown[:len(self.keys)] = self.matrix
            self._matrix, self._borrowed = grown, False
        for key, i in fresh:
            self.row[key] = len(self.keys)
            self._matrix[len(self.keys)] = rows[i]
            self.keys.append(key)

    def to_extra(self) -> dict[str, Any]:
        return {"embedder": self.embedder, "dim": self.dim, "keys": list(self.keys),
                "rows": encode_rows(self.matrix)}

    def load_extra(self, data: Mapping[str, Any]) -> None:
        keys = [str(key) for key in data.get("keys") or ()]
        embedder, dim = data.get("embedder"), int(data.get("dim") or 0)
        if keys and isinstance(embedder, str) and dim > 0:
            self.add(keys, decode_rows(str(data.get("rows") or ""), len(keys), dim), embedder)


_BLOCK: Final = 1024
"""Rows times names of one matrix product at most: a larger one lets OpenBLAS start
its threads, which on a busy machine costs milliseconds waiting for a core (as in
``mnemex.index.vector``)."""


def _products(matrix: npt.NDArray[np.float32], batch: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``matrix @ batch.T``, in blocks of rows small enough to run on this thread."""
    out = np.empty((len(matrix), len(batch)), dtype=np.float32)
    step = max(8, _BLOCK // max(1, len(batch)))
    for start in range(0, len(matrix), step):
        out[start:start + step] = matrix[start:start + step] @ batch.T
    return out


def nearest_merges(vectors: NameVectors, keys: Sequence[str], rows: npt.NDArray[np.float32], embedder: str, *,
                   threshold: float, allowed: Callable[[str, str], bool]) -> list[tuple[str, str, float]]:
    """The merges the vectors of new names decide, as (name, into, cosine): each name
    (in sorted order, so a batch decides the same whatever order it came in) joins
    the nearest of the names with a vector and of the batch's names before it, at
    ``threshold`` or closer, that is not :func:`vetoed` and for which
    ``allowed(name, other)`` holds (asked of those few only: it may be slow); the new
    rows are added to ``vectors``. One matrix product per batch: O((names + batch) x
    batch x dim)."""
    fresh = sorted({key: i for i, key in enumerate(keys) if key not in vectors.row}.items())
    if not fresh:
        return []
    pool = vectors.keys
    batch = rows[[i for _, i in fresh]]
    against = _products(vectors.matrix, batch) if pool else None
    within = _products(batch, batch)
    out: list[tuple[str, str, float]] = []
    low = threshold - 1e-6
    for at, (key, _) in enumerate(fresh):
        scored: list[tuple[float, str]] = []
        if against is not None:
            scored += [(-float(against[j, at]), pool[j]) for j in np.flatnonzero(against[:, at] >= low)]
        scored += [(-float(within[j, at]), fresh[j][0]) for j in np.flatnonzero(within[:at, at] >= low)]
        for negative, other in sorted(scored):
            if other != key and not vetoed(key, other) and allowed(key, other):
                out.append((key, other, round(-negative, 4)))
                break
    vectors.add([key for key, _ in fresh], batch, embedder)
    return out
