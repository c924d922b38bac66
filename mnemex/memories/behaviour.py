"""ScopeMemory: the behaviour of a ScopeActor (key: (app_name, user_id)).

A scope owns one user's long-term memories in one app: the records, and the
indexes that find them again:

* a keyword index (the classic matching: shared words, then recency),
* BM25 full-text with quoted phrases, plus the registered entity names of the
  memories, found in a query with an Aho-Corasick automaton,
* a vector index (exact while small, an HNSW graph once past
  ``hnsw_threshold``, built beside the actor),
* the filter columns (:mod:`mnemex.memories.filters`), turned into an ``allowed``
  mask that every index applies inside its search, before the cut to top_k.

Every write arrives as a journaled command carrying its ids, times and
vectors, so replay rebuilds the same state without the embedding model. Each
memory has a dense int doc id in the indexes; doc ids are part of the state
(snapshotted with the records, freed ids reused last-in first-out), so ties
break the same way after a restart.

Scores are in 0..1 in every mode and mean the same in every scope and with every
embedder (keyword: words matched; fulltext: the query's weight of words held;
vector: the cosine calibrated for the embedder; hybrid: their fusion, with a full-text
weight that adapts to the query, and a lift for memories from a period the query
names): :mod:`mnemex.memories.ranking` says how.

Knowledge: facts extracted from conversations arrive as one journaled
``ApplyExtraction`` per job and are consolidated into the records
(``memories.knowledge``: reinforce, merge, supersede, link, add; a memory's
``history`` says how it came to be); the extraction cursors of the scope's
sessions decide when jobs start (``memories.extraction``). Reads see active
memories unless asked for history (``include_history``) or a time (``as_of``).

Slow work never runs here: the graph is built by a Job, vectors are computed
by the ref before the command is sent, extraction jobs run beside the actor.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cache, partial
from typing import Any, Final, Literal, NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from mnemex._checks import check_int
from mnemex._protocol import JsonCodec
from mnemex._time import check_seconds
from mnemex.config import Config
from mnemex.effects import Beside, Effect, Image, Job, JobResult, Key, SnapshotData, Step
from mnemex.errors import CorruptData, EmbedderError, InvalidInput, MnemexError, NotFound, TooLarge
from mnemex.index import (
    BM25Index,
    EntityIndex,
    GraphBuild,
    GraphBuilder,
    KeywordIndex,
    RowFiles,
    Tokenizer,
    VectorIndex,
)
from mnemex.index._sidecar import doc_ids_checksum
from mnemex.knowledge.categories import DEFAULT_THRESHOLD
from mnemex.knowledge.consolidate import normalized_text
from mnemex.knowledge.cursor import CursorSettings
from mnemex.knowledge.graph import EntityGraph
from mnemex.memories.categories import (
    ClassificationFailed,
    ScopeCategories,
    actor_memories,
    apply_classification,
    facets_of_hits,
    facets_of_mask,
    get_facets,
    set_categories,
)
from mnemex.memories.documents import (
    Documents,
    ExtractDocument,
    apply_document_extraction,
    document_of,
    document_statuses,
    extract_document,
    forget_document,
    ingest_document,
)
from mnemex.memories.extraction import (
    CursorTick,
    Extractions,
    ExtractSession,
    GetCursors,
    RetryDeadLetter,
    RunExtraction,
    Timer,
)
from mnemex.memories.fields import (
    CHANGEABLE,
    check_memory_id,
    check_namespace,
    checked_changes,
    record_of,
)
from mnemex.memories.filters import FilterTable, compile_filter
from mnemex.memories.graph import (
    NameEmbedFailed,
    declare_entity,
    entity_detail,
    graph_stats,
    list_entities,
    merge_entities,
    name_embed_failed,
    name_jobs,
    names_due,
    note_relations,
    reindex_graph,
    related_entities,
    resolve_names,
    unmerge_entity,
)
from mnemex.memories.graphlock import TurnLock
from mnemex.memories.keyed import KeyedIndex, forget_expired, list_namespaces, put_memories, refresh_expiry
from mnemex.memories.knowledge import Applied, apply_facts, check_facts, history_of, with_change
from mnemex.memories.protocol import (
    SCOPE_WRITES,
    AddSession,
    ApplyClassification,
    ApplyExtraction,
    Change,
    CountMemories,
    DeclareEntity,
    Extracted,
    ExtractionFailed,
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
    Hit,
    ImportMemories,
    IngestDocument,
    ListEntities,
    ListMemories,
    ListNamespaces,
    MemoryPage,
    MemoryRecord,
    MergeEntities,
    NewFact,
    NewMemory,
    PutMemories,
    RefreshExpiry,
    Remember,
    Remembered,
    ResolveNames,
    ScopeCommandType,
    ScopeStats,
    Search,
    SearchMode,
    SearchResult,
    Session,
    SessionAdded,
    SetCategories,
    StoreSession,
    Touch,
    Touched,
    UnmergeEntity,
    Updated,
    UpdateMemory,
)
from mnemex.memories.ranking import CosineScale, RankCache, Ranker, ReadAhead, rounded
from mnemex.memories.records import Contents, FileRecords
from mnemex.memories.records import decode_record as _decode_record
from mnemex.memories.sessions import session_echoes, session_memories
from mnemex.memories.snapshot import (
    SNAPSHOT_FORMAT,
    TEXT_SIDECARS,
    check_format,
    check_vectors,
    decode_vector,
    encode_vector,
    encoded_records,
    read_records,
    restore_vectors,
    write_snapshot,
)
from mnemex.memories.transfer import import_records, vectors_of
from mnemex.persistence.recordfiles import RecordFiles
from mnemex.persistence.snapshot import Sidecar, let_pages_go

__all__ = [
    "GraphReady",
    "ScopeMemory",
    "ScopeSettings",
    "is_scope_write",
    "scope_codec",
]

log = logging.getLogger("mnemex.memories")

GRAPH_SIDECAR = "graph"
"""The snapshot sidecar holding each memory's entity mentions (knowledge.graph)."""

F32 = npt.NDArray[np.float32]


scope_codec: JsonCodec[ScopeCommandType] = JsonCodec(ScopeCommandType, "scope command")
_encode = msgspec.json.Encoder()


def is_scope_write(command: Any) -> bool:
    """Whether a command changes a scope (and so is journaled)."""
    return isinstance(command, SCOPE_WRITES)


# -- settings ------------------------------------------------------------------------------
# what a scope's jobs embed with: texts in, one float32 unit row per text out; the
# runtime gives its embedding batcher's ``embed`` (the one embedding path)
EmbedTexts = Callable[[Sequence[str]], Awaitable[npt.NDArray[np.float32]]]


@dataclass(frozen=True, slots=True)
class ScopeSettings:
    """What every scope of a runtime shares (see Config for each knob).
    ``embedder_name`` / ``embedder_dim`` name the configured model; ``embed`` runs
    it, never in a handler: only in Jobs beside the actor (a session an actor sends
    it). None of the three is needed to replay or to search with given vectors."""

    embedder_name: str | None = None
    embedder_dim: int = 0
    embed: EmbedTexts | None = None
    embed_batch_size: int = 256
    max_content_bytes: int = 10_240
    max_metadata_bytes: int = 16_384
    max_memories_per_command: int = 10_000
    max_top_k: int = 1000
    hnsw_threshold: int = 20_000
    hnsw_m: int = 16
    hnsw_ef_construction: int = 100
    hnsw_ef_search: int = 320
    hnsw_tombstone_ratio: float = 0.2
    hnsw_quantization: Literal["i8", "f16", "f32"] = "i8"
    hnsw_sidecar: bool = True
    hnsw_threads: int = 1
    search_mode: Literal["keyword", "fulltext", "vector", "hybrid"] = "hybrid"
    vector_min_score: float | None = 0.25
    hybrid_min_score: float | None = 0.25
    cosine_floor: float = 0.2
    cosine_ceiling: float = 0.65
    cosine_crowded: float = 0.44
    fusion: Literal["weighted", "rrf"] = "weighted"
    fusion_fulltext_weight: float = 0.7
    fusion_vector_weight: float = 0.3
    fusion_adaptive: bool = True
    fusion_rrf_k: float = 60.0
    fusion_candidates: int = 30
    date_weight: float = 0.2
    rank_importance_weight: float = 0.0
    rank_recency_weight: float = 0.0
    rank_access_weight: float = 0.0
    recency_half_life: float = 2_592_000.0
    entity_boost: float = 1.0
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    fulltext_stem: bool | str = True
    fold_accents: bool = True
    context_window: int = 2
    context_weight: float = 0.5
    archive_merge_echoes: bool = True
    graph_stale: float = 60.0
    category_threshold: float = DEFAULT_THRESHOLD
    entity_detection: bool = True
    entity_embeddings: bool = True
    entity_similarity: float | None = None
    expansion: bool = True
    expansion_alias_weight: float = 1.0
    expansion_neighbour_weight: float = 0.25
    expansion_neighbours: int = 3
    expansion_graph_weight: float = 0.4
    expansion_candidates: int = 30
    expansion_vector_weight: float = 0.0
    cursor: CursorSettings = dataclasses.field(default_factory=CursorSettings)
    extract: RunExtraction | None = None
    timer: Timer | None = None
    graph_builder: GraphBuilder | None = None
    """Where HNSW graphs are built beside the actor (None: in the job's thread)."""
    row_files: RowFiles | None = None
    """Where a large scope's float32 vector rows live (None: in memory)."""
    record_files: RecordFiles | None = None
    """Where a large scope's records live (None: in memory; see ``memories.records``)."""

    @classmethod
    def from_config(cls, config: Config, *, embedder_name: str | None = None, embedder_dim: int = 0,
                    embedder_cosines: CosineScale | None = None,
                    embed: EmbedTexts | None = None) -> ScopeSettings:
        """Every setting of ``config.memories`` (the names are the same) and the batch
        size of ``config.models``, with the configured model's name, dimension, cosine
        scale (the ``cosine_*`` settings left None take it) and ``embed``."""
        section = config.memories
        shared: dict[str, Any] = {f.name: getattr(section, f.name) for f in fields(cls)
                                  if f.name in section.__struct_fields__}
        own = embedder_cosines if embedder_cosines is not None else CosineScale()
        for name in ("floor", "ceiling", "crowded"):
            if shared.get(f"cosine_{name}") is None:
                shared[f"cosine_{name}"] = float(getattr(own, name))
        shared["embed_batch_size"] = config.models.embed_batch_size
        knowledge = config.knowledge
        shared["category_threshold"] = knowledge.category_threshold
        shared["cursor"] = CursorSettings(
            turns=knowledge.turns, tokens=knowledge.tokens, idle=knowledge.idle,
            job_timeout=knowledge.job_timeout, max_attempts=knowledge.max_attempts, backoff=knowledge.backoff,
            max_backoff=knowledge.max_backoff, max_batch=knowledge.max_batch)
        return cls(embedder_name=embedder_name, embedder_dim=embedder_dim, embed=embed, **shared)

    def vector_params(self) -> dict[str, Any]:
        """A scope's VectorIndex settings: graphs built beside the actor (the job's
        thread and the actor share the index's guard, so a catch-up adds to the live
        graph in place instead of cloning it, in holds sized by the clock)."""
        return {"hnsw_threshold": self.hnsw_threshold, "m": self.hnsw_m,
                "ef_construction": self.hnsw_ef_construction, "ef_search": self.hnsw_ef_search,
                "tombstone_ratio": self.hnsw_tombstone_ratio, "num_threads": self.hnsw_threads,
                "quantization": self.hnsw_quantization, "builder": self.graph_builder,
                "row_files": self.row_files,
                "auto_build": False, "defer_inserts": True,
                "guard": TurnLock(), "save_guard": threading.Lock(), "clock": time.perf_counter}


# -- validation ------------------------------------------------------------------------------
def _check_session_memories(session_id: Any, memories: Any) -> None:
    check_memory_id(session_id, "session_id")
    if not isinstance(memories, list | tuple):
        raise InvalidInput("memories must be a list", field="memories")
    for memory in memories:
        if isinstance(memory, NewMemory) and memory.session_id != session_id:
            raise InvalidInput(f"memory {memory.id!r} of session {session_id!r} carries "
                               f"session_id {memory.session_id!r}", field="session_id")


def _checked_echoes(echo_of: Any, memories: Sequence[Any]) -> list[tuple[int, int | str]]:
    """An AddSession's ``echo_of`` as (position of the echo, position of the user's
    memory in the command, or the id of one stored already)."""
    if not isinstance(echo_of, Mapping):
        raise InvalidInput("echo_of must be an object of memory id: memory id", field="echo_of")
    if not echo_of:
        return []
    positions: dict[str, int] = {}
    for position, memory in enumerate(memories):
        if isinstance(memory, NewMemory):
            positions.setdefault(memory.id, position)
    echoes: list[tuple[int, int | str]] = []
    for echo, given in echo_of.items():
        at = positions.get(echo) if isinstance(echo, str) else None
        if at is None:
            raise InvalidInput(f"echo_of names {echo!r}, which is not one of the session's memories",
                               field="echo_of")
        target = check_memory_id(given, "echo_of")
        if target == echo:
            raise InvalidInput(f"echo_of says memory {echo!r} echoes itself", field="echo_of")
        echoes.append((at, positions.get(target, target)))
    return echoes


def _job_range(cmd: ApplyExtraction | ExtractionFailed) -> tuple[float, int]:
    """An extraction result's ``now`` and ``first``, checked with its session and range."""
    now = check_seconds(cmd.now, "now")
    check_memory_id(cmd.session_id, "session_id")
    first = check_int(cmd.first, "first", 0)
    check_int(cmd.upto, "upto", first + 1)
    return now, first


# -- internal commands (never journaled) ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GraphReady:
    """A graph built beside the actor came back (or failed)."""

    build: GraphBuild | None
    error: str = ""
    token: int = 0
    """The plan's token (``GraphBuild.token``), also when the build failed."""


@dataclass(frozen=True, slots=True)
class SessionEmbedFailed:
    """Embedding a session sent by an actor failed beside the actor: its caller
    gets the error and nothing is stored."""

    session_id: str
    error: str


# -- echoes of a session, merged (memories.sessions decides which) ---------------------------------
def _merged_echo(record: MemoryRecord, *, into: str, now: float) -> MemoryRecord:
    return with_change(record, Change(at=now, op="merged", by="archive", other=into, note="echo"),
                       status="merged", merged_into=into)


def _absorbed_echo(record: MemoryRecord, *, echo: str, now: float) -> MemoryRecord:
    return with_change(record, Change(at=now, op="absorbed", by="archive", other=echo, note="echo"))


@cache
def _scope_tokenizer(stem: bool | str, fold_accents: bool) -> Tokenizer:
    """The full-text tokenizer of every scope of these settings: a Tokenizer holds
    nothing of its own but its settings and stemmer, whose one lock is shared likewise
    (the word -> term table is the process's already); one of its own was ~400 bytes
    a live scope (the tokenizer, its stemmer, lock and bound method)."""
    return Tokenizer(stem=stem, fold_accents=fold_accents, stem_guard=threading.Lock())


_NOTHING_KEPT: Final[dict[Any, Any]] = {}
"""What a scope's transient ``_analysed`` and ``_words`` are between commands (never
written: the first memory a command classifies makes them)."""

SCOPE_BYTES: Final = 9_000
"""What a live scope costs besides its memories: the settings, indexes and tables,
its cell in the kernel and its store (tracemalloc, 2026-11-26: 16.2 KB a scope of one
memory naming nothing, over 300 such scopes served from a data directory, 1.5 KB of it
the vector; the same memory in each, so no new words for the process's caches, which
took ~2 KB more a scope when each memory held a word of its own)."""
MEMORY_BYTES: Final = 5_500
"""What each memory costs besides its text and vector: the record and its history,
the keyword, BM25 and filter entries, the id maps (tracemalloc: 7.4 KB a memory in
a scope of 5,000 short memories of 384 dims, 1.5 KB of it the vector)."""
RECORD_BYTES: Final = 500
"""The record objects' share of ``MEMORY_BYTES`` (the struct, its id's and times'
objects: tracemalloc, 2026-11-27, about 450 bytes a memory besides its content at
300,000), which a scope whose records are in a file (``memories.records``) does not
hold, nor the contents."""
NAME_BYTES: Final = 1_500
"""What each name its memories mention costs in the entity graph besides its vector
(the spellings, the memories naming it, its counts: tracemalloc, 1.5 KB more a scope of
one memory naming Lisbon than of one naming nothing)."""


class _NotStreamed(Exception):
    """A large scope's records could not be restored into their file chunk by chunk
    (``ScopeMemory._restore_into_file``): they are read whole instead."""


class _SearchPlan(NamedTuple):
    """A search checked in the actor's turn (``ScopeMemory._search_plan``)."""

    query: str
    vector: npt.NDArray[np.float32] | None
    top_k: int
    mode: SearchMode
    now: float
    min_score: float | None
    facets: str | None
    allowed: npt.NDArray[np.bool_] | None
    ahead: ReadAhead | None = None  # what a read-ahead made for it (a hybrid search)


READ_AHEAD_MAX: Final = 16
"""Searches one read-ahead prepares at most (``ScopeMemory.read_ahead``, and the scope
kind's ``read_ahead_max``): it holds 21 bytes a row of the index for each (its bounds,
the scores computed and which ones are), the bounds of all of them until the last is
taken (they are rows of two arrays)."""

_KEYWORD_MERGES: Final = threading.Lock()
"""Held by a keyword search merging a scope's changes into its recency order: searches
beside the actor may run side by side (``KeywordIndex.merge_guard``; merges are rare
and short, so one lock serves every scope)."""

BESIDE_MIN_MEMORIES: Final = 30_000
"""Memories from which a scope's searches run beside the actor (``search_beside``).
Measured through HTTP on 2 cores (bench/http.py --routes search, 16 connections,
beside against ``kernel.read_threads = 0`` in the same run): at 10,000 memories
beside lost (1,016 against 1,235 req/s; 1,192 against 810 us of CPU a search: the
threads and the loop contend for the GIL more than the matrix product gains), at
30,000 it was about even (554 against 523 req/s, 36% more CPU), at 100,000 it won
(294 against 187 req/s, the same CPU). Below this a search runs in the actor's turn."""


# -- the behaviour ---------------------------------------------------------------------------------
class ScopeMemory:
    """The long-term memory of one (app_name, user_id). Synchronous, deterministic;
    see the module doc."""

    # slots: a live scope's attributes are more than Python shares a dict's keys for
    # (30), so each scope would carry a dict of its own (~1.6 KB)
    __slots__ = ("_ahead", "_analysed", "_no_jobs_due", "_quiet_search", "_records_next", "_texts", "_words",
                 "app_name",
                 "bm25", "by_content", "categories", "clock", "content_bytes", "dim", "doc_of", "docs",
                 "documents", "embedder", "entities",
                 "extractions", "free", "graph", "graph_failed_at", "graph_pending_since", "graph_restored",
                 "graph_stale", "keyed", "keyword", "names_since", "rank_cache", "replaying", "sessions",
                 "settings", "snapshot_wanted", "table", "user_id", "vectors")

    def __init__(self, key: Key, settings: ScopeSettings) -> None:
        if len(key) != 2:
            raise InvalidInput(f"a scope key is (app_name, user_id), got {key!r}", field="key")
        self.app_name, self.user_id = key[0], key[1]
        self.settings = settings
        # the records by doc: a list, or once the scope is large a file (memories.records)
        self.docs: list[MemoryRecord | None] | FileRecords = []
        self.doc_of: dict[str, int] = {}
        # the docs by content (and the twins of a content stored more than once)
        self.by_content = Contents()
        files = settings.record_files
        # the docs from which the records move to a file (again at twice as many after a failure)
        self._records_next = sys.maxsize if files is None else files.min_records
        self.keyed = KeyedIndex()
        self.free: list[int] = []
        fold = settings.fold_accents
        self.keyword = KeywordIndex(keep_words=False, fold_accents=fold)  # _unindex passes the content
        self.keyword.merge_guard = _KEYWORD_MERGES
        self.bm25 = BM25Index(k1=settings.bm25_k1, b=settings.bm25_b,
                              tokenizer=_scope_tokenizer(settings.fulltext_stem, fold),
                              context_weight=settings.context_weight)
        # per session: its memories as (id, doc), by id; neighbours give each its context
        self.sessions: dict[str, list[tuple[str, int]]] = {}
        self.entities = EntityIndex(fold_accents=fold)
        self.graph = EntityGraph(detect=settings.entity_detection, fold_accents=fold)
        self.graph_stale = False  # declarations replayed, mentions not found again yet
        self.graph_restored = False  # a restore took the mentions from the snapshot's sidecar
        # work no journal line holds that the next snapshot would keep (an HNSW graph built
        # beside the actor, indexes a restore rebuilt): the kernel then writes one even for
        # a short journal (config.storage.snapshot_min_growth), else each load redoes it
        self.snapshot_wanted = False
        self.table = FilterTable()
        self.embedder: str | None = None
        self.dim = 0
        self.vectors: VectorIndex | None = None
        self.content_bytes = 0
        # normalized text -> doc, built on first use by consolidation, then kept in step
        self._texts: dict[str, int] | None = None
        # transient: the graph build in flight (the clock of the command that planned it)
        self.graph_pending_since: float | None = None
        self.graph_failed_at: int | None = None
        # transient: the entity names' embedding job in flight (the clock that planned it)
        self.names_since: float | None = None
        self.clock = 0.0
        self.extractions = Extractions(self.app_name, self.user_id, settings.cursor, settings.extract,
                                       settings.timer)
        self.replaying = False
        self.documents = Documents()
        self.categories = ScopeCategories(settings.category_threshold, self.bm25.tokenizer)
        self.extractions.catalog = self.categories.as_dict
        # transient: what searches share until the next write (made by the first search)
        self.rank_cache: RankCache | None = None
        # transient: content -> its full-text terms and positions, found while a command's
        # memories were classified, read (and emptied) when they are indexed (a refused
        # command's are dropped by the next indexing: at most one command's worth)
        self._analysed: dict[str, tuple[list[str], list[int]]] = _NOTHING_KEPT
        # likewise: content -> the words the keyword index reads
        self._words: dict[str, list[str]] = _NOTHING_KEPT
        # transient: the search ``searches_inline`` found no job due for, until the next handle
        self._quiet_search: Search | None = None
        # transient: what ``read_ahead`` made for searches about to come, by their id (with
        # the command itself), until taken or a command other than a search is handled
        self._ahead: dict[int, tuple[Search, ReadAhead]] | None = None
        # transient: True when no job can come due at any time until a command changes the
        # scope (None: not known; see ``searches_inline``)
        self._no_jobs_due: bool | None = None

    def live_bytes(self) -> int:
        """An estimate of the memory this scope holds while live, for the runtime's
        ``kernel.max_live_bytes`` budget: a constant per scope and per memory, the
        texts, and each vector's bytes (its float32 row; once there is an HNSW graph,
        also the graph's quantised copy and its links; the rows' int8 copy for the coarse
        pass, while there is one), and its entity names (a constant for each, and their
        vectors)."""
        graph = self.graph
        size = (SCOPE_BYTES + len(self.doc_of) * MEMORY_BYTES + self.content_bytes + graph.names * NAME_BYTES
                + graph.vectors.nbytes)
        docs = self.docs
        if isinstance(docs, FileRecords):
            size += docs.nbytes - len(self.doc_of) * RECORD_BYTES - self.content_bytes
        vectors = self.vectors
        if vectors is not None and len(vectors):
            size += len(vectors) * vectors.bytes_per_vector + vectors.coarse_bytes
        ahead = self._ahead
        if ahead:  # (the searches of one read-ahead share their arrays: each counted once)
            held = {id(array): array.nbytes for _, made in ahead.values() for array in made.exact.buffers()}
            size += sum(held.values())
        cache = self.rank_cache
        return size + (cache.nbytes if cache is not None else 0) + self.bm25.kept_bytes

    def __repr__(self) -> str:
        return f"ScopeMemory(({self.app_name!r}, {self.user_id!r}), memories={len(self.doc_of)})"

    def __len__(self) -> int:
        return len(self.doc_of)

    # -- lookups ------------------------------------------------------------------------------
    def record(self, memory_id: str) -> MemoryRecord | None:
        doc = self.doc_of.get(memory_id)
        return None if doc is None else self.docs[doc]

    def records(self) -> Iterator[MemoryRecord]:
        """Every memory, by doc id."""
        for record in self.docs:
            if record is not None:
                yield record

    def _record_at(self, doc: int) -> MemoryRecord:
        record = self.docs[doc]
        assert record is not None
        return record

    docs_record = _record_at

    def memory_id_at(self, doc: int) -> str:
        """The id of the memory at ``doc`` (without reading its record from a file)."""
        docs = self.docs
        if isinstance(docs, FileRecords):
            memory_id = docs.id_at(doc)
            assert memory_id is not None
            return memory_id
        return self._record_at(doc).id

    def records_at(self, docs: Iterable[int]) -> Iterator[MemoryRecord | None]:
        """The records at ``docs`` in their order (None for a free doc); a file's are
        read together."""
        stored = self.docs
        if isinstance(stored, FileRecords):
            return stored.many(docs)
        return map(stored.__getitem__, docs)

    @property
    def name(self) -> str:
        """The scope's key as it appears in messages."""
        return self._name

    # -- what consolidation uses (memories.knowledge) -------------------------------------------
    def texts(self) -> dict[str, int]:
        """Each memory's normalized text -> its doc (built on first use, then kept)."""
        if self._texts is None:
            texts: dict[str, int] = {}
            for doc, record in enumerate(self.docs):
                if record is not None:
                    texts.setdefault(normalized_text(record.content), doc)
            self._texts = texts
        return self._texts

    def check_vectors_of(self, embedder: Any, dim: Any, vectors: Sequence[bytes], what: str) -> None:
        self._check_embedder(embedder, dim, what)
        check_vectors(vectors, dim)

    def change_record(self, memory_id: str, change: Callable[[MemoryRecord], MemoryRecord]) -> None:
        """Replace a memory's record by ``change(record)``: fields that no index but the
        filter columns read (status, importance, links, history...); the content stays.
        A record placed but not indexed yet (a run of a replay) is indexed as changed."""
        doc = self.doc_of.get(memory_id)
        if doc is None:
            return
        old = self._record_at(doc)
        new = change(old)
        if new is old:
            return
        assert new.content == old.content and new.id == old.id
        indexed = doc < self.table.capacity and bool(self.table.live[doc])
        if indexed:
            self.table.remove(doc, old)
        self.docs[doc] = new
        if indexed:
            self.table.add(doc, new)

    def place_records(self, placed: Sequence[tuple[MemoryRecord, bytes | None]], embedder: str | None,
                      dim: int) -> None:
        """Store checked records new to the scope (ids and contents unused), with their
        vectors, into every index."""
        if not placed:
            return
        if self.embedder is None and embedder is not None and any(v is not None for _, v in placed):
            self._adopt_embedder(embedder, dim)
        docs: list[tuple[int, MemoryRecord]] = []
        vectors: list[tuple[int, bytes]] = []
        for record, vector in placed:
            doc = self._allocate()
            self.docs[doc] = record
            self.doc_of[record.id] = doc
            docs.append((doc, record))
            if vector is not None:
                vectors.append((doc, vector))
            self.clock = max(self.clock, record.created_at)
        self._index_many(docs)
        self._add_vectors(vectors)

    # -- dispatch -----------------------------------------------------------------------------
    def handle(self, command: Any) -> Any:
        quiet = command is self._quiet_search
        self._quiet_search = None
        if not quiet:
            self._no_jobs_due = None  # (any other command may change what jobs depend on)
        ahead = None
        if self._ahead is not None:
            ahead = self._taken_ahead(command)
        match command:
            case Search():
                if quiet:  # just found to plan no job, at its time nor the clock: a plain read
                    return self._search_run(self._search_plan(command, ahead))
                # a graph may lag behind deferred vectors (after a replay, say): catch it up
                return self._with_graph(self._search(command, ahead))
            case Remember(memories=memories, embedder=embedder, dim=dim, now=now):
                ids, created = self._remember(memories, embedder, dim, now, command.classify)
                return self._with_graph(Remembered(ids=ids, created=created))
            case AddSession():
                return self._with_graph(self._add_session(command))
            case GetMemory(id=memory_id):
                record = self.record(memory_id) if isinstance(memory_id, str) else None
                if record is None:
                    raise NotFound(f"no memory {memory_id!r} in scope {self._name}")
                return record
            case Touch():
                return self._touch(command)
            case PutMemories():
                return self._with_graph(put_memories(self, command))
            case RefreshExpiry():
                return refresh_expiry(self, command)
            case ForgetExpired():
                return forget_expired(self, command)
            case ListNamespaces():
                return list_namespaces(self, command)
            case UpdateMemory():
                return self._with_graph(self._update(command))
            case Forget(ids=ids, now=now):
                check_seconds(now, "now")
                if not isinstance(ids, list | tuple):
                    raise InvalidInput("ids must be a list of memory ids", field="ids")
                gone = [memory_id for memory_id in dict.fromkeys(ids)
                        if isinstance(memory_id, str) and memory_id in self.doc_of]
                if not gone:  # nothing to forget: nothing to journal
                    return Step(Forgotten(ids=[]), unchanged=True)
                self._forget(gone)
                return self._with_graph(Forgotten(ids=gone))
            case ForgetWhere(filter=spec, now=now):
                check_seconds(now, "now")
                compiled = compile_filter(spec)
                if compiled.is_empty:
                    raise InvalidInput("forget_where needs a filter that names something; an empty "
                                       "filter would delete every memory", field="filter")
                docs = np.flatnonzero(compiled.mask(self.table)).tolist()
                gone = [self.memory_id_at(doc) for doc in docs]
                if not gone:  # nothing to forget: nothing to journal
                    return Step(Forgotten(ids=[]), unchanged=True)
                self._forget(gone)
                return self._with_graph(Forgotten(ids=gone))
            case CountMemories(filter=spec, include_history=history, as_of=as_of):
                allowed = self._allowed(spec, history, as_of)
                return len(self.doc_of) if allowed is None else int(np.count_nonzero(allowed))
            case ListMemories():
                return self._list(command)
            case GetScopeStats(now=now):
                return self._with_graph(self._stats(), now=now)
            case GraphReady():
                return self._graph_ready(command)
            case StoreSession():
                return self._store_session(command)
            case ApplyExtraction(session_id=session_id) if document_of(session_id) is not None:
                return self._typed(command, apply_document_extraction(self, command))
            case ApplyExtraction():
                return self._typed(command, self._with_graph(self._apply_extraction(command)))
            case ExtractionFailed():
                return self._extraction_failed(command)
            case ExtractSession():
                return self._started(*self.extractions.request(command))
            case RetryDeadLetter():
                return self._started(*self.extractions.retry(command))
            case CursorTick(now=now):
                return Step(None, tuple(self.extractions.tick(now)), unchanged=True)
            case GetCursors(session_id=session_id):
                return self.extractions.info(session_id)
            case GetHistory():
                return history_of(self, command)
            case ImportMemories():
                imported = import_records(self, command)
                return self._with_graph(imported) if imported.ids_added else Step(imported, unchanged=True)
            case GetVectors():
                return vectors_of(self, command)
            case IngestDocument():
                return ingest_document(self, command)
            case ForgetDocument():
                return forget_document(self, command)
            case GetDocuments(document_id=document_id):
                return document_statuses(self, document_id)
            case SetCategories():
                return set_categories(self, command)
            case ApplyClassification():
                return apply_classification(self, command)
            case ClassificationFailed():
                return self.categories.failed(command)
            case GetCategories():
                return self._with_graph(self.categories.info(self))
            case GetFacets():
                return get_facets(self, command)
            case GetActorMemories():
                return actor_memories(self, command)
            case DeclareEntity():
                return self._with_graph(declare_entity(self, command))
            case MergeEntities():
                return merge_entities(self, command)
            case UnmergeEntity():
                return unmerge_entity(self, command)
            case ResolveNames():
                return self._with_graph(resolve_names(self, command))
            case NameEmbedFailed():
                return name_embed_failed(self, command)
            case ListEntities():
                return list_entities(self, command)
            case GetEntity():
                return entity_detail(self, command)
            case GetRelated():
                return related_entities(self, command)
            case GetGraphStats():
                return graph_stats(self)
            case ExtractDocument():
                return extract_document(self, command)
            case SessionEmbedFailed(session_id=session_id, error=error):
                raise EmbedderError(f"scope {self._name}: embedding session {session_id!r} failed: {error}")
            case _:
                raise TypeError(f"scope {self._name} cannot handle {command!r}")

    @property
    def _name(self) -> str:
        return f"({self.app_name!r}, {self.user_id!r})"

    # -- writes --------------------------------------------------------------------------------
    def _check_embedder(self, embedder: Any, dim: Any, what: str) -> None:
        """The command's vectors must come from the scope's embedder."""
        if not isinstance(embedder, str) or not embedder:
            raise InvalidInput(f"{what} carries vectors but no embedder name", field="embedder")
        check_int(dim, "dim", 1, 65_536)
        if self.embedder is None:
            return
        if embedder != self.embedder or dim != self.dim:
            configured = self.settings.embedder_name
            hint = ""
            if configured is not None and configured != self.embedder:
                hint = (f"; this runtime is configured with {configured!r}: "
                        f"set config.models.embedder back to "
                        f"the scope's model (its {len(self.doc_of):,} memories keep their vectors; "
                        f"re-embedding a scope in place is not supported yet)")
            raise InvalidInput(f"scope {self._name} holds vectors of embedder {self.embedder!r} "
                               f"(dim {self.dim}); {what} carries vectors of {embedder!r} (dim {dim}), "
                               f"and vectors of two models are never mixed{hint}", field="embedder")

    def _new_record(self, memory: Any, now: float,
                    classify: bool = False) -> tuple[MemoryRecord, bytes | None]:
        settings = self.settings
        if not isinstance(memory, NewMemory):
            raise InvalidInput(f"memories must be NewMemory, got {type(memory).__name__}", field="memories")
        record = record_of(memory, now, settings.max_content_bytes, settings.max_metadata_bytes)
        if not classify:
            return record, memory.vector
        if self.replaying:  # (a replay indexes a whole run at its end: nothing is kept for it)
            return self.categories.classify_new(record), memory.vector
        # the terms full-text indexing reads and the keyword index's words, found in one
        # reading of the text: the classifier reads the terms too
        content = record.content
        analysed = self._analysed.get(content)
        if analysed is None:
            if self._analysed is _NOTHING_KEPT:
                self._analysed, self._words = {}, {}
            terms, positions, found = self.bm25.tokenizer.analysed(content, self.keyword.fold_accents)
            analysed = self._analysed[content] = (terms, positions)
            self._words[content] = found
        return self.categories.classify_new(record, tokens=analysed[0]), memory.vector

    def _remember(self, memories: Any, embedder: Any, dim: Any,
                  now: Any, classify: bool = False) -> tuple[list[str], list[bool]]:
        ids, created, placed, vectors = self._accept(memories, embedder, dim, now, classify)
        self._index_many(placed)
        self._add_vectors(vectors)
        return ids, created

    def _accept(self, memories: Any, embedder: Any, dim: Any, now: Any, classify: bool = False) -> tuple[
            list[str], list[bool], list[tuple[int, MemoryRecord]], list[tuple[int, bytes]]]:
        """Check a command's memories, then give each new one a doc (known by id and
        content from here on): the ids answered, which were created, the placed
        records for _index_many and their (doc, vector) for _add_vectors."""
        now = check_seconds(now, "now")
        if not isinstance(memories, list | tuple):
            raise InvalidInput("memories must be a list", field="memories")
        limit = self.settings.max_memories_per_command
        if len(memories) > limit:
            raise TooLarge(f"{len(memories):,} memories in one command; the limit is {limit:,} "
                           f"(config.memories.max_memories_per_command)", field="memories")
        checked = [self._new_record(memory, now, classify is True) for memory in memories]
        deduped = [memory.dedupe for memory in memories]
        has_vectors = any(vector is not None for _, vector in checked)
        if has_vectors:
            self._check_embedder(embedder, dim, "the command")
            check_vectors([vector for _, vector in checked if vector is not None], dim)
        # dedupe against the scope and within the command; an id may not be reused
        ids: list[str] = []
        created: list[bool] = []
        fresh: list[tuple[MemoryRecord, bytes | None]] = []
        fresh_content: dict[str, str] = {}
        fresh_ids: dict[str, str] = {}
        for (record, vector), dedupe in zip(checked, deduped, strict=True):
            existing = self.by_content.get(record.content) if dedupe else None
            same = self._record_at(existing).id if existing is not None else fresh_content.get(record.content)
            if same is not None and dedupe:
                ids.append(same)
                created.append(False)
                continue
            if record.id in self.doc_of or record.id in fresh_ids:
                raise InvalidInput(f"memory id {record.id!r} is taken by other content in scope {self._name}",
                                   field="id")
            fresh_content[record.content] = record.id
            fresh_ids[record.id] = record.content
            fresh.append((record, vector))
            ids.append(record.id)
            created.append(True)
        # valid: from here on the state changes
        self.clock = max(self.clock, now)
        if has_vectors and self.embedder is None and any(v is not None for _, v in fresh):
            self._adopt_embedder(embedder, dim)
        placed: list[tuple[int, MemoryRecord]] = []
        vectors: list[tuple[int, bytes]] = []
        for record, vector in fresh:
            doc = self._allocate()
            self.docs[doc] = record
            self.doc_of[record.id] = doc
            self._hold_content(doc, record.content)
            placed.append((doc, record))
            if vector is not None:
                vectors.append((doc, vector))
        return ids, created, placed, vectors

    def _add_vectors(self, vectors: Sequence[tuple[int, bytes]]) -> None:
        if vectors:
            assert self.vectors is not None
            matrix = np.frombuffer(b"".join(blob for _, blob in vectors), dtype="<f4").reshape(
                len(vectors), self.dim)
            self.vectors.add_many([doc for doc, _ in vectors], matrix)

    def replay(self, commands: Iterable[Any]) -> None:
        """Apply journaled commands in order, as ``handle`` would one by one, to the
        same state; the memories of a run of Remember and AddSession commands are
        indexed together at the run's end (one pass per index, one vector insert),
        which is what makes recovering a long journal fast. A command refused is
        skipped, as ``handle`` refuses it (see ``mnemex.kernel.handle_each``)."""
        placed: list[tuple[int, MemoryRecord]] = []
        vectors: list[tuple[int, bytes]] = []
        self.replaying = True
        try:
            self._replay(commands, placed, vectors)
        finally:
            self.replaying = False
            self._no_jobs_due = None
            # a replayed command may plan a graph build, but a replay starts no job: none is
            # in flight (else searches stayed exact until the plan was taken for lost)
            self.graph_pending_since = None
            if self.graph_stale:  # declarations replayed: the gazetteer's mentions, found once
                reindex_graph(self)

    def _replay(self, commands: Iterable[Any], placed: list[tuple[int, MemoryRecord]],
                vectors: list[tuple[int, bytes]]) -> None:
        for command in commands:
            echoes: list[tuple[int, int | str]] = []
            try:
                if isinstance(command, AddSession):
                    _check_session_memories(command.session_id, command.memories)
                    echoes = _checked_echoes(command.echo_of, command.memories)
                elif not isinstance(command, Remember):
                    self._index_many(placed)
                    self._add_vectors(vectors)
                    placed, vectors = [], []
                    self.handle(command)
                    continue
                accepted = self._accept(command.memories, command.embedder, command.dim, command.now,
                                        command.classify)
            except MnemexError as exc:
                log.warning("scope %s: replay: %s refused, as it would have been when it arrived: %s",
                            self._name, type(command).__name__, exc)
                continue
            if echoes:
                self._merge_echoes(echoes, accepted[0], accepted[1], command.now)
            placed += accepted[2]
            vectors += accepted[3]
        self._index_many(placed)
        self._add_vectors(vectors)

    def _adopt_embedder(self, embedder: str, dim: int) -> None:
        self.embedder, self.dim = embedder, dim
        self.vectors = VectorIndex(dim, **self.settings.vector_params())

    def _allocate(self) -> int:
        if self.free:
            return self.free.pop()
        docs = self.docs
        docs.append(None)
        if len(docs) >= self._records_next:
            self._records_to_file()
        return len(docs) - 1

    def _records_to_file(self) -> None:
        """Move the records to a file of their own (``memories.records``); a failure
        keeps them in memory, tried again at twice as many docs."""
        files = self.settings.record_files
        docs = self.docs
        if files is None or isinstance(docs, FileRecords):
            return
        try:
            self.docs = FileRecords(files, docs)
        except OSError as exc:
            self._records_next = 2 * len(docs)
            log.warning("scope %s: its %d records could not be moved to a file in %s (%s); they stay in "
                        "memory, tried again at %d", self._name, len(self.doc_of), files.directory, exc,
                        self._records_next)
            return
        self._records_next = sys.maxsize
        self.by_content.key_by_hash(self.docs)

    def _index_many(self, placed: Sequence[tuple[int, MemoryRecord]],
                    contexts: Mapping[int, str | None] | None = None) -> None:
        """Put records placed at their docs into every index but the vector index.
        Their sessions are joined first (unless ``contexts``, each doc's context, is
        given: a restore), so each is indexed once with its final context and each
        older neighbour whose context changed is re-ranked once."""
        analysed, self._analysed = self._analysed, _NOTHING_KEPT
        found, self._words = self._words, _NOTHING_KEPT
        if not placed:
            return
        placed = [(doc, self._record_at(doc)) for doc, _ in placed]  # as changed since they were placed
        changed: list[tuple[int, str | None]] = []
        if contexts is None:
            contexts, changed = self._join_sessions(placed)
        texts = self._texts
        for doc, record in placed:
            self._hold_content(doc, record.content)
            self.keyed.add(doc, record)
            if texts is not None:
                texts.setdefault(normalized_text(record.content), doc)
            if record.entities:
                self.entities.add(doc, record.entities)
            if not self.graph_restored:
                self.graph.add(doc, record.content, record.author, record.entities)
        docs = [doc for doc, _ in placed]
        self.keyword.add_many(docs, [record.content for _, record in placed],
                              [record.timestamp for _, record in placed], found)
        self.bm25.add_many([(doc, record.content, contexts.get(doc) or None) for doc, record in placed],
                           analysed)
        for doc, context in changed:
            self.bm25.update(doc, self._record_at(doc).content, context)
        self.table.add_many(placed)
        self.content_bytes += sum(len(record.content) for _, record in placed)

    # -- session context: a memory's neighbours rank it in full-text search -----------------------
    def _context_at(self, members: list[tuple[str, int]], at: int) -> str | None:
        window = self.settings.context_window
        around = members[max(0, at - window):at] + members[at + 1:at + 1 + window]
        return " ".join(self._record_at(doc).content for _, doc in around) or None

    def _join_sessions(self, placed: Sequence[tuple[int, MemoryRecord]]) -> tuple[
            dict[int, str | None], list[tuple[int, str | None]]]:
        """Put each placed doc among its session's memories; return the context of
        each, and the older neighbours whose context now includes one of them."""
        window = self.settings.context_window
        joined = [(doc, record) for doc, record in placed if record.session_id is not None] if window else []
        contexts: dict[int, str | None] = {}
        changed: dict[int, str | None] = {}
        for doc, record in joined:
            bisect.insort(self.sessions.setdefault(record.session_id, []), (record.id, doc))  # type: ignore[arg-type]
        new = {doc for doc, _ in joined}
        for doc, record in joined:
            members = self.sessions[record.session_id]  # type: ignore[index]
            at = bisect.bisect_left(members, (record.id, doc))
            for j in range(max(0, at - window), min(len(members), at + window + 1)):
                other = members[j][1]
                into = contexts if other in new else changed
                if other not in into:
                    into[other] = self._context_at(members, j)
        return contexts, list(changed.items())

    def _leave_session(self, record: MemoryRecord, doc: int) -> None:
        window = self.settings.context_window
        members = self.sessions.get(record.session_id) if window and record.session_id is not None else None
        if members is None:
            return
        at = bisect.bisect_left(members, (record.id, doc))
        if at < len(members) and members[at] == (record.id, doc):
            del members[at]
        if not members:
            del self.sessions[record.session_id]  # type: ignore[arg-type]
            return
        self._recontext(members, range(max(0, at - window), min(len(members), at + window)))

    def _recontext(self, members: list[tuple[str, int]], positions: range) -> None:
        for j in positions:
            doc = members[j][1]
            self.bm25.update(doc, self._record_at(doc).content, self._context_at(members, j))

    def _unindex(self, doc: int) -> MemoryRecord:
        record = self._record_at(doc)
        self.keyword.remove(doc, record.content)
        self.bm25.remove(doc)
        self._leave_session(record, doc)
        if record.entities:
            self.entities.remove(doc)
        self.graph.remove(doc)
        self.table.remove(doc, record)
        self._release_content(doc, record.content)
        self.keyed.remove(doc, record)
        if self._texts is not None:
            key = normalized_text(record.content)
            if self._texts.get(key) == doc:
                del self._texts[key]
        self.content_bytes -= len(record.content)
        return record

    def _hold_content(self, doc: int, content: str) -> None:
        """Index ``doc`` by its content: the first doc of a content is the one writes
        deduplicate against; the others (stored without dedupe) are its twins."""
        self.by_content.hold(doc, content)

    def _release_content(self, doc: int, content: str) -> None:
        self.by_content.release(doc, content)

    @property
    def twins(self) -> dict[str | int, set[int]]:
        """The other docs of each content stored more than once (a write without dedupe)."""
        return self.by_content.twins

    def _forget(self, ids: Sequence[str]) -> None:
        for memory_id in ids:
            doc = self.doc_of.pop(memory_id)
            self._unindex(doc)
            if self.vectors is not None and doc in self.vectors:
                self.vectors.remove(doc)
            self.docs[doc] = None
            self.free.append(doc)

    def _update(self, cmd: UpdateMemory) -> Updated:
        now = check_seconds(cmd.now, "now")
        memory_id = check_memory_id(cmd.id)
        doc = self.doc_of.get(memory_id)
        if doc is None:
            raise NotFound(f"no memory {memory_id!r} in scope {self._name}")
        old = self._record_at(doc)
        settings = self.settings
        unset = msgspec.UNSET
        given = {name: value for name in CHANGEABLE if (value := getattr(cmd, name)) is not unset}
        changes = checked_changes(given, settings.max_content_bytes, settings.max_metadata_bytes)
        if "content" in changes:
            other = self.by_content.get(changes["content"])
            if other is not None and other != doc:
                raise InvalidInput(f"memory {self._record_at(other).id!r} of scope {self._name} already "
                                   f"holds this content", field="content")
        vector: bytes | None = None
        drop_vector = False
        if cmd.vector is not unset:
            if cmd.vector is None:
                drop_vector = True
            else:
                self._check_embedder(cmd.embedder, cmd.dim, "the update")
                decode_vector(cmd.vector, cmd.dim)
                vector = cmd.vector
        elif "content" in changes and changes["content"] != old.content and self.embedder is not None \
                and self.vectors is not None and doc in self.vectors:
            raise InvalidInput("a new content needs its new vector (the ref embeds it); the old vector "
                               "would no longer match", field="vector")
        # valid: from here on the state changes
        self.clock = max(self.clock, now)
        record = self.categories.updated(old, msgspec.structs.replace(old, **changes), changes)
        self._unindex(doc)
        self.docs[doc] = record
        self._index_many([(doc, record)])
        if vector is not None:
            if self.embedder is None:
                self._adopt_embedder(str(cmd.embedder), int(cmd.dim))
            assert self.vectors is not None
            matrix = np.frombuffer(vector, dtype="<f4").reshape(1, self.dim)
            if doc in self.vectors:
                self.vectors.update(doc, matrix)
            else:
                self.vectors.add_many([doc], matrix)
        elif drop_vector and self.vectors is not None and doc in self.vectors:
            self.vectors.remove(doc)
        return Updated(memory=record)

    def _reindex_all(self, sidecars: Mapping[str, bytes | memoryview], docs: Iterable[int]) -> None:
        """Index every record (after a restore) of ``docs`` (the docs restored, whose
        int objects ``doc_of`` holds: the indexes share them, where an int a doc for
        each would cost 28 bytes a memory): the text indexes from their sidecars when
        they match the records, else from the records, sessions first so that each
        memory is indexed once with its final context."""
        records = self.docs
        ordered = sorted(docs)
        # (each doc once: a snapshot's lines are not checked distinct as its sidecars are)
        items = [(doc, record) for at, doc in enumerate(ordered)
                 if (at == 0 or ordered[at - 1] != doc) and (record := records[doc]) is not None]
        window = self.settings.context_window
        if window:
            for doc, record in items:
                if record.session_id is not None:
                    self.sessions.setdefault(record.session_id, []).append((record.id, doc))
            for members in self.sessions.values():
                members.sort()
        if self._load_text_sidecars(sidecars):
            if not self.graph_restored:
                self.snapshot_wanted = bool(items)  # (the mentions, found again)
                for doc, record in items:
                    self.graph.add(doc, record.content, record.author, record.entities)
            for doc, record in items:
                self._hold_content(doc, record.content)
                self.keyed.add(doc, record)
            self.table.add_many(items)
            self.content_bytes = sum(len(record.content) for _, record in items)
            return
        context: dict[int, str | None] = {}
        for members in self.sessions.values():
            for at, (_, doc) in enumerate(members):
                context[doc] = self._context_at(members, at)
        self.snapshot_wanted = bool(items)  # (every index, made again)
        self._index_many(items, context)

    def _load_text_sidecars(self, sidecars: Mapping[str, bytes | memoryview]) -> bool:
        """Load the keyword, BM25 and entity indexes from the snapshot's sidecars when
        all are there, intact, made with these settings and over exactly these docs."""
        if not any(name in sidecars for name in TEXT_SIDECARS):
            return False
        try:
            keyword, bm25, entities = self._text_indexes_from(sidecars)
        except CorruptData as exc:
            log.info("scope %s: text-index sidecars not used (%s); rebuilding the indexes from the records",
                     self._name, exc)
            return False
        keyword.keep_words = False
        keyword.merge_guard = _KEYWORD_MERGES
        self.keyword, self.bm25, self.entities = keyword, bm25, entities
        return True

    def _restore_into_file(self, image: Image, chunks: Iterator[tuple[list[int], list[msgspec.Raw]]]) -> None:
        """The records of a large scope's snapshot written to its file of records (their
        bytes as the records sidecar holds them) and indexed a chunk at a time: the
        process never holds them all as objects, and what a chunk made is reused by the
        next (at 1,000,000 memories the records whole were about 640 MB, and once let
        go left their ids' memory scattered through the allocator's arenas). The text
        indexes and the entity graph come from their sidecars; when one cannot be used
        (or a chunk does not read) _NotStreamed says why, and the caller reads the
        records whole instead."""
        files = self.settings.record_files
        assert files is not None
        extra = image.extra
        try:
            stored = FileRecords(files, ())
        except OSError as exc:
            raise _NotStreamed(f"no file for them in {files.directory}: {exc}") from exc
        size = int(extra.get("docs", 0))
        stored.grow(size)
        self.docs = stored
        self.by_content.key_by_hash(stored)
        self._records_next = sys.maxsize
        graph = image.sidecars.get(GRAPH_SIDECAR)
        count = int(extra.get("count", -1))
        if count and (graph is None or not self.graph.sidecar_fits(graph)):  # (known before the records)
            raise _NotStreamed("the entity graph's sidecar is missing or made otherwise")
        self.table.reserve(size)
        doc_of, sessions, window = self.doc_of, self.sessions, self.settings.context_window
        every: list[int] = []
        hashes: list[int] = []  # (the contents' hashes, filed at once once every record is in the file)
        try:
            for docs, encoded in chunks:
                records = [_decode_record(blob) for blob in encoded]
                if docs:
                    stored.grow(max(docs) + 1)
                stored.place(docs, [record.id for record in records], encoded)
                for doc, record in zip(docs, records, strict=True):
                    doc_of[record.id] = doc
                    if window and record.session_id is not None:
                        sessions.setdefault(record.session_id, []).append((record.id, doc))
                    hashes.append(hash(record.content))
                    self.keyed.add(doc, record)
                self.documents.note_chunks(records)
                self.table.add_many(list(zip(docs, records, strict=True)))
                self.content_bytes += sum(len(record.content) for record in records)
                every += docs
        except (ValueError, msgspec.DecodeError, msgspec.ValidationError, OSError) as exc:
            raise _NotStreamed(str(exc)) from exc
        if not len(every) == len(doc_of) == count:
            raise _NotStreamed(f"the records sidecar holds {len(every)} records of {len(doc_of)} ids, the "
                               f"snapshot {count}")
        self.by_content.hold_hashed(np.array(every, dtype=np.int64), np.array(hashes, dtype=np.int64))
        for members in sessions.values():
            members.sort()
        if count and (graph is None or not self.graph.load_sidecar(graph, every)):
            raise _NotStreamed("the entity graph's sidecar is missing or made otherwise")
        if count and not self._load_text_sidecars(image.sidecars):
            raise _NotStreamed("the text indexes' sidecars are missing or made otherwise")

    def _text_indexes_from(self, sidecars: Mapping[str, bytes | memoryview]) -> tuple[
            KeywordIndex, BM25Index, EntityIndex]:
        missing_names = [name for name in TEXT_SIDECARS if name not in sidecars]
        if missing_names:
            raise CorruptData(f"sidecar(s) {', '.join(missing_names)} missing")
        checksum = doc_ids_checksum(sorted(self.doc_of.values()))
        for name, info in (("keyword", KeywordIndex.sidecar_info(sidecars["keyword"])),
                           ("bm25", BM25Index.sidecar_info(sidecars["bm25"]))):
            if info["ids_checksum"] != checksum:
                raise CorruptData(f"the {name} sidecar covers other docs than the snapshot's records")
        settings = self.settings
        return (KeywordIndex.from_sidecar(sidecars["keyword"], fold_accents=settings.fold_accents),
                BM25Index.from_sidecar(sidecars["bm25"], k1=settings.bm25_k1, b=settings.bm25_b,
                                       tokenizer=self.bm25.tokenizer, context_weight=settings.context_weight),
                EntityIndex.from_sidecar(sidecars["entities"], fold_accents=settings.fold_accents))

    def _touch(self, cmd: Touch) -> Touched:
        now = check_seconds(cmd.now, "now")
        ids, counts = cmd.ids, cmd.counts
        if not isinstance(ids, list | tuple) or not isinstance(counts, list | tuple):
            raise InvalidInput("ids and counts must be lists", field="ids")
        if counts and len(counts) != len(ids):
            raise InvalidInput(f"{len(counts)} counts for {len(ids)} ids", field="counts")
        for count in counts:
            check_int(count, "counts", 1)
        self.clock = max(self.clock, now)
        touched = 0
        for position, memory_id in enumerate(ids):
            doc = self.doc_of.get(memory_id) if isinstance(memory_id, str) else None
            if doc is None:
                continue
            old = self._record_at(doc)
            self.docs[doc] = msgspec.structs.replace(
                old, access_count=old.access_count + (counts[position] if counts else 1),
                last_accessed_at=max(old.last_accessed_at, now))
            touched += 1
        return Touched(count=touched)

    # -- a session sent by an actor -------------------------------------------------------------------
    def _store_session(self, command: StoreSession) -> Any:
        """Embed the session's new texts beside the actor (a Job that answers the
        caller), then store it as an AddSession; nothing changes here."""
        session, now = command.session, check_seconds(command.now, "now")
        if not isinstance(session, Session):
            raise InvalidInput(f"session must be a mnemex.Session, got {type(session).__name__}",
                               field="session")
        if (session.app_name, session.user_id) != (self.app_name, self.user_id):
            raise InvalidInput(f"session {session.id!r} belongs to app {session.app_name!r}, user "
                               f"{session.user_id!r}, not to scope {self._name}", field="session")
        session_id = check_memory_id(session.id, "session_id")
        for index, event in enumerate(session.events):
            if event.timestamp:
                check_seconds(event.timestamp, f"events[{index}].timestamp")
        memories = session_memories(session, command.first_id, self.settings.max_content_bytes)
        limit = self.settings.max_memories_per_command
        if len(memories) > limit:
            raise TooLarge(f"session {session_id!r} makes {len(memories):,} memories; one session may make "
                           f"at most {limit:,} (config.memories.max_memories_per_command)", field="session")
        todo: list[int] = []  # the memories with content new to the scope: only these are embedded
        fresh: set[str] = set()
        for i, memory in enumerate(memories):
            if memory.content not in self.by_content and memory.content not in fresh:
                fresh.add(memory.content)
                todo.append(i)
        echo_of = session_echoes(memories) if self.settings.archive_merge_echoes else {}
        if not todo:  # stored already, every text of it: nothing changes
            return self._with_graph(self._add_session(AddSession(session_id=session_id, memories=memories,
                                                                 now=now, echo_of=echo_of, classify=True)))
        embed = self.settings.embed
        name, dim = self.settings.embedder_name, self.settings.embedder_dim
        texts = [memories[i].content for i in todo]

        async def work() -> npt.NDArray[np.float32] | None:
            return None if embed is None or name is None else await embed(texts)

        def deliver(result: JobResult) -> AddSession | SessionEmbedFailed:
            if result.error is not None:
                return SessionEmbedFailed(session_id, f"{type(result.error).__name__}: {result.error}")
            if result.value is None:  # no embedder: stored without vectors (and journaled, as a write)
                return AddSession(session_id=session_id, memories=memories, now=now, echo_of=echo_of,
                                  classify=True)
            with_vectors = list(memories)
            for row, i in enumerate(todo):
                vector = encode_vector(result.value[row])
                with_vectors[i] = msgspec.structs.replace(memories[i], vector=vector)
            return AddSession(session_id=session_id, memories=with_vectors, embedder=name, dim=dim, now=now,
                              classify=True,
                              echo_of=echo_of)

        return Step(None, (Job(work, deliver, name=f"scope.embed-session {self.app_name}/{self.user_id}",
                               answers=True),))

    def _add_session(self, cmd: AddSession) -> SessionAdded:
        """Store a session's memories; the new ones that echo a user's statement
        (``cmd.echo_of``) are stored merged into it."""
        _check_session_memories(cmd.session_id, cmd.memories)
        echoes = _checked_echoes(cmd.echo_of, cmd.memories)
        ids, created, placed, vectors = self._accept(cmd.memories, cmd.embedder, cmd.dim, cmd.now,
                                                     cmd.classify)
        merged = self._merge_echoes(echoes, ids, created, cmd.now) if echoes else []
        self._index_many(placed)
        self._add_vectors(vectors)
        return SessionAdded(session_id=cmd.session_id, ids=ids, added=sum(created), merged=merged)

    def _merge_echoes(self, echoes: Sequence[tuple[int, int | str]], ids: Sequence[str],
                      created: Sequence[bool], now: float) -> list[str]:
        """Mark each new echo merged into the user's memory it restates (followed to
        the active memory that replaced it, if it was merged or superseded; an echo
        whose statement is gone stays active), with a Change on both; the ids of
        those merged. Runs after the command was accepted: never raises."""
        merged: list[str] = []
        for at, target in echoes:
            if not created[at]:
                continue  # stored before: left as it is
            echo = ids[at]
            head = self._active_head(ids[target] if isinstance(target, int) else target)
            if head is None or head == echo:
                continue
            self.change_record(echo, partial(_merged_echo, into=head, now=now))
            self.change_record(head, partial(_absorbed_echo, echo=echo, now=now))
            merged.append(echo)
        return merged

    def _active_head(self, memory_id: str) -> str | None:
        """The memory, or the active one that replaced it (None: neither is stored)."""
        record = self.record(memory_id)
        for _ in range(16):
            if record is None or record.active:
                break
            successor = record.merged_into or record.superseded_by
            record = self.record(successor) if successor is not None else None
        return record.id if record is not None and record.active else None

    # -- the knowledge layer ------------------------------------------------------------------------
    def _apply_extraction(self, cmd: ApplyExtraction) -> Any:
        """An extraction job's facts, consolidated (memories.knowledge), and the session's
        cursor advanced past [first, upto); a late result of an expired job changes
        nothing."""
        now, first = _job_range(cmd)
        facts, dropped = check_facts(self, cmd, now)
        job = None if self.replaying else cmd.job
        if not self.extractions.accepts(cmd.session_id, job) or \
                not self.extractions.commit(cmd.session_id, job, first, cmd.upto, now):
            # a late result of a job that expired, or a range already covered: dropped, not journaled
            return Step(Extracted(session_id=cmd.session_id, status="expired", first=first, upto=cmd.upto,
                                  extractor=cmd.extractor, usage=cmd.usage,
                                  error="the job's result came after its deadline or for messages "
                                        "already extracted; it was dropped"), unchanged=True)
        # valid and current: from here on the state changes
        self.clock = max(self.clock, now)
        applied = Applied(dropped=dropped)
        apply_facts(self, cmd, facts, applied)
        return Extracted(session_id=cmd.session_id, status="committed", first=first, upto=cmd.upto,
                         added=applied.added, reinforced=applied.reinforced, merged=applied.merged,
                         superseded=applied.superseded, linked=applied.linked, dropped=applied.dropped,
                         extractor=cmd.extractor, usage=cmd.usage)

    def _typed(self, cmd: ApplyExtraction, out: Any) -> Any:
        """Give the entity graph the types the extractor gave the entities of a
        committed job's facts, and the typed relations they state."""
        reply = out.reply if isinstance(out, Step) else out
        if isinstance(reply, Extracted) and reply.status == "committed":
            for fact in cmd.facts:
                if isinstance(fact, NewFact):
                    if fact.entity_types:
                        self.graph.note_types(fact.entity_types)
                    note_relations(self, fact)
        return out

    def _extraction_failed(self, cmd: ExtractionFailed) -> Any:
        now, first = _job_range(cmd)
        job = None if self.replaying else cmd.job
        if not self.extractions.accepts(cmd.session_id, job):
            return Step(Extracted(session_id=cmd.session_id, status="expired", first=first, upto=cmd.upto,
                                  error=f"{cmd.reason}: {cmd.message} (after the job's deadline: dropped)"),
                        unchanged=True)
        reply, jobs = self.extractions.fail(cmd.session_id, job, cmd, now)
        self.clock = max(self.clock, now)
        return Step(reply, tuple(jobs)) if jobs else reply

    @staticmethod
    def _started(reply: Extracted | None, jobs: Sequence[Job]) -> Any:
        """The answer to a command that may start extraction jobs (never journaled)."""
        return Step(reply, tuple(jobs), unchanged=True)

    # -- the HNSW graph, built beside the actor ------------------------------------------------------
    def _with_graph(self, reply: Any, now: float | None = None) -> Any:
        """Answer ``reply``, with a Job building the HNSW graph if one is wanted now (and
        the next re-classification job, when one is due: memories.categories; and one
        embedding new entity names: memories.graph)."""
        when = self.clock if now is None else now
        job = self._graph_job(when)
        jobs = ((job,) if job is not None else ()) + self.categories.jobs(self, when) + name_jobs(self, when)
        if not jobs:
            return reply
        if isinstance(reply, Step):
            return dataclasses.replace(reply, effects=(*reply.effects, *jobs))
        return Step(reply, jobs)

    def _wants_jobs(self, now: float) -> bool:
        """Whether ``_with_graph`` would plan a job at ``now`` (when not, it changes
        nothing and answers the reply as it is)."""
        return self._graph_due(now) or self.categories.is_due(self, now) or names_due(self, now)

    def _graph_due(self, now: float) -> bool:
        """Whether ``_graph_job`` plans a build at ``now`` (when not, it changes nothing)."""
        index = self.vectors
        if index is None or not index.wants_graph:
            return False
        pending = self.graph_pending_since
        if pending is not None and now - pending < self.settings.graph_stale + 0.001 * len(index):
            return False  # one is being built (a pending plan older than that was lost in a restart)
        return self.graph_failed_at is None or not abs(len(index) - self.graph_failed_at) < 1000

    def _graph_job(self, now: float) -> Job | None:
        if not self._graph_due(now):
            return None
        index = self.vectors
        assert index is not None
        build = index.plan_graph()
        self.graph_pending_since = now
        if build.base is not None:
            log.debug("scope %s: adding %d vectors to the HNSW graph beside the actor", self._name,
                      len(build.ids))
        else:
            log.info("scope %s: building an HNSW graph over %d vectors beside the actor", self._name,
                     len(index))

        def deliver(result: JobResult) -> GraphReady:
            if result.error is not None:
                return GraphReady(None, f"{type(result.error).__name__}: {result.error}", build.token)
            return GraphReady(result.value, token=build.token)

        return Job(build.run, deliver, name=f"scope.hnsw {self.app_name}/{self.user_id}", stop=build.stop)

    def _graph_ready(self, ready: GraphReady) -> Any:
        index = self.vectors
        if index is not None and ready.token and index.superseded(ready.token):
            if ready.build is not None and ready.build.built is not None:
                ready.build.built.discard()  # (its graph's file goes now, not when collected)
            # planned again since (its plan was taken for lost): that build is still to come,
            # and planning yet another here would make it stale in turn, on and on (a failure
            # of such a build says nothing of the newer one's); or planned by another
            # instance of this scope (before a passivation or a reload): not for this one
            return None
        self.graph_pending_since = None
        if ready.build is None or index is None:
            self.graph_failed_at = len(index) if index is not None else 0
            log.warning("scope %s: building the HNSW graph failed (%s); vector search stays exact",
                        self._name, ready.error or "no index")
            return None
        if index.adopt(ready.build):
            self.graph_failed_at = None
            self.snapshot_wanted = self.settings.hnsw_sidecar  # (kept in snapshots only then)
            log.info("scope %s: HNSW graph ready (%d vectors)", self._name, len(index))
        return self._with_graph(None)

    # -- reads ----------------------------------------------------------------------------------
    def allowed_docs(self, spec: Any, include_history: Any = False, as_of: Any = None
                     ) -> npt.NDArray[np.bool_] | None:
        """The docs a read may see (None: all), as ``_allowed``."""
        return self._allowed(spec, include_history, as_of)

    def _allowed(self, spec: Any, include_history: Any, as_of: Any, namespace: Any = None,
                 now: float = 0.0) -> npt.NDArray[np.bool_] | None:
        """The docs a read may see (None: all): the filter's, among the memories that
        are active (or, with include_history, any; with as_of, true at that time);
        with ``namespace``, only keyed memories under it; with ``now``, none expired."""
        allowed = self._allowed_by_filter(spec, include_history, as_of)
        keyed = self.keyed
        if namespace is not None:
            namespace = check_namespace(namespace)
            if keyed.holds_all(namespace, len(self.doc_of)):
                namespace = None  # every memory is under it: no narrowing (searches stay unfiltered)
        if namespace is None and not (now and keyed.expires):
            return allowed
        size = len(self.docs)
        mask = np.ones(size, dtype=np.bool_) if allowed is None else allowed[:size].copy()
        if len(mask) < size:
            mask = np.concatenate([mask, np.zeros(size - len(mask), dtype=np.bool_)])
        if namespace is not None:
            mask &= keyed.namespace_mask(namespace, size)
        if now:
            expired = keyed.expired_docs(now)
            if expired:
                mask[expired] = False
        return mask

    def _allowed_by_filter(self, spec: Any, include_history: Any, as_of: Any) -> npt.NDArray[np.bool_] | None:
        if not isinstance(include_history, bool):
            raise InvalidInput(f"include_history must be true or false, got {include_history!r}",
                               field="include_history")
        when = None if as_of is None else check_seconds(as_of, "as_of")
        compiled = compile_filter(spec)
        visible = self.table.visible(include_history, when)
        if compiled.is_empty:
            return visible
        mask = compiled.mask(self.table)
        return mask if visible is None else mask & visible[: len(mask)]

    def _list(self, cmd: ListMemories) -> MemoryPage:
        limit = cmd.limit
        if limit is not None:
            check_int(limit, "limit", 0)
        offset = check_int(cmd.offset, "offset", 0)
        allowed = self._allowed(cmd.filter, cmd.include_history, cmd.as_of, cmd.namespace,
                                check_seconds(cmd.now, "now"))
        if allowed is None:
            ids = sorted(self.doc_of)
        else:
            ids = sorted(map(self.memory_id_at, np.flatnonzero(allowed).tolist()))
        stop = None if limit is None else offset + limit
        page = [self._record_at(self.doc_of[memory_id]) for memory_id in ids[offset:stop]]
        return MemoryPage(memories=page, total=len(ids), limit=limit, offset=offset)

    def _stats(self) -> ScopeStats:
        created = self.table.created[self.table.live] if self.doc_of else None
        index = self.vectors
        return ScopeStats(
            app_name=self.app_name,
            user_id=self.user_id,
            count=len(self.doc_of),
            embedder=self.embedder,
            dim=self.dim,
            vector_mode=index.mode if index is not None else "exact",
            graph_pending=self.graph_pending_since is not None,
            tombstones=index.tombstones if index is not None else 0,
            vocabulary=self.bm25.vocabulary_size,
            entities=len(self.entities.entities()),
            sessions=self.table.distinct("session_id"),
            categories=self.table.distinct("categories"),
            content_bytes=self.content_bytes,
            oldest_created_at=float(created.min()) if created is not None and len(created) else None,
            newest_created_at=float(created.max()) if created is not None and len(created) else None,
        )

    # -- search ---------------------------------------------------------------------------------
    def _search(self, cmd: Search, ahead: ReadAhead | None = None) -> Any:
        plan = self._search_plan(cmd, ahead)
        result = self._search_run(plan)
        return result if plan.allowed is not None and not plan.allowed.any() else \
            self._with_graph(result, now=plan.now)

    def searches_inline(self, command: Any) -> bool:
        """Whether ``command`` is a search this scope answers as a plain read now
        (``ActorKind.inline_when``): a scope of fewer than ``BESIDE_MIN_MEMORIES`` (a
        larger one's searches run beside the actor), where no job is due at the
        search's time nor at the scope's clock (``handle`` plans one at both: the
        HNSW graph, a re-classification, names to embed; planning one is a change).
        Changes nothing the scope holds: it notes the search, so that ``handle``, if
        it is the next command handled, does not look for jobs again (nothing can
        make one due in between: only a handled command changes what they depend on).
        It also notes when no job can come due at any time (the usual state of a
        scope with no build, re-classification or name embedding wanted), so that
        the searches after it, until another command is handled, look for none.
        A search whose ``now`` is not a finite number is left to ``handle`` (which
        says why it refuses it)."""
        if type(command) is not Search or len(self.doc_of) >= BESIDE_MIN_MEMORIES:
            return False
        now = command.now
        if type(now) not in (float, int) or not math.isfinite(now):  # (a bool's type is bool)
            return False
        never = self._no_jobs_due
        if never is None:
            # whether a job is due only grows with the time (each waits for an interval to
            # pass): one not due at an infinite time is due at none, until a command changes
            # what they depend on
            never = self._no_jobs_due = not self._wants_jobs(math.inf)
        if not never and (self._wants_jobs(now) or self._wants_jobs(self.clock)):
            return False
        self._quiet_search = command
        return True

    def search_beside(self, command: Any) -> Beside | None:
        """A search to run beside the actor (``ActorKind.read_beside``): checked and
        its filter applied here, in the actor's turn, its jobs planned as ``handle``
        would plan them; the ranking, which only reads the scope, in ``run``. None for
        any other command, for a search ``handle`` refuses (it says why), and in a
        scope of fewer than ``BESIDE_MIN_MEMORIES``."""
        if type(command) is not Search or len(self.doc_of) < BESIDE_MIN_MEMORIES:
            return None
        self._no_jobs_due = None  # (it may plan jobs)
        try:
            plan = self._search_plan(command)
        except MnemexError:
            return None
        if self.rank_cache is None:  # (the searches beside the actor share it: made here, in its turn)
            self.rank_cache = RankCache()
        effects: tuple[Effect, ...] = ()
        for planned in (self._with_graph(None, now=plan.now), self._with_graph(None)):
            if planned is not None:
                effects += planned.effects
        # (a vector search reads the graph and rescores its best: about a millisecond)
        return Beside(partial(self._search_run, plan), effects, quick=command.mode == "vector")

    def read_ahead(self, commands: Sequence[Any]) -> None:
        """Searches about to be asked back to back (``ActorKind.read_ahead``): their
        hybrid ones get their query's expansion, the vector it searches with and that
        vector's scores (``Ranker.hybrid_vector``, ``VectorIndex.exact_scores_many``:
        one coarse pass over the int8 rows for all of them, which a pass alone spends
        most of its time reading), kept for ``handle`` to take when each comes, until
        a command other than a search is handled (it may change what they were made
        from) or the next read-ahead (none: nothing more is coming). Only the searches
        before any other command, ``READ_AHEAD_MAX`` at most, and nothing unless there
        are two such searches and the scope answers its searches inline with an exact
        index that takes the coarse pass (from ``_coarse.MIN_VALUES`` rows times
        dimensions); a search whose vector does not read as this scope's is left to
        ``handle`` (which says why it refuses it)."""
        self._ahead = None
        index = self.vectors
        if (len(commands) < 2 or index is None or len(self.doc_of) >= BESIDE_MIN_MEMORIES
                or not index.takes_coarse_pass or self.keyed.vector_search(index) is not index):
            return
        searches: list[tuple[Search, F32]] = []
        longest = self.settings.max_content_bytes // 4  # (a longer query may be refused: its own search)
        for command in commands:
            if type(command) is not Search or len(searches) == READ_AHEAD_MAX:
                break
            if (command.mode == "hybrid" and type(command.vector) is bytes and type(command.query) is str
                    and len(command.query) <= longest and command.embedder == self.embedder
                    and command.dim == self.dim):
                try:
                    searches.append((command, decode_vector(command.vector, command.dim)))
                except MnemexError:
                    continue
        if len(searches) < 2:
            return
        ranker = self._ranker()
        planned = [(command, *ranker.hybrid_vector(command.query, vector)) for command, vector in searches]
        made = index.exact_scores_many([vector for _, _, vector in planned])
        if made is not None:
            self._ahead = {id(command): (command, ReadAhead(expansion, vector, exact))
                           for (command, expansion, vector), exact in zip(planned, made, strict=True)}

    def _taken_ahead(self, command: Any) -> ReadAhead | None:
        """What ``read_ahead`` made for ``command`` (None: nothing), taken; everything it
        made is dropped when ``command`` is not a search."""
        ahead = self._ahead
        assert ahead is not None
        if type(command) is not Search:
            self._ahead = None
            return None
        found = ahead.pop(id(command), None)
        if not ahead:
            self._ahead = None
        return found[1] if found is not None and found[0] is command else None

    def _search_plan(self, cmd: Search, ahead: ReadAhead | None = None) -> _SearchPlan:
        """A search checked, with the memories it may find: what ranking it needs
        (``ahead``: what ``read_ahead`` made for it)."""
        settings = self.settings
        query = cmd.query
        if not isinstance(query, str):
            raise InvalidInput(f"query must be a string, got {type(query).__name__}", field="query")
        if len(query) > settings.max_content_bytes // 4 and \
                len(query.encode("utf-8", "surrogatepass")) > settings.max_content_bytes:
            raise TooLarge(f"query is {len(query.encode('utf-8', 'surrogatepass')):,} bytes; the limit is "
                           f"{settings.max_content_bytes:,} (config.memories.max_content_bytes)",
                           field="query")
        top_k = check_int(cmd.top_k, "top_k", 1, settings.max_top_k)
        mode = cmd.mode
        if mode not in ("keyword", "fulltext", "vector", "hybrid"):
            raise InvalidInput(f"mode is {mode!r}; use keyword, fulltext, vector or hybrid", field="mode")
        now = check_seconds(cmd.now, "now")
        min_score = cmd.min_score
        if min_score is not None and (isinstance(min_score, bool) or not isinstance(min_score, int | float)
                                      or not math.isfinite(min_score)):
            raise InvalidInput(f"min_score must be a finite number or null, got {min_score!r}",
                               field="min_score")
        query_vector: F32 | None = None
        if mode in ("vector", "hybrid"):
            if cmd.vector is None:
                raise InvalidInput(f"a {mode} search needs the query's vector (the ref embeds the query)",
                                   field="vector")
            self._check_embedder(cmd.embedder, cmd.dim, "the query")
            query_vector = decode_vector(cmd.vector, cmd.dim)
        if cmd.facets not in (None, "hits", "scope"):
            raise InvalidInput(f"facets is {cmd.facets!r}; use hits, scope or null", field="facets")
        allowed = self._allowed(cmd.filter, cmd.include_history, cmd.as_of, cmd.namespace, now)
        return _SearchPlan(query, query_vector, top_k, mode, now, min_score, cmd.facets, allowed,
                           ahead if mode == "hybrid" else None)

    def _ranker(self) -> Ranker:
        settings = self.settings
        cache = self.rank_cache
        if cache is None:  # (made in the actor's turn: a search beside it has its plan made there)
            cache = self.rank_cache = RankCache()
        return Ranker(self.keyword, self.bm25, self.entities, self.keyed.vector_search(self.vectors),
                      self.table, settings, self._record_at, self.graph if settings.expansion else None,
                      cache)

    def _search_run(self, plan: _SearchPlan) -> SearchResult:
        """The ranking of a planned search. It only reads the scope (the rank cache
        aside, which is safe to share), so searches may run side by side, beside the
        actor, while nothing changes the scope (see ``search_beside``)."""
        settings = self.settings
        query, query_vector, top_k, mode = plan.query, plan.vector, plan.top_k, plan.mode
        allowed, min_score = plan.allowed, plan.min_score
        if allowed is not None and not allowed.any():
            return SearchResult(hits=[], mode=mode, facets={} if plan.facets else None)
        ranker = self._ranker()
        app_name, user_id = self.app_name, self.user_id
        if mode == "vector":
            assert query_vector is not None
            hits = ranker.vector_hits(query_vector, top_k, allowed,
                                      settings.vector_min_score if min_score is None else min_score,
                                      app_name=app_name, user_id=user_id)
        else:
            # (only a hybrid ranking says which lists found a hit)
            ranked: Iterable[tuple[int, float, dict[str, float], tuple[str, ...]]]
            if mode == "hybrid":
                assert query_vector is not None
                ranked = ranker.hybrid_ranked(query, query_vector, top_k, allowed, plan.now, ahead=plan.ahead)
                if min_score is None:
                    min_score = settings.hybrid_min_score
            else:
                ranked = ((doc, score, scores, ()) for doc, score, scores in (
                    ranker.keyword_ranked(query, top_k, allowed) if mode == "keyword"
                    else ranker.fulltext_ranked(query, top_k, allowed)))
            # the cut reads the relevance: a ranking factor reorders hits, it never removes one
            record_at = self._record_at
            hits = [Hit(record_at(doc), rounded(score), scores, app_name, user_id, found)
                    for doc, score, scores, found in ranked
                    if min_score is None or scores.get("relevance", score) >= min_score]
            if len(hits) > top_k:
                hits = hits[:top_k]
        facets = None if plan.facets is None else (
            facets_of_hits(hits) if plan.facets == "hits" else facets_of_mask(self, allowed))
        return SearchResult(hits=hits, mode=mode, facets=facets)

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot(self) -> SnapshotData:
        """The memories as snapshot lines, with sidecars for a fast restart (see
        ``memories.snapshot``)."""
        return self._snapshot(lend=False)

    def final_snapshot(self) -> SnapshotData:
        """:meth:`snapshot` of a closing scope (the kernel's, see ``effects.Behaviour``):
        nothing changes its indexes any more, so the text indexes lend their own
        buffers to the sidecars instead of copies (at 1,000,000 memories the copies
        were 270 MB, held while the snapshot was written: the scope's peak)."""
        return self._snapshot(lend=True)

    def _snapshot(self, *, lend: bool) -> SnapshotData:
        self.snapshot_wanted = False
        stored = self.docs
        pairs: Collection[tuple[int, MemoryRecord]]
        if isinstance(stored, FileRecords):
            pairs = stored.view()
        else:
            pairs = [(doc, record) for doc, record in enumerate(stored) if record is not None]
        index = self.vectors
        # the text indexes' sidecars as chunks, written one after another and let go
        # as they are (joined, the BM25 one was a second copy of 20 MB at 100,000
        # memories; held, its arrays stayed while the vectors and records were written)
        sidecars: dict[str, Sidecar] = {
            "keyword": _drained(self.keyword.to_sidecar_chunks(lend=lend)),
            "bm25": _drained(self.bm25.to_sidecar_chunks(lend=lend)),
            "entities": self.entities.to_sidecar(), GRAPH_SIDECAR: self.graph.to_sidecar()} if pairs else {}
        extra = {
            "format": SNAPSHOT_FORMAT,
            "scope": [self.app_name, self.user_id],
            "embedder": self.embedder,
            "dim": self.dim,
            "docs": len(self.docs),
            "free": list(self.free),
            "count": len(pairs),
            "clock": self.clock,
        }
        if self.extractions.sessions:
            extra["cursors"] = self.extractions.to_extra()
        if self.documents:
            extra["documents"] = self.documents.to_extra()
        categories = self.categories.to_extra()
        if categories is not None:
            extra["categories"] = categories
        declared = self.graph.to_extra()
        if declared:
            extra["graph"] = declared
        return write_snapshot(pairs, index, sidecars, extra, graph=self.settings.hnsw_sidecar)

    @classmethod
    def restore(cls, key: Key, image: Image, settings: ScopeSettings) -> ScopeMemory:
        files = settings.record_files
        if files is not None and int(image.extra.get("docs", 0)) >= files.min_records:
            chunks = encoded_records(image)
            if chunks is not None:
                try:
                    return cls._restore(key, image, settings, chunks)
                except _NotStreamed as exc:
                    log.info("scope %s: records not read into their file as they are read (%s); reading "
                             "them whole", tuple(key), exc)
        return cls._restore(key, image, settings, None)

    @classmethod
    def _restore(cls, key: Key, image: Image, settings: ScopeSettings,
                 chunks: Iterator[tuple[list[int], list[msgspec.Raw]]] | None) -> ScopeMemory:
        """A scope restored from ``image``: its records read whole (``chunks`` None), or
        written to a file of records a chunk of its records sidecar at a time
        (``_restore_into_file``; _NotStreamed when that cannot be done)."""
        memory = cls(key, settings)
        extra = image.extra
        check_format(memory._name, extra)
        embedder, dim = extra.get("embedder"), int(extra.get("dim") or 0)
        memory.clock = float(extra.get("clock", 0.0))
        memory.free = [int(doc) for doc in extra.get("free", [])]
        memory.extractions.load_extra(extra.get("cursors") or {})
        memory.documents.load_extra(extra.get("documents") or [])
        memory.categories.load_extra(extra.get("categories"))
        memory.graph.load_extra(extra.get("graph") or {})
        vector_docs: list[int] = []
        if chunks is not None:
            memory._restore_into_file(image, chunks)
        else:
            memory.docs = [None] * int(extra.get("docs", 0))
            found = read_records(memory._name, image)
            docs, records, vector_docs = found.docs, found.records, found.vector_docs
            if docs and max(docs) >= len(memory.docs):
                memory.docs.extend([None] * (max(docs) + 1 - len(memory.docs)))
            for doc, record in zip(docs, records, strict=True):
                memory.docs[doc] = record
            memory.doc_of = {record.id: doc for doc, record in zip(docs, records, strict=True)}
            memory.documents.note_chunks(records)
            graph = image.sidecars.get(GRAPH_SIDECAR)
            memory.graph_restored = graph is not None and memory.graph.load_sidecar(graph, docs)
            if graph is not None and not memory.graph_restored:
                log.info("scope %s: entity graph sidecar not used (other settings, declarations or detection "
                         "version); finding the memories' mentions again", memory._name)
            try:
                memory._reindex_all(image.sidecars, docs)
            finally:
                memory.graph_restored = False
        # (the text indexes' and the graph's sidecars were read: what the indexes keep of
        # them is read again from the page cache when a search needs it)
        let_pages_go(*image.sidecars.values())
        if isinstance(embedder, str) and dim > 0:
            memory.embedder, memory.dim = embedder, dim
            memory.vectors = restore_vectors(memory._name, image, vector_docs, dim, settings.vector_params(),
                                             graph=settings.hnsw_sidecar)
            status = memory.vectors.sidecar_status
            if status in ("stale", "corrupt") or (status == "absent" and memory.vectors.wants_graph):
                log.info("scope %s: HNSW sidecar %s; the graph is rebuilt beside the actor on first use "
                         "(searches stay exact until then)", memory._name, status)
            configured = settings.embedder_name
            if configured is not None and (configured != embedder or settings.embedder_dim != dim):
                log.warning("scope %s holds %d vectors of embedder %r (dim %d) but this runtime embeds with "
                            "%r (dim %d): vector writes and searches are refused until "
                            "config.models.embedder "
                            "names the scope's model again", memory._name, len(vector_docs), embedder, dim,
                            configured, settings.embedder_dim)
        if len(memory.docs) >= memory._records_next:
            memory._records_to_file()
        return memory


def _drained(chunks: list[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """``chunks`` in order, each let go as the next is asked for (a snapshot reads a
    sidecar's chunks once: what is written is freed)."""
    chunks.reverse()
    while chunks:
        yield chunks.pop()
