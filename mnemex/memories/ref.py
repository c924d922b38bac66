"""Long-term memory on the runtime: the ``scope`` actor kind, the async ScopeRef that
``rt.scope(user_id=..., app_name=...)`` hands out, the embedding batcher, batched
access tracking, multi-scope search, sessions into memory, the classic two-call
``MemoryService`` and the ``search_memory_tool`` for models.

This side may read the wall clock and a random source: memory ids (sortable by
time) and timestamps are made here, texts are embedded here (in a worker thread,
texts of concurrent callers gathered into one call), and all of it travels
inside the command, so the actor stays deterministic and replay never needs the
model.

Access tracking: a search does not write a journal line per hit. Each runtime
keeps, per scope, a count of the ids its searches returned and sends one
``Touch`` command per scope every ``config.touch_interval`` seconds (and once at
shutdown), so at most one journal line per scope per interval, whatever the
search rate. A crash loses at most one interval of access counts.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
import numpy as np
import numpy.typing as npt
import trio

from mnemex.config import Config
from mnemex.conversations.protocol import ArchiveSession
from mnemex.conversations.ref import AGENT_KIND, AgentRef
from mnemex.errors import InvalidInput, MnemexError, TooLarge
from mnemex.kernel import ActorKind, ActorRef, Behaviour, Image, Key, Runtime
from mnemex.memories.behaviour import (
    ScopeMemory,
    ScopeSettings,
    encode_vector,
    is_scope_write,
    memory_text,
    scope_codec,
)
from mnemex.memories.protocol import (
    AddSession,
    CountMemories,
    Event,
    Forget,
    ForgetWhere,
    Forgotten,
    GetMemory,
    GetScopeStats,
    Hit,
    ListMemories,
    MemoryEntry,
    MemoryPage,
    MemoryRecord,
    NewMemory,
    Remember,
    Remembered,
    ScopeStats,
    Search,
    SearchMode,
    SearchRequest,
    SearchResponse,
    SearchResult,
    Session,
    SessionAdded,
    Touch,
    Updated,
    UpdateMemory,
)
from mnemex.memories.sessions import encode_id, event_text, session_memories
from mnemex.models.hashing import Embedder

__all__ = [
    "SCOPE_KIND",
    "SEARCH_MEMORY_TOOL",
    "EmbeddingBatcher",
    "MemoryService",
    "ScopeKind",
    "ScopeRef",
    "archive_session",
    "event_text",
    "execute_memory_tool",
    "flush_touches",
    "format_as_context",
    "new_memory_id",
    "scope_kind",
    "search_scopes",
]

log = logging.getLogger("mnemex.scope")

SCOPE_KIND: Final = "scope"
_MODES: Final = ("keyword", "fulltext", "vector", "hybrid")
_FIELDS: Final = frozenset({"author", "timestamp", "importance", "session_id", "actor_id", "categories",
                            "entities", "metadata", "source"})

F32 = npt.NDArray[np.float32]


# -- the kind ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScopeKind(ActorKind):
    """The ``scope`` actor kind, with the embedder its refs embed with."""

    embedder: Embedder | None = None
    settings: ScopeSettings | None = None


def scope_kind(config: Config | None = None, embedder: Embedder | None = None, *,
               name: str = SCOPE_KIND) -> ScopeKind:
    """The ``scope`` actor kind: ScopeMemory behaviours set up from ``config``, whose
    refs embed with ``embedder`` (default: the one ``config.embedder`` names). Pass
    ``open_runtime(config, kinds=[scope_kind(config, my_embedder)])`` to use your own;
    it takes the place of the built-in one."""
    cfg = config if config is not None else Config()
    if embedder is None:
        from mnemex.models.embedders import embedder_from_config

        embedder = embedder_from_config(cfg)
    if not isinstance(getattr(embedder, "name", None), str) or not isinstance(
            getattr(embedder, "dim", None), int):
        raise InvalidInput(f"{embedder!r} is not an Embedder (name: str, dim: int, embed(texts))",
                           field="embedder")
    settings = ScopeSettings.from_config(cfg, embedder)

    def create(key: Key) -> ScopeMemory:
        return ScopeMemory(key, settings)

    def restore(key: Key, image: Image) -> ScopeMemory:
        return ScopeMemory.restore(key, image, settings)

    def replay(behaviour: Behaviour, commands: Iterable[Any]) -> None:
        if not isinstance(behaviour, ScopeMemory):
            raise TypeError(f"the scope kind replays into a ScopeMemory, not {type(behaviour).__name__}")
        behaviour.replay(commands)

    return ScopeKind(name=name, create=create, restore=restore, encode=scope_codec.encode,
                     decode=scope_codec.decode, is_journaled=is_scope_write, replay=replay,
                     embedder=embedder, settings=settings)


# -- ids ----------------------------------------------------------------------------------
class _IdClock:
    """Monotonic ULID-like ids: 48 bits of milliseconds, then 80 bits that start random
    each millisecond and count up within it; 26 Crockford base-32 characters that
    sort by creation time (within one process, strictly)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._tail = 0

    def next(self, now: float, span: int = 1) -> str:
        """The next id; ``span`` > 1 reserves that many in a row (see ``id_at``)."""
        ms = max(0, int(now * 1000))
        with self._lock:
            if ms <= self._ms and self._tail + span < 1 << 80:
                ms = self._ms
                self._tail += 1
            else:  # a new millisecond (or this one is used up: borrow the next)
                ms = max(ms, self._ms + 1)
                self._tail = int.from_bytes(os.urandom(10), "big") >> 1
            value = (ms << 80) | self._tail
            self._ms = ms
            self._tail += span - 1
        return encode_id(value)


_ids = _IdClock()

# ids an archived session may take: far more than any session has events
SESSION_ID_BLOCK: Final = 1 << 32


def reserve_memory_ids(now: float, count: int = SESSION_ID_BLOCK) -> str:
    """The first of ``count`` consecutive new memory ids (``id_at(first, i)``)."""
    return _ids.next(now, count)


def new_memory_id(now: float | None = None) -> str:
    """A new memory id: 26 characters, sortable by creation time."""
    return _ids.next(time.time() if now is None else now)


# -- embedding beside the actors ------------------------------------------------------------
class _Request:
    __slots__ = ("done", "error", "offset", "parts", "texts")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.offset = 0
        self.parts: list[F32] = []
        self.done = trio.Event()
        self.error: BaseException | None = None


class EmbeddingBatcher:
    """Embeds texts in a worker thread, one call at a time, gathering the texts of
    every caller waiting into one ``embed`` call of up to ``batch_size`` texts (a
    larger request is cut into such calls, interleaved fairly with others).

    A request the embedder is measured to finish within ``inline_budget`` seconds
    (a short query to the hashing embedder: tens of microseconds) is embedded at
    once in the calling task instead: less than the thread hop would cost. A model
    (milliseconds per text) always goes to the thread."""

    inline_budget: Final = 0.0002

    def __init__(self, embedder: Embedder, batch_size: int) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self._queue: list[_Request] = []
        self._wake = trio.Event()
        # measured seconds per character of text, for bulk calls and for small ones
        # (queries) apart: a bulk call timed while the actors index beside it reads
        # several times slower than a lone query is
        self._per_char = _Rate()
        self._per_char_small = _Rate()
        self.calls = 0
        self.texts = 0

    _SMALL: Final = 4

    def _observe(self, texts: Sequence[str], seconds: float) -> None:
        chars = max(1, sum(len(text) for text in texts))
        rate = seconds / chars
        if len(texts) <= self._SMALL:
            self._per_char_small.observe(rate)
        else:
            self._per_char.observe(rate)

    async def embed(self, texts: Sequence[str]) -> F32:
        """Vectors of ``texts`` (float32, one unit row each)."""
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        per_char = self._per_char_small.value if len(texts) <= self._SMALL else None
        if per_char is None:
            per_char = self._per_char.value
        if per_char is not None and not self._queue and \
                per_char * sum(len(text) for text in texts) <= self.inline_budget:
            started = time.perf_counter()
            matrix = _embed_checked(self.embedder, list(texts))
            self._observe(texts, time.perf_counter() - started)
            self.calls += 1
            self.texts += len(texts)
            await trio.lowlevel.checkpoint()
            return matrix
        request = _Request(list(texts))
        self._queue.append(request)
        self._wake.set()
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.parts[0] if len(request.parts) == 1 else np.concatenate(request.parts)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve embedding requests forever (a task of the runtime's nursery)."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._queue:
                await self._one_call()

    async def _one_call(self) -> None:
        room = self.batch_size
        taken: list[tuple[_Request, int]] = []
        texts: list[str] = []
        for request in self._queue:
            if room <= 0:
                break
            count = min(room, len(request.texts) - request.offset)
            texts.extend(request.texts[request.offset:request.offset + count])
            taken.append((request, count))
            room -= count
        embedder = self.embedder
        try:
            matrix, seconds = await trio.to_thread.run_sync(_embed_timed, embedder, texts)
            self._observe(texts, seconds)
        except Exception as exc:
            error = exc if isinstance(exc, MnemexError) else MnemexError(
                f"embedder {embedder.name!r} failed on {len(texts)} texts: {exc!r}")
            if error is not exc:
                error.__cause__ = exc
            for request, _ in taken:
                request.error = error
                self._finish(request)
            return
        self.calls += 1
        self.texts += len(texts)
        row = 0
        for request, count in taken:
            request.parts.append(matrix[row:row + count])
            row += count
            request.offset += count
            if request.offset >= len(request.texts):
                self._finish(request)

    def _finish(self, request: _Request) -> None:
        self._queue.remove(request)
        request.done.set()


class _Rate:
    """Seconds per character, as the median of the last few calls measured. Not a
    mean: on a busy machine one call in a few dozen is preempted and reads ten or a
    hundred times slower, and a mean would send the next queries through the thread
    hop (measured: 16% of them with one core kept busy beside); the first call of a
    cold embedder is slow the same way. A real change shows after three calls."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: deque[float] = deque(maxlen=5)

    def observe(self, rate: float) -> None:
        self._last.append(rate)

    @property
    def value(self) -> float | None:
        if not self._last:
            return None
        return sorted(self._last)[(len(self._last) - 1) // 2]


def _embed_timed(embedder: Embedder, texts: list[str]) -> tuple[F32, float]:
    started = time.perf_counter()
    matrix = _embed_checked(embedder, texts)
    return matrix, time.perf_counter() - started


def _embed_checked(embedder: Embedder, texts: list[str]) -> F32:
    matrix = np.asarray(embedder.embed(texts), dtype=np.float32)
    if matrix.shape != (len(texts), embedder.dim):
        raise MnemexError(f"embedder {embedder.name!r} returned shape {matrix.shape} for "
                          f"{len(texts)} texts of dim {embedder.dim}")
    return matrix


class _ScopeServices:
    """What one runtime keeps for its scopes: the batcher and the pending touches."""

    def __init__(self, runtime: Runtime, kind: ScopeKind) -> None:
        assert kind.embedder is not None
        self.kind = kind
        self.embedder = kind.embedder
        self.batcher = EmbeddingBatcher(kind.embedder, runtime.config.embed_batch_size)
        self.touches: dict[Key, dict[str, int]] = {}
        self.interval = runtime.config.touch_interval

    def touch(self, key: Key, hits: Iterable[Hit]) -> None:
        pending = self.touches.get(key)
        if pending is None:
            pending = self.touches[key] = {}
        for hit in hits:
            memory_id = hit.memory.id
            pending[memory_id] = pending.get(memory_id, 0) + 1

    async def flush(self, runtime: Runtime) -> int:
        touches, self.touches = self.touches, {}
        now = time.time()
        sent = 0
        for key, counts in touches.items():
            if not counts:
                continue
            command = Touch(ids=list(counts), counts=list(counts.values()), now=now)
            try:
                await runtime.tell(self.kind.name, key, command)
                sent += 1
            except MnemexError as exc:
                log.debug("access counts of scope %r not sent: %s", key, exc)
        return sent

    async def run_flusher(self, runtime: Runtime) -> None:
        while True:
            await trio.sleep(self.interval)
            await self.flush(runtime)


_services: weakref.WeakKeyDictionary[Runtime, dict[str, _ScopeServices]] = weakref.WeakKeyDictionary()


def _services_for(runtime: Runtime, kind_name: str) -> _ScopeServices:
    per_kind = _services.setdefault(runtime, {})
    services = per_kind.get(kind_name)
    if services is None:
        kind = runtime.kinds.get(kind_name)
        if not isinstance(kind, ScopeKind) or kind.embedder is None:
            raise InvalidInput(f"actor kind {kind_name!r} is not a scope kind (make it with scope_kind())",
                               field="kind")
        services = per_kind[kind_name] = _ScopeServices(runtime, kind)
        nursery = runtime._nursery
        nursery.start_soon(services.batcher.run, name=f"mnemex {kind_name} embedding")
        nursery.start_soon(services.run_flusher, runtime, name=f"mnemex {kind_name} access counts")
    return services


async def flush_touches(runtime: Runtime) -> int:
    """Send the access counts gathered so far now (the runtime does it every
    ``config.touch_interval`` and at shutdown); returns how many scopes got one."""
    sent = 0
    for services in list(_services.get(runtime, {}).values()):
        sent += await services.flush(runtime)
    return sent


# -- conversions --------------------------------------------------------------------------
def _seconds(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidInput(f"{what} {value!r} is not an ISO 8601 time", field=what) from exc
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{what} must be seconds since the epoch, a datetime or an ISO 8601 string, "
                           f"got {value!r}", field=what)
    return float(value)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def format_as_context(hits: Iterable[Hit | MemoryRecord]) -> str:
    """Memories as a block for a model's prompt: ``[User Memory]`` then one ``- ``
    line per memory (its content on one line). Empty string when there are none."""
    lines = [f"- {memory_text(hit.memory if isinstance(hit, Hit) else hit)}" for hit in hits]
    return "\n".join(["[User Memory]", *lines]) if lines else ""


# -- the ref --------------------------------------------------------------------------------
class ScopeRef:
    """The long-term memory of one user in one app, as the runtime serves it. Cheap to
    make; any number of refs to one (app_name, user_id) reach the same actor."""

    __slots__ = ("_ref", "_runtime", "_services", "app_name", "user_id")

    def __init__(self, runtime: Runtime, *, user_id: str, app_name: str, kind: str = SCOPE_KIND) -> None:
        for what, value in (("user_id", user_id), ("app_name", app_name)):
            if not isinstance(value, str) or not value:
                raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
        self._runtime = runtime
        self._ref: ActorRef = runtime.ref(kind, (app_name, user_id))
        self._services = _services_for(runtime, kind)
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
        return self._services.embedder

    @property
    def _config(self) -> Config:
        return self._runtime.config

    async def _embed(self, texts: Sequence[str]) -> list[bytes]:
        matrix = await self._services.batcher.embed(texts)
        return [encode_vector(row) for row in matrix]

    def _new_memory(self, content: Any, fields: Mapping[str, Any], now: float) -> NewMemory:
        unknown = set(fields) - _FIELDS - {"id"}
        if unknown:
            raise InvalidInput(f"unknown memory field(s) {', '.join(sorted(unknown))}; the fields are "
                               f"{', '.join(sorted(_FIELDS))}", field=sorted(unknown)[0])
        if not isinstance(content, str):
            raise InvalidInput(f"memory content must be a string, got {type(content).__name__}",
                               field="content")
        limit = self._config.max_content_bytes
        if len(content) > limit // 4 and len(content.encode("utf-8", "surrogatepass")) > limit:
            raise TooLarge(f"memory content is {len(content.encode('utf-8', 'surrogatepass')):,} bytes; "
                           f"the limit is {limit:,} (config.max_content_bytes)", field="content")
        values = {name: value for name, value in fields.items() if value is not None}
        if "timestamp" in values:
            values["timestamp"] = _seconds(values["timestamp"], "timestamp")
        for name in ("categories", "entities"):
            if name in values and isinstance(values[name], list):
                values[name] = tuple(values[name])
        memory_id = values.pop("id", None) or new_memory_id(now)
        try:
            return NewMemory(id=memory_id, content=content, **values)
        except TypeError as exc:
            raise InvalidInput(f"bad memory fields: {exc}") from exc

    async def _store(self, memories: list[NewMemory]) -> list[str]:
        now = time.time()
        embedder = self.embedder
        ids: list[str] = []
        step = self._config.max_memories_per_command
        for start in range(0, len(memories), step):
            chunk = memories[start:start + step]
            vectors = await self._embed([memory.content for memory in chunk])
            with_vectors = [msgspec.structs.replace(memory, vector=vector)
                            for memory, vector in zip(chunk, vectors, strict=True)]
            reply: Remembered = await self._ref.ask(Remember(memories=with_vectors, embedder=embedder.name,
                                                             dim=embedder.dim, now=now))
            ids.extend(reply.ids)
        return ids

    # -- writing ----------------------------------------------------------------------------
    async def remember(self, content: str, **fields: Any) -> str:
        """Store a memory; returns its id (the existing one when this exact content is
        stored already). Fields: author, timestamp (when it happened: seconds, a
        datetime or ISO 8601), importance (0..1), session_id, actor_id, categories,
        entities, metadata (a JSON object), source. Raises TooLarge past
        ``config.max_content_bytes``, InvalidInput for a bad field."""
        ids = await self._store([self._new_memory(content, fields, time.time())])
        return ids[0]

    async def remember_many(self, memories: Iterable[str | Mapping[str, Any]]) -> list[str]:
        """Store several memories (strings, or dicts with ``content`` and any field of
        ``remember``), all or none per ``config.max_memories_per_command``; returns
        their ids in order."""
        now = time.time()
        batch: list[NewMemory] = []
        for index, item in enumerate(memories):
            if isinstance(item, str):
                batch.append(self._new_memory(item, {}, now))
            elif isinstance(item, Mapping):
                fields = dict(item)
                if "content" not in fields:
                    raise InvalidInput(f"memory {index} has no content", field=f"memories[{index}].content")
                batch.append(self._new_memory(fields.pop("content"), fields, now))
            else:
                raise InvalidInput(f"memory {index} must be a string or a dict, got {type(item).__name__}",
                                   field=f"memories[{index}]")
        if not batch:
            return []
        return await self._store(batch)

    async def update(self, memory_id: str, **fields: Any) -> MemoryRecord:
        """Change some fields of a memory (``content`` too: it is re-embedded and
        re-indexed); returns the updated memory. NotFound for an unknown id."""
        unknown = set(fields) - _FIELDS - {"content"}
        if unknown:
            raise InvalidInput(f"unknown memory field(s) {', '.join(sorted(unknown))}",
                               field=sorted(unknown)[0])
        values = dict(fields)
        if "timestamp" in values:
            values["timestamp"] = _seconds(values["timestamp"], "timestamp")
        for name in ("categories", "entities"):
            if isinstance(values.get(name), list):
                values[name] = tuple(values[name])
        embedder = self.embedder
        if "content" in values:
            content = values["content"]
            if not isinstance(content, str):
                raise InvalidInput("memory content must be a string", field="content")
            values["vector"] = (await self._embed([content]))[0]
            values["embedder"], values["dim"] = embedder.name, embedder.dim
        try:
            command = UpdateMemory(id=memory_id, now=time.time(), **values)
        except TypeError as exc:
            raise InvalidInput(f"bad memory fields: {exc}") from exc
        reply: Updated = await self._ref.ask(command)
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
        scope (author, timestamp and session id kept; a text past the content limit
        is cut at whitespace into several memories). Adding a session again adds
        nothing twice."""
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
            seconds = _seconds(event.timestamp, f"events[{index}].timestamp") if event.timestamp else None
            events.append(event if seconds is None or seconds == event.timestamp
                          else msgspec.structs.replace(event, timestamp=seconds))
        now = time.time()
        memories = session_memories(msgspec.structs.replace(session, events=events),
                                    reserve_memory_ids(now), self._config.max_content_bytes)
        embedder = self.embedder
        ids: list[str] = []
        added = 0
        step = self._config.max_memories_per_command
        for start in range(0, max(1, len(memories)), step):
            chunk = memories[start:start + step]
            vectors = await self._embed([memory.content for memory in chunk])
            with_vectors = [msgspec.structs.replace(memory, vector=vector)
                            for memory, vector in zip(chunk, vectors, strict=True)]
            reply: SessionAdded = await self._ref.ask(AddSession(
                session_id=session.id, memories=with_vectors, embedder=embedder.name, dim=embedder.dim,
                now=now))
            ids.extend(reply.ids)
            added += reply.added
        return SessionAdded(session_id=session.id, ids=ids, added=added)

    # -- reading ----------------------------------------------------------------------------
    async def get(self, memory_id: str) -> MemoryRecord:
        """The memory with this id; NotFound when this scope has none."""
        record: MemoryRecord = await self._ref.ask(GetMemory(id=memory_id))
        return record

    async def count(self, filter: Mapping[str, Any] | None = None) -> int:
        """How many memories the scope holds (that the filter matches)."""
        reply: int = await self._ref.ask(CountMemories(filter=dict(filter) if filter else None))
        return reply

    async def memories(self, filter: Mapping[str, Any] | None = None, limit: int | None = 100,
                       offset: int = 0) -> MemoryPage:
        """A page of memories in creation (id) order, optionally filtered."""
        reply: MemoryPage = await self._ref.ask(ListMemories(filter=dict(filter) if filter else None,
                                                             limit=limit, offset=offset))
        return reply

    async def stats(self) -> ScopeStats:
        reply: ScopeStats = await self._ref.ask(GetScopeStats(now=time.time()))
        return reply

    async def search(self, query: str, top_k: int = 10, mode: SearchMode | None = None,
                     min_score: float | None = None,
                     filter: Mapping[str, Any] | None = None) -> SearchResult:
        """Search this scope: ``mode`` keyword, fulltext, vector or hybrid (default
        ``config.search_mode``); ``min_score`` None is the mode's default (0.7 for
        vector, see config.vector_min_score); ``filter`` narrows inside the search.
        The hits' access counts are updated in the background (batched)."""
        command = await _search_command(self._services, self._config, query, top_k, mode=mode,
                                        min_score=min_score, filter=filter)
        result: SearchResult = await self._ref.ask(command)
        if result.hits:
            self._services.touch(self._ref.key, result.hits)
        return result

    async def recall(self, query: str, top_k: int = 5, *, mode: SearchMode | None = None,
                     min_score: float | None = None, filter: Mapping[str, Any] | None = None) -> str:
        """The memories relevant to ``query``, formatted for a model's context (see
        format_as_context); empty when nothing matches."""
        result = await self.search(query, top_k, mode, min_score, filter)
        return format_as_context(result.hits)


async def _search_command(services: _ScopeServices, config: Config, query: Any, top_k: int, *,
                          mode: SearchMode | None, min_score: float | None,
                          filter: Mapping[str, Any] | None) -> Search:
    if not isinstance(query, str):
        raise InvalidInput(f"query must be a string, got {type(query).__name__}", field="query")
    chosen = mode if mode is not None else config.search_mode
    if chosen not in _MODES:
        raise InvalidInput(f"mode is {chosen!r}; use keyword, fulltext, vector or hybrid", field="mode")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= config.max_top_k:
        raise InvalidInput(f"top_k must be an integer in 1..{config.max_top_k:,}, got {top_k!r}",
                           field="top_k")
    vector: bytes | None = None
    embedder = services.embedder
    if chosen in ("vector", "hybrid"):
        vector = encode_vector((await services.batcher.embed([query]))[0])
    return Search(query=query, vector=vector, embedder=embedder.name if vector is not None else None,
                  dim=embedder.dim if vector is not None else 0, top_k=top_k, mode=chosen,
                  min_score=min_score, filter=dict(filter) if filter else None, now=time.time())


async def search_scopes(runtime: Runtime, query: str, scopes: Iterable[tuple[str, str]], top_k: int = 10, *,
                        mode: SearchMode | None = None, min_score: float | None = None,
                        filter: Mapping[str, Any] | None = None,
                        kind: str = SCOPE_KIND) -> SearchResult:
    """Search several scopes (``(app_name, user_id)`` pairs) at once: the query is
    embedded once, every scope is asked concurrently, and the hits are merged into
    one ranking (scores are in 0..1 in every scope; ties: newest first). Each hit
    names its scope. With ``config.fusion = "rrf"`` hybrid scores are rank-based and
    compare less well across scopes than the default weighted fusion."""
    keys = list(dict.fromkeys((app, user) for app, user in scopes))
    for app, user in keys:
        if not isinstance(app, str) or not app or not isinstance(user, str) or not user:
            raise InvalidInput(f"a scope is (app_name, user_id), both non-empty strings; got {(app, user)!r}",
                               field="scopes")
    services = _services_for(runtime, kind)
    command = await _search_command(services, runtime.config, query, top_k, mode=mode, min_score=min_score,
                                    filter=filter)
    if not keys:
        return SearchResult(hits=[], mode=command.mode)
    results: dict[Key, SearchResult] = {}

    async def ask(key: Key) -> None:
        results[key] = await runtime.ask(kind, key, command)

    async with trio.open_nursery() as nursery:
        for key in keys:
            nursery.start_soon(ask, key)
    merged = [hit for key in keys for hit in results[key].hits]
    merged.sort(key=lambda hit: (-hit.score, -hit.memory.timestamp, hit.app_name, hit.user_id, hit.memory.id))
    merged = merged[:top_k]
    for key in keys:
        services.touch(key, (hit for hit in merged if (hit.app_name, hit.user_id) == key))
    return SearchResult(hits=merged, mode=command.mode)


# -- sessions of agents into memory --------------------------------------------------------------
async def archive_session(runtime: Runtime, agent_name: str, session_id: str, *, user_id: str, app_name: str,
                          agent_kind: str = AGENT_KIND, scope_kind_name: str = SCOPE_KIND) -> SessionAdded:
    """Move one session of an agent's short-term memory into the long-term memory of
    (app_name, user_id), actor to actor: the agent sends the session's user and
    assistant messages with text (author: the message's name or role) to the scope,
    which embeds them beside itself and stores them; the answer comes from the
    scope. The agent keeps the session. Adding it again adds nothing twice.
    NotFound when the agent has no such session (or it has no text)."""
    for value, what in ((user_id, "user_id"), (app_name, "app_name")):
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
    now = time.time()
    agent = AgentRef(runtime, agent_name, kind=agent_kind)
    reply: SessionAdded = await agent.ref.ask(ArchiveSession(
        session_id=session_id, app_name=app_name, user_id=user_id, scope_kind=scope_kind_name,
        first_id=reserve_memory_ids(now), now=now))
    return reply


# -- the classic two-call interface ------------------------------------------------------------
class MemoryService:
    """The classic memory service: ``add_session(session)`` and
    ``search(SearchRequest(query=..., user_id=..., app_name=...))`` with the classic
    matching (memories sharing a word with the query, most words matched first,
    then the most recent). Users and apps are isolated completely: each
    (app_name, user_id) is its own scope actor."""

    def __init__(self, runtime: Runtime, *, kind: str = SCOPE_KIND) -> None:
        self._runtime = runtime
        self._kind = kind

    def _scope(self, app_name: str, user_id: str) -> ScopeRef:
        return ScopeRef(self._runtime, user_id=user_id, app_name=app_name, kind=self._kind)

    async def add_session(self, session: Session) -> SessionAdded:
        if not isinstance(session, Session):
            raise InvalidInput(f"add_session takes a mnemex.Session, got {type(session).__name__}",
                               field="session")
        return await self._scope(session.app_name, session.user_id).add_session(session)

    async def add_session_to_memory(self, session: Session) -> SessionAdded:
        """The same as add_session (the name some hosts call)."""
        return await self.add_session(session)

    async def search(self, request: SearchRequest) -> SearchResponse:
        if not isinstance(request, SearchRequest):
            raise InvalidInput(f"search takes a mnemex.SearchRequest, got {type(request).__name__}",
                               field="request")
        top_k = min(request.top_k, self._runtime.config.max_top_k)
        result = await self._scope(request.app_name, request.user_id).search(request.query, top_k,
                                                                             mode="keyword", min_score=0.0)
        return SearchResponse(memories=[
            MemoryEntry(content=hit.memory.content, author=hit.memory.author,
                        timestamp=_iso(hit.memory.timestamp), id=hit.memory.id)
            for hit in result.hits])

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchResponse:
        """The same as search (the keyword form some hosts call)."""
        return await self.search(SearchRequest(query=query, user_id=user_id, app_name=app_name))


# -- a tool for models ---------------------------------------------------------------------------
SEARCH_MEMORY_TOOL: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": "search_memory_tool",
        "description": (
            "Search and recall relevant memories about the user. Use this tool when you need to "
            "personalize your response based on user preferences, recall something the user mentioned "
            "before, or reference past interactions."),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string",
                          "description": "What to look for in the user's memories, in plain words."},
                "top_k": {"type": "integer", "minimum": 1, "maximum": 50,
                          "description": "How many memories to return (default 5)."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}


class _ToolArguments(msgspec.Struct, forbid_unknown_fields=True):
    query: str
    top_k: int = 5


_decode_arguments = msgspec.json.Decoder(_ToolArguments)


async def execute_memory_tool(scope: ScopeRef, tool_call: Mapping[str, Any] | str, *,
                              mode: SearchMode | None = None) -> dict[str, Any]:
    """Run a model's call of ``search_memory_tool`` against ``scope``. ``tool_call`` is
    the call as the model returned it (``{"id", "function": {"name", "arguments"}}``)
    or just its arguments (a JSON string or a dict). Returns the tool message to
    append to the conversation: ``{"role": "tool", "tool_call_id", "content"}``,
    content as format_as_context gives it (or a line saying nothing was found)."""
    call_id: str | None = None
    arguments: Any = tool_call
    if isinstance(tool_call, Mapping) and "function" in tool_call:
        call_id = tool_call.get("id")
        function = tool_call.get("function") or {}
        name = function.get("name") if isinstance(function, Mapping) else None
        if name != "search_memory_tool":
            raise InvalidInput(f"tool call is for {name!r}, not search_memory_tool", field="function.name")
        arguments = function.get("arguments") if isinstance(function, Mapping) else None
    try:
        if isinstance(arguments, str | bytes):
            parsed = _decode_arguments.decode(arguments)
        elif isinstance(arguments, Mapping):
            parsed = msgspec.convert(dict(arguments), _ToolArguments)
        else:
            raise InvalidInput(f"tool arguments must be a JSON object, got {type(arguments).__name__}",
                               field="arguments")
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidInput(f"search_memory_tool arguments: {exc}", field="arguments") from exc
    top_k = max(1, min(parsed.top_k, 50))
    result = await scope.search(parsed.query, top_k, mode=mode)
    content = format_as_context(result.hits) or "[User Memory]\n(nothing relevant is remembered)"
    message: dict[str, Any] = {"role": "tool", "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message
