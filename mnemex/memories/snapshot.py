"""A scope's snapshot codec, and the bytes a vector travels as.

A snapshot is one JSONL line per memory (its doc id, record and vector: enough to
restore everything) plus sidecars that only make a restart fast: the records again
as one MessagePack blob (decoded in one call), the vectors as raw float32 rows, the
text indexes and the HNSW graph. A sidecar that is missing, stale or damaged is
skipped and the lines are read instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import numpy as np
import numpy.typing as npt

from mnemex.effects import Image, SnapshotData
from mnemex.errors import InvalidInput
from mnemex.index import VectorIndex
from mnemex.index._sidecar import byte_view
from mnemex.memories.protocol import MemoryRecord

__all__ = ["HNSW_SIDECAR", "SNAPSHOT_FORMAT", "TEXT_SIDECARS", "SnapshotRecords", "check_vectors",
           "decode_vector", "encode_vector", "read_records", "read_vectors", "write_snapshot"]

log = logging.getLogger("mnemex.memories")

F32 = npt.NDArray[np.float32]

SNAPSHOT_FORMAT: Final = 1
HNSW_SIDECAR: Final = "hnsw"
TEXT_SIDECARS: Final = ("keyword", "bm25", "entities")
_VECTORS: Final = "vectors"
_RECORDS: Final = "records"
_encode = msgspec.json.Encoder()


def encode_vector(vector: npt.ArrayLike) -> bytes:
    """A vector as the bytes commands carry: float32, little-endian."""
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def decode_vector(data: bytes, dim: int) -> F32:
    """The float32 vector in ``data`` (``dim`` values), or InvalidInput."""
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) != 4 * dim:
        size = len(data) if isinstance(data, bytes | bytearray | memoryview) else type(data).__name__
        raise InvalidInput(f"a vector must be {dim} float32 values ({4 * dim} bytes), got {size}",
                           field="vector")
    vector = np.frombuffer(data, dtype="<f4").astype(np.float32)
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


def write_snapshot(pairs: Sequence[tuple[int, MemoryRecord]], vectors: VectorIndex | None,
                   sidecars: dict[str, bytes], extra: dict[str, Any]) -> SnapshotData:
    """The snapshot of a scope holding ``pairs`` (doc id, record): its lines and, when
    it holds any memory, ``sidecars`` (the indexes') with the records and vectors
    sidecars, encoded in the writer's thread from copies taken here."""
    vector_docs: list[int] = []
    matrix: F32 | None = None
    if vectors is not None and len(vectors):
        vector_docs = [doc for doc, _ in pairs if doc in vectors]
        matrix = vectors.vectors(vector_docs)

    def all_sidecars() -> dict[str, bytes]:  # in the writer's thread: only copies are read
        records = _encode_records.encode(_RecordsSidecar([doc for doc, _ in pairs],
                                                         [record for _, record in pairs], vector_docs))
        if matrix is None:
            return {**sidecars, _RECORDS: records}
        return {**sidecars, _RECORDS: records, _VECTORS: _vectors_sidecar(vector_docs, matrix)}

    def records() -> Iterator[bytes]:
        encode = _encode.encode
        row_of = {doc: row for row, doc in enumerate(vector_docs)}
        for doc, record in pairs:
            row = row_of.get(doc)
            vector = None if row is None or matrix is None else matrix[row].astype("<f4").tobytes()
            yield encode(_Line(doc, record, vector))

    return SnapshotData(records=records, extra=extra, sidecars=all_sidecars if pairs else None)


@dataclass(slots=True)
class SnapshotRecords:
    """The memories of a snapshot: doc ids, records, and the doc ids with a vector."""

    docs: list[int]
    records: list[MemoryRecord]
    vector_docs: list[int]


def check_format(name: str, extra: Mapping[str, Any]) -> None:
    version = extra.get("format", SNAPSHOT_FORMAT)
    if version != SNAPSHOT_FORMAT:
        raise ValueError(f"scope {name}: snapshot format {version!r} is not {SNAPSHOT_FORMAT}")


def read_records(name: str, image: Image) -> SnapshotRecords:
    """The memories of ``image``, from the records sidecar when it is usable, else from
    the lines (their vectors left undecoded)."""
    loaded = _read_records_sidecar(image.sidecars.get(_RECORDS), int(image.extra.get("count", -1)), name)
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
