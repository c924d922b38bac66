"""A scope's snapshot codec, and the bytes a vector travels as.

A snapshot (format 2) is one JSONL line per memory (its doc id and record) and
sidecars, written streaming in the writer's thread (nothing the size of the scope
is held as one bytes object):

* ``vectors2`` (required: the snapshot is not restored without it): the doc ids
  and their float32 rows, raw (``VectorsView.write_vectors``), read back mapped;
* ``records2``: the records again as MessagePack chunks of 4,096 (length-prefixed),
  a few times faster to decode than the lines;
* ``usearch`` and ``usearchmeta``: the HNSW graph as usearch saves it (its vectors
  quantised, see ``mnemex.index.vector``) and what it was saved from, loaded instead of
  being rebuilt (the ``hnswlib`` and ``hnswmeta`` sidecars of earlier format 2
  snapshots, an hnswlib graph, are passed over: the graph is rebuilt);
* the text indexes' sidecars.

A sidecar that only makes a restart fast and is missing, stale or damaged is
skipped (the lines are read, the graph rebuilt). Format 1 snapshots (vectors in
the lines, one records blob, the graph as a pickled state) are still read.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import numpy as np
import numpy.typing as npt

from mnemex._repeats import Repeats
from mnemex.effects import Image, SnapshotData
from mnemex.errors import InvalidInput
from mnemex.index import VectorIndex
from mnemex.index._sidecar import byte_view
from mnemex.index.vector import VectorsView, read_vectors_file
from mnemex.memories.protocol import MemoryRecord
from mnemex.persistence.rowfiles import SnapshotRows
from mnemex.persistence.snapshot import Sidecar, in_temporary_file, let_pages_go

__all__ = ["HNSW_SIDECAR", "SNAPSHOT_FORMAT", "TEXT_SIDECARS", "SnapshotRecords", "check_vectors",
           "decode_vector", "encode_noted", "encode_vector", "encoded_records", "read_records",
           "read_vectors", "restore_vectors", "write_snapshot"]

log = logging.getLogger("mnemex.memories")

F32 = npt.NDArray[np.float32]

SNAPSHOT_FORMAT: Final = 2
_FORMATS: Final = (1, 2)
HNSW_SIDECAR: Final = "hnsw"  # format 1's graph
TEXT_SIDECARS: Final = ("keyword", "bm25", "entities")
_VECTORS: Final = "vectors"  # format 1
_RECORDS: Final = "records"  # format 1
_VECTORS2: Final = "vectors2"
_RECORDS2: Final = "records2"
_GRAPH: Final = "usearch"
_GRAPH_META: Final = "usearchmeta"
_RECORDS_CHUNK: Final = 4096
_encode = msgspec.json.Encoder()
MAP_ROWS_FROM = 64 * 2**20
"""Bytes of vectors sidecar from which a restore keeps its float32 rows where they are,
in the file mapped copy-on-write, rather than copying them into fresh memory (at
1,000,000 memories 1.5 GB, which a VM backs page by page at first touch: about 1 s
of a restore per 300,000). The page cache holds them, reclaimable; searches read
the pages they need; a row written (a freed one reused) is copied alone, and the
first rows added beyond them move them all into memory, or into the scope's row file
(``storage.vector_rows_file_from``; a journal replayed at load that adds memories
does so at once). Each such scope keeps one descriptor open
(the mapping's), and with it the file's disk space until then, even once newer
snapshots replaced the file. Pages read back after the checksum are not checked
again, and a read error on them (a shared volume gone) stops the process
(SIGBUS), where a copy would have been read once at load."""
_F32_LE: Final = np.dtype("<f4")  # (made once: a dtype read from its string costs a query's decode a third)


def encode_vector(vector: npt.ArrayLike) -> bytes:
    """A vector as the bytes commands carry: float32, little-endian."""
    return np.ascontiguousarray(vector, dtype=_F32_LE).tobytes()


_noted: list[tuple[bytes, F32] | None] = [None]
"""The bytes ``encode_noted`` made last and the vector they hold (read-only), as one
pair: a reader in another thread sees the pair before or after, never half of each."""


def encode_noted(vector: F32) -> bytes:
    """``encode_vector`` of a vector its caller found finite, noted: ``decode_vector`` of
    these very bytes (the same object, in this process) gives the vector back without
    reading and checking them again. One is noted at a time: a search's query on its
    way from the ref that embeds it to the scope that reads it next."""
    data = encode_vector(vector)
    kept: F32 = np.frombuffer(data, dtype=_F32_LE).astype(np.float32, copy=False)
    kept.setflags(write=False)  # (a view of the bytes, or on a big-endian machine their copy)
    _noted[0] = (data, kept)
    return data


def decode_vector(data: bytes, dim: int) -> F32:
    """The float32 vector in ``data`` (``dim`` values), or InvalidInput; read-only when
    ``data`` is the bytes ``encode_noted`` made last."""
    noted = _noted[0]
    if noted is not None and data is noted[0] and len(data) == 4 * dim:
        return noted[1]
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) != 4 * dim:
        size = len(data) if isinstance(data, bytes | bytearray | memoryview) else type(data).__name__
        raise InvalidInput(f"a vector must be {dim} float32 values ({4 * dim} bytes), got {size}",
                           field="vector")
    vector = np.frombuffer(data, dtype=_F32_LE).astype(np.float32)
    if not np.isfinite(vector).all():
        raise InvalidInput("a vector holds NaN or infinity", field="vector")
    return vector


def check_vectors(vectors: Sequence[bytes], dim: int) -> None:
    """What decode_vector checks, for many vectors in one pass."""
    for data in vectors:
        if not isinstance(data, bytes | bytearray | memoryview) or len(data) != 4 * dim:
            decode_vector(data, dim)  # raises, naming what is wrong
    if not np.isfinite(np.frombuffer(b"".join(vectors), dtype="<f4")).all():
        raise InvalidInput("a vector holds NaN or infinity", field="vector")


class _Line(msgspec.Struct, frozen=True):
    d: int
    m: MemoryRecord
    v: bytes | None = None


_decode_line = msgspec.json.Decoder(_Line)


class _Line2(msgspec.Struct, frozen=True):
    """A format 2 line: the vector is in the vectors sidecar."""

    d: int
    m: MemoryRecord


class _LazyLine(msgspec.Struct, frozen=True):
    """A snapshot line read with its vector left as raw JSON: decoded only when the
    vectors sidecar cannot stand in for it."""

    d: int
    m: MemoryRecord
    v: msgspec.Raw = msgspec.Raw(b"null")


_decode_lazy_line = msgspec.json.Decoder(_LazyLine)
_NULL: Final = b"null"


class _RecordsSidecar(msgspec.Struct, array_like=True, frozen=True):
    """The snapshot's records again, as one MessagePack blob: what its JSONL lines
    say but the vectors, decoded in one call (a few times faster than 100,000 lines)."""

    docs: list[int]
    records: list[MemoryRecord]
    vector_docs: list[int]


_encode_records = msgspec.msgpack.Encoder()
_decode_records = msgspec.msgpack.Decoder(_RecordsSidecar)


class _RecordsChunk(msgspec.Struct, array_like=True, frozen=True):
    """Some of a snapshot's records (format 2's records sidecar is a run of these,
    each after its length as 4 bytes)."""

    docs: list[int]
    records: list[MemoryRecord]


_decode_chunk = msgspec.msgpack.Decoder(_RecordsChunk)


class _EncodedChunk(msgspec.Struct, array_like=True, frozen=True):
    """A :class:`_RecordsChunk` with its records left encoded (each one's bytes)."""

    docs: list[int]
    records: list[msgspec.Raw]


_decode_encoded_chunk = msgspec.msgpack.Decoder(_EncodedChunk)


def encoded_records(image: Image) -> Iterator[tuple[list[int], list[msgspec.Raw]]] | None:
    """Format 2's records sidecar a chunk at a time, each chunk's doc ids and its
    records' MessagePack bytes (undecoded: views of the sidecar); None when the
    snapshot has no such sidecar. A chunk that does not read raises ValueError (the
    caller reads the records another way: ``read_records``)."""
    if image.extra.get("format", 1) != 2:
        return None
    data = image.sidecars.get(_RECORDS2)
    return None if data is None else _encoded_chunks(memoryview(data))


def _encoded_chunks(view: memoryview) -> Iterator[tuple[list[int], list[msgspec.Raw]]]:
    for at, blob in _chunks_of(view):
        try:
            chunk = _decode_encoded_chunk.decode(blob)
        except msgspec.DecodeError as exc:
            raise ValueError(f"the records sidecar's chunk at byte {at:,}: {exc}") from exc
        if len(chunk.docs) != len(chunk.records):
            raise ValueError(f"the records sidecar's chunk at byte {at:,} holds {len(chunk.docs)} docs and "
                             f"{len(chunk.records)} records")
        yield chunk.docs, chunk.records


def _chunks_of(view: memoryview) -> Iterator[tuple[int, memoryview]]:
    """The records sidecar's chunks, each where it starts and its bytes (after its
    length, 4 bytes; one cut short by the sidecar's end does not decode)."""
    at = 0
    while at < len(view):
        size = int.from_bytes(view[at : at + 4], "little")
        yield at, view[at + 4 : at + 4 + size]
        at += 4 + size


def _records_chunks(pairs: Iterable[tuple[int, MemoryRecord]]) -> Iterator[bytes]:
    encode = _encode_records.encode
    every = iter(pairs)
    while part := list(itertools.islice(every, _RECORDS_CHUNK)):
        blob = encode(_RecordsChunk([doc for doc, _ in part], [record for _, record in part]))
        yield len(blob).to_bytes(4, "little")
        yield blob


def _read_records_chunks(data: bytes | memoryview | None, count: int, name: str) -> SnapshotRecords | None:
    """Format 2's records sidecar when it is there, decodes and holds ``count`` records."""
    if data is None:
        return None
    found = SnapshotRecords([], [], [])
    try:
        for _, blob in _chunks_of(memoryview(data)):
            chunk = _decode_chunk.decode(blob)
            found.docs.extend(chunk.docs)
            found.records.extend(chunk.records)
    except msgspec.DecodeError as exc:
        log.info("scope %s: records sidecar not used (%s); reading the snapshot's lines", name, exc)
        return None
    if len(found.docs) != count or len(found.records) != count or len(set(found.docs)) != count:
        log.info("scope %s: records sidecar holds %d records, the snapshot %d; reading the snapshot's lines",
                 name, len(found.records), count)
        return None
    _share_repeats(found.records)
    return found


def _share_repeats(records: list[MemoryRecord]) -> None:
    """Give the records one object for each ``categories``, ``entities`` or
    ``category_confidences`` tuple they repeat, for each name in them and for each
    ``classified_by``, as records made one by one share them, and ``created_at`` the
    very ``timestamp`` when they are equal: decoding made one of each for every record
    (at 300,000 memories, 40 MB for the categories and entities; 46 MB for the others)."""
    kept = Repeats()
    seen, first, same = kept.get, kept.tuple_of, kept.setdefault
    put = msgspec.structs.force_setattr  # (frozen records, made here: nothing else holds them yet)
    for record in records:
        if record.categories:
            put(record, "categories", seen(record.categories) or first(record.categories))
            confidences = record.category_confidences
            if confidences:
                put(record, "category_confidences", same(confidences, confidences))
        if record.entities:
            put(record, "entities", seen(record.entities) or first(record.entities))
        classified = record.classified_by
        if classified is not None:
            put(record, "classified_by", same(classified, classified))
        if record.created_at == record.timestamp:
            put(record, "created_at", record.timestamp)


def _vectors_sidecar(docs: Sequence[int], matrix: F32) -> bytes:
    """Doc ids and their float32 vectors, raw: ``count`` (8 bytes), the ids (int64),
    then the rows. The snapshot's own CRC of the file guards it."""
    ids = np.asarray(docs, dtype="<i8")
    rows = matrix.astype("<f4", copy=False)
    # one copy of the rows (the matrix is a copy already, taken for the snapshot)
    return b"".join([len(ids).to_bytes(8, "little"), byte_view(ids), byte_view(rows)])


def _read_records_sidecar(data: bytes | memoryview | None, count: int, name: str) -> _RecordsSidecar | None:
    """The records sidecar when it is there, decodes and holds ``count`` records."""
    if data is None:
        return None
    try:
        loaded = _decode_records.decode(data)
    except msgspec.DecodeError as exc:
        log.info("scope %s: records sidecar not used (%s); reading the snapshot's lines", name, exc)
        return None
    if len(loaded.docs) != count or len(loaded.records) != count or len(set(loaded.docs)) != count:
        log.info("scope %s: records sidecar holds %d records, the snapshot %d; reading the snapshot's lines",
                 name, len(loaded.records), count)
        return None
    return loaded


def _read_vectors_sidecar(data: bytes | memoryview | None, docs: Sequence[int], dim: int) -> F32 | None:
    """The matrix of a vectors sidecar when it holds exactly ``docs`` in ``dim``s."""
    if data is None or len(data) < 8:
        return None
    count = int.from_bytes(data[:8], "little")
    if count != len(docs) or len(data) != 8 + count * 8 + count * dim * 4:
        return None
    ids = np.frombuffer(data, dtype="<i8", count=count, offset=8)
    if not np.array_equal(ids, np.asarray(docs, dtype=np.int64)):
        return None
    return np.frombuffer(data, dtype="<f4", offset=8 + count * 8).reshape(count, dim)


def write_snapshot(pairs: Collection[tuple[int, MemoryRecord]], vectors: VectorIndex | None,
                   sidecars: Mapping[str, Sidecar], extra: dict[str, Any], *,
                   graph: bool = True) -> SnapshotData:
    """The snapshot of a scope holding ``pairs`` (doc id, record): its lines and, when
    it holds any memory, ``sidecars`` (the indexes') with the records, vectors and
    (``graph``) HNSW graph sidecars, written in the writer's thread from ``pairs``
    (read twice, in doc order: a list, or a view of records in a file) and a view of
    the vector index taken here (no copy of the vectors)."""
    view: VectorsView | None = vectors.snapshot_view() if vectors is not None and pairs else None

    def all_sidecars() -> dict[str, Sidecar]:  # in the writer's thread, written in this order
        out: dict[str, Sidecar] = {**sidecars, _RECORDS2: _records_chunks(pairs)}
        if view is not None:
            out[_VECTORS2] = view.vector_chunks()
            if graph and view.has_graph:
                out[_GRAPH] = view.write_graph
                out[_GRAPH_META] = view.meta_chunks()  # after the vectors: it names their checksum
        return out

    def records() -> Iterator[bytes]:
        encode = _encode.encode
        for doc, record in pairs:
            yield encode(_Line2(doc, record))

    return SnapshotData(records=records, extra={**extra, "format": SNAPSHOT_FORMAT},
                        sidecars=all_sidecars if pairs else None,
                        required=frozenset({_VECTORS2}) if view is not None else frozenset(),
                        done=None if view is None else view.release)


@dataclass(slots=True)
class SnapshotRecords:
    """The memories of a snapshot: doc ids, records, and the doc ids with a vector."""

    docs: list[int]
    records: list[MemoryRecord]
    vector_docs: list[int]


def check_format(name: str, extra: Mapping[str, Any]) -> None:
    version = extra.get("format", 1)
    if version not in _FORMATS:
        raise ValueError(f"scope {name}: snapshot format {version!r} is not one of {_FORMATS}")


def read_records(name: str, image: Image) -> SnapshotRecords:
    """The memories of ``image``, from the records sidecar when it is usable, else from
    the lines (their vectors left undecoded). Format 2 leaves ``vector_docs`` empty:
    the vectors sidecar names them. The records are copies: the pages of the files
    read leave the process."""
    found = _read_records(name, image)
    let_pages_go(image.records, image.sidecars.get(_RECORDS2), image.sidecars.get(_RECORDS))
    return found


def _read_records(name: str, image: Image) -> SnapshotRecords:
    count = int(image.extra.get("count", -1))
    if image.extra.get("format", 1) == 2:
        chunked = _read_records_chunks(image.sidecars.get(_RECORDS2), count, name)
        if chunked is not None:
            return chunked
    else:
        loaded = _read_records_sidecar(image.sidecars.get(_RECORDS), count, name)
        if loaded is not None:
            return SnapshotRecords(loaded.docs, loaded.records, loaded.vector_docs)
    found = SnapshotRecords([], [], [])
    for number, line in enumerate(image.records):
        try:
            item = _decode_lazy_line.decode(line)
        except msgspec.DecodeError as exc:
            raise ValueError(f"scope {name} snapshot record {number}: {exc}") from exc
        found.docs.append(item.d)
        found.records.append(item.m)
        if bytes(item.v) != _NULL:  # (a Raw holds on to its line: not kept; a Raw never equals bytes)
            found.vector_docs.append(item.d)
    return found


def read_vectors(name: str, image: Image, vector_docs: Sequence[int], dim: int) -> F32:
    """The vectors of ``vector_docs``, one row each: from the vectors sidecar when it
    holds exactly them, else from the lines, in a second pass."""
    matrix = _read_vectors_sidecar(image.sidecars.get(_VECTORS), vector_docs, dim)
    if matrix is not None:
        return matrix
    try:
        lines = (_decode_line.decode(line) for line in image.records)
        by_doc = {line.d: line.v for line in lines if line.v is not None}
        blob = b"".join(by_doc[doc] for doc in vector_docs)
        return np.frombuffer(blob, dtype="<f4").reshape(len(vector_docs), dim)
    except (msgspec.DecodeError, ValueError, KeyError) as exc:
        raise ValueError(f"scope {name} snapshot vectors: {exc}") from exc


def _rows_in_place(path: str | None, checked: bytes | memoryview) -> tuple[mmap.mmap, int] | None:
    """The vectors sidecar at ``path``, whose checked bytes are ``checked``, mapped
    copy-on-write if it is large (``MAP_ROWS_FROM``), and its descriptor (kept for
    the reads of a few rows); else, or if it cannot be mapped so, None (its rows
    are copied)."""
    if path is None or len(checked) < MAP_ROWS_FROM or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        log.info("%s: not mapped (%s); its rows are copied", path, exc)
        return None
    try:
        mapped = mmap.mmap(descriptor, 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError) as exc:
        os.close(descriptor)
        log.info("%s: not mapped (%s); its rows are copied", path, exc)
        return None
    if len(mapped) != len(checked):  # (another file than the one checked: snapshot files never change)
        mapped.close()
        os.close(descriptor)
        return None
    return mapped, descriptor


def restore_vectors(name: str, image: Image, vector_docs: Sequence[int], dim: int,
                    params: Mapping[str, Any], *, graph: bool = True) -> VectorIndex:
    """The vector index of ``image``: format 2 from its vectors sidecar (and its graph
    from usearch's file when ``graph`` and it is usable), format 1 from its vectors
    sidecar or lines (its graph, hnswlib's pickled state, is rebuilt)."""
    if image.extra.get("format", 1) == 2:
        data = image.sidecars.get(_VECTORS2)
        if data is None:
            if image.extra.get("count"):
                raise ValueError(f"scope {name} snapshot: its vectors sidecar is missing")
            return VectorIndex(dim, **params)  # a scope of no memories writes none
        path = image.sidecar_paths.get(_VECTORS2)
        mapping = _rows_in_place(path, data)
        in_place = None
        if mapping is None or path is None:
            ids, matrix = read_vectors_file(data)
        else:
            mapped, descriptor = mapping
            try:
                ids, matrix = read_vectors_file(memoryview(mapped))
            except ValueError:
                os.close(descriptor)
                raise
            in_place = SnapshotRows(path, descriptor, mapped, matrix)  # (the descriptor is its now)
        meta = image.sidecars.get(_GRAPH_META)
        graph_path = image.sidecar_paths.get(_GRAPH)
        saved = image.sidecars.get(_GRAPH)

        def indexed(graph_file: str | None) -> VectorIndex:
            return VectorIndex.from_snapshot(ids, matrix, dim, graph=graph_file,
                                             meta=meta if graph_file is not None else None,
                                             rows_in_place=in_place or False, **params)

        if not graph or meta is None or (graph_path is None and saved is None):
            index = indexed(None)
        elif graph_path is not None:
            index = indexed(graph_path)
        else:
            assert saved is not None
            index = in_temporary_file(saved, indexed)
        if in_place is not None:
            # the checks read the doc ids and every row: their pages leave this process
            # (the page cache keeps them, for the searches that need them)
            in_place.let_go()
        return index
    matrix = read_vectors(name, image, vector_docs, dim)
    sidecar = image.sidecars.get(HNSW_SIDECAR) if graph else None
    # the rows as the index held them when the snapshot was taken (checksummed)
    ids = np.array(vector_docs, dtype=np.int64)
    return VectorIndex.from_sidecar(sidecar, ids, matrix, dim, unit_rows=True, **params)
