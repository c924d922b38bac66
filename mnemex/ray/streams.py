"""Live streams through a cluster: session feeds and pushed streams, each kept by the
shard that owns its key, read by the HTTP fronts (``mnemex serve --ray``) with a
polled cursor.

* A **session feed** (``AgentRef.subscribe``, SSE of a stored session, the remote
  clients' ``/v1/actors/agent/stream``) is a kernel ``Subscription`` on the agent's
  shard, registered under a feed id; the front polls it and hands each event to a
  ``Subscription`` of its own, so callers read it as in-process.
* A **pushed stream** (``POST /stream/{name}``, ``GET /stream/{name}``) lives in a
  ``StreamHub`` on the shard that owns the virtual shard of ``("stream", name)``:
  every front pushes there and reads from there, so a controller may push through
  one front while readers follow through others.

Why polling, and not Ray's streaming generators (``num_returns="streaming"``):

* A poll is one ordinary call, bounded in time (it waits at most ``wait`` seconds
  for something new) and in size (at most ``MAX_BATCH_CHUNKS`` chunks or about
  ``MAX_BATCH_BYTES``). The front asks for the next batch only once the reader has
  taken the last one (``Bridge.iterate`` holds a few), so a slow reader slows its
  own polls and nothing piles up: the shard holds what the stream keeps anyway
  (bounded by ``server.stream_max_chunks``/``stream_max_bytes``) or the session
  subscription's own bounded buffer (a reader that falls further behind is dropped
  with Busy, as in-process; appends never wait for readers).
* Order and completeness are the reader's to check: a pushed stream's read carries
  its position (an index into the stream's chunks), a feed's events come in
  order from one subscription polled by one task.
* A reader that goes (its client left: its wait is cancelled, and nobody else's)
  is released at once; one whose front died is simply not polled again, and the
  shard forgets it after ``idle`` seconds. A generator would instead hold one of
  the shard's threads for the whole life of the stream, and be cancelled only
  between two of its yields.
* Polls run in a concurrency group of their own (``STREAMS_GROUP``), so readers
  waiting for chunks never take the threads commands are served on.

Streams live in the shard's memory, as in a single server: a shard that restarts,
or a virtual shard moved by ``rebalance``, loses its pushed streams and ends its
feeds (readers get an error event; stored messages are in the journal).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio

from mnemex import ActorClosed, InvalidInput, MnemexError, MnemexRuntime
from mnemex.config import DEFAULT, ServerConfig, UseDefault
from mnemex.lowlevel import Key, Subscription, vshard_of
from mnemex.remote import RemoteSubscription, wire
from mnemex.server import CAUGHT_UP, PushedStream, StreamClosed, StreamHub

if TYPE_CHECKING:
    from mnemex.ray.cluster import RayHost

__all__ = ["MAX_BATCH_BYTES", "MAX_BATCH_CHUNKS", "STREAMS_GROUP", "STREAM_KIND", "FeedBatch", "ReadStream",
           "ShardStreams", "StreamBatch", "follow_stream", "stream_call", "subscribe_feed"]

log = logging.getLogger("mnemex.ray")

STREAM_KIND: Final = "stream"
"""The kind a pushed stream's name is hashed under to find its virtual shard (no
actor of that kind exists)."""
STREAMS_GROUP: Final = "streams"
"""The shards' Ray concurrency group for stream calls."""
STREAMS_THREADS: Final = 1024
"""Threads of that group: stream calls waiting at once on one shard, at most."""
MAX_BATCH_CHUNKS: Final = 512
MAX_BATCH_BYTES: Final = 1 << 20
FEED_WAIT: Final = 5.0
"""Seconds one poll of a session feed waits for an event."""
IDLE: Final = 60.0
"""Seconds after which a shard forgets a reader or a feed nobody polled."""

_encode = msgspec.json.Encoder().encode
_line_decoder = msgspec.json.Decoder(wire.StreamLine)
_start_decoder = msgspec.json.Decoder(wire.WATCH.reply)
_watch_decoder = msgspec.json.Decoder(wire.WatchAgent)


class ReadStream(msgspec.Struct, frozen=True, kw_only=True):
    """One poll of a pushed stream: the next chunks from ``position`` (None: the
    reader's first poll, from the start with ``from_beginning``, else from the end),
    waiting up to ``wait`` seconds for one (and, while the stream has not started,
    at most ``start_within``)."""

    name: str
    reader: str
    position: int | None = None
    from_beginning: bool = False
    wait: float = 0.0
    start_within: float = 0.0


class StreamBatch(msgspec.Struct, frozen=True, kw_only=True):
    """A poll's answer: ``chunks`` in order, the position after them, whether they
    reach the stream's end as it stands (``caught_up``), whether that end is final
    (``completed``) and whether anything was pushed yet (``started``)."""

    chunks: list[bytes]
    position: int
    caught_up: bool
    completed: bool
    started: bool


class FeedBatch(msgspec.Struct, frozen=True):
    """A session feed's poll: its next lines (``wire.StreamLine`` JSON), in order; the
    last is ``finished`` or ``failed`` when the feed ended."""

    lines: list[bytes]


def stream_error(payload: bytes, fallback: Callable[[bytes], MnemexError]) -> MnemexError:
    """A stream call's error answer as the exception it was (StreamClosed is the
    server's own, not a mnemex error class)."""
    said = msgspec.json.decode(payload, type=wire.ErrorBody)
    if said.type == "StreamClosed":
        return StreamClosed(said.error, field=said.field)
    return fallback(payload)


# -- the shard's side ---------------------------------------------------------------------------
@dataclass(eq=False)
class _Reader:
    stream: PushedStream
    seen: float
    busy: int = 0


@dataclass(eq=False)
class _Feed:
    subscription: Subscription
    seen: float
    busy: int = 0


Owning = Callable[[str, Key], Awaitable[MnemexRuntime]]
"""The shard's check that it owns a key now (NotOwner with a hint if not): the
runtime to serve it with."""


class ShardStreams:
    """The pushed streams and session feeds one shard serves to the fronts. Lives in
    the shard's trio run; ``run_reaper`` forgets what nobody polled for ``idle`` s."""

    def __init__(self, settings: ServerConfig, *, idle: float = IDLE) -> None:
        self.hub = StreamHub(settings)
        self.idle = idle
        self._changed: dict[str, trio.Event] = {}
        self._readers: dict[str, _Reader] = {}
        self._feeds: dict[str, _Feed] = {}

    @property
    def feeds(self) -> int:
        return len(self._feeds)

    async def serve(self, op: str, args: tuple[Any, ...], owning: Owning) -> Any:
        """One call of a front: ``op`` with its ``args`` (see ``stream_call``)."""
        match op:
            case "exists":
                await owning(STREAM_KIND, (args[0],))
                return self.hub.get(args[0]) is not None
            case "push":
                await owning(STREAM_KIND, (args[0],))
                return self.push(args[0], args[1])
            case "complete":
                await owning(STREAM_KIND, (args[0],))
                status = self.hub.complete(args[0])
                self._wake(args[0])
                return status
            case "read":
                request = args[0]
                assert isinstance(request, ReadStream)
                await owning(STREAM_KIND, (request.name,))
                return await self.read(request)
            case "release":
                self.release(args[0])
                return None
            case "purge":
                dropped = self.hub.purge()
                for name in list(self._changed):
                    self._wake(name)
                return dropped
            case "statistics":
                return _encode(self.hub.statistics())
            case "open_feed":
                return await self.open_feed(args[0], args[1], owning)
            case "poll_feed":
                return await self.poll_feed(args[0], args[1])
            case "close_feed":
                await self.close_feed(args[0])
                return None
            case _:
                raise InvalidInput(f"no stream call {op!r}", field="op")

    # -- pushed streams
    def push(self, name: str, lines: list[bytes]) -> tuple[int, bytes | None]:
        """Append ``lines`` in order: how many were taken, and the error (encoded)
        that refused the next one."""
        taken = 0
        try:
            for line in lines:
                self.hub.push(name, line)
                taken += 1
        except MnemexError as exc:
            return taken, _encode_error(exc)
        finally:
            if taken:
                self._wake(name)
        return taken, None

    def _wake(self, name: str) -> None:
        event = self._changed.pop(name, None)
        if event is not None:
            event.set()

    async def read(self, request: ReadStream) -> StreamBatch:
        reader = self._readers.get(request.reader)
        if reader is None:
            reader = self._attach(request)
        reader.busy += 1
        try:
            stream = reader.stream
            position = request.position
            if position is None:
                position = 0 if request.from_beginning else len(stream.chunks)
            if position >= len(stream.chunks) and not stream.completed and request.wait > 0:
                wait = request.wait if stream.started else min(request.wait, request.start_within)
                event = self._changed.get(stream.name)
                if event is None:
                    event = self._changed[stream.name] = trio.Event()
                with trio.move_on_after(max(wait, 0.0)):
                    await event.wait()
            chunks: list[bytes] = []
            size = 0
            while position < len(stream.chunks) and len(chunks) < MAX_BATCH_CHUNKS and size < MAX_BATCH_BYTES:
                chunk = stream.chunks[position]
                chunks.append(chunk)
                size += len(chunk)
                position += 1
            caught_up = position >= len(stream.chunks)
            return StreamBatch(chunks=chunks, position=position, caught_up=caught_up,
                               completed=caught_up and stream.completed, started=stream.started)
        finally:
            reader.busy -= 1
            reader.seen = time.monotonic()

    def _attach(self, request: ReadStream) -> _Reader:
        if request.position is not None:  # a reader this shard forgot: go on only if the stream is the same
            kept = self.hub.get(request.name)
            if kept is None or len(kept.chunks) < request.position:
                raise ActorClosed(f"stream {request.name!r} is no longer kept here (its shard restarted, or "
                                  f"its virtual shard moved); its chunks are lost")
        reader = self._readers[request.reader] = _Reader(self.hub.attach(request.name), time.monotonic())
        return reader

    def release(self, reader_id: str) -> None:
        reader = self._readers.pop(reader_id, None)
        if reader is not None:
            self.hub.detach(reader.stream)

    # -- session feeds
    async def open_feed(self, kind: str, raw: bytes, owning: Owning) -> tuple[str, bytes]:
        """Subscribe to a session (``raw``: a ``wire.WatchAgent`` body): the feed's id,
        and its WatchStart as JSON."""
        if kind != wire.WATCH.kind:
            raise InvalidInput(f"only agents' sessions stream, not {kind!r}", field="kind")
        try:
            body = _watch_decoder.decode(raw)
        except msgspec.MsgspecError as exc:
            raise InvalidInput(f"a session feed request does not decode: {exc}", field="command") from exc
        key = tuple(body.key)
        rt = await owning(kind, key)
        subscription = await rt.subscribe(kind, key, "session:" + body.command.session_id, body.command,
                                          buffer=body.buffer)
        feed_id = uuid.uuid4().hex
        self._feeds[feed_id] = _Feed(subscription, time.monotonic())
        return feed_id, _encode(subscription.initial)

    async def poll_feed(self, feed_id: str, wait: float) -> FeedBatch:
        feed = self._feeds.get(feed_id)
        if feed is None:
            return FeedBatch([_encode(wire.Failed("the session feed is no longer kept by its shard (it "
                                                  "restarted, or nobody read the feed for a while)",
                                                  "ActorClosed"))])
        feed.busy += 1
        lines: list[bytes] = []
        ended = False
        try:
            with trio.move_on_after(max(wait, 0.0)):
                line, ended = await _next_line(feed.subscription)
                lines.append(line)
            while not ended and len(lines) < MAX_BATCH_CHUNKS:
                taken = _next_line_nowait(feed.subscription)
                if taken is None:
                    break
                line, ended = taken
                lines.append(line)
        finally:
            feed.busy -= 1
            feed.seen = time.monotonic()
        if ended:
            await self.close_feed(feed_id)
        return FeedBatch(lines)

    async def close_feed(self, feed_id: str) -> None:
        feed = self._feeds.pop(feed_id, None)
        if feed is not None:
            await feed.subscription.aclose()

    async def run_reaper(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Forget, every ``idle / 2`` seconds, the readers and feeds not polled for
        ``idle`` seconds (their fronts went without saying so)."""
        task_status.started()
        while True:
            await trio.sleep(self.idle / 2)
            await self.reap(time.monotonic() - self.idle)

    async def reap(self, before: float) -> int:
        """Forget the readers and feeds idle since before ``before``; how many."""
        readers = [key for key, r in self._readers.items() if not r.busy and r.seen < before]
        for key in readers:
            self.release(key)
        feeds = [key for key, f in self._feeds.items() if not f.busy and f.seen < before]
        for key in feeds:
            await self.close_feed(key)
        if readers or feeds:
            log.info("forgot %d stream readers and %d session feeds nobody polled for %g s", len(readers),
                     len(feeds), self.idle)
        return len(readers) + len(feeds)


def _line_of(event: Any) -> bytes:
    return _encode(wire.line_of(event))


async def _next_line(subscription: Subscription) -> tuple[bytes, bool]:
    """The subscription's next event as a feed line, and whether it was the last."""
    try:
        event = await subscription.__anext__()
    except StopAsyncIteration:
        return _encode(wire.Finished()), True
    except MnemexError as exc:
        return _encode(wire.Failed(str(exc), type(exc).__name__)), True
    return _line_of(event), False


def _next_line_nowait(subscription: Subscription) -> tuple[bytes, bool] | None:
    """As ``_next_line`` without waiting; None when no event is ready."""
    try:
        event = subscription._recv.receive_nowait()
    except trio.WouldBlock:
        return None
    except (trio.EndOfChannel, trio.ClosedResourceError):
        error = subscription.error
        if error is None:
            return _encode(wire.Finished()), True
        return _encode(wire.Failed(str(error), type(error).__name__)), True
    return _line_of(event), False


def _encode_error(exc: MnemexError) -> bytes:
    from mnemex.ray.shard import encode_error

    return encode_error(exc)


# -- the front's side ---------------------------------------------------------------------------
async def stream_call(host: RayHost, vshard: int, op: str, *args: Any, limit: float,
                      retry_dead: bool) -> tuple[int, Any]:
    """Call ``op`` of the stream service of the shard serving ``vshard``: the shard's
    index and the value. NotOwner re-routes (``RayHost.route_vshard``) until ``limit``
    seconds; a shard that is down is waited for only with ``retry_dead`` (a read: its
    streams are gone with it anyway), else it is ActorClosed."""
    from mnemex.ray.cluster import _error_of

    def send(shard: Any) -> Any:
        return shard.streams.options(concurrency_group=STREAMS_GROUP).remote(op, *args)

    return await host.route_vshard(vshard, f"the streams' {op}", send, limit=limit,
                                   what=f"the stream call {op}", retry_dead=retry_dead,
                                   error_of=lambda payload: stream_error(payload, _error_of))


def release_reader(host: RayHost, index: int, reader: str) -> None:
    """Tell shard ``index`` a reader went (not waited for: a shard that does not hear
    it forgets the reader after IDLE seconds)."""
    try:
        host.shards[index].streams.options(concurrency_group=STREAMS_GROUP).remote("release", reader)
    except Exception as exc:  # a dead shard has forgotten it already
        log.debug("releasing a stream reader on shard %d: %r", index, exc)


async def follow_stream(host: RayHost, name: str, *, from_beginning: bool, wait: float,
                        heartbeat: float) -> AsyncIterator[bytes | None]:
    """The pushed stream ``name`` as ``StreamHub.follow`` gives it (chunks, CAUGHT_UP
    once, None for heartbeats; TimeoutError if it does not start within ``wait``),
    read from the shard that keeps it. Runs in the front's trio run."""
    vshard = vshard_of(STREAM_KIND, (name,))
    reader = uuid.uuid4().hex
    limit = host.config.kernel.ask_timeout + heartbeat
    position: int | None = None
    caught_up = False
    start_by = trio.current_time() + wait
    served: int | None = None
    try:
        while True:
            request = ReadStream(name=name, reader=reader, position=position, from_beginning=from_beginning,
                                 wait=heartbeat if caught_up else 0.0,
                                 start_within=max(start_by - trio.current_time(), 0.0))
            served, batch = await stream_call(host, vshard, "read", request, limit=limit,
                                              retry_dead=position is None)
            assert isinstance(batch, StreamBatch)
            for chunk in batch.chunks:
                yield chunk
            position = batch.position
            if batch.caught_up and not caught_up:
                caught_up = True
                yield CAUGHT_UP
                continue  # chunks may have come meanwhile
            if batch.completed:
                return
            if not batch.chunks and caught_up:
                if not batch.started and trio.current_time() >= start_by:
                    raise TimeoutError(f"stream {name!r} did not start within {wait:g} s")
                yield None
    finally:
        if served is not None:
            release_reader(host, served, reader)


async def subscribe_feed(host: RayHost, nursery: trio.Nursery, kind: str, key: str | Key, topic: str, *,
                         command: Any, buffer: int, timeout: float | UseDefault | None = DEFAULT,
                         ) -> Subscription:
    """A session's live feed from the shard serving the agent (``Host.subscribe``):
    ``initial`` is its WatchStart, the events follow in order; ``aclose`` ends it at
    once, here and on the shard. A shard that goes down ends it with ActorClosed."""
    if not isinstance(command, wire.WATCH.wire) or kind != wire.WATCH.kind:
        raise InvalidInput("a cluster subscribes only to agent sessions (WatchSession)", field="command")
    if not isinstance(buffer, int) or not 1 <= buffer <= 65_536:
        raise InvalidInput(f"subscription buffer must be an int from 1 to 65,536, got {buffer!r}",
                           field="buffer")
    ref = host.ref(kind, key)
    limit = host._limit(timeout)
    body = _encode({"key": list(ref.key), "command": command, "buffer": buffer})
    index, (feed_id, start) = await stream_call(host, vshard_of(kind, ref.key), "open_feed", kind, body,
                                                limit=limit, retry_dead=True)
    subscription = RemoteSubscription(topic, buffer)
    subscription.initial = _start_decoder.decode(start)
    nursery.start_soon(_pump, host, index, feed_id, subscription)
    return subscription


async def _pump(host: RayHost, index: int, feed_id: str, subscription: RemoteSubscription) -> None:
    """Poll the feed into ``subscription`` until it ends, breaks or is closed."""
    from mnemex.ray.cluster import _ray, wait_for
    from mnemex.ray.shard import shard_name

    ray = _ray()
    call = host.shards[index].streams.options(concurrency_group=STREAMS_GROUP)
    error: MnemexError | None = None
    ended = stop = False  # ended on the shard's side; stopped on this one
    with subscription.reader:
        try:
            while not (ended or stop):
                ok, payload = await wait_for(call.remote("poll_feed", feed_id, FEED_WAIT))
                if not ok:
                    error, ended = stream_error(payload, lambda p: wire.error_of(500, p)), True
                    break
                assert isinstance(payload, FeedBatch)
                for text in payload.lines:
                    line = _line_decoder.decode(text)
                    if isinstance(line, wire.Entries | wire.Chunk | wire.Ended):
                        # closed, or dropped as too slow (Busy): the feed stops here
                        stop = subscription.closed or not subscription._push(line.event)
                    elif isinstance(line, wire.Failed):
                        error = wire.error_of(500, _encode({"error": line.error, "type": line.type}))
                        ended = True
                    else:  # Finished
                        ended = True
                    if ended or stop:
                        break
        except ray.exceptions.RayError as exc:
            error, ended = ActorClosed(f"{shard_name(index)}, which served the session feed, went down "
                                       f"({type(exc).__name__}); read the session's messages again"), True
    if not ended:  # closed here, or too slow: the shard's side goes too
        try:
            call.remote("close_feed", feed_id)
        except Exception as exc:
            log.debug("closing a session feed on shard %d: %r", index, exc)
    subscription._end(error)

