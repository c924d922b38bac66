"""``mnemex.connect(url)``: the runtime's public calls against a ``mnemex serve``.

The refs are the in-process ones (``AgentRef``, ``ScopeRef``) over a ``RemoteHost``,
so a call validates, stamps and embeds exactly as in-process, on the client:
texts and queries are embedded here, with the server's embedder (checked at
connect), and only the typed command crosses. What the server does on its own
(snapshots, sweeps, extraction jobs, summaries) stays there. Access counts of
searches are batched and sent every ``memories.touch_interval`` as in-process.

Scopes, agents, key-value state and graph checkpoints cross (``wire.ASK``). In-process
only (they raise InvalidInput naming the call): ``extract_automatically``
(configure ``knowledge.auto`` on the server), ``retry_extraction``,
``ScopeRef.extract_from``/``retry_dead_letter`` (they read the caller's
conversation through a callable), ``Checkpoints.threads``/``delete_runs`` (they
list the data directory), ``live_keys``, ``passivate``, ``stats``,
``journal_health`` and ``kernel``; and actor kinds of one's own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import IO, Any, Final, NoReturn, Protocol, TypeVar

import httpx
import msgspec
import trio

from mnemex._ids import IdClock
from mnemex.checkpoints.kind import CHECKPOINT_KIND
from mnemex.checkpoints.ref import Checkpoints
from mnemex.config import DEFAULT, Config, UseDefault
from mnemex.conversations.kind import AGENT_KIND
from mnemex.conversations.protocol import Policy
from mnemex.conversations.ref import AgentRef, AgentServices
from mnemex.effects import Key
from mnemex.errors import ActorClosed, InvalidInput, MnemexError, Timeout
from mnemex.kernel import ActorRef, Subscription
from mnemex.memories.kind import SCOPE_KIND, scope_kind
from mnemex.memories.protocol import Extracted, SearchMode, SearchResult, SessionAdded
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
from mnemex.models.embedders import embedder_from_config
from mnemex.models.hashing import Embedder
from mnemex.models.rerankers import reranker_from_config
from mnemex.remote import wire
from mnemex.remote.host import RemoteHost
from mnemex.state.ref import StateRef

__all__ = ["RemoteRuntime", "WireHost", "connect", "open_wire_runtime"]

_POOL: Final = httpx.Limits(max_connections=64, max_keepalive_connections=32, keepalive_expiry=30.0)


def _in_process_only(call: str, instead: str) -> NoReturn:
    raise InvalidInput(f"{call} runs in-process only, not against a remote mnemex server; {instead}",
                       field=call)


class WireHost(Protocol):
    """What a remote runtime's refs run over (``mnemex._host.Host``, plus where it
    is, the kinds it reaches and whether it was closed)."""

    closed: bool

    @property
    def url(self) -> str: ...

    @property
    def kinds(self) -> tuple[str, ...]: ...

    @property
    def config(self) -> Config: ...

    def ref(self, kind: str, key: str | Key) -> ActorRef: ...

    async def ask(self, kind: str, key: str | Key, command: Any, *,
                  timeout: float | UseDefault | None = DEFAULT) -> Any: ...

    async def tell(self, kind: str, key: str | Key, command: Any) -> None: ...

    async def subscribe(self, kind: str, key: str | Key, topic: str, command: Any = None, *,
                        buffer: int = 1024, timeout: float | UseDefault | None = DEFAULT) -> Subscription: ...

    def live_keys(self, kind: str | None = None) -> list[tuple[str, Key]]: ...


class RemoteRuntime:
    """The calls of ``MnemexRuntime`` that make sense over HTTP, against one server.
    Made by ``mnemex.connect``; cheap refs, one pool of keep-alive connections."""

    def __init__(self, host: WireHost, scopes: ScopeServices, agents: AgentServices,
                 info: wire.RuntimeInfo) -> None:
        self._host = host
        self._scopes = scopes
        self._agents = agents
        self.info = info
        """What the server said of itself at connect (version, embedder, limits)."""

    @property
    def url(self) -> str:
        return self._host.url

    @property
    def config(self) -> Config:
        """The client's config: its own, with the server's memories, conversations and
        knowledge sections (the limits and defaults the refs apply)."""
        return self._host.config

    @property
    def embedder(self) -> Embedder:
        return self._scopes.embedder

    def _http(self) -> RemoteHost:
        if not isinstance(self._host, RemoteHost):
            raise TypeError(f"{type(self).__name__} over {type(self._host).__name__} must override this call")
        return self._host

    # -- the refs
    def agent(self, name: str, *, policy: Policy | UseDefault | None = DEFAULT,
              ttl: float | UseDefault | None = DEFAULT) -> AgentRef:
        """The short-term memory of agent ``name`` on the server (see ``MnemexRuntime.agent``)."""
        return AgentRef(self._agents, name, policy=policy, ttl=ttl)

    def scope(self, *, user_id: str, app_name: str) -> ScopeRef:
        """The long-term memory of ``user_id`` in ``app_name`` on the server."""
        return ScopeRef(self._scopes, user_id=user_id, app_name=app_name)

    def state(self, *, app_name: str, user_id: str | None = None) -> StateRef:
        """The key-value state of ``app_name`` (``user_id`` None) or of one user in it, on
        the server (see ``MnemexRuntime.state``)."""
        return StateRef(self._host, app_name=app_name, user_id=user_id)

    def checkpoints(self, kind: str = CHECKPOINT_KIND) -> Checkpoints:
        """The checkpoints of graph threads on the server (see ``MnemexRuntime.checkpoints``;
        ``threads()`` lists what the server holds: in-process only)."""
        if kind not in self._host.kinds:
            raise InvalidInput(f"actor kind {kind!r} is not served remotely", field="kind")
        return Checkpoints(self._host, kind)

    def scope_services(self, kind: str = SCOPE_KIND) -> ScopeServices:
        if kind != SCOPE_KIND:
            raise InvalidInput(f"actor kind {kind!r} is not served remotely", field="kind")
        return self._scopes

    # -- across scopes
    async def search(self, query: str, scopes: Iterable[tuple[str, str]], top_k: int = 10, *,
                     mode: SearchMode | UseDefault = DEFAULT, min_score: float | UseDefault | None = DEFAULT,
                     filter: Mapping[str, Any] | None = None, include_history: bool = False,
                     as_of: float | str | datetime | None = None) -> SearchResult:
        """Search several scopes at once into one ranking (see ``MnemexRuntime.search``)."""
        return await search_scopes(self._scopes, query, scopes, top_k, mode=mode, min_score=min_score,
                                   filter=filter, include_history=include_history, as_of=as_of)

    async def remember_many(self, items: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[str]:
        """Store memories in several scopes, all or none (see ``MnemexRuntime.remember_many``)."""
        return await remember_in_scopes(self._scopes, items)

    async def archive(self, agent_name: str, session_id: str, *, user_id: str, app_name: str) -> SessionAdded:
        """Move one session of an agent into the long-term memory of (app_name, user_id)."""
        return await archive_session(self._scopes, AGENT_KIND, agent_name, session_id, user_id=user_id,
                                     app_name=app_name)

    async def extract(self, agent_name: str, session_id: str, *, user_id: str, app_name: str,
                      if_needed: bool = False) -> Extracted:
        """Extract facts from an agent's session on the server (see ``MnemexRuntime.extract``):
        the server reads the session and runs its extractor."""
        for what, value in (("agent_name", agent_name), ("session_id", session_id),
                            ("user_id", user_id), ("app_name", app_name)):
            if not isinstance(value, str) or not value:
                raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
        path = f"/sessions/{_segment(session_id)}/extract"
        body = msgspec.json.encode({"user_id": user_id, "app_name": app_name, "agent": agent_name,
                                    "if_needed": if_needed})
        response = await self._http().post(path, body, None)
        if response.status_code != 200:
            raise wire.error_of(response.status_code, response.content)
        return msgspec.json.decode(response.content, type=Extracted)

    async def extract_if_needed(self, agent_name: str, session_id: str, *, user_id: str,
                                app_name: str) -> Extracted:
        """``extract`` only when the session's buffer is full."""
        return await self.extract(agent_name, session_id, user_id=user_id, app_name=app_name, if_needed=True)

    async def retry_extraction(self, agent_name: str, session_id: str, first: int, *, user_id: str,
                               app_name: str) -> Extracted:
        _in_process_only("retry_extraction", "call it on the server's runtime")

    def extract_automatically(self, agent_name: str, *, app_name: str, user_id: str,
                              session_id: str | None = None, turns: int | None = None,
                              tokens: int | None = None) -> None:
        _in_process_only("extract_automatically", "set config.knowledge.auto on the server")

    # -- moving memories
    async def scope_keys(self, kind: str = SCOPE_KIND) -> list[tuple[str, str]]:
        """Every scope of the server as ``(app_name, user_id)``, sorted."""
        self.scope_services(kind)
        response = await self._http().get("/v1/scopes")
        if response.status_code != 200:
            raise wire.error_of(response.status_code, response.content)
        listed = msgspec.json.decode(response.content, type=wire.ScopeKeys)
        return [(app, user) for app, user in listed.scopes]

    async def export_data(self, out: IO[str], scopes: Iterable[tuple[str, str]] | None = None, *,
                          include_vectors: bool = True) -> ExportHeader:
        """Write the memories of ``scopes`` (None: every scope) to ``out`` as an export."""
        chosen = await self.scope_keys() if scopes is None else list(scopes)
        return await export_scopes(self._scopes, out, chosen, include_vectors=include_vectors)

    async def import_data(self, lines: Iterable[str | bytes]) -> ImportReport:
        """Read an export into the server's scopes, ids preserved."""
        return await import_lines(self._scopes, lines)

    async def flush_touches(self) -> int:
        """Send the access counts searches gathered so far now."""
        return await self._scopes.flush()

    # -- raw commands
    def ref(self, kind: str, key: str | Key) -> ActorRef:
        """A ref to an actor of the server (``agent`` or ``scope``); its ``ask`` takes the
        commands of ``mnemex.remote.wire.ASK``."""
        return self._host.ref(kind, key)

    async def ask(self, kind: str, key: str | Key, command: Any, *,
                  timeout: float | UseDefault | None = DEFAULT) -> Any:
        return await self._host.ask(kind, key, command, timeout=timeout)

    async def tell(self, kind: str, key: str | Key, command: Any) -> None:
        await self._host.tell(kind, key, command)

    async def subscribe(self, kind: str, key: str | Key, topic: str, command: Any = None, *,
                        buffer: int = 1024, timeout: float | UseDefault | None = DEFAULT) -> Subscription:
        return await self._host.subscribe(kind, key, topic, command, buffer=buffer, timeout=timeout)

    def live_keys(self, kind: str | None = None) -> list[tuple[str, Key]]:
        _in_process_only("live_keys", "scope_keys() lists the server's scopes")

    async def passivate(self, kind: str, key: str | Key) -> None:
        _in_process_only("passivate", "the server passivates idle actors by itself")

    def stats(self) -> NoReturn:
        _in_process_only("stats", "GET /health with Accept: application/json gives the server's")

    def journal_health(self) -> NoReturn:
        _in_process_only("journal_health", "GET /health with Accept: application/json gives the server's")

    @property
    def kernel(self) -> NoReturn:
        _in_process_only("kernel", "the kernel runs in the server")

    @property
    def shutdown_report(self) -> None:
        """None: a remote runtime shuts nothing down (the server does, when it stops)."""
        return None


def _segment(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


async def _server_info(http: httpx.AsyncClient, url: str) -> wire.RuntimeInfo:
    try:
        response = await http.get("/v1/runtime")
    except httpx.TimeoutException as exc:
        raise Timeout(f"mnemex server {url} did not answer in time: {exc!r}") from exc
    except httpx.TransportError as exc:
        raise ActorClosed(f"mnemex server {url} is unreachable: {exc!r}") from exc
    if response.status_code == 404:
        raise InvalidInput(f"{url} does not serve /v1/runtime: it is not a mnemex server, or one too old "
                           f"for remote clients", field="url")
    if response.status_code != 200:
        raise wire.error_of(response.status_code, response.content)
    try:
        info = msgspec.json.decode(response.content, type=wire.RuntimeInfo)
    except msgspec.MsgspecError as exc:
        raise InvalidInput(f"{url}/v1/runtime does not describe a mnemex runtime this client reads: {exc}",
                           field="url") from exc
    if info.protocol != wire.PROTOCOL:
        raise InvalidInput(f"{url} speaks the remote protocol {info.protocol}; this client speaks "
                           f"{wire.PROTOCOL} (server mnemex {info.version}): use the same mnemex version",
                           field="url")
    return info


def _effective_config(info: wire.RuntimeInfo, config: Config | None) -> Config:
    base = config if config is not None else Config(models=info.models)
    kernel = msgspec.structs.replace(base.kernel, ask_timeout=info.ask_timeout)
    # the client keeps nothing: its storage settings (a cluster's postgres journal) are the server's
    return base.replace(kernel=kernel, memories=info.memories, conversations=info.conversations,
                        knowledge=info.knowledge, data_dir=None, backend="files")


def _check_embedder(url: str, info: wire.RuntimeInfo, embedder: Embedder) -> None:
    theirs = info.embedder
    if theirs is None:
        raise InvalidInput(f"{url} serves no scope kind with an embedder; a remote client needs one",
                           field="url")
    if (theirs.name, theirs.dim) != (embedder.name, embedder.dim):
        raise InvalidInput(f"{url} embeds with {theirs.name!r} (dim {theirs.dim}) and this client with "
                           f"{embedder.name!r} (dim {embedder.dim}): vectors of two models are never mixed; "
                           f"give mnemex.connect a config whose models section makes the server's "
                           f"(or none: the server's own is used)", field="models.embedder")


@asynccontextmanager
async def connect(url: str, *, token: str | None = None, config: Config | None = None,
                  embedder: Embedder | None = None, timeout: float = 30.0) -> AsyncIterator[RemoteRuntime]:
    """Reach the runtime of a ``mnemex serve`` at ``url`` with the same API as in-process::

        async with mnemex.connect("http://127.0.0.1:8000", token=...) as rt:
            await rt.scope(user_id="alice", app_name="chat").remember("User writes Java")

    Texts are embedded here, with ``embedder`` or the one ``config.models`` names
    (``config`` None: the server's own models section); it must be the server's
    (name and dim), else InvalidInput says so. The server's limits and defaults
    (memories, conversations, knowledge) apply here as they do there. ``timeout``
    bounds connecting. An unreachable server raises ActorClosed; see
    ``mnemex.remote.runtime`` for the calls that are in-process only.
    """
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidInput(f"url must be an http:// or https:// address, got {url!r}", field="url")
    base = url.rstrip("/")
    headers = {"accept": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=_POOL,
                                 timeout=httpx.Timeout(timeout)) as http:
        # checked before the nursery opens: a refusal is raised as itself, not in a group
        info = await _server_info(http, base)

        def host(cfg: Config, nursery: trio.Nursery) -> RemoteHost:
            return RemoteHost(base, http, cfg, nursery, info.kinds)

        async with open_wire_runtime(host, info, config, where=base, embedder=embedder, timeout=timeout,
                                     runtime_type=RemoteRuntime) as runtime:
            yield runtime


RT = TypeVar("RT", bound=RemoteRuntime)


@asynccontextmanager
async def open_wire_runtime(make_host: Callable[[Config, trio.Nursery], WireHost], info: wire.RuntimeInfo,
                            config: Config | None, *, where: str, embedder: Embedder | None = None,
                            timeout: float = 30.0, runtime_type: type[RT] = RemoteRuntime,  # type: ignore[assignment]
                            ) -> AsyncIterator[RT]:
    """The refs of a remote runtime over the host ``make_host(config, nursery)`` makes
    (HTTP for ``connect``, a cluster's shards for ``mnemex.ray``): texts embedded here
    with ``embedder`` (default: the one the effective config names, which must be the
    one ``info`` says the actors hold; ``where`` names them in errors), the server's
    limits from ``info``, access counts sent every ``memories.touch_interval`` and
    flushed on exit."""
    cfg = _effective_config(info, config)
    model = embedder if embedder is not None else await trio.to_thread.run_sync(embedder_from_config, cfg)
    _check_embedder(where, info, model)
    kind, reranker = scope_kind(cfg, model), reranker_from_config(cfg)
    async with trio.open_nursery() as nursery:
        host = make_host(cfg, nursery)
        batcher = EmbeddingBatcher(model, cfg.models.embed_batch_size,
                                   query_cache_size=cfg.models.query_cache_size)
        await nursery.start(batcher.run)
        scopes = ScopeServices(host, kind, batcher, IdClock(), reranker)
        agents = AgentServices(host, AGENT_KIND)
        runtime = runtime_type(host, scopes, agents, info)
        nursery.start_soon(_send_touches, scopes, cfg.memories.touch_interval)
        try:
            yield runtime
        finally:
            with trio.CancelScope(shield=True) as last:
                last.deadline = trio.current_time() + timeout
                try:
                    await scopes.flush()
                except MnemexError:
                    pass  # the server is gone: those counts with it
            host.closed = True
            nursery.cancel_scope.cancel()


async def _send_touches(scopes: ScopeServices, interval: float) -> None:
    while True:
        await trio.sleep(interval)
        await scopes.flush()
