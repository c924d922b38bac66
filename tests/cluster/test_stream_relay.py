"""A shard's side of the live streams (``mnemex.ray.streams.ShardStreams``), without
Ray: bounded batches with positions, waits that end on a push or a completion,
readers forgotten when nobody polls them. Time is trio's MockClock."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import trio
import trio.testing

from mnemex import ActorClosed, InvalidInput, NotOwner
from mnemex.config import ServerConfig
from mnemex.ray.streams import MAX_BATCH_CHUNKS, ReadStream, ShardStreams, StreamBatch


async def _owned(kind: str, key: tuple[str, ...]) -> Any:
    return None


def _chunk(i: int) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": f"c{i}"}}]}).encode()


def _streams(**settings: Any) -> ShardStreams:
    return ShardStreams(ServerConfig(**settings), idle=60.0)


async def _read(streams: ShardStreams, **request: Any) -> StreamBatch:
    batch = await streams.serve("read", (ReadStream(**request),), _owned)
    assert isinstance(batch, StreamBatch)
    return batch


async def test_reads_come_in_bounded_batches_that_carry_their_position_so_nothing_is_skipped() -> None:
    streams = _streams()
    pushed = [_chunk(i) for i in range(1_300)]
    assert await streams.serve("push", ("q", pushed), _owned) == (1_300, None)
    got: list[bytes] = []
    position = None
    for _ in range(10):
        batch = await _read(streams, name="q", reader="r", position=position, from_beginning=True)
        assert len(batch.chunks) <= MAX_BATCH_CHUNKS
        got += batch.chunks
        position = batch.position
        if batch.caught_up:
            break
    assert got == pushed and position == 1_300
    # a reader coming without from_beginning starts at the end
    assert (await _read(streams, name="q", reader="late")).chunks == []


async def test_a_waiting_read_ends_on_a_push_then_on_the_completion() -> None:
    streams = _streams()
    await streams.serve("push", ("q", [_chunk(0)]), _owned)
    first = await _read(streams, name="q", reader="r", from_beginning=True)
    got: list[StreamBatch] = []

    async def waiting_read(position: int) -> None:
        got.append(await _read(streams, name="q", reader="r", position=position, wait=30.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_read, first.position)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        await streams.serve("push", ("q", [_chunk(1)]), _owned)
    assert got[0].chunks == [_chunk(1)] and not got[0].completed
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_read, got[0].position)
        await trio.testing.wait_all_tasks_blocked()
        assert len(got) == 1
        assert await streams.serve("complete", ("q",), _owned) == "completed"
    assert got[1].chunks == [] and got[1].completed


async def test_a_read_of_a_stream_not_started_waits_no_longer_than_it_may(
        autojump_clock: trio.testing.MockClock) -> None:
    streams = _streams()
    started = trio.current_time()
    batch = await _read(streams, name="q", reader="r", wait=15.0, start_within=2.0)
    assert batch.chunks == [] and not batch.started
    assert trio.current_time() - started == pytest.approx(2.0)


async def test_a_push_refused_midway_keeps_what_came_before_and_says_why() -> None:
    streams = _streams(stream_max_chunks=3)
    taken, error = await streams.serve("push", ("q", [_chunk(0), b"[1]", _chunk(2)]), _owned)
    assert taken == 1 and b"InvalidInput" in error
    taken, error = await streams.serve("push", ("q", [_chunk(i) for i in range(5)]), _owned)
    assert taken == 2 and b"TooLarge" in error
    await streams.serve("complete", ("q",), _owned)
    taken, error = await streams.serve("push", ("q", [_chunk(9)]), _owned)
    assert taken == 0 and b"StreamClosed" in error


async def test_a_reader_nobody_polls_is_forgotten_with_the_stream_it_waited_for() -> None:
    streams = _streams()
    await _read(streams, name="waited", reader="gone")
    assert len(streams.hub) == 1  # a reader-only stream: kept while it is read
    assert await streams.reap(time.monotonic() + 1) == 1
    assert len(streams.hub) == 0
    # a forgotten reader goes on only where the stream is still the same
    await streams.serve("push", ("kept", [_chunk(0), _chunk(1)]), _owned)
    batch = await _read(streams, name="kept", reader="forgotten", position=1)
    assert batch.chunks == [_chunk(1)]
    with pytest.raises(ActorClosed, match="no longer kept here"):
        await _read(streams, name="lost", reader="another", position=5)


async def test_a_released_reader_is_counted_no_more() -> None:
    streams = _streams()
    await streams.serve("push", ("q", [_chunk(0)]), _owned)
    await _read(streams, name="q", reader="a")
    await _read(streams, name="q", reader="b")
    stats = json.loads(await streams.serve("statistics", (), _owned))
    assert stats["queries"]["q"]["readers"] == 2
    await streams.serve("release", ("a",), _owned)
    stats = json.loads(await streams.serve("statistics", (), _owned))
    assert stats["queries"]["q"]["readers"] == 1


async def test_a_key_the_shard_does_not_own_is_refused_before_anything_is_touched() -> None:
    streams = _streams()

    async def not_ours(kind: str, key: tuple[str, ...]) -> Any:
        raise NotOwner(f"{kind} {key} is not ours", vshard=7)

    with pytest.raises(NotOwner):
        await streams.serve("push", ("q", [_chunk(0)]), not_ours)
    assert len(streams.hub) == 0
    with pytest.raises(InvalidInput, match="no stream call"):
        await streams.serve("nonsense", (), _owned)
