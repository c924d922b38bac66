"""KeywordIndex: the classic matching, served from an inverted index.

A document matches a query when they share at least one word (see
:func:`~mnemex.index.tokenizer.words`: normalised word runs, nothing dropped; a
script written without spaces as character pairs, a document's single characters
indexed too so that a one-character query is found). Matches rank by the number
of distinct query words they contain, then by recency (the larger timestamp given
at ``add``), then by the lower doc id.

How it stays fast when a query word is in most documents: a word's postings
live in an int32 array while the word is rare and move to a dense bit set
over doc ids (a bit a doc, packed eight to a byte) once it is in more than 1/32
of the id space, so counting matches costs one unpacking and vectorised add per
common word plus a fancy-index add per rare one. The top k is then read level
by level (all docs matching every query word first): a level with few members
is sorted directly, a crowded one is read off a recency-ordered array of all
documents until k are found. The
recency order is kept up to date lazily, merged with the additions and
removals at the next search.

Persistence: :meth:`KeywordIndex.to_sidecar` writes the whole state as one
blob (every word's postings, dense or not, and the merged recency order as raw
arrays, see :mod:`mnemex.index._sidecar`); :meth:`KeywordIndex.from_sidecar`
reads it back with a few array operations and no tokenizing. A restored
document's words (needed only to remove it) are not rebuilt: the first such
removal regroups the postings by document.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, Literal, Self, cast, overload

import numpy as np
import numpy.typing as npt

from mnemex.errors import InvalidInput
from mnemex.index._select import (
    Allowed,
    allowed_mask,
    check_doc_id,
    check_finite,
    check_top_k,
    doc_slot,
    missing,
)
from mnemex.index._sidecar import (
    Pieces,
    Sidecar,
    SidecarIndex,
    TermsByDoc,
    corrupt,
    doc_ids_checksum,
    lent,
    sidecar_chunks,
)
from mnemex.index.tokenizer import words, words_scheme

__all__ = ["KeywordIndex"]

_U8 = npt.NDArray[np.uint8]
_I64 = npt.NDArray[np.int64]
_I32 = npt.NDArray[np.int32]

_MIN_CAPACITY = 16
_NO_ORDER: Final = np.zeros(0, dtype=np.int64)
_NO_ORDER.flags.writeable = False
_NO_ORDER_TS: Final = np.zeros(0, dtype=np.float64)
_NO_ORDER_TS.flags.writeable = False
_NO_GUARD: Final = contextlib.nullcontext()
_NO_LIVE: Final = np.zeros(0, dtype=np.bool_)
_NO_LIVE.flags.writeable = False

_MAGIC = b"MNXKWRD\x00"
_SIDECAR_ARRAYS: dict[str, np.dtype[Any]] = {
    "vocab": np.dtype(np.uint8),           # dense words then sparse ones, UTF-8, NUL-separated
    "dense_df": np.dtype(np.int64),        # documents per dense word
    "dense_bits": np.dtype(np.uint8),      # dense columns, bit-packed, one row per word
    "sparse_df": np.dtype(np.int64),       # postings per sparse word
    "sparse_postings": np.dtype(np.int32),  # their doc ids, word after word
    "doc_ids": np.dtype(np.int32),         # ascending
    "timestamps": np.dtype(np.float64),    # by doc_ids
    "order": np.dtype(np.int32),           # the recency order, merged
}


class KeywordIndex(SidecarIndex):
    """Inverted index for the classic word-overlap matching.

    ``search`` costs O(capacity / SIMD width) per common query word plus
    O(postings) per rare one; memory is one bit per (common word, doc id) and
    4 bytes per (rare word, document)."""

    sidecar_magic = _MAGIC
    sidecar_name = "keyword"
    sidecar_arrays = _SIDECAR_ARRAYS

    # Tuning (class attributes so tests can shrink them to reach every path):
    _dense_min = 256       # a word is never dense below this many documents
    _dense_share = 32      # and is dense once in more than 1/32 of the id space
    _few = 2048            # a match level this small is sorted directly

    def __init__(self, *, keep_words: bool = True, fold_accents: bool = False) -> None:
        # A doc's distinct words; none for a doc restored from a sidecar (or added with
        # keep_words off), whose words are read off the postings when it is removed
        # without its text (see _words_of_restored).
        self.keep_words = keep_words
        self.fold_accents = fold_accents
        """Fold accents in documents and queries alike (see the tokenizer)."""
        self._doc_words: dict[int, tuple[str, ...]] = {}
        # which doc ids are indexed (a byte a doc id: a dict of them cost 60 bytes a doc)
        self._live = _NO_LIVE
        self._count = 0
        self._restored: TermsByDoc | None = None
        self._capacity = 0
        self._timestamps = np.zeros(0, dtype=np.float64)
        # a word's postings: an int32 array('i') (4 bytes a posting: a list took 8 and
        # more), or, for a word restored from a sidecar and not changed since, a
        # read-only int32 slice of one array (made an array('i') when changed): an int
        # object per posting was most of what a large restored index held
        self._sparse: dict[str, array[int] | _I32] = {}
        # a common word's docs: a bit set over the id space, doc d at bit 7 - d % 8 of
        # byte d // 8 (np.packbits' order, the sidecar's): an eighth of a byte a doc
        self._dense: dict[str, _U8] = {}
        self._dense_df: dict[str, int] = {}
        # All live docs, least preferred first (timestamp ascending, then id descending).
        self._order = _NO_ORDER  # (replaced, never written: a new index shares the empty ones)
        self._order_ts = _NO_ORDER_TS
        # the docs added since the recency order was last merged, in an array('q') (8
        # bytes a doc: a dict of them held ~70 MB after ingesting 1,000,000 memories
        # with no search between); a doc removed since is left in it, and the merge
        # takes the live ones, each once
        self._pending_add = array("q")
        self._pending_remove: dict[int, None] = {}  # a set: an empty dict is a third of an empty set
        self.merge_guard: AbstractContextManager[Any] = _NO_GUARD
        """Held while a search merges the pending changes into the recency order: an
        owner whose searches run side by side in threads gives a lock (see _sync_order)."""

    # -- reading ---------------------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    def __contains__(self, doc_id: object) -> bool:
        at = doc_slot(doc_id)
        return at is not None and at < len(self._live) and bool(self._live[at])

    def doc_ids(self) -> list[int]:
        """Every indexed doc id, ascending."""
        ids: list[int] = np.flatnonzero(self._live).tolist()
        return ids

    def timestamp(self, doc_id: int) -> float:
        if doc_id not in self:
            raise missing(doc_id, "keyword index")
        return float(self._timestamps[doc_id])

    # -- changing --------------------------------------------------------------------
    def add(self, doc_id: int, text: str, timestamp: float) -> None:
        """Index *text* as document *doc_id*; *timestamp* (any finite float, larger
        is more recent) breaks ties between documents matching as many words."""
        self.add_many([doc_id], [text], [timestamp])

    def add_many(self, doc_ids: Sequence[int], texts: Sequence[str], timestamps: Sequence[float],
                 found: Mapping[str, list[str]] | None = None) -> None:
        """Index many documents, as :meth:`add` does each, in one pass: the batch's
        postings are grouped by word first, so each word is touched once per batch.
        Nothing changes when any of them is invalid. ``found``: texts whose words the
        caller has already (as ``words(text, unigrams=True, fold_accents=self.fold_accents)``
        gives them)."""
        doc_ids, texts, timestamps = list(doc_ids), list(texts), list(timestamps)
        if not len(doc_ids) == len(texts) == len(timestamps):
            raise InvalidInput(f"{len(doc_ids)} doc ids, {len(texts)} texts and {len(timestamps)} "
                               f"timestamps; they must pair up", field="doc_ids")
        docs = [check_doc_id(doc_id) for doc_id in doc_ids]
        stamps = [check_finite(ts, "timestamp") for ts in timestamps]
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInput(f"text must be a str, got {type(text).__name__}", field="text")
        if len(set(docs)) != len(docs):
            raise InvalidInput("a doc id repeats in one batch", field="doc_ids")
        for doc_id in docs:
            if doc_id in self:
                raise InvalidInput(f"doc {doc_id} is already in the keyword index; use update",
                                   field="doc_id")
        if not docs:
            return
        known = found if found is not None else {}
        texts_words = [known.get(text) or self._indexed_words(text) for text in texts]
        self._ensure_capacity(max(docs) + 1)
        for doc_id, ts in zip(docs, stamps, strict=True):
            self._timestamps[doc_id] = ts
        self._live[docs] = True
        self._count += len(docs)
        if self.keep_words:
            doc_words = self._doc_words
            for doc_id, text_words in zip(docs, texts_words, strict=True):
                doc_words[doc_id] = tuple(map(sys.intern, dict.fromkeys(text_words)))
        # each word's new docs, each once (a repeat of a word in a text finds its doc
        # last in the list: cheaper than making each text's words distinct first)
        by_word: dict[str, list[int]] = {}
        postings_of = by_word.get
        for doc_id, text_words in zip(docs, texts_words, strict=True):
            for word in text_words:
                postings = postings_of(word)
                if postings is None:
                    by_word[word] = [doc_id]
                elif postings[-1] != doc_id:
                    postings.append(doc_id)
        dense_at = max(self._dense_min, self._capacity // self._dense_share)
        dense, sparse = self._dense, self._sparse
        for word, new in by_word.items():
            column = dense.get(word)
            if column is not None:
                _set_bits(column, new)
                self._dense_df[word] += len(new)
                continue
            kept = sparse.get(word)
            if kept is None:
                sparse[word] = kept = array("i", new)
            else:
                if isinstance(kept, np.ndarray):
                    kept = sparse[word] = _int32s(kept)
                kept.extend(new)
            if len(kept) >= dense_at:
                self._promote(word)
        self._pending_add.extend(docs)

    def remove(self, doc_id: int, text: str | None = None) -> None:
        """Forget document *doc_id*; NotFound when it is not indexed. *text*, the
        text it was added with, saves reading its words off the postings when they
        were not kept (``keep_words=False``, or a doc restored from a sidecar)."""
        if doc_id not in self:
            raise missing(doc_id, "keyword index")
        doc_id = int(doc_id)
        kept = self._doc_words.pop(doc_id, None)
        if kept is not None:
            distinct: Iterable[str] = kept
        elif text is not None:
            distinct = dict.fromkeys(self._indexed_words(text))
        elif self.keep_words:
            distinct = self._words_of_restored(doc_id)
        else:
            raise InvalidInput(f"doc {doc_id}'s words are not kept (keep_words=False): remove it "
                               f"with the text it was added with", field="text")
        self._live[doc_id] = False
        self._count -= 1
        demote_below = max(self._dense_min, self._capacity // self._dense_share) // 4
        for word in distinct:
            column = self._dense.get(word)
            if column is not None:
                column[doc_id >> 3] &= ~(0x80 >> (doc_id & 7)) & 0xFF
                self._dense_df[word] -= 1
                if self._dense_df[word] < demote_below:
                    self._demote(word)
                continue
            postings = self._sparse[word]
            if len(postings) == 1:
                del self._sparse[word]
            else:
                if isinstance(postings, np.ndarray):
                    postings = self._sparse[word] = _int32s(postings)
                # Swap-remove: posting order carries no meaning.
                at = postings.index(doc_id)
                postings[at] = postings[-1]
                postings.pop()
        self._pending_remove[doc_id] = None

    def update(self, doc_id: int, text: str, timestamp: float) -> None:
        """Replace document *doc_id* (remove, then add)."""
        if doc_id not in self:
            raise missing(doc_id, "keyword index")
        check_finite(timestamp, "timestamp")
        if not isinstance(text, str):
            raise InvalidInput(f"text must be a str, got {type(text).__name__}", field="text")
        self.remove(doc_id)
        self.add(doc_id, text, timestamp)

    # -- searching -------------------------------------------------------------------
    def search(self, query: str, top_k: int = 10, allowed: Allowed = None) -> list[tuple[int, int]]:
        """Documents sharing a word with *query*, best first, as (doc_id, number of
        distinct query words matched). ``allowed`` filters inside the search."""
        top_k = check_top_k(top_k)
        query_words = sorted({w for w in words(query, fold_accents=self.fold_accents)
                              if w in self._dense or w in self._sparse})
        if not query_words or not self._count:
            return []
        dtype = np.uint8 if len(query_words) < 255 else np.uint16
        counts: npt.NDArray[np.unsignedinteger[Any]] = np.zeros(self._capacity, dtype=dtype)
        for word in query_words:
            column = self._dense.get(word)
            if column is not None:
                np.add(counts, np.unpackbits(column, count=self._capacity), out=counts)
            else:
                counts[self._postings_array(word)] += 1
        mask = allowed_mask(allowed, self._capacity)
        if mask is not None:
            counts[~mask] = 0
        self._sync_order()
        hits: list[tuple[int, int]] = []
        for level in range(int(counts.max()), 0, -1):
            at_level = counts == level
            size = int(np.count_nonzero(at_level))
            if size == 0:
                continue
            need = top_k - len(hits)
            if size <= self._few:
                ids = np.flatnonzero(at_level)
                if size > need:
                    ids = ids[np.lexsort((ids, -self._timestamps[ids]))[:need]]
                else:
                    ids = ids[np.lexsort((ids, -self._timestamps[ids]))]
            else:
                ids = self._most_recent_where(at_level, need, size)
            hits.extend((int(i), level) for i in ids)
            if len(hits) >= top_k:
                break
        return hits

    # -- persistence -----------------------------------------------------------------
    def to_sidecar(self) -> bytes:
        """The whole index as one blob for :meth:`from_sidecar`: the doc count and
        ids checksum, then the raw arrays. Merges the pending recency changes
        first (as a search would); call it where the index is not changing."""
        return b"".join(self.to_sidecar_chunks())

    def to_sidecar_chunks(self, *, lend: bool = False) -> list[bytes | memoryview]:
        """:meth:`to_sidecar`'s blob as chunks, views of copies taken here (they stay
        valid while the index changes), never joined: a snapshot writes them. With
        ``lend``, the words' docs are views of the index's own arrays instead (no
        copy: for a snapshot of an index that does not change any more, a closing
        scope's)."""
        self._sync_order()
        dense, sparse = self._dense, self._sparse
        doc_ids = np.flatnonzero(self._live)
        header = {
            "kind": "keyword",
            "docs": len(doc_ids),
            "ids_checksum": doc_ids_checksum(doc_ids),
            "params": {"words": words_scheme(self.fold_accents)},
            "dense_words": len(dense),
            "sparse_words": len(sparse),
            "capacity": self._capacity,
        }
        sparse_df, sparse_postings = self._sparse_postings(lend=lend)
        arrays: dict[str, npt.NDArray[Any] | Pieces] = {
            "vocab": np.frombuffer("\x00".join(itertools.chain(dense, sparse)).encode(), dtype=np.uint8),
            "dense_df": np.fromiter(self._dense_df.values(), dtype=np.int64, count=len(dense)),
            "dense_bits": (
                Pieces(np.dtype(np.uint8), lent(dense.values()), len(dense))
                if lend and dense else np.stack(list(dense.values())) if dense
                else np.zeros((0, _bytes_for(self._capacity)), np.uint8)),
            "sparse_df": sparse_df,
            "sparse_postings": sparse_postings,
            "doc_ids": doc_ids.astype(np.int32),
            "timestamps": self._timestamps[doc_ids],
            "order": self._order.astype(np.int32),  # a copy, whatever its type
        }
        return sidecar_chunks(_MAGIC, header, arrays)

    @classmethod
    def from_sidecar(cls, data: bytes | memoryview, *, fold_accents: bool = False) -> Self:
        """The index serialised in *data* by :meth:`to_sidecar`, for these settings (as
        for the constructor). CorruptData, naming what is wrong, when *data* is
        damaged, truncated, of another format version, or was built with another
        tokenization (then it is stale: rebuild the index from the records)."""
        return cls(fold_accents=fold_accents)._load_words_sidecar(data, words_scheme(fold_accents))

    # -- insides ---------------------------------------------------------------------
    def _indexed_words(self, text: str) -> list[str]:
        return words(text, unigrams=True, fold_accents=self.fold_accents)

    def _load(self, sidecar: Sidecar) -> None:
        header, arrays, data = sidecar.header, sidecar.arrays, sidecar.data
        capacity = int(header["capacity"])
        n_dense, n_sparse = int(header["dense_words"]), int(header["sparse_words"])
        start, stop = sidecar.spans["vocab"]
        vocab = list(map(sys.intern, data[start:stop].decode("utf-8").split("\x00"))) if stop > start else []
        dense_df, bits = arrays["dense_df"], arrays["dense_bits"]
        sparse_df, postings = arrays["sparse_df"], arrays["sparse_postings"]
        doc_ids, order = arrays["doc_ids"], arrays["order"]
        if not len(vocab) == n_dense + n_sparse or len(dense_df) != n_dense or len(sparse_df) != n_sparse:
            raise corrupt("keyword", f"{len(vocab)} words in the vocabulary for {n_dense} dense and "
                                     f"{n_sparse} sparse ones")
        if bits.shape != (n_dense, _bytes_for(capacity)):
            raise corrupt("keyword", f"dense bits of shape {bits.shape} for {n_dense} words, "
                                     f"{capacity} slots")
        if int(sparse_df.sum()) != len(postings) or (n_sparse and int(sparse_df.min()) < 0):
            raise corrupt("keyword", "posting counts do not add up to the postings")
        if not len(doc_ids) == len(order) == len(arrays["timestamps"]) == int(header["docs"]):
            raise corrupt("keyword", "doc ids, timestamps and recency order differ in length")
        for name in ("sparse_postings", "doc_ids", "order"):
            ids = arrays[name]
            if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= capacity):
                raise corrupt("keyword", f"{name} holds a doc id outside 0..{capacity - 1}")
        if np.any(np.diff(doc_ids) <= 0):
            raise corrupt("keyword", "doc ids are not ascending and distinct")

        columns = bits.copy()   # one block, each column a row of it: nothing of the sidecar is kept
        if capacity % 8:
            # the last byte's bits past the capacity are zero (a growth makes them doc ids)
            columns[:, -1] &= (0xFF << (8 - capacity % 8)) & 0xFF
        flat = postings.copy()  # (int32, as stored: nothing of the sidecar is kept)
        flat.flags.writeable = False
        bounds = np.concatenate(([0], np.cumsum(sparse_df))).tolist()
        timestamps = np.zeros(capacity, dtype=np.float64)
        timestamps[doc_ids] = arrays["timestamps"]
        self._capacity = capacity
        self._doc_words = {}
        self._live = np.zeros(capacity, dtype=np.bool_)
        self._live[doc_ids] = True
        self._count = len(doc_ids)
        self._timestamps = timestamps
        self._dense = dict(zip(vocab[:n_dense], columns, strict=True))
        self._dense_df = dict(zip(vocab[:n_dense], dense_df.tolist(), strict=True))
        self._sparse = dict(zip(vocab[n_dense:], [flat[lo:hi] for lo, hi in itertools.pairwise(bounds)],
                                strict=True))
        self._order = order.astype(np.int64)
        self._order_ts = timestamps[self._order]

    @overload
    def _sparse_postings(self, *, lend: Literal[False] = False) -> tuple[_I64, _I32]: ...
    @overload
    def _sparse_postings(self, *, lend: bool) -> tuple[_I64, _I32 | Pieces]: ...

    def _sparse_postings(self, *, lend: bool = False) -> tuple[_I64, _I32 | Pieces]:
        """Every sparse word's postings count and its postings, word after word: one
        copy of them, or with ``lend`` the words' own arrays (for a snapshot of an
        index nothing changes any more; small ones copied together, :func:`lent`)."""
        sparse = self._sparse
        counts = np.fromiter(map(len, sparse.values()), dtype=np.int64, count=len(sparse))
        if lend:
            return counts, Pieces(np.dtype(np.int32), lent(sparse.values()))
        # (one copy of every word's int32s, and no object a word: arrays and slices alike)
        runs = cast("Iterable[bytes]", sparse.values())  # (buffers: what bytes.join reads)
        return counts, np.frombuffer(b"".join(runs), dtype=np.int32)

    def _words_of_restored(self, doc_id: int) -> tuple[str, ...]:
        """The words of a document restored from a sidecar and not changed since,
        read off the postings (every word whose postings hold it)."""
        if self._restored is None:
            dense_docs = [self._dense_docs(column) for column in self._dense.values()]
            sparse_df, sparse_postings = self._sparse_postings()
            counts = np.concatenate([np.array([len(d) for d in dense_docs], dtype=np.int64), sparse_df])
            postings = np.concatenate([*dense_docs, sparse_postings])
            self._restored = TermsByDoc([*self._dense, *self._sparse], counts, postings)
        return self._restored.terms_of(doc_id)

    def _most_recent_where(self, member: npt.NDArray[np.bool_], need: int, size: int) -> _I64:
        # Walk the recency order from its newest end; with `size` members spread over
        # the order, about need * len / size entries are read before `need` are found.
        order = self._order
        end = len(order)
        chunk = max(64, 2 * need * max(1, end // size))
        found: list[_I64] = []
        got = 0
        while got < need and end > 0:
            start = max(0, end - chunk)
            segment = order[start:end][::-1]
            picked = segment[member[segment]]
            found.append(picked)
            got += len(picked)
            end = start
            chunk *= 2
        return np.concatenate(found)[:need]

    def _postings_array(self, word: str) -> _I32:
        """A sparse word's postings as an array: a restored word's own read-only slice,
        or a view of its array('i'), which the caller lets go at once (while a view
        lives, the array cannot grow)."""
        postings = self._sparse[word]
        if isinstance(postings, np.ndarray):
            return postings
        return np.frombuffer(postings, dtype=np.int32)

    def _dense_docs(self, column: _U8) -> _I64:
        """The docs of a dense word's bit set, ascending."""
        return np.flatnonzero(np.unpackbits(column, count=self._capacity))

    def _promote(self, word: str) -> None:
        postings = self._sparse.pop(word)
        column = np.zeros(_bytes_for(self._capacity), dtype=np.uint8)
        _set_bits(column, postings)
        self._dense[word] = column
        self._dense_df[word] = len(postings)

    def _demote(self, word: str) -> None:
        column = self._dense.pop(word)
        del self._dense_df[word]
        postings = self._dense_docs(column)
        if len(postings):
            self._sparse[word] = _int32s(postings)

    def _ensure_capacity(self, needed: int) -> None:
        if needed <= self._capacity:
            return
        capacity = max(_MIN_CAPACITY, needed, self._capacity * 2)
        grown = np.zeros(capacity, dtype=np.float64)
        grown[: self._capacity] = self._timestamps
        self._timestamps = grown
        live = np.zeros(capacity, dtype=np.bool_)
        live[: self._capacity] = self._live
        self._live = live
        for word, column in self._dense.items():
            wider = np.zeros(_bytes_for(capacity), dtype=np.uint8)
            wider[: len(column)] = column
            self._dense[word] = wider
        self._capacity = capacity

    def _sync_order(self) -> None:
        """Merge the pending additions and removals into the recency order. Searches
        side by side (beside a scope's actor, in threads) may all come here after a
        change: one merges, holding ``merge_guard``, and the others find nothing
        pending (merged twice, an addition would be in the order twice)."""
        if not self._pending_remove and not self._pending_add:
            return
        with self.merge_guard:
            self._sync_order_locked()

    def _sync_order_locked(self) -> None:
        # the pending changes are let go only once the order holds them: a search that
        # finds none pending reads an order that has them
        order, order_ts = self._order, self._order_ts
        removed = self._pending_remove
        if removed:
            gone = np.zeros(self._capacity, dtype=np.bool_)
            gone[np.fromiter(removed, dtype=np.int64, count=len(removed))] = True
            keep = ~gone[order]
            order, order_ts = order[keep], order_ts[keep]
        added = self._pending_add
        if added:
            new = np.unique(np.frombuffer(added, dtype=np.int64))  # (removed and added again: once)
            new = new[self._live[new]]
            if len(new):
                order, order_ts = self._merged(order, order_ts, new)
        self._order, self._order_ts = order, order_ts
        self._pending_remove, self._pending_add = {}, array("q")

    def _merged(self, order: _I64, order_ts: npt.NDArray[np.float64],
                new: _I64) -> tuple[_I64, npt.NDArray[np.float64]]:
        """The recency order (ids and their timestamps) with the docs ``new`` put in."""
        new_ts = self._timestamps[new]
        if len(new) > 64 + len(order) // 16:
            ids = np.concatenate([order, new])
            ts = self._timestamps[ids]
            by_recency = np.lexsort((-ids, ts))
            return ids[by_recency], ts[by_recency]
        by_recency = np.lexsort((-new, new_ts))
        new, new_ts = new[by_recency], new_ts[by_recency]
        # Insertion points: after every older entry, and among entries with the same
        # timestamp after those with a larger id (ids run descending inside a tie).
        lo = np.searchsorted(order_ts, new_ts, side="left")
        hi = np.searchsorted(order_ts, new_ts, side="right")
        at = lo.copy()
        for i in np.flatnonzero(hi > lo):
            block = order[lo[i] : hi[i]]
            at[i] = lo[i] + int(np.count_nonzero(block > new[i]))
        return np.insert(order, at, new), np.insert(order_ts, at, new_ts)


def _int32s(docs: _I32 | _I64) -> array[int]:
    """A word's postings as the array('i') a changing word keeps (from a restored
    word's slice, or a demoted word's docs)."""
    return array("i", docs.astype(np.int32, copy=False).tobytes())


def _bytes_for(capacity: int) -> int:
    """The bytes of a dense word's bit set over ``capacity`` doc ids."""
    return (capacity + 7) // 8


def _set_bits(column: _U8, docs: list[int] | array[int] | _I32) -> None:
    """Set the bits of ``docs`` (distinct) in a dense word's bit set."""
    if len(docs) == 1:  # (a scalar store is ten times cheaper than a fancy one)
        doc = int(docs[0])
        column[doc >> 3] |= 0x80 >> (doc & 7)
        return
    at = np.array(docs, dtype=np.int64)
    # (several docs of one byte: ``at`` accumulates each, where a fancy |= keeps one)
    np.bitwise_or.at(column, at >> 3, (0x80 >> (at & 7)).astype(np.uint8))
