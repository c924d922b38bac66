"""A shard: one process of a cluster, serving the virtual shards placed on it.

``Shard`` is the class Ray hosts as an actor (``mnemex.ray.cluster`` wraps it with
``ray.remote(max_restarts=-1)``): its process runs today's runtime on a trio
thread, over the cluster's shared data directory, serving only the virtual
shards whose leases its ``LeaseKeeper`` holds.

Its constructor takes no lease and cannot fail on storage (Ray does not retry a
constructor that raised): it starts the thread, and the thread opens the data
directory, checks it holds this cluster (a node without the shared volume must not
serve empty memories), reads the placement and takes the leases of its virtual
shards, retrying all of it until it works. A restart (the process was killed, its
node was lost) does the same, under a new owner name: the leases of the previous
incarnation are taken over only once they lapse, with a higher epoch, so a
previous incarnation that was only frozen or partitioned can never write again.

Requests come as the remote clients' wire bodies (``mnemex.remote.wire``): the
kind, ``{"key": [...], "command": {...}}`` and, for writes, a request id (see
``mnemex.ray.requests``). Answers are ``(True, reply JSON)`` or ``(False, error
JSON)``; a NotOwner error carries its virtual shard and its owner hint.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec
import trio

import mnemex
from mnemex import ActorClosed, Config, ExtractionError, InvalidInput, MnemexError, MnemexRuntime, NotOwner
from mnemex.lowlevel import BlockingBridge, LeaseKeeper, Leases, Ownership, shared_storage, vshard_of
from mnemex.ray.forwarding import Forwarder
from mnemex.ray.placement import read_cluster, read_placement
from mnemex.ray.requests import DEFAULT_LIMIT, Repeated, Requested, check_request_id, request_kinds
from mnemex.ray.streams import ShardStreams
from mnemex.remote import crossing, wire

__all__ = ["NAMESPACE", "Shard", "ShardHealth", "actor_name", "encode_error", "shard_name"]

log = logging.getLogger("mnemex.ray")

T = TypeVar("T")
_encode = msgspec.json.Encoder().encode
_STATES: Final = ("starting", "serving", "blind", "failed")


NAMESPACE: Final = "mnemex"
"""The Ray namespace of the shard actors."""


def shard_name(index: int) -> str:
    """The stable name of shard ``index`` (its owner names start with it)."""
    return f"shard-{index}"


def actor_name(cluster: str, index: int) -> str:
    """The name Ray knows shard ``index`` of ``cluster`` by (in ``NAMESPACE``)."""
    return f"mnemex-{cluster}-{shard_name(index)}"


class ShardHealth(msgspec.Struct, frozen=True, kw_only=True):
    """What a shard says of itself: ``state`` starting (opening, taking leases),
    serving, blind (its data directory does not hold the cluster: the shared volume
    is missing on its node) or failed (the runtime stopped on an error)."""

    name: str
    owner: str
    pid: int
    node: str
    node_id: str | None
    state: str
    problem: str | None
    held: int
    assigned: int
    leases_lost: int
    live_actors: int
    started: float
    stats: dict[str, int] = {}
    """The runtime's counts (``RuntimeStats``); empty while it is not open."""
    journal: dict[str, Any] = {}
    """Its journals' health (``journal_health()``); empty while it is not open."""
    streams: int = 0
    """Pushed streams kept here."""
    feeds: int = 0
    """Session feeds read from here by fronts."""


def encode_error(exc: MnemexError) -> bytes:
    """An error answer: the remote clients' error body, plus a NotOwner's hint."""
    body: dict[str, Any] = {"error": str(exc), "type": type(exc).__name__}
    field = getattr(exc, "field", None)
    if field is not None:
        body["field"] = field
    if isinstance(exc, ExtractionError):
        body["reason"] = exc.reason
    if isinstance(exc, NotOwner):
        body.update(vshard=exc.vshard, owner=exc.owner, epoch=exc.epoch)
    return _encode(body)


class _Service:
    """The shard's side inside its trio thread: the runtime and its lease keeper once
    open, and why not while not."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.rt: MnemexRuntime | None = None
        self.keeper: LeaseKeeper | None = None
        self.leases: Leases | None = None
        self.deduplicated: frozenset[str] = frozenset()
        """The kinds whose writes take request ids (the others' writes are idempotent:
        key-value state sets values)."""
        self.state = "starting"
        self.problem: str | None = None
        self.ready = trio.Event()
        self.leaving: set[int] = set()
        """Virtual shards being given up: refused at once, so that their actors, once
        snapshotted, are not loaded again here."""
        self.streams = ShardStreams(shard.config.server)
        """The pushed streams and session feeds of the keys served here (``mnemex.ray.streams``)."""
        self.forwarder: Forwarder | None = None
        self._router: Any = None
        self._router_lock = trio.Lock()
        self.shards = 0
        """How many shards the cluster has (from its data directory)."""

    async def router(self) -> Any:
        """The way to the other shards (a ``RayHost`` over the cluster's shard actors,
        found by name when first needed): what Forwards and Tells across shards take."""
        async with self._router_lock:
            if self._router is None:
                import ray

                from mnemex.ray.cluster import RayHost  # (cluster.py starts shards: it imports this module)

                shard = self.shard
                names = [actor_name(shard.cluster, index) for index in range(self.shards)]
                try:
                    handles = await trio.to_thread.run_sync(
                        lambda: [ray.get_actor(name, namespace=NAMESPACE) for name in names])
                except ValueError as exc:  # one is not running (yet): the hand-over fails, told
                    raise ActorClosed(f"a shard of cluster {shard.cluster!r} is not running: {exc}") from exc
                placement = await trio.to_thread.run_sync(read_placement, shard.path)
                if placement is None:
                    raise MnemexError(f"{shard.path} holds no placement of cluster {shard.cluster!r}")
                self._router = RayHost(shard.config, handles, placement, f"{shard.name}'s cluster",
                                       data_dir=shard.path)
            return self._router

    def check(self, kind: str, key: tuple[str, ...]) -> MnemexRuntime:
        if self.rt is None or self.keeper is None:
            raise NotOwner(f"{self.shard.name} is {self.state}"
                           f"{': ' + self.problem if self.problem else ''}; it serves nothing yet",
                           vshard=vshard_of(kind, key))
        if self.leaving:
            vshard = vshard_of(kind, key)
            if vshard in self.leaving:
                raise NotOwner(f"{self.shard.name} is handing virtual shard {vshard} over", vshard=vshard)
        return self.rt

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        shard = self.shard
        task_status.started()
        pause = 0.2
        while True:
            try:
                await self._serve()
            except MnemexError as exc:
                self.problem = str(exc)
                if self.state != "blind":
                    self.state = "failed"
                log.warning("%s: %s; retrying in %.1f s", shard.owner, exc, pause)
            except Exception as exc:  # a bug must not leave a live actor serving nothing for good
                self.problem, self.state = f"the runtime stopped on {exc!r}", "failed"
                log.exception("%s: the runtime stopped; opening it again in %.1f s", shard.owner, pause)
            finally:
                self.rt = self.keeper = self.leases = self.forwarder = None
            await trio.sleep(pause)
            pause = min(pause * 2, shard.retry * 4)

    async def _serve(self) -> None:
        shard = self.shard
        info = await trio.to_thread.run_sync(read_cluster, shard.path)
        if info is None or info.cluster != shard.cluster:
            self.state = "blind"
            found = "nothing" if info is None else f"cluster {info.cluster!r}"
            raise MnemexError(f"data directory {shard.path} on this node holds {found}, not cluster "
                              f"{shard.cluster!r}: is the shared volume mounted here? Serving nothing")
        self.shards = info.shards
        ownership = Ownership(shard.owner, margin=shard.margin)
        config = shard.config.replace(data_dir=str(shard.path))
        # the data directory every node mounts, or the postgres journal the config names
        # (a frozen holder's commit holds a takeover back for two leases at most)
        storage = await trio.to_thread.run_sync(
            lambda: shared_storage(config, ownership, lease_wait=max(2 * shard.ttl, 10.0)))
        assert storage.leases is not None
        kinds = request_kinds(config, shard.limit)
        self.deduplicated = frozenset(kind.name for kind in kinds)
        async with mnemex.open_runtime(config, kinds=kinds, storage=storage,
                                       ownership=ownership) as rt, trio.open_nursery() as nursery:
            # taking a few thousand file leases is fsync-bound: many at once lets the
            # filesystem commit them together (renewals go in one call a round)
            keeper = LeaseKeeper(rt.kernel, storage.leases, ttl=shard.ttl, retry=shard.retry, concurrency=32)
            placement = await trio.to_thread.run_sync(read_placement, shard.path)
            if placement is not None:
                keeper.assign(placement.vshards_of(shard.index))
            await nursery.start(keeper.run)
            self.forwarder = Forwarder(rt, nursery, self.router)
            rt.kernel.elsewhere = self.forwarder  # Tells and Forwards to the other shards' actors
            self.rt, self.keeper, self.leases = rt, keeper, storage.leases
            self.state, self.problem = "serving", None
            self.ready.set()
            await trio.sleep_forever()


class Shard:
    """One shard of a cluster (see the module docstring). ``index`` is its place in
    the cluster, ``data_dir`` the shared data directory, ``cluster`` the id the
    directory must hold; leases last ``ttl`` seconds (renewed every third of it),
    a virtual shard held by another owner is tried again every ``retry`` seconds,
    ``margin`` seconds of each lease are given up to clock drift, and each actor
    remembers its last ``limit`` request ids."""

    def __init__(self, index: int, data_dir: str, cluster: str, config: Config, *, ttl: float = 15.0,
                 retry: float = 0.5, margin: float = 2.0, limit: int = DEFAULT_LIMIT) -> None:
        if not ttl > margin > 0:
            raise InvalidInput(f"a lease's ttl ({ttl}) must exceed its margin ({margin}) > 0", field="ttl")
        self.index = index
        self.name = shard_name(index)
        self.node = socket.gethostname()
        self.node_id = _ray_node_id()
        # each incarnation owns its leases under a name of its own: a restart takes
        # over from the previous one only when its leases lapse, with a new epoch
        self.owner = f"{self.name}/{self.node}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.path = Path(data_dir)
        self.cluster = cluster
        self.config = config
        self.ttl, self.retry, self.margin, self.limit = ttl, retry, margin, limit
        self.started = time.time()
        self._service: _Service | None = None
        self._bridge: BlockingBridge[_Service] = BlockingBridge(self._open, start_timeout=60.0,
                                                                name=f"mnemex {self.name}")

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[_Service]:
        service = self._service = _Service(self)
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            await nursery.start(service.streams.run_reaper)
            try:
                yield service
            finally:
                nursery.cancel_scope.cancel()

    def _call(self, fn: Callable[[_Service], Awaitable[T]]) -> T:
        """Run ``fn(service)`` in the shard's trio thread and wait for it. Ray runs the
        shard's methods on a pool of threads (a threaded actor: one hop into trio and
        one back per call, where an asyncio actor would add two through its loop)."""
        service = self._bridge.runtime

        async def run() -> T:
            return await fn(service)

        return self._bridge.call(run)

    # -- what clients call ------------------------------------------------------------------
    def ask(self, kind: str, body: bytes, request_id: str | None = None) -> tuple[bool, bytes]:
        """One wire command for one actor: ``(True, reply JSON)`` or ``(False, error JSON)``."""
        try:
            return self._call(lambda service: _ask(service, kind, body, request_id))
        except MnemexError as exc:
            return False, encode_error(exc)

    def streams(self, op: str, *args: Any) -> tuple[bool, Any]:
        """A live-stream call of a front (``mnemex.ray.streams.stream_call``): ``(True,
        value)`` or ``(False, error JSON)``. Called in the STREAMS_GROUP threads."""
        try:
            return True, self._call(lambda service: service.streams.serve(
                op, args, lambda kind, key: _owning(service, kind, key)))
        except MnemexError as exc:
            return False, encode_error(exc)

    def deliver(self, kind: str, key: list[str], payload: bytes, request_id: str) -> tuple[bool, bytes]:
        """A command another shard hands over for an actor of this one (a Tell, a
        Forward, an extraction: see ``mnemex.ray.forwarding``), encoded as it crosses
        (``mnemex.remote.crossing``): ``(True, reply JSON)`` or ``(False, error JSON)``."""
        try:
            return self._call(lambda service: _deliver(service, kind, tuple(key), payload, request_id))
        except MnemexError as exc:
            return False, encode_error(exc)

    def assign(self, vshards: list[int], wait: float = 0.0) -> list[int]:
        """Serve ``vshards`` too (their leases are taken as soon as they are free);
        waits up to ``wait`` seconds for all of them; returns those held now."""

        async def run(service: _Service) -> list[int]:
            with trio.move_on_after(wait):
                await service.ready.wait()
            if service.keeper is None:
                return []
            keeper = service.keeper
            service.leaving.difference_update(vshards)
            keeper.assign(vshards)
            wanted = set(vshards)
            with trio.move_on_after(wait):
                while not wanted <= set(keeper.held):
                    await trio.sleep(0.02)
            return sorted(wanted & set(keeper.held))

        return self._call(run)

    def give_up(self, vshards: list[int]) -> None:
        """Stop serving ``vshards``: their live actors snapshotted, their leases released."""

        async def run(service: _Service) -> None:
            if service.keeper is not None:
                service.leaving.update(vshards)
                await service.keeper.give_up(vshards)

        self._call(run)

    def held(self) -> list[int]:
        return self._call(_held)

    def health(self) -> ShardHealth:
        return self._call(lambda service: _health(self, service))

    def scope_keys(self) -> list[tuple[str, str]]:
        async def run(service: _Service) -> list[tuple[str, str]]:
            if service.rt is None:
                raise MnemexError(f"{self.name} is {service.state}")
            return service.rt.scope_keys()

        return self._call(run)

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        """Shut the runtime down cleanly: mailboxes drained, actors snapshotted."""
        self._bridge.close()


def _ray_node_id() -> str | None:
    """The Ray node this process runs on (None outside Ray)."""
    try:
        import ray

        if ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())
    except Exception:
        return None
    return None


async def _health(shard: Shard, service: _Service) -> ShardHealth:
    # a function, not a method: one coroutine method would make Ray run Shard as an
    # asyncio actor, whose plain methods then block its one event loop, one call at a time
    keeper, rt = service.keeper, service.rt
    return ShardHealth(name=shard.name, owner=shard.owner, pid=os.getpid(), node=shard.node,
                       node_id=shard.node_id, state=service.state,
                       problem=service.problem, held=len(keeper.held) if keeper else 0,
                       assigned=len(keeper._wanted) if keeper else 0,
                       leases_lost=keeper.lost if keeper else 0,
                       live_actors=len(rt.kernel.live_keys()) if rt else 0, started=shard.started,
                       stats=rt.stats().as_dict() if rt else {},
                       journal=rt.journal_health() if rt else {},
                       streams=len(service.streams.hub), feeds=service.streams.feeds)


async def _held(service: _Service) -> list[int]:
    return service.keeper.held if service.keeper is not None else []


async def _ask(service: _Service, kind: str, raw: bytes, request_id: str | None) -> tuple[bool, bytes]:
    body_type = wire.ask_request_type(kind)
    if body_type is None:
        raise InvalidInput(f"no actor kind {kind!r} crosses the wire", field="kind")
    try:
        body = msgspec.json.decode(raw, type=body_type)
    except msgspec.MsgspecError as exc:
        raise InvalidInput(f"a {kind} request does not decode: {exc}", field="command") from exc
    key = tuple(body.key)
    rt = service.check(kind, key)
    command = wire.to_actor(body.command)
    _check_vectors(rt, command)
    if request_id is not None and kind in service.deduplicated:
        # a write is applied once per id; a read (archiving) only names its effects' ids by it
        command = Requested(check_request_id(request_id), command)
    timeout: Any = body.timeout if body.timeout is not None else mnemex.DEFAULT
    try:
        reply = await rt.kernel.ask(kind, key, command, timeout=timeout)
    except NotOwner as exc:
        raise await _hinted(service, exc) from None
    if type(reply) is Repeated or type(reply) is crossing.Relayed:
        return True, reply.reply
    if isinstance(body.command, wire.APPENDS):  # what hangs on appends (automatic extraction) runs
        sent = body.command.messages if isinstance(body.command, wire.APPENDS[0]) else body.command.items
        await rt.note_append(key[0], reply, sum(len(message) for message in sent) // 4)
    return True, _encode(reply)


async def _deliver(service: _Service, kind: str, key: tuple[str, ...], payload: bytes,
                   request_id: str) -> tuple[bool, bytes]:
    rt = service.check(kind, key)
    actor_kind = rt.kinds.get(kind)
    if actor_kind is None:
        raise InvalidInput(f"no actor kind {kind!r} here", field="kind")
    forwarder = service.forwarder
    assert forwarder is not None
    command = crossing.decode_crossing(payload, actor_kind.decode, forwarder.ask_agent)
    if kind in service.deduplicated:
        command = Requested(check_request_id(request_id), command)
    try:
        reply = await rt.kernel.ask(kind, key, command)
    except NotOwner as exc:
        raise await _hinted(service, exc) from None
    if type(reply) is Repeated or type(reply) is crossing.Relayed:
        return True, reply.reply
    return True, _encode(reply)


async def _owning(service: _Service, kind: str, key: tuple[str, ...]) -> MnemexRuntime:
    """The runtime, if this shard serves ``kind``/``key`` now; else NotOwner, with the
    owner as its hint when the lease on record names one."""
    rt = service.check(kind, key)
    ownership = rt.kernel.ownership
    if ownership is not None:
        try:
            ownership.check(kind, key)
        except NotOwner as exc:
            raise await _hinted(service, exc) from None
    return rt


async def _hinted(service: _Service, error: NotOwner) -> NotOwner:
    """``error`` with the virtual shard's current holder as its owner hint, when the
    lease on record names one that has not lapsed (the caller goes there next)."""
    leases = service.leases
    if error.owner is not None or leases is None:
        return error
    try:
        lease = await trio.to_thread.run_sync(leases.holder, error.vshard)
    except MnemexError:
        return error
    if lease is None or lease.owner == service.shard.owner or lease.expires <= time.time():
        return error
    return NotOwner(f"{error} (held by {lease.owner})", vshard=error.vshard, owner=lease.owner,
                    epoch=lease.epoch)


def _check_vectors(rt: MnemexRuntime, command: Any) -> None:
    """Vectors of another model never enter a scope (as the HTTP server checks)."""
    named = getattr(command, "embedder", None)
    if named is None or not isinstance(command, wire.VECTORS_OF_THE_SCOPE):
        return
    ours = rt.scope_services().embedder
    dim = getattr(command, "dim", 0)
    if (named, dim) != (ours.name, ours.dim):
        raise InvalidInput(f"the command carries vectors of {named!r} (dim {dim}); this cluster embeds with "
                           f"{ours.name!r} (dim {ours.dim})", field="command.embedder")
