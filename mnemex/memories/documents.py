"""The documents of a scope: which it holds, their chunks as memories, and the
extraction of facts from them.

A document's chunks are memories of kind ``document_chunk`` in the session
``doc:<document id>``, each with a source naming the document and the chunk, so:

* neighbouring chunks lend each other context in full-text search, as the turns
  of a conversation do (``memories.context_window``);
* the document's extraction cursor is that session's, in the scope's
  ``Extractions``: a job reads chunks [first, upto) as messages of role
  ``document`` (position = chunk index; the rules extractor reads only what the
  user said, so it finds nothing in a document: an LLM extractor does), and the
  facts it yields carry the same session and a source naming the document;
* ``ForgetDocument`` removes the chunks and those facts.

A chunk whose text the scope holds already (the same paragraph in two documents,
or in two versions of one) is that one memory: it gains a source naming the new
document and chunk (at most ``MAX_SOURCES``, the first and the newest kept). A
document's chunks are the memories whose sources name it; forgetting a document
takes its name from their sources and forgets those no other document names, and
the facts extracted from it.

``Documents`` keeps each document's ``DocumentInfo`` (in the snapshot's header, a
few hundred bytes each), its chunks by index (derived from the records' sources:
rebuilt when the scope is restored, checked when read, since a plain forget or
update may have changed them) and, transient, the documents whose extraction goes
on by itself: ``ExtractDocument`` with ``mode="flush"`` (what an ingest sends)
starts a job over the first ``knowledge.max_batch`` chunks and, each time a job of
that document commits, the next one starts at once, until every chunk is
covered. ``mode="now"`` runs one job and answers with its result (the ref asks
again until the document is covered). A restart forgets the transient part: an
extraction left half way goes on when the document is ingested again or
``extract_document`` is called.

Nothing here reads a clock or does I/O: the handlers run inside the scope's
``handle`` (this module is a part of ``ScopeMemory`` kept apart, and uses its
insides as its own methods do); the job reader reads the chunk texts taken when
the job was planned.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from mnemex._checks import check_id, check_int
from mnemex._time import check_seconds
from mnemex.effects import Job, Step
from mnemex.errors import InvalidInput, NotFound
from mnemex.knowledge.facts import SourceMessage
from mnemex.memories.extraction import ExtractSession
from mnemex.memories.fields import MAX_ID_BYTES, MAX_SOURCES, check_metadata
from mnemex.memories.filters import compile_filter
from mnemex.memories.protocol import (
    ApplyExtraction,
    DocumentInfo,
    DocumentIngested,
    DocumentStatus,
    Extracted,
    ForgetDocument,
    Forgotten,
    IngestDocument,
    MemoryRecord,
    NewMemory,
    SourceRef,
)

if TYPE_CHECKING:
    from mnemex.memories.behaviour import ScopeMemory

__all__ = [
    "CHUNK_KIND",
    "DOCUMENT_ROLE",
    "Documents",
    "ExtractDocument",
    "apply_document_extraction",
    "check_document_id",
    "check_title",
    "document_of",
    "document_session",
    "document_source",
    "document_statuses",
    "extract_document",
    "forget_document",
    "ingest_document",
]

CHUNK_KIND: Final = "document_chunk"
DOCUMENT_ROLE: Final = "document"
"""The role a document's chunks have as messages of an extraction job."""
_PREFIX: Final = "doc:"
_MAX_TITLE: Final = 1000


def document_session(document_id: str) -> str:
    """The session id of a document's memories: ``doc:<id>``."""
    return _PREFIX + document_id


def document_of(session_id: str | None) -> str | None:
    """The document whose session ``session_id`` is, or None."""
    if session_id is not None and session_id.startswith(_PREFIX) and len(session_id) > len(_PREFIX):
        return session_id[len(_PREFIX):]
    return None


def document_source(session_id: str, first: int, last: int) -> SourceRef:
    """Where a fact extracted from chunks ``first``..``last`` of a document's session
    came from: the session range, the document, and the chunk when it is one."""
    return SourceRef(session_id=session_id, first=first, last=last, document=document_of(session_id),
                     chunk=first if first == last else None)


@dataclass(frozen=True, slots=True)
class ExtractDocument:
    """Extract facts from document ``document_id`` (never journaled). ``flush``: start
    a job and answer at once, the following jobs starting as each commits; ``now``:
    run one job and answer with its result."""

    document_id: str
    now: float
    mode: Literal["flush", "now"] = "flush"


class Documents:
    """The documents of one scope (see the module doc)."""

    __slots__ = ("flowing", "infos", "members")  # (every live scope holds one)

    def __init__(self) -> None:
        self.infos: dict[str, DocumentInfo] = {}
        # document id -> chunk index -> memory id, from the chunk memories' sources
        self.members: dict[str, dict[int, str]] = {}
        # transient: extraction goes on by itself (a set; as a dict, an empty one is
        # 64 bytes, not 216: every live scope holds one)
        self.flowing: dict[str, None] = {}

    def __len__(self) -> int:
        return len(self.infos)

    def to_extra(self) -> list[Any]:
        return [msgspec.to_builtins(info) for info in self.infos.values()]

    def load_extra(self, data: Sequence[Any]) -> None:
        """The documents of a snapshot's header (their chunks: ``note_chunks``)."""
        for item in data:
            info = msgspec.convert(item, DocumentInfo)
            self.infos[info.id] = info

    def note_chunks(self, records: Iterable[MemoryRecord]) -> None:
        """Which of ``records`` (restored) are chunks of the documents known."""
        if self.infos:
            for record in records:
                for source in record.sources:
                    if _is_chunk(source):
                        self.members.setdefault(str(source.document), {})[int(source.chunk or 0)] = record.id


# -- checks ----------------------------------------------------------------------------------------
def check_document_id(value: Any) -> str:
    """A document id: a memory id short enough for its session (``doc:<id>``) to be one."""
    checked = check_id(value, "document_id", MAX_ID_BYTES - len(_PREFIX))
    assert checked is not None
    return checked


def check_title(value: Any) -> str | None:
    """A document's title: None, or a string of at most 1,000 characters with text."""
    if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > _MAX_TITLE):
        raise InvalidInput(f"title must be a non-empty string of at most {_MAX_TITLE:,} characters, or None; "
                           f"got {str(value)[:80]!r}", field="title")
    return value


def _check_info(info: Any, max_metadata_bytes: int) -> DocumentInfo:
    if not isinstance(info, DocumentInfo):
        raise InvalidInput(f"document must be a DocumentInfo, got {type(info).__name__}", field="document")
    check_document_id(info.id)
    if not isinstance(info.media_type, str) or not info.media_type:
        raise InvalidInput("document.media_type must be a media type", field="media_type")
    check_title(info.title)
    for name in ("size", "pages", "chunks"):
        check_int(getattr(info, name), name, 0)
    check_seconds(info.ingested_at, "ingested_at")
    check_metadata(info.metadata, max_metadata_bytes)
    return info


def _check_chunks(info: DocumentInfo, memories: Any) -> None:
    if not isinstance(memories, list | tuple):
        raise InvalidInput("memories must be a list", field="memories")
    if len(memories) != info.chunks:
        raise InvalidInput(f"document {info.id!r} has {info.chunks} chunks but the command carries "
                           f"{len(memories)} memories", field="memories")
    session = document_session(info.id)
    for index, memory in enumerate(memories):
        if not isinstance(memory, NewMemory):
            raise InvalidInput(f"memories[{index}] must be a NewMemory", field="memories")
        if memory.session_id != session or memory.kind != CHUNK_KIND or \
                memory.metadata.get("chunk") != index:
            raise InvalidInput(f"memories[{index}] is not chunk {index} of document {info.id!r} (session_id "
                               f"{session!r}, kind {CHUNK_KIND!r}, metadata.chunk {index})",
                               field=f"memories[{index}]")


def _chunks(scope: ScopeMemory, document_id: str) -> list[tuple[int, MemoryRecord]]:
    """(chunk index, memory) of each chunk of a document still stored, in order."""
    out = []
    for index, memory_id in sorted(scope.documents.members.get(document_id, {}).items()):
        record = scope.record(memory_id)
        if record is not None and _names(record, document_id, index):
            out.append((index, record))
    return out


def _is_chunk(source: SourceRef) -> bool:
    """Whether ``source`` says "this text is chunk n of document d" (a fact's source
    names its session too)."""
    return source.document is not None and source.chunk is not None and source.session_id is None


def _names(record: MemoryRecord, document_id: str, index: int | None = None) -> bool:
    return any(_is_chunk(source) and source.document == document_id
               and (index is None or source.chunk == index) for source in record.sources)


def _with_source(record: MemoryRecord, source: SourceRef) -> MemoryRecord:
    sources = (*record.sources, source)
    if len(sources) > MAX_SOURCES:  # the first and the newest
        sources = sources[:1] + sources[len(sources) - MAX_SOURCES + 1:]
    return msgspec.structs.replace(record, sources=sources)


# -- the commands ----------------------------------------------------------------------------------
def ingest_document(scope: ScopeMemory, cmd: IngestDocument) -> Any:
    """Store a document's chunks and record it (see IngestDocument)."""
    settings = scope.settings
    info = _check_info(cmd.document, settings.max_metadata_bytes)
    check_seconds(cmd.now, "now")
    _check_chunks(info, cmd.memories)
    documents = scope.documents
    if info.id in documents.infos and (_chunks(scope, info.id) or not info.chunks):
        return Step(DocumentIngested(document=documents.infos[info.id], unchanged=True), unchanged=True)
    ids, created, placed, vectors = scope._accept(cmd.memories, cmd.embedder, cmd.dim, cmd.now, cmd.classify)
    # valid: from here on the state changes
    sourced = [(doc, _with_source(record, SourceRef(document=info.id, chunk=record.metadata["chunk"])))
               for doc, record in placed]
    for doc, record in sourced:
        scope.docs[doc] = record
    scope._index_many(sourced)
    scope._add_vectors(vectors)
    for index, (memory_id, new) in enumerate(zip(ids, created, strict=True)):
        if not new:  # held already (another document's chunk, or any memory): it is this one's too
            held = scope.record(memory_id)
            if held is not None and not _names(held, info.id, index):
                scope.change_record(memory_id, functools.partial(
                    _with_source, source=SourceRef(document=info.id, chunk=index)))
    documents.members[info.id] = dict(enumerate(ids))
    documents.infos.pop(info.id, None)  # ingested again: listed in its new place
    documents.infos[info.id] = info
    return _with_graph(scope, DocumentIngested(document=info, ids=ids, created=created))


def forget_document(scope: ScopeMemory, cmd: ForgetDocument) -> Any:
    """Forget a document, its chunks and the facts extracted from it."""
    check_seconds(cmd.now, "now")
    document_id = check_id(cmd.document_id, "document_id", MAX_ID_BYTES)
    assert document_id is not None
    session = document_session(document_id)
    documents = scope.documents
    # the facts extracted from it, and its chunks that no other document names
    mask = compile_filter({"session_id": session}).mask(scope.table)
    facts = [record.id for record in scope.records_at(mask.nonzero()[0].tolist())
             if record is not None and record.kind != CHUNK_KIND]
    kept: list[MemoryRecord] = []  # named by another document too, or not a chunk: loses this name only
    gone = list(facts)
    for _, record in _chunks(scope, document_id):
        if record.id in gone or record in kept:
            continue
        if record.kind != CHUNK_KIND or any(_is_chunk(source) and source.document != document_id
                                            for source in record.sources):
            kept.append(record)
        else:
            gone.append(record.id)
    shared = kept
    if not gone and not shared and document_id not in documents.infos and \
            session not in scope.extractions.sessions:
        return Step(Forgotten(ids=[]), unchanged=True)
    for record in shared:
        scope.change_record(record.id, functools.partial(_without_source, document_id=document_id))
    scope._forget(gone)
    documents.infos.pop(document_id, None)
    documents.members.pop(document_id, None)
    documents.flowing.pop(document_id, None)
    scope.extractions.sessions.pop(session, None)  # a job of it still running is dropped when it ends
    return _with_graph(scope, Forgotten(ids=gone))


def _without_source(record: MemoryRecord, *, document_id: str) -> MemoryRecord:
    return msgspec.structs.replace(record, sources=tuple(
        source for source in record.sources if not (_is_chunk(source) and source.document == document_id)))


def document_statuses(scope: ScopeMemory, document_id: str | None) -> list[DocumentStatus]:
    """The documents (or the one asked for), in the order ingested."""
    infos = scope.documents.infos
    chosen = list(infos.values()) if document_id is None else (
        [infos[document_id]] if document_id in infos else [])
    out = []
    for info in chosen:
        session = scope.extractions.sessions.get(document_session(info.id))
        cursor = session.cursor if session is not None else None
        out.append(DocumentStatus(document=info, memories=len(_chunks(scope, info.id)),
                                  extracted=min(info.chunks, cursor.done) if cursor is not None else 0,
                                  extraction=cursor.phase.value if cursor is not None else "none"))
    return out


def extract_document(scope: ScopeMemory, cmd: ExtractDocument) -> Any:
    """Start (``flush``) or run (``now``) extraction of a document (never journaled)."""
    now = check_seconds(cmd.now, "now")
    if cmd.mode not in ("flush", "now"):
        raise InvalidInput(f"mode is {cmd.mode!r}; use flush or now", field="mode")
    info = scope.documents.infos.get(cmd.document_id) if isinstance(cmd.document_id, str) else None
    if info is None:
        raise NotFound(f"scope {scope.name} holds no document {cmd.document_id!r}")
    if cmd.mode == "flush":
        scope.documents.flowing[info.id] = None
    else:
        scope.documents.flowing.pop(info.id, None)
    messages = [SourceMessage(position=index, role=DOCUMENT_ROLE, text=record.content,
                              speaker=info.title or info.id, time=info.ingested_at)
                for index, record in _chunks(scope, info.id) if index < info.chunks]
    reply, jobs = scope.extractions.request(ExtractSession(
        session_id=document_session(info.id), read=_reader(messages), known=info.chunks, now=now,
        mode=cmd.mode))
    return Step(reply, tuple(jobs), unchanged=True)


def _reader(messages: Sequence[SourceMessage]) -> Any:
    """Reads chunks [first, upto) of a document, as taken when the job was planned."""
    positions = [message.position for message in messages]

    async def read(first: int, upto: int) -> Sequence[SourceMessage]:
        import bisect

        return messages[bisect.bisect_left(positions, first):bisect.bisect_left(positions, upto)]

    return read


def apply_document_extraction(scope: ScopeMemory, cmd: ApplyExtraction) -> Any:
    """A job's result for a document: applied as any session's; then, for a document
    whose extraction goes on by itself, the next job starts at once."""
    reply = scope._apply_extraction(cmd)
    effects: list[Job] = []
    document_id = document_of(cmd.session_id)
    documents = scope.documents
    if isinstance(reply, Extracted) and reply.status == "committed" and not scope.replaying and \
            document_id in documents.flowing:
        session = scope.extractions.sessions.get(cmd.session_id)
        if session is None or session.read is None or session.cursor.done >= session.cursor.known:
            documents.flowing.pop(str(document_id), None)
        else:
            now = cmd.now if math.isfinite(cmd.now) else scope.clock
            _, jobs = scope.extractions.request(ExtractSession(
                session_id=cmd.session_id, read=session.read, known=session.cursor.known, now=now,
                mode="flush"))
            effects.extend(jobs)
    if isinstance(reply, Step):  # a late result, dropped
        return reply
    return _with_graph(scope, reply, effects)


def _with_graph(scope: ScopeMemory, reply: Any, effects: Sequence[Job] = ()) -> Any:
    """``reply`` with ``effects`` and, when one is wanted now, the job building the
    scope's HNSW graph."""
    graph = scope._graph_job(scope.clock)
    jobs = (*effects, graph) if graph is not None else tuple(effects)
    return Step(reply, jobs) if jobs else reply


def chunk_metadata(metadata: Mapping[str, Any], *, document_id: str, chunk: int, pages: Sequence[int],
                   headings: Sequence[str], title: str | None, media_type: str) -> dict[str, Any]:
    """The metadata of chunk ``chunk``: the caller's, then ``document_id``, ``chunk``,
    ``page`` (and ``page_end`` when the chunk runs over several pages), ``headings``,
    ``title`` and ``media_type``; mnemex's keys win over the caller's."""
    out = dict(metadata)
    out.update({"document_id": document_id, "chunk": chunk, "media_type": media_type})
    if pages:
        out["page"] = pages[0]
        if pages[-1] != pages[0]:
            out["page_end"] = pages[-1]
    if headings:
        out["headings"] = list(headings)
    if title:
        out["title"] = title
    return out
