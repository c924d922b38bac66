"""Long-term memory on the runtime: the ``ScopeRef`` that ``rt.scope(user_id=...,
app_name=...)`` hands out, search across several scopes, and a session of an agent
moved into long-term memory.

This side may read the wall clock: memory ids (sortable by time) and timestamps are
made here, texts are embedded here (through the runtime's embedding batcher), and
all of it travels inside the command, so the actor stays deterministic and replay
never needs the model.

Access tracking: a search does not write a journal line per hit. The runtime keeps,
per scope, a count of the ids its searches returned (``ScopeServices.touch``) and
sends one ``Touch`` command per scope every ``config.memories.touch_interval`` seconds (and
once at shutdown), so at most one journal line per scope per interval, whatever the
search rate. A crash loses at most one interval of access counts.

Moving memories between data directories (``memories.transfer``): an export reads
each scope's records in one ask (the actor's own frozen records, not copies) and
their vectors a page at a time; an import checks every line first, then sends each
scope's lines in ``ImportMemories`` of at most ``max_memories_per_command``, embedding
again (through the batcher) those exported without a vector or by another embedder.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import math
import os
import pathlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import IO, Any, Final, Literal

import msgspec
import numpy as np
import numpy.typing as npt
import trio

from mnemex._host import Host
from mnemex._ids import IdClock, id_at
from mnemex._time import seconds
from mnemex.config import DEFAULT, Config, UseDefault
from mnemex.conversations.protocol import ArchiveSession
from mnemex.effects import Key
from mnemex.errors import ExtractionError, InvalidInput, MnemexError, NotFound, TooLarge
from mnemex.kernel import ActorRef
from mnemex.knowledge.categories import Category
from mnemex.knowledge.chunks import chunk_pages, title_of
from mnemex.knowledge.documents import Page, ReadSettings, media_type_of, open_document
from mnemex.knowledge.ref import (
    cursors,
    extract_session,
    list_reader,
    merge_extracted,
    provider_reader,
    retry_dead_letter,
)
from mnemex.memories.categories import facets_of_hits
from mnemex.memories.context import format_as_context
from mnemex.memories.documents import (
    CHUNK_KIND,
    ExtractDocument,
    check_document_id,
    check_title,
    chunk_metadata,
    document_session,
)
from mnemex.memories.extraction import CursorInfo, ReadMessages
from mnemex.memories.fields import check_content, check_metadata, checked_changes, new_memory, record_of
from mnemex.memories.kind import ScopeKind
from mnemex.memories.protocol import (
    AddSession,
    CategoryCatalog,
    CountMemories,
    DeclareEntity,
    DocumentInfo,
    DocumentIngested,
    DocumentStatus,
    EntityChanged,
    EntityDetail,
    EntityPage,
    Event,
    Extracted,
    Facets,
    Forget,
    ForgetDocument,
    ForgetExpired,
    ForgetWhere,
    Forgotten,
    GetActorMemories,
    GetCategories,
    GetDocuments,
    GetEntity,
    GetFacets,
    GetGraphStats,
    GetHistory,
    GetMemory,
    GetRelated,
    GetScopeStats,
    GetVectors,
    GraphStats,
    Hit,
    Imported,
    ImportMemories,
    IngestDocument,
    IngestProgress,
    IngestReport,
    IngestStage,
    ListEntities,
    ListMemories,
    ListNamespaces,
    MemoriesPut,
    MemoryHistory,
    MemoryPage,
    MemoryRecord,
    MergeEntities,
    Namespaces,
    NewMemory,
    PutMemories,
    RefreshExpiry,
    RelatedEntities,
    Remember,
    Remembered,
    ScopeStats,
    Search,
    SearchMode,
    SearchResult,
    Session,
    SessionAdded,
    SetCategories,
    Touch,
    UnmergeEntity,
    Updated,
    UpdateMemory,
    Vectors,
)
from mnemex.memories.queries import query_texts
from mnemex.memories.sessions import session_echoes, session_memories
from mnemex.memories.snapshot import encode_noted, encode_vector
from mnemex.memories.subscopes import scope_labels, with_scope_labels
from mnemex.memories.transfer import (
    ExportedMemory,
    ExportHeader,
    ImportReport,
    check_exported,
    encode_line,
    read_export,
)
from mnemex.models.batcher import F32, EmbeddingBatcher
from mnemex.models.embedders import readable
from mnemex.models.hashing import Embedder
from mnemex.models.rerankers import Reranker, rerank_beside

__all__ = ["ScopeRef", "ScopeServices", "archive_session", "export_scopes", "import_lines", "search_scopes"]

log = logging.getLogger("mnemex.scope")

_MODES: Final = ("keyword", "fulltext", "vector", "hybrid")
_EMBED_SLICE: Final = 2
"""Chunks of a document sent to the embedder at a time. Chunks are long (about 200
tokens), and the default ONNX model spends less CPU per chunk on a few at a time than
on many (measured here, 2 cores, CPU time per 800-character chunk: 17 ms in calls of
1, 18-19 of 2, 20 of 4, 25-28 of 8-16, 40-45 of 256; a 50-page PDF took 6.6, 7.0 and
7.6 s of CPU in calls of 1, 2 and 4, and calls of 2 were the quickest by the clock);
and a search's query waits behind one small call at most."""


class ScopeServices:
    """What a runtime keeps for the scopes of one scope kind: the host that carries
    their commands, the kind, the embedding batcher, the reranker (None without
    one), the id clock and the access counts waiting to be sent. Made and started by
    the runtime; refs only use it."""

    __slots__ = ("batcher", "host", "ids", "kind", "reranker", "touches")

    def __init__(self, host: Host, kind: ScopeKind, batcher: EmbeddingBatcher, ids: IdClock,
                 reranker: Reranker | None = None) -> None:
        self.host = host
        self.kind = kind
        self.batcher = batcher
        self.ids = ids
        self.touches: dict[Key, dict[str, int]] = {}
        self.reranker = reranker

    @property
    def config(self) -> Config:
        return self.host.config

    @property
    def embedder(self) -> Embedder:
        return self.batcher.embedder

    def touch(self, key: Key, hits: Iterable[Hit]) -> None:
        """Count one access of each hit's memory, to be sent with the next flush."""
        pending = self.touches.get(key)
        if pending is None:
            pending = self.touches[key] = {}
        for hit in hits:
            memory_id = hit.memory.id
            pending[memory_id] = pending.get(memory_id, 0) + 1

    async def flush(self) -> int:
        """Send the access counts gathered so far, one Touch per scope; returns how many
        scopes got one. A scope that cannot take it now loses that interval's counts."""
        touches, self.touches = self.touches, {}
        now = time.time()
        sent = 0
        for key, counts in touches.items():
            if not counts:
                continue
            command = Touch(ids=list(counts), counts=list(counts.values()), now=now)
            try:
                await self.host.tell(self.kind.name, key, command)
                sent += 1
            except MnemexError as exc:
                log.debug("access counts of scope %r not sent: %s", key, exc)
        return sent


# -- the ref --------------------------------------------------------------------------------
class ScopeRef:
    """The long-term memory of one user in one app, as the runtime serves it. Cheap to
    make; any number of refs to one (app_name, user_id) reach the same actor."""

    __slots__ = ("_ref", "_services", "app_name", "user_id")

    def __init__(self, services: ScopeServices, *, user_id: str, app_name: str) -> None:
        for what, value in (("user_id", user_id), ("app_name", app_name)):
            if not isinstance(value, str) or not value:
                raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
        self._services = services
        self._ref: ActorRef = services.host.ref(services.kind.name, (app_name, user_id))
        self.app_name = app_name
        self.user_id = user_id

    def __repr__(self) -> str:
        return f"ScopeRef(app_name={self.app_name!r}, user_id={self.user_id!r})"

    @property
    def ref(self) -> ActorRef:
        """The underlying actor ref (raw commands of ``mnemex.memories.protocol``)."""
        return self._ref

    @property
    def embedder(self) -> Embedder:
        """The model this scope's texts are embedded with."""
        return self._services.embedder

    @property
    def _config(self) -> Config:
        return self._services.config

    async def _embed(self, texts: Sequence[str]) -> list[bytes]:
        return _encoded_rows(await self._services.batcher.embed(texts))

    def _new_memory(self, content: Any, fields: Mapping[str, Any], now: float) -> NewMemory:
        limits = self._config.memories  # refused here, before embedding and before any actor sees it
        if not fields:  # content alone: what new_memory would make, a fresh id (only the content to check)
            check_content(content, limits.max_content_bytes)
            return NewMemory(id=self._services.ids.next(now), content=content)
        given = dict(fields)
        memory_id = given.pop("id", None) or self._services.ids.next(now)
        memory = new_memory(memory_id, content, given)
        record_of(memory, now, limits.max_content_bytes, limits.max_metadata_bytes)
        return memory

    async def _store(self, memories: list[NewMemory]) -> list[str]:
        ids, _ = await self._store_reporting(memories)
        return ids

    async def _store_reporting(self, memories: list[NewMemory]) -> tuple[list[str], list[bool]]:
        """Embed and store; the ids in order, and whether each was new (not a
        duplicate of a stored memory)."""
        step = self._config.memories.max_memories_per_command
        replies: list[Remembered] = []
        await _remember_batches(self._services, [(self._ref, memories[start:start + step])
                                                 for start in range(0, len(memories), step)], replies)
        return ([memory_id for reply in replies for memory_id in reply.ids],
                [new for reply in replies for new in reply.created])

    def _checked_many(self, memories: Iterable[str | Mapping[str, Any]], now: float,
                      positions: Sequence[int] | None = None) -> list[NewMemory]:
        """Each memory checked; an error names it as ``memories[i]``, ``i`` its index or,
        given ``positions``, ``positions[index]`` (its place in a larger batch)."""
        items = list(memories)
        texts = [item for item in items if isinstance(item, str)]
        if len(texts) == len(items):  # texts alone (most batches): their ids taken at once
            limit = self._config.memories.max_content_bytes
            for index, text in enumerate(texts):
                try:
                    check_content(text, limit)
                except InvalidInput as exc:  # TooLarge too: name the item in the batch
                    _name_item(exc, index if positions is None else positions[index])
                    raise
            return [NewMemory(id=memory_id, content=content)
                    for memory_id, content in zip(self._services.ids.next_many(now, len(texts)), texts,
                                                  strict=True)]
        batch: list[NewMemory] = []
        for index, item in enumerate(items):
            try:
                batch.append(self._checked_one(item, now))
            except InvalidInput as exc:  # TooLarge too: name the item in the batch
                _name_item(exc, index if positions is None else positions[index])
                raise
        return batch

    def _checked_one(self, item: str | Mapping[str, Any], now: float) -> NewMemory:
        if isinstance(item, str):
            return self._new_memory(item, {}, now)
        if not isinstance(item, Mapping):
            raise InvalidInput(f"a memory must be a string or a dict, got {type(item).__name__}", field="")
        fields = dict(item)
        if "content" not in fields:
            raise InvalidInput("a memory has no content", field="content")
        return self._new_memory(fields.pop("content"), fields, now)

    # -- writing ----------------------------------------------------------------------------
    async def remember(self, content: str, **fields: Any) -> str:
        """Store a memory; returns its id (the existing one when this exact content is
        stored already). Fields: author, timestamp (when it happened: seconds, a
        datetime or ISO 8601), importance (0..1), session_id, actor_id, categories,
        entities, metadata (a JSON object), source. Raises TooLarge past
        ``config.memories.max_content_bytes``, InvalidInput for a bad field."""
        ids = await self._store([self._new_memory(content, fields, time.time())])
        return ids[0]

    async def remember_many(self, memories: Iterable[str | Mapping[str, Any]]) -> list[str]:
        """Store several memories (strings, or dicts with ``content`` and any field of
        ``remember``), all or none per ``config.memories.max_memories_per_command``; returns
        their ids in order."""
        batch = self._checked_many(memories, time.time())
        if not batch:
            return []
        return await self._store(batch)

    async def update(self, memory_id: str, **fields: Any) -> MemoryRecord:
        """Change some fields of a memory (``content`` too: it is re-embedded and
        re-indexed); returns the updated memory. NotFound for an unknown id."""
        config = self._config
        limits = config.memories
        values: dict[str, Any] = checked_changes(fields, limits.max_content_bytes, limits.max_metadata_bytes)
        if "content" in values:
            embedder = self.embedder
            values["vector"] = (await self._embed([values["content"]]))[0]
            values["embedder"], values["dim"] = embedder.name, embedder.dim
        reply: Updated = await self._ref.ask(UpdateMemory(id=memory_id, now=time.time(), **values))
        return reply.memory

    async def forget(self, memory_id: str) -> bool:
        """Delete a memory; False when there was none."""
        reply: Forgotten = await self._ref.ask(Forget(ids=[memory_id], now=time.time()))
        return bool(reply.ids)

    async def forget_many(self, memory_ids: Iterable[str]) -> list[str]:
        """Delete memories by id; returns the ids that existed."""
        reply: Forgotten = await self._ref.ask(Forget(ids=list(memory_ids), now=time.time()))
        return reply.ids

    async def forget_where(self, filter: Mapping[str, Any]) -> list[str]:
        """Delete every memory the filter matches (see mnemex.memories.filters); returns
        their ids. An empty filter is refused."""
        reply: Forgotten = await self._ref.ask(ForgetWhere(filter=dict(filter), now=time.time()))
        return reply.ids

    async def add_session(self, session: Session) -> SessionAdded:
        """Store every event of a finished session that has text as a memory of this
        scope (kind ``message``; author, timestamp, session id and the speaker's role,
        ``metadata["role"]``, kept; a text past the content limit is cut at whitespace
        into several memories). An assistant's message that only restates what the
        user said is stored merged into the user's (``config.memories.
        archive_merge_echoes``; see ``mnemex.memories.sessions``). Adding a session
        again adds nothing twice."""
        if not isinstance(session, Session):
            raise InvalidInput(f"add_session takes a mnemex.Session, got {type(session).__name__}",
                               field="session")
        if (session.app_name, session.user_id) != (self.app_name, self.user_id):
            raise InvalidInput(f"session {session.id!r} belongs to app {session.app_name!r}, user "
                               f"{session.user_id!r}, not to this scope ({self.app_name!r}, "
                               f"{self.user_id!r})", field="session")
        events = []
        for index, event in enumerate(session.events):
            if not isinstance(event, Event):
                raise InvalidInput(f"event {index} must be a mnemex.Event", field=f"events[{index}]")
            at = seconds(event.timestamp, f"events[{index}].timestamp") if event.timestamp else None
            events.append(event if at is None or at == event.timestamp
                          else msgspec.structs.replace(event, timestamp=at))
        now = time.time()
        memories = session_memories(msgspec.structs.replace(session, events=events),
                                    self._services.ids.reserve(now), self._config.memories.max_content_bytes)
        echo_of = session_echoes(memories) if self._config.memories.archive_merge_echoes else {}
        embedder = self.embedder
        ids: list[str] = []
        added = 0
        merged: list[str] = []
        stored: dict[str, str] = {}  # id in an earlier command -> the id stored (its content's, if known)
        step = self._config.memories.max_memories_per_command
        for start in range(0, max(1, len(memories)), step):
            chunk = memories[start:start + step]
            vectors = await self._embed([memory.content for memory in chunk])
            with_vectors = [msgspec.structs.replace(memory, vector=vector)
                            for memory, vector in zip(chunk, vectors, strict=True)]
            echoes = {memory.id: stored.get(echo_of[memory.id], echo_of[memory.id])
                      for memory in chunk if memory.id in echo_of}
            reply: SessionAdded = await self._ref.ask(AddSession(
                session_id=session.id, memories=with_vectors, embedder=embedder.name, dim=embedder.dim,
                now=now, echo_of=echoes, classify=True))
            ids.extend(reply.ids)
            added += reply.added
            merged.extend(reply.merged)
            stored.update(zip((memory.id for memory in chunk), reply.ids, strict=True))
        return SessionAdded(session_id=session.id, ids=ids, added=added, merged=merged)

    # -- reading ----------------------------------------------------------------------------
    async def get(self, memory_id: str) -> MemoryRecord:
        """The memory with this id; NotFound when this scope has none."""
        record: MemoryRecord = await self._ref.ask(GetMemory(id=memory_id))
        return record

    async def count(self, filter: Mapping[str, Any] | None = None, *, include_history: bool = False,
                    as_of: float | str | datetime | None = None) -> int:
        """How many active memories the scope holds (that the filter matches);
        ``include_history``/``as_of`` as for ``search``."""
        reply: int = await self._ref.ask(CountMemories(filter=dict(filter) if filter else None,
                                                       include_history=include_history,
                                                       as_of=_as_of(as_of)))
        return reply

    async def memories(self, filter: Mapping[str, Any] | None = None, limit: int | None = 100,
                       offset: int = 0, *, include_history: bool = False,
                       as_of: float | str | datetime | None = None) -> MemoryPage:
        """A page of active memories in creation (id) order, optionally filtered;
        ``include_history``/``as_of`` as for ``search``."""
        reply: MemoryPage = await self._ref.ask(ListMemories(
            filter=dict(filter) if filter else None, limit=limit, offset=offset,
            include_history=include_history, as_of=_as_of(as_of)))
        return reply

    async def stats(self) -> ScopeStats:
        reply: ScopeStats = await self._ref.ask(GetScopeStats(now=time.time()))
        return reply

    async def search(self, query: str, top_k: int = 10, mode: SearchMode | UseDefault = DEFAULT,
                     min_score: float | UseDefault | None = DEFAULT,
                     filter: Mapping[str, Any] | None = None, *, include_history: bool = False,
                     as_of: float | str | datetime | None = None, scopes: Iterable[str] | None = None,
                     scope_ids: Mapping[str, str] | None = None,
                     facets: Literal["hits", "scope"] | None = None) -> SearchResult:
        """Search this scope: ``mode`` keyword, fulltext, vector or hybrid (``DEFAULT``:
        ``config.memories.search_mode``); hits score at least ``min_score`` (``DEFAULT``:
        the mode's own cut, see config.memories.vector_min_score; ``None``: no cut);
        ``filter`` narrows inside the search. Only active memories are found, unless
        ``include_history`` (superseded and merged ones too) or ``as_of`` (what was
        true at that time: seconds, ISO 8601 or a datetime). With a reranker
        (``config.models.reranker``), the hits are in its order (see ``_reranked``).
        The hits' access counts are updated in the background (batched).

        ``scopes``: search only these parts of the scope, as one ranking
        (``["global", "campaign:ash", "session:s1"]``, or bare kinds with their ids
        in ``scope_ids``; see ``mnemex.memories.subscopes``); each hit's
        ``memory.scope_label`` says which. ``facets``: count the memories per
        category over the ``hits``, or over every memory the filter lets through in
        the ``scope`` (``SearchResult.facets``). A category filter with a confidence:
        ``filter={"categories": ["quests"], "min_category_confidence": 0.6}``."""
        labels = None if scopes is None else scope_labels(scopes, scope_ids)
        services = self._services
        command = await _search_command(services, query, top_k, mode=mode,
                                        min_score=min_score, filter=with_scope_labels(filter, labels),
                                        include_history=include_history, as_of=as_of, facets=facets)
        result = await (self._ref.ask(command) if services.reranker is None else
                        _reranked(services, self._ref.ask, command))
        return self.searched(result)

    def search_command(self, query: str, top_k: int = 10, mode: SearchMode | UseDefault = DEFAULT,
                       min_score: float | UseDefault | None = DEFAULT,
                       filter: Mapping[str, Any] | None = None, *, include_history: bool = False,
                       as_of: float | str | datetime | None = None, scopes: Iterable[str] | None = None,
                       scope_ids: Mapping[str, str] | None = None,
                       facets: Literal["hits", "scope"] | None = None) -> Search | None:
        """The command ``search`` asks ``ref`` for these arguments, built here and now,
        for a host that asks ``ref`` itself (the HTTP server, with no trio task per
        request); ``searched`` then does what ``search`` does with the reply. None
        when it cannot be built without waiting (the query's vector is the embedding
        thread's to make) or the reply is not the answer as it stands (a reranker
        reorders it): call ``search`` then. Raises what ``search`` raises before it
        asks (InvalidInput)."""
        services = self._services
        if services.reranker is not None:
            return None
        labels = None if scopes is None else scope_labels(scopes, scope_ids)
        chosen = _search_mode(services, query, top_k, mode)
        rows = None
        if chosen in _EMBEDDED:
            rows = services.batcher.embed_queries_now(list(query_texts(query)))
            if rows is None:
                return None
        return _search_of(services, query, top_k, chosen, rows, min_score=min_score,
                          filter=with_scope_labels(filter, labels), include_history=include_history,
                          as_of=as_of, facets=facets)

    def searched(self, result: SearchResult) -> SearchResult:
        """What ``search`` does with its reply before returning it: count one access of
        each hit (sent to the actor later, batched)."""
        if result.hits:
            self._services.touch(self._ref.key, result.hits)
        return result

    # -- categories and actors ------------------------------------------------------------------
    async def categories(self) -> CategoryCatalog:
        """The scope's category catalog, with the memories each holds and how far a
        re-classification is (see ``mnemex.memories.categories``)."""
        reply: CategoryCatalog = await self._ref.ask(GetCategories())
        return reply

    async def set_categories(self, categories: Iterable[Category | Mapping[str, Any]] = (), *,
                             remove: Iterable[str] = (), replace: bool = False,
                             reclassify: bool = False) -> CategoryCatalog:
        """Extend or change the catalog: each category (a ``Category``, or a dict with
        name, description and keywords) replaces the one of its name or is added;
        ``remove`` drops categories; ``replace`` makes ``categories`` the whole catalog.
        A change (or ``reclassify``) re-classifies the scope's memories beside the
        actor, a batch at a time (``categories().reclassifying``); a caller's own
        categories are never changed. Returns the new catalog."""
        given = [item if isinstance(item, Category) else _category(item, i)
                 for i, item in enumerate(categories)]
        reply: CategoryCatalog = await self._ref.ask(SetCategories(
            categories=given, remove=list(remove), replace=replace, reclassify=reclassify, now=time.time()))
        return reply

    async def facets(self, filter: Mapping[str, Any] | None = None, *, min_confidence: float = 0.0,
                     include_history: bool = False, as_of: float | str | datetime | None = None) -> Facets:
        """Active memories per category (those ``filter`` lets through; a category
        counted where its confidence is at least ``min_confidence``)."""
        reply: Facets = await self._ref.ask(GetFacets(filter=dict(filter) if filter else None,
                                                      include_history=include_history, as_of=_as_of(as_of),
                                                      min_confidence=min_confidence))
        return reply

    async def actor_memories(self, actor_id: str, limit: int | None = 100, offset: int = 0, *,
                             include_history: bool = False) -> MemoryPage:
        """The memories linked to an actor (an NPC, an agent, a person): those stored
        with its ``actor_id`` and those in its own part of the scope (``scope_kind``
        actor, ``scope_id`` the actor), in creation order. To search them, filter
        ``{"actor_id": ...}``."""
        reply: MemoryPage = await self._ref.ask(GetActorMemories(
            actor_id=actor_id, limit=limit, offset=offset, include_history=include_history))
        return reply

    # -- keyed memories: a key-value store's items (memories.keyed) --------------------------
    async def put(self, memories: Iterable[Mapping[str, Any]], *, forget: Iterable[str] = (),
                  vectors_of: tuple[str, int] | None = None) -> MemoriesPut:
        """Create or replace memories by id and forget the ids ``forget``, all or none,
        in one command (see ``PutMemories``). Each memory is a dict with ``id`` (the
        caller's), ``content`` and any field of ``remember``, plus ``namespace`` (a
        list of labels), ``key``, ``ttl`` (seconds), ``dedupe`` (default True: a
        content the scope holds comes back as that memory's id). Vectors: by default
        each content is embedded with the scope's model; with ``vectors_of=(name,
        dim)`` they are the caller's, of that model: ``vector`` (the memory's first,
        a list of floats) and ``vectors`` (its others), and a memory without
        ``vector`` has none."""
        now = time.time()
        items = list(memories)
        forget_ids = list(forget)
        if isinstance(forget, str) or any(not isinstance(i, str) for i in forget_ids):
            raise InvalidInput("forget must be a list of memory ids", field="forget")
        batch: list[NewMemory] = []
        for index, item in enumerate(items):
            if not isinstance(item, Mapping) or "id" not in item or "content" not in item:
                raise InvalidInput("each memory to put is a dict with an id and a content",
                                   field=f"memories[{index}]")
            fields = dict(item)
            vector = _caller_vector(fields.pop("vector", None), vectors_of, f"memories[{index}].vector")
            extra = fields.pop("vectors", None) or ()
            if extra and vectors_of is None:
                raise InvalidInput("extra vectors are the caller's: pass vectors_of=(model name, dim)",
                                   field=f"memories[{index}].vectors")
            keyed = {name: fields.pop(name) for name in ("namespace", "key", "ttl", "dedupe")
                     if name in fields}
            if "namespace" in keyed:
                keyed["namespace"] = tuple(keyed["namespace"])
            try:
                memory = msgspec.structs.replace(
                    self._new_memory(fields.pop("content"), fields, now), vector=vector,
                    vectors=tuple(_caller_vector(v, vectors_of, f"memories[{index}].vectors") for v in extra),
                    **keyed)
                config = self._config
                record_of(memory, now, config.memories.max_content_bytes, config.memories.max_metadata_bytes)
            except InvalidInput as exc:
                exc.field = f"memories[{index}]" + (f".{exc.field}" if exc.field else "")
                raise
            batch.append(memory)
        if vectors_of is None and batch:
            vectors = await self._embed([memory.content for memory in batch])
            batch = [msgspec.structs.replace(memory, vector=vector) for memory, vector in zip(batch, vectors,
                                                                                            strict=True)]
            vectors_of = (self.embedder.name, self.embedder.dim)
        name, dim = vectors_of if vectors_of is not None else (None, 0)
        reply: MemoriesPut = await self._ref.ask(PutMemories(memories=batch, forget=forget_ids, embedder=name,
                                                             dim=dim, now=now))
        return reply

    async def search_vector(self, vector: Sequence[float], top_k: int = 10, *, vectors_of: tuple[str, int],
                            namespace: Sequence[str] | None = None, filter: Mapping[str, Any] | None = None
                            ) -> SearchResult:
        """The memories nearest ``vector`` (the caller's embedding of a query, of model
        ``vectors_of=(name, dim)``), best first, each scored by the best of its vectors
        (``hit.scores["cosine"]``); only those under ``namespace`` (keyed memories)
        and not expired, matching ``filter``. No score cut."""
        query = _caller_vector(vector, vectors_of, "vector")
        config = self._config
        most = config.memories.max_top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= most:
            raise InvalidInput(f"top_k must be an integer in 1..{most:,}, got {top_k!r}", field="top_k")
        reply: SearchResult = await self._ref.ask(Search(
            query="", vector=query, embedder=vectors_of[0], dim=vectors_of[1], top_k=top_k, mode="vector",
            min_score=-1.0, filter=dict(filter) if filter else None, now=time.time(),
            namespace=None if namespace is None else tuple(namespace)))
        return reply

    async def memories_in(self, namespace: Sequence[str] = (), filter: Mapping[str, Any] | None = None,
                          limit: int | None = 100, offset: int = 0) -> MemoryPage:
        """A page of the keyed memories under ``namespace`` (every one for ``()``), in id
        order, not expired, matching ``filter``."""
        reply: MemoryPage = await self._ref.ask(ListMemories(
            filter=dict(filter) if filter else None, limit=limit, offset=offset,
            namespace=tuple(namespace), now=time.time()))
        return reply

    async def list_namespaces(self, prefix: Sequence[str] = (), suffix: Sequence[str] = (), *,
                              max_depth: int | None = None, limit: int = 100,
                              offset: int = 0) -> list[tuple[str, ...]]:
        """The namespaces of the scope's keyed memories (see ``ListNamespaces``), sorted."""
        reply: Namespaces = await self._ref.ask(ListNamespaces(
            prefix=tuple(prefix), suffix=tuple(suffix), max_depth=max_depth, limit=limit, offset=offset,
            now=time.time()))
        return reply.namespaces

    async def refresh_expiry(self, memory_ids: Iterable[str]) -> int:
        """Push back the expiry of these memories (those with a ttl) to now + ttl; how many."""
        ids = list(memory_ids)
        if not ids:
            return 0
        changed: int = await self._ref.ask(RefreshExpiry(ids=ids, now=time.time()))
        return changed

    async def forget_expired(self) -> list[str]:
        """Forget the memories whose expiry has passed; their ids."""
        reply: Forgotten = await self._ref.ask(ForgetExpired(now=time.time()))
        return reply.ids

    # -- the entity graph ----------------------------------------------------------------------
    async def entities(self, type: str | None = None, *, name: str | None = None, limit: int = 100,
                       offset: int = 0) -> EntityPage:
        """A page of the scope's entities (people, places, things its memories name),
        most mentioned first; ``type`` keeps one type, ``name`` those with a name or
        alias containing it (any case)."""
        page: EntityPage = await self._ref.ask(ListEntities(entity_type=type, name=name, limit=limit,
                                                            offset=offset))
        return page

    async def entity(self, name: str, *, memories: int = 20, neighbours: int = 10) -> EntityDetail:
        """The entity ``name`` (or any alias) names: its newest ``memories`` memories and
        its ``neighbours`` strongest neighbours (entities its memories also name);
        NotFound when no memory names it and none was declared."""
        detail: EntityDetail = await self._ref.ask(GetEntity(name=name, memories=memories,
                                                             neighbours=neighbours))
        return detail

    async def related(self, entity: str, depth: int = 1, *, limit: int = 20) -> RelatedEntities:
        """The entities within ``depth`` hops (1 or 2) of ``entity`` (any alias), nearest
        and strongest first, each with the memories that relate it."""
        related: RelatedEntities = await self._ref.ask(GetRelated(name=entity, depth=depth, limit=limit))
        return related

    async def declare_entity(self, name: str, type: str = "other",
                             aliases: Iterable[str] = ()) -> EntityChanged:
        """Declare an entity by name (an NPC, a place, a product), with its ``type`` and
        ``aliases``: every memory naming it or an alias, stored or to come, mentions it."""
        if isinstance(aliases, str):
            raise InvalidInput("aliases must be a list of names, not one string", field="aliases")
        changed: EntityChanged = await self._ref.ask(DeclareEntity(name=name, entity_type=type,
                                                                   aliases=list(aliases), now=time.time()))
        return changed

    async def merge_entities(self, names: Iterable[str] | str, into: str) -> EntityChanged:
        """Make ``names`` aliases of the entity ``into`` (alias records, journaled; each
        undone by ``unmerge_entity``)."""
        listed = [names] if isinstance(names, str) else list(names)
        changed: EntityChanged = await self._ref.ask(MergeEntities(names=listed, into=into, now=time.time()))
        return changed

    async def unmerge_entity(self, name: str) -> EntityChanged:
        """Undo the merge (or declared alias) that made ``name`` an alias."""
        changed: EntityChanged = await self._ref.ask(UnmergeEntity(name=name, now=time.time()))
        return changed

    async def graph_stats(self) -> GraphStats:
        """Counts of the scope's entity graph."""
        stats: GraphStats = await self._ref.ask(GetGraphStats())
        return stats

    # -- knowledge ---------------------------------------------------------------------------
    async def extract_from(self, session_id: str, messages: Sequence[Any] | None = None, *,
                           provider: Callable[[int, int], Any] | None = None, count: int | None = None,
                           if_needed: bool = False) -> Extracted:
        """Extract facts from a conversation the host keeps in its own store: either
        ``messages``, the session's whole history as chat messages (position i is
        ``messages[i]``), or a ``provider(first, upto)`` giving the messages of
        positions [first, upto) (sync or async) with ``count`` the number the session
        has. The scope tracks what it extracted per session: calling again extracts
        only what is new. ``if_needed``: only when the buffer (config.knowledge.turns /
        tokens) is full, without waiting. Returns what changed once committed;
        ExtractionError when the extractor failed (the job is retried, then
        dead-lettered)."""
        read, known = _session_reader(messages, provider, count, counted=True)
        return await extract_session(self._ref.ask, session_id, read, known,
                                     mode="if_needed" if if_needed else "now")

    async def extraction_status(self, session_id: str | None = None) -> list[CursorInfo]:
        """Each session's extraction cursor (or ``session_id``'s): what was extracted,
        the job in flight, failures and dead letters."""
        return await cursors(self._ref.ask, session_id)

    async def retry_dead_letter(self, session_id: str, first: int, messages: Sequence[Any] | None = None, *,
                                provider: Callable[[int, int], Any] | None = None) -> Extracted:
        """Extract the dead letter of ``session_id`` that starts at position ``first``
        again, reading the messages as ``extract_from`` does."""
        read, _ = _session_reader(messages, provider, None, counted=False)
        return await retry_dead_letter(self._ref.ask, session_id, first, read)

    async def history(self, memory_id: str) -> MemoryHistory:
        """How a memory came to be: its changes, and the memories it superseded or
        absorbed and those that superseded or absorbed it."""
        reply: MemoryHistory = await self._ref.ask(GetHistory(id=memory_id))
        return reply

    # -- moving memories between data directories --------------------------------------------
    async def export(self, include_vectors: bool = True) -> AsyncIterator[ExportedMemory]:
        """Every memory of this scope, superseded and merged ones too, in creation (id)
        order, as the lines of an export (see ``mnemex.memories.transfer``): the whole
        record and, with ``include_vectors``, its stored vector and embedder. The
        records are those held when the export starts; memories written meanwhile are
        not in it."""
        async for page in self._export_pages(await self._records_to_export(), include_vectors):
            for item in page:
                yield item

    async def import_records(self, memories: Iterable[ExportedMemory]) -> ImportReport:
        """Store exported memories in this scope, whatever scope they came from, each as
        exported: id, times, status, history, links. One whose id or exact content the
        scope holds already is skipped, so importing again adds nothing. A memory
        without a vector, or with one of another embedder than this runtime's, is
        embedded again. Every memory is checked before any is stored (InvalidInput
        naming ``memories[i]``); then they go in batches of
        ``config.memories.max_memories_per_command``, each all or none."""
        limits = self._config.memories
        items: list[ExportedMemory] = []
        for index, item in enumerate(memories):
            try:
                items.append(check_exported(item, limits.max_content_bytes, limits.max_metadata_bytes))
            except InvalidInput as exc:
                exc.field = f"memories[{index}]" + (f".{exc.field}" if exc.field else "")
                raise
        return await self._import(items)

    async def _records_to_export(self) -> list[MemoryRecord]:
        page = await self.memories(limit=None, include_history=True)
        return page.memories

    async def _export_pages(self, records: Sequence[MemoryRecord],
                            include_vectors: bool) -> AsyncIterator[list[ExportedMemory]]:
        step = self._config.memories.max_memories_per_command
        for start in range(0, len(records), step):
            chunk = records[start:start + step]
            found = Vectors(vectors={})
            if include_vectors:
                found = await self._ref.ask(GetVectors(ids=[record.id for record in chunk]))
            page: list[ExportedMemory] = []
            for record in chunk:
                vector = found.vectors.get(record.id)
                page.append(ExportedMemory(app_name=self.app_name, user_id=self.user_id, memory=record,
                                           embedder=found.embedder if vector is not None else None,
                                           dim=found.dim if vector is not None else 0, vector=vector))
            yield page

    async def _import(self, items: Sequence[ExportedMemory]) -> ImportReport:
        """Send checked ``items``, embedding again those that need it (but not those
        whose id or content the scope held when the import began: it skips them)."""
        if not items:
            return ImportReport()
        held = await self._records_to_export()
        held_ids = {record.id for record in held}
        held_contents = {record.content for record in held}
        embedder = self.embedder
        added = skipped = reembedded = 0
        step = self._config.memories.max_memories_per_command
        for start in range(0, len(items), step):
            chunk = items[start:start + step]
            vectors: list[bytes | None] = []
            todo: list[int] = []
            for index, item in enumerate(chunk):
                record = item.memory
                if record.id in held_ids or record.content in held_contents:
                    vectors.append(None)  # skipped by the scope: not worth embedding
                elif item.vector is None or (item.embedder, item.dim) != (embedder.name, embedder.dim):
                    vectors.append(None)
                    todo.append(index)
                else:
                    vectors.append(item.vector)
            if todo:
                made = await self._embed([chunk[index].memory.content for index in todo])
                for index, vector in zip(todo, made, strict=True):
                    vectors[index] = vector
            reply: Imported = await self._ref.ask(ImportMemories(
                records=[item.memory for item in chunk], vectors=vectors, embedder=embedder.name,
                dim=embedder.dim, now=time.time()))
            new = set(reply.ids_added)
            added += len(reply.ids_added)
            skipped += reply.skipped
            reembedded += sum(chunk[index].memory.id in new for index in todo)
        return ImportReport(scopes=1, added=added, skipped=skipped, reembedded=reembedded)

    async def recall(self, query: str, top_k: int = 5, *, mode: SearchMode | UseDefault = DEFAULT,
                     min_score: float | UseDefault | None = DEFAULT,
                     filter: Mapping[str, Any] | None = None) -> str:
        """The memories relevant to ``query``, formatted for a model's context (see
        format_as_context); empty when nothing matches."""
        result = await self.search(query, top_k, mode, min_score, filter)
        return format_as_context(result.hits)

    # -- documents ---------------------------------------------------------------------------
    async def ingest(self, source: str | os.PathLike[str] | bytes, media_type: str | None = None, *,
                     document_id: str | None = None, title: str | None = None,
                     metadata: Mapping[str, Any] | None = None, extract: bool = True,
                     progress: Callable[[IngestProgress], Any] | None = None) -> IngestReport:
        """Store a document in this scope: its text, cut into chunks, each a memory of
        kind ``document_chunk`` searchable as soon as this returns; then (``extract``)
        extraction of facts from it starts beside the scope, job after job.

        ``source``: a file's path, or the document's bytes (text too: pass
        ``text.encode()``). ``media_type``: text/plain, text/markdown (a ``charset=``
        parameter is read), application/pdf (the ``documents`` extra), image/png or
        image/jpeg (read by OCR: the ``ocr`` extra and Debian's ``tesseract-ocr``);
        None: told from the bytes and the file name. ``document_id``: the sha256 of
        the bytes (hex) unless given; ingesting a document the scope holds already
        reads nothing again and stores nothing (``status`` unchanged), but resumes
        its extraction if that stopped half way (a restart). ``title``: the caller's,
        else the PDF's or the Markdown's own, else the file name. ``metadata`` goes
        into every chunk's, with ``document_id``, ``chunk``, ``page`` (``page_end``
        when a chunk runs over two pages), ``headings`` (the Markdown heading path),
        ``title`` and ``media_type``; each chunk's ``sources`` name the document and
        the chunk. Chunks follow ``config.knowledge.chunk_chars`` and
        ``chunk_overlap`` (see ``mnemex.knowledge.chunks``).

        ``progress``: called (and awaited, when it returns an awaitable) with an
        ``IngestProgress`` after every 8 pages read, once the chunks are cut, after
        every 64 chunks embedded, once they are stored, when extraction starts, and
        when done. The document is stored all or nothing, in one journaled command.
        InvalidInput (a media type mnemex does not read, bytes that do not read as
        it, a missing engine: the message names what to install), TooLarge past
        ``config.knowledge.max_document_bytes`` or ``memories.max_memories_per_command``
        chunks, NotFound for a path with no file."""
        started = time.perf_counter()
        seconds_: dict[str, float] = {}
        config = self._config
        knowledge, limits = config.knowledge, config.memories
        data, name = await self._document_bytes(source, knowledge.max_document_bytes)
        media, charset = media_type_of(data, media_type, name)
        doc_id = hashlib.sha256(data).hexdigest() if document_id is None else check_document_id(document_id)
        check_title(title)
        given = check_metadata(dict(metadata) if isinstance(metadata, Mapping) else metadata or {},
                               limits.max_metadata_bytes)

        async def report(stage: IngestStage, done: int, total: int) -> None:
            if progress is not None:
                said = progress(IngestProgress(doc_id, stage, done, total))
                if inspect.isawaitable(said):
                    await said

        def lap(stage: str, since: float) -> float:
            now_ = time.perf_counter()
            seconds_[stage] = round(now_ - since, 6)
            return now_

        held: list[DocumentStatus] = await self._ref.ask(GetDocuments(document_id=doc_id))
        if held and (held[0].memories or not held[0].document.chunks):
            known = held[0]
            extraction = "off"
            if extract and known.extracted < known.document.chunks:
                extraction = (await self._ref.ask(ExtractDocument(doc_id, time.time()))).status
            await report("done", known.document.chunks, known.document.chunks)
            lap("total", started)
            return IngestReport(document=known.document, status="unchanged", extraction=extraction,
                                seconds=seconds_)
        # read: page by page in a worker thread (PDFium and Tesseract block)
        settings = ReadSettings(ocr_languages=knowledge.ocr_languages, ocr_timeout=knowledge.ocr_timeout,
                                ocr_pdf_pages=knowledge.ocr_pdf_pages)
        reader = await trio.to_thread.run_sync(open_document, data, media, charset, settings)
        pages: list[Page] = []
        try:
            for first in range(0, reader.pages, 8):
                pages += await trio.to_thread.run_sync(reader.read, first, min(reader.pages, first + 8))
                await report("read", len(pages), reader.pages)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(reader.close)
        mark = lap("read", started)
        markdown = media == "text/markdown"
        chunks = await trio.to_thread.run_sync(functools.partial(
            chunk_pages, pages, markdown=markdown, max_chars=knowledge.chunk_chars,
            overlap=knowledge.chunk_overlap, max_bytes=limits.max_content_bytes))
        if len(chunks) > limits.max_memories_per_command:
            raise TooLarge(f"the document makes {len(chunks):,} chunks; one document may make at most "
                           f"{limits.max_memories_per_command:,} (config.memories.max_memories_per_command; "
                           f"or raise config.knowledge.chunk_chars)", field="source")
        named = title.strip() if title is not None else (
            reader.title or title_of(pages, markdown) or (os.path.basename(name) if name else None))
        now = time.time()
        info = DocumentInfo(id=doc_id, media_type=media, title=named, size=len(data), pages=len(pages),
                            chunks=len(chunks), ingested_at=now, metadata=given)
        session = document_session(doc_id)
        first_id = self._services.ids.reserve(now, max(1, len(chunks)))
        memories = [self._new_memory(chunk.text, {
            "id": id_at(first_id, chunk.index), "kind": CHUNK_KIND, "session_id": session,
            "source": "document", "timestamp": now, "metadata": chunk_metadata(
                given, document_id=doc_id, chunk=chunk.index, pages=chunk.pages, headings=chunk.headings,
                title=named, media_type=media)}, now) for chunk in chunks]
        await report("chunk", len(chunks), len(chunks))
        mark = lap("chunk", mark)
        vectors: list[bytes] = []
        for first in range(0, len(memories), _EMBED_SLICE):
            vectors += await self._embed([memory.content for memory in memories[first:first + _EMBED_SLICE]])
            if len(vectors) % 64 < _EMBED_SLICE or len(vectors) == len(memories):
                await report("embed", len(vectors), len(memories))
        mark = lap("embed", mark)
        embedder = self.embedder
        stored: DocumentIngested = await self._ref.ask(IngestDocument(
            document=info, memories=[msgspec.structs.replace(memory, vector=vector)
                                     for memory, vector in zip(memories, vectors, strict=True)],
            embedder=embedder.name, dim=embedder.dim, now=now, classify=True))
        await report("store", len(chunks), len(chunks))
        mark = lap("store", mark)
        extraction = "off"
        if extract and chunks:
            extraction = (await self._ref.ask(ExtractDocument(doc_id, time.time()))).status
            await report("extract", 0, len(chunks))
        lap("extract", mark)
        await report("done", len(chunks), len(chunks))
        lap("total", started)
        return IngestReport(document=stored.document, status="unchanged" if stored.unchanged else "ingested",
                            ids=stored.ids, stored=sum(stored.created), extraction=extraction,
                            seconds=seconds_, warnings=reader.warnings)

    async def documents(self, document_id: str | None = None) -> list[DocumentStatus]:
        """The documents this scope holds (or the one ``document_id``), in the order
        ingested: each one's info, its chunks still stored and how far extraction went."""
        reply: list[DocumentStatus] = await self._ref.ask(GetDocuments(document_id=document_id))
        return reply

    async def extract_document(self, document_id: str) -> Extracted:
        """Extract facts from an ingested document now: job after job (each
        ``config.knowledge.max_batch`` chunks) until every chunk is covered; returns
        what changed (``status`` in_flight when a job of it was running already: it
        goes on by itself). ExtractionError when a job failed (it is retried);
        NotFound when the scope holds no such document."""
        replies: list[Extracted] = []
        while True:
            reply: Extracted = await self._ref.ask(ExtractDocument(document_id, time.time(), "now"))
            if reply.status in ("failed", "dead_letter", "expired"):
                raise ExtractionError(f"extracting document {document_id!r} failed: {reply.error}; it is "
                                      f"retried (see the scope's documents())",
                                      reason=(reply.error or "error").split(":", 1)[0])
            if reply.status != "committed":
                return merge_extracted(replies) if replies else reply
            replies.append(reply)
            known = await self.documents(document_id)
            if not known or reply.upto >= known[0].document.chunks:
                return merge_extracted(replies)

    async def forget_document(self, document_id: str) -> list[str]:
        """Forget a document: its chunks (but for those whose text another document, or
        a memory of the user's, holds too: they only lose the source naming it), the
        facts extracted from it (its session ``doc:<id>``), its extraction state and its
        record. Returns the ids of the memories forgotten (empty, and nothing changed,
        for a document the scope does not hold)."""
        reply: Forgotten = await self._ref.ask(ForgetDocument(document_id=document_id, now=time.time()))
        return reply.ids

    @staticmethod
    async def _document_bytes(source: Any, limit: int) -> tuple[bytes, str | None]:
        """The bytes of ``source`` (bytes, or a file's path) and its file name."""
        if isinstance(source, bytes | bytearray | memoryview):
            data, name = bytes(source), None
        elif isinstance(source, str | os.PathLike):
            path = os.fspath(source)
            try:
                size = os.stat(path).st_size
                if size > limit:
                    raise TooLarge(f"{path} is {size:,} bytes; the limit is {limit:,} "
                                   f"(config.knowledge.max_document_bytes)", field="source")
                data = await trio.to_thread.run_sync(pathlib.Path(path).read_bytes)
            except FileNotFoundError:
                hint = " (to ingest text itself, pass its bytes: text.encode())" if "\n" in str(path) or \
                    len(str(path)) > 255 else ""
                raise NotFound(f"no file {str(path)[:200]!r}{hint}") from None
            except OSError as exc:
                raise InvalidInput(f"cannot read {path!r}: {exc.strerror or exc}", field="source") from exc
            name = os.path.basename(str(path))
        else:
            raise InvalidInput(f"source must be a file's path or the document's bytes, got "
                               f"{type(source).__name__}", field="source")
        if len(data) > limit:
            raise TooLarge(f"the document is {len(data):,} bytes; the limit is {limit:,} "
                           f"(config.knowledge.max_document_bytes)", field="source")
        return data, name


def _session_reader(messages: Sequence[Any] | None, provider: Callable[[int, int], Any] | None,
                    count: int | None, *, counted: bool) -> tuple[ReadMessages, int]:
    """How a job reads a session a host keeps, and how many messages it has: its
    ``messages`` (a list) or a ``provider(first, upto)`` with ``count`` (needed when
    ``counted``). InvalidInput naming what is wrong."""
    if (messages is None) == (provider is None):
        raise InvalidInput("give the session's messages or a provider (not both)", field="messages")
    if provider is not None:
        if not callable(provider):
            raise InvalidInput("provider must be a callable (first, upto) -> messages", field="provider")
        if counted and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
            raise InvalidInput(f"count (the session's number of messages) must be an int >= 0 with a "
                               f"provider, got {count!r}", field="count")
        return provider_reader(provider), count or 0
    if isinstance(messages, str | bytes | Mapping):
        raise InvalidInput("messages must be a list of chat messages", field="messages")
    listed = list(messages or ())
    return list_reader(listed), len(listed)


def _as_of(value: float | str | datetime | None) -> float | None:
    return None if value is None else seconds(value, "as_of")


def _category(item: Any, index: int) -> Category:
    if not isinstance(item, Mapping):
        raise InvalidInput(f"categories[{index}] must be a Category or a dict (name, description, keywords), "
                           f"got {type(item).__name__}", field=f"categories[{index}]")
    try:
        return msgspec.convert(dict(item), Category)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"categories[{index}]: {exc}", field=f"categories[{index}]") from exc


MIN_READABLE: Final = 0.5
"""A hybrid search whose query the embedder cannot read (fewer than half its word
pieces known to the model: "咖啡", "ส้มตำ" with the default English model) searches
by words alone, and says so (``SearchResult.mode`` is ``fulltext``): the vector of
a text of unknown tokens is alike for every such text, and it found a Thai memory
first for a Chinese query."""


async def _search_command(services: ScopeServices, query: Any, top_k: int, *,
                          mode: SearchMode | UseDefault, min_score: float | UseDefault | None,
                          filter: Mapping[str, Any] | None, include_history: bool = False,
                          as_of: float | str | datetime | None = None,
                          facets: Literal["hits", "scope"] | None = None) -> Search:
    chosen = _search_mode(services, query, top_k, mode)
    rows = None
    if chosen in _EMBEDDED:
        rows = await services.batcher.embed_queries(list(query_texts(query)))
    return _search_of(services, query, top_k, chosen, rows, min_score=min_score, filter=filter,
                      include_history=include_history, as_of=as_of, facets=facets)


_EMBEDDED: Final = ("vector", "hybrid")  # the modes whose search embeds the query


def _search_mode(services: ScopeServices, query: Any, top_k: int,
                 mode: SearchMode | UseDefault) -> SearchMode:
    """The mode a search of ``query`` runs in, once its arguments are checked."""
    config = services.config
    if not isinstance(query, str):
        raise InvalidInput(f"query must be a string, got {type(query).__name__}", field="query")
    chosen = config.memories.search_mode if mode is DEFAULT else mode
    if chosen not in _MODES:
        raise InvalidInput(f"mode is {chosen!r}; use keyword, fulltext, vector, hybrid or DEFAULT",
                           field="mode")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= config.memories.max_top_k:
        raise InvalidInput(f"top_k must be an integer in 1..{config.memories.max_top_k:,}, got {top_k!r}",
                           field="top_k")
    return chosen


def _search_of(services: ScopeServices, query: str, top_k: int, chosen: SearchMode, rows: F32 | None, *,
               min_score: float | UseDefault | None, filter: Mapping[str, Any] | None,
               include_history: bool, as_of: float | str | datetime | None,
               facets: Literal["hits", "scope"] | None) -> Search:
    """The Search command in mode ``chosen``; ``rows``: the vectors of the query and
    its first-person wording (queries.py), for the modes that embed it."""
    vector: bytes | None = None
    embedder = services.embedder
    if rows is not None:
        if chosen == "hybrid" and readable(embedder, query) < MIN_READABLE:
            chosen = "fulltext"  # the model cannot read the query: its vector would mislead
        else:
            mean = rows[0] if len(rows) == 1 else rows.mean(axis=0)  # (the mean of one row is that row)
            norm = float(np.sqrt(mean.dot(mean)))  # np.linalg.norm's own sum, without its checks
            # (x / 1 is x: a unit row, most of an embedder's, is not divided)
            unit = mean / norm if norm > 0 and norm != 1.0 else mean
            # a finite norm says every value is finite: the scope need not read the bytes again
            vector = encode_noted(unit) if math.isfinite(norm) else encode_vector(unit)
    return Search(query=query, vector=vector, embedder=embedder.name if vector is not None else None,
                  dim=embedder.dim if vector is not None else 0, top_k=top_k, mode=chosen,
                  min_score=_wire_min_score(min_score), filter=dict(filter) if filter else None,
                  now=time.time(), include_history=include_history, as_of=_as_of(as_of), facets=facets)


async def _reranked(services: ScopeServices, ask: Callable[[Search], Awaitable[SearchResult]],
                    command: Search) -> SearchResult:
    """What ``command`` finds. With a reranker: the search's best
    ``config.models.rerank_candidates`` (at least top_k) are scored by it in a worker
    thread, beside the actor, and the top_k best by that score are returned in its
    order (ties keep the search's), each with it as ``scores["rerank"]``; ``score``
    stays the search's own (0..1, comparable across scopes)."""
    reranker = services.reranker
    if reranker is None:
        return await ask(command)
    config = services.config
    wanted = min(max(command.top_k, config.models.rerank_candidates), config.memories.max_top_k)
    result = await ask(msgspec.structs.replace(command, top_k=wanted))
    if not result.hits:
        return result
    scores = await rerank_beside(reranker, command.query, [hit.memory.content for hit in result.hits])
    order = sorted(range(len(result.hits)), key=lambda i: -scores[i])[:command.top_k]
    ranked = [(result.hits[i], float(scores[i])) for i in order]
    hits = [msgspec.structs.replace(hit, scores={**hit.scores, "rerank": score}) for hit, score in ranked]
    facets = facets_of_hits(hits) if command.facets == "hits" else result.facets
    return msgspec.structs.replace(result, hits=hits, facets=facets)


def _wire_min_score(min_score: float | UseDefault | None) -> float | None:
    """``Search.min_score``: None there is the mode's own cut; "no cut" is -1, below
    every score a mode gives (every score is at least 0)."""
    if min_score is DEFAULT:
        return None
    return -1.0 if min_score is None else min_score


async def search_scopes(services: ScopeServices, query: str, scopes: Iterable[tuple[str, str]],
                        top_k: int = 10, *, mode: SearchMode | UseDefault = DEFAULT,
                        min_score: float | UseDefault | None = DEFAULT,
                        filter: Mapping[str, Any] | None = None, include_history: bool = False,
                        as_of: float | str | datetime | None = None) -> SearchResult:
    """Search several scopes (``(app_name, user_id)`` pairs) at once: the query is
    embedded once, every scope is asked concurrently, and the hits are merged into
    one ranking (scores are in 0..1 in every scope; ties: newest first). Each hit
    names its scope. With ``config.memories.fusion = "rrf"`` hybrid scores are rank-based and
    compare less well across scopes than the default weighted fusion."""
    keys = list(dict.fromkeys((app, user) for app, user in scopes))
    for app, user in keys:
        if not isinstance(app, str) or not app or not isinstance(user, str) or not user:
            raise InvalidInput(f"a scope is (app_name, user_id), both non-empty strings; got {(app, user)!r}",
                               field="scopes")
    command = await _search_command(services, query, top_k, mode=mode, min_score=min_score, filter=filter,
                                    include_history=include_history, as_of=as_of)
    if not keys:
        return SearchResult(hits=[], mode=command.mode)
    results: dict[Key, SearchResult] = {}

    async def ask(key: Key) -> None:
        results[key] = await services.host.ask(services.kind.name, key, command)

    async with trio.open_nursery() as nursery:
        for key in keys:
            nursery.start_soon(ask, key)
    merged = [hit for key in keys for hit in results[key].hits]
    merged.sort(key=lambda hit: (-hit.score, -hit.memory.timestamp, hit.app_name, hit.user_id, hit.memory.id))
    merged = merged[:top_k]
    for key in keys:
        services.touch(key, (hit for hit in merged if (hit.app_name, hit.user_id) == key))
    return SearchResult(hits=merged, mode=command.mode)


async def remember_in_scopes(services: ScopeServices,
                             items: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[str]:
    """Store memories in several scopes, ``[(app_name, user_id, {"content": ..., ...})]``,
    all or none: every memory of every scope is checked before any is stored (an
    error names ``memories[i]``); if storing in one scope fails, what the earlier
    scopes newly stored is forgotten again. Returns the ids in the order given.
    The scopes' texts are embedded together, those of the next scopes while one
    stores (see ``_remember_batches``)."""
    now = time.time()
    groups: dict[tuple[str, str], list[int]] = {}
    for index, (app_name, user_id, _) in enumerate(items):
        groups.setdefault((app_name, user_id), []).append(index)
    prepared: list[tuple[ScopeRef, list[int], list[NewMemory]]] = []
    for (app_name, user_id), indexes in groups.items():
        scope = ScopeRef(services, user_id=user_id, app_name=app_name)
        prepared.append((scope, indexes, scope._checked_many([items[i][2] for i in indexes], now, indexes)))
    batches: list[tuple[ActorRef, list[NewMemory]]] = []
    owners: list[tuple[ScopeRef, list[int]]] = []  # each batch's scope, and its memories' places in items
    step = services.config.memories.max_memories_per_command
    for scope, indexes, checked in prepared:
        for start in range(0, len(checked), step):
            batches.append((scope.ref, checked[start:start + step]))
            owners.append((scope, indexes[start:start + step]))
    replies: list[Remembered] = []
    try:
        await _remember_batches(services, batches, replies)
    except BaseException:
        with trio.CancelScope(shield=True):
            for (scope, _), reply in zip(owners, replies, strict=False):
                new_ids = [memory_id for memory_id, new in zip(reply.ids, reply.created, strict=True) if new]
                if new_ids:
                    await scope.forget_many(new_ids)
        raise
    ids: list[str] = [""] * len(items)
    for (_, indexes), reply in zip(owners, replies, strict=True):
        for i, memory_id in zip(indexes, reply.ids, strict=True):
            ids[i] = memory_id
    return ids


async def _remember_batches(services: ScopeServices, batches: Sequence[tuple[ActorRef, list[NewMemory]]],
                            replies: list[Remembered]) -> None:
    """Embed each batch's memories and send them to its scope in one Remember, batch
    after batch, appending each reply to ``replies`` (so that a caller whose batch
    failed knows what the ones before it stored). The texts of the batches after
    the one being stored are embedded meanwhile (``EmbeddingBatcher.embed_each``):
    the model does not wait for the actors, nor they for it."""
    embedder = services.embedder
    now = time.time()

    async def store(index: int, vectors: npt.NDArray[np.float32]) -> None:
        scope, memories = batches[index]
        with_vectors = [msgspec.structs.replace(memory, vector=vector)
                        for memory, vector in zip(memories, _encoded_rows(vectors), strict=True)]
        replies.append(await scope.ask(Remember(memories=with_vectors, embedder=embedder.name,
                                                dim=embedder.dim, now=now, classify=True)))

    await services.batcher.embed_each([[memory.content for memory in memories] for _, memories in batches],
                                      store)


def _name_item(exc: InvalidInput, place: int) -> None:
    """Make ``exc`` name the item of a batch it is about, ``memories[place]``."""
    exc.field = f"memories[{place}]" + (f".{exc.field}" if exc.field else "")


def _encoded_rows(matrix: npt.NDArray[np.float32]) -> list[bytes]:
    """Each row of ``matrix`` as ``encode_vector`` writes it (the matrix encoded once)."""
    data = encode_vector(matrix)
    size = len(data) // len(matrix) if len(matrix) else 0
    return [data[start:start + size] for start in range(0, len(data), size)] if size else [b""] * len(matrix)


# -- whole data directories ---------------------------------------------------------------------
async def export_scopes(services: ScopeServices, out: IO[str], scopes: Iterable[tuple[str, str]], *,
                        include_vectors: bool = True) -> ExportHeader:
    """Write the memories of ``scopes`` (``(app_name, user_id)`` pairs) to ``out`` as an
    export (see ``mnemex.memories.transfer``): the header, then each scope's memories
    in creation order; scopes without memories are left out. Returns the header.
    Each scope's records are taken when the export starts, so the header's counts
    are exact; vectors are read and lines written a page at a time."""
    refs = [ScopeRef(services, user_id=user_id, app_name=app_name)
            for app_name, user_id in dict.fromkeys((app_name, user_id) for app_name, user_id in scopes)]
    taken = [(ref, await ref._records_to_export()) for ref in refs]
    taken = [(ref, records) for ref, records in taken if records]
    header = ExportHeader(exported_at=time.time(), scopes=len(taken),
                          memories=sum(len(records) for _, records in taken))
    out.write(encode_line(header))
    for ref, records in taken:
        async for page in ref._export_pages(records, include_vectors):
            out.write("".join(encode_line(item) for item in page))
    return header


async def import_lines(services: ScopeServices, lines: Iterable[str | bytes]) -> ImportReport:
    """Read an export (its lines) into the scopes it names, ids preserved. Every line
    is read and checked before anything is stored (InvalidInput naming the line; the
    export is held in memory meanwhile); then each scope's memories go in as
    ``ScopeRef.import_records`` sends them, a batch at a time. Importing the same
    export again adds nothing, so an import that failed half way (the disk, the
    embedder) is finished by running it again."""
    limits = services.config.memories
    export = read_export(lines, limits.max_content_bytes, limits.max_metadata_bytes)
    groups: dict[tuple[str, str], list[ExportedMemory]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for number, item in export.memories:
        key = (item.app_name, item.user_id)
        groups.setdefault(key, []).append(item)
        first_line.setdefault(key, number)
    refs: list[tuple[ScopeRef, list[ExportedMemory]]] = []
    for (app_name, user_id), items in groups.items():
        try:
            refs.append((ScopeRef(services, user_id=user_id, app_name=app_name), items))
        except InvalidInput as exc:  # a key the kernel refuses (too long, say)
            number = first_line[(app_name, user_id)]
            raise InvalidInput(f"line {number}: {exc}", field=f"line {number}") from exc
    added = skipped = reembedded = 0
    for ref, items in refs:
        report = await ref._import(items)
        added += report.added
        skipped += report.skipped
        reembedded += report.reembedded
    return ImportReport(scopes=len(refs), added=added, skipped=skipped, reembedded=reembedded)


# -- sessions of agents into memory --------------------------------------------------------------
async def archive_session(services: ScopeServices, agent_kind: str, agent_name: str, session_id: str, *,
                          user_id: str, app_name: str) -> SessionAdded:
    """Move one session of an agent's short-term memory into the long-term memory of
    (app_name, user_id), actor to actor: the agent sends the session's user and
    assistant messages with text (author: the message's name or role; the role
    kept too) to the scope, which embeds them beside itself and stores them, an
    assistant's echo of the user's statement merged into it (as ``add_session``);
    the answer comes from the scope. The agent keeps the session. Adding it again
    adds nothing twice.
    NotFound when the agent has no such session (or it has no text)."""
    for value, what in ((user_id, "user_id"), (app_name, "app_name")):
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
    now = time.time()
    reply: SessionAdded = await services.host.ask(agent_kind, agent_name, ArchiveSession(
        session_id=session_id, app_name=app_name, user_id=user_id, scope_kind=services.kind.name,
        first_id=services.ids.reserve(now), now=now))
    return reply


def _caller_vector(vector: Any, vectors_of: tuple[str, int] | None, what: str) -> bytes | None:
    """A caller's vector (floats, of model ``vectors_of``) as a command carries it:
    float32 bytes, checked finite, non-zero and of the model's dimension."""
    if vector is None:
        return None
    if vectors_of is None:
        raise InvalidInput(f"{what} is the caller's: pass vectors_of=(model name, dim)", field=what)
    name, dim = vectors_of
    if not isinstance(name, str) or not name or isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise InvalidInput(f"vectors_of must be (model name, dim), got {vectors_of!r}", field="vectors_of")
    try:
        row = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} must be a list of numbers", field=what) from exc
    if row.shape != (dim,) or not np.isfinite(row).all() or not row.any():
        raise InvalidInput(f"{what} must be {dim} finite numbers, not all zero (model {name!r})", field=what)
    return encode_vector(row)
