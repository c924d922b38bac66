"""Long-term memory's messages: the commands a scope actor (key: (app_name, user_id))
accepts, its replies, and the records users touch."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from mnemex._protocol import Command, Reply
from mnemex.knowledge.categories import Category

__all__ = [
    "ForgetExpired",
    "KEYED_WRITES",
    "ListNamespaces",
    "MemoriesPut",
    "Namespaces",
    "PutMemories",
    "RefreshExpiry",
    "AddSession",
    "ApplyExtraction",
    "Change",
    "Extracted",
    "ExtractionFailed",
    "GetHistory",
    "JobUsage",
    "MemoryHistory",
    "MemoryStatus",
    "NewFact",
    "SourceRef",
    "CountMemories",
    "Event",
    "Forget",
    "ForgetWhere",
    "Forgotten",
    "GetMemory",
    "GetScopeStats",
    "GetVectors",
    "Hit",
    "ImportMemories",
    "Imported",
    "ListMemories",
    "MemoryEntry",
    "MemoryPage",
    "MemoryRecord",
    "NewMemory",
    "Remember",
    "Remembered",
    "SCOPE_WRITES",
    "ScopeCommand",
    "ScopeCommandType",
    "ScopeRead",
    "ScopeStats",
    "ScopeWrite",
    "Search",
    "SearchMode",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "Session",
    "SessionAdded",
    "StoreSession",
    "Touch",
    "Touched",
    "UpdateMemory",
    "Updated",
    "Vectors",
    "DocumentInfo",
    "DocumentIngested",
    "DocumentStatus",
    "ForgetDocument",
    "GetDocuments",
    "IngestDocument",
    "IngestProgress",
    "IngestReport",
    "IngestStage",
    "AliasRecord",
    "ApplyClassification",
    "CategoryCatalog",
    "Classified",
    "Facets",
    "GetActorMemories",
    "GetCategories",
    "GetFacets",
    "SetCategories",
    "DeclareEntity",
    "EntityChanged",
    "EntityDetail",
    "EntityInfo",
    "EntityLink",
    "EntityPage",
    "GetEntity",
    "GetGraphStats",
    "GetRelated",
    "GraphStats",
    "ListEntities",
    "MergeEntities",
    "RelatedEntities",
    "ResolveNames",
    "TypedRelation",
    "UnmergeEntity",
]

MemoryStatus = Literal["active", "superseded", "merged"]


class SourceRef(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Where a memory came from: messages ``first``..``last`` (positions) of session
    ``session_id``, or chunk ``chunk`` of document ``document``."""

    session_id: str | None = None
    first: int | None = None
    last: int | None = None
    document: str | None = None
    chunk: int | None = None


class Change(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One step in how a memory came to be (``MemoryRecord.history``).

    ``op``: created, reinforced (stated again), absorbed (a duplicate wording was
    merged into it), merged (it was merged into ``other``), superseded (by
    ``other``), supersedes (it replaced ``other``), linked (to ``other``: it extends
    it, or conflicts with it when ``note`` says so), reactivated, updated. ``by``:
    the extractor (``rules``, ``llm:<model>:<prompt>``), ``archive`` (an
    assistant's echo of the user's statement merged into it when its session was
    archived, ``note`` ``echo``) or ``user``; ``source``: the messages that said
    so."""

    at: float
    op: str
    by: str | None = None
    other: str | None = None
    note: str | None = None
    source: SourceRef | None = None


class MemoryRecord(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One long-term memory of a (app_name, user_id) scope.

    Times are seconds since the epoch (UTC). ``timestamp`` is when the original
    content happened (observed), ``created_at`` when mnemex stored it;
    ``valid_at`` / ``invalid_at`` when what it says became and stopped being true
    in the world (None: unknown; a superseded fact ends when its successor was
    observed). ``id`` is assigned by the runtime and sorts by creation time.

    Knowledge fields: ``kind`` (fact, preference, event, plan, relationship,
    message, ...); ``category_confidences`` beside ``categories``; ``status``:
    active, superseded (``superseded_by``) or merged (``merged_into``): reads
    return active memories unless asked for history; ``attributed_to``: whom it is
    about; ``sources``: the messages or chunks it came from; ``extractor``: what
    made it (None: stored by a caller); ``reinforced``: times it was stated again;
    ``links``: memories it extends or conflicts with; ``history``: its changes.

    ``categories`` come with ``category_confidences`` (0..1, one each; a caller's
    own categories have none and count as 1.0); ``classified_by`` says what chose
    them: ``caller``, the extractor (``rules``, ``llm:<model>:<prompt>``) or the
    offline classifier (``rules-classifier:<version>``); ``misc`` is the category of
    a memory nothing classified with enough confidence. ``actor_id``: the actor (an
    NPC, an agent, a person) it is linked to. ``scope_kind``/``scope_id``: the part of
    the user's memory it belongs to (``global``, or ``campaign``/``ash``...), see
    ``scope_label``.

    Keyed memories (stored by ``PutMemories``, a key-value store's items):
    ``namespace`` (a path) and ``key`` name it; ``vectors`` are embeddings of its
    other parts beside the one in the vector index (a search scores a memory by
    the best of them); ``ttl`` (seconds) and ``expires_at``: it is hidden from
    reads after ``expires_at`` and forgotten by ``ForgetExpired``, and a read that
    refreshes it moves ``expires_at`` to ``ttl`` seconds later.
    """

    id: str
    content: str
    author: str | None = None
    timestamp: float = 0.0
    created_at: float = 0.0
    last_accessed_at: float = 0.0
    access_count: int = 0
    importance: float = 0.5
    session_id: str | None = None
    actor_id: str | None = None
    categories: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    source: str | None = None
    kind: str = "fact"
    category_confidences: tuple[float, ...] = ()
    valid_at: float | None = None
    invalid_at: float | None = None
    status: MemoryStatus = "active"
    superseded_by: str | None = None
    merged_into: str | None = None
    attributed_to: str | None = None
    sources: tuple[SourceRef, ...] = ()
    extractor: str | None = None
    reinforced: int = 0
    links: tuple[str, ...] = ()
    history: tuple[Change, ...] = ()
    # categories, actors and scopes within a user (memories.categories, memories.subscopes)
    classified_by: str | None = None
    scope_kind: str = "global"
    scope_id: str | None = None
    # keyed memories (a key-value store's items; see ``PutMemories``)
    namespace: tuple[str, ...] = ()
    key: str | None = None
    vectors: tuple[bytes, ...] = ()
    ttl: float | None = None
    expires_at: float | None = None

    @property
    def active(self) -> bool:
        return self.status == "active"

    @property
    def scope_label(self) -> str:
        """The part of its (app_name, user_id) the memory belongs to: ``global``, or
        ``<scope_kind>:<scope_id>`` (``campaign:ash``, ``session:s1``, ``actor:gandros``)."""
        return "global" if self.scope_id is None else f"{self.scope_kind}:{self.scope_id}"


# Ids, times and
# embeddings arrive inside the commands (the ref assigns and computes them), so the
# actor stays deterministic: a vector is journaled with the command that carries it
# (float32 little-endian bytes, base64 in JSON) and replay never needs the model.

SearchMode = Literal["keyword", "fulltext", "vector", "hybrid"]


class Event(msgspec.Struct, frozen=True, omit_defaults=True):
    """One event of a finished session: who said it, what, and when (seconds since
    the epoch). ``content`` is text, or a message content in the chat shapes (a list
    of parts, or an object with ``parts``/``text``); events without text are skipped
    when the session goes into memory. ``role``: the speaker's role (``user``,
    ``assistant``, ``tool``...) when the author is a name; None reads it from the
    author (``user``, or the session's user id, is the user; an agent's name an
    assistant)."""

    author: str
    content: Any = None
    timestamp: float = 0.0
    id: str | None = None
    role: str | None = None


class Session(msgspec.Struct, frozen=True, omit_defaults=True):
    """A finished conversation of one user in one app, as ``add_session`` takes it."""

    id: str
    app_name: str
    user_id: str
    events: list[Event] = msgspec.field(default_factory=list)
    last_update_time: float = 0.0


class SearchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The classic search of ``MemoryService``: memories of (app_name, user_id) sharing
    a word with ``query``, most words matched first, then the most recent."""

    query: str
    user_id: str
    app_name: str
    top_k: int = 100


class MemoryEntry(msgspec.Struct, frozen=True, omit_defaults=True):
    """One memory as the classic service returns it; ``timestamp`` is when the
    original content happened, ISO 8601 in UTC."""

    content: str
    author: str | None = None
    timestamp: str | None = None
    id: str | None = None


class SearchResponse(msgspec.Struct, frozen=True):
    memories: list[MemoryEntry] = msgspec.field(default_factory=list)


class NewMemory(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A memory to store, as the ref sends it: ``id`` assigned by the runtime (sortable
    by time), ``vector`` the embedding of ``content`` (float32 bytes, of the command's
    embedder). ``timestamp`` None means the command's ``now``."""

    id: str
    content: str
    vector: bytes | None = None
    author: str | None = None
    timestamp: float | None = None
    importance: float = 0.5
    session_id: str | None = None
    actor_id: str | None = None
    categories: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    source: str | None = None
    kind: str | None = None
    attributed_to: str | None = None
    valid_at: float | None = None
    invalid_at: float | None = None
    scope_kind: str | None = None
    scope_id: str | None = None
    # keyed memories: see MemoryRecord; ``dedupe`` False stores a content the scope
    # holds already as a memory of its own (a key-value store's value under two keys)
    namespace: tuple[str, ...] = ()
    key: str | None = None
    vectors: tuple[bytes, ...] = ()
    ttl: float | None = None
    dedupe: bool = True


class ScopeCommand(Command, frozen=True, kw_only=True):
    """Base of the ScopeActor's commands. ``now`` is seconds since the epoch, read by
    the caller; ``embedder``/``dim`` name the model that made the command's vectors."""


class Remember(ScopeCommand, frozen=True, tag="scope.remember"):
    """Store ``memories``, all or none. Content already stored in the scope is not
    stored again: its existing id comes back. ``classify``: give each memory without
    categories the offline classifier's (``memories.categories``; commands journaled
    before categories existed did not, and replay keeps them as they were)."""

    memories: list[NewMemory] = msgspec.field(default_factory=list)
    embedder: str | None = None
    dim: int = 0
    now: float = 0.0
    classify: bool = False


class AddSession(ScopeCommand, frozen=True, tag="scope.add_session"):
    """Store the text events of a finished session (``memories``, one per event).
    ``echo_of``: memories that only restate a user's statement (the id of one of
    ``memories`` -> the id of the user's memory, among ``memories`` or stored
    already), stored merged into it when they are new (``memories.sessions``)."""

    session_id: str
    memories: list[NewMemory] = msgspec.field(default_factory=list)
    embedder: str | None = None
    dim: int = 0
    now: float = 0.0
    echo_of: dict[str, str] = msgspec.field(default_factory=dict)
    classify: bool = False


class UpdateMemory(ScopeCommand, frozen=True, tag="scope.update"):
    """Change some fields of a memory (unset fields stay); a new ``content`` comes with
    its ``vector`` and is re-indexed."""

    id: str
    now: float = 0.0
    content: str | msgspec.UnsetType = msgspec.UNSET
    vector: bytes | msgspec.UnsetType | None = msgspec.UNSET
    embedder: str | None = None
    dim: int = 0
    author: str | msgspec.UnsetType | None = msgspec.UNSET
    timestamp: float | msgspec.UnsetType = msgspec.UNSET
    importance: float | msgspec.UnsetType = msgspec.UNSET
    session_id: str | msgspec.UnsetType | None = msgspec.UNSET
    actor_id: str | msgspec.UnsetType | None = msgspec.UNSET
    categories: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    entities: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    metadata: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    source: str | msgspec.UnsetType | None = msgspec.UNSET
    kind: str | msgspec.UnsetType = msgspec.UNSET
    attributed_to: str | msgspec.UnsetType | None = msgspec.UNSET
    valid_at: float | msgspec.UnsetType | None = msgspec.UNSET
    invalid_at: float | msgspec.UnsetType | None = msgspec.UNSET
    scope_kind: str | msgspec.UnsetType | None = msgspec.UNSET
    scope_id: str | msgspec.UnsetType | None = msgspec.UNSET


class Forget(ScopeCommand, frozen=True, tag="scope.forget"):
    """Delete memories by id; unknown ids are ignored (the reply lists what went)."""

    ids: list[str] = msgspec.field(default_factory=list)
    now: float = 0.0


class ForgetWhere(ScopeCommand, frozen=True, tag="scope.forget_where"):
    """Delete every memory the filter matches (an empty filter is refused)."""

    filter: dict[str, Any] = msgspec.field(default_factory=dict)
    now: float = 0.0


class Touch(ScopeCommand, frozen=True, tag="scope.touch"):
    """Searches returned these memories: add ``counts[i]`` (1 when counts is empty) to
    each one's access_count and set last_accessed_at to ``now``. Sent batched, one
    command for many searches; ids no longer stored are ignored."""

    ids: list[str] = msgspec.field(default_factory=list)
    counts: list[int] = msgspec.field(default_factory=list)
    now: float = 0.0


class GetMemory(ScopeCommand, frozen=True, tag="scope.get"):
    id: str


class CountMemories(ScopeCommand, frozen=True, tag="scope.count"):
    filter: dict[str, Any] | None = None
    include_history: bool = False
    as_of: float | None = None


class ListMemories(ScopeCommand, frozen=True, tag="scope.list"):
    """A page of memories in id order (creation order), optionally filtered;
    ``include_history`` and ``as_of`` as for Search."""

    filter: dict[str, Any] | None = None
    limit: int | None = 100
    offset: int = 0
    include_history: bool = False
    as_of: float | None = None
    namespace: tuple[str, ...] | None = None
    now: float = 0.0


class GetScopeStats(ScopeCommand, frozen=True, tag="scope.get_stats"):
    now: float = 0.0


class Search(ScopeCommand, frozen=True, tag="scope.search"):
    """Search the scope. ``vector`` is the query's embedding (needed by the vector and
    hybrid modes). ``min_score`` None means the mode's default. Active memories
    only, unless ``include_history`` (every memory, superseded and merged ones too)
    or ``as_of`` (those true at that time, seconds since the epoch)."""

    query: str
    vector: bytes | None = None
    embedder: str | None = None
    dim: int = 0
    top_k: int = 10
    mode: SearchMode = "hybrid"
    min_score: float | None = None
    filter: dict[str, Any] | None = None
    now: float = 0.0
    include_history: bool = False
    as_of: float | None = None
    facets: Literal["hits", "scope"] | None = None
    namespace: tuple[str, ...] | None = None


class Remembered(Reply, frozen=True, kw_only=True, tag="scope.remembered"):
    """Ids in the order given; ``created[i]`` is False where the content was stored
    already (the id is the existing memory's)."""

    ids: list[str]
    created: list[bool]


class SessionAdded(Reply, frozen=True, kw_only=True, tag="scope.session_added"):
    """``ids``: the memory of each text event; ``added``: how many were new;
    ``merged``: the new ones stored merged into the user's statement they echo."""

    session_id: str
    ids: list[str]
    added: int
    merged: list[str] = msgspec.field(default_factory=list)


class Updated(Reply, frozen=True, kw_only=True, tag="scope.updated"):
    memory: MemoryRecord


class Forgotten(Reply, frozen=True, kw_only=True, tag="scope.forgotten"):
    ids: list[str]


class Touched(Reply, frozen=True, kw_only=True, tag="scope.touched"):
    count: int


class Hit(msgspec.Struct, frozen=True, omit_defaults=True):
    """One search result: the memory, its final ``score`` (higher is better; in 0..1
    for every mode, so hits of different scopes compare) and every signal that made
    it (``scores``: keyword, bm25, fulltext, entities, vector (the calibrated cosine),
    cosine, text_weight, crowding, date, relevance, importance, recency, access, ...;
    see memories.ranking). ``app_name``/``user_id`` name the scope it came from."""

    memory: MemoryRecord
    score: float
    scores: dict[str, float] = msgspec.field(default_factory=dict)
    app_name: str = ""
    user_id: str = ""
    found_by: tuple[str, ...] = ()
    """Which candidate lists brought the memory to a hybrid search: ``fulltext``,
    ``vector``, ``date`` (near a period the query names), ``graph`` (it mentions an
    entity the query names, or an alias or neighbour of one: query expansion)."""


class SearchResult(Reply, frozen=True, kw_only=True, tag="scope.search_result"):
    """``facets``: memories per category, over the hits (``Search.facets`` ``hits``)
    or over every memory the search's filter lets through (``scope``); None when
    not asked for."""

    hits: list[Hit]
    mode: SearchMode = "hybrid"
    facets: dict[str, int] | None = None


class MemoryPage(Reply, frozen=True, kw_only=True, tag="scope.page"):
    memories: list[MemoryRecord]
    total: int
    limit: int | None
    offset: int


class ScopeStats(Reply, frozen=True, kw_only=True, tag="scope.stats"):
    """Counts of one scope. ``vector_mode`` is ``exact`` or ``hnsw``; ``graph_pending``
    says an HNSW graph is being built beside the actor (searches stay exact)."""

    app_name: str
    user_id: str
    count: int
    embedder: str | None
    dim: int
    vector_mode: str
    graph_pending: bool
    tombstones: int
    vocabulary: int
    entities: int
    sessions: int
    categories: int
    content_bytes: int
    oldest_created_at: float | None = None
    newest_created_at: float | None = None


class StoreSession(ScopeCommand, frozen=True, tag="scope.store_session"):
    """A finished session sent by an actor (an agent archiving one): the scope
    embeds its new texts beside itself, then stores them as an AddSession, whose
    reply answers this command. Ids from ``first_id`` on."""

    session: Session
    first_id: str
    now: float = 0.0


# -- the knowledge layer: facts extracted from a session, consolidated in the scope ---------------
class NewFact(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One extracted fact as the scope receives it: ``id`` assigned, ``vector`` the
    embedding of ``content`` (or None), ``target`` the id of the offered memory its
    ``relation`` (duplicate, updates, extends) is about, ``observed_at`` when its
    messages were said, ``first``/``last`` their positions in the session."""

    id: str
    content: str
    vector: bytes | None = None
    kind: str = "fact"
    categories: tuple[str, ...] = ()
    confidences: tuple[float, ...] = ()
    importance: float = 0.5
    entities: tuple[str, ...] = ()
    relation: str | None = None
    target: str | None = None
    attributed_to: str | None = None
    valid_at: float | None = None
    observed_at: float | None = None
    first: int | None = None
    last: int | None = None
    actor_id: str | None = None
    entity_types: dict[str, str] = msgspec.field(default_factory=dict)
    """Types of ``entities`` by name, as the extractor gave them (the entity graph's)."""
    entity_relations: tuple[tuple[str, str, str], ...] = ()
    """Typed relations between ``entities`` the fact states: (source, type, target)."""


class JobUsage(msgspec.Struct, frozen=True, omit_defaults=True):
    """Tokens one extraction job used, over ``calls`` model calls (0: no model)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    calls: int = 0


class ApplyExtraction(ScopeCommand, frozen=True, tag="scope.apply_extraction"):
    """The result of an extraction job over messages [first, upto) of ``session_id``:
    its facts, consolidated into the scope and the session's cursor advanced, all
    at once. ``offered``: the ids the extractor was shown (the only valid
    targets); ``job``: the job's id (a late result of a job that expired is
    ignored)."""

    session_id: str
    first: int
    upto: int
    facts: list[NewFact] = msgspec.field(default_factory=list)
    offered: list[str] = msgspec.field(default_factory=list)
    extractor: str = "rules"
    usage: JobUsage = JobUsage()
    embedder: str | None = None
    dim: int = 0
    now: float = 0.0
    job: str | None = None
    classify: bool = False


class ExtractionFailed(ScopeCommand, frozen=True, tag="scope.extraction_failed"):
    """An extraction job over [first, upto) of ``session_id`` failed: ``reason``
    (timeout, unreachable, http, malformed, refused, error) and ``message``. The
    cursor retries with backoff, then parks the range as a dead letter."""

    session_id: str
    first: int
    upto: int
    reason: str
    message: str = ""
    usage: JobUsage = JobUsage()
    now: float = 0.0
    job: str | None = None


class Extracted(Reply, frozen=True, kw_only=True, tag="scope.extracted"):
    """What an extraction changed. ``status``: committed (the job's facts are
    stored), nothing_new (no message was waiting), buffered (messages wait for the
    buffer to fill), in_flight (a job of this session is running; its result will
    be committed when it comes), failed (``error`` says why; it is retried),
    dead_letter (it failed too often: see ``dead_letters``), expired (the job
    outlived its deadline; its result was dropped and the range is retried).
    The id lists name the memories added, reinforced (stated again), merged into
    another, superseded, and linked; ``dropped`` the facts left out, with why."""

    session_id: str
    status: Literal["committed", "nothing_new", "buffered", "in_flight", "failed", "dead_letter", "expired"]
    first: int = 0
    upto: int = 0
    added: list[str] = msgspec.field(default_factory=list)
    reinforced: list[str] = msgspec.field(default_factory=list)
    merged: list[str] = msgspec.field(default_factory=list)
    superseded: list[str] = msgspec.field(default_factory=list)
    linked: list[str] = msgspec.field(default_factory=list)
    dropped: list[str] = msgspec.field(default_factory=list)
    extractor: str | None = None
    usage: JobUsage = JobUsage()
    error: str | None = None
    retry_at: float | None = None


class GetHistory(ScopeCommand, frozen=True, tag="scope.history"):
    """How memory ``id`` came to be: its own changes and those of the memories it
    replaced, merged or was replaced by."""

    id: str


class MemoryHistory(Reply, frozen=True, kw_only=True, tag="scope.memory_history"):
    """``memory``: the record asked for; ``related``: every memory on its chain
    (what it superseded or absorbed, what superseded or absorbed it), oldest
    first; ``changes``: (memory id, change) pairs of all of them in time order."""

    memory: MemoryRecord
    related: list[MemoryRecord]
    changes: list[tuple[str, Change]]


# -- moving memories between data directories (memories.transfer) ------------------------------
class ImportMemories(ScopeCommand, frozen=True, tag="scope.import"):
    """Store whole records made elsewhere (an export), each as given: id, times,
    status, history and links kept. ``vectors[i]`` is the vector of ``records[i]``
    (None: it has none), made by ``embedder`` (``dim`` values). A record whose id or
    exact content the scope holds already is skipped, so importing again adds
    nothing; the rest are all stored or, if one is refused, none."""

    records: list[MemoryRecord] = msgspec.field(default_factory=list)
    vectors: list[bytes | None] = msgspec.field(default_factory=list)
    embedder: str | None = None
    dim: int = 0
    now: float = 0.0


class Imported(Reply, frozen=True, kw_only=True, tag="scope.imported"):
    """``ids_added``: the records stored, in the order given; ``skipped``: how many
    were there already (by id or content)."""

    ids_added: list[str]
    skipped: int


class GetVectors(ScopeCommand, frozen=True, tag="scope.get_vectors"):
    """The stored vectors of memories ``ids`` (ids unknown or without a vector are
    left out)."""

    ids: list[str] = msgspec.field(default_factory=list)


class Vectors(Reply, frozen=True, kw_only=True, tag="scope.vectors"):
    """Vectors by memory id (float32 little-endian, unit length) of ``embedder``
    (``dim`` values; None and 0 when the scope holds none)."""

    vectors: dict[str, bytes]
    embedder: str | None = None
    dim: int = 0


# -- documents: text, Markdown, PDF and images stored as chunks (memories.documents) --------------
class DocumentInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A document ingested into a scope. ``id``: the sha256 of its bytes (hex) unless
    its caller named it; its chunks are memories of kind ``document_chunk`` whose
    ``session_id`` is ``doc:<id>`` (facts extracted from it carry that session too),
    each with a source naming the document and chunk (a text the scope held already
    stays that memory, which gains the source).
    ``size`` in bytes; ``pages``: a PDF's pages (1 for other documents); ``chunks``:
    how many it was cut into; ``metadata``: the caller's, copied into each chunk."""

    id: str
    media_type: str
    title: str | None = None
    size: int = 0
    pages: int = 0
    chunks: int = 0
    ingested_at: float = 0.0
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class DocumentStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A document as a scope lists it: ``memories``: its chunks still stored (a chunk
    whose text another document stored first is that one's); ``extracted``: chunks
    extraction has covered; ``extraction``: its cursor's phase (idle, pending,
    in_flight, backoff) or ``none`` before any job."""

    document: DocumentInfo
    memories: int = 0
    extracted: int = 0
    extraction: str = "none"


class IngestDocument(ScopeCommand, frozen=True, tag="scope.ingest_document"):
    """Store a document's chunks (``memories``, one per chunk, ``session_id``
    ``doc:<id>``, ``metadata.chunk`` its index) and record the document, all or
    nothing. A document the scope holds already (some of its chunks still stored)
    changes nothing."""

    document: DocumentInfo
    memories: list[NewMemory] = msgspec.field(default_factory=list)
    embedder: str | None = None
    dim: int = 0
    now: float = 0.0
    classify: bool = False


class ForgetDocument(ScopeCommand, frozen=True, tag="scope.forget_document"):
    """Forget a document: its record, its extraction cursor, the facts extracted from
    it and its chunks, but for those another document (or the user) holds too: they
    only lose the source naming it."""

    document_id: str
    now: float = 0.0


class GetDocuments(ScopeCommand, frozen=True, tag="scope.get_documents"):
    """The documents of the scope (or the one ``document_id``), as DocumentStatus, in
    the order ingested."""

    document_id: str | None = None


class DocumentIngested(Reply, frozen=True, kw_only=True, tag="scope.document_ingested"):
    """``ids``: the memory of each chunk, in order (``created[i]`` False where that
    text was stored already); ``unchanged``: the scope held the document already."""

    document: DocumentInfo
    ids: list[str] = msgspec.field(default_factory=list)
    created: list[bool] = msgspec.field(default_factory=list)
    unchanged: bool = False


IngestStage = Literal["read", "chunk", "embed", "store", "extract", "done"]


class IngestProgress(msgspec.Struct, frozen=True):
    """How far an ingest is: ``stage`` read (``done`` of ``total`` pages read), chunk
    (the document cut into ``total`` chunks), embed (``done`` of ``total`` chunks
    embedded), store (the chunks stored), extract (extraction started over ``total``
    chunks), done."""

    document_id: str
    stage: IngestStage
    done: int
    total: int


class IngestReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``ScopeRef.ingest`` did. ``status``: ingested, or unchanged (the scope
    held this document: nothing was read again). ``ids``: the memory of each chunk
    (empty when unchanged); ``stored``: how many of them are new memories.
    ``extraction``: the status of the extraction started (in_flight, nothing_new,
    ...), ``off`` when not asked for. ``seconds``: time per stage (read, chunk, embed,
    store, extract, total). ``warnings``: what was left out, and why."""

    document: DocumentInfo
    status: Literal["ingested", "unchanged"]
    ids: list[str] = msgspec.field(default_factory=list)
    stored: int = 0
    extraction: str = "off"
    seconds: dict[str, float] = msgspec.field(default_factory=dict)
    warnings: list[str] = msgspec.field(default_factory=list)


# -- categories and actors (memories.categories) ------------------------------------------------
class SetCategories(ScopeCommand, frozen=True, tag="scope.set_categories"):
    """Change the scope's category catalog: ``categories`` replace those of the same
    name and add the others (``replace``: they become the whole catalog, defaults
    included only if given); ``remove`` drops categories by name. A change (or
    ``reclassify``) starts the re-classification of the scope's memories beside the
    actor."""

    categories: list[Category] = msgspec.field(default_factory=list)
    remove: list[str] = msgspec.field(default_factory=list)
    replace: bool = False
    reclassify: bool = False
    now: float = 0.0


class Classified(msgspec.Struct, frozen=True, array_like=True):
    """One memory's categories as a re-classification found them."""

    id: str
    categories: tuple[str, ...]
    confidences: tuple[float, ...]
    classified_by: str


class ApplyClassification(ScopeCommand, frozen=True, tag="scope.apply_classification"):
    """A batch of a re-classification under catalog ``version``: the memories with
    ids after ``after`` (None: from the first) up to ``upto`` were classified as
    ``results`` say (a memory left out keeps its categories); ``covered``: memories
    the batch looked at; ``last``: it reached the last memory. A batch of an older
    version (the catalog changed again) or of a range already done changes
    nothing."""

    version: int
    after: str | None
    upto: str
    results: list[Classified] = msgspec.field(default_factory=list)
    covered: int = 0
    last: bool = False
    now: float = 0.0


class GetCategories(ScopeCommand, frozen=True, tag="scope.get_categories"):
    """The catalog, with how many memories each category holds."""


class CategoryCatalog(Reply, frozen=True, kw_only=True, tag="scope.category_catalog"):
    """A scope's catalog. ``version``: changes made to it (0: the defaults);
    ``counts``: active memories per category (``misc`` included); ``threshold``:
    the confidence under which the offline classifier says ``misc``;
    ``reclassifying``: a re-classification is under way, ``reclassified`` memories
    done of ``total``."""

    categories: list[Category]
    version: int
    counts: dict[str, int]
    threshold: float
    classifier: str
    reclassifying: bool = False
    reclassified: int = 0
    total: int = 0


class GetFacets(ScopeCommand, frozen=True, tag="scope.get_facets"):
    """Memories per category among those ``filter`` lets through (active ones,
    unless ``include_history`` or ``as_of``), counting a category only where its
    confidence is at least ``min_confidence``."""

    filter: dict[str, Any] | None = None
    include_history: bool = False
    as_of: float | None = None
    min_confidence: float = 0.0


class Facets(Reply, frozen=True, kw_only=True, tag="scope.facets"):
    """``counts``: memories per category, most first; ``total``: memories counted."""

    counts: dict[str, int]
    total: int


class GetActorMemories(ScopeCommand, frozen=True, tag="scope.actor_memories"):
    """The memories linked to actor ``actor_id``: those whose ``actor_id`` it is and
    those in its own part of the scope (``scope_kind`` actor), in id order."""

    actor_id: str
    limit: int | None = 100
    offset: int = 0
    include_history: bool = False


# -- keyed memories: a key-value store's items (memories.keyed) -----------------------------------
class PutMemories(ScopeCommand, frozen=True, tag="scope.put"):
    """Create or replace memories by id and forget ``forget``, all or none: a memory
    of ``memories`` whose id the scope holds replaces it (its ``created_at`` kept),
    the others are new; content is deduplicated only for those with ``dedupe``.
    An id given twice: the last one counts. Forgetting an id the scope does not
    hold does nothing."""

    memories: list[NewMemory] = msgspec.field(default_factory=list)
    forget: list[str] = msgspec.field(default_factory=list)
    embedder: str | None = None
    dim: int = 0
    now: float = 0.0


class RefreshExpiry(ScopeCommand, frozen=True, tag="scope.refresh_expiry"):
    """Move the expiry of memories ``ids`` that have a ``ttl`` to ``now + ttl``."""

    ids: list[str] = msgspec.field(default_factory=list)
    now: float = 0.0


class ForgetExpired(ScopeCommand, frozen=True, tag="scope.forget_expired"):
    """Forget every memory whose ``expires_at`` is before ``now``."""

    now: float = 0.0


class ListNamespaces(ScopeCommand, frozen=True, tag="scope.list_namespaces"):
    """The namespaces of the scope's keyed memories, sorted: those starting with
    ``prefix`` and ending with ``suffix`` (``"*"`` matches any one label), cut to
    their first ``max_depth`` labels (and deduplicated); ``offset``/``limit`` page."""

    prefix: tuple[str, ...] = ()
    suffix: tuple[str, ...] = ()
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0
    now: float = 0.0


class MemoriesPut(Reply, frozen=True, kw_only=True, tag="scope.put"):
    """The id of each memory put, in order; which replaced a memory; the ids forgotten."""

    ids: list[str] = msgspec.field(default_factory=list)
    replaced: list[bool] = msgspec.field(default_factory=list)
    forgotten: list[str] = msgspec.field(default_factory=list)


class Namespaces(Reply, frozen=True, kw_only=True, tag="scope.namespaces"):
    namespaces: list[tuple[str, ...]] = msgspec.field(default_factory=list)


KeyedWrite = PutMemories | RefreshExpiry | ForgetExpired
KEYED_WRITES: tuple[type[ScopeCommand], ...] = (PutMemories, RefreshExpiry, ForgetExpired)


# -- the entity graph (knowledge.graph; memories.graph handles these) ------------------------------
class AliasRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """A merge that made ``name`` an alias of ``into``: ``how`` it was decided
    (``manual``: a merge command; ``embedding``: the names' vectors were ``score``
    close, at or over the scope's threshold), ``at`` when (seconds since the epoch).
    An unmerge of ``name`` undoes it."""

    name: str
    into: str
    how: str = "manual"
    score: float | None = None
    at: float = 0.0


class EntityInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    """One entity of a scope's graph. ``name``: how it is written (its declaration,
    else its most frequent spelling); ``type``: declared, else ``person`` for a
    speaker, else ``other``; ``aliases``: every other name that resolves to it;
    ``mentions``: the active memories that name it, in ``sessions`` sessions,
    observed from ``first_seen`` to ``last_seen`` (seconds since the epoch);
    ``declared``: an app declared it; ``merged``: the alias records that joined names
    into it (how each was decided)."""

    name: str
    type: str = "other"
    aliases: tuple[str, ...] = ()
    mentions: int = 0
    sessions: int = 0
    first_seen: float | None = None
    last_seen: float | None = None
    declared: bool = False
    merged: tuple[AliasRecord, ...] = ()



class TypedRelation(msgspec.Struct, frozen=True):
    """A relation an extractor read in a memory: ``source`` ``type`` ``target``
    (entity names as shown, ``type`` a snake_case verb phrase: ``owes_favour_to``),
    stated by the memory ``memory``."""

    source: str
    type: str
    target: str
    memory: str


class EntityLink(msgspec.Struct, frozen=True):
    """An entity related to another: ``weight`` memories mention both (``memories``:
    the ids of the newest of them, which state the relation); ``hops`` away (1 or 2),
    reached ``via`` that entity's name; ``relations``: what the memories say the
    relation is, when an extractor typed it (either way round)."""

    entity: EntityInfo
    weight: int
    memories: tuple[str, ...] = ()
    hops: int = 1
    via: str | None = None
    relations: tuple[TypedRelation, ...] = ()


class GraphStats(msgspec.Struct, frozen=True, omit_defaults=True):
    """Counts of a scope's entity graph: entities, memory-mentions-entity edges,
    entity-relates-entity edges (pairs named by one memory), declared entities and
    merge records."""

    entities: int = 0
    mentions: int = 0
    relations: int = 0
    declared: int = 0
    merges: int = 0
    embedded_names: int = 0
    """Names whose vector the graph holds (entity resolution by embeddings)."""
    embedding_merges: int = 0
    """Of ``merges``, those the names' vectors decided."""
    names_pending: int = 0
    """Names waiting for their vector (0 when the scope resolves by spelling only)."""


class DeclareEntity(ScopeCommand, frozen=True, tag="scope.declare_entity"):
    """Declare an entity the scope should know by name (an NPC, a place, a product):
    its ``entity_type`` and ``aliases``; memories naming it or an alias, stored or to
    come, mention it. Declaring a name again replaces its type and aliases."""

    name: str
    entity_type: str = "other"
    aliases: list[str] = msgspec.field(default_factory=list)
    now: float = 0.0


class MergeEntities(ScopeCommand, frozen=True, tag="scope.merge_entities"):
    """Make each of ``names`` an alias of the entity ``into`` (alias records; each
    undone by an UnmergeEntity)."""

    names: list[str] = msgspec.field(default_factory=list)
    into: str = ""
    now: float = 0.0


class ResolveNames(ScopeCommand, frozen=True, tag="scope.resolve_names"):
    """The vectors of entity names, embedded beside the scope (``keys``: name keys;
    ``vectors``: their rows, float16 little-endian in base64, of ``embedder`` in
    ``dim`` dimensions): each is kept and may make its name an alias of the entity
    whose name's vector is ``threshold`` close (``knowledge.resolution``). Journaled:
    a replay decides the same merges without the model."""

    keys: list[str] = msgspec.field(default_factory=list)
    vectors: str = ""
    embedder: str = ""
    dim: int = 0
    threshold: float = 1.0
    now: float = 0.0


class UnmergeEntity(ScopeCommand, frozen=True, tag="scope.unmerge_entity"):
    """Undo what made ``name`` an alias: its merge record, or its place among a
    declared entity's aliases."""

    name: str
    now: float = 0.0


class ListEntities(ScopeCommand, frozen=True, tag="scope.list_entities"):
    """A page of the scope's entities, most mentioned first (then by name);
    ``entity_type`` keeps one type, ``name`` those with a name or alias containing it."""

    entity_type: str | None = None
    name: str | None = None
    limit: int = 100
    offset: int = 0


class GetEntity(ScopeCommand, frozen=True, tag="scope.get_entity"):
    """One entity by any of its names, with its newest ``memories`` memories and its
    ``neighbours`` strongest neighbours."""

    name: str
    memories: int = 20
    neighbours: int = 10


class GetRelated(ScopeCommand, frozen=True, tag="scope.get_related"):
    """The entities within ``depth`` hops (1 or 2) of the entity named ``name``."""

    name: str
    depth: int = 1
    limit: int = 20


class GetGraphStats(ScopeCommand, frozen=True, tag="scope.get_graph_stats"):
    pass


class EntityPage(Reply, frozen=True, kw_only=True, tag="scope.entity_page"):
    entities: list[EntityInfo]
    total: int
    limit: int
    offset: int


class EntityDetail(Reply, frozen=True, kw_only=True, tag="scope.entity_detail"):
    """An entity, the active memories that mention it (newest first) and its
    neighbours (strongest first)."""

    entity: EntityInfo
    memories: list[MemoryRecord]
    neighbours: list[EntityLink]


class RelatedEntities(Reply, frozen=True, kw_only=True, tag="scope.related_entities"):
    entity: EntityInfo
    related: list[EntityLink]


class EntityChanged(Reply, frozen=True, kw_only=True, tag="scope.entity_changed"):
    """What a declare, merge or unmerge left: the entities it touched, as they are now."""

    entities: list[EntityInfo]


ScopeWrite = Remember | AddSession | UpdateMemory | Forget | ForgetWhere | Touch | ApplyExtraction | \
    ExtractionFailed | ImportMemories | IngestDocument | ForgetDocument | SetCategories | \
    ApplyClassification | KeyedWrite | DeclareEntity | MergeEntities | UnmergeEntity | ResolveNames
ScopeRead = GetMemory | CountMemories | ListMemories | GetScopeStats | Search | StoreSession | GetHistory | \
    GetVectors | GetDocuments | GetCategories | GetFacets | GetActorMemories | ListNamespaces | \
    ListEntities | GetEntity | GetRelated | GetGraphStats
ScopeCommandType = ScopeWrite | ScopeRead
SCOPE_WRITES: tuple[type[ScopeCommand], ...] = (Remember, AddSession, UpdateMemory, Forget, ForgetWhere,
                                                Touch, ApplyExtraction, ExtractionFailed, ImportMemories,
                                                IngestDocument, ForgetDocument, SetCategories,
                                                ApplyClassification, *KEYED_WRITES, DeclareEntity,
                                                MergeEntities, UnmergeEntity, ResolveNames)
