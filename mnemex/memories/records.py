"""A scope's records by doc id, and its docs by content.

A scope keeps its records in a list while it is small. Once it holds
``storage.records_file_from`` memories they move to a :class:`FileRecords`: each
record MessagePack-encoded in an unnamed, append-only file of the scope's
(:class:`mnemex.persistence.recordfiles.RecordFile`), read back and decoded when
asked for (a pread and a decode, a few microseconds: a search reads the ten it
returns). What stays in memory is each doc's offset and length (12 bytes) and its
memory id (the string ``doc_of`` holds already), against about 640 bytes a memory
for the record objects. Records set since the last write wait in memory, decoded,
and are written ``RecordFiles.batch`` (4,096) at a time in one call; a record set again is written
again (the old bytes become garbage), and the live records are copied to a new
file once the garbage outweighs them (``COMPACT_MIN_BYTES`` at least). A write that
fails (a full disk) leaves its records waiting in memory, tried again after twice
as many: nothing is lost, and the journal and snapshots are the truth anyway.

:class:`Contents` indexes the docs by content (which one a deduplicating write
finds, and the others that hold the same text). It keys them by the content
string while the records are objects (the record holds the string), and by the
string's hash once they are in a file, a doc it finds checked against its
record: otherwise it would keep every content in memory by itself.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, cast, overload

import msgspec
import numpy as np
import numpy.typing as npt

from mnemex.memories.protocol import MemoryRecord
from mnemex.persistence.recordfiles import RecordFile, RecordFiles

__all__ = ["COMPACT_MIN_BYTES", "Contents", "FileRecords", "RecordsView", "decode_record"]

log = logging.getLogger("mnemex.memories")

COMPACT_MIN_BYTES: Final = 64 << 20
"""Bytes of garbage (records written again, or forgotten) from which the live records
are copied to a new file, once the garbage also outweighs them."""

_WINDOW: Final = 1024
"""Docs whose records are read together (their spans sorted, runs read in one call)."""

_encoder = msgspec.msgpack.Encoder()
_decode = decode_record = msgspec.msgpack.Decoder(MemoryRecord).decode
_UNSET: Final = object()

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U32 = npt.NDArray[np.uint32]


def _starts(base: int, sizes: I64) -> I64:
    """Where each of records of ``sizes``, written one after another from ``base``,
    begins."""
    starts: I64 = base + np.cumsum(sizes) - sizes
    return starts


class FileRecords:
    """A large scope's records by doc id, in a file (see the module docstring). Reads
    as a list of ``MemoryRecord | None`` does (an index, ``len``, iteration), and
    ``many`` reads several at once. Not safe to write from two threads; reads beside
    the writer's thread are, while it writes nothing (a scope's searches beside the
    actor)."""

    __slots__ = ("_compact_from", "_file", "_files", "_flush_at", "_garbage", "_ids", "_lengths", "_offsets",
                 "_pending")

    def __init__(self, files: RecordFiles, records: Iterable[MemoryRecord | None]) -> None:
        """Write ``records`` (doc by doc) to a new file of ``files``: OSError when it
        cannot be made or written (nothing is kept then)."""
        self._files = files
        self._file = files.open()
        self._ids: list[str | None] = []
        self._offsets: I64 = np.full(0, -1, dtype=np.int64)
        self._lengths: U32 = np.zeros(0, dtype=np.uint32)
        self._pending: dict[int, MemoryRecord | None] = {}
        self._garbage = 0
        self._compact_from = COMPACT_MIN_BYTES  # (twice the garbage after a copy that failed)
        self._flush_at = sys.maxsize  # (written here, a failure raising)
        for record in records:
            self.append(record)
            if len(self._pending) >= files.batch:
                self._write(strict=True)
        self._write(strict=True)
        self._flush_at = files.batch

    def __repr__(self) -> str:
        return f"FileRecords({len(self._ids):,} docs, {self._file!r}, waiting={len(self._pending)})"

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, doc: int) -> MemoryRecord | None: ...
    @overload
    def __getitem__(self, doc: slice) -> list[MemoryRecord | None]: ...
    def __getitem__(self, doc: int | slice) -> list[MemoryRecord | None] | MemoryRecord | None:
        if isinstance(doc, slice):
            return list(self.many(range(len(self._ids))[doc]))
        if doc < 0:
            doc += len(self._ids)
        found = self._pending.get(doc, _UNSET)
        if found is not _UNSET:
            return found  # type: ignore[return-value]
        if self._ids[doc] is None:  # (IndexError past the end, as a list)
            return None
        return _decode(self._file.read(int(self._offsets[doc]), int(self._lengths[doc])))

    def __setitem__(self, doc: int, record: MemoryRecord | None) -> None:
        ids = self._ids
        if not 0 <= doc < len(ids):
            raise IndexError(f"doc {doc} is not one of the {len(ids)} docs")
        if record is None:
            ids[doc] = None
        elif ids[doc] != record.id:  # (a record changed keeps its id's object: doc_of's)
            ids[doc] = record.id
        self._pending[doc] = record
        if len(self._pending) >= self._flush_at:
            self.flush()

    def __iter__(self) -> Iterator[MemoryRecord | None]:
        return self.many(range(len(self._ids)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FileRecords | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def append(self, record: MemoryRecord | None) -> None:
        doc = len(self._ids)
        self.grow(doc + 1)
        if record is not None:
            self[doc] = record

    def extend(self, records: Iterable[MemoryRecord | None]) -> None:
        for record in records:
            self.append(record)

    def grow(self, size: int) -> None:
        """Free docs up to ``size`` docs in all (``extend`` with Nones, at once)."""
        have = len(self._ids)
        if size <= have:
            return
        if size > len(self._offsets):
            grown = max(size, 2 * len(self._offsets), 1024)
            extra = grown - len(self._offsets)
            self._offsets = np.concatenate([self._offsets, np.full(extra, -1, dtype=np.int64)])
            self._lengths = np.concatenate([self._lengths, np.zeros(extra, dtype=np.uint32)])
        self._ids.extend([None] * (size - have))

    def place(self, docs: Sequence[int], ids: Sequence[str], encoded: Sequence[bytes | msgspec.Raw]) -> None:
        """Records encoded already (a snapshot's records sidecar: the bytes this store
        writes), with their ids, at free docs, written at once: ValueError when a doc
        is not free (nothing placed), OSError when they cannot be written."""
        held = self._ids
        for doc in docs:
            if not 0 <= doc < len(held) or held[doc] is not None or doc in self._pending:
                raise ValueError(f"doc {doc} is not a free doc of {len(held)}")
        if len(set(docs)) != len(docs):
            raise ValueError("a doc is placed twice")
        base = self._file.append(b"".join(encoded))
        sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        at = np.asarray(docs, dtype=np.int64)
        self._offsets[at] = _starts(base, sizes)
        self._lengths[at] = sizes
        for doc, memory_id in zip(docs, ids, strict=True):
            held[doc] = memory_id

    def id_at(self, doc: int) -> str | None:
        """The memory id at ``doc`` (None: a free doc), without reading its record."""
        return self._ids[doc]

    def many(self, docs: Iterable[int]) -> Iterator[MemoryRecord | None]:
        """The records of ``docs``, in their order, read a window at a time."""
        return RecordsView(self._file, self._offsets, self._lengths, self._pending, self._ids).read(docs)

    @property
    def file_bytes(self) -> int:
        """The file's size: live records and garbage."""
        return self._file.size

    @property
    def nbytes(self) -> int:
        """What the records cost in memory: the offsets, lengths and ids' list (the id
        strings are ``doc_of``'s), and about 400 bytes for each waiting record."""
        return self._offsets.nbytes + self._lengths.nbytes + 8 * len(self._ids) + 400 * len(self._pending)

    def flush(self) -> None:
        """Write the waiting records (a failure keeps them waiting, logged)."""
        self._write(strict=False)

    def view(self) -> RecordsView:
        """The records as they are now, for a reader in another thread while this
        object goes on changing (a snapshot's writer): the waiting ones written first
        (or kept in the view), the offsets copied; the file stays open while the view
        is held."""
        self.flush()
        size = len(self._ids)
        return RecordsView(self._file, self._offsets[:size].copy(), self._lengths[:size].copy(),
                           dict(self._pending), list(self._ids))

    def _write(self, *, strict: bool) -> None:
        pending = self._pending
        if not pending:
            return
        buffer = bytearray()
        encode_into = _encoder.encode_into
        written: list[int] = []
        sizes: list[int] = []
        gone: list[int] = []
        for doc, record in pending.items():
            if record is None:
                gone.append(doc)
            else:
                before = len(buffer)
                encode_into(record, buffer, -1)
                written.append(doc)
                sizes.append(len(buffer) - before)
        try:
            base = self._file.append(buffer) if buffer else 0
        except OSError as exc:
            if strict:
                raise
            self._flush_at = 2 * len(pending)
            log.warning("records: %d could not be written to %r (%s); they stay in memory, tried again "
                        "after %d", len(pending), self._file, exc, self._flush_at)
            return
        offsets, lengths = self._offsets, self._lengths
        changed = np.array(written + gone, dtype=np.int64)
        was = offsets[changed] >= 0
        self._garbage += int(lengths[changed][was].sum())
        if written:
            at = changed[: len(written)]
            lengths_written = np.array(sizes, dtype=np.int64)
            offsets[at] = _starts(base, lengths_written)
            lengths[at] = lengths_written
        if gone:
            offsets[changed[len(written):]] = -1
            lengths[changed[len(written):]] = 0
        pending.clear()
        if not strict:  # (a failure's longer wait ends)
            self._flush_at = self._files.batch
        garbage = self._garbage
        if garbage >= max(COMPACT_MIN_BYTES, self._compact_from) and 2 * garbage > self._file.size:
            self._compact()

    def _compact(self) -> None:
        """Copy the live records to a new file, in file order (a view or a reader
        holding the old file and offsets keeps them: the offsets are a new array). A
        copy that fails (the disk holds the live records twice meanwhile) is tried
        again once the garbage has doubled."""
        offsets, lengths = self._offsets, self._lengths
        live = np.flatnonzero(offsets >= 0)
        live = live[np.argsort(offsets[live], kind="stable")]
        try:
            fresh = self._files.open()
            moved = np.empty(len(live), dtype=np.int64)
            block = 16_384
            for start in range(0, len(live), block):
                part = live[start : start + block]
                blobs = self._file.read_spans(list(zip(offsets[part].tolist(), lengths[part].tolist(),
                                                       strict=True)))
                moved[start : start + len(part)] = _starts(fresh.append(b"".join(blobs)),
                                                           lengths[part].astype(np.int64))
        except OSError as exc:
            self._compact_from = 2 * self._garbage
            log.warning("records: could not be copied to a new file in %s (%s); the old one is kept, "
                        "and copied again past %d bytes of garbage", self._files.directory, exc,
                        self._compact_from)
            return
        # (new arrays: a reader holding the old file reads it with the offsets and
        # lengths it took, which later writes to the new file do not change)
        offsets, self._lengths = offsets.copy(), lengths.copy()
        offsets[live] = moved
        self._offsets, self._file, self._garbage, self._compact_from = offsets, fresh, 0, COMPACT_MIN_BYTES


class RecordsView:
    """What reads a :class:`FileRecords`'s records: its own, as it is (``many``), or a
    copy of it as it was when ``view`` was taken, whose live records are (doc, record)
    pairs in doc order (``len`` counts them) for a reader in another thread."""

    __slots__ = ("_file", "_ids", "_lengths", "_offsets", "_pending")

    def __init__(self, file: RecordFile, offsets: I64, lengths: U32, pending: dict[int, MemoryRecord | None],
                 ids: list[str | None]) -> None:
        self._file, self._offsets, self._lengths = file, offsets, lengths
        self._pending, self._ids = pending, ids

    def __len__(self) -> int:
        return len(self._ids) - self._ids.count(None)

    def __contains__(self, pair: object) -> bool:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], int)):
            return False
        doc = pair[0]
        return 0 <= doc < len(self._ids) and self._ids[doc] is not None and next(self.read([doc])) == pair[1]

    def __iter__(self) -> Iterator[tuple[int, MemoryRecord]]:
        docs = [doc for doc, memory_id in enumerate(self._ids) if memory_id is not None]
        for doc, record in zip(docs, self.read(docs), strict=True):
            assert record is not None
            yield doc, record

    def read(self, docs: Iterable[int]) -> Iterator[MemoryRecord | None]:
        """The records of ``docs`` in their order: waiting ones as they wait, the
        others read ``_WINDOW`` docs at a time, each window's spans in file order."""
        window: list[int] = []
        for doc in docs:
            window.append(doc)
            if len(window) == _WINDOW:
                yield from self._window(window)
                window = []
        if window:
            yield from self._window(window)

    def _window(self, window: list[int]) -> list[MemoryRecord | None]:
        out: list[MemoryRecord | None] = [None] * len(window)
        pending, ids, offsets, lengths = self._pending, self._ids, self._offsets, self._lengths
        stored: list[tuple[int, int, int]] = []  # (offset, length, position)
        for position, doc in enumerate(window):
            if doc in pending:
                out[position] = pending[doc]
            elif ids[doc] is not None:
                stored.append((int(offsets[doc]), int(lengths[doc]), position))
        if stored:
            stored.sort()
            blobs = self._file.read_spans([(offset, length) for offset, length, _ in stored])
            for (_, _, position), blob in zip(stored, blobs, strict=True):
                out[position] = _decode(blob)
        return out


class HashDocs:
    """The first doc of each content's ``hash()``, for a scope whose records are in a
    file (``Contents`` keyed by hash): the hashes sorted in an int64 array with
    their docs beside them (12 bytes a content, where a dict of int keys held ~76:
    ~100 MB at 1,000,000 memories with the keys' int objects), and the latest
    changes in a dict (a hash let go: -1) until they pass a sixteenth of the array,
    then sorted in. Read like the dict it replaces (``get``, ``setdefault``, item
    assignment and deletion, ``values``); ``load`` fills an empty one at once."""

    __slots__ = ("_count", "_docs", "_keys", "_recent")

    def __init__(self) -> None:
        self._keys: I64 = np.zeros(0, dtype=np.int64)
        self._docs: I32 = np.zeros(0, dtype=np.int32)
        self._recent: dict[int, int] = {}
        self._count = 0

    def load(self, keys: I64, docs: I64) -> None:
        """Fill this map, empty, with distinct ``keys`` and their ``docs``."""
        if self._count:
            raise ValueError("a HashDocs is loaded only while empty")
        order = np.argsort(keys, kind="stable")
        self._keys, self._docs = keys[order], docs[order].astype(np.int32)
        self._recent = {}
        self._count = len(keys)

    def get(self, key: int) -> int | None:
        found = self._recent.get(key)
        if found is not None:
            return found if found >= 0 else None
        keys = self._keys
        if not len(keys):
            return None
        at = int(keys.searchsorted(key))
        return int(self._docs[at]) if at < len(keys) and int(keys[at]) == key else None

    def setdefault(self, key: int, doc: int) -> int:
        found = self.get(key)
        if found is not None:
            return found
        self._put(key, doc)
        self._count += 1
        return doc

    def __setitem__(self, key: int, doc: int) -> None:
        if self.get(key) is None:
            self._count += 1
        self._put(key, doc)

    def __delitem__(self, key: int) -> None:
        if self.get(key) is None:
            raise KeyError(key)
        self._count -= 1
        self._put(key, -1)

    def _put(self, key: int, doc: int) -> None:
        recent = self._recent
        recent[key] = doc
        if len(recent) > max(_RECENT_MIN, len(self._keys) >> 4):
            self._sort_in()

    def _sort_in(self) -> None:
        recent, self._recent = self._recent, {}
        given = np.fromiter(recent, dtype=np.int64, count=len(recent))
        docs = np.fromiter(recent.values(), dtype=np.int64, count=len(recent))
        kept = ~np.isin(self._keys, given)  # (what the recent changes replace or let go)
        live = docs >= 0
        keys = np.concatenate((self._keys[kept], given[live]))
        order = np.argsort(keys, kind="stable")
        self._keys = keys[order]
        self._docs = np.concatenate((self._docs[kept], docs[live].astype(np.int32)))[order]

    def __len__(self) -> int:
        return self._count

    def items(self) -> Iterator[tuple[int, int]]:
        """(hash, doc) of each content, in no set order."""
        recent = self._recent
        for key, doc in zip(self._keys.tolist(), self._docs.tolist(), strict=True):
            if key not in recent:
                yield key, doc
        yield from ((key, doc) for key, doc in recent.items() if doc >= 0)

    def values(self) -> list[int]:
        return [doc for _, doc in self.items()]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HashDocs):
            return NotImplemented
        return len(self) == len(other) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"HashDocs({len(self)} contents)"


_RECENT_MIN: Final = 4096
"""A HashDocs' recent changes are sorted into its arrays past this many (or a
sixteenth of the arrays)."""


class Contents:
    """Each content's docs: the first (the one a deduplicating write finds, ``get``)
    and the others stored with the same content by writes without dedupe (``twins``).
    Keyed by the content itself while the records are objects (the record holds the
    string); once they are in a file (``key_by_hash``), by the content's ``hash()``
    (computed once per string object, and kept on it), a doc found checked against
    its record's content: the rare content whose hash another content's holds already
    is kept apart, by itself (``_apart``), so that none is ever taken for another."""

    __slots__ = ("_apart", "_first", "_records", "twins")

    def __init__(self) -> None:
        self._first: dict[str | int, int] | HashDocs = {}  # (keyed by hash: a HashDocs)
        self.twins: dict[str | int, set[int]] = {}
        # what reads a doc's content back once keyed by hash (None: keyed by content)
        self._records: FileRecords | None = None
        self._apart: Contents | None = None

    def __repr__(self) -> str:
        return (f"Contents({len(self._first)} contents, {len(self.twins)} with twins, "
                f"by hash={self._records is not None})")

    def __len__(self) -> int:
        return len(self._first) + (len(self._apart) if self._apart is not None else 0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Contents):
            return NotImplemented
        return (self.by_hash, self._first, self.twins, self._apart) == (
            other.by_hash, other._first, other.twins, other._apart)

    __hash__ = None  # type: ignore[assignment]

    @property
    def by_hash(self) -> bool:
        return self._records is not None

    def _content_at(self, doc: int) -> str | None:
        assert self._records is not None
        record = self._records[doc]
        return None if record is None else record.content

    def get(self, content: str) -> int | None:
        first = self._first
        if isinstance(first, dict):  # (keyed by content)
            return first.get(content)
        doc = first.get(hash(content))
        if doc is not None and self._content_at(doc) == content:
            return doc
        apart = self._apart
        return None if apart is None else apart.get(content)

    def __contains__(self, content: object) -> bool:
        return isinstance(content, str) and self.get(content) is not None

    def values(self) -> Iterable[int]:
        """The first doc of each content."""
        apart = self._apart
        return self._first.values() if apart is None else [*self._first.values(), *apart.values()]

    def hold(self, doc: int, content: str) -> None:
        """Index ``doc`` by ``content`` (again: nothing changes). A doc's record holds
        its content already when keyed by hash."""
        first = self._first
        if isinstance(first, dict):  # (keyed by content, as get reads it)
            holder = first.setdefault(content, doc)
            if holder != doc:
                self.twins.setdefault(content, set()).add(doc)
            return
        self._hold_keyed(doc, content, hash(content))

    def _hold_keyed(self, doc: int, content: str, key: int) -> None:
        """``hold`` keyed by hash, the content's ``key`` given."""
        apart = self._apart
        if apart is not None and content in apart:
            apart.hold(doc, content)
            return
        holder = self._first.setdefault(key, doc)
        if holder == doc:
            return
        if self._content_at(holder) == content:
            self.twins.setdefault(key, set()).add(doc)
        else:  # (another content of the same hash: kept apart, by its content)
            if apart is None:
                apart = self._apart = Contents()
            apart.hold(doc, content)

    def hold_hashed(self, docs: I64, keys: I64) -> None:
        """Index many docs at once by their contents' ``hash()`` (``keys``), when keyed
        by hash (a restore filing a scope's records into a file): an empty index in one
        sort, the docs of a hash held already (twins, or another content of the same
        hash) then one by one, in the order given, their contents read back. Into an
        index holding some, each as ``hold``."""
        first = self._first
        if not isinstance(first, HashDocs):
            raise TypeError("hold_hashed is for contents keyed by hash (key_by_hash first)")
        if len(first) or self.twins or self._apart is not None:
            later = np.arange(len(docs))
        else:
            order = np.argsort(keys, kind="stable")  # (a hash's docs in the order given)
            ordered = keys[order]
            lead = np.ones(len(keys), dtype=np.bool_)
            lead[1:] = ordered[1:] != ordered[:-1]
            first.load(ordered[lead], docs[order[lead]])
            later = np.sort(order[~lead])
        for doc, key in zip(docs[later].tolist(), keys[later].tolist(), strict=True):
            self._hold_keyed(doc, self._content_of(doc), key)

    def _content_of(self, doc: int) -> str:
        content = self._content_at(doc)
        if content is None:
            raise ValueError(f"doc {doc} has no record to read its content from")
        return content

    def release(self, doc: int, content: str) -> None:
        """``doc`` no longer holds ``content``: its first twin takes its place. (Asked
        while the doc's record still holds it.)"""
        apart = self._apart
        if apart is not None and content in apart:
            apart.release(doc, content)
            if not len(apart):
                self._apart = None
            return
        key: str | int = content if self._records is None else hash(content)
        twins = self.twins.get(key)
        held = cast("dict[str | int, int]", self._first)  # (or a HashDocs, read alike, keyed by hash)
        if held.get(key) == doc:
            if twins:
                first = min(twins)
                held[key] = first
                twins.discard(first)
            else:
                del held[key]
        elif twins is not None:
            twins.discard(doc)
        if twins is not None and not twins:
            del self.twins[key]

    def key_by_hash(self, records: FileRecords) -> None:
        """Key every content by its hash from now on, reading docs' contents from
        ``records`` (the records leave memory)."""
        if self._records is not None:
            return
        first, twins = self._first, self.twins
        self._first, self.twins, self._records = HashDocs(), {}, records
        for content, doc in first.items():
            self.hold(doc, str(content))
        for content, docs in twins.items():
            for doc in sorted(docs):
                self.hold(doc, str(content))
