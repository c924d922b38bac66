"""The application: the conversation API agent platforms speak, pushed
streams, the memory API, and operations (health, metrics, OpenAPI).

Every route is declared once in ``build_app`` with the query parameters it takes
(any other is a 400 naming it) and whether its body is JSON (any other content
type is a 415). Every handler validates its input with msgspec, asks the runtime,
and answers JSON; errors are ``{"error": ...}`` with the status from
``_http.STATUS``. The app runs on the server's asyncio loop; whatever it asks
of the runtime crosses into the runtime's trio run through the Bridge, once per
request.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, Final

import msgspec
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from mnemex import (
    DEFAULT,
    AgentRef,
    EntityChanged,
    EntityDetail,
    EntityPage,
    Extracted,
    IngestReport,
    InvalidInput,
    MemoryHistory,
    MemoryRecord,
    MnemexError,
    MnemexRuntime,
    NotFound,
    RelatedEntities,
    ScopeRef,
    Timeout,
    TooLarge,
)
from mnemex.lowlevel import ActorRef
from mnemex.server._bridge import Bridge
from mnemex.server._guard import Guard
from mnemex.server._http import (
    HttpError,
    check_params,
    check_token,
    decode_json,
    error_response,
    is_json_type,
    json_response,
    parse_duration,
    read_body,
    read_json,
)
from mnemex.server._metrics import Metrics
from mnemex.server._openapi import Param, RouteSpec, openapi_document
from mnemex.server._remote import REMOTE_ROUTES, RemoteRoutes
from mnemex.server._routing import Route, Router
from mnemex.server._schemas import (
    ActorMemories,
    Archived,
    CategoriesOut,
    Context,
    DocumentDeleted,
    Documents,
    FacetsOut,
    Health,
    MemoryDeleted,
    MemoryId,
    MemoryIds,
    MemoryStatus,
    MessageRecord,
    MessagesPage,
    MessagesStored,
    PostAliases,
    PostArchive,
    PostDocument,
    PostEntity,
    PostExtract,
    PostFacets,
    PostMemory,
    PostMemoryBatch,
    PostMessages,
    PostSearch,
    Purged,
    PutCategories,
    ScopeName,
    SearchHitOut,
    SearchResults,
    ServerSettings,
    SessionCompleted,
    SessionCounts,
    Sessions,
    StreamCompleted,
    StreamPushed,
    StreamsPurged,
    StreamStatistics,
    one_session,
)
from mnemex.server._served import LocalOperations, Operations, PushedStreams, ServedRuntime
from mnemex.server._streams import CAUGHT_UP, StreamClosed

__all__ = ["build_app"]

log = logging.getLogger("mnemex.server")
access_log = logging.getLogger("mnemex.access")
_log_encoder = msgspec.json.Encoder()

Handler = Callable[[Request], Awaitable[Response]]

_MAX_INT: Final = 2**31 - 1
_DONE: Final = b"data: [DONE]\n\n"
_DELTA_FIELDS: Final = frozenset({"role", "content", "tool_calls", "name", "tool_call_id", "refusal"})
_PING: Final = b": ping\n\n"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})
_OPENED: Final = b""
_KEPT_REFS: Final = 1024


def _query_int(request: Request, name: str, default: int | None, minimum: int = 0) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise HttpError(400, f"{name}={text!r} is not an integer", field=name) from None
    if not minimum <= value <= _MAX_INT:
        raise HttpError(400, f"{name}={value} must be from {minimum} to {_MAX_INT:,}", field=name)
    return value


def _query_bool(request: Request, name: str) -> bool:
    text = request.query_params.get(name, "false").lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise HttpError(400, f"{name}={text!r} is not a boolean (true or false)", field=name)


def _session_param(request: Request, required: bool) -> str | None:
    """``session_id``, or its synonym ``conversation_id`` (newer controllers). In a
    query string an empty value is refused too: it must not read as "every session"."""
    query = request.query_params
    value = one_session(query.get("session_id"), query.get("conversation_id"), required=required)
    if value == "":
        raise HttpError(400, "session_id is required", field="session_id")
    return value


def _sse_event(body: Any) -> bytes:
    return b"data: " + msgspec.json.encode(body) + b"\n\n"


def _timeout_event(message: str) -> bytes:
    # the shape the OpenAI SDKs raise as an APIError, as the reference service sends it
    return _sse_event({"error": {"message": message, "type": "timeout_error", "code": "timeout"}})


def _broken_event(exc: MnemexError) -> bytes:
    """The error event of a stream that cannot go on (then ``[DONE]``)."""
    return _sse_event({"error": {"message": str(exc), "type": "server_error", "code": type(exc).__name__}})


def _rfc3339(seconds: float) -> str:
    """``2024-05-01T12:00:00.123456Z``, as ``datetime.fromtimestamp(seconds, UTC)``
    would print it (microseconds rounded half to even). This runs for every message
    GET /messages returns, and a platform reads the same sessions again and again:
    the strings are kept (``_STAMPS``), and the part up to the second is formatted
    once per second seen."""
    stamp = _STAMPS.get(seconds)
    if stamp is not None:
        return stamp
    fraction, whole = math.modf(seconds)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    second = int(whole)
    prefix = _SECONDS.get(second)
    if prefix is None:
        if len(_SECONDS) >= _KEPT:
            _SECONDS.clear()
        prefix = _SECONDS[second] = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
    if len(_STAMPS) >= _KEPT:
        _STAMPS.clear()
    stamp = _STAMPS[seconds] = f"{prefix}{micros:06d}Z"
    return stamp


_KEPT: Final = 65_536
_STAMPS: dict[float, str] = {}
_SECONDS: dict[int, str] = {}


def _record(entry: Any) -> MessageRecord:
    """The wire form of one stored message (a MessageEntry of AgentRef.entries)."""
    return MessageRecord(entry.sequence, _rfc3339(entry.timestamp), entry.session_id, entry.query_id or "",
                         entry.message)


class _Api(RemoteRoutes):
    def __init__(self, runtime: ServedRuntime, operations: Operations, settings: ServerSettings,
                 metrics: Metrics, bridge: Bridge | None) -> None:
        self.rt = runtime
        self.ops = operations
        self.settings = settings
        self.metrics = metrics
        self.call = bridge.call if bridge is not None else _unbridged
        self.bridge = bridge
        self.streams: PushedStreams = operations.pushed_streams(settings, bridge)
        self.started = time.time()
        self._agents: dict[str, AgentRef] = {}
        self._scopes: dict[tuple[str, str], ScopeRef] = {}

    def agent(self, request: Request) -> AgentRef:
        """The agent of the request's route (``/agents/{agent}/...``, else the default).
        A ref with the default policy holds nothing but its name: one per name is kept."""
        name = request.path_params.get("agent", self.settings.agent)
        ref = self._agents.get(name)
        if ref is None:
            if len(self._agents) >= _KEPT_REFS:
                self._agents.clear()
            ref = self._agents[name] = self.rt.agent(name)
        return ref

    def scope(self, user_id: str, app_name: str) -> Any:
        """``rt.scope(user_id=..., app_name=...)``. An in-process runtime's refs hold
        nothing but the scope's key and what its runtime shares: one per scope is kept."""
        ref = self._scopes.get((app_name, user_id))
        if ref is None:
            made = self.rt.scope(user_id=user_id, app_name=app_name)
            if type(made) is not ScopeRef:
                return made
            if len(self._scopes) >= _KEPT_REFS:
                self._scopes.clear()
            ref = self._scopes[(app_name, user_id)] = made
        return ref

    async def body(self, request: Request, type_: type[Any]) -> Any:
        return await read_json(request, type_, self.settings.max_body_bytes, self.settings.body_timeout)

    # -- conversation API -----------------------------------------------------------
    async def post_messages(self, request: Request) -> Response:
        raw = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout)
        session, query_id, messages = PostMessages.decode_parts(raw)
        agent = self.agent(request)
        bridge = self.bridge
        direct = type(agent) is AgentRef and agent.configured and type(agent.ref) is ActorRef
        if bridge is not None and direct:  # the bridge's short way (an in-process agent): no trio task
            command = agent.append_command(session, messages, query_id=query_id or None)
            appended = await bridge.ask(agent.ref, command)
            then = agent.appended(command, appended)
            if then is not None:
                await bridge.call(_awaited, then)
        else:
            appended = await self.call(agent.append, session, messages, query_id=query_id or None)
        return json_response(MessagesStored(
            status="success", session_id=session, conversation_id=session, stored=appended.count,
            first_sequence=appended.first_sequence if appended.count else None))

    async def get_messages(self, request: Request) -> Response:
        limit = _query_int(request, "limit", None, minimum=1)
        offset = _query_int(request, "offset", 0) or 0
        page = await self.call(
            self.agent(request).entries, session_id=_session_param(request, required=False),
            query_id=request.query_params.get("query_id") or None, limit=limit, offset=offset)
        return json_response(MessagesPage(
            messages=[_record(entry) for entry in page.entries], total=page.total,
            limit=page.limit if page.limit is not None else page.total, offset=page.offset))

    async def delete_messages(self, request: Request) -> Response:
        agent = self.agent(request)
        session_id = _session_param(request, required=False)
        everything = _query_bool(request, "all")
        if session_id is not None and everything:
            raise HttpError(400, "give session_id (one session) or all=true (every session), not both",
                            field="all")
        if session_id is not None:
            existed = await self.call(agent.delete_session, session_id)
            return json_response(Purged(status="success", message="Memory purged",
                                        sessions=[session_id] if existed else [], messages=None))
        if not everything and not self.settings.allow_bare_purge:
            raise HttpError(400, "deleting every session needs all=true (or session_id=... for one)",
                            field="all")
        deleted = await self.call(agent.delete_all)
        return json_response(Purged(status="success", message="Memory purged", sessions=deleted.session_ids,
                                    messages=deleted.messages_removed))

    async def get_sessions(self, request: Request) -> Response:
        sessions = await self.call(self.agent(request).sessions)
        return json_response(Sessions(sessions=[s.session_id for s in sessions]))

    async def memory_status(self, request: Request) -> Response:
        sessions = await self.call(self.agent(request).sessions)
        return json_response(MemoryStatus(
            total_sessions=len(sessions), total_messages=sum(s.message_count for s in sessions),
            sessions={s.session_id: SessionCounts(s.message_count, s.query_count, s.completed)
                      for s in sessions}))

    async def complete_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        await self._no_body(request)
        await self.call(self.agent(request).complete, session_id)
        return json_response(SessionCompleted(status="completed", session=session_id))

    async def context(self, request: Request) -> Response:
        session_id = request.path_params.get("session_id") or _session_param(request, required=True)
        assert session_id is not None
        max_tokens = _query_int(request, "max_tokens", None, minimum=1)
        view = await self.call(self.agent(request).context_view, session_id, max_tokens=max_tokens)
        return json_response(Context(session_id=session_id, **msgspec.structs.asdict(view)))

    async def _no_body(self, request: Request) -> None:
        """A body where none is needed must be empty or a JSON object (``{}``)."""
        raw = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout)
        if raw.strip():
            decode_json(raw, dict[str, Any])

    # -- pushed streams -------------------------------------------------------------
    async def push_stream(self, request: Request) -> Response:
        """``POST /stream/{id}``: a long-lived NDJSON body, one chunk per line, each
        relayed to the stream's readers and kept for late ones as it arrives."""
        name = request.path_params["stream_id"]
        limit = self.settings.max_body_bytes  # the longest line
        pending = b""
        count = 0

        async def push(lines: list[bytes]) -> None:
            # the lines of one read of the body go together (one call, on a cluster)
            nonlocal count
            if not lines:
                return
            taken, error = await self.streams.push(name, lines)
            count += taken
            if isinstance(error, StreamClosed):
                raise HttpError(409, str(error), field="stream_id") from None
            if isinstance(error, TooLarge):
                raise HttpError(413, str(error), headers={"Connection": "close"}) from None
            if isinstance(error, InvalidInput):
                where = f"line {count + 1}"
                raise HttpError(400, f"{where} of the stream: {error}", field=where) from None
            if error is not None:
                raise error

        async with aclosing(request.stream()) as body:
            async for data in body:
                pending += data
                if b"\n" not in data:
                    if len(pending) > limit:
                        raise HttpError(413, f"a stream line is over {limit:,} bytes (server.max_body_bytes)",
                                        headers={"Connection": "close"})
                    continue
                *lines, pending = pending.split(b"\n")
                await push([line.strip() for line in lines if line.strip()])
        if pending.strip():
            await push([pending.strip()])
        return json_response(StreamPushed(status="stream_processed", query=name, chunks_received=count))

    async def complete_stream(self, request: Request) -> Response:
        """``POST /stream/{id}/complete``: the pushed stream ended; readers get [DONE].
        An id that is only a stored session (the older spec) completes the session."""
        name = request.path_params["stream_id"]
        await self._no_body(request)
        status = await self.streams.complete(name)
        if status is None:
            agent = self.agent(request)
            if name in {s.session_id for s in await self.call(agent.sessions)}:
                await self.call(agent.complete, name)
                return json_response(StreamCompleted(status="completed", query=name, session=name))
            raise HttpError(404, f"no stream {name!r}: nothing was pushed to it and nobody reads it",
                            field="stream_id")
        return json_response(StreamCompleted(status=status, query=name))

    async def purge_streams(self, request: Request) -> Response:
        dropped = await self.streams.purge()
        return json_response(StreamsPurged(status="success", message="Stream data purged", streams=dropped))

    async def stream_statistics(self, request: Request) -> Response:
        return json_response(await self.streams.statistics())

    async def stream(self, request: Request) -> Response:
        """``GET /stream/{id}``: server-sent events. A pushed stream of that name, or
        (the older spec) a stored session of that id; an id nothing has written yet
        is waited for, up to ``wait-for-query`` (or ``wait-for-session=true`` and
        ``timeout``)."""
        name = request.path_params["stream_id"]
        from_beginning = _query_bool(request, "from-beginning")
        markers = _query_bool(request, "markers")
        wait_for_session = _query_bool(request, "wait-for-session")
        ceiling = self.settings.stream_max_wait
        wait = ceiling
        if "wait-for-query" in request.query_params:
            wait = min(parse_duration(request.query_params["wait-for-query"], "wait-for-query"), ceiling)
        if "timeout" in request.query_params:
            wait = min(parse_duration(request.query_params["timeout"], "timeout"), ceiling)
        elif wait_for_session and "wait-for-query" not in request.query_params:
            wait = 30.0  # the older spec's default
        body: AsyncIterator[bytes]
        if not await self.streams.exists(name):
            agent = self.agent(request)
            events = self._bridge().iterate(lambda: self._session(
                name, agent.subscribe(name, from_beginning=from_beginning, wait_for_session=wait_for_session,
                                      timeout=max(wait, 0.001)), markers))
            try:
                await anext(events)  # _OPENED: the session exists (or will, within the wait)
            except NotFound:
                await events.aclose()  # type: ignore[attr-defined]  # an async generator
                body = self._pushed(name, from_beginning, wait, markers)
            except BaseException:
                await events.aclose()  # type: ignore[attr-defined]
                raise
            else:
                body = events
        else:
            body = self._pushed(name, from_beginning, wait, markers)
        return _EventStream(self._counted(body), media_type="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _counted(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        self.metrics.streams.inc()
        try:
            async with aclosing(body):  # type: ignore[type-var]  # an async generator
                async for data in body:
                    yield data
        finally:
            self.metrics.streams.dec()

    async def _pushed(self, name: str, from_beginning: bool, wait: float,
                      markers: bool) -> AsyncIterator[bytes]:
        follow: Any = self.streams.follow(name, from_beginning=from_beginning, wait=wait,
                                          heartbeat=self.settings.stream_heartbeat)
        try:
            async with aclosing(follow):
                async for chunk in follow:
                    if chunk is None:
                        yield _PING
                    elif chunk is CAUGHT_UP:
                        if markers:
                            yield b"data: [LIVE_MODE]\n\n"
                    else:
                        yield b"data: " + chunk + b"\n\n"
        except TimeoutError as exc:
            yield _timeout_event(str(exc))
        except MnemexError as exc:  # where the stream was kept went away (a cluster's shard)
            yield _broken_event(exc)
        if markers:
            yield b"data: [STREAM_END]\n\n"
        yield _DONE

    def _bridge(self) -> Bridge:
        if self.bridge is None:
            raise RuntimeError(_UNBRIDGED)
        return self.bridge

    @staticmethod
    async def _session(session_id: str, stream: Any, markers: bool) -> AsyncIterator[bytes]:
        """The older spec: a session's stored messages as chunks, then live ones. Runs in
        the runtime's trio run (through Bridge.iterate); its first item, _OPENED, says
        the session was found (or NotFound is raised before it)."""
        def chunk(delta: dict[str, Any], finish: str | None, created: float) -> bytes:
            return _sse_event({"id": session_id, "object": "chat.completion.chunk", "created": int(created),
                               "model": "mnemex", "choices": [{"index": 0, "delta": delta,
                                                               "finish_reason": finish}]})

        opened = False
        try:
            async with stream:
                yield _OPENED
                opened = True
                async for event in stream:
                    event_: Any = event  # a StreamEvent
                    if event_.kind == "message" and event_.message is not None:
                        message = event_.message.message
                        delta = {k: v for k, v in message.items() if k in _DELTA_FIELDS}
                        if isinstance(delta.get("tool_calls"), list):  # in a chunk, each call has its index
                            delta["tool_calls"] = [{"index": i, **call} if isinstance(call, dict) else call
                                                   for i, call in enumerate(delta["tool_calls"])]
                        yield chunk(delta, None, event_.message.timestamp)
                    elif event_.kind == "chunk" and event_.chunk is not None:
                        yield b"data: " + bytes(event_.chunk) + b"\n\n"
                    elif event_.kind == "live":
                        if markers:
                            yield b"data: [LIVE_MODE]\n\n"
                    elif event_.kind == "error":
                        yield _sse_event({"error": {"message": event_.detail, "type": "server_error",
                                                    "code": "dropped"}})
                        break
                    else:  # completed, deleted, expired: the end of the stream
                        yield chunk({}, "stop", time.time())
                        break
        except Timeout as exc:
            yield _timeout_event(str(exc))
        except MnemexError as exc:  # the runtime is closing, or a cluster's shard went down
            if not opened:  # NotFound: the caller reads a pushed stream of that name instead
                raise
            yield _broken_event(exc)
        if markers:
            yield b"data: [STREAM_END]\n\n"
        yield _DONE

    # -- memory API -------------------------------------------------------------------
    def _scope_of(self, request: Request) -> tuple[str, str]:
        user_id = request.query_params.get("user_id")
        app_name = request.query_params.get("app_name")
        if not user_id or not app_name:
            raise HttpError(400, "user_id and app_name query parameters are required: a memory is only "
                                 "reachable within its own scope",
                            field="user_id" if not user_id else "app_name")
        return user_id, app_name

    async def post_memory(self, request: Request) -> Response:
        body: PostMemory = await self.body(request, PostMemory)
        scope = self.scope(body.user_id, body.app_name)
        memory_id = await self.call(scope.remember, body.content, **body.given())
        return json_response(MemoryId(memory_id), 201)

    async def post_memory_batch(self, request: Request) -> Response:
        body: PostMemoryBatch = await self.body(request, PostMemoryBatch)
        scopes = {(m.app_name, m.user_id) for m in body.memories}
        if len(scopes) > self.settings.max_batch_scopes:
            raise HttpError(400, f"the batch names {len(scopes):,} scopes; one batch may name at most "
                                 f"{self.settings.max_batch_scopes:,} (server.max_batch_scopes)",
                            field="memories")
        items = [(m.app_name, m.user_id, {"content": m.content, **m.given()}) for m in body.memories]
        ids = await self.call(self.rt.remember_many, items)
        return json_response(MemoryIds(ids), 201)

    async def search_memory(self, request: Request) -> Response:
        body: PostSearch = await self.body(request, PostSearch)
        mode: Any = body.mode if body.mode is not None else DEFAULT
        min_score = body.min_score if body.min_score is not None else DEFAULT  # absent or null: the mode's
        parts: list[str] | None = None
        if body.scopes and all(isinstance(s, str) for s in body.scopes):
            if not (body.user_id and body.app_name):  # parts of one user's scope
                raise HttpError(400, "scopes naming parts of a scope (global, campaign, ...) need user_id "
                                     "and app_name", field="user_id")
            parts = [s for s in body.scopes if isinstance(s, str)]
            scopes = [(body.app_name, body.user_id)]
        elif body.scopes:
            if any(isinstance(s, str) for s in body.scopes):
                raise HttpError(400, "scopes is either scopes ({user_id, app_name} objects) or parts of one "
                                     "scope (strings), not both", field="scopes")
            scopes = [(s.app_name, s.user_id) for s in body.scopes if isinstance(s, ScopeName)]
        elif body.user_id and body.app_name:
            scopes = [(body.app_name, body.user_id)]
        else:
            raise HttpError(400, "give user_id and app_name, or scopes: [{user_id, app_name}, ...]",
                            field="user_id")
        if body.scope_ids is not None and parts is None:
            raise HttpError(400, "scope_ids names the ids of the parts in scopes (strings such as "
                                 "\"campaign\")", field="scope_ids")
        if len(set(scopes)) > self.settings.max_batch_scopes:
            raise HttpError(400, f"the search names {len(set(scopes)):,} scopes; at most "
                                 f"{self.settings.max_batch_scopes:,} (server.max_batch_scopes)",
                            field="scopes")
        if len(scopes) == 1:
            app_name, user_id = scopes[0]
            scope = self.scope(user_id, app_name)
            bridge = self.bridge
            direct = bridge is not None and type(scope) is ScopeRef and type(scope.ref) is ActorRef
            command = scope.search_command(body.query, body.top_k, mode, min_score, body.filters,
                                           include_history=body.include_history, as_of=body.as_of,
                                           scopes=parts, scope_ids=body.scope_ids,
                                           facets=body.facets) if direct else None
            if bridge is not None and command is not None:  # the bridge's short way: no trio task
                result = scope.searched(await bridge.ask_batched(scope.ref, command))
            else:
                result = await self.call(scope.search, body.query, body.top_k, mode, min_score, body.filters,
                                         include_history=body.include_history, as_of=body.as_of, scopes=parts,
                                         scope_ids=body.scope_ids, facets=body.facets)
        else:
            if body.facets is not None:
                raise HttpError(400, "facets are counted within one scope: give user_id and app_name",
                                field="facets")
            result = await self.call(self.rt.search, body.query, scopes, body.top_k, mode=mode,
                                     min_score=min_score, filter=body.filters,
                                     include_history=body.include_history, as_of=body.as_of)
        return json_response(SearchResults(mode=result.mode, results=[SearchHitOut(
            id=hit.memory.id, content=hit.memory.content, score=hit.score, scores=hit.scores,
            user_id=hit.user_id or scopes[0][1], app_name=hit.app_name or scopes[0][0], memory=hit.memory,
            scope=hit.memory.scope_label, found_by=hit.found_by) for hit in result.hits],
            facets=result.facets))

    # -- categories and actors ------------------------------------------------------------
    async def get_categories(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        catalog = await self.call(self.scope(user_id, app_name).categories)
        return json_response(_categories_out(catalog))

    async def put_categories(self, request: Request) -> Response:
        body: PutCategories = await self.body(request, PutCategories)
        scope = self.scope(body.user_id, body.app_name)
        catalog = await self.call(scope.set_categories, body.categories, remove=body.remove,
                                  replace=body.replace, reclassify=body.reclassify)
        return json_response(_categories_out(catalog))

    async def post_facets(self, request: Request) -> Response:
        body: PostFacets = await self.body(request, PostFacets)
        scope = self.scope(body.user_id, body.app_name)
        facets = await self.call(scope.facets, body.filters, min_confidence=body.min_confidence,
                                 include_history=body.include_history, as_of=body.as_of)
        return json_response(FacetsOut(counts=facets.counts, total=facets.total))

    async def actor_memories(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        actor_id = request.path_params["actor_id"]
        limit = _query_int(request, "limit", 100)
        offset = _query_int(request, "offset", 0) or 0
        page = await self.call(self.scope(user_id, app_name).actor_memories, actor_id,
                               limit, offset, include_history=_query_bool(request, "include_history"))
        return json_response(ActorMemories(actor_id=actor_id, total=page.total, memories=page.memories))

    async def get_memory(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        record = await self.call(self.scope(user_id, app_name).get,
                                 request.path_params["memory_id"])
        return json_response(record)

    async def delete_memory(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        memory_id = request.path_params["memory_id"]
        if not await self.call(self.scope(user_id, app_name).forget, memory_id):
            raise NotFound(f"no memory {memory_id!r} in scope {app_name}/{user_id}")
        return json_response(MemoryDeleted(status="deleted", id=memory_id))

    async def memory_history(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        history = await self.call(self.scope(user_id, app_name).history,
                                  request.path_params["memory_id"])
        return json_response(history)

    async def extract(self, request: Request) -> Response:
        body: PostExtract = await self.body(request, PostExtract)
        agent = body.agent or request.path_params.get("agent", self.settings.agent)
        extracted = await self.call(self.rt.extract, agent, request.path_params["session_id"],
                                    user_id=body.user_id, app_name=body.app_name, if_needed=body.if_needed)
        return json_response(extracted)

    # -- documents --------------------------------------------------------------------
    async def post_document(self, request: Request) -> Response:
        """A document into a scope: JSON with the content in base64, or (a server with a
        token only: a web page can post a form) multipart/form-data."""
        content_type = request.headers.get("content-type", "")
        if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
            body = await self._document_form(request)
        elif content_type and is_json_type(content_type):
            body = await self.body(request, PostDocument)
        else:
            raise HttpError(415, f"Content-Type {content_type or 'missing'}: POST /documents takes "
                                 f"application/json (content in base64) or multipart/form-data",
                            field="Content-Type")
        scope = self.scope(body.user_id, body.app_name)
        report = await self.call(scope.ingest, body.content, body.media_type, document_id=body.document_id,
                                 title=body.title, metadata=body.metadata, extract=body.extract)
        return json_response(report, 201 if report.status == "ingested" else 200)

    async def _document_form(self, request: Request) -> PostDocument:
        if self.settings.token is None:
            raise HttpError(415, "multipart/form-data is taken only by a server with a token (a web page can "
                                 "post a form to one without); send application/json with the content in "
                                 "base64", field="Content-Type")
        if not any(importlib.util.find_spec(name) is not None for name in ("python_multipart", "multipart")):
            raise HttpError(415, "reading multipart/form-data needs python-multipart: pip install "
                                 "'mnemex[documents]'; or send application/json with the content in base64",
                            field="Content-Type")
        raw = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        try:
            form = await Request(request.scope, replay).form(max_files=1, max_fields=16)
        except StarletteHTTPException as exc:
            raise HttpError(400, f"the form could not be read: {exc.detail}") from None
        except MultiPartException as exc:
            raise HttpError(400, f"the form could not be read: {exc.message}") from None
        try:
            fields: dict[str, Any] = {}
            for name, value in form.multi_items():
                if name in fields:
                    raise HttpError(400, f"form field {name!r} is given twice", field=name)
                if isinstance(value, UploadFile):
                    if name != "content":
                        raise HttpError(400, f"form field {name!r} is a file; only content is", field=name)
                    fields[name] = await value.read()
                    given_type = (value.content_type or "").split(";", 1)[0].strip().lower()
                    if given_type and given_type != "application/octet-stream":
                        fields.setdefault("media_type", value.content_type)
                elif name == "content":
                    fields[name] = value.encode()
                elif name == "metadata":
                    try:
                        fields[name] = decode_json(value.encode(), dict[str, Any])
                    except HttpError as exc:
                        raise HttpError(400, f"form field metadata must be a JSON object: {exc}",
                                        field="metadata") from None
                elif name == "extract":
                    fields[name] = _form_bool(name, value)
                else:
                    fields[name] = value
        finally:
            await form.close()
        try:
            return msgspec.convert(fields, PostDocument)
        except msgspec.ValidationError as exc:
            raise HttpError(400, f"invalid form: {exc}") from None

    async def get_documents(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        found = await self.call(self.scope(user_id, app_name).documents,
                                request.query_params.get("document_id") or None)
        return json_response(Documents(found))

    async def delete_document(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        scope = self.scope(user_id, app_name)
        document_id = request.path_params["document_id"]
        if not await self.call(scope.documents, document_id):
            raise NotFound(f"no document {document_id!r} in scope {app_name}/{user_id}")
        gone = await self.call(scope.forget_document, document_id)
        return json_response(DocumentDeleted(status="deleted", id=document_id, memories=gone))

    async def archive(self, request: Request) -> Response:
        body: PostArchive = await self.body(request, PostArchive)
        session_id = request.path_params["session_id"]
        added = await self.call(self.rt.archive,
                                body.agent or request.path_params.get("agent", self.settings.agent),
                                session_id, user_id=body.user_id, app_name=body.app_name)
        return json_response(Archived(status="archived", session_id=session_id, memories=len(added.ids),
                                      added=added.added, ids=added.ids))

    # -- the entity graph -----------------------------------------------------------------
    async def get_entities(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        page = await self.call(self.scope(user_id, app_name).entities,
                               request.query_params.get("type") or None,
                               name=request.query_params.get("name") or None,
                               limit=_query_int(request, "limit", 100),
                               offset=_query_int(request, "offset", 0))
        return json_response(page)

    async def get_entity(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        detail = await self.call(self.scope(user_id, app_name).entity,
                                 request.path_params["name"], memories=_query_int(request, "memories", 20),
                                 neighbours=_query_int(request, "neighbours", 10))
        return json_response(detail)

    async def get_related(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        related = await self.call(self.scope(user_id, app_name).related,
                                  request.path_params["name"], _query_int(request, "depth", 1, 1),
                                  limit=_query_int(request, "limit", 20, 1))
        return json_response(related)

    async def post_entity(self, request: Request) -> Response:
        body: PostEntity = await self.body(request, PostEntity)
        changed = await self.call(self.scope(body.user_id, body.app_name).declare_entity,
                                  body.name, body.type, body.aliases)
        return json_response(changed)

    async def post_aliases(self, request: Request) -> Response:
        body: PostAliases = await self.body(request, PostAliases)
        changed = await self.call(self.scope(body.user_id, body.app_name).merge_entities,
                                  body.names, request.path_params["name"])
        return json_response(changed)

    async def delete_alias(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        scope = self.scope(user_id, app_name)
        name, alias = request.path_params["name"], request.path_params["alias"]
        owner = await self.call(scope.entity, name, memories=0, neighbours=0)
        aliased = await self.call(scope.entity, alias, memories=0, neighbours=0)
        if aliased.entity.name != owner.entity.name:
            raise NotFound(f"{alias!r} is no alias of the entity {owner.entity.name!r} (it names "
                           f"{aliased.entity.name!r})")
        changed = await self.call(scope.unmerge_entity, alias)
        return json_response(changed)

    # -- operations ---------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if "application/json" not in request.headers.get("accept", ""):
            return PlainTextResponse("OK")
        report = await self.call(self.ops.health)
        token = self.settings.token
        authorized = token is not None and _has_token(request, token)
        return json_response(Health(
            status=report.status, uptime_seconds=round(time.time() - self.started, 3),
            data_dir=self.rt.config.storage.data_dir if authorized else None, actors=report.actors,
            streams=report.streams if report.streams is not None else len(self.streams),
            journal=report.journal, categories=report.categories,
            graph=report.graph, shards=report.shards), 503 if report.status == "unavailable" else 200)

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.render(await self.call(self.ops.gauges)),
                        media_type=self.metrics.content_type)

    async def openapi(self, request: Request) -> Response:
        return json_response(_document())


def _categories_out(catalog: Any) -> CategoriesOut:
    return CategoriesOut(categories=catalog.categories, version=catalog.version, counts=catalog.counts,
                         threshold=catalog.threshold, classifier=catalog.classifier,
                         reclassifying=catalog.reclassifying, reclassified=catalog.reclassified,
                         total=catalog.total)


@functools.cache
def _document() -> dict[str, Any]:
    return openapi_document(ROUTES)


class _EventStream(StreamingResponse):
    """A StreamingResponse that closes its body generator however the response ends:
    a reader that disconnects frees its subscription at once, not when the garbage
    collector finds the suspended generator."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            body: Any = self.body_iterator
            await body.aclose()


def _has_token(request: Request, token: str) -> bool:
    try:
        check_token(request, token)
    except HttpError:
        return False
    return True


class _Endpoint:
    """One route as a plain ASGI app: bearer token, query parameters, content type,
    the handler, errors as JSON, metrics and the access log. The Router calls it
    directly; requests and responses are Starlette's."""

    __slots__ = ("handler", "json_body", "logs", "metrics", "params", "route", "token")

    def __init__(self, route: str, handler: Handler, *, token: str | None, metrics: Metrics, logs: bool,
                 params: frozenset[str], json_body: bool) -> None:
        self.route = route
        self.handler = handler
        self.token = token
        self.metrics = metrics
        self.logs = logs
        self.params = params
        self.json_body = json_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        started = time.perf_counter()
        try:
            if self.token is not None:
                check_token(request, self.token)
            if scope["query_string"]:
                check_params(request, self.params)
            if self.json_body:
                _check_content_type(request)
            response = await self.handler(request)
        except (HttpError, MnemexError) as exc:
            response = error_response(exc)
        except ClientDisconnect:  # gone mid-body (or silent past idle_read_timeout): nobody to answer
            log.info("%s %s: the client left before its request body ended", scope["method"], self.route)
            self.metrics.observe(scope["method"], self.route, 499, time.perf_counter() - started)
            return
        except Exception:  # a bug of ours, not the client's: 500, with the traceback in the log
            log.exception("%s %s failed", scope["method"], self.route)
            response = json_response({"error": "internal error; the server's log has the details"}, 500)
        elapsed = time.perf_counter() - started
        status = response.status_code
        method: str = scope["method"]
        self.metrics.observe(method, self.route, status, elapsed)
        if self.logs and access_log.isEnabledFor(logging.INFO):
            client = scope.get("client")
            access_log.info(_log_encoder.encode({
                "method": method, "path": scope["path"], "route": self.route, "status": status,
                "ms": round(elapsed * 1000, 3), "client": client[0] if client else None}).decode())
        await response(scope, receive, send)


def _form_bool(name: str, value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise HttpError(400, f"form field {name}={value!r} is not a boolean (true or false)", field=name)


def _check_content_type(request: Request) -> None:
    """A body on a JSON route must say it is JSON: a web page can send text/plain or a
    form to any address without asking, never application/json."""
    length = chunked = raw_type = None
    for name, value in request.scope["headers"]:  # one pass, the first of each (as Headers.get)
        if name == b"content-type":
            if raw_type is None:
                raw_type = value
        elif name == b"content-length":
            if length is None:
                length = value
        elif name == b"transfer-encoding":
            chunked = value
    if raw_type is None and length in (None, b"0", b"") and chunked is None:
        return
    if raw_type is not None:
        known = _JSON_TYPES_SEEN.get(raw_type)
        if known is None:
            if len(_JSON_TYPES_SEEN) >= 256:
                _JSON_TYPES_SEEN.clear()
            known = _JSON_TYPES_SEEN[raw_type] = is_json_type(raw_type.decode("latin-1"))
        if known:
            return
    content_type = raw_type.decode("latin-1") if raw_type is not None else None
    raise HttpError(415, f"Content-Type {content_type or 'missing'!s}: this route takes "
                         f"application/json", field="Content-Type")


_JSON_TYPES_SEEN: dict[bytes, bool] = {}
"""is_json_type of each Content-Type value met (a few: clients send the same one)."""


_SESSION = Param("session_id", "string", "one session (conversation_id is the same thing)")
_CONVERSATION = Param("conversation_id", "string", "a synonym of session_id")
_USER = Param("user_id", "string", "the scope's user", required=True)
_APP = Param("app_name", "string", "the scope's application", required=True)

ROUTES: Final[tuple[RouteSpec, ...]] = (
    RouteSpec("/messages", "POST", "post_messages", "Store messages in a session, in order, verbatim",
              body=PostMessages, reply=MessagesStored, errors=(400, 408, 413, 422), per_agent=True),
    RouteSpec("/messages", "GET", "get_messages", "Stored messages, oldest first; without limit, all of them",
              (_SESSION, _CONVERSATION, Param("query_id", "string", "one query's messages"),
               Param("limit", "integer", "page size (>= 1)"), Param("offset", "integer", "from the oldest")),
              reply=MessagesPage, per_agent=True),
    RouteSpec("/messages", "DELETE", "delete_messages", "Delete one session, or every session with all=true",
              (_SESSION, _CONVERSATION,
               Param("all", "boolean", "delete every session (sequence restarts at 1)")),
              reply=Purged, per_agent=True),
    RouteSpec("/sessions", "GET", "get_sessions", "Session ids, oldest first", reply=Sessions,
              per_agent=True),
    RouteSpec("/memory-status", "GET", "memory_status", "Counts per session", reply=MemoryStatus,
              per_agent=True),
    RouteSpec("/context", "GET", "context", "The context for the next model call: the session pruned and "
              "compressed by its policy", (_SESSION, _CONVERSATION, Param("max_tokens", "integer",
                                                                          "cut further to this many tokens")),
              reply=Context, per_agent=True),
    RouteSpec("/sessions/{session_id}/context", "GET", "context", "The context for the next model call",
              (Param("max_tokens", "integer", "cut further to this many tokens"),), reply=Context,
              per_agent=True),
    RouteSpec("/session/{session_id}/complete", "POST", "complete_session",
              "Mark a session completed: its stream readers get the end", reply=SessionCompleted,
              per_agent=True),
    RouteSpec("/stream/{stream_id}", "POST", "push_stream",
              "Push a stream: NDJSON, one chat.completion.chunk per line, long-lived; each line is "
              "relayed to readers and kept for late ones", reply=StreamPushed, errors=(400, 409, 413),
              per_agent=True),
    RouteSpec("/stream/{stream_id}/complete", "POST", "complete_stream",
              "End a pushed stream: its readers get data: [DONE]", reply=StreamCompleted, errors=(400, 404),
              per_agent=True),
    RouteSpec("/stream/{stream_id}", "GET", "stream",
              "Server-sent events: each pushed chunk as pushed (or, for a stored session, each message as a "
              "chunk), then data: [DONE]",
              (Param("from-beginning", "boolean", "replay the chunks pushed so far first"),
               Param("wait-for-query", "string",
                     "wait this long (Go duration: 30s) for a stream not started"),
               Param("wait-for-session", "boolean", "older spec: wait for the session (see timeout)"),
               Param("timeout", "string", "older spec: how long wait-for-session waits"),
               Param("markers", "boolean", "also send [LIVE_MODE] after the replay and [STREAM_END]")),
              media="text/event-stream", per_agent=True),
    RouteSpec("/stream", "DELETE", "purge_streams", "Drop every pushed stream", reply=StreamsPurged),
    RouteSpec("/stream-statistics", "GET", "stream_statistics", "Every pushed stream kept, with counts",
              reply=StreamStatistics),
    RouteSpec("/memory", "POST", "post_memory", "Store one memory in the (app_name, user_id) scope",
              body=PostMemory, reply=MemoryId, status=201, errors=(400, 413, 422)),
    RouteSpec("/memory/batch", "POST", "post_memory_batch", "Store many memories, in any scopes, all or none",
              body=PostMemoryBatch, reply=MemoryIds, status=201, errors=(400, 413, 422)),
    RouteSpec("/memory/search", "POST", "search_memory", "Search one scope or several (any mode)",
              body=PostSearch, reply=SearchResults, errors=(400, 413, 422)),
    RouteSpec("/memory/{memory_id}", "GET", "get_memory", "One memory, within its own scope", (_USER, _APP),
              reply=MemoryRecord, errors=(400, 404)),
    RouteSpec("/memory/{memory_id}", "DELETE", "delete_memory", "Forget one memory, within its own scope",
              (_USER, _APP), reply=MemoryDeleted, errors=(400, 404)),
    RouteSpec("/memory/{memory_id}/history", "GET", "memory_history",
              "How a memory came to be: its changes and the memories it replaced or was replaced by",
              (_USER, _APP), reply=MemoryHistory, errors=(400, 404)),
    RouteSpec("/sessions/{session_id}/extract", "POST", "extract",
              "Extract facts from a conversation into the long-term memory of a scope (what was not "
              "extracted before); without an LLM endpoint, by rules", body=PostExtract, reply=Extracted,
              errors=(400, 404, 422, 503), per_agent=True),
    RouteSpec("/sessions/{session_id}/archive", "POST", "archive",
              "Copy a conversation into the long-term memory of a scope", body=PostArchive, reply=Archived,
              errors=(400, 404, 422), per_agent=True),
    RouteSpec("/documents", "POST", "post_document",
              "Store a document (text, Markdown, PDF, PNG or JPEG) in a scope as searchable chunks, and "
              "start extracting facts from it; 200 when the scope held it already", body=PostDocument,
              reply=IngestReport, status=201, errors=(400, 404, 413, 422), form=True),
    RouteSpec("/documents", "GET", "get_documents", "The documents of a scope, in the order ingested",
              (_USER, _APP, Param("document_id", "string", "one document")), reply=Documents),
    RouteSpec("/documents/{document_id}", "DELETE", "delete_document",
              "Forget a document: its chunks and the facts extracted from it", (_USER, _APP),
              reply=DocumentDeleted, errors=(400, 404)),
    RouteSpec("/categories", "GET", "get_categories",
              "A scope's category catalog, with the memories per category and how far a re-classification is",
              (_USER, _APP), reply=CategoriesOut),
    RouteSpec("/categories", "PUT", "put_categories",
              "Extend or change a scope's category catalog (categories replace those of their name or are "
              "added; remove drops some; replace makes them the whole catalog); the scope's memories are "
              "re-classified beside it", body=PutCategories, reply=CategoriesOut, errors=(400, 413, 422)),
    RouteSpec("/memory/facets", "POST", "post_facets",
              "Memories per category among those the filters let through", body=PostFacets, reply=FacetsOut,
              errors=(400, 422)),
    RouteSpec("/actors/{actor_id}/memories", "GET", "actor_memories",
              "The memories linked to an actor (its actor_id, or its own part of the scope), oldest first",
              (_USER, _APP, Param("limit", "integer", "at most this many (default 100)"),
               Param("offset", "integer", "skip this many"),
               Param("include_history", "boolean", "superseded and merged memories too")),
              reply=ActorMemories, errors=(400,)),
    RouteSpec("/entities", "GET", "get_entities",
              "The entities of a scope (people, places, things its memories name), most mentioned first",
              (_USER, _APP, Param("type", "string", "one type (person, npc, location...)"),
               Param("name", "string", "those with a name or alias containing this"),
               Param("limit", "integer", "page size"), Param("offset", "integer", "from the most mentioned")),
              reply=EntityPage, errors=(400,)),
    RouteSpec("/entities", "POST", "post_entity",
              "Declare an entity (name, type, aliases): every memory naming it, stored or to come, "
              "mentions it", body=PostEntity, reply=EntityChanged, errors=(400, 422)),
    RouteSpec("/entities/{name}", "GET", "get_entity",
              "One entity, by any of its names: its newest memories and strongest neighbours",
              (_USER, _APP, Param("memories", "integer", "how many of its memories (20)"),
               Param("neighbours", "integer", "how many neighbours (10)")),
              reply=EntityDetail, errors=(400, 404)),
    RouteSpec("/entities/{name}/related", "GET", "get_related",
              "The entities within depth hops (1 or 2) of an entity, with the memories relating them",
              (_USER, _APP, Param("depth", "integer", "1 or 2"), Param("limit", "integer", "how many (20)")),
              reply=RelatedEntities, errors=(400, 404)),
    RouteSpec("/entities/{name}/aliases", "POST", "post_aliases",
              "Merge entities into this one: each name becomes its alias (a reversible alias record)",
              body=PostAliases, reply=EntityChanged, errors=(400, 404, 422)),
    RouteSpec("/entities/{name}/aliases/{alias}", "DELETE", "delete_alias",
              "Unmerge: the alias (a merged name or declared alias) is its own entity again",
              (_USER, _APP), reply=EntityChanged, errors=(400, 404)),
    *REMOTE_ROUTES,
    RouteSpec("/health", "GET", "health",
              "OK as text; the runtime's status as JSON to Accept: application/json",
              reply=Health),
    RouteSpec("/metrics", "GET", "metrics_text", "Prometheus metrics", media="text/plain"),
    RouteSpec("/openapi.json", "GET", "openapi", "This document"),
)


_UNBRIDGED: Final = ("this app reaches its runtime through a Bridge: serve it with mnemex.server.Server "
                     "(build_app(runtime) without one only lists the routes)")


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def _unbridged(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(_UNBRIDGED)


class App(Guard):
    """The ASGI app of one server: the Guard in front of the Router (the Guard itself,
    not a wrapper of it: a request takes one call fewer). ``routes`` lists every
    (path, method) served."""

    def __init__(self, runtime: ServedRuntime, router: Router, settings: ServerSettings, metrics: Metrics,
                 streams: PushedStreams) -> None:
        super().__init__(router, settings)
        self.runtime = runtime
        self.routes = router.routes
        self.metrics = metrics
        self.streams = streams


def build_app(runtime: MnemexRuntime | ServedRuntime, settings: ServerSettings | None = None, *,
              bridge: Bridge | None = None, operations: Operations | None = None) -> App:
    """The ASGI app serving ``runtime`` (every route of ROUTES, behind the Guard), on an
    asyncio loop whose ``bridge`` reaches the runtime's trio run (see Server).
    ``operations``: health, metrics and pushed streams of a runtime that is not a
    ``MnemexRuntime`` (a cluster's: ``mnemex.ray``); by default the in-process ones."""
    settings = settings if settings is not None else runtime.config.server
    if operations is None:
        if not isinstance(runtime, MnemexRuntime):
            raise TypeError(f"build_app serves a {type(runtime).__name__} only with its operations=")
        operations = LocalOperations(runtime)
    metrics = Metrics(clustered=not isinstance(operations, LocalOperations))
    api = _Api(runtime, operations, settings, metrics, bridge)
    open_paths = {"/health"} if settings.open_health else set()
    routes: list[Route] = []
    for spec in ROUTES:
        handler: Handler = getattr(api, spec.handler)
        json_body = spec.method == "POST" and not spec.form
        for path in (spec.path, "/agents/{agent}" + spec.path) if spec.per_agent else (spec.path,):
            token = settings.token if path not in open_paths else None
            endpoint = _Endpoint(path, handler, token=token, metrics=metrics, logs=settings.access_log,
                                 params=spec.names, json_body=json_body)
            routes.append(Route(path, spec.method, endpoint))
    return App(runtime, Router(routes), settings, metrics, api.streams)
