"""What the HTTP app needs of the runtime behind it, and nothing more.

The app serves one process's runtime (``mnemex serve``) or a cluster's
(``mnemex serve --ray``, whose runtime is ``mnemex.ray.RayRuntime``). Its
handlers make two kinds of calls:

* ``ServedRuntime``: the public calls the routes are made of (the refs, searches
  across scopes, batches, raw commands and subscriptions for the remote routes).
  ``MnemexRuntime`` and ``RayRuntime`` both have them, with the same signatures,
  so the request paths call the runtime itself, with nothing in between.
* ``Operations``: what differs between one process and a cluster: the health
  report, the gauges of ``/metrics``, the kinds and embedder remote clients are
  told of, the scope listing, the open-file budget, and where pushed streams live.
  ``LocalOperations`` is the one-process side: the kernel's own counts, and pushed
  streams in the server's memory (``StreamHub``, on its event loop).

Every ``Operations`` coroutine but the pushed streams' runs in the runtime's trio
run (the app calls them through the Bridge); ``PushedStreams`` is asyncio-side.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from mnemex import (
    DEFAULT,
    AgentRef,
    Config,
    Extracted,
    MnemexError,
    MnemexRuntime,
    ScopeRef,
    SearchResult,
    SessionAdded,
)
from mnemex.config import UseDefault
from mnemex.server._schemas import ServerSettings, StreamStatistics
from mnemex.server._streams import StreamHub

if TYPE_CHECKING:
    from mnemex.server._bridge import Bridge

__all__ = ["Gauges", "LocalOperations", "LocalStreams", "Operations", "PushedStreams", "RuntimeHealth",
           "RuntimeOpener", "ServedRuntime", "ShardGauges"]

HEALTH_SCOPES: Final = 50
"""Scopes a health check asks for their category statistics at most."""


class ServedRuntime(Protocol):
    """The calls the routes make of the runtime they serve."""

    @property
    def config(self) -> Config: ...

    def agent(self, name: str) -> AgentRef: ...

    def scope(self, *, user_id: str, app_name: str) -> ScopeRef: ...

    async def remember_many(self, items: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[str]: ...

    async def search(self, query: str, scopes: Iterable[tuple[str, str]], top_k: int = 10, *,
                     mode: Any = DEFAULT, min_score: float | UseDefault | None = DEFAULT,
                     filter: Mapping[str, Any] | None = None, include_history: bool = False,
                     as_of: float | str | datetime | None = None) -> SearchResult: ...

    async def extract(self, agent_name: str, session_id: str, *, user_id: str, app_name: str,
                      if_needed: bool = False) -> Extracted: ...

    async def archive(self, agent_name: str, session_id: str, *, user_id: str,
                      app_name: str) -> SessionAdded: ...

    async def ask(self, kind: str, key: Any, command: Any, *,
                  timeout: float | UseDefault | None = DEFAULT) -> Any: ...

    async def subscribe(self, kind: str, key: Any, topic: str, command: Any = None, *,
                        buffer: int = 1024, timeout: float | UseDefault | None = DEFAULT) -> Any: ...


class ShardGauges(msgspec.Struct, frozen=True, kw_only=True):
    """The counts of one process serving actors: ``name`` is empty for the single
    process of ``mnemex serve``, a shard's name on a cluster; ``up`` False when it
    did not answer (then its counts are not known, and not zero)."""

    name: str = ""
    up: bool = True
    live: int = 0
    mailbox_depth: int = 0
    spawns: int = 0
    passivations: int = 0
    crashes: int = 0
    live_bytes: int = 0
    budget_passivations: int = 0
    pending_acks: int = 0
    fsync_p50_ms: float = 0.0
    fsync_p99_ms: float = 0.0


class Gauges(msgspec.Struct, frozen=True):
    """What ``/metrics`` shows of the runtime, one entry per process serving actors."""

    processes: list[ShardGauges]
    clustered: bool = False


def gauges_of(stats: Any, journal: Mapping[str, Any], name: str = "") -> ShardGauges:
    """A process's gauges from its RuntimeStats and its journal_health()."""
    return ShardGauges(name=name, live=stats.live, mailbox_depth=stats.mailbox_depth, spawns=stats.spawns,
                       passivations=stats.passivations, crashes=stats.crashes, live_bytes=stats.live_bytes,
                       budget_passivations=stats.budget_passivations,
                       pending_acks=int(journal.get("pending_acks", 0)),
                       fsync_p50_ms=float(journal.get("fsync_p50_ms", 0.0)),
                       fsync_p99_ms=float(journal.get("fsync_p99_ms", 0.0)))


class RuntimeHealth(msgspec.Struct, frozen=True, kw_only=True):
    """The runtime's part of ``GET /health`` (JSON): ``status`` ok, degraded (a
    cluster with shards not serving) or unavailable (none serving: answered 503)."""

    status: str = "ok"
    actors: dict[str, int]
    journal: dict[str, Any]
    categories: dict[str, Any] | None = None
    graph: dict[str, int] | None = None
    shards: list[dict[str, Any]] | None = None
    streams: int | None = None
    """Pushed streams kept (None: those of the server's own PushedStreams)."""


class PushedStreams(Protocol):
    """Where ``POST /stream/{name}`` puts chunks and ``GET /stream/{name}`` reads them
    (see ``_streams``); called from the app's event loop."""

    def __len__(self) -> int: ...

    async def exists(self, name: str) -> bool:
        """A stream ``name`` was pushed to (or completed) and is kept."""
        ...

    async def push(self, name: str, lines: list[bytes]) -> tuple[int, MnemexError | None]:
        """Append ``lines`` in order; how many were taken, and the error that stopped
        the rest (InvalidInput, StreamClosed, TooLarge), if one did."""
        ...

    async def complete(self, name: str) -> str | None: ...

    async def purge(self) -> int: ...

    async def statistics(self) -> StreamStatistics: ...

    def follow(self, name: str, *, from_beginning: bool, wait: float,
               heartbeat: float) -> AsyncIterator[bytes | None]:
        """As ``StreamHub.follow``: chunks, CAUGHT_UP once, None for heartbeats;
        TimeoutError if the stream has not started within ``wait``."""
        ...


class Operations(Protocol):
    """What serving one process and serving a cluster do differently (see the module)."""

    @property
    def kinds(self) -> Collection[str]:
        """The actor kinds the runtime has (remote clients reach those of them that
        cross the wire)."""
        ...

    def embedder_info(self) -> tuple[str, int] | None:
        """The name and dimension of the embedder scopes hold vectors of; None if the
        runtime has no scope kind."""
        ...

    def open_files(self) -> int | None:
        """How many files the runtime keeps open at most in this process (the
        connections get what is left of the limit); None: none of note."""
        ...

    async def scope_keys(self) -> list[tuple[str, str]]: ...

    async def health(self) -> RuntimeHealth: ...

    async def gauges(self) -> Gauges: ...

    def pushed_streams(self, settings: ServerSettings, bridge: Bridge | None) -> PushedStreams: ...

    def describe(self) -> str:
        """Where the data is, for the log line saying the server serves."""
        ...

    def stopped(self) -> tuple[bool, str]:
        """Once the runtime has closed: whether all went well, and what to log."""
        ...


RuntimeOpener = Callable[[Config], AbstractAsyncContextManager[tuple[ServedRuntime, Operations]]]
"""Opens the runtime a server serves, with its Operations (see ``Server``)."""


class LocalStreams:
    """The pushed streams of one server, in its memory (``StreamHub``)."""

    def __init__(self, settings: ServerSettings) -> None:
        self.hub = StreamHub(settings)

    def __len__(self) -> int:
        return len(self.hub)

    async def exists(self, name: str) -> bool:
        return self.hub.get(name) is not None

    async def push(self, name: str, lines: list[bytes]) -> tuple[int, MnemexError | None]:
        for index, line in enumerate(lines):
            try:
                self.hub.push(name, line)
            except MnemexError as exc:
                return index, exc
        return len(lines), None

    async def complete(self, name: str) -> str | None:
        return self.hub.complete(name)

    async def purge(self) -> int:
        return self.hub.purge()

    async def statistics(self) -> StreamStatistics:
        return self.hub.statistics()

    def follow(self, name: str, *, from_beginning: bool, wait: float,
               heartbeat: float) -> AsyncIterator[bytes | None]:
        return self.hub.follow(name, from_beginning=from_beginning, wait=wait, heartbeat=heartbeat)


class LocalOperations:
    """``Operations`` of a runtime in this process: the kernel's counts, the journals'
    health, category and graph statistics of the scopes loaded now."""

    def __init__(self, runtime: MnemexRuntime) -> None:
        self.runtime = runtime

    @property
    def kinds(self) -> Collection[str]:
        return self.runtime.kinds

    def embedder_info(self) -> tuple[str, int] | None:
        try:
            embedder = self.runtime.scope_services().embedder
        except MnemexError:
            return None
        return embedder.name, embedder.dim

    def open_files(self) -> int | None:
        limit = self.runtime.journal_health().get("max_open_files")
        return int(limit) if limit is not None else None

    async def scope_keys(self) -> list[tuple[str, str]]:
        return self.runtime.scope_keys()

    async def gauges(self) -> Gauges:
        return Gauges([gauges_of(self.runtime.stats(), self.runtime.journal_health())])

    async def health(self) -> RuntimeHealth:
        rt = self.runtime
        stats = rt.stats()
        return RuntimeHealth(
            actors={"live": stats.live, "spawned": stats.spawns, "passivations": stats.passivations,
                    "crashes": stats.crashes, "mailbox_depth": stats.mailbox_depth,
                    "live_bytes": stats.live_bytes, "budget_passivations": stats.budget_passivations},
            journal=rt.journal_health(), categories=await self._category_health(),
            graph=await rt.graph_stats())

    async def _category_health(self) -> dict[str, Any]:
        """Category statistics over the scopes loaded now (at most HEALTH_SCOPES of
        them, so a health check stays cheap; none is loaded for it)."""
        rt = self.runtime
        keys = [key for _, key in rt.live_keys("scope")]
        asked = keys[:HEALTH_SCOPES]
        counts: dict[str, int] = {}
        memories = custom = reclassifying = 0
        for app_name, user_id in asked:
            with contextlib.suppress(MnemexError):  # passivated meanwhile, or closing: left out
                catalog = await rt.scope(user_id=user_id, app_name=app_name).categories()
                memories += catalog.total
                custom += catalog.version > 0
                reclassifying += catalog.reclassifying
                for name, count in catalog.counts.items():
                    counts[name] = counts.get(name, 0) + count
        return {"scopes_live": len(keys), "scopes_asked": len(asked), "memories": memories,
                "per_category": dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
                "misc": counts.get("misc", 0), "custom_catalogs": custom, "reclassifying": reclassifying}

    def pushed_streams(self, settings: ServerSettings, bridge: Bridge | None) -> PushedStreams:
        return LocalStreams(settings)

    def describe(self) -> str:
        return f"data in {self.runtime.config.storage.data_dir}"

    def stopped(self) -> tuple[bool, str]:
        report = self.runtime.shutdown_report
        if report is not None and report.ok:
            return True, ("every actor snapshotted or left a short journal" if report.journaled
                          else "every actor snapshotted")
        # the runtime logged which snapshots failed, at ERROR
        return False, "NOT every actor was snapshotted (see the error above)"
