"""BM25Index: Okapi BM25 full-text ranking with phrases and a context field.

Scoring (BM25F with two fields, content and context)::

    B_f(d)  = 1 - b + b * len_f(d) / avg_len_f        (f = content, context)
    tf~     = tf_content / B_content + w * tf_context / B_context
    idf(t)  = ln(1 + (N - df + 0.5) / (df + 0.5))
    score   = sum over distinct query terms t of  idf(t) * tf~ * (k1 + 1) / (k1 + tf~)

``N`` is the number of documents, ``df`` the number containing the term in
either field, ``avg_len_content`` the mean content length over all documents and
``avg_len_context`` the mean context length over the documents that have one;
``w`` is ``context_weight``. A document without context scores exactly as in
plain Okapi BM25. The context field is ranking text kept apart from the content
(a memory's neighbouring turns, a title): it helps a document be found but is
never what a phrase must match.

Quoted phrases in a query are required: a document is returned only when its
content holds every phrase as consecutive words (stop words inside a phrase
match any stop word, since they are not indexed). Phrase words also score.

Storage: per term two ``array('i')`` columns (doc ids, packed term frequencies)
turned into numpy arrays on first use after a change; per document the content
as a sequence of term ids by position (stop words as -1), for phrase checks and
removal. About 8 bytes per (term, document) posting plus 4 bytes per content
word. A search scores its terms' postings in one pass; the contributions of the
frequent terms (``TERM_SCORES_MIN_DF`` postings and more) are kept between searches
until the index changes, at most 32 bytes a document (``term_scores_budget``: a
million documents keep 32 MB, an index of 32,768 or fewer 1 MiB).

Persistence: :meth:`BM25Index.to_sidecar` writes the whole state as one blob
(the postings, sequences and lengths as raw arrays, see
:mod:`mnemex.index._sidecar`) and :meth:`BM25Index.from_sidecar` reads it back
with a few array copies and no tokenizing, refusing a blob built with other
settings (k1, b, context_weight, tokenizer) so the caller rebuilds instead. A
restored term's postings stay slices of the sidecar's arrays until the term is
first touched.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from array import array
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple, Self

import numpy as np
import numpy.typing as npt

from mnemex.errors import CorruptData, InvalidInput
from mnemex.index._runs import Runs
from mnemex.index._select import (
    Allowed,
    allowed_mask,
    check_doc_id,
    check_top_k,
    missing,
    positive_slots,
    top_k_by_score,
)
from mnemex.index._sidecar import (
    Pieces,
    Sidecar,
    SidecarIndex,
    corrupt,
    doc_ids_checksum,
    lent,
    load_sidecar,
    sidecar_chunks,
)
from mnemex.index.tokenizer import ParsedQuery, Phrase, Tokenizer

__all__ = ["BM25Index", "Scored"]

_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]
_F32 = npt.NDArray[np.float32]
_I32 = npt.NDArray[np.int32]


class Scored(NamedTuple):
    """One query's scores (:meth:`BM25Index.scored`): ``scores`` as
    :meth:`BM25Index.score_all` gives them, ``matches`` as
    :meth:`BM25Index.content_matches`, and ``context_docs``, the doc slots that hold
    one of the query's terms in their context but not in their content (repeats
    possible; such a doc may hold another term in its content)."""

    scores: _F64
    matches: npt.NDArray[np.int32]
    context_docs: _I64

    def context_alone(self) -> _I64:
        """Of ``context_docs``, those that hold none of the query's terms in their
        content: the docs it matches by their context alone (repeats as there)."""
        alone: _I64 = self.context_docs[self.matches[self.context_docs] == 0]
        return alone

_TF_MAX = 0xFFFF               # term frequencies are packed as content | context << 16
_CONTEXT_TF_MAX = 0x7FFF       # (int32, so the context part keeps the sign bit clear)
_CONTEXT_UNIT = 1 << 16
_MIN_CAPACITY = 16
_FEW_DOCS = 8                  # add_many below this: no array operations

_MAGIC = b"MNXBM25\x00"
_INT32, _INT64, _FLOAT64 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float64)
_SIDECAR_ARRAYS: dict[str, np.dtype[Any]] = {
    "vocab": np.dtype(np.uint8),      # terms in id order, UTF-8, NUL-separated (no term holds a NUL)
    "term_docs": _INT64,              # postings per term
    "posting_docs": _INT32,           # every term's doc ids, term after term
    "posting_tfs": _INT32,            # and their packed term frequencies
    "content_ids": _INT32,            # documents in insertion order
    "content_sizes": _INT64,          # words (stop words too) per document
    "content": _INT32,                # every document's term ids by position
    "context_ids": _INT32,
    "context_sizes": _INT64,
    "context": _INT32,                # every context's distinct term ids
    "len_content": _FLOAT64,          # by doc id slot, up to the largest doc id
    "len_context": _FLOAT64,
}


class _Postings:
    """One term's documents and packed term frequencies (int32 arrays: 8 bytes a
    posting), as a write changes them; a search reads them as numpy arrays
    (:meth:`_PostingsTable.filled`)."""

    __slots__ = ("docs", "tfs")

    def __init__(self) -> None:
        self.docs = array("i")
        self.tfs = array("i")


_Filled = tuple[_I32, _F32, _F32, _I32, _I32]
"""A term's postings as a search reads them: the docs, their content and context
term frequencies as float32 (whole numbers below 2**16, exact: the scores are
computed in float64 as before), then the docs that hold the term in their content
and those that hold it in their context only."""

FILLED_MAX_BYTES: Final = 32 << 20
"""The most an index keeps of its terms' postings as numpy arrays between searches
(``_PostingsTable.filled``: 12 bytes a posting, 8 for a restored term whose docs are a
view of its sidecar, besides its split), the least recently read going first. They
were kept for every term read until it changed: at 300,000 memories 300 hybrid
searches kept 47 MB, the restored terms' postings copied into arrays besides. Two
searches side by side may lose a count (an addition): it starts again whenever
nothing is kept."""


def _fill(docs: _I32, packed: _I32) -> _Filled:
    """:data:`_Filled` of a term's ``docs`` and packed frequencies (``docs`` is kept)."""
    if not len(docs):
        empty = np.zeros(0, dtype=np.float32)
        none = np.zeros(0, dtype=np.int32)
        return none, empty, empty, none, none
    tf_content = (packed & _TF_MAX).astype(np.float32)
    in_content = tf_content > 0
    split = (docs, docs[:0]) if in_content.all() else (docs[in_content], docs[~in_content])
    return docs, tf_content, (packed >> 16).astype(np.float32), *split


_NO_POSTINGS: Final = memoryview(b"").cast("i")
"""The empty base of a new index's postings (read only, like every base)."""


class _PostingsTable:
    """Every term's postings, by term id. The terms read from a sidecar stay
    slices of its two posting arrays until first touched, so a load makes no
    per-term objects."""

    __slots__ = ("_base_docs", "_base_tfs", "_bounds", "_filled", "_filled_bytes", "_items")

    def __init__(self, docs: bytes = b"", tfs: bytes = b"", bounds: Sequence[int] = (0,)) -> None:
        self._filled: OrderedDict[int, tuple[_Filled, int]] = OrderedDict()  # least recently read first
        self._filled_bytes = 0
        # a new index (every live scope's, from its first memory) shares the empty views
        self._base_docs = memoryview(docs).cast("i") if docs else _NO_POSTINGS
        self._base_tfs = memoryview(tfs).cast("i") if tfs else _NO_POSTINGS
        # term i: [bounds[i], bounds[i + 1]); an array('q') when loaded (8 bytes a term, not 40)
        self._bounds = bounds
        self._items: list[_Postings | None] = [None] * (len(self._bounds) - 1)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, term_id: int) -> _Postings:
        postings = self._items[term_id]
        if postings is None:
            lo, hi = self._bounds[term_id], self._bounds[term_id + 1]
            postings = _Postings()
            postings.docs.frombytes(self._base_docs[lo:hi].cast("B"))
            postings.tfs.frombytes(self._base_tfs[lo:hi].cast("B"))
            self._items[term_id] = postings
        return postings

    def append(self, postings: _Postings) -> None:
        self._items.append(postings)

    def count(self, term_id: int) -> int:
        """The term's postings (a restored term's read off its bounds)."""
        postings = self._items[term_id]
        return self._bounds[term_id + 1] - self._bounds[term_id] if postings is None else len(postings.docs)

    def filled(self, term_id: int) -> _Filled:
        """The term's postings as numpy arrays (:data:`_Filled`), kept until the term
        changes (:meth:`changed`) or ``FILLED_MAX_BYTES`` of others are read after it. A
        restored term's are read off the sidecar's slices (its docs a view of them:
        reading a term makes no :class:`_Postings`). Searches side by side share them
        (each change is one call on the ordered dict)."""
        kept = self._filled
        found = kept.get(term_id)
        if found is not None:
            try:
                kept.move_to_end(term_id)
            except KeyError:  # (let go meanwhile by a search beside this one)
                pass
            return found[0]
        postings = self._items[term_id]
        if postings is None:
            lo, hi = self._bounds[term_id], self._bounds[term_id + 1]
            made = _fill(np.frombuffer(self._base_docs[lo:hi], dtype=np.int32),
                         np.frombuffer(self._base_tfs[lo:hi], dtype=np.int32))
            size = 8 * (hi - lo)
        else:  # (copies: a term's arrays grow in place, which a view would forbid)
            made = _fill(np.array(postings.docs, dtype=np.int32), np.array(postings.tfs, dtype=np.int32))
            size = 12 * len(postings.docs)
        if kept.setdefault(term_id, (made, size))[0] is not made:  # a search beside this one kept its own
            return made
        self._filled_bytes += size
        while self._filled_bytes > FILLED_MAX_BYTES and kept:
            try:
                _, (_, dropped) = kept.popitem(last=False)
            except KeyError:
                break
            self._filled_bytes -= dropped
        if not kept:
            self._filled_bytes = 0
        return made

    def changed(self, term_id: int) -> None:
        """The term's postings changed: what :meth:`filled` kept of them goes."""
        found = self._filled.pop(term_id, None)
        if found is not None:
            self._filled_bytes -= found[1]

    def columns(self, *, lend: bool = False) -> tuple[_I64, _I32 | Pieces, _I32 | Pieces]:
        """Postings per term, then every term's doc ids and packed term frequencies,
        term after term (int32): one copy of them, or with ``lend`` the postings' own
        buffers (for a snapshot of an index nothing changes any more: an array('i')
        lent cannot grow), large ones lent, small ones copied together (:func:`lent`)."""
        counts = np.fromiter(map(self.count, range(len(self._items))), dtype=np.int64, count=len(self._items))
        if lend:
            return (counts, Pieces(np.dtype(np.int32), lent(self._buffers("docs"))),
                    Pieces(np.dtype(np.int32), lent(self._buffers("tfs"))))
        return (counts, np.frombuffer(b"".join(self._buffers("docs")), dtype=np.int32),
                np.frombuffer(b"".join(self._buffers("tfs")), dtype=np.int32))

    def _buffers(self, field: str) -> Iterator[memoryview | array[int]]:
        """Every term's ``field`` (docs or tfs) in term order: the restored terms not
        changed since, a run of them at a time (one slice of the base)."""
        base, bounds = (self._base_docs if field == "docs" else self._base_tfs), self._bounds
        start: int | None = None
        for term_id, postings in enumerate(self._items):
            if postings is None:
                if start is None:
                    start = bounds[term_id]
                continue
            if start is not None:
                yield base[start : bounds[term_id]]
                start = None
            yield postings.docs if field == "docs" else postings.tfs
        if start is not None:  # (only restored terms have no postings: they end where the base does)
            yield base[start : bounds[len(bounds) - 1]]


TERM_SCORES_MIN_DF: Final = 128
"""Postings from which a term's BM25 contributions are kept between searches (below,
computing them costs little more than reading them back)."""

TERM_SCORES_MAX_BYTES: Final = 1 << 20
"""The least of what an index may keep of its terms' contributions (8 bytes a
posting): a 10,000-memory scope's frequent terms fit several times."""

TERM_SCORES_BYTES_PER_DOC: Final = 32
"""What an index may keep of its terms' contributions per document, above
``TERM_SCORES_MAX_BYTES``: 4 postings a document. A hybrid search of a scope of
1,000,000 (LoCoMo-like turns, its query expanded by the names of the entities it
names) reads about 900,000 postings; with 1 MiB kept, none of its frequent terms'
fitted, and computing their contributions again was 17 of its 77 ms (mean); with 32
MB kept, 1-2 ms."""


def term_scores_budget(n_docs: int) -> int:
    """The bytes of term contributions an index of ``n_docs`` documents may keep."""
    return max(TERM_SCORES_MAX_BYTES, TERM_SCORES_BYTES_PER_DOC * n_docs)


class _TermScores:
    """Each frequent term's BM25 contribution per posting (``idf (k1 + 1) tf / (k1 +
    tf)``, aligned with its postings), kept while the index's lengths do not change (a
    key made from them) and the term's postings are the same arrays. Bounded by
    :func:`term_scores_budget`: a term that would pass it starts the kept ones afresh.
    Searches running side by side (threads) share it: each change is one replacement
    of a dict entry or of the dict, never an iteration."""

    __slots__ = ("_entries", "_key", "nbytes")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[object, object, _F64]] = {}  # term id -> (key, postings, scores)
        self._key: object = None
        self.nbytes = 0

    def get(self, key: object, term_id: int, postings: object) -> _F64 | None:
        """The contributions kept for ``term_id`` under ``key`` (the lengths' key) for
        these ``postings`` (the arrays they were computed from), or None."""
        found = self._entries.get(term_id)
        if found is None or found[1] is not postings or found[0] != key:
            return None
        return found[2]

    def put(self, key: object, term_id: int, postings: object, scores: _F64, budget: int) -> None:
        """Keep ``scores`` (read-only from now on) as ``term_id``'s under ``key``, within
        ``budget`` bytes."""
        if scores.nbytes > budget:
            return
        scores.flags.writeable = False
        entries = self._entries
        if key != self._key or self.nbytes + scores.nbytes > budget:
            entries = self._entries = {}  # kept under other lengths, or full: afresh
            self._key, self.nbytes = key, 0
        replaced = entries.get(term_id)  # (of postings read again since: FILLED_MAX_BYTES)
        entries[term_id] = (key, postings, scores)
        self.nbytes += scores.nbytes - (replaced[2].nbytes if replaced is not None else 0)


def _idf(n_docs: int, df: int) -> float:
    """BM25's inverse document frequency, the variant that is never negative."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def _content_sequence(ids: list[int], positions: list[int]) -> bytes:
    """A document's content as stored: the term id at each position of its word
    stream, -1 where a stop word stood (int32, native order)."""
    size = positions[-1] + 1 if positions else 0
    if size == len(ids):  # no stop word before the last term
        return array("i", ids).tobytes()
    sequence = array("i", [-1]) * size
    for term_id, position in zip(ids, positions, strict=True):
        sequence[position] = term_id
    return sequence.tobytes()


def _content_sequences(content_ids: list[list[int]], sizes: list[int],
                       positions: list[list[int]]) -> list[bytes]:
    """``_content_sequence`` of each of many documents, the same bytes: the terms of
    all placed in one array at once, which is then cut document by document (most
    contents hold a stop word, and placing their terms one loop step each cost
    about as much as the rest of their full-text indexing)."""
    lengths = np.array([found[-1] + 1 if found else 0 for found in positions], dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    count = sum(sizes)
    at = np.fromiter(itertools.chain.from_iterable(positions), dtype=np.int64, count=count)
    at += np.repeat(starts, sizes)
    flat = np.full(int(ends[-1]) if len(ends) else 0, -1, dtype=np.int32)
    flat[at] = np.fromiter(itertools.chain.from_iterable(content_ids), dtype=np.int32, count=count)
    data = flat.tobytes()
    return [data[4 * start : 4 * end] for start, end in zip(starts.tolist(), ends.tolist(), strict=True)]


class BM25Index(SidecarIndex):
    """Okapi BM25 (BM25F over content and an optional context field) with
    positional content postings so quoted phrases are honoured.

    ``search`` is vectorised: per query term one gather and a few array
    operations over that term's postings; phrase checks touch only the documents
    that hold every phrase word."""

    sidecar_magic = _MAGIC
    sidecar_name = "BM25"
    sidecar_arrays = _SIDECAR_ARRAYS

    def __init__(self, k1: float = 1.5, b: float = 0.75, tokenizer: Tokenizer | None = None,
                 context_weight: float = 0.5) -> None:
        if not (math.isfinite(k1) and k1 >= 0):
            raise InvalidInput(f"k1 is {k1}; it must be a finite number >= 0", field="k1")
        if not (math.isfinite(b) and 0 <= b <= 1):
            raise InvalidInput(f"b is {b}; it must be in 0..1", field="b")
        if not (math.isfinite(context_weight) and context_weight >= 0):
            raise InvalidInput(f"context_weight is {context_weight}; it must be >= 0",
                               field="context_weight")
        self.k1 = float(k1)
        self.b = float(b)
        self.context_weight = float(context_weight)
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        self._vocab: dict[str, int] = {}
        self._postings = _PostingsTable()
        # by doc: its content's term ids by position (-1 for stop words), its context's
        # distinct term ids; int32 runs, packed (a dict of bytes cost 100 bytes a doc more)
        self._content = Runs()
        self._context = Runs()
        self._capacity = 0
        self._len_content = np.zeros(0, dtype=np.float64)
        self._len_context = np.zeros(0, dtype=np.float64)
        self._total_content = 0
        self._total_context = 0
        self._changes = 0
        """Counts every change of the lengths (the cached norms below depend on them)."""
        self._norms: tuple[tuple[float, ...], _F64, _F64 | None] | None = None
        """(key, content norms, context norms): BM25's length normalisation of every doc
        slot, kept between searches while the index does not change."""
        self._term_scores = _TermScores()
        """The frequent terms' contributions, kept between searches (see _TermScores)."""

    # -- reading ---------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._content)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._content

    def doc_ids(self) -> list[int]:
        """Every indexed doc id, ascending."""
        return sorted(self._content)

    def document_frequency(self, term: str) -> int:
        """How many documents' content or context holds *term* (a token as the
        tokenizer makes it). O(1)."""
        term_id = self._vocab.get(term)
        return 0 if term_id is None else self._postings.count(term_id)

    def idf(self, term: str) -> float:
        """The inverse document frequency this index scores *term* with (a term no
        document holds gets that of document frequency 0)."""
        return _idf(len(self._content), self.document_frequency(term))

    @property
    def changes(self) -> int:
        """A count that grows with every change of the index: scores computed at one
        count hold until it moves."""
        return self._changes

    @property
    def kept_bytes(self) -> int:
        """Bytes of term contributions kept between searches (at most
        :func:`term_scores_budget`; none once the index changes)."""
        return self._term_scores.nbytes

    def _changed(self) -> None:
        """The index changed: its lengths' key moves on, and the kept term contributions
        (and the postings they hold) are let go now, not at the next search's first
        keep."""
        self._changes += 1
        if self._term_scores.nbytes:
            self._term_scores = _TermScores()

    @property
    def vocabulary_size(self) -> int:
        return len(self._vocab)

    # -- changing --------------------------------------------------------------------
    def add(self, doc_id: int, text: str, context_text: str | None = None) -> None:
        """Index *text* (the content) and optional *context_text* (extra ranking
        text, weighted by ``context_weight``) as document *doc_id*."""
        self.add_many([(doc_id, text, context_text)])

    def add_many(self, items: Sequence[tuple[int, str, str | None]],
                 analysed: Mapping[str, tuple[list[str], list[int]]] | None = None) -> None:
        """Index many ``(doc_id, text, context_text)`` documents, as :meth:`add` does
        each, in one pass: the batch's postings are counted and grouped by term with
        array operations, so each term is touched once per batch. New terms are
        numbered in order of first use in the contents, document after document, and
        then in the contexts. Nothing changes when any of them is invalid.
        ``analysed``: texts whose ``tokenizer.positioned`` the caller has already
        (by this index's tokenizer, or one of equal ``signature``)."""
        items = list(items)
        docs: list[int] = []
        for item in items:
            try:
                doc_id, text, context_text = item
            except (TypeError, ValueError):
                raise InvalidInput(f"each item is (doc_id, text, context_text), got {item!r:.80}",
                                   field="items") from None
            doc = check_doc_id(doc_id)
            if not isinstance(text, str):
                raise InvalidInput(f"text must be a str, got {type(text).__name__}", field="text")
            if context_text is not None and not isinstance(context_text, str):
                raise InvalidInput(f"context_text must be a str or None, got {type(context_text).__name__}",
                                   field="context_text")
            if doc in self._content:
                raise InvalidInput(f"doc {doc} is already in the BM25 index; use update", field="doc_id")
            docs.append(doc)
        if len(set(docs)) != len(docs):
            raise InvalidInput("a doc id repeats in one batch", field="doc_ids")
        if not docs:
            return
        tokenizer = self.tokenizer
        if analysed:
            contents = [analysed.get(text) or tokenizer.positioned(text) for _, text, _ in items]
        else:
            contents = [tokenizer.positioned(text) for _, text, _ in items]
        content_ids = [self._term_ids(terms) for terms, _ in contents]
        context_ids = [self._term_ids(tokenizer.tokens(context_text)) if context_text else []
                       for _, _, context_text in items]

        self._ensure_capacity(max(docs) + 1)
        content_sizes = [len(ids) for ids in content_ids]
        if len(docs) <= _FEW_DOCS:
            for doc, (_, positions), ids in zip(docs, contents, content_ids, strict=True):
                self._content[doc] = _content_sequence(ids, positions)
        else:
            sequences = _content_sequences(content_ids, content_sizes, [found for _, found in contents])
            self._content.update(zip(docs, sequences, strict=True))
        for doc, context in zip(docs, context_ids, strict=True):
            if context:
                self._context[doc] = array("i", sorted(set(context))).tobytes()
        context_sizes = [len(ids) for ids in context_ids]
        len_content, len_context = self._len_content, self._len_context
        for doc, content_size, context_size in zip(docs, content_sizes, context_sizes, strict=True):
            len_content[doc] = content_size  # (scalar stores: most batches are one document)
            len_context[doc] = context_size
        self._total_content += sum(content_sizes)
        self._total_context += sum(context_sizes)
        self._changed()

        # Term frequencies packed in one int32: content in the low 16 bits, context above.
        if len(docs) <= _FEW_DOCS:
            self._append_postings(docs, content_ids, context_ids)
        else:
            self._append_grouped_postings(docs, content_ids, content_sizes, context_ids, context_sizes)

    def _append_postings(self, docs: list[int], content_ids: list[list[int]],
                         context_ids: list[list[int]]) -> None:
        """The postings of a few documents, one after the other (array calls cost
        more than they save below a handful of documents)."""
        all_postings = self._postings
        for doc, content, context in zip(docs, content_ids, context_ids, strict=True):
            packed: dict[int, int] = {}
            for term_id in content:
                packed[term_id] = packed.get(term_id, 0) + 1
            for term_id in context:
                packed[term_id] = packed.get(term_id, 0) + _CONTEXT_UNIT
            if len(content) > _TF_MAX or len(context) > _CONTEXT_TF_MAX:  # clamp each part
                tf_content, tf_context = Counter(content), Counter(context)
                packed = {term_id: min(tf_content[term_id], _TF_MAX)
                          + min(tf_context[term_id], _CONTEXT_TF_MAX) * _CONTEXT_UNIT for term_id in packed}
            for term_id, tfs in packed.items():
                postings = all_postings[term_id]
                postings.docs.append(doc)
                postings.tfs.append(tfs)
                all_postings.changed(term_id)

    def _append_grouped_postings(self, docs: list[int], content_ids: list[list[int]],
                                 content_sizes: list[int], context_ids: list[list[int]],
                                 context_sizes: list[int]) -> None:
        """The postings of many documents: counted and grouped by term with array
        operations, then appended term by term."""
        doc_column = np.array(docs, dtype=np.int64)
        keys: list[_I64] = []
        packed: list[_I64] = []
        fields: tuple[tuple[list[list[int]], list[int], int, int], ...] = (
            (content_ids, content_sizes, _TF_MAX, 1),
            (context_ids, context_sizes, _CONTEXT_TF_MAX, _CONTEXT_UNIT))
        for field_ids, sizes, limit, unit in fields:
            terms = np.fromiter(itertools.chain.from_iterable(field_ids), dtype=np.int64, count=sum(sizes))
            pairs, counts = np.unique((terms << 32) | np.repeat(doc_column, sizes), return_counts=True)
            keys.append(pairs)
            packed.append(np.minimum(counts, limit) * unit)
        pairs, where = np.unique(np.concatenate(keys), return_inverse=True)
        if not len(pairs):
            return
        tfs = np.bincount(where, weights=np.concatenate(packed), minlength=len(pairs)).astype(np.int32)
        term_of = pairs >> 32
        posting_docs = memoryview((pairs & 0xFFFFFFFF).astype(np.int32).tobytes())
        posting_tfs = memoryview(tfs.tobytes())
        bounds = np.flatnonzero(np.diff(term_of)) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(pairs)]
        all_postings = self._postings
        for term_id, lo, hi in zip(term_of[starts].tolist(), starts, ends, strict=True):
            postings = all_postings[term_id]
            postings.docs.frombytes(posting_docs[4 * lo : 4 * hi])
            postings.tfs.frombytes(posting_tfs[4 * lo : 4 * hi])
            all_postings.changed(term_id)

    def remove(self, doc_id: int) -> None:
        """Forget document *doc_id*; NotFound when it is not indexed."""
        sequence = self._content.pop(doc_id, None)
        if sequence is None:
            raise missing(doc_id, "BM25 index")
        context = self._context.pop(doc_id, None)
        term_ids = {t for t in array("i", sequence) if t >= 0}
        if context is not None:
            term_ids.update(array("i", context))
        for term_id in term_ids:
            postings = self._postings[term_id]
            at = postings.docs.index(doc_id)
            # Swap-remove: posting order carries no meaning.
            postings.docs[at] = postings.docs[-1]
            postings.tfs[at] = postings.tfs[-1]
            postings.docs.pop()
            postings.tfs.pop()
            self._postings.changed(term_id)
        self._total_content -= int(self._len_content[doc_id])
        self._total_context -= int(self._len_context[doc_id])
        self._len_content[doc_id] = 0
        self._len_context[doc_id] = 0
        self._changed()

    def update(self, doc_id: int, text: str, context_text: str | None = None) -> None:
        """Replace document *doc_id* (remove, then add)."""
        if doc_id not in self._content:
            raise missing(doc_id, "BM25 index")
        if not isinstance(text, str) or (context_text is not None and not isinstance(context_text, str)):
            raise InvalidInput("text and context_text must be str", field="text")
        self.remove(doc_id)
        self.add(doc_id, text, context_text)

    # -- searching -------------------------------------------------------------------
    def search(self, query: str | ParsedQuery, top_k: int = 10,
               allowed: Allowed = None) -> list[tuple[int, float]]:
        """The top_k documents by BM25 score for *query* (text, or a query parsed
        with this index's tokenizer), best first, equal scores by lower id. Every
        quoted phrase must occur in a returned document's content."""
        top_k = check_top_k(top_k)
        parsed = self.tokenizer.parse_query(query) if isinstance(query, str) else query
        scores = self.score_all(parsed, allowed)
        if scores is None:
            return []
        candidates = positive_slots(scores, top_k)
        return top_k_by_score(candidates, scores[candidates], top_k)

    def score_all(self, query: str | ParsedQuery, allowed: Allowed = None) -> _F64 | None:
        """BM25 score of every doc id slot for *query* (0 where it does not match,
        including slots with no document), or None when nothing can match. The array
        is the caller's own, made by this call (as ``scored``'s and ``context_only``'s
        scores): a ranking scales and adds to it in place."""
        parsed = self.tokenizer.parse_query(query) if isinstance(query, str) else query
        found = self._scored(parsed, allowed, None)
        return None if found is None else found[0]

    def scored(self, query: str | ParsedQuery, allowed: Allowed = None) -> Scored | None:
        """:meth:`score_all` and :meth:`content_matches` in one pass over the query
        terms' postings, with the docs that hold a term in their context only (see
        :class:`Scored`); None when nothing can match (as ``score_all``)."""
        parsed = self.tokenizer.parse_query(query) if isinstance(query, str) else query
        context: list[_I32] = []
        found = self._scored(parsed, allowed, context)
        if found is None:
            return None
        scores, counts = found
        context_docs = np.concatenate(context).astype(np.int64) if context else np.zeros(0, dtype=np.int64)
        assert counts is not None
        return Scored(scores, counts, context_docs)

    def context_only(self, query: str | ParsedQuery) -> tuple[_F64, _I64] | None:
        """:meth:`score_all`'s scores (unfiltered), and the doc slots that hold the
        query's terms in their context alone (none in their content; distinct, in no
        particular order); None when nothing can match. The content match counts
        :meth:`scored` gives, a pass over every slot, are counted only when a term is
        held in some doc's context only."""
        parsed = self.tokenizer.parse_query(query) if isinstance(query, str) else query
        context: list[_I32] = []
        found = self._scored(parsed, None, context, counts=False)
        if found is None:
            return None
        scores, counts = found
        if not context:
            return scores, np.zeros(0, dtype=np.int64)
        assert counts is not None
        docs = np.unique(np.concatenate(context)).astype(np.int64)
        return scores, Scored(scores, counts, docs).context_alone()

    def _scored(self, parsed: ParsedQuery, allowed: Allowed,
                context: list[_I32] | None, *, counts: bool = True,
                ) -> tuple[_F64, npt.NDArray[np.int32] | None] | None:
        """score_all's scores; with ``context`` (a list for the context-only docs),
        also the content match counts by doc slot, filled as :meth:`scored` says
        (without ``counts``, only when a term is held in some doc's context only).

        Every query term's postings are scored in one pass: their contributions
        (the frequent terms' kept between searches, see _TermScores), term after term,
        summed per doc by one ``bincount``, which adds them in that order from 0 (what
        adding each term's into an array of zeros gave)."""
        term_ids = sorted({self._vocab[t] for t in parsed.all_terms if t in self._vocab})
        n_docs = len(self._content)
        if not term_ids or n_docs == 0:
            return None
        if any(t not in self._vocab for phrase in parsed.phrases for t in phrase.tokens):
            return None
        k1, b, weight = self.k1, self.b, self.context_weight
        inv_avg_content = n_docs / self._total_content if self._total_content else 0.0
        n_with_context = len(self._context)
        use_context = weight > 0 and self._total_context > 0
        inv_avg_context = n_with_context / self._total_context if use_context else 0.0
        key = (self._changes, k1, b, weight, inv_avg_content, inv_avg_context)
        if self._norms is None or self._norms[0] != key:
            self._norms = (key, 1.0 - b + b * inv_avg_content * self._len_content,
                           1.0 - b + b * inv_avg_context * self._len_context if use_context else None)
        _, content_norms, context_norms = self._norms
        capacity = self._capacity
        kept = self._term_scores
        # per term with postings: (term id, its arrays, its contributions if kept)
        terms: list[tuple[int, _Filled, _F64 | None]] = []
        for term_id in term_ids:
            filled = self._postings.filled(term_id)
            if len(filled[0]):
                terms.append((term_id, filled, kept.get(key, term_id, filled)
                              if len(filled[0]) >= TERM_SCORES_MIN_DF else None))
        matches: npt.NDArray[np.int32] | None = None
        if not terms:
            scores = np.zeros(capacity, dtype=np.float64)
            if context is not None and counts:
                matches = np.zeros(capacity, dtype=np.int32)
        else:
            fresh = [(term_id, filled) for term_id, filled, found in terms if found is None]
            computed = self._contributions(fresh, key, n_docs, content_norms, context_norms) if fresh \
                else {}
            parts = [found if found is not None else computed[term_id] for term_id, _, found in terms]
            if len(terms) == 1:
                every_doc, every_part = terms[0][1][0], parts[0]
            else:
                every_doc = np.concatenate([filled[0] for _, filled, _ in terms])
                every_part = np.concatenate(parts)
            # summed per doc in term order from 0, as adding each term's into zeros did
            summed = np.bincount(every_doc, every_part, minlength=capacity)
            scores = summed.astype(np.float64, copy=False)
            if context is not None:
                context.extend(filled[4] for _, filled, _ in terms if len(filled[4]))
                if counts or context:
                    held = [filled[3] for _, filled, _ in terms]
                    matches = np.bincount(held[0] if len(held) == 1 else np.concatenate(held),
                                          minlength=capacity).astype(np.int32)
        mask = allowed_mask(allowed, capacity)
        if mask is not None:
            scores[~mask] = 0.0
        for phrase in parsed.phrases:
            holders = self._phrase_holders(phrase)
            keep = np.zeros(capacity, dtype=np.bool_)
            keep[holders] = True
            scores[~keep] = 0.0
        return scores, matches

    def _contributions(self, fresh: list[tuple[int, _Filled]], key: object,
                       n_docs: int, content_norms: _F64, context_norms: _F64 | None) -> dict[int, _F64]:
        """The BM25 contribution of each posting of the ``fresh`` terms (term id, its
        postings' arrays), by term id, in one pass (elementwise, as for each term
        alone); a frequent term's are kept under ``key`` (see _TermScores)."""
        k1, weight = self.k1, self.context_weight
        sizes = [len(filled[0]) for _, filled in fresh]
        # idf(t) (k1 + 1) per posting, as the scalar each term's postings were scaled by
        factors = [_idf(n_docs, size) * (k1 + 1.0) for size in sizes]
        if len(fresh) == 1:
            docs, tf_content, tf_context = fresh[0][1][:3]
            factor: float | _F64 = factors[0]
        else:
            docs = np.concatenate([filled[0] for _, filled in fresh])
            tf_content = np.concatenate([filled[1] for _, filled in fresh])
            tf_context = np.concatenate([filled[2] for _, filled in fresh])
            factor = np.repeat(factors, sizes)
        tf = tf_content / content_norms[docs]  # float64 (the norms')
        if context_norms is not None:
            tf += np.multiply(tf_context, weight, dtype=np.float64) / context_norms[docs]
        contributions = factor * tf / (k1 + tf)
        computed: dict[int, _F64] = {}
        at = 0
        for (term_id, filled), size in zip(fresh, sizes, strict=True):
            part = contributions[at:at + size]
            at += size
            if size >= TERM_SCORES_MIN_DF:
                part = part.copy()
                self._term_scores.put(key, term_id, filled, part, term_scores_budget(n_docs))
            computed[term_id] = part
        return computed

    def content_matches(self, query: str | ParsedQuery) -> npt.NDArray[np.int32]:
        """For every doc id slot, how many distinct terms of *query* its content (not
        its context) holds: a doc that :meth:`score_all` scores through its context
        alone has 0 here. One pass over the query terms' postings."""
        parsed = self.tokenizer.parse_query(query) if isinstance(query, str) else query
        counts = np.zeros(self._capacity, dtype=np.int32)
        for term_id in sorted({self._vocab[t] for t in parsed.all_terms if t in self._vocab}):
            counts[self._postings.filled(term_id)[3]] += 1
        return counts

    def phrase_docs(self, phrase: Phrase) -> list[int]:
        """Doc ids whose content holds *phrase* (tokenized by this index's tokenizer)."""
        if any(t not in self._vocab for t in phrase.tokens):
            return []
        return sorted(int(d) for d in self._phrase_holders(phrase))

    # -- persistence -----------------------------------------------------------------
    def to_sidecar(self) -> bytes:
        """The whole index as one blob for :meth:`from_sidecar`: the settings it was
        built with, the doc count and ids checksum, then the raw arrays. Costs a
        copy of the postings and sequences, no per-posting work; call it where the
        index is not changing."""
        return b"".join(self.to_sidecar_chunks())

    def to_sidecar_chunks(self, *, lend: bool = False) -> list[bytes | memoryview]:
        """:meth:`to_sidecar`'s blob as chunks, views of copies taken here (they stay
        valid while the index changes), never joined: a snapshot writes them. With
        ``lend``, views of the index's own buffers instead (no copy: for a snapshot
        of an index that does not change any more, a closing scope's)."""
        postings, content, context = self._postings, self._content, self._context
        doc_ids = content.doc_ids()
        used = int(doc_ids[-1]) + 1 if len(doc_ids) else 0    # removed slots hold zero lengths
        term_docs, posting_docs, posting_tfs = postings.columns(lend=lend)
        header = {
            "kind": "bm25",
            "docs": len(content),
            "ids_checksum": doc_ids_checksum(doc_ids),
            "params": self._settings(),
            "terms": len(postings),
            "capacity": self._capacity,
            "total_content": self._total_content,
            "total_context": self._total_context,
        }
        arrays: dict[str, npt.NDArray[Any] | Pieces] = {
            "vocab": np.frombuffer("\x00".join(self._vocab).encode(), dtype=np.uint8),
            "term_docs": term_docs,
            "posting_docs": posting_docs,
            "posting_tfs": posting_tfs,
            **_sequences("content", content, lend=lend),
            **_sequences("context", context, lend=lend),
            "len_content": self._len_content[:used] if lend else self._len_content[:used].copy(),
            "len_context": self._len_context[:used] if lend else self._len_context[:used].copy(),
        }
        return sidecar_chunks(_MAGIC, header, arrays)

    @classmethod
    def from_sidecar(cls, data: bytes | memoryview, k1: float = 1.5, b: float = 0.75,
                     tokenizer: Tokenizer | None = None, context_weight: float = 0.5) -> Self:
        """The index serialised in *data* by :meth:`to_sidecar`, with these settings
        (as for the constructor). CorruptData, naming what is wrong, when *data*
        is damaged, truncated, of another format version, or was built with other
        settings (then it is stale: rebuild the index from the records)."""
        index = cls(k1=k1, b=b, tokenizer=tokenizer, context_weight=context_weight)
        wanted = index._settings()

        def check(built: Any) -> None:
            if built == wanted:
                return
            if not isinstance(built, dict):
                raise corrupt("BM25", "its header has no params")
            differ = ", ".join(f"{name}={built.get(name)!r} (this index: {value!r})"
                               for name, value in wanted.items() if built.get(name) != value)
            raise CorruptData(f"BM25 sidecar is stale: it was built with {differ}; "
                              "rebuild the index from its records")

        load_sidecar(index, data, _MAGIC, "BM25", _SIDECAR_ARRAYS, check=check)
        return index


    # -- insides ---------------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        """What the stored state or its scores depend on, as a sidecar records it."""
        stops = "\n".join(sorted(self.tokenizer.stop_words)).encode()
        return {
            "k1": self.k1,
            "b": self.b,
            "context_weight": self.context_weight,
            "tokenizer": self.tokenizer.signature,
            "stop_words": hashlib.blake2b(stops, digest_size=8).hexdigest(),
        }

    def _load(self, sidecar: Sidecar) -> None:
        header, arrays, spans, data = sidecar.header, sidecar.arrays, sidecar.spans, sidecar.data
        capacity, n_docs = int(header["capacity"]), int(header["docs"])
        start, stop = spans["vocab"]
        terms = data[start:stop].decode("utf-8").split("\x00") if stop > start else []
        term_docs = arrays["term_docs"]
        posting_docs = arrays["posting_docs"]
        if len(terms) != int(header["terms"]) or len(term_docs) != len(terms):
            raise corrupt("BM25", f"{len(terms)} terms in the vocabulary, {len(term_docs)} posting counts")
        if int(term_docs.sum()) != len(posting_docs) or len(arrays["posting_tfs"]) != len(posting_docs):
            raise corrupt("BM25", "posting counts do not add up to the postings")
        for name in ("len_content", "len_context"):
            if len(arrays[name]) > capacity:
                raise corrupt("BM25", f"{name} holds {len(arrays[name])} slots for capacity {capacity}")
        for name in ("posting_docs", "content_ids", "context_ids"):
            ids = arrays[name]
            if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= capacity):
                raise corrupt("BM25", f"{name} holds a doc id outside 0..{capacity - 1}")
        vocab = dict(zip(terms, range(len(terms)), strict=True))
        if len(vocab) != len(terms):
            raise corrupt("BM25", "the vocabulary repeats a term")
        content = _unpack_sequences(sidecar, "content")
        context = _unpack_sequences(sidecar, "context")
        if len(content) != n_docs:
            raise corrupt("BM25", f"{len(content)} documents, the header says {n_docs}")

        (docs_at, docs_end), (tfs_at, tfs_end) = spans["posting_docs"], spans["posting_tfs"]
        bounds = np.concatenate(([0], np.cumsum(term_docs))).astype(np.int64)
        self._postings = _PostingsTable(data[docs_at:docs_end], data[tfs_at:tfs_end],
                                        array("q", bounds.tobytes()))
        self._vocab = vocab
        self._content = content
        self._context = context
        self._capacity = capacity
        self._len_content = np.zeros(capacity, dtype=np.float64)
        self._len_content[: len(arrays["len_content"])] = arrays["len_content"]
        self._len_context = np.zeros(capacity, dtype=np.float64)
        self._len_context[: len(arrays["len_context"])] = arrays["len_context"]
        self._total_content = int(header["total_content"])
        self._total_context = int(header["total_context"])
        self._changed()

    def _term_ids(self, terms: list[str]) -> list[int]:
        get = self._vocab.get
        ids = [get(term, -1) for term in terms]
        if -1 in ids:
            for at, term_id in enumerate(ids):
                if term_id < 0:
                    ids[at] = self._term_id(terms[at])
        return ids

    def _term_id(self, term: str) -> int:
        term_id = self._vocab.get(term)
        if term_id is None:
            term_id = len(self._postings)
            self._vocab[term] = term_id
            self._postings.append(_Postings())
        return term_id

    def _phrase_holders(self, phrase: Phrase) -> _I64:
        term_ids = [self._vocab[t] for t in phrase.tokens]
        # Documents holding every phrase word in their content, rarest word first.
        lists: list[_I64] = []
        for term_id in set(term_ids):
            lists.append(self._postings.filled(term_id)[3].astype(np.int64))
        lists.sort(key=len)
        candidates = np.sort(lists[0])
        for others in lists[1:]:
            candidates = candidates[np.isin(candidates, others, assume_unique=True)]
            if len(candidates) == 0:
                return candidates
        if len(term_ids) == 1:
            return candidates
        pattern_ids = array("i", [-1]) * (phrase.offsets[-1] + 1)
        for term_id, offset in zip(term_ids, phrase.offsets, strict=True):
            pattern_ids[offset] = term_id
        pattern = pattern_ids.tobytes()
        content = self._content
        held = [d for d in candidates.tolist() if _holds(content[d], pattern)]
        return np.array(held, dtype=np.int64)

    def _ensure_capacity(self, needed: int) -> None:
        if needed <= self._capacity:
            return
        capacity = max(_MIN_CAPACITY, needed, self._capacity * 2)
        for name in ("_len_content", "_len_context"):
            grown = np.zeros(capacity, dtype=np.float64)
            grown[: self._capacity] = getattr(self, name)
            setattr(self, name, grown)
        self._capacity = capacity
        self._changed()


def _sequences(name: str, by_doc: Runs, *, lend: bool = False) -> dict[str, npt.NDArray[Any] | Pieces]:
    """Int32 runs by doc id as sidecar arrays: ids, run sizes (in int32s), runs (with
    ``lend``: the runs' own buffer, lent)."""
    ids, sizes, data = by_doc.arrays(lend=lend)
    return {
        f"{name}_ids": ids.astype(np.int32),
        f"{name}_sizes": sizes // 4,
        name: (Pieces(np.dtype(np.int32), lent(data)) if isinstance(data, list)
               else np.frombuffer(data, dtype=np.int32)),
    }


def _unpack_sequences(sidecar: Sidecar, name: str) -> Runs:
    """The int32 runs by doc id written by :func:`_sequences`."""
    ids, sizes = sidecar.arrays[f"{name}_ids"], sidecar.arrays[f"{name}_sizes"]
    start, stop = sidecar.spans[name]
    if len(sizes) != len(ids) or int(sizes.sum()) * 4 != stop - start or (len(sizes) and sizes.min() < 0):
        raise corrupt("BM25", f"{name} sizes do not add up to its {stop - start} bytes")
    # (its ids were checked in 0..capacity - 1 by _load, which calls this)
    runs = Runs.from_arrays(ids, 4 * sizes.astype(np.int64), sidecar.data[start:stop])
    if len(runs) != len(ids):
        raise corrupt("BM25", f"{name} repeats a doc id")
    return runs


def _holds(sequence: bytes, pattern: bytes) -> bool:
    """Whether *pattern* occurs in *sequence* at a 4-byte boundary (both int32 runs)."""
    at = sequence.find(pattern)
    while at != -1:
        if at % 4 == 0:
            return True
        at = sequence.find(pattern, at + 1)
    return False
