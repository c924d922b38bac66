"""``mnemex.ray.open_runtime``: the public API over a cluster of shard actors on Ray.

The refs are the remote clients' (``mnemex.remote``): a call validates, stamps and
embeds here, and only the typed command crosses, to the shard serving its key's
virtual shard. ``RayHost`` routes it and keeps retrying until the call's timeout:

* a shard that does not own the key answers NotOwner (with the current owner as a
  hint when it knows one): the call goes to the hint, else to the placement's
  shard again after a short pause (a lease being taken over, a shard starting);
* a shard whose process died (Ray's ``RayActorError``: killed, its node lost) is
  restarted by Ray (``max_restarts=-1``): the call is sent again once it serves.

Every attempt of one call carries the same request id, and shards apply a request
id once (``mnemex.ray.requests``): a write whose reply was lost is not applied
twice when retried. The transport is at most once; the journal before the reply
makes the retry safe (see the README, "Beyond one machine").
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, NoReturn, cast

import msgspec
import trio

import mnemex
from mnemex import ActorClosed, Config, Extracted, InvalidInput, MnemexError, NotOwner, Timeout
from mnemex.client import Client as _Client
from mnemex.config import DEFAULT, UseDefault
from mnemex.lowlevel import VSHARDS, BlockingBridge, Key, Subscription, scope_kind, vshard_of
from mnemex.ray.placement import Placement, create_cluster, read_cluster, read_placement, write_placement
from mnemex.ray.requests import DEFAULT_LIMIT
from mnemex.ray.shard import NAMESPACE, Shard, ShardHealth, actor_name, shard_name
from mnemex.remote import HostRef, RemoteRuntime, crossing, open_wire_runtime, wire

__all__ = ["Client", "RayHost", "RayRuntime", "open_runtime", "stop_cluster"]

log = logging.getLogger("mnemex.ray")

_NAMESPACE: Final = NAMESPACE
_HINT_WAIT: Final = 5.0
_encoder = msgspec.json.Encoder()


class _ErrorBody(msgspec.Struct, frozen=True):
    error: str = ""
    type: str | None = None
    vshard: int | None = None
    owner: str | None = None
    epoch: int | None = None


def _error_of(payload: bytes) -> MnemexError:
    said = msgspec.json.decode(payload, type=_ErrorBody)
    if said.type == "NotOwner" and said.vshard is not None:
        return NotOwner(said.error, vshard=said.vshard, owner=said.owner, epoch=said.epoch)
    return wire.error_of(500, payload)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise InvalidInput("mnemex.ray needs Ray: pip install 'mnemex[ray]'", field="ray") from exc
    return ray


async def wait_for(object_ref: Any) -> Any:
    """The value of a Ray ObjectRef, awaited from trio (no thread: Ray settles a
    Future, which wakes this task). Raises what Ray raises for it."""
    future = object_ref.future()
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def settled(_: Any) -> None:
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:
            pass

    future.add_done_callback(settled)
    await done.wait()
    return future.result()


class RayRef(HostRef):
    """An actor of the cluster: ``ask`` and ``tell`` go to the shard serving it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"RayRef({self.kind!r}, {self.key!r})"


class RayHost:
    """Routes commands to the shard actors by virtual shard (the ``Host`` protocol)."""

    def __init__(self, config: Config, shards: list[Any], placement: Placement, address: str, *,
                 kinds: tuple[str, ...] = (wire.AGENT, wire.SCOPE, wire.STATE, wire.CHECKPOINT),
                 data_dir: Path | None = None, nursery: trio.Nursery | None = None) -> None:
        self._config = config
        self._nursery = nursery
        self.shards = shards
        self.placement = placement
        self.data_dir = data_dir
        self._read_at = -math.inf
        self.url = f"ray://{address}"
        self.kinds = kinds
        self.closed = False
        self.retries = 0
        """Attempts sent again so far (a moved virtual shard, a restarting shard)."""

    @property
    def config(self) -> Config:
        return self._config

    def ref(self, kind: str, key: str | Key) -> RayRef:
        if kind not in self.kinds:
            raise InvalidInput(f"actor kind {kind!r} is not served by the cluster; it serves "
                               f"{', '.join(self.kinds)}", field="kind")
        if isinstance(key, str):
            key = (key,)
        if not isinstance(key, tuple) or not key or not all(isinstance(p, str) and p for p in key):
            raise InvalidInput(f"an actor key is a tuple of non-empty strings, got {key!r}", field="key")
        return RayRef(self, kind, key)

    def live_keys(self, kind: str | None = None) -> list[tuple[str, Key]]:
        raise InvalidInput("live_keys runs in-process only; each shard's health() counts its live actors",
                           field="live_keys")

    def shard_of_owner(self, owner: str | None) -> int | None:
        """The shard index an owner name (``shard-<i>/...``) belongs to."""
        if not owner or not owner.startswith("shard-"):
            return None
        head = owner.split("/", 1)[0][len("shard-"):]
        index = int(head) if head.isdigit() else -1
        return index if 0 <= index < len(self.shards) else None

    async def refresh_placement(self) -> None:
        """Read the placement again (another driver may have moved a virtual shard),
        at most twice a second."""
        if self.data_dir is None or trio.current_time() - self._read_at < 0.5:
            return
        self._read_at = trio.current_time()
        try:
            placement = await trio.to_thread.run_sync(read_placement, self.data_dir)
        except MnemexError as exc:
            log.warning("the placement could not be read again: %s", exc)
            return
        if placement is not None and placement.version > self.placement.version:
            self.placement = placement

    def _limit(self, timeout: float | UseDefault | None) -> float:
        if timeout is DEFAULT:
            return self._config.kernel.ask_timeout
        if timeout is None:
            return math.inf
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidInput(f"timeout must be a number of seconds > 0, None or DEFAULT, got {timeout!r}",
                               field="timeout")
        return float(timeout)

    async def ask(self, kind: str, key: str | Key, command: Any, *,
                  timeout: float | UseDefault | None = DEFAULT) -> Any:
        """Send ``command`` to the shard serving the actor and return its typed reply,
        re-routing and retrying (with one request id) until ``timeout``."""
        if self.closed:
            raise ActorClosed("the cluster client is closed")
        ref = self.ref(kind, key)
        row, sent = wire.to_wire(command)
        if row.kind != kind:
            raise InvalidInput(f"{type(command).__name__} is a command of {row.kind} actors, not of {kind}",
                               field="command")
        limit = self._limit(timeout)
        body = _encoder.encode({"key": list(ref.key), "command": sent})
        request_id = uuid.uuid4().hex
        what = type(command).__name__
        index, payload = await self.route(
            kind, ref.key, lambda shard: shard.ask.remote(kind, body, request_id), limit=limit, what=what)
        try:
            return msgspec.json.decode(payload, type=row.reply)
        except msgspec.MsgspecError as exc:
            raise MnemexError(f"{shard_name(index)} answered {what} with what is not a {row.reply!r}: "
                              f"{exc}") from exc

    async def deliver(self, kind: str, key: Key, payload: bytes, request_id: str, *, limit: float,
                      what: str, gone: Callable[[], bool] | None = None) -> bytes:
        """Hand a command encoded for crossing (``mnemex.ray.crossing``) to the actor's
        shard, as a Forward, a Tell or an extraction does, re-routing and retrying
        with ``request_id`` for up to ``limit`` seconds, or until ``gone()`` (its
        caller gave up); the reply, as JSON."""
        _, reply = await self.route(kind, key, lambda shard: shard.deliver.remote(kind, list(key), payload,
                                                                                  request_id),
                                    limit=limit, what=what, gone=gone)
        return reply

    async def route(self, kind: str, key: Key, send: Callable[[Any], Any], *, limit: float, what: str,
                    gone: Callable[[], bool] | None = None) -> tuple[int, bytes]:
        """``send(shard)`` (a Ray call answering ``(ok, JSON)``) to the shard serving
        actor ``(kind, key)`` until one answers: on NotOwner to the hint or the placement
        again, on a dead shard again once Ray restarted it, for up to ``limit`` seconds
        (or until ``gone()``). The shard's index and its reply; its error raised."""
        index, reply = await self.route_vshard(vshard_of(kind, key), f"{kind} {'/'.join(key)!r}", send,
                                               limit=limit, what=what, gone=gone)
        return index, cast(bytes, reply)

    async def route_vshard(self, vshard: int, name: str, send: Callable[[Any], Any], *, limit: float,
                           what: str, gone: Callable[[], bool] | None = None, retry_dead: bool = True,
                           error_of: Callable[[Any], MnemexError] | None = None) -> tuple[int, Any]:
        """``route`` for virtual shard ``vshard`` (``name`` says what is served, in
        errors). A shard that is down is waited for only with ``retry_dead``, else it is
        ActorClosed at once; ``error_of`` reads an error answer (the wire's by default)."""
        read_error = _error_of if error_of is None else error_of
        deadline = trio.current_time() + limit
        target: int | None = None
        pause = 0.02
        last: BaseException | None = None
        ray = _ray()
        while True:
            index = target if target is not None else self.placement.owners[vshard]
            # a hinted shard (not the placement's) gets a few seconds only: the lease on
            # record may be a frozen owner's, about to lapse
            until = deadline if target is None else min(deadline, trio.current_time() + _HINT_WAIT)
            target = None
            with trio.move_on_at(until):
                try:
                    ok, payload = await wait_for(send(self.shards[index]))
                except ray.exceptions.RayTaskError as exc:  # the shard's method raised: a bug, not a fault
                    raise MnemexError(f"{shard_name(index)} failed on {what}: {exc}") from exc
                except ray.exceptions.RayError as exc:  # died (restarting), unavailable for now, lost
                    down = ActorClosed(f"{shard_name(index)}, which serves virtual shard {vshard}, is down "
                                       f"({type(exc).__name__})")
                    if not retry_dead:
                        raise down from exc
                    last = down
                    last.__cause__ = exc
                else:
                    if ok:
                        return index, payload
                    error = read_error(payload)
                    if not isinstance(error, NotOwner) or error.vshard != vshard:
                        raise error
                    last = error
                    await self.refresh_placement()  # another driver may have moved it
                    placed = self.placement.owners[vshard]
                    hinted = self.shard_of_owner(error.owner)
                    if placed != index:
                        target = placed
                    elif hinted is not None and hinted != index:
                        target = hinted
            if trio.current_time() + pause >= deadline or (gone is not None and gone()):
                raise Timeout(f"no shard served {name} (virtual shard {vshard}) "
                              f"within {limit:g} s; last: {last}; a write may have been applied, and "
                              f"retrying it is safe only through the same call") from last
            self.retries += 1
            await trio.sleep(pause)
            pause = min(pause * 2, 0.25)

    async def tell(self, kind: str, key: str | Key, command: Any) -> None:
        """Send ``command`` and drop its reply (carried out before this returns)."""
        await self.ask(kind, key, command)

    async def subscribe(self, kind: str, key: str | Key, topic: str, command: Any = None, *,
                        buffer: int = 1024, timeout: float | UseDefault | None = DEFAULT) -> Subscription:
        """A session's live feed, read from the shard serving the agent
        (``mnemex.ray.streams``)."""
        from mnemex.ray.streams import subscribe_feed

        if self.closed or self._nursery is None:
            raise ActorClosed("the cluster client is closed")
        return await subscribe_feed(self, self._nursery, kind, key, topic, command=command, buffer=buffer,
                                    timeout=timeout)


def _unsupported(call: str, instead: str) -> NoReturn:
    raise InvalidInput(f"{call} is not available on a Ray cluster yet; {instead}", field=call)


class RayRuntime(RemoteRuntime):
    """The calls of ``MnemexRuntime`` over a cluster of shards; made by
    ``mnemex.ray.open_runtime``. Besides them: ``health()``, ``rebalance()``."""

    _host: RayHost

    def __init__(self, host: Any, scopes: Any, agents: Any, info: wire.RuntimeInfo) -> None:
        super().__init__(host, scopes, agents, info)
        self.data_dir: Path | None = None

    @property
    def host(self) -> RayHost:
        return self._host

    @property
    def placement(self) -> Placement:
        return self._host.placement

    async def health(self) -> list[ShardHealth | None]:
        """Each shard's ShardHealth; None for a shard that did not answer within
        ``kernel.ask_timeout`` (dead, restarting, frozen)."""
        out: list[ShardHealth | None] = [None] * len(self._host.shards)

        async def one(index: int) -> None:
            with trio.move_on_after(self.config.kernel.ask_timeout):
                try:
                    out[index] = await wait_for(self._host.shards[index].health.remote())
                except Exception:
                    out[index] = None

        async with trio.open_nursery() as nursery:
            for index in range(len(out)):
                nursery.start_soon(one, index)
        return out

    async def rebalance(self, vshard: int, to_shard: int, *, wait: float = 30.0) -> list[int]:
        """Move virtual shard ``vshard`` to shard ``to_shard``: the placement is
        written, the old shard snapshots its actors and releases the lease, the new
        one takes it (waiting up to ``wait`` seconds). Calls meanwhile are re-routed
        and retried; none is lost or applied twice. Returns what the new shard holds
        of it ([vshard] once moved)."""
        if type(vshard) is not int or not 0 <= vshard < VSHARDS:
            raise InvalidInput(f"vshard must be an int from 0 to {VSHARDS - 1}, got {vshard!r}",
                               field="vshard")
        if type(to_shard) is not int or not 0 <= to_shard < len(self._host.shards):
            raise InvalidInput(f"to_shard must be an int from 0 to {len(self._host.shards) - 1}, got "
                               f"{to_shard!r}", field="to_shard")
        host = self._host
        before = host.placement.owners[vshard]
        if before == to_shard:
            return [vshard]
        await host.refresh_placement()
        moved = host.placement.moved(vshard, to_shard)
        if self.data_dir is not None:
            await trio.to_thread.run_sync(write_placement, self.data_dir, moved)
        host.placement = moved
        held: list[int] = []

        async def give_up() -> None:
            try:
                await wait_for(host.shards[before].give_up.remote([vshard]))
            except Exception as exc:  # a dead shard's lease lapses by itself
                log.warning("%s did not give virtual shard %d up (%r); the new owner takes it when its "
                            "lease lapses", shard_name(before), vshard, exc)

        async def take(nursery: trio.Nursery) -> None:
            held.extend(await wait_for(host.shards[to_shard].assign.remote([vshard], wait)))
            nursery.cancel_scope.cancel()  # a frozen old owner answers late: its lease lapsed

        # both at once: the new owner takes the lease as soon as the old one releases it
        # (after snapshotting its actors), or when it lapses if the old one cannot answer
        with trio.move_on_after(wait + 5.0):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(give_up)
                nursery.start_soon(take, nursery)
        return held

    async def shard_pids(self) -> list[int]:
        """The process id of each shard (tests, operators)."""
        return [await wait_for(shard.pid.remote()) for shard in self._host.shards]

    async def scope_keys(self, kind: str = "scope") -> list[tuple[str, str]]:
        """Every scope of the cluster as ``(app_name, user_id)``, sorted."""
        self.scope_services(kind)
        keys: list[tuple[str, str]] = await wait_for(self._host.shards[0].scope_keys.remote())
        return [(app, user) for app, user in keys]

    async def extract(self, agent_name: str, session_id: str, *, user_id: str, app_name: str,
                      if_needed: bool = False) -> Extracted:
        """Extract facts from session ``session_id`` of agent ``agent_name`` into the
        long-term memory of (app_name, user_id) (see ``MnemexRuntime.extract``): the
        scope's shard runs the job, which reads the session on the agent's shard."""
        for what, value in (("agent_name", agent_name), ("session_id", session_id),
                            ("user_id", user_id), ("app_name", app_name)):
            if not isinstance(value, str) or not value:
                raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
        if self.config.conversations.retain != "all":
            raise InvalidInput("extracting an agent's sessions needs config.conversations.retain = \"all\"",
                               field="conversations.retain")
        agent = self.agent(agent_name)
        known = (await agent.entries(session_id, None, 0, 0)).total
        host, key = self._host, (app_name, user_id)

        async def deliver(payload: bytes) -> bytes:
            return await host.deliver(wire.SCOPE, key, payload, uuid.uuid4().hex,
                                      limit=self.config.kernel.ask_timeout, what="ExtractSession")

        return await crossing.extract_agent_session(deliver, agent.entries, (wire.AGENT, agent_name),
                                                    session_id, known, if_needed=if_needed)

    def extract_automatically(self, agent_name: str, *, app_name: str, user_id: str,
                              session_id: str | None = None, turns: int | None = None,
                              tokens: int | None = None) -> None:
        _unsupported("extract_automatically", "list the sessions in config.knowledge.auto of the config the "
                                              "cluster is opened with: its shards extract them")


def _info(config: Config, kinds: list[str], embedder: Any) -> wire.RuntimeInfo:
    return wire.RuntimeInfo(protocol=wire.PROTOCOL, version=mnemex.__version__, kinds=kinds,
                            embedder=wire.EmbedderInfo(embedder.name, embedder.dim),
                            ask_timeout=config.kernel.ask_timeout, memories=config.memories,
                            conversations=config.conversations, knowledge=config.knowledge,
                            models=config.models)


def start_shards(ray: Any, data_dir: Path, cluster: str, shards: int, config: Config, *, ttl: float,
                 retry: float, margin: float, limit: int, options: dict[str, Any]) -> list[Any]:
    """The shard actors of ``cluster``: the running ones (by name), else started.
    ``max_task_retries=0``: a call whose shard died is retried by the client, with
    its request id, never blindly by Ray."""
    from mnemex.ray.streams import STREAMS_GROUP, STREAMS_THREADS

    # stream calls wait for chunks: a group of threads of their own, never those of commands
    actor = ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=256,
                       concurrency_groups={STREAMS_GROUP: STREAMS_THREADS})(Shard)
    handles = []
    for index in range(shards):
        name = actor_name(cluster, index)
        handles.append(actor.options(name=name, namespace=_NAMESPACE, get_if_exists=True, **options).remote(
            index, str(data_dir), cluster, config, ttl=ttl, retry=retry, margin=margin, limit=limit))
    return handles


@asynccontextmanager
async def open_runtime(config: Config, *, address: str | None = None, shards: int = 2,
                       data_dir: str | None = None, ttl: float = 15.0, retry: float = 0.5,
                       margin: float = 2.0, limit: int = DEFAULT_LIMIT,
                       actor_options: dict[str, Any] | None = None, detached: bool = False,
                       timeout: float = 120.0) -> AsyncIterator[RayRuntime]:
    """Run mnemex on the Ray cluster at ``address`` (None: the one ``ray.init``
    connected to already, else a local one) as ``shards`` shard actors over the
    shared data directory ``data_dir`` (default ``config.data_dir``; every
    node must mount it at that path, and so must this process). The first open
    creates the cluster there; later opens (this process restarted, another
    driver) reach its running shards by name. ``ttl`` is each lease's length: a
    shard whose process died is served again by its restart within about ``ttl``
    seconds. ``actor_options`` go to Ray's ``.options()`` (resources, scheduling).
    On exit the shards are shut down cleanly (drained, snapshotted), unless
    ``detached``: then they outlive this driver (Ray's detached lifetime), for
    other drivers to reach, until stopped with ``mnemex.ray.stop_cluster``."""
    ray = _ray()
    path = data_dir if data_dir is not None else config.data_dir
    if path is None:
        raise InvalidInput("a Ray cluster needs a shared data directory: data_dir= or config.data_dir",
                           field="data_dir")
    if type(shards) is not int or not 1 <= shards <= VSHARDS:
        raise InvalidInput(f"shards must be an int from 1 to {VSHARDS}, got {shards!r}", field="shards")
    if not (isinstance(ttl, int | float) and isinstance(margin, int | float) and ttl > margin > 0):
        raise InvalidInput(f"a lease's ttl ({ttl!r} s) must exceed its margin ({margin!r} s), which must "
                           f"be > 0", field="ttl")
    if not (isinstance(retry, int | float) and retry > 0):
        raise InvalidInput(f"retry must be a number of seconds > 0, got {retry!r}", field="retry")
    if type(limit) is not int or limit < 1:
        raise InvalidInput(f"limit must be an int >= 1, got {limit!r}", field="limit")
    root = Path(path).resolve()
    embedder = (await trio.to_thread.run_sync(scope_kind, config)).embedder  # the shards' (one load here)
    info, placement = await trio.to_thread.run_sync(create_cluster, root, shards)
    if not ray.is_initialized():
        await trio.to_thread.run_sync(lambda: ray.init(address=address, namespace=_NAMESPACE,
                                                       log_to_driver=False))
    options = dict(actor_options or {})
    if detached:
        options["lifetime"] = "detached"
    handles = start_shards(ray, root, info.cluster, shards, config, ttl=ttl, retry=retry, margin=margin,
                           limit=limit, options=options)
    with trio.fail_after(timeout):
        for index, handle in enumerate(handles):
            await wait_for(handle.assign.remote(placement.vshards_of(index), timeout))
    kinds = [wire.AGENT, wire.SCOPE, wire.STATE, wire.CHECKPOINT]
    where = address or "the local Ray cluster"

    def make_host(cfg: Config, nursery: trio.Nursery) -> RayHost:
        return RayHost(cfg, handles, placement, where, kinds=tuple(kinds), data_dir=root, nursery=nursery)

    info_sent = _info(config, kinds, embedder)
    try:
        async with open_wire_runtime(make_host, info_sent, config.replace(data_dir=str(root)), where=where,
                                     embedder=embedder, runtime_type=RayRuntime) as rt:
            rt.data_dir = root
            yield rt
    finally:
        if not detached:
            with trio.CancelScope(shield=True):
                await _stop(ray, handles, config.kernel.shutdown_timeout)


async def _stop(ray: Any, handles: list[Any], timeout: float) -> None:
    for handle in handles:
        with trio.move_on_after(timeout):
            try:
                await wait_for(handle.close.remote())
            except Exception:  # a dead shard has nothing to close
                pass
        ray.kill(handle, no_restart=True)


async def stop_cluster(data_dir: str, *, address: str | None = None, timeout: float = 30.0) -> int:
    """Shut down the (detached) shards of the cluster in ``data_dir`` cleanly; how many."""
    ray = _ray()
    info = await trio.to_thread.run_sync(read_cluster, Path(data_dir).resolve())
    if info is None:
        raise InvalidInput(f"{data_dir} holds no mnemex cluster", field="data_dir")
    if not ray.is_initialized():
        await trio.to_thread.run_sync(lambda: ray.init(address=address, namespace=_NAMESPACE,
                                                       log_to_driver=False))
    handles = []
    for index in range(info.shards):
        try:
            handles.append(ray.get_actor(actor_name(info.cluster, index), namespace=_NAMESPACE))
        except ValueError:
            continue  # not running
    await _stop(ray, handles, timeout)
    return len(handles)


class Client(_Client):
    """``mnemex.Client`` over a Ray cluster: the same blocking calls, routed to the
    shards (see ``open_runtime``). ``client.runtime`` is the RayRuntime; its
    ``rebalance``/``health`` run through ``client.call``."""

    def __init__(self, config: Config, *, address: str | None = None, shards: int = 2,
                 data_dir: str | None = None, start_timeout: float = 180.0, **options: Any) -> None:
        def opener() -> Any:
            return open_runtime(config, address=address, shards=shards, data_dir=data_dir,
                                timeout=start_timeout, **options)

        self._bridge = BlockingBridge(opener, start_timeout=start_timeout)

    @property
    def cluster(self) -> RayRuntime:
        runtime = self._bridge.runtime
        assert isinstance(runtime, RayRuntime)
        return runtime

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """Run ``await fn(*args)`` (a RayRuntime call) and return its result."""
        return self._bridge.call(fn, *args, timeout=timeout)

    def rebalance(self, vshard: int, to_shard: int, *, wait: float = 30.0) -> list[int]:
        """Move a virtual shard to another shard (see ``RayRuntime.rebalance``)."""
        return self.call(lambda: self.cluster.rebalance(vshard, to_shard, wait=wait))  # type: ignore[no-any-return]

    def health(self) -> list[ShardHealth | None]:
        """Each shard's health (see ``RayRuntime.health``)."""
        return self.call(self.cluster.health)  # type: ignore[no-any-return]
