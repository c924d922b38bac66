"""Snapshots: an actor's whole state at one sequence number.

``snapshot-<seq>.jsonl`` is one header line, then one line per record (the
records are opaque single-line bytes given by the behaviour)::

    {"format":1,"kind":"scope","key":["chat","alice"],"seq":120,"ts":<ms>,
     "created":<ms>,"count":2,"bytes":57,"crc":<crc32 of the body>,"extra":{...}}
    <record>
    <record>

``ts`` is the time of the last command the snapshot includes, ``created`` when
it was written, ``count``/``bytes``/``crc`` describe the body (every byte after
the header line). When binary sidecars are written (``snapshot-<seq>.<name>.bin``,
an optimisation such as a serialized vector index) the header also carries
``"sidecars":{"<name>":{"bytes":..,"crc":..}}`` so a damaged one is noticed, and
``"required":[<name>...]`` for those without which the snapshot cannot be restored
(a snapshot whose required sidecar is missing or damaged is skipped like a damaged
one). A sidecar may be given as a writer that streams it to its file.

The body is written as it is encoded (no whole snapshot in memory): the header
line is first written with its body fields at their widest and rewritten once the
body is known, padded with spaces to the same length (JSON allows them).

Files are written to ``.tmp``, fsynced, renamed and the folder fsynced; the
sidecars first, so a snapshot's sidecars are complete whenever it exists. A
snapshot failing its checks is skipped (with a warning) for the next older one;
a missing or damaged sidecar is simply left out.
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import tempfile
import zlib
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import orjson

from mnemex.errors import CorruptData, InvalidInput, StorageError
from mnemex.persistence._files import (
    describe_os_error,
    fsync_dir,
    let_pages_go_from,
    log,
    remove_quietly,
    write_all,
    write_atomic,
)

__all__ = [
    "FORMAT",
    "Sidecar",
    "SidecarWriter",
    "SnapshotHeader",
    "SnapshotLines",
    "damaged_snapshot_line",
    "decode_header",
    "decode_snapshot",
    "encode_snapshot",
    "list_snapshots",
    "load_newest_snapshot",
    "read_sidecars",
    "sidecar_problems",
    "in_temporary_file",
    "let_pages_go",
    "sidecar_bytes",
    "start_newest_sidecar_reads",
    "sidecar_name",
    "write_snapshot_stream",
    "snapshot_name",
    "write_snapshot_files",
]

FORMAT = 1
"""Snapshot format version written; readers refuse a newer one."""

_T = TypeVar("_T")

SidecarWriter = Callable[[str], None]
"""Writes a sidecar into the file at the path it is given (a library's own save)."""

Sidecar = bytes | SidecarWriter | Iterable[bytes | memoryview]
"""A sidecar as a snapshot is given it: bytes, a writer, or chunks of bytes (read
once, as they are written)."""

_SNAPSHOT = re.compile(r"snapshot-(0|[1-9][0-9]*)\.jsonl")
_SIDECAR_NAME = re.compile(r"[a-z0-9_-]{1,64}")
_MAX_INT = 2**63 - 1
_CHUNK_RECORDS = 2_048
_NEWLINE = 10
_SCAN = 1 << 23  # bytes looked at per step when counting lines
_MAX_HEADER_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """The first line of a snapshot file. Times are epoch milliseconds."""

    format: int
    kind: str
    key: tuple[str, ...]
    seq: int
    """Sequence number of the last command the snapshot includes."""
    ts: int
    """Time of that command."""
    created: int
    """When the snapshot was written."""
    count: int
    """Record lines after the header."""
    bytes: int
    """Bytes of the body (every record line and its newline)."""
    crc: int
    """zlib.crc32 of the body."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Whatever the behaviour stored beside its records (counts, embedder name)."""
    sidecars: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Sidecar name -> (bytes, crc32), for each sidecar written with the snapshot."""
    required: tuple[str, ...] = ()
    """Sidecars without which the snapshot cannot be restored."""


def snapshot_name(seq: int) -> str:
    """File name of the snapshot at ``seq``."""
    return f"snapshot-{seq}.jsonl"


def sidecar_name(seq: int, name: str) -> str:
    """File name of sidecar ``name`` of the snapshot at ``seq``."""
    return f"snapshot-{seq}.{name}.bin"


def list_snapshots(folder: Path) -> list[tuple[int, Path]]:
    """The snapshot files in ``folder`` as ``(seq, path)``, newest first."""
    return sorted(_iter_snapshots(folder), reverse=True)


def _iter_snapshots(folder: Path) -> Iterator[tuple[int, Path]]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    for name in names:
        match = _SNAPSHOT.fullmatch(name)
        if match is not None:
            yield int(match.group(1)), folder / name


def _check_int(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= _MAX_INT:
        raise InvalidInput(f"snapshot {what} is {value!r}; it must be an int from 0 to 2**63-1", field=what)
    return value


def encode_snapshot(kind: str, key: tuple[str, ...], seq: int, ts: int, records: Iterable[bytes], *,
                    created: int, extra: Mapping[str, object] | None = None,
                    sidecars: Mapping[str, bytes] | None = None,
                    required: Iterable[str] = ()) -> tuple[bytes, list[bytes]]:
    """The header line (with its newline) and the body chunks of a snapshot.

    ``records`` may be a generator: it is read a chunk at a time, so only the
    joined chunks are held, not every record line beside them as well.

    Raises InvalidInput if a record holds a newline or is not bytes, ``extra``
    does not serialise to a JSON object, or a sidecar name is not ``[a-z0-9_-]+``.
    """
    for what, value in (("seq", seq), ("ts", ts), ("created", created)):
        _check_int(value, what)
    body: list[bytes] = []
    count = 0
    lines = iter(records)
    # Chunks of records, so that no single C call holds the GIL for long (the
    # runtime's event loop thread keeps running while a worker writes this).
    while part := list(itertools.islice(lines, _CHUNK_RECORDS)):
        body.append(_check_records_chunk(part, count))
        count += len(part)
    crc = 0
    size = 0
    for chunk in body:
        crc = zlib.crc32(chunk, crc)
        size += len(chunk)
    header: dict[str, object] = {
        "format": FORMAT, "kind": kind, "key": list(key), "seq": seq, "ts": ts, "created": created,
        "count": count, "bytes": size, "crc": crc, "extra": dict(extra or {}),
    }
    if sidecars:
        described: dict[str, dict[str, int]] = {}
        for name, blob in sidecars.items():
            _check_sidecar_name(name, blob)
            if callable(blob):
                raise InvalidInput(f"sidecar {name!r}: encode_snapshot takes bytes (see sidecar_bytes)",
                                   field="sidecars")
            described[name] = {"bytes": len(blob), "crc": zlib.crc32(blob)}
        header["sidecars"] = described
    _add_required(header, required, sidecars or {})
    try:
        line = orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError as exc:
        raise InvalidInput(f"snapshot extra {extra!r} does not serialise to JSON: {exc}",
                           field="extra") from exc
    return line, body


def _add_required(header: dict[str, object], required: Iterable[str], sidecars: Mapping[str, object]) -> None:
    names = sorted(set(required))
    absent = [name for name in names if name not in sidecars]
    if absent:
        raise InvalidInput(f"required sidecar(s) {', '.join(absent)} not given", field="sidecars")
    if names:
        header["required"] = names


def _check_records_chunk(part: list[bytes], count: int) -> bytes:
    """``part`` joined into lines; InvalidInput if a record is not bytes or holds a newline."""
    try:
        chunk = b"\n".join(part) + b"\n"
    except TypeError as exc:
        raise InvalidInput(f"snapshot records must be bytes: {exc}", field="records") from exc
    if chunk.count(b"\n") != len(part):
        at = next(i for i, record in enumerate(part) if b"\n" in record)
        raise InvalidInput(f"snapshot record {count + at} holds a newline; each record must be one "
                           f"line (starts {bytes(part[at][:60])!r})", field="records")
    return chunk


def _check_sidecar_name(name: object, blob: object) -> None:
    if not isinstance(name, str) or not _SIDECAR_NAME.fullmatch(name):
        raise InvalidInput(f"sidecar name {name!r} must be 1 to 64 characters of [a-z0-9_-]",
                           field="sidecars")
    usable = isinstance(blob, bytes | bytearray | memoryview | Iterable) or callable(blob)
    if isinstance(blob, str) or not usable:
        raise InvalidInput(f"sidecar {name!r} must be bytes, chunks of bytes or a writer, not "
                           f"{type(blob).__name__}", field="sidecars")


_READ_BACK = 1 << 23


def _write_sidecar_file(path: Path, blob: Sidecar | bytearray | memoryview) -> tuple[int, int]:
    """Write one sidecar atomically (``.tmp``, fsync, rename; the folder is synced by
    the caller); its (bytes, crc32). A writer's file is read back for its checksum."""
    if isinstance(blob, bytes | bytearray | memoryview):
        write_atomic(path, [blob if isinstance(blob, bytes) else bytes(blob)], sync_dir=False)
        return len(blob), zlib.crc32(blob)
    if not callable(blob):
        crc = 0

        def checked(chunks: Iterable[Any]) -> Iterator[bytes | bytearray | memoryview]:
            nonlocal crc
            for chunk in chunks:
                if not isinstance(chunk, bytes | bytearray | memoryview):
                    raise InvalidInput(f"sidecar {path.name}: a chunk is {type(chunk).__name__}, "
                                       f"not bytes", field="sidecars")
                crc = zlib.crc32(chunk, crc)
                yield chunk

        size = write_atomic(path, checked(blob), sync_dir=False)
        return size, crc
    tmp = path.with_name(path.name + ".tmp")
    crc = size = 0
    try:
        blob(str(tmp))
        with open(tmp, "rb", buffering=0) as handle:
            while chunk := handle.read(_READ_BACK):
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    return size, crc


def sidecar_bytes(blob: Sidecar | bytearray | memoryview) -> bytes:
    """A sidecar as bytes: chunks joined, a writer's output read back from a temporary
    file (for stores and simulations that keep snapshots in memory)."""
    if isinstance(blob, bytes | bytearray | memoryview):
        return bytes(blob)
    if not callable(blob):
        return b"".join(blob)
    handle, name = tempfile.mkstemp(prefix="mnemex-sidecar-")
    os.close(handle)
    try:
        blob(name)
        return Path(name).read_bytes()
    finally:
        os.unlink(name)


def in_temporary_file(blob: bytes | memoryview, load: Callable[[str], _T]) -> _T:
    """``load(path)`` of a temporary file holding ``blob``: for a library that reads
    only files (hnswlib's ``load_index``), given a sidecar kept in memory."""
    with tempfile.TemporaryDirectory(prefix="mnemex-sidecar-") as folder:
        path = Path(folder) / "sidecar.bin"
        path.write_bytes(blob)
        return load(str(path))


def write_snapshot_stream(folder: Path, records: Iterable[bytes], *, kind: str, key: tuple[str, ...],
                          seq: int, ts: int, created: int, extra: Mapping[str, object] | None = None,
                          sidecars: Mapping[str, Sidecar] | None = None,
                          required: Iterable[str] = ()) -> int:
    """Write a snapshot into ``folder`` as :func:`encode_snapshot` would encode it,
    without holding it: sidecars first (each streamed to its file, checksummed),
    then the body a chunk of records at a time, then its header rewritten in place;
    fsynced and renamed. Returns the body's size. InvalidInput as encode_snapshot
    (nothing is left behind); OSError escapes."""
    for what, value in (("seq", seq), ("ts", ts), ("created", created)):
        _check_int(value, what)
    sidecars = sidecars or {}
    for name, blob in sidecars.items():
        _check_sidecar_name(name, blob)
    header: dict[str, object] = {
        "format": FORMAT, "kind": kind, "key": list(key), "seq": seq, "ts": ts, "created": created,
        "count": _MAX_INT, "bytes": _MAX_INT, "crc": _MAX_INT, "extra": dict(extra or {}),
    }
    if sidecars:
        header["sidecars"] = {name: {"bytes": _MAX_INT, "crc": _MAX_INT} for name in sidecars}
    _add_required(header, required, sidecars)
    try:
        widest = orjson.dumps(header)
    except TypeError as exc:
        raise InvalidInput(f"snapshot extra {extra!r} does not serialise to JSON: {exc}",
                           field="extra") from exc
    if sidecars:
        described: dict[str, dict[str, int]] = {}
        for name, blob in sidecars.items():
            size, crc = _write_sidecar_file(folder / sidecar_name(seq, name), blob)
            described[name] = {"bytes": size, "crc": crc}
        header["sidecars"] = described
        fsync_dir(folder)  # the sidecars are durable before the snapshot that names them
    path = folder / snapshot_name(seq)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            write_all(fd, [b" " * len(widest) + b"\n"])
            crc = size = count = 0
            lines = iter(records)
            while part := list(itertools.islice(lines, _CHUNK_RECORDS)):
                chunk = _check_records_chunk(part, count)
                write_all(fd, [chunk])
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
                count += len(part)
            header |= {"count": count, "bytes": size, "crc": crc}
            line = orjson.dumps(header)
            os.pwrite(fd, line.ljust(len(widest)), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    fsync_dir(folder)
    return size


def _field(raw: dict[str, Any], name: str, kind: type, source: str) -> Any:
    value: Any = raw.get(name)
    if type(value) is not kind or (isinstance(value, int) and not 0 <= value <= _MAX_INT):
        raise CorruptData(f"{source}: header field {name!r} is {value!r}, expected {kind.__name__}")
    return value


def decode_header(line: bytes, source: str) -> SnapshotHeader:
    """The header on a snapshot's first ``line``; CorruptData if it is not one
    this version can read."""
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CorruptData(f"{source}: header line is not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise CorruptData(f"{source}: header line is not a JSON object")
    version = _field(raw, "format", int, source)
    if version != FORMAT:
        raise CorruptData(f"{source}: snapshot format {version} is not readable by this version "
                          f"(it reads format {FORMAT})")
    key = _field(raw, "key", list, source)
    if not key or not all(isinstance(part, str) for part in key):
        raise CorruptData(f"{source}: header key {key!r} is not a list of strings")
    sidecars: dict[str, tuple[int, int]] = {}
    for name, described in (raw.get("sidecars") or {}).items():
        if not isinstance(described, dict):
            raise CorruptData(f"{source}: header sidecar {name!r} is {described!r}")
        sidecars[name] = (_field(described, "bytes", int, source), _field(described, "crc", int, source))
    required = raw.get("required") or []
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        raise CorruptData(f"{source}: header required {required!r} is not a list of sidecar names")
    return SnapshotHeader(
        format=version, kind=_field(raw, "kind", str, source), key=tuple(key),
        seq=_field(raw, "seq", int, source), ts=_field(raw, "ts", int, source),
        created=_field(raw, "created", int, source), count=_field(raw, "count", int, source),
        bytes=_field(raw, "bytes", int, source), crc=_field(raw, "crc", int, source),
        extra=_field(raw, "extra", dict, source), sidecars=sidecars, required=tuple(required),
    )


class SnapshotLines(Sequence[bytes]):
    """The record lines of a snapshot body, each cut out of the file's bytes when it
    is read: a restore that decodes line after line holds one line at a time beside
    the file, not a second copy of every line (which for a large snapshot is
    hundreds of MB of fresh memory, and most of the time of reading it). Where the
    lines are is found on first use; a restore served by sidecars never pays it."""

    __slots__ = ("_count", "_data", "_edges", "_start")

    def __init__(self, data: bytes | mmap.mmap, start: int) -> None:
        """``data[start:]`` is the body: lines, each ending with a newline."""
        self._data, self._start = data, start
        body = np.frombuffer(data, dtype=np.uint8, offset=start)
        count = 0
        for at in range(0, len(body), _SCAN):
            count += int(np.count_nonzero(body[at : at + _SCAN] == _NEWLINE))
            # (a mapped file's pages counted leave the process: the sidecars serve most restores)
            _let_range_go(data, start + at, start + min(len(body), at + _SCAN))
        self._count = count
        self._edges: list[int] | None = None  # line i lies between edges i and i + 1

    def _where(self) -> list[int]:
        if self._edges is None:
            body = np.frombuffer(self._data, dtype=np.uint8, offset=self._start)
            newlines = np.flatnonzero(body == _NEWLINE)
            self._edges = [self._start - 1, *(newlines + self._start).tolist()]
        return self._edges

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("snapshot line index out of range")
        edges = self._where()
        return self._data[edges[index] + 1 : edges[index + 1]]

    def __iter__(self) -> Iterator[bytes]:
        data, edges = self._data, self._where()
        for at in range(len(edges) - 1):
            yield data[edges[at] + 1 : edges[at + 1]]


def let_pages_go(*parts: object) -> None:
    """The pages of each of ``parts`` that is a file mapped read-only (a sidecar's view,
    a snapshot's lines) leave the process, once a restore has read what it needed of
    them: the page cache keeps them, and a later read maps them back (nothing is lost).
    Other parts (bytes, a writable mapping) are left alone."""
    for part in parts:
        data = part._data if isinstance(part, SnapshotLines) else part
        if isinstance(data, memoryview):
            data = data.obj
        if isinstance(data, mmap.mmap):
            _let_range_go(data, 0, len(data))


def _let_range_go(data: object, begin: int, end: int) -> None:
    """Bytes ``[begin, end)`` of ``data``, if it is a read-only mapping, leave the
    process (the whole pages around them)."""
    if not isinstance(data, mmap.mmap) or end <= begin:
        return
    with memoryview(data) as view:
        if not view.readonly:  # (a private copy's pages may hold writes)
            return
    let_pages_go_from(data, begin, end)


def decode_snapshot(data: bytes | mmap.mmap, source: str) -> tuple[SnapshotHeader, Sequence[bytes]]:
    """Header and records of a whole snapshot file; CorruptData if the header,
    the byte count, the record count or the checksum disagree with the body."""
    end = data.find(b"\n")
    if end < 0:
        raise CorruptData(f"{source}: no complete header line ({len(data):,} bytes)")
    header = decode_header(data[:end], source)
    body = memoryview(data)[end + 1:]
    if len(body) != header.bytes:
        raise CorruptData(f"{source}: body is {len(body):,} bytes; the header says {header.bytes:,}")
    crc = _checksum(body, data, end + 1)  # (a mapped file's pages let go as they are read)
    if crc != header.crc:
        raise CorruptData(f"{source}: body checksum {crc} does not match the header's {header.crc}")
    if body and data[-1:] != b"\n":
        raise CorruptData(f"{source}: body does not end with a newline")
    records = SnapshotLines(data, end + 1)
    if len(records) != header.count:
        raise CorruptData(f"{source}: body has {len(records):,} records; the header says {header.count:,}")
    return header, records


def damaged_snapshot_line(data: bytes | mmap.mmap) -> tuple[int | None, str]:
    """Where in the snapshot ``data``, which failed :func:`decode_snapshot`, the
    damage is: ``(1-based line or None, a clause saying so)`` to add to its error.

    The header line is line 1. The body has one checksum, so a changed byte is
    pinned to a line only when that line is cut short (no newline) or no longer
    parses as JSON while other lines do (records are the behaviour's bytes, in
    practice JSON); otherwise the clause says the line cannot be told."""
    end = data.find(b"\n")
    if end < 0:
        return 1, ""
    try:
        header = decode_header(data[:end], "")
    except CorruptData:
        return 1, ""
    body = data[end + 1:]
    if len(body) == header.bytes and zlib.crc32(body) == header.crc:
        return 1, "; the body matches the header's checksum, so the header line (line 1) is what changed"
    lines = body.split(b"\n")
    last = len(lines) + 1  # the header, then one line per piece
    if lines[-1]:
        return last, f"; line {last} is cut short (no newline at its end)"
    lines.pop()
    unparsed = []
    for number, line in enumerate(lines, 2):
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            unparsed.append(number)
    if unparsed and len(unparsed) < len(lines):
        more = f" (and {len(unparsed) - 1:,} more)" if len(unparsed) > 1 else ""
        return unparsed[0], f"; line {unparsed[0]}{more} no longer parses as JSON: the damage is there"
    if not lines:
        return None, ""
    return None, (f"; one checksum covers lines 2 to {len(lines) + 1:,}, so which of them changed (or "
                  f"whether the header's checksum did) cannot be told")


def write_snapshot_files(folder: Path, seq: int, header_line: bytes, body: Sequence[bytes],
                         sidecars: Mapping[str, bytes] | None = None) -> None:
    """Write a snapshot (sidecars first) atomically into ``folder``; OSError escapes."""
    if sidecars:
        for name, blob in sidecars.items():
            write_atomic(folder / sidecar_name(seq, name), [bytes(blob)], sync_dir=False)
        fsync_dir(folder)  # the sidecars are durable before the snapshot that names them
    write_atomic(folder / snapshot_name(seq), [header_line, *body])


def read_sidecars(folder: Path, header: SnapshotHeader) -> dict[str, bytes | memoryview]:
    """The sidecars of the snapshot ``header`` that exist and pass their check, read
    and checked in parallel threads (file reads and CRC-32 of large buffers run
    without the GIL)."""
    with SidecarReads(folder, header) as reads:
        return reads.result()


class SidecarReads:
    """The reads of one snapshot's sidecars, started in threads at once, so that a
    caller can read and check the snapshot itself meanwhile (see
    :func:`start_newest_sidecar_reads`). Use as a context manager."""

    def __init__(self, folder: Path, header: SnapshotHeader) -> None:
        self.header = header
        items = list(header.sidecars.items())
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(4, len(items))),
                                        thread_name_prefix="mnemex-sidecar")
        self._reads = [self._pool.submit(_read_sidecar, folder, header.seq, item) for item in items]

    def __enter__(self) -> SidecarReads:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the reads under way; drop those not started."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def result(self) -> dict[str, bytes | memoryview]:
        """Every sidecar that exists and passes its check, by name (waits for them)."""
        read = [future.result() for future in self._reads]
        return {name: blob for name, blob in read if blob is not None}


def start_newest_sidecar_reads(folder: Path) -> SidecarReads | None:
    """Start reading the sidecars that the newest snapshot's header line names,
    before the snapshot is read and checked; None when there is no such header.
    The caller uses them only if that snapshot is the one it loads."""
    snapshots = list_snapshots(folder)
    if not snapshots:
        return None
    seq, path = snapshots[0]
    try:
        with open(path, "rb") as handle:
            line = handle.readline(_MAX_HEADER_BYTES)
        header = decode_header(line.rstrip(b"\n"), str(path))
    except (OSError, CorruptData):
        return None  # the full load says what is wrong with it
    if header.seq != seq or not header.sidecars:
        return None
    return SidecarReads(folder, header)


def map_file(path: Path) -> bytes | mmap.mmap:
    """The content of ``path``, mapped read-only into memory (snapshot files and
    sidecars never change once written): reading a large one costs page mappings
    instead of a copy, about three times less. An empty file is ``b""``."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return b""
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def _read_sidecar(folder: Path, seq: int, item: tuple[str, tuple[int, int]],
                  ) -> tuple[str, bytes | memoryview | None]:
    name, _described = item
    blob, problem = _check_sidecar(folder, seq, item)
    if blob is None:
        log.warning("%s: sidecar %s; loading without it", folder / sidecar_name(seq, name), problem)
    return name, blob


def _check_sidecar(folder: Path, seq: int, item: tuple[str, tuple[int, int]],
                   ) -> tuple[bytes | memoryview | None, str]:
    """The sidecar's bytes if they pass the header's check, else None and why not."""
    name, (size, crc) = item
    try:
        mapped = map_file(folder / sidecar_name(seq, name))
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"unreadable: {describe_os_error(exc)}"
    blob = mapped if isinstance(mapped, bytes) else memoryview(mapped)
    if len(blob) != size:
        return None, (f"is {len(blob):,} bytes; the header says {size:,} "
                      f"({'truncated' if len(blob) < size else 'bytes added'})")
    found = _checksum(blob, mapped)
    if found != crc:
        return None, f"checksum {found} does not match the header's {crc}"
    return blob, ""


_CHECK_CHUNK = 64 * 2**20  # bytes of a mapped sidecar checked at a time (a multiple of the page size)


def _checksum(blob: bytes | memoryview, mapped: bytes | mmap.mmap, at: int = 0) -> int:
    """CRC-32 of ``blob``, which starts at byte ``at`` of ``mapped``. A mapped file is
    read a chunk at a time, each chunk's pages let go of once read (they stay in the
    page cache and come back when the restore reads them): the check no longer holds
    every sidecar's pages in the process at once (~3 GB at 1,000,000 memories, the
    peak of a restart)."""
    if not isinstance(mapped, mmap.mmap):
        return zlib.crc32(blob)
    crc = 0
    for start in range(0, len(blob), _CHECK_CHUNK):
        stop = min(len(blob), start + _CHECK_CHUNK)
        crc = zlib.crc32(blob[start:stop], crc)
        _let_range_go(mapped, at + start, at + stop)
    return crc


def sidecar_problems(folder: Path, header: SnapshotHeader) -> dict[str, str]:
    """Why each sidecar of the snapshot ``header`` that is missing or fails its
    check cannot be used, by name (``"missing"``, ``"is 10 bytes; the header
    says 12 (truncated)"``...); empty when every one is fine. Logs nothing."""
    problems: dict[str, str] = {}
    for item in header.sidecars.items():
        blob, problem = _check_sidecar(folder, header.seq, item)
        if blob is None:
            problems[item[0]] = problem
    return problems


def _decode_own_snapshot(data: bytes | mmap.mmap, path: Path, seq: int, kind: str, key: tuple[str, ...],
                         ) -> tuple[SnapshotHeader, Sequence[bytes]]:
    header, records = decode_snapshot(data, str(path))
    if header.seq != seq:
        raise CorruptData(f"{path}: header seq {header.seq} does not match the file name")
    if header.kind != kind or header.key != key:
        raise CorruptData(f"{path}: header belongs to {header.kind} {list(header.key)!r}, "
                          f"not {kind} {list(key)!r}")
    return header, records


def load_newest_snapshot(folder: Path, kind: str, key: tuple[str, ...], *, max_ts: int | None = None,
                         skip: Container[int] = (),
                         ) -> tuple[SnapshotHeader, Sequence[bytes]] | None:
    """The newest snapshot in ``folder`` that passes its checks and belongs to
    ``kind``/``key`` (and, with ``max_ts``, includes nothing later than it), or
    None; snapshots whose seq is in ``skip`` are passed over. Each snapshot skipped
    for damage is logged as a warning."""
    for seq, path in list_snapshots(folder):
        if seq in skip:
            continue
        try:
            data = map_file(path)
        except OSError as exc:
            log.warning("%s: snapshot unreadable, trying an older one: %s", path, describe_os_error(exc))
            continue
        try:
            header, records = _decode_own_snapshot(data, path, seq, kind, key)
        except CorruptData as exc:
            log.warning("skipping a damaged snapshot, trying an older one: %s", exc)
            continue
        if max_ts is not None and header.ts > max_ts:
            continue
        return header, records
    return None


def snapshot_storage_error(folder: Path, seq: int, exc: OSError) -> StorageError:
    """The StorageError for a snapshot write that the disk refused."""
    error = StorageError(f"could not write snapshot {folder / snapshot_name(seq)}: {describe_os_error(exc)}; "
                         f"the previous snapshot and the journal are intact")
    error.__cause__ = exc
    return error
