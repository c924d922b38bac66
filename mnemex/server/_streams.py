"""Pushed streams: what a platform's controller pushes under a query name, kept for
the readers that come before, during and after the push.

The controller sends a query's model output as a long-lived NDJSON body
(``POST /stream/{name}``), one ``chat.completion.chunk`` per line, then marks the
end (``POST /stream/{name}/complete``). Readers (``GET /stream/{name}``) may
arrive before the first chunk, in the middle (``from-beginning=true`` replays
what they missed) or after the end. So each stream keeps its chunks, bounded in
count and bytes, and a completed stream is kept ``stream_retention`` seconds.

A stream is a list that only grows, and a reader is an index into it: no
per-reader queue, so a slow reader costs nothing but its index, and a push never
waits for a reader. Readers wait on the stream's ``changed`` event, which the
hub sets and replaces on every change. The hub lives on the server's asyncio
loop (it needs nothing of the runtime); on a cluster each shard keeps one for the
stream names it owns and reads it from trio (``mnemex.ray.streams``: all but
``follow`` is loop-free). Streams live in memory only: the messages of a turn are
stored by ``POST /messages``; a stream is the live view of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from mnemex import Busy, InvalidInput, TooLarge
from mnemex.config import ServerConfig
from mnemex.server._schemas import StreamInfo, StreamStatistics

__all__ = ["CAUGHT_UP", "PushedStream", "StreamClosed", "StreamHub"]

CHUNK_TYPES: Final = ("content", "tool_calls", "finish_reason", "other")
CAUGHT_UP: Final = b""
"""What StreamHub.follow yields once, between the replay and the live chunks."""


class StreamClosed(InvalidInput):
    """A push to a stream that was already completed."""


def chunk_type(chunk: dict[str, Any]) -> str:
    """Which of CHUNK_TYPES a chat.completion.chunk is (for the statistics)."""
    choices = chunk.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    delta = first.get("delta")
    delta = delta if isinstance(delta, dict) else {}
    if delta.get("content"):
        return "content"
    if delta.get("tool_calls"):
        return "tool_calls"
    if first.get("finish_reason"):
        return "finish_reason"
    return "other"


@dataclass(eq=False)
class PushedStream:
    name: str
    created: float
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    pushed: bool = False
    """Something was pushed (a stream a reader is only waiting for is not)."""
    completed_at: float | None = None
    touched: float = 0.0
    readers: int = 0
    types: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHUNK_TYPES, 0))
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def completed(self) -> bool:
        return self.completed_at is not None

    @property
    def started(self) -> bool:
        return self.pushed or self.completed

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class StreamHub:
    """Every pushed stream of one server, by name."""

    def __init__(self, settings: ServerConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self._streams: dict[str, PushedStream] = {}

    def __len__(self) -> int:
        return len(self._streams)

    # -- lookups --------------------------------------------------------------------
    def get(self, name: str) -> PushedStream | None:
        """The stream ``name`` if it was pushed to or completed and is still kept."""
        stream = self._streams.get(name)
        if stream is not None and self._expired(stream, self.clock()):
            self._drop(stream)
            return None
        return stream if stream is not None and stream.started else None

    def _expired(self, stream: PushedStream, now: float) -> bool:
        if stream.completed_at is not None:
            return now - stream.completed_at > self.settings.stream_retention
        # a stream left open (its pusher gone) and unread is dropped after the longest wait
        return stream.readers == 0 and now - stream.touched > self.settings.stream_max_wait

    def _drop(self, stream: PushedStream) -> None:
        if self._streams.get(stream.name) is stream:
            del self._streams[stream.name]
        if stream.completed_at is None:  # readers still waiting on it end
            stream.completed_at = self.clock()
        stream._wake()

    def _entry(self, name: str) -> PushedStream:
        """The stream ``name``, created (empty) if there is none; room is made by
        dropping expired streams, then the oldest completed ones."""
        stream = self._streams.get(name)
        now = self.clock()
        if stream is not None and not self._expired(stream, now):
            return stream
        if stream is not None:
            self._drop(stream)
        if len(self._streams) >= self.settings.max_streams:
            self.sweep()
        if len(self._streams) >= self.settings.max_streams:
            oldest = min((s for s in self._streams.values() if s.completed), default=None,
                         key=lambda s: s.completed_at or 0.0)
            if oldest is None:
                raise Busy(f"{len(self._streams):,} streams are open (server.max_streams); "
                           f"complete some or retry later")
            self._drop(oldest)
        stream = self._streams[name] = PushedStream(name, created=now, touched=now)
        return stream

    def sweep(self) -> int:
        """Drop every expired stream; returns how many."""
        now = self.clock()
        expired = [s for s in self._streams.values() if self._expired(s, now)]
        for stream in expired:
            self._drop(stream)
        return len(expired)

    # -- writing --------------------------------------------------------------------
    def push(self, name: str, line: bytes) -> None:
        """Append one chunk (a JSON object's text, kept as pushed) and wake readers.
        InvalidInput if it is not a JSON object, StreamClosed after completion,
        TooLarge past the stream's bounds."""
        try:
            value = msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise InvalidInput(f"not valid JSON: {exc}", field="body") from None
        if not isinstance(value, dict):
            raise InvalidInput(f"a chunk must be a JSON object, got {type(value).__name__}", field="body")
        stream = self._entry(name)
        if stream.completed:
            raise StreamClosed(f"stream {name!r} was completed; a completed stream takes no more chunks",
                               field="query_name")
        settings = self.settings
        if len(stream.chunks) >= settings.stream_max_chunks:
            raise TooLarge(f"stream {name!r} holds {len(stream.chunks):,} chunks, the most one stream "
                           f"keeps (server.stream_max_chunks)", field="body")
        if stream.size + len(line) > settings.stream_max_bytes:
            raise TooLarge(f"stream {name!r} would hold over {settings.stream_max_bytes:,} bytes "
                           f"(server.stream_max_bytes)", field="body")
        stream.chunks.append(line)
        stream.size += len(line)
        stream.pushed = True
        stream.touched = self.clock()
        stream.types[chunk_type(value)] += 1
        stream._wake()

    def complete(self, name: str) -> Literal["completed", "already_completed"] | None:
        """Mark the end: readers get ``[DONE]``. None if nothing was pushed to
        ``name`` and nobody reads it."""
        stream = self._streams.get(name)
        if stream is None or (not stream.started and stream.readers == 0):
            return None
        if stream.completed:
            return "already_completed"
        stream.completed_at = stream.touched = self.clock()
        stream.pushed = True  # a reader-only stream completed is a stream (empty) from now on
        stream._wake()
        return "completed"

    def purge(self) -> int:
        """Drop every stream; their readers end. Returns how many were kept."""
        streams = list(self._streams.values())
        for stream in streams:
            self._drop(stream)
        return sum(1 for s in streams if s.started)

    # -- reading --------------------------------------------------------------------
    def attach(self, name: str) -> PushedStream:
        """The stream ``name`` with one more reader (made, empty, if there is none: a
        reader may come first); ``detach`` it when the reader goes."""
        stream = self._entry(name)
        stream.readers += 1
        return stream

    def detach(self, stream: PushedStream) -> None:
        """One reader of ``stream`` went; a stream nobody pushed to nor reads any more
        is forgotten (a wait that saw nothing leaves nothing behind)."""
        stream.readers -= 1
        if stream.readers == 0 and not stream.started and self._streams.get(stream.name) is stream:
            del self._streams[stream.name]

    async def follow(self, name: str, *, from_beginning: bool, wait: float,
                     heartbeat: float) -> AsyncIterator[bytes | None]:
        """The chunks of ``name`` as they come: the retained ones first when
        ``from_beginning``, then CAUGHT_UP once, then live ones; None for a heartbeat
        (nothing to send for ``heartbeat`` seconds). Ends at completion; raises
        TimeoutError if the stream has not started ``wait`` seconds from now."""
        stream = self.attach(name)
        clock = asyncio.get_running_loop().time
        try:
            position = 0 if from_beginning else len(stream.chunks)
            start_by = clock() + wait
            caught_up = False
            while True:
                while position < len(stream.chunks):
                    yield stream.chunks[position]
                    position += 1
                if not caught_up:
                    caught_up = True
                    yield CAUGHT_UP
                    continue  # chunks may have come meanwhile
                if stream.completed:
                    return
                changed = stream.changed
                if stream.started:
                    await _wait(changed, heartbeat)
                else:
                    left = start_by - clock()
                    if left <= 0:
                        raise TimeoutError(f"stream {name!r} did not start within {wait:g} s")
                    await _wait(changed, min(heartbeat, left))
                if not changed.is_set() and (stream.started or clock() < start_by):
                    yield None
        finally:
            self.detach(stream)

    # -- statistics -----------------------------------------------------------------
    def statistics(self) -> StreamStatistics:
        self.sweep()
        queries = {s.name: StreamInfo(total_chunks=len(s.chunks), completed=s.completed,
                                      has_done_marker=s.completed, chunk_types=dict(s.types), bytes=s.size,
                                      readers=s.readers)
                   for s in self._streams.values() if s.started}
        return StreamStatistics(total_queries=len(queries), queries=queries)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set or ``seconds`` pass, whichever comes first."""
    if event.is_set():
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
