"""Keyed memories: a key-value store's items kept as memories of a scope.

A keyed memory has a ``namespace`` (a path of labels) and a ``key``; a caller
chooses its id (a key-value store derives it from namespace and key) and writes it
with ``PutMemories``: create or replace by id, forget others, all or none, content
deduplicated only where asked. It may carry extra ``vectors`` (embeddings of its
other parts: a search scores it by the best of them) and a ``ttl`` (hidden from
reads once expired, forgotten by ``ForgetExpired``, pushed back by
``RefreshExpiry``). ``ListNamespaces`` lists the namespaces in use from counts kept
up to date, without reading the memories.

``KeyedIndex`` is what a scope keeps for them: docs by namespace prefix, namespace
counts, expiries, and the extra vectors in an exact vector index of their own
(rows mapped to docs). The functions below are the scope's handlers of the keyed
commands; they validate the whole command before changing anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
import numpy as np
import numpy.typing as npt

from mnemex._checks import check_int
from mnemex._time import check_seconds
from mnemex.effects import Step
from mnemex.errors import InvalidInput, TooLarge
from mnemex.index import VectorIndex
from mnemex.memories.fields import check_memory_id, check_namespace
from mnemex.memories.protocol import (
    ForgetExpired,
    Forgotten,
    ListNamespaces,
    MemoriesPut,
    MemoryRecord,
    Namespaces,
    PutMemories,
    RefreshExpiry,
)

if TYPE_CHECKING:
    from mnemex.memories.behaviour import ScopeMemory

__all__ = ["KeyedIndex", "MultiVectorSearch", "forget_expired", "list_namespaces", "put_memories",
           "refresh_expiry"]

Mask = npt.NDArray[np.bool_]
_EXACT_ONLY: Final = 2**62  # the extra vectors' index never builds a graph: searches are exact


_NO_ROWS: Final = np.zeros(0, dtype=np.int64)
_NO_ROWS.flags.writeable = False


class KeyedIndex:
    """What a scope keeps about its keyed memories, by doc (see the module doc)."""

    # slots: every live scope holds one (an instance dict of nine keys is ~100 bytes more)
    __slots__ = ("_free_rows", "_rows_used", "by_prefix", "counts", "expires", "extra", "most_rows",
                 "row_doc", "rows_of")

    def __init__(self) -> None:
        self.by_prefix: dict[tuple[str, ...], set[int]] = {}
        self.counts: dict[tuple[str, ...], int] = {}
        self.expires: dict[int, float] = {}
        self.extra: VectorIndex | None = None
        self.rows_of: dict[int, list[int]] = {}
        self.row_doc = _NO_ROWS  # (shared until a row is added: a live scope keeps no array of its own)
        self._free_rows: list[int] = []
        self._rows_used = 0
        self.most_rows = 0  # most extra vectors of one doc (bounds a search's over-fetch)

    def __bool__(self) -> bool:
        return bool(self.counts or self.expires or self.rows_of)

    def add(self, doc: int, record: MemoryRecord) -> None:
        if record.namespace:
            namespace = record.namespace
            self.counts[namespace] = self.counts.get(namespace, 0) + 1
            for depth in range(1, len(namespace) + 1):
                self.by_prefix.setdefault(namespace[:depth], set()).add(doc)
        if record.expires_at is not None:
            self.expires[doc] = record.expires_at
        if record.vectors:
            self._add_vectors(doc, record.vectors)

    def remove(self, doc: int, record: MemoryRecord) -> None:
        if record.namespace:
            namespace = record.namespace
            left = self.counts[namespace] - 1
            if left:
                self.counts[namespace] = left
            else:
                del self.counts[namespace]
            for depth in range(1, len(namespace) + 1):
                docs = self.by_prefix[namespace[:depth]]
                docs.discard(doc)
                if not docs:
                    del self.by_prefix[namespace[:depth]]
        self.expires.pop(doc, None)
        rows = self.rows_of.pop(doc, None)
        if rows:
            assert self.extra is not None
            for row in rows:
                self.extra.remove(row)
                self.row_doc[row] = -1
            self._free_rows += rows

    def refresh(self, doc: int, expires_at: float) -> None:
        self.expires[doc] = expires_at

    def _add_vectors(self, doc: int, vectors: Sequence[bytes]) -> None:
        dim = len(vectors[0]) // 4
        if self.extra is None:
            self.extra = VectorIndex(dim, hnsw_threshold=_EXACT_ONLY, auto_build=False)
        rows = []
        for _ in vectors:
            if self._free_rows:
                rows.append(self._free_rows.pop())
            else:
                rows.append(self._rows_used)
                self._rows_used += 1
        if self._rows_used > len(self.row_doc):
            grown = np.full(max(16, 2 * self._rows_used), -1, dtype=np.int64)
            grown[: len(self.row_doc)] = self.row_doc
            self.row_doc = grown
        self.row_doc[rows] = doc
        matrix = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), dim)
        self.extra.add_many(rows, matrix)
        self.rows_of[doc] = rows
        self.most_rows = max(self.most_rows, len(rows))

    # -- reads
    def holds_all(self, prefix: tuple[str, ...], count: int) -> bool:
        """Whether all ``count`` memories of the scope are under ``prefix``."""
        if not prefix:
            return sum(self.counts.values()) == count
        return len(self.by_prefix.get(prefix, ())) == count

    def namespace_mask(self, prefix: tuple[str, ...], size: int) -> Mask:
        """The docs (of ``size``) whose namespace starts with ``prefix``."""
        mask = np.zeros(size, dtype=np.bool_)
        tops = [prefix] if prefix else [ns for ns in self.by_prefix if len(ns) == 1]
        for top in tops:
            docs = self.by_prefix.get(top)
            if docs:
                mask[np.fromiter(docs, dtype=np.int64, count=len(docs))] = True
        return mask

    def expired_docs(self, now: float) -> list[int]:
        return [doc for doc, at in self.expires.items() if at <= now]

    def namespaces(self, prefix: tuple[str, ...], suffix: tuple[str, ...],
                   max_depth: int | None) -> list[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        for namespace in self.counts:
            if not _matches(namespace, prefix, suffix):
                continue
            found.add(namespace if max_depth is None else namespace[:max_depth])
        return sorted(found)

    def vector_search(self, main: VectorIndex | None) -> VectorIndex | MultiVectorSearch | None:
        """What a scope's searches read vectors from: ``main`` alone while no memory has
        extra vectors, else a view that scores each doc by the best of its vectors."""
        if self.extra is None or not len(self.extra):
            return main
        return MultiVectorSearch(main, self)


def _matches(namespace: tuple[str, ...], prefix: tuple[str, ...], suffix: tuple[str, ...]) -> bool:
    if len(prefix) > len(namespace) or len(suffix) > len(namespace):
        return False
    if any(want not in ("*", have) for want, have in zip(prefix, namespace, strict=False)):
        return False
    tail = namespace[len(namespace) - len(suffix):] if suffix else ()
    return all(want in ("*", have) for want, have in zip(suffix, tail, strict=True))


class MultiVectorSearch:
    """The main vector index and the extra vectors seen as one: ``search`` returns
    docs by the best cosine of any of their vectors (exact over the extra rows: it
    asks them for ``top_k`` times the most rows a doc has, which holds the best row
    of every doc of the true top ``top_k``). The other reads are the main index's."""

    def __init__(self, main: VectorIndex | None, keyed: KeyedIndex) -> None:
        assert keyed.extra is not None
        self.main = main
        self.keyed = keyed
        self.extra = keyed.extra

    def __len__(self) -> int:
        return len(self.main) if self.main is not None else 0

    def holds(self, doc_ids: npt.NDArray[np.int64]) -> Mask:
        if self.main is None:
            return np.zeros(len(doc_ids), dtype=np.bool_)
        return self.main.holds(doc_ids)

    def vectors(self, doc_ids: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        assert self.main is not None
        return self.main.vectors(doc_ids)

    def search(self, vector: npt.ArrayLike, top_k: int = 10, allowed: Mask | None = None
               ) -> list[tuple[int, float]]:
        best: dict[int, float] = {}
        if self.main is not None and len(self.main):
            best.update(self.main.search(vector, top_k, allowed))
        keyed = self.keyed
        rows_allowed: Mask | None = None
        if allowed is not None:
            row_doc = keyed.row_doc
            rows = np.flatnonzero(row_doc >= 0)
            docs = row_doc[rows]
            inside = docs < len(allowed)
            rows_allowed = np.zeros(len(row_doc), dtype=np.bool_)
            rows_allowed[rows[inside]] = allowed[docs[inside]]
        if rows_allowed is None or rows_allowed.any():
            wanted = top_k * max(1, keyed.most_rows)
            for row, cosine in self.extra.search(vector, wanted, rows_allowed):
                doc = int(keyed.row_doc[row])
                if cosine > best.get(doc, -math.inf):
                    best[doc] = cosine
        ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:top_k]


# -- the scope's handlers --------------------------------------------------------------------------
def put_memories(scope: ScopeMemory, cmd: PutMemories) -> MemoriesPut:
    """Create or replace by id, forget, all or none (see ``PutMemories``)."""
    now = check_seconds(cmd.now, "now")
    memories, forget = cmd.memories, cmd.forget
    if not isinstance(memories, list | tuple) or not isinstance(forget, list | tuple):
        raise InvalidInput("memories and forget must be lists", field="memories")
    limit = scope.settings.max_memories_per_command
    if len(memories) + len(forget) > limit:
        raise TooLarge(f"{len(memories) + len(forget):,} memories in one command; the limit is {limit:,} "
                       f"(config.memories.max_memories_per_command)", field="memories")
    forget_ids = [check_memory_id(memory_id, "forget") for memory_id in forget]
    checked = [scope._new_record(memory, now) for memory in memories]
    vectors = [vector for _, vector in checked if vector is not None]
    vectors += [extra for record, _ in checked for extra in record.vectors]
    if vectors:
        scope.check_vectors_of(cmd.embedder, cmd.dim, vectors, "the command")
        rows = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), int(cmd.dim))
        if not np.isfinite(rows).all() or not rows.any(axis=1).all():
            raise InvalidInput("a vector is all zeros or not finite", field="vector")
    latest = {record.id: i for i, (record, _) in enumerate(checked)}
    # the doc of each id replaced or forgotten: their content no longer holds a place
    leaving = {memory_id for memory_id in [*forget_ids, *latest] if memory_id in scope.doc_of}
    ids: list[str] = []
    replaced: list[bool] = []
    placed: list[tuple[MemoryRecord, bytes | None]] = []
    fresh_content: dict[str, str] = {}
    for i, (record, vector) in enumerate(checked):
        ids.append(record.id)
        replaced.append(record.id in scope.doc_of)
        if latest[record.id] != i:
            continue  # put again later in the command: the last one counts
        if memories[i].dedupe:
            holder = scope.by_content.get(record.content)
            held_by = None if holder is None else scope.docs_record(holder).id
            same = fresh_content.get(record.content) if held_by is None or held_by in leaving else held_by
            if same is not None and same != record.id:
                ids[-1] = same
                replaced[-1] = False
                continue
            fresh_content[record.content] = record.id
        old = scope.record(record.id)
        placed.append((record if old is None else _replacing(record, old), vector))
    # valid: from here on the state changes
    gone = [memory_id for memory_id in dict.fromkeys(forget_ids)
            if memory_id in scope.doc_of and memory_id not in latest]
    scope.clock = max(scope.clock, now)
    if vectors and scope.embedder is None:
        scope._adopt_embedder(str(cmd.embedder), int(cmd.dim))
    scope._forget([*gone, *(record.id for record, _ in placed if record.id in scope.doc_of)])
    scope.place_records(placed, cmd.embedder, cmd.dim)
    return MemoriesPut(ids=ids, replaced=replaced, forgotten=gone)


def _replacing(record: MemoryRecord, old: MemoryRecord) -> MemoryRecord:
    """``record`` taking the place of ``old``: created when ``old`` was."""
    return msgspec.structs.replace(record, created_at=old.created_at)


def refresh_expiry(scope: ScopeMemory, cmd: RefreshExpiry) -> Any:
    """Push back the expiry of memories with a ttl (see ``RefreshExpiry``); how many."""
    now = check_seconds(cmd.now, "now")
    if not isinstance(cmd.ids, list | tuple):
        raise InvalidInput("ids must be a list of memory ids", field="ids")
    changed = 0
    for memory_id in dict.fromkeys(cmd.ids):
        record = scope.record(memory_id) if isinstance(memory_id, str) else None
        if record is None or record.ttl is None or record.expires_at is None or record.expires_at <= now:
            continue
        expires_at = now + record.ttl
        if expires_at == record.expires_at:
            continue
        scope.change_record(memory_id, lambda r, at=expires_at: _expiring(r, at))  # type: ignore[misc]
        scope.keyed.refresh(scope.doc_of[memory_id], expires_at)
        changed += 1
    return changed if changed else Step(0, unchanged=True)


def _expiring(record: MemoryRecord, expires_at: float) -> MemoryRecord:
    return msgspec.structs.replace(record, expires_at=expires_at)


def forget_expired(scope: ScopeMemory, cmd: ForgetExpired) -> Any:
    """Forget the memories expired at ``now`` (see ``ForgetExpired``)."""
    now = check_seconds(cmd.now, "now")
    gone = [scope.memory_id_at(doc) for doc in sorted(scope.keyed.expired_docs(now))]
    if not gone:
        return Step(Forgotten(ids=[]), unchanged=True)
    scope._forget(gone)
    return Forgotten(ids=gone)


def list_namespaces(scope: ScopeMemory, cmd: ListNamespaces) -> Namespaces:
    """A page of the namespaces in use (see ``ListNamespaces``)."""
    prefix = tuple(check_namespace(cmd.prefix, "prefix")) if cmd.prefix else ()
    suffix = tuple(check_namespace(cmd.suffix, "suffix")) if cmd.suffix else ()
    max_depth = None if cmd.max_depth is None else check_int(cmd.max_depth, "max_depth", 1)
    limit = check_int(cmd.limit, "limit", 0)
    offset = check_int(cmd.offset, "offset", 0)
    found = scope.keyed.namespaces(prefix, suffix, max_depth)
    return Namespaces(namespaces=found[offset:offset + limit])
