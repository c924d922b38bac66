"""The routes remote clients (``mnemex.connect``, ``mnemex.Client(url=...)``) speak:
one command for one actor, answered with its typed reply; a session's live feed;
and what a client checks when it connects (``mnemex.remote.wire`` is the contract).

Only the commands of ``wire.ASK`` decode (the whitelist: nothing the runtime sends
its own actors, such as an extraction's result, can be forged from outside), and
a command carrying vectors must carry them of this server's embedder. Appends go
through the server's own AgentRef, so what hangs on appends here (automatic
extraction) runs for remote appends too. Bodies are bounded, tokens and the
Host/Origin guard apply, as on every route.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response

import mnemex
from mnemex import DEFAULT, ExtractionError, InvalidInput, MnemexError
from mnemex.remote import wire
from mnemex.server._http import HttpError, error_response, json_response, read_body, status_of
from mnemex.server._openapi import RouteSpec
from mnemex.server._schemas import ServerSettings

if TYPE_CHECKING:
    from mnemex.server._bridge import Bridge
    from mnemex.server._served import Operations, ServedRuntime

__all__ = ["REMOTE_ROUTES", "RemoteRoutes"]

_NDJSON: Final = "application/x-ndjson"
_HEARTBEAT: Final = b"\n"
_encoder = msgspec.json.Encoder()
_watch_codec = msgspec.json.Decoder(wire.WatchAgent)


def _decoded(raw: bytes, type_: Any, what: str) -> Any:
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"{what}: {exc}", field="command" if "command" in str(exc) else None) from exc
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from exc


class RemoteRoutes:
    """The handlers of REMOTE_ROUTES, mixed into the app's _Api (its runtime, settings,
    bridge and streams)."""

    rt: ServedRuntime
    ops: Operations
    settings: ServerSettings
    call: Callable[..., Awaitable[Any]]

    bridge: Bridge | None

    def _embedder(self) -> wire.EmbedderInfo | None:
        named = self.ops.embedder_info()
        return wire.EmbedderInfo(*named) if named is not None else None

    def _kinds(self) -> list[str]:
        kinds = self.ops.kinds
        return [kind for kind in wire.KEYS if kind in kinds]

    async def remote_info(self, request: Request) -> Response:
        config = self.rt.config
        return json_response(wire.RuntimeInfo(
            protocol=wire.PROTOCOL, version=mnemex.__version__, kinds=self._kinds(),
            embedder=self._embedder(), ask_timeout=config.kernel.ask_timeout, memories=config.memories,
            conversations=config.conversations, knowledge=config.knowledge, models=config.models))

    async def remote_scopes(self, request: Request) -> Response:
        return json_response(wire.ScopeKeys(await self.call(self.ops.scope_keys)))

    async def remote_ask(self, request: Request) -> Response:
        kind = request.path_params["kind"]
        body_type = wire.ask_request_type(kind)
        if body_type is None or kind not in self.ops.kinds:
            raise HttpError(404, f"no actor kind {kind!r} is served remotely; the kinds are "
                                 f"{', '.join(self._kinds())}", field="kind")
        raw = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout)
        body = _decoded(raw, body_type, f"POST /v1/actors/{kind}/ask body")
        command = wire.to_actor(body.command)
        self._check_vectors(command)
        timeout: Any = body.timeout if body.timeout is not None else DEFAULT
        try:
            if isinstance(command, wire.APPENDS):
                reply = await self.call(self._append, body.key[0], command)
            else:
                reply = await self.call(self.rt.ask, kind, tuple(body.key), command, timeout=timeout)
        except ExtractionError as exc:  # its reason crosses too
            answer = {"error": str(exc), "type": type(exc).__name__, "reason": exc.reason}
            return json_response(answer, status_of(exc))
        return json_response(reply)

    async def _append(self, name: str, command: Any) -> Any:
        """An append as the server's own AgentRef makes it (what waits on appends runs)."""
        agent = self.rt.agent(name)
        if isinstance(command, wire.APPENDS[1]):
            items = [msgspec.json.decode(item) for item in command.items]
            return await agent.append_items(command.session_id, items, query_id=command.query_id,
                                            turn=command.turn)
        messages = [msgspec.json.decode(message) for message in command.messages]
        return await agent.append(command.session_id, messages, query_id=command.query_id, turn=command.turn)

    def _check_vectors(self, command: Any) -> None:
        """Vectors of another model never enter a scope (a new scope would take them)."""
        named = getattr(command, "embedder", None)
        if named is None or not isinstance(command, wire.VECTORS_OF_THE_SCOPE):
            return  # a search's query vector, keyed memories' own models: the scope checks them
        ours = self._embedder()
        dim = getattr(command, "dim", 0)
        if ours is None or (named, dim) != (ours.name, ours.dim):
            mine = "none" if ours is None else f"{ours.name!r} (dim {ours.dim})"
            raise InvalidInput(f"the command carries vectors of {named!r} (dim {dim}); this server embeds "
                               f"with {mine}", field="command.embedder")

    async def remote_stream(self, request: Request) -> Response:
        kind = request.path_params["kind"]
        if kind != wire.WATCH.kind:
            raise HttpError(404, f"only agents' sessions stream remotely, not {kind!r}", field="kind")
        raw = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout)
        body: wire.WatchAgent = _decoded(raw, wire.WatchAgent, "POST /v1/actors/agent/stream body")
        heartbeat = self.settings.stream_heartbeat
        if self.bridge is None:
            raise RuntimeError("the remote routes reach the runtime through a Bridge (see Server)")
        lines = self.bridge.iterate(lambda: _feed(self.rt, body, heartbeat))
        try:
            first = await anext(lines)  # the subscription stands (or its error is the answer)
        except MnemexError as exc:
            await lines.aclose()  # type: ignore[attr-defined]  # an async generator
            return error_response(exc)
        except BaseException:
            await lines.aclose()  # type: ignore[attr-defined]
            raise
        from mnemex.server._app import _EventStream  # the app imports this module first

        return _EventStream(_prepended(first, lines), media_type=_NDJSON,
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _prepended(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for line in rest:
            yield line
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


async def _feed(rt: ServedRuntime, body: wire.WatchAgent, heartbeat: float) -> AsyncIterator[bytes]:
    """The session's feed as NDJSON (runs in the runtime's trio run): Started, each
    event, then Finished or Failed; a blank line after ``heartbeat`` quiet seconds, so
    a reader that left is noticed."""
    command = body.command
    topic = "session:" + command.session_id
    subscription = await rt.subscribe(wire.AGENT, tuple(body.key), topic, command, buffer=body.buffer)
    try:
        yield _encoder.encode(wire.Started(subscription.initial)) + b"\n"
        while True:
            event: Any = None
            with trio.move_on_after(heartbeat if heartbeat > 0 else float("inf")):
                try:
                    event = await subscription.__anext__()
                except StopAsyncIteration:
                    event = wire.Finished()
                except MnemexError as exc:
                    event = wire.Failed(str(exc), type(exc).__name__)
            if event is None:
                yield _HEARTBEAT
            elif isinstance(event, wire.Finished | wire.Failed):
                yield _encoder.encode(event) + b"\n"
                return
            else:
                yield _encoder.encode(wire.line_of(event)) + b"\n"
    finally:
        await subscription.aclose()


REMOTE_ROUTES: Final[tuple[RouteSpec, ...]] = (
    RouteSpec("/v1/runtime", "GET", "remote_info",
              "What a remote client checks at connect: protocol, version, embedder, limits",
              reply=wire.RuntimeInfo),
    RouteSpec("/v1/scopes", "GET", "remote_scopes", "Every scope, [app_name, user_id], sorted",
              reply=wire.ScopeKeys),
    RouteSpec("/v1/actors/{kind}/ask", "POST", "remote_ask",
              "One whitelisted command for one actor (kind agent or scope), answered with its reply "
              "(mnemex.remote.wire.ASK names each command's reply type)",
              body=wire.AskBody, reply=wire.ActorReply, errors=(400, 404, 413, 422, 504)),
    RouteSpec("/v1/actors/{kind}/stream", "POST", "remote_stream",
              "A session's live messages as NDJSON lines (started, entries, chunk, ended, then finished or "
              "failed); blank lines are heartbeats", body=wire.WatchAgent, media=_NDJSON,
              errors=(400, 404, 413)),
)
