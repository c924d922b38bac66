"""The Starlette application: the conversation API agent platforms speak, the
memory API, and operations (health, metrics, OpenAPI).

Every handler validates its input with msgspec, asks the runtime, and answers
JSON; errors are ``{"error": ...}`` with the status from ``_http.STATUS``.
The app runs inside the runtime's own trio run (hypercorn's trio worker), so a
handler awaits actors directly.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mnemex import DEFAULT, AgentRef, MnemexError, MnemexRuntime, NotFound, StoredMessage, StreamEvent
from mnemex.server._http import (
    HttpError,
    check_token,
    error_response,
    json_response,
    parse_duration,
    read_json,
)
from mnemex.server._metrics import Metrics
from mnemex.server._openapi import openapi_document
from mnemex.server._schemas import (
    PostArchive,
    PostMemory,
    PostMemoryBatch,
    PostMessages,
    PostSearch,
    ServerSettings,
)

__all__ = ["build_app"]

log = logging.getLogger("mnemex.server")
access_log = logging.getLogger("mnemex.access")
_log_encoder = msgspec.json.Encoder()

Handler = Callable[[Request], Awaitable[Response]]


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _record(message: StoredMessage) -> dict[str, Any]:
    return {"sequence": message.sequence, "timestamp": _rfc3339(message.timestamp),
            "session_id": message.session_id, "query_id": message.query_id or "",
            "message": message.message}


_MAX_INT = 2**31 - 1


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
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise HttpError(400, f"{name}={text!r} is not a boolean (true or false)", field=name)


class _Api:
    def __init__(self, runtime: MnemexRuntime, settings: ServerSettings, metrics: Metrics) -> None:
        self.rt = runtime
        self.settings = settings
        self.metrics = metrics
        self.started = time.time()

    def agent(self, request: Request) -> AgentRef:
        name = request.path_params.get("agent", self.settings.agent)
        return self.rt.agent(name)

    # -- conversation API -----------------------------------------------------------
    async def post_messages(self, request: Request) -> Response:
        body = await read_json(request, PostMessages, self.settings.max_body_bytes)
        for index, message in enumerate(body.messages):
            role = message.get("role") if isinstance(message, dict) else None
            if not isinstance(role, str) or not role:
                raise HttpError(400, f"messages[{index}] has no role; every message needs a non-empty "
                                     f"string role", field=f"messages[{index}].role")
        appended = await self.agent(request).append(body.session_id, body.messages,
                                                    query_id=body.query_id or None)
        return json_response({"status": "stored", "session_id": body.session_id, "stored": appended.count,
                              "first_sequence": appended.first_sequence if appended.count else None},
                             201)

    async def get_messages(self, request: Request) -> Response:
        limit = _query_int(request, "limit", None, minimum=1)
        offset = _query_int(request, "offset", 0) or 0
        page = await self.agent(request).messages(
            session_id=request.query_params.get("session_id") or None,
            query_id=request.query_params.get("query_id") or None, limit=limit, offset=offset)
        return json_response({"messages": [_record(m) for m in page.messages], "total": page.total,
                              "limit": page.limit if page.limit is not None else page.total,
                              "offset": page.offset})

    async def delete_messages(self, request: Request) -> Response:
        agent = self.agent(request)
        session_id = request.query_params.get("session_id")
        if session_id:
            existed = await agent.delete_session(session_id)
            return json_response({"status": "deleted", "sessions": [session_id] if existed else []})
        deleted = await agent.delete_all()
        return json_response({"status": "deleted", "sessions": deleted.session_ids,
                              "messages": deleted.messages_removed})

    async def get_sessions(self, request: Request) -> Response:
        sessions = await self.agent(request).sessions()
        return json_response({"sessions": [s.session_id for s in sessions]})

    async def memory_status(self, request: Request) -> Response:
        sessions = await self.agent(request).sessions()
        return json_response({
            "total_sessions": len(sessions),
            "total_messages": sum(s.message_count for s in sessions),
            "sessions": {s.session_id: {"message_count": s.message_count, "query_count": s.query_count,
                                        "completed": s.completed} for s in sessions},
        })

    async def complete_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        await self.agent(request).complete(session_id)
        return json_response({"status": "completed", "session": session_id})

    async def push_stream(self, request: Request) -> Response:
        """``POST /stream/{id}``: a long-lived NDJSON body, one chunk per line, each
        handed to the session's readers as it arrives."""
        session_id = request.path_params["session_id"]
        agent = self.agent(request)
        limit = self.settings.max_body_bytes
        pending = b""
        count = 0
        async with aclosing(request.stream()) as body:
            async for data in body:
                pending += data
                *lines, pending = pending.split(b"\n")
                if len(pending) > limit:
                    raise HttpError(413, f"a stream line is over {limit:,} bytes (server.max_body_bytes)")
                for line in lines:
                    if line.strip():
                        await agent.relay(session_id, line)
                        count += 1
        if pending.strip():
            await agent.relay(session_id, pending)
            count += 1
        return json_response({"status": "ok", "session": session_id, "chunks": count})

    async def complete_stream(self, request: Request) -> Response:
        """``POST /stream/{id}/complete``: the pushed stream ended; readers get the end."""
        session_id = request.path_params["session_id"]
        await self.agent(request).complete(session_id)
        return json_response({"status": "completed", "session": session_id})

    async def stream(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        from_beginning = _query_bool(request, "from-beginning")
        wait = _query_bool(request, "wait-for-session")
        timeout = parse_duration(request.query_params.get("timeout", "30s"), "timeout")
        stream = self.agent(request).subscribe(session_id, from_beginning=from_beginning,
                                               wait_for_session=wait, timeout=max(timeout, 0.001))
        try:
            await stream.open()
        except NotFound:
            await stream.aclose()
            raise
        except BaseException:
            await stream.aclose()
            raise
        self.metrics.streams.inc()
        return StreamingResponse(self._sse(session_id, stream), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _sse(self, session_id: str, stream: Any) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None, created: float) -> bytes:
            body = {"id": session_id, "object": "chat.completion.chunk", "created": int(created),
                    "model": "memory-service",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return b"data: " + msgspec.json.encode(body) + b"\n\n"

        try:
            async with stream:
                async for event in stream:
                    event_: StreamEvent = event
                    if event_.kind == "message" and event_.message is not None:
                        message = event_.message.message
                        delta = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls",
                                                                             "name", "tool_call_id")}
                        yield chunk(delta, None, event_.message.timestamp)
                    elif event_.kind == "chunk" and event_.chunk is not None:
                        yield b"data: " + bytes(event_.chunk) + b"\n\n"
                    elif event_.kind == "live":
                        yield b"data: [LIVE_MODE]\n\n"
                    elif event_.kind == "error":
                        yield b"data: " + json.dumps({"error": event_.detail}).encode() + b"\n\n"
                        break
                    else:  # completed, deleted, expired: the end of the stream
                        yield chunk({}, "stop", time.time())
                        break
            yield b"data: [STREAM_END]\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            self.metrics.streams.dec()

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
        body = await read_json(request, PostMemory, self.settings.max_body_bytes)
        scope = self.rt.scope(user_id=body.user_id, app_name=body.app_name)
        memory_id = await scope.remember(body.content, **body.given())
        return json_response({"id": memory_id}, 201)

    async def post_memory_batch(self, request: Request) -> Response:
        body = await read_json(request, PostMemoryBatch, self.settings.max_body_bytes)
        groups: dict[tuple[str, str], list[int]] = {}
        for index, memory in enumerate(body.memories):
            groups.setdefault((memory.user_id, memory.app_name), []).append(index)
        ids: list[str] = [""] * len(body.memories)
        for (user_id, app_name), indexes in groups.items():
            stored = await self.rt.scope(user_id=user_id, app_name=app_name).remember_many(
                [{"content": body.memories[i].content, **body.memories[i].given()} for i in indexes])
            for i, memory_id in zip(indexes, stored, strict=True):
                ids[i] = memory_id
        return json_response({"ids": ids}, 201)

    async def search_memory(self, request: Request) -> Response:
        body = await read_json(request, PostSearch, self.settings.max_body_bytes)
        mode: Any = body.mode if body.mode is not None else DEFAULT
        min_score = body.min_score if body.min_score is not None else DEFAULT  # absent or null: the mode's
        if body.scopes:
            scopes = [(s.app_name, s.user_id) for s in body.scopes]
        elif body.user_id and body.app_name:
            scopes = [(body.app_name, body.user_id)]
        else:
            raise HttpError(422, "give user_id and app_name, or scopes: [{user_id, app_name}, ...]",
                            field="user_id")
        if len(scopes) == 1:
            app_name, user_id = scopes[0]
            result = await self.rt.scope(user_id=user_id, app_name=app_name).search(
                body.query, body.top_k, mode, min_score, body.filters)
        else:
            result = await self.rt.search(body.query, scopes, body.top_k, mode=mode,
                                          min_score=min_score, filter=body.filters)
        return json_response({"mode": result.mode, "results": [{
            "id": hit.memory.id, "content": hit.memory.content, "score": hit.score, "scores": hit.scores,
            "user_id": hit.user_id or scopes[0][1], "app_name": hit.app_name or scopes[0][0],
            "memory": hit.memory} for hit in result.hits]})

    async def get_memory(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        record = await self.rt.scope(user_id=user_id, app_name=app_name).get(request.path_params["memory_id"])
        return json_response(record)

    async def delete_memory(self, request: Request) -> Response:
        user_id, app_name = self._scope_of(request)
        memory_id = request.path_params["memory_id"]
        if not await self.rt.scope(user_id=user_id, app_name=app_name).forget(memory_id):
            raise NotFound(f"no memory {memory_id!r} in scope {app_name}/{user_id}")
        return json_response({"status": "deleted", "id": memory_id})

    async def archive(self, request: Request) -> Response:
        body = await read_json(request, PostArchive, self.settings.max_body_bytes)
        session_id = request.path_params["session_id"]
        added = await self.rt.archive(body.agent or request.path_params.get("agent", self.settings.agent),
                                      session_id, user_id=body.user_id, app_name=body.app_name)
        return json_response({"status": "archived", "session_id": session_id, "memories": len(added.ids),
                              "added": added.added, "ids": added.ids})

    # -- operations ---------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        stats = self.rt.stats()
        return json_response({
            "status": "ok",
            "uptime_seconds": round(time.time() - self.started, 3),
            "data_dir": self.rt.config.storage.data_dir,
            "actors": {"live": stats.live, "spawned": stats.spawns, "passivations": stats.passivations,
                       "crashes": stats.crashes, "mailbox_depth": stats.mailbox_depth},
            "journal": self.rt.journal_health(),
        })

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.render(self.rt), media_type=self.metrics.content_type)

    async def openapi(self, request: Request) -> Response:
        return json_response(openapi_document())


class _Endpoint:
    """One route as a plain ASGI app: bearer token, the handler, errors as JSON,
    metrics and the access log. Being an ASGI app rather than a function, Starlette
    calls it directly, without wrapping every request in handlers of its own."""

    __slots__ = ("handler", "logs", "metrics", "route", "token")

    def __init__(self, route: str, handler: Handler, token: str | None, metrics: Metrics,
                 logs: bool) -> None:
        self.route = route
        self.handler = handler
        self.token = token
        self.metrics = metrics
        self.logs = logs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        started = time.perf_counter()
        try:
            if self.token is not None:
                check_token(request, self.token)
            response = await self.handler(request)
        except (HttpError, MnemexError) as exc:
            response = error_response(exc)
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


def build_app(runtime: MnemexRuntime, settings: ServerSettings | None = None) -> Starlette:
    """The ASGI app serving ``runtime``; it must run in the runtime's trio run."""
    settings = settings if settings is not None else runtime.config.server
    metrics = Metrics()
    api = _Api(runtime, settings, metrics)
    open_paths = {"/health"} if settings.open_health else set()

    def wrap(route: str, handler: Handler) -> _Endpoint:
        # /health is the one open path and has no parameters: its route is its path
        token = settings.token if route not in open_paths else None
        return _Endpoint(route, handler, token, metrics, settings.access_log)

    routes: list[Route] = []

    def add(path: str, handler: Handler, methods: list[str], *, per_agent: bool = False) -> None:
        routes.append(Route(path, wrap(path, handler), methods=methods))
        if per_agent:
            agent_path = "/agents/{agent}" + path
            routes.append(Route(agent_path, wrap(agent_path, handler), methods=methods))

    add("/messages", api.post_messages, ["POST"], per_agent=True)
    add("/messages", api.get_messages, ["GET"], per_agent=True)
    add("/messages", api.delete_messages, ["DELETE"], per_agent=True)
    add("/sessions", api.get_sessions, ["GET"], per_agent=True)
    add("/memory-status", api.memory_status, ["GET"], per_agent=True)
    add("/session/{session_id}/complete", api.complete_session, ["POST"], per_agent=True)
    add("/stream/{session_id}", api.stream, ["GET"], per_agent=True)
    add("/stream/{session_id}", api.push_stream, ["POST"], per_agent=True)
    add("/stream/{session_id}/complete", api.complete_stream, ["POST"], per_agent=True)
    add("/memory", api.post_memory, ["POST"])
    add("/memory/batch", api.post_memory_batch, ["POST"])
    add("/memory/search", api.search_memory, ["POST"])
    add("/memory/{memory_id}", api.get_memory, ["GET"])
    add("/memory/{memory_id}", api.delete_memory, ["DELETE"])
    add("/sessions/{session_id}/archive", api.archive, ["POST"], per_agent=True)
    add("/health", api.health, ["GET"])
    add("/metrics", api.metrics_text, ["GET"])
    add("/openapi.json", api.openapi, ["GET"])

    async def not_found(request: Request, exc: Exception) -> Response:
        return json_response({"error": f"no route {request.method} {request.url.path}"}, 404)

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return json_response({"error": f"{request.method} is not allowed on {request.url.path}"}, 405)

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
    app.state.runtime = runtime
    app.state.metrics = metrics
    return app
