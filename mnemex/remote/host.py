"""The runtime protocol (``mnemex._host.Host``) over HTTP: what lets ``AgentRef`` and
``ScopeRef`` run unchanged against ``mnemex serve``.

``ask`` posts the typed command (``wire.ASK`` names which may go, and the type of the
reply), decodes the typed reply, and raises an error answer as the mnemex exception
the server raised. Connections are kept alive in one pool (httpx); calls from many
tasks share it. ``subscribe`` reads a session's feed as NDJSON in a task of the
remote runtime's nursery and hands its events on through the kernel's own
``Subscription`` (so a slow reader is dropped with Busy exactly as in-process).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from contextlib import aclosing
from typing import Any, Final

import httpx
import msgspec
import trio

from mnemex.config import DEFAULT, Config, UseDefault
from mnemex.effects import Key
from mnemex.errors import ActorClosed, InvalidInput, MnemexError, Timeout, UnknownActorKind
from mnemex.kernel import ActorRef, Subscription
from mnemex.persistence.layout import check_key
from mnemex.remote import wire

__all__ = ["HostRef", "RemoteHost", "RemoteRef", "RemoteSubscription"]

log = logging.getLogger("mnemex.remote")

_MARGIN: Final = 10.0
"""Seconds an HTTP read waits past the ask's own timeout: the server answers Timeout
itself, and that answer should win over the client's."""
_encoder = msgspec.json.Encoder()
_line_decoder = msgspec.json.Decoder(wire.StreamLine)


class HostRef(ActorRef):
    """An actor reached through a host other than the in-process kernel (a remote
    server, a cluster's shards): ``ask`` and ``tell`` go through ``host``."""

    __slots__ = ("host",)

    def __init__(self, host: Any, kind: str, key: Key) -> None:
        # ActorRef's runtime is the in-process kernel; this ref carries its host instead
        self.host = host
        self.kind = kind
        self.key = key

    async def ask(self, command: Any, *, timeout: float | UseDefault | None = DEFAULT) -> Any:
        return await self.host.ask(self.kind, self.key, command, timeout=timeout)

    async def tell(self, command: Any) -> None:
        await self.host.tell(self.kind, self.key, command)

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and isinstance(other, HostRef) and other.host is self.host
                and other.kind == self.kind and other.key == self.key)

    def __hash__(self) -> int:
        return hash((self.kind, self.key))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind!r}, {self.key!r}, {self.host.url!r})"


class RemoteRef(HostRef):
    """An actor of a remote runtime: ``ask`` and ``tell`` go over HTTP."""

    __slots__ = ()


class RemoteSubscription(Subscription):
    """A session's feed read from the server; ``aclose`` ends the request at once."""

    def __init__(self, topic: str, buffer: int) -> None:
        super().__init__(topic, buffer)
        self.reader = trio.CancelScope()

    async def aclose(self) -> None:
        await super().aclose()
        self.reader.cancel()


class RemoteHost:
    """Addresses the actors of one ``mnemex serve`` by (kind, key) and carries
    commands to them (the ``Host`` protocol). Made by ``mnemex.connect``."""

    def __init__(self, url: str, http: httpx.AsyncClient, config: Config, nursery: trio.Nursery,
                 kinds: Iterable[str] = (wire.AGENT, wire.SCOPE)) -> None:
        self.url = url
        self.kinds = tuple(kind for kind in kinds if kind in wire.KEYS)
        """The kinds reached: those the server has of the ones that cross the wire."""
        self._http = http
        self._config = config
        self._nursery = nursery
        self.closed = False

    @property
    def config(self) -> Config:
        return self._config

    def ref(self, kind: str, key: str | Key) -> RemoteRef:
        if kind not in self.kinds:
            raise UnknownActorKind(f"actor kind {kind!r} is not served remotely; this server's remote "
                                   f"clients reach {', '.join(self.kinds)}", field="kind")
        return RemoteRef(self, kind, check_key(key, self._config.kernel.max_key_bytes, kind=kind))

    def live_keys(self, kind: str | None = None) -> list[tuple[str, Key]]:
        """What the server has loaded is its own business: in-process only."""
        raise InvalidInput("live_keys runs in-process only; a remote runtime's scope_keys() lists the "
                           "server's scopes", field="live_keys")

    def _timeouts(self, timeout: float | UseDefault | None) -> tuple[float | None, float | None]:
        """The ask's own timeout (sent; None: the server's) and the HTTP read timeout."""
        if timeout is DEFAULT:
            return None, self._config.kernel.ask_timeout + _MARGIN
        if timeout is None:
            return 3600.0, None
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
                math.isfinite(timeout) and timeout > 0):
            raise InvalidInput(f"timeout must be a number of seconds > 0, None or DEFAULT, got {timeout!r}",
                               field="timeout")
        return min(float(timeout), 3600.0), float(timeout) + _MARGIN

    def _body(self, kind: str, key: str | Key, command: Any, **more: Any) -> tuple[wire.Asked, bytes]:
        ref = self.ref(kind, key)
        row, sent = wire.to_wire(command)
        if row.kind != kind:
            raise InvalidInput(f"{type(command).__name__} is a command of {row.kind} actors, not of {kind}",
                               field="command")
        return row, _encoder.encode({"key": list(ref.key), "command": sent, **more})

    async def get(self, path: str) -> httpx.Response:
        """GET one of the server's routes (connection errors as mnemex errors)."""
        if self.closed:
            raise ActorClosed(f"the connection to {self.url} is closed")
        try:
            return await self._http.get(path)
        except httpx.TimeoutException as exc:
            raise Timeout(f"{self.url} did not answer {path} in time: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise ActorClosed(f"mnemex server {self.url} is unreachable: {exc!r}") from exc

    async def post(self, path: str, body: bytes, read_timeout: float | None) -> httpx.Response:
        """POST a JSON body to one of the server's routes; ``read_timeout`` None waits
        as long as the answer takes (connection errors as mnemex errors)."""
        if self.closed:
            raise ActorClosed(f"the connection to {self.url} is closed")
        timeout = httpx.Timeout(self._config.kernel.ask_timeout, read=read_timeout)
        try:
            return await self._http.post(path, content=body, timeout=timeout,
                                         headers={"content-type": "application/json"})
        except httpx.TimeoutException as exc:
            raise Timeout(f"{self.url} did not answer {path} in time: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise ActorClosed(f"mnemex server {self.url} is unreachable: {exc!r}") from exc

    async def ask(self, kind: str, key: str | Key, command: Any, *,
                  timeout: float | UseDefault | None = DEFAULT) -> Any:
        """Send ``command`` to the server's actor and return its typed reply."""
        sent, read = self._timeouts(timeout)
        row, body = self._body(kind, key, command, **({} if sent is None else {"timeout": sent}))
        response = await self.post(f"/v1/actors/{kind}/ask", body, read)
        if response.status_code != 200:
            raise wire.error_of(response.status_code, response.content)
        try:
            return msgspec.json.decode(response.content, type=row.reply)
        except msgspec.MsgspecError as exc:
            raise MnemexError(f"{self.url} answered {type(command).__name__} with what is not a "
                              f"{row.reply!r}: {exc} (is the server the same mnemex version?)") from exc

    async def tell(self, kind: str, key: str | Key, command: Any) -> None:
        """Send ``command`` and drop its reply (it is carried out before this returns:
        HTTP answers once the actor has)."""
        await self.ask(kind, key, command)

    async def subscribe(self, kind: str, key: str | Key, topic: str, command: Any = None, *,
                        buffer: int = 1024, timeout: float | UseDefault | None = DEFAULT) -> Subscription:
        """A session's live feed (the only topic that crosses the wire): ``command`` is
        its WatchSession; ``initial`` is the server's WatchStart."""
        if not isinstance(command, wire.WATCH.wire) or kind != wire.WATCH.kind:
            raise InvalidInput("a remote runtime subscribes only to agent sessions (WatchSession)",
                               field="command")
        ref = self.ref(kind, key)
        _, read = self._timeouts(timeout)
        body = _encoder.encode({"key": list(ref.key), "command": command, "buffer": buffer})
        subscription = RemoteSubscription(topic, buffer)
        await self._nursery.start(self._read_feed, kind, body, read, subscription)
        return subscription

    async def _read_feed(self, kind: str, body: bytes, first_timeout: float | None,
                         subscription: RemoteSubscription, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the feed, hand its first line (the WatchStart) to ``start``, then push
        its events into ``subscription`` until it ends, breaks or is closed. Before
        the start an error is raised to the subscriber; after it, it ends the feed."""
        request = self._http.build_request(
            "POST", f"/v1/actors/{kind}/stream", content=body, headers={"content-type": "application/json"},
            timeout=httpx.Timeout(self._config.kernel.ask_timeout, read=None))
        feed = _Feed(subscription)

        def start(reply: Any) -> None:
            subscription.initial = reply
            feed.started = True
            task_status.started()

        with subscription.reader:
            try:
                with trio.fail_after(first_timeout if first_timeout is not None else math.inf):
                    response = await self._http.send(request, stream=True)
            except trio.TooSlowError:
                raise Timeout(f"{self.url} did not start the session feed in time") from None
            except httpx.TransportError as exc:
                raise ActorClosed(f"mnemex server {self.url} is unreachable: {exc!r}") from exc
            try:
                if response.status_code != 200:
                    raise wire.error_of(response.status_code, await response.aread())
                await self._pump(response, feed, start)
            except httpx.TransportError as exc:
                feed.outcome.append(ActorClosed(f"the session feed from {self.url} broke: {exc!r}"))
            finally:
                with trio.CancelScope(shield=True):
                    await response.aclose()
        if feed.outcome:
            error = feed.outcome[0]
        elif subscription.closed:
            error = None
        else:
            error = ActorClosed(f"{self.url} ended the session feed before its end")
        if not feed.started:
            raise error or MnemexError(f"{self.url} closed the session feed before it started")
        subscription._end(error)

    async def _pump(self, response: httpx.Response, feed: _Feed, start: Callable[[Any], None]) -> None:
        """Read the feed's lines until it ends or ``feed.stop``: stopping cancels the
        read, so that httpx's own generators end inside it (and not in the collector)."""
        subscription = feed.subscription
        async with aclosing(response.aiter_lines()) as lines:  # type: ignore[type-var]  # a generator
            async for text in lines:
                if feed.stopping or not text.strip():
                    continue  # stopped (the cancellation lands at the next read), or a heartbeat
                try:
                    line = _line_decoder.decode(text)
                except msgspec.MsgspecError as exc:
                    feed.stop(MnemexError(f"{self.url} sent a session feed line that does not parse: {exc}"))
                    continue
                if isinstance(line, wire.Started):
                    start(line.reply)
                elif isinstance(line, wire.Entries | wire.Chunk | wire.Ended):
                    if subscription.closed or not subscription._push(line.event):
                        feed.stop(None)
                elif isinstance(line, wire.Failed):
                    feed.stop(wire.error_of(500, _encoder.encode({"error": line.error, "type": line.type})))
                else:  # Finished
                    feed.stop(None)


class _Feed:
    """Where one session feed stands: started, stopping, and how it ended."""

    __slots__ = ("outcome", "started", "stopping", "subscription")

    def __init__(self, subscription: RemoteSubscription) -> None:
        self.subscription = subscription
        self.started = False
        self.stopping = False
        self.outcome: list[MnemexError | None] = []

    def stop(self, error: MnemexError | None) -> None:
        if not self.stopping:
            self.stopping = True
            self.outcome.append(error)
            self.subscription.reader.cancel()
