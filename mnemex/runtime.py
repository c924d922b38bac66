"""The runtime users open: the kernel with mnemex's own actor kinds, and the services
the refs share (the embedding batcher, the id clock, access counts, TTL sweeps).

``open_runtime`` builds the kernel and owns everything around it: no module-level
state, no task started by a ref. ``MnemexRuntime`` holds the kernel (it does not
extend it) and hands out the refs; ``mnemex.Client`` (client.py) runs one on a
background thread for hosts that are not trio.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, Literal

import trio

from mnemex._ids import IdClock
from mnemex.checkpoints.kind import CHECKPOINT_KIND, checkpoint_kind
from mnemex.checkpoints.ref import Checkpoints
from mnemex.config import DEFAULT, Config, UseDefault
from mnemex.conversations.kind import AGENT_KIND, agent_kind, sweep_expired_sessions
from mnemex.conversations.protocol import Appended, Policy
from mnemex.conversations.ref import AgentRef, AgentServices
from mnemex.effects import Key
from mnemex.errors import ActorClosed, ActorCrashed, InvalidInput, MnemexError, Timeout
from mnemex.kernel import (
    ActorKind,
    ActorRef,
    Runtime,
    RuntimeStats,
    ShutdownReport,
    Subscription,
    open_actor_runtime,
)
from mnemex.knowledge.ref import (
    KnowledgeServices,
    agent_reader,
    default_extractor,
    extract_session,
    retry_dead_letter,
)
from mnemex.memories.extraction import ExtractSession, ReadMessages
from mnemex.memories.kind import SCOPE_KIND, ScopeKind, scope_kind
from mnemex.memories.protocol import Extracted, GetGraphStats, SearchMode, SearchResult, SessionAdded
from mnemex.memories.ref import (
    ScopeRef,
    ScopeServices,
    archive_session,
    export_scopes,
    import_lines,
    remember_in_scopes,
    search_scopes,
)
from mnemex.memories.transfer import ExportHeader, ImportReport
from mnemex.models.batcher import EmbeddingBatcher
from mnemex.models.graph_helpers import GraphHelpers
from mnemex.models.rerankers import reranker_from_config
from mnemex.persistence import DataDir, Ownership, RecordFiles, RowFiles, Storage, find_actors
from mnemex.state.kind import STATE_KIND, state_kind
from mnemex.state.ref import StateRef

if TYPE_CHECKING:
    from mnemex.persistence.postgres import PostgresStorage

__all__ = ["MnemexRuntime", "open_runtime", "shared_storage"]

log = logging.getLogger("mnemex.runtime")


class MnemexRuntime:
    """The runtime handed out by ``open_runtime``: refs to agents and scopes, search
    across scopes, archiving, and the kernel's ask/tell/ref underneath."""

    def __init__(self, kernel: Runtime, scopes: Mapping[str, ScopeServices],
                 agents: Mapping[str, AgentServices], knowledge: Mapping[str, KnowledgeServices] | None = None
                 ) -> None:
        self._kernel = kernel
        # the actors a storage other than the data directory holds, by kind (None: find_actors)
        self._stored_keys: Callable[[str], list[Key]] | None = None
        self._knowledge = knowledge.get(SCOPE_KIND) if knowledge else None
        self._scopes = dict(scopes)
        self._agents = dict(agents)
        # automatic extraction: (agent, session or None for every session) -> (app_name, user_id)
        self._auto: dict[tuple[str, str | None], _Target] = {}
        # what was appended to those sessions since their scope was last told, by (agent, session)
        self._waiting: dict[tuple[str, str], _Waiting] = {}
        for auto in self.config.knowledge.auto:
            self._auto[(auto.agent, auto.session_id)] = _Target(auto.app_name, auto.user_id, auto.turns,
                                                                auto.tokens)
        if self._auto:
            self._check_retained()
        self._hook_appends()

    @property
    def kernel(self) -> Runtime:
        """The actor kernel underneath (``mnemex.lowlevel``: for actor-kind authors)."""
        return self._kernel

    @property
    def config(self) -> Config:
        return self._kernel.config

    @property
    def kinds(self) -> Mapping[str, ActorKind]:
        """Every registered actor kind, by name."""
        return self._kernel.kinds

    # -- short-term memory
    def agent(self, name: str, *, policy: Policy | UseDefault | None = DEFAULT,
              ttl: float | UseDefault | None = DEFAULT) -> AgentRef:
        """The short-term memory of the agent ``name`` (spawned on first use).

        ``policy`` (MaxMessages, TokenBudget, KeepAll, Stateless) and ``ttl`` (seconds a session
        may stay idle) are journaled with the agent on first use, so they survive
        restarts. ``DEFAULT`` leaves what the agent has (the configured default for a
        new one); ``policy=None`` returns it to the configured default and ``ttl=None``
        keeps its sessions forever.
        """
        return AgentRef(self._agent_services(AGENT_KIND), name, policy=policy, ttl=ttl)

    # -- key-value state
    def state(self, *, app_name: str, user_id: str | None = None) -> StateRef:
        """The key-value state of ``app_name`` (``user_id`` None) or of one user in it:
        JSON values by key, journaled, read without replaying anything."""
        return StateRef(self._kernel, app_name=app_name, user_id=user_id)

    # -- graph checkpoints
    def checkpoints(self, kind: str = CHECKPOINT_KIND) -> Checkpoints:
        """The checkpoints of graph threads (one actor per thread id; see
        ``mnemex.checkpoints``): what ``mnemex.integrations.langgraph.MnemexSaver`` keeps."""
        if kind not in self._kernel.kinds:
            raise InvalidInput(f"actor kind {kind!r} is not registered", field="kind")
        return Checkpoints(self._kernel, kind)

    # -- long-term memory
    def scope(self, *, user_id: str, app_name: str) -> ScopeRef:
        """The long-term memory of ``user_id`` in ``app_name`` (spawned on first use)."""
        return ScopeRef(self.scope_services(), user_id=user_id, app_name=app_name)

    async def search(self, query: str, scopes: Iterable[tuple[str, str]], top_k: int = 10, *,
                     mode: SearchMode | UseDefault = DEFAULT, min_score: float | UseDefault | None = DEFAULT,
                     filter: Mapping[str, Any] | None = None, include_history: bool = False,
                     as_of: float | str | datetime | None = None) -> SearchResult:
        """Search several scopes, ``[(app_name, user_id), ...]``, at once and merge the
        hits into one ranking (scores are comparable across scopes; each hit names
        its scope). ``include_history`` / ``as_of`` as for ``ScopeRef.search``."""
        return await search_scopes(self.scope_services(), query, scopes, top_k, mode=mode,
                                   min_score=min_score, filter=filter, include_history=include_history,
                                   as_of=as_of)

    async def remember_many(self, items: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[str]:
        """Store memories in several scopes at once, ``[(app_name, user_id, {"content":
        ..., any field of remember}), ...]``, all or none: every memory is checked
        before any is stored (InvalidInput naming ``memories[i]``), and a scope that
        fails to store undoes what the others newly stored. Ids in the order given."""
        return await remember_in_scopes(self.scope_services(), items)

    async def archive(self, agent_name: str, session_id: str, *, user_id: str, app_name: str) -> SessionAdded:
        """Move one session of agent ``agent_name`` into the long-term memory of
        (app_name, user_id), one memory of kind ``message`` per message with text,
        its author and role kept; an assistant's echo of what the user said is
        stored merged into the user's statement (``config.memories.
        archive_merge_echoes``). Adding it again adds nothing twice."""
        return await archive_session(self.scope_services(), AGENT_KIND, agent_name, session_id,
                                     user_id=user_id, app_name=app_name)

    # -- moving memories between data directories
    def scope_keys(self, kind: str = SCOPE_KIND) -> list[tuple[str, str]]:
        """Every scope of this runtime as ``(app_name, user_id)``, sorted: those in the
        data directory and those loaded now."""
        self.scope_services(kind)  # a scope kind, or InvalidInput
        keys = {key for _, key in self.live_keys(kind)}
        data_dir = self.config.data_dir
        if self._stored_keys is not None:
            keys.update(self._stored_keys(kind))
        elif data_dir is not None:
            keys.update(location.key for location in find_actors(data_dir) if location.kind == kind)
        return sorted((key[0], key[1]) for key in keys if len(key) == 2)

    async def export_data(self, out: IO[str], scopes: Iterable[tuple[str, str]] | None = None, *,
                          include_vectors: bool = True) -> ExportHeader:
        """Write every memory of ``scopes`` (``[(app_name, user_id), ...]``; None: every
        scope, see ``scope_keys``) to ``out`` as JSONL: a header line, then one line per
        memory with its scope, its whole record (id, times, status, history, entities,
        links) and, with ``include_vectors``, its vector and embedder (see
        ``mnemex.memories.transfer``). Returns the header (the counts written)."""
        chosen = self.scope_keys() if scopes is None else list(scopes)
        return await export_scopes(self.scope_services(), out, chosen, include_vectors=include_vectors)

    async def import_data(self, lines: Iterable[str | bytes]) -> ImportReport:
        """Read an export (``export_data``'s lines, a file opened for reading) into this
        runtime's scopes, ids, statuses and history preserved. Every line is checked
        before anything is stored (InvalidInput naming the line); memories whose id or
        content a scope holds already are skipped, so importing again adds nothing;
        those exported without a vector or by another embedder are embedded again.
        Returns the counts."""
        return await import_lines(self.scope_services(), lines)

    # -- knowledge
    async def extract(self, agent_name: str, session_id: str, *, user_id: str, app_name: str,
                      if_needed: bool = False) -> Extracted:
        """Extract facts from session ``session_id`` of agent ``agent_name`` into the
        long-term memory of (app_name, user_id), now, and return what changed once it
        is committed (``if_needed``: only when the buffer is full, without waiting).
        Only messages not extracted before are read; system and tool messages and the
        memory blocks mnemex injected never are. Without an LLM endpoint
        (config.llm) facts are extracted by rules. ExtractionError when the extractor
        failed: the job is retried with backoff, then kept as a dead letter."""
        self._check_retained()
        agent = self.agent(agent_name)
        scope = self.scope(user_id=user_id, app_name=app_name)
        known = (await agent.entries(session_id, None, 0, 0)).total
        read = agent_reader(agent.entries, session_id, (AGENT_KIND, agent_name))
        return await extract_session(scope.ref.ask, session_id, read, known,
                                     mode="if_needed" if if_needed else "now")

    async def extract_if_needed(self, agent_name: str, session_id: str, *, user_id: str,
                                app_name: str) -> Extracted:
        """``extract`` only when the session's buffer is full (see config.knowledge)."""
        return await self.extract(agent_name, session_id, user_id=user_id, app_name=app_name, if_needed=True)

    async def retry_extraction(self, agent_name: str, session_id: str, first: int, *, user_id: str,
                               app_name: str) -> Extracted:
        """Extract the dead letter of the session that starts at position ``first`` again."""
        agent = self.agent(agent_name)
        scope = self.scope(user_id=user_id, app_name=app_name)
        read = agent_reader(agent.entries, session_id, (AGENT_KIND, agent_name))
        return await retry_dead_letter(scope.ref.ask, session_id, first, read)

    def extract_automatically(self, agent_name: str, *, app_name: str, user_id: str,
                              session_id: str | None = None, turns: int | None = None,
                              tokens: int | None = None) -> None:
        """From now on, messages appended to ``session_id`` of agent ``agent_name`` (every
        session when None) are extracted into (app_name, user_id) once the buffer is
        full (``turns`` messages or ``tokens`` tokens; default config.knowledge's) or
        the session is idle (config.knowledge.idle); appends never wait for it."""
        for what, value in (("agent_name", agent_name), ("app_name", app_name), ("user_id", user_id)):
            if not isinstance(value, str) or not value:
                raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
        for what, number in (("turns", turns), ("tokens", tokens)):
            if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
                raise InvalidInput(f"{what} must be an int >= 1 or None (the config's), got {number!r}",
                                   field=what)
        self._check_retained()
        self._auto[(agent_name, session_id)] = _Target(app_name, user_id, turns, tokens)
        self._hook_appends()

    def _check_retained(self) -> None:
        """Extraction reads an agent's sessions by position: every message must stay."""
        if self.config.conversations.retain != "all":
            raise InvalidInput("extracting an agent's sessions needs config.conversations.retain = \"all\": "
                               "with \"pruned\", messages could be forgotten before they are extracted "
                               "(hosts that prune their own history can use scope.extract_from)",
                               field="conversations.retain")

    def _hook_appends(self) -> None:
        """Appends tell this runtime (for automatic extraction) only once one is asked for."""
        if self._auto:
            for agent_services in self._agents.values():
                agent_services.after_append = self._after_append

    def _after_append(self, agent_name: str, appended: Appended, tokens: int) -> Awaitable[None] | None:
        """Count what an append brought; tell the session's scope once the buffer is full
        (one message per ``knowledge.turns`` appends, not one per append): then the
        telling is returned, for the append to await."""
        key = (agent_name, appended.session_id)
        waiting = self._waiting.get(key)
        if waiting is None:
            target = self._auto.get(key) or self._auto.get((agent_name, None))
            if target is None:
                return None
            knowledge = self.config.knowledge
            waiting = self._waiting[key] = _Waiting(
                self.scope(user_id=target.user_id, app_name=target.app_name).ref,
                agent_reader(self.agent(agent_name).entries, appended.session_id, (AGENT_KIND, agent_name)),
                (target.app_name, target.user_id, appended.session_id),
                target.turns or knowledge.turns, target.tokens or knowledge.tokens,
                # a buffer of its own: the scope starts the job when told (its cursor's is the config's)
                "flush" if target.turns or target.tokens else "if_needed")
        waiting.count += appended.count
        waiting.tokens += tokens
        waiting.known = appended.message_count
        waiting.last = time.time()
        full = waiting.count >= waiting.turns or waiting.tokens >= waiting.tokens_limit
        if full and not self._busy(waiting):
            return self._offer(key, waiting, waiting.mode)
        return None

    async def note_append(self, agent_name: str, appended: Appended, tokens: int) -> None:
        """What an ``AgentRef`` append does once the agent answered, for an append sent
        to the agent's actor directly (a cluster's shard does, with a request id):
        automatic extraction counts it. ``tokens``: the appended messages' JSON
        bytes / 4, as AgentRef estimates them."""
        hook = self._agent_services(AGENT_KIND).after_append
        if hook is not None and appended.count:
            then = hook(agent_name, appended, tokens)
            if then is not None:
                await then

    def _busy(self, waiting: _Waiting) -> bool:
        """A job of the session runs: telling its scope now would only queue behind it
        (the count goes on; the first append after the job tells the scope)."""
        return self._knowledge is not None and waiting.job in self._knowledge.running

    async def flush_idle_sessions(self) -> int:
        """Extract what waits in sessions extracted automatically that had no message
        for ``config.knowledge.idle`` seconds (the runtime does it every so often);
        returns how many were started."""
        idle = self.config.knowledge.idle
        if idle <= 0:
            return 0
        now = time.time()
        due = [(key, waiting) for key, waiting in self._waiting.items()
               if waiting.count and now - waiting.last >= idle and not self._busy(waiting)]
        for key, waiting in due:
            await self._offer(key, waiting, "flush")
        for key in [key for key, waiting in self._waiting.items() if now - waiting.last >= 4 * idle]:
            del self._waiting[key]  # long quiet: forget it (it is made again by the next append)
        return len(due)

    async def _offer(self, key: tuple[str, str], waiting: _Waiting,
                     mode: Literal["if_needed", "flush"]) -> None:
        command = ExtractSession(session_id=key[1], read=waiting.read, known=waiting.known, now=time.time(),
                                 tokens=waiting.tokens, mode=mode)
        waiting.count = waiting.tokens = 0
        try:
            await waiting.scope.tell(command)
        except MnemexError as exc:  # the appends stand; extraction catches up at the next offer
            log.warning("automatic extraction of %s/%s not started: %s", key[0], key[1], exc)

    async def flush_touches(self) -> int:
        """Send the access counts searches gathered so far now (the runtime does it every
        ``config.memories.touch_interval`` and at shutdown); returns how many scopes got one."""
        sent = 0
        for services in self._scopes.values():
            sent += await services.flush()
        return sent

    def scope_services(self, kind: str = SCOPE_KIND) -> ScopeServices:
        """What the refs of scope kind ``kind`` share (its batcher, id clock, access counts)."""
        services = self._scopes.get(kind)
        if services is None:
            raise InvalidInput(f"actor kind {kind!r} is not a scope kind (make it with scope_kind())",
                               field="kind")
        return services

    def _agent_services(self, kind: str) -> AgentServices:
        services = self._agents.get(kind)
        if services is None:
            raise InvalidInput(f"actor kind {kind!r} is not an agent kind (make it with agent_kind())",
                               field="kind")
        return services

    # -- the kernel's calls
    def ref(self, kind: str, key: str | Key) -> ActorRef:
        """A lightweight ref to one actor of any registered kind (spawned on first message)."""
        return self._kernel.ref(kind, key)

    async def ask(self, kind: str, key: str | Key, command: Any, *,
                  timeout: float | UseDefault | None = DEFAULT) -> Any:
        """Send ``command`` to an actor and wait for its reply (``DEFAULT``:
        ``config.kernel.ask_timeout``; ``None``: no limit)."""
        return await self._kernel.ask(kind, key, command, timeout=timeout)

    async def tell(self, kind: str, key: str | Key, command: Any) -> None:
        """Send ``command`` to an actor without waiting for its reply."""
        await self._kernel.tell(kind, key, command)

    async def subscribe(self, kind: str, key: str | Key, topic: str, command: Any = None, *,
                        buffer: int = 1024, timeout: float | UseDefault | None = DEFAULT) -> Subscription:
        """A live feed of an actor's events on ``topic`` (see the kernel's ``subscribe``)."""
        return await self._kernel.subscribe(kind, key, topic, command, buffer=buffer, timeout=timeout)

    async def passivate(self, kind: str, key: str | Key) -> None:
        """Snapshot an actor and unload it now (it comes back on its next message)."""
        await self._kernel.passivate(kind, key)

    def live_keys(self, kind: str | None = None) -> list[tuple[str, Key]]:
        """The actors loaded now, as (kind, key)."""
        return self._kernel.live_keys(kind)

    async def graph_stats(self, *, per_scope: float = 1.0) -> dict[str, int]:
        """The entity graphs of the scopes loaded now, summed: scopes (those that
        answered within ``per_scope`` seconds), entities, mentions
        (memory-mentions-entity edges), relations (entity pairs a memory names),
        declared entities, merges (of them, those decided by the names' embeddings)
        and names waiting for their embedding."""
        fields = ("entities", "mentions", "relations", "declared", "merges", "embedding_merges",
                  "names_pending")
        totals = {"scopes": 0} | dict.fromkeys(fields, 0)
        for kind, key in self.live_keys(SCOPE_KIND):
            try:
                stats = await self._kernel.ask(kind, key, GetGraphStats(), timeout=per_scope)
            except (ActorClosed, ActorCrashed, Timeout):
                continue  # unloaded, broken or busy meanwhile: it counts next time
            totals["scopes"] += 1
            for name in fields:
                totals[name] += int(getattr(stats, name))
        return totals

    def stats(self) -> RuntimeStats:
        """Counts for health checks and metrics."""
        return self._kernel.stats()

    def journal_health(self) -> dict[str, Any]:
        """Group-commit figures: rounds, lines per round, sync latency quantiles; and
        the journals open, their limit and how many were closed to make room."""
        return self._kernel.journal_health()

    @property
    def shutdown_report(self) -> ShutdownReport | None:
        """What closing the runtime did (actors closed, final snapshots written, which
        failed); None until it has closed."""
        return self._kernel.shutdown_report


def _builtin_kinds(config: Config, replaced: Iterable[str] = ()) -> list[ActorKind]:
    """mnemex's own kinds, but for those ``replaced`` by a caller's kind of that name."""
    skip = set(replaced)
    kinds: list[ActorKind] = []
    if AGENT_KIND not in skip:
        kinds.append(agent_kind(config))
    if SCOPE_KIND not in skip:
        kinds.append(scope_kind(config))
    if STATE_KIND not in skip:
        kinds.append(state_kind(config))
    if CHECKPOINT_KIND not in skip:
        kinds.append(checkpoint_kind())
    return kinds


async def _every(interval: float, chore: Any, *args: Any) -> None:
    while True:
        await trio.sleep(interval)
        await chore(*args)


@asynccontextmanager
async def open_runtime(config: Config | None = None, *, kinds: Iterable[ActorKind] = (),
                       storage: Storage | None = None,
                       ownership: Ownership | None = None) -> AsyncIterator[MnemexRuntime]:
    """Open a runtime: lock the data directory, recover nothing eagerly (actors load
    on first use), and on exit send the last access counts, drain every mailbox and
    snapshot every actor with something new, or leave it a short journal
    (``config.storage.snapshot_min_growth``; ``shutdown_report`` says what was done,
    and a failed snapshot is logged at ERROR).

    ``kinds`` registers extra actor kinds beside mnemex's own (tests, plugins); a kind
    named like a built-in one (``"agent"``, ``"scope"``, ``"checkpoint"``) takes its place.
    ``storage`` runs it on a storage backend opened by the caller (closed on exit)
    instead of the one ``config.storage`` names (a data directory, memory, or the
    postgres journal with ``backend = "postgres"``). With ``ownership`` the runtime
    serves only the virtual shards it holds leases on (a shard of a cluster: see
    ``LeaseKeeper``).
    """
    cfg = config if config is not None else Config()
    if storage is None:
        storage = configured_storage(cfg)
    extra = list(kinds)
    given = [*_builtin_kinds(cfg, [kind.name for kind in extra]), *extra]
    ids = IdClock()
    served: list[ActorKind] = []
    batchers: dict[str, tuple[ScopeKind, EmbeddingBatcher]] = {}
    knowledge: dict[str, KnowledgeServices] = {}
    extractor = default_extractor(cfg)
    reranker = reranker_from_config(cfg)  # loaded as the runtime opens: a damaged model fails here
    helpers = GraphHelpers() if cfg.memories.hnsw_helper else None
    row_files, record_files = _row_files(cfg), _record_files(cfg)
    for kind in given:
        if isinstance(kind, ScopeKind) and kind.embedder is not None:
            batcher = EmbeddingBatcher(kind.embedder, cfg.models.embed_batch_size,
                                       query_cache_size=cfg.models.query_cache_size)
            services_of = knowledge[kind.name] = KnowledgeServices(
                extractor, ids, context_messages=cfg.knowledge.context_messages,
                offered=cfg.knowledge.offered, max_jobs=cfg.knowledge.max_jobs)
            batchers[kind.name] = (kind.served_by(batcher.embed, services_of.run, services_of.timer, helpers,
                                                  row_files, record_files=record_files), batcher)
            served.append(batchers[kind.name][0])
        else:
            served.append(kind)
    for kind in served:
        if isinstance(kind, ScopeKind):
            kind.warm()  # the process-wide tables scopes share, built now rather than by a first write
    async with open_actor_runtime(cfg, served, storage=storage, ownership=ownership) as kernel, \
            trio.open_nursery() as services:
        for name, (_, batcher) in batchers.items():
            await services.start(batcher.run, name=f"mnemex {name} embedding")
        scopes = {name: ScopeServices(kernel, scope, batcher, ids, reranker)
                  for name, (scope, batcher) in batchers.items()}
        for name, (_, batcher) in batchers.items():
            knowledge[name].bind(functools.partial(_ask_scope, kernel, name), batcher.embed,
                                 (batcher.embedder.name, batcher.embedder.dim), batcher.embed_queries)
        agents = {kind.name: AgentServices(kernel, kind.name) for kind in served
                  if kind.name == AGENT_KIND}
        rt = MnemexRuntime(kernel, scopes, agents, knowledge)
        rt._stored_keys = getattr(storage, "actor_keys", None)
        chores = trio.CancelScope()
        services.start_soon(_chores, chores, rt, name="mnemex chores")
        try:
            yield rt
        finally:
            chores.cancel()
            with trio.CancelScope(shield=True) as shield:
                shield.deadline = trio.current_time() + cfg.kernel.shutdown_timeout
                await rt.flush_touches()  # the access counts of the last interval
                # drain and snapshot while the batchers still run: a draining scope may embed
                await kernel.aclose()
            services.cancel_scope.cancel()
            for services_of in knowledge.values():
                services_of.close()
            if helpers is not None:  # (the actors' builds are stopped: idle helpers exit at once)
                helpers.close()


def _large_files_dir(config: Config) -> str | None:
    """Where large scopes keep their files of rows and of records: ``storage.vector_rows_dir``,
    else the data directory (None: neither, so in memory)."""
    storage = config.storage
    return storage.vector_rows_dir if storage.vector_rows_dir is not None else storage.data_dir


def _row_files(config: Config) -> RowFiles | None:
    """Where large scopes keep their vector rows: files in ``storage.vector_rows_dir``
    or the data directory (see ``storage.vector_rows_file_from``), or None (in memory)."""
    storage, directory = config.storage, _large_files_dir(config)
    if directory is None or storage.vector_rows_file_from is None or not RowFiles.usable():
        return None
    return RowFiles(directory, storage.vector_rows_file_from)  # (made at a scope's first row file)


def _record_files(config: Config) -> RecordFiles | None:
    """Where large scopes keep their records: files in ``storage.vector_rows_dir`` or
    the data directory (see ``storage.records_file_from``), or None (in memory)."""
    storage, directory = config.storage, _large_files_dir(config)
    if directory is None or storage.records_file_from is None or not RecordFiles.usable():
        return None
    return RecordFiles(directory, storage.records_file_from)


def configured_storage(config: Config) -> Storage | None:
    """The storage ``config.storage.backend`` names when it is not the data directory
    the kernel opens by default: the postgres journal (None for ``files``)."""
    if config.storage.backend != "postgres":
        return None
    return _postgres(config, None, 30.0)


def shared_storage(config: Config, ownership: Ownership, *,
                   lease_wait: float = 30.0) -> DataDir | PostgresStorage:
    """The storage of a runtime that serves part of a cluster: the virtual shards
    ``ownership`` holds, of the data directory every node mounts (``DataDir``), or of
    the postgres journal ``config.storage`` names (snapshots in that directory). Its
    ``leases`` are where ``ownership``'s leases are taken (``LeaseKeeper``); a
    takeover waits at most ``lease_wait`` seconds for a frozen holder's commit
    (postgres). Blocks (it opens files or connects): call it in a worker thread."""
    if config.storage.backend == "postgres":
        return _postgres(config, ownership, lease_wait)
    if config.data_dir is None:
        raise InvalidInput("a runtime serving part of a cluster needs a shared data_dir", field="data_dir")
    return DataDir(config.data_dir, ownership=ownership)


def _postgres(config: Config, ownership: Ownership | None, lease_wait: float) -> PostgresStorage:
    settings = config.storage
    try:
        from mnemex.persistence.postgres import PostgresStorage
    except ImportError as exc:
        raise InvalidInput("config.storage.backend is 'postgres', but psycopg is not installed: "
                           "pip install 'mnemex[postgres]'", field="storage.backend") from exc
    assert settings.postgres_dsn is not None and settings.data_dir is not None  # checked by the config
    return PostgresStorage(settings.postgres_dsn, snapshots_dir=settings.data_dir, ownership=ownership,
                           schema=settings.postgres_schema, lease_wait=lease_wait)


@dataclass(frozen=True, slots=True)
class _Target:
    """Where an automatically extracted session's facts go, and its own buffer."""

    app_name: str
    user_id: str
    turns: int | None = None
    tokens: int | None = None


@dataclass(slots=True)
class _Waiting:
    """A session extracted automatically: its scope, how its messages are read, and
    what was appended since the scope was last told."""

    scope: ActorRef
    read: ReadMessages
    job: tuple[str, str, str]   # its jobs' key in KnowledgeServices.running
    turns: int                  # its buffer: messages,
    tokens_limit: int           # or tokens
    mode: Literal["if_needed", "flush"]
    count: int = 0
    tokens: int = 0
    known: int = 0
    last: float = 0.0


async def _ask_scope(kernel: Runtime, kind: str, app_name: str, user_id: str, command: Any) -> Any:
    return await kernel.ask(kind, (app_name, user_id), command)


async def _chores(scope: trio.CancelScope, rt: MnemexRuntime) -> None:
    """What the runtime does every so often, until shutdown: send access counts,
    expire idle sessions, extract idle sessions that are extracted automatically."""
    config = rt.config
    with scope:
        async with trio.open_nursery() as chores:
            if rt._scopes:
                chores.start_soon(_every, config.memories.touch_interval, rt.flush_touches)
                if config.knowledge.idle > 0:
                    chores.start_soon(_every, min(30.0, max(0.5, config.knowledge.idle / 4)),
                                      rt.flush_idle_sessions)
            for name in rt._agents:
                chores.start_soon(_every, config.conversations.sweep_interval, sweep_expired_sessions,
                                  rt.kernel, name)
