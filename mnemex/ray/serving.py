"""``mnemex serve --ray ADDRESS``: the HTTP server in front of a cluster.

The server is the one of ``mnemex serve`` (uvicorn on uvloop, the runtime a trio
guest of its loop, the same routes, schemas, limits and security rules); the
runtime it serves is a ``RayRuntime`` (``open_runtime``), and ``ClusterOperations``
gives it what differs from one process:

* ``GET /health`` (JSON) asks every shard, each within ``HEALTH_TIMEOUT`` seconds,
  and lists each as it answered or as not answering (``reachable`` false): the
  actor counts are summed over the shards that answered only, and ``status`` says
  ``degraded`` while some shard does not serve, ``unavailable`` (503) while none
  does. Plain ``GET /health`` stays ``OK``: it says this process serves HTTP.
* ``/metrics`` has each shard's gauges labelled ``shard``, and ``mnemex_shard_up``.
* Pushed streams are kept by the shard owning each stream's name and session feeds
  are read from the agent's shard (``mnemex.ray.streams``), so several fronts can
  serve one cluster.

The shards are Ray actors of their own lifetime (detached): stopping a front
leaves them serving the others, and the next front reaches them by name;
``stop_cluster`` (or ``mnemex serve --ray ... --stop-shards`` on its way out)
shuts them down, each snapshotting its actors.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import msgspec
import trio

from mnemex import Config, MnemexError
from mnemex.lowlevel import vshard_of
from mnemex.ray.cluster import RayRuntime, _error_of, open_runtime, wait_for
from mnemex.ray.placement import read_cluster
from mnemex.ray.shard import ShardHealth, shard_name
from mnemex.ray.streams import STREAM_KIND, STREAMS_GROUP, follow_stream, stream_call, stream_error
from mnemex.server import (
    Bridge,
    Gauges,
    Operations,
    PushedStreams,
    RuntimeHealth,
    ServedRuntime,
    ServerSettings,
    ShardGauges,
    StreamStatistics,
)

__all__ = ["ClusterOperations", "ClusterStreams", "serving"]

log = logging.getLogger("mnemex.ray")

HEALTH_TIMEOUT: Final = 3.0
"""Seconds a health check or a scrape waits for each shard."""
_ACTOR_COUNTS: Final = (("live", "live"), ("spawned", "spawns"), ("passivations", "passivations"),
                        ("crashes", "crashes"), ("mailbox_depth", "mailbox_depth"),
                        ("live_bytes", "live_bytes"), ("budget_passivations", "budget_passivations"))


def serving(*, address: str | None, shards: int | None = None, data_dir: str | None = None,
            stop_shards: bool = False, **options: Any) -> Any:
    """The opener of ``Server(config, opener=...)`` serving the cluster at ``address``
    (``ray.init``'s: ``host:port`` of a running cluster, ``auto``, None for the one
    this process is connected to already). ``shards``: how many (default: as many as
    the cluster in the data directory has, else 2). The shards outlive the server
    unless ``stop_shards``. Other keywords go to ``open_runtime`` (``ttl``,
    ``actor_options``...)."""

    # a Ray instance started by this process ends with it, and its shards too
    detached = not stop_shards and address != "local"

    @asynccontextmanager
    async def opener(config: Config) -> AsyncIterator[tuple[ServedRuntime, Operations]]:
        path = data_dir if data_dir is not None else config.data_dir
        count = shards
        if count is None:
            found = await trio.to_thread.run_sync(read_cluster, Path(path)) if path is not None else None
            count = found.shards if found is not None else 2
        async with open_runtime(config, address=address, shards=count, data_dir=data_dir,
                                detached=detached, **options) as runtime:
            yield runtime, ClusterOperations(runtime, address=address, detached=detached)

    return opener


def _unreachable(index: int, why: str) -> dict[str, Any]:
    return {"name": shard_name(index), "reachable": False, "state": "unreachable", "problem": why}


class ClusterOperations:
    """``Operations`` over a cluster's shards (see the module)."""

    def __init__(self, runtime: RayRuntime, *, address: str | None, detached: bool) -> None:
        self.runtime = runtime
        self.address = address
        self.detached = detached

    @property
    def kinds(self) -> Collection[str]:
        return self.runtime.host.kinds

    def embedder_info(self) -> tuple[str, int] | None:
        embedder = self.runtime.embedder
        return embedder.name, embedder.dim

    def open_files(self) -> int | None:
        return None  # the journals are the shards'

    async def scope_keys(self) -> list[tuple[str, str]]:
        return await self.runtime.scope_keys()

    async def shard_healths(self) -> list[ShardHealth | str]:
        """Each shard's health, or why it did not give it (within HEALTH_TIMEOUT)."""
        shards = self.runtime.host.shards
        silent = f"did not answer within {HEALTH_TIMEOUT:g} s (frozen, or its node is unreachable)"
        out: list[ShardHealth | str] = [silent] * len(shards)

        async def one(index: int) -> None:
            with trio.move_on_after(HEALTH_TIMEOUT):
                try:
                    out[index] = await wait_for(shards[index].health.remote())
                except Exception as exc:  # Ray's: dead, restarting, its node lost
                    out[index] = f"down ({type(exc).__name__}); Ray restarts it"

        async with trio.open_nursery() as nursery:
            for index in range(len(shards)):
                nursery.start_soon(one, index)
        return out

    async def health(self) -> RuntimeHealth:
        healths = await self.shard_healths()
        actors = dict.fromkeys((name for name, _ in _ACTOR_COUNTS), 0)
        pending = 0
        p50 = p99 = 0.0
        listed: list[dict[str, Any]] = []
        serving = answered = streams = 0
        for index, health in enumerate(healths):
            if isinstance(health, str):
                listed.append(_unreachable(index, health))
                continue
            answered += 1
            serving += health.state == "serving" and health.held >= health.assigned  # else its keys wait
            streams += health.streams
            for name, field in _ACTOR_COUNTS:
                actors[name] += int(health.stats.get(field, 0))
            pending += int(health.journal.get("pending_acks", 0))
            p50 = max(p50, float(health.journal.get("fsync_p50_ms", 0.0)))
            p99 = max(p99, float(health.journal.get("fsync_p99_ms", 0.0)))
            listed.append({"name": health.name, "reachable": True, "state": health.state,
                           "problem": health.problem, "owner": health.owner, "node": health.node,
                           "pid": health.pid, "held": health.held, "assigned": health.assigned,
                           "leases_lost": health.leases_lost, "live_actors": health.live_actors,
                           "streams": health.streams, "feeds": health.feeds})
        actors["shards_answering"] = answered
        actors["shards"] = len(healths)
        status = "ok" if serving == len(healths) else "unavailable" if serving == 0 else "degraded"
        return RuntimeHealth(status=status, actors=actors, streams=streams, shards=listed,
                             journal={"pending_acks": pending, "fsync_p50_ms": p50, "fsync_p99_ms": p99,
                                      "shards_answering": answered})

    async def gauges(self) -> Gauges:
        processes = []
        for index, health in enumerate(await self.shard_healths()):
            if isinstance(health, str):
                processes.append(ShardGauges(name=shard_name(index), up=False))
                continue
            stats, journal = health.stats, health.journal
            processes.append(ShardGauges(
                name=health.name, up=True, live=stats.get("live", 0),
                mailbox_depth=stats.get("mailbox_depth", 0), spawns=stats.get("spawns", 0),
                passivations=stats.get("passivations", 0), crashes=stats.get("crashes", 0),
                live_bytes=stats.get("live_bytes", 0),
                budget_passivations=stats.get("budget_passivations", 0),
                pending_acks=int(journal.get("pending_acks", 0)),
                fsync_p50_ms=float(journal.get("fsync_p50_ms", 0.0)),
                fsync_p99_ms=float(journal.get("fsync_p99_ms", 0.0))))
        return Gauges(processes, clustered=True)

    def pushed_streams(self, settings: ServerSettings, bridge: Bridge | None) -> PushedStreams:
        return ClusterStreams(self.runtime, bridge)

    def describe(self) -> str:
        where = self.address or "the Ray cluster this process is connected to"
        return (f"a cluster of {len(self.runtime.host.shards)} shards on {where}, data in "
                f"{self.runtime.data_dir}")

    def stopped(self) -> tuple[bool, str]:
        if self.detached:
            return True, "the cluster's shards go on serving (mnemex.ray.stop_cluster stops them)"
        return True, "the cluster's shards were shut down, each snapshotting its actors"


class ClusterStreams:
    """Pushed streams kept by the shard owning each name (``mnemex.ray.streams``),
    called from the server's loop through its Bridge."""

    def __init__(self, runtime: RayRuntime, bridge: Bridge | None) -> None:
        self.runtime = runtime
        self._bridge = bridge
        self.following = 0
        """Readers this server relays now."""

    def __len__(self) -> int:
        return self.following

    def _call(self) -> Bridge:
        if self._bridge is None:
            raise RuntimeError("the cluster's streams are reached through a Bridge (see Server)")
        return self._bridge

    async def _owner(self, op: str, name: str, *args: Any) -> Any:
        host = self.runtime.host
        _, value = await stream_call(host, vshard_of(STREAM_KIND, (name,)), op, name, *args,
                                     limit=host.config.kernel.ask_timeout, retry_dead=op != "push")
        return value

    async def _every(self, op: str) -> list[Any]:
        """``op`` on every shard (their streams are theirs alone)."""
        host = self.runtime.host
        out: list[Any] = [None] * len(host.shards)

        async def one(index: int) -> None:
            try:
                call = host.shards[index].streams.options(concurrency_group=STREAMS_GROUP)
                ok, value = await wait_for(call.remote(op))
            except Exception as exc:
                raise MnemexError(f"{shard_name(index)} did not answer ({type(exc).__name__}): its "
                                  f"streams are not counted") from exc
            if not ok:
                raise MnemexError(f"{shard_name(index)} refused {op}: {msgspec.json.decode(value)}")
            out[index] = value

        with trio.fail_after(host.config.kernel.ask_timeout):
            async with trio.open_nursery() as nursery:
                for index in range(len(host.shards)):
                    nursery.start_soon(one, index)
        return out

    async def exists(self, name: str) -> bool:
        return bool(await self._call().call(self._owner, "exists", name))

    async def push(self, name: str, lines: list[bytes]) -> tuple[int, MnemexError | None]:
        taken, error = await self._call().call(self._owner, "push", name, lines)
        return taken, stream_error(error, _error_of) if error is not None else None

    async def complete(self, name: str) -> str | None:
        status = await self._call().call(self._owner, "complete", name)
        return str(status) if status is not None else None

    async def purge(self) -> int:
        return sum(await self._call().call(self._every, "purge"))

    async def statistics(self) -> StreamStatistics:
        queries: dict[str, Any] = {}
        for raw in await self._call().call(self._every, "statistics"):
            queries.update(msgspec.json.decode(raw, type=StreamStatistics).queries)
        return StreamStatistics(total_queries=len(queries), queries=queries)

    async def follow(self, name: str, *, from_beginning: bool, wait: float,
                     heartbeat: float) -> AsyncIterator[bytes | None]:
        host = self.runtime.host
        chunks = self._call().iterate(lambda: follow_stream(
            host, name, from_beginning=from_beginning, wait=wait, heartbeat=heartbeat))
        self.following += 1
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            self.following -= 1
            await chunks.aclose()  # type: ignore[attr-defined]  # an async generator
