"""Moving memories between data directories: the export format, and a scope taking
whole records in (``ImportMemories``) or giving its vectors out (``GetVectors``).

An export is JSONL. The first line is a header; then one line per memory, each
naming its scope, carrying the whole record (id, times, status, history, links...)
and its vector with the embedder that made it::

    {"format": "mnemex-export/1", "exported_at": 1764000000.0, "scopes": 1, "memories": 2}
    {"format": "mnemex-export/1", "app_name": "chat", "user_id": "alice", "memory": {...},
     "embedder": "minilm-l6-v2-int8", "dim": 384, "vector": "<base64 float32 LE>"}

``vector`` is null (and ``embedder`` too) for a memory exported without one. Readers
tolerate fields they do not know (later versions may add some) but refuse another
``format``. The header's counts let an import refuse a file that was cut short.

Importing stores each record as given, so ids, statuses and history survive the
move; a record whose id or exact content the scope holds already is skipped, which
makes importing the same file twice harmless. Pure: no trio; the runtime's side
(reading pages, embedding again what needs it) is in ``ref.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mnemex._checks import check_id
from mnemex._time import check_seconds
from mnemex.errors import InvalidInput, TooLarge
from mnemex.memories.fields import MAX_FIELD_BYTES, check_record
from mnemex.memories.protocol import GetVectors, Imported, ImportMemories, MemoryRecord, Vectors
from mnemex.memories.snapshot import decode_vector, encode_vector

if TYPE_CHECKING:
    from mnemex.memories.behaviour import ScopeMemory

__all__ = [
    "EXPORT_FORMAT",
    "Export",
    "ExportHeader",
    "ExportedMemory",
    "ImportReport",
    "check_exported",
    "encode_line",
    "import_records",
    "read_export",
    "vectors_of",
]

EXPORT_FORMAT: Final = "mnemex-export/1"
"""The ``format`` of every line of an export this version writes and reads."""


class ExportHeader(msgspec.Struct, frozen=True, kw_only=True):
    """The first line of an export: when it was written (seconds since the epoch)
    and how many scopes and memories follow."""

    format: str = EXPORT_FORMAT
    exported_at: float
    scopes: int
    memories: int


class ExportedMemory(msgspec.Struct, frozen=True, kw_only=True):
    """One memory of an export: its scope, its whole record, and its vector (float32
    little-endian; base64 in JSON) with the embedder that made it and its ``dim``, or
    None when it was exported without one."""

    format: str = EXPORT_FORMAT
    app_name: str
    user_id: str
    memory: MemoryRecord
    embedder: str | None = None
    dim: int = 0
    vector: bytes | None = None


class ImportReport(msgspec.Struct, frozen=True, kw_only=True):
    """What an import did: the scopes it wrote to, the memories ``added`` and those
    ``skipped`` (their id or content was there already), and how many of the added
    ones were embedded again (exported without a vector, or by another embedder
    than the importing runtime's)."""

    scopes: int = 0
    added: int = 0
    skipped: int = 0
    reembedded: int = 0


@dataclass(frozen=True, slots=True)
class Export:
    """An export read and checked: its header, and each memory with its line number."""

    header: ExportHeader
    memories: list[tuple[int, ExportedMemory]]


_encoder: Final = msgspec.json.Encoder()
_decode_header: Final = msgspec.json.Decoder(ExportHeader)
_decode_memory: Final = msgspec.json.Decoder(ExportedMemory)


class _Format(msgspec.Struct, frozen=True):
    format: Any = None


_decode_format: Final = msgspec.json.Decoder(_Format)


def encode_line(item: ExportHeader | ExportedMemory) -> str:
    """One line of an export, with its newline."""
    return _encoder.encode(item).decode("utf-8") + "\n"


def check_exported(item: Any, max_content_bytes: int, max_metadata_bytes: int) -> ExportedMemory:
    """``item`` with its record checked as a scope checks it (``check_record``) and its
    vector against its embedder and ``dim``; InvalidInput naming the field
    (``memory.content``, ``vector``...) otherwise."""
    if not isinstance(item, ExportedMemory):
        raise InvalidInput(f"an exported memory must be an ExportedMemory, got {type(item).__name__}",
                           field="")
    if item.format != EXPORT_FORMAT:
        raise InvalidInput(_other_format(item.format), field="format")
    for what in ("app_name", "user_id"):
        check_id(getattr(item, what), what, MAX_FIELD_BYTES)
    try:
        record = check_record(item.memory, max_content_bytes, max_metadata_bytes)
    except InvalidInput as exc:
        exc.field = "memory" + (f".{exc.field}" if exc.field else "")
        raise
    if item.vector is None:
        return item if record == item.memory else msgspec.structs.replace(item, memory=record)
    check_id(item.embedder, "embedder", MAX_FIELD_BYTES)
    if isinstance(item.dim, bool) or not isinstance(item.dim, int) or not 1 <= item.dim <= 65_536:
        raise InvalidInput(f"dim must be an integer in 1..65,536 with a vector, got {item.dim!r}",
                           field="dim")
    decode_vector(item.vector, item.dim)
    return item if record == item.memory else msgspec.structs.replace(item, memory=record)


def read_export(lines: Iterable[str | bytes], max_content_bytes: int, max_metadata_bytes: int) -> Export:
    """Every line of an export decoded and checked (blank lines are ignored). A line
    that fails is InvalidInput naming it (``line 7: ...``, field ``line 7`` or
    ``line 7.memory.content``); so is a file whose memories or scopes are not as
    many as its header says (a file cut short)."""
    header: ExportHeader | None = None
    memories: list[tuple[int, ExportedMemory]] = []
    scopes: set[tuple[str, str]] = set()
    number = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            if header is None:
                header = _header(line)
                continue
            item = check_exported(_decoded(_decode_memory, line, "a memory"), max_content_bytes,
                                  max_metadata_bytes)
        except InvalidInput as exc:
            raise _at_line(exc, number) from exc
        memories.append((number, item))
        scopes.add((item.app_name, item.user_id))
    if header is None:
        raise InvalidInput(f"the export is empty: its first line must be a header such as "
                           f'{{"format": "{EXPORT_FORMAT}", "exported_at": ..., "scopes": ..., '
                           f'"memories": ...}}', field="line 1")
    if (len(memories), len(scopes)) != (header.memories, header.scopes):
        raise InvalidInput(f"the header says {header.memories:,} memories of {header.scopes:,} scopes "
                           f"follow, but the file holds {len(memories):,} of {len(scopes):,}: it was cut "
                           f"short or edited (fix the header's counts if lines were removed on purpose)",
                           field=f"line {number + 1}")
    return Export(header, memories)


def _header(line: str | bytes) -> ExportHeader:
    header: ExportHeader = _decoded(_decode_header, line, "the header")
    if header.format != EXPORT_FORMAT:
        raise InvalidInput(_other_format(header.format), field="format")
    return header


def _decoded(decoder: msgspec.json.Decoder[Any], line: str | bytes, what: str) -> Any:
    try:
        return decoder.decode(line)
    except msgspec.DecodeError as exc:
        try:
            found = _decode_format.decode(line).format
        except msgspec.DecodeError:
            found = EXPORT_FORMAT
        if found != EXPORT_FORMAT:
            raise InvalidInput(_other_format(found), field="format") from exc
        raise InvalidInput(f"not {what} of an export: {exc}", field="") from exc


def _other_format(found: Any) -> str:
    return (f"format is {found!r}; this mnemex reads {EXPORT_FORMAT!r} (a file written by a newer mnemex "
            f"needs that version to import it)")


def _at_line(exc: InvalidInput, number: int) -> InvalidInput:
    where = f"line {number}" + (f".{exc.field}" if exc.field else "")
    kind = TooLarge if isinstance(exc, TooLarge) else InvalidInput
    return kind(f"line {number}: {exc}", field=where)


# -- the scope's side ------------------------------------------------------------------------
def import_records(scope: ScopeMemory, cmd: ImportMemories) -> Imported:
    """Store ``cmd.records`` in ``scope`` as given, with their vectors, skipping those
    whose id or exact content it holds (or an earlier record of the command held):
    every record and vector is checked first, so a refused command (InvalidInput
    naming ``records[i].field`` or ``vectors[i]``) changes nothing; one that adds
    nothing changes nothing either."""
    settings = scope.settings
    now = check_seconds(cmd.now, "now")
    records, vectors = cmd.records, cmd.vectors
    if not isinstance(records, list | tuple) or not isinstance(vectors, list | tuple):
        raise InvalidInput("records and vectors must be lists", field="records")
    if len(vectors) != len(records):
        raise InvalidInput(f"{len(vectors):,} vectors for {len(records):,} records; give one per record "
                           f"(None: no vector)", field="vectors")
    limit = settings.max_memories_per_command
    if len(records) > limit:
        raise TooLarge(f"{len(records):,} records in one import; the limit is {limit:,} "
                       f"(config.memories.max_memories_per_command)", field="records")
    checked: list[MemoryRecord] = []
    for index, record in enumerate(records):
        try:
            checked.append(check_record(record, settings.max_content_bytes, settings.max_metadata_bytes))
        except InvalidInput as exc:
            exc.field = f"records[{index}]" + (f".{exc.field}" if exc.field else "")
            raise
    given = [vector for vector in vectors if vector is not None]
    if given:
        _check_vectors(scope, cmd, given)
    placed: list[tuple[MemoryRecord, bytes | None]] = []
    ids: set[str] = set()
    contents: set[str] = set()
    for record, vector in zip(checked, vectors, strict=True):
        if record.id in ids or record.content in contents or scope.record(record.id) is not None or \
                record.content in scope.by_content:
            continue
        ids.add(record.id)
        contents.add(record.content)
        placed.append((record, vector))
    if placed:  # valid, and something new: from here on the state changes
        scope.clock = max(scope.clock, now)
        scope.place_records(placed, cmd.embedder, cmd.dim)
    return Imported(ids_added=[record.id for record, _ in placed], skipped=len(checked) - len(placed))


def _check_vectors(scope: ScopeMemory, cmd: ImportMemories, given: Sequence[bytes]) -> None:
    try:
        scope.check_vectors_of(cmd.embedder, cmd.dim, given, "the import")
    except InvalidInput as exc:
        if exc.field == "embedder":
            raise InvalidInput(f"{exc}; records sent without their vector (None) are stored and can be "
                               f"embedded again (ScopeRef.import_records and `mnemex import` do that)",
                               field="embedder") from exc
        if exc.field == "vector":
            for index, vector in enumerate(cmd.vectors):
                if vector is not None:
                    try:
                        decode_vector(vector, cmd.dim)
                    except InvalidInput:
                        exc.field = f"vectors[{index}]"
                        break
        raise


def vectors_of(scope: ScopeMemory, cmd: GetVectors) -> Vectors:
    """The stored vectors of ``cmd.ids`` (unknown ids, and memories without a vector,
    are left out), at most ``max_memories_per_command`` ids at once."""
    ids = cmd.ids
    if not isinstance(ids, list | tuple):
        raise InvalidInput("ids must be a list of memory ids", field="ids")
    limit = scope.settings.max_memories_per_command
    if len(ids) > limit:
        raise TooLarge(f"{len(ids):,} ids in one request; the limit is {limit:,} "
                       f"(config.memories.max_memories_per_command)", field="ids")
    index = scope.vectors
    if index is None:
        return Vectors(vectors={})
    held: list[tuple[str, int]] = []
    for memory_id in dict.fromkeys(ids):
        doc = scope.doc_of.get(memory_id) if isinstance(memory_id, str) else None
        if doc is not None and doc in index:
            held.append((memory_id, doc))
    rows = index.vectors([doc for _, doc in held])
    found = {memory_id: encode_vector(row) for (memory_id, _), row in zip(held, rows, strict=True)}
    return Vectors(vectors=found, embedder=scope.embedder, dim=scope.dim)
