"""Shutting the server down keeps its order: stop accepting, let requests in
flight finish, then close the runtime (drain, snapshot); and a server that cannot
start says why in the caller's thread."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import httpx
import pytest
import trio
from waiting import eventually

import mnemex
from mnemex.server import Server, ServerSettings


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")


async def refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


async def test_stop_refuses_new_connections_finishes_the_request_in_flight_then_snapshots(
        tmp_path: Path) -> None:
    server = Server(cfg(tmp_path), ServerSettings(host="127.0.0.1", port=0, shutdown_grace=10.0))
    await trio.to_thread.run_sync(server.start)
    closed = threading.Event()

    def close() -> None:
        server.close()
        closed.set()

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as http:
        message = {"role": "user", "content": "kept"}
        r = await http.post("/messages", json={"session_id": "s", "messages": [message]})
        assert r.status_code == 200, r.text
        # in flight while the server stops: a reader waiting 1 s for a stream nobody pushes
        async with http.stream("GET", "/stream/q", params={"wait-for-query": "1s"}) as reader:
            assert reader.status_code == 200
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, close)
                await eventually(lambda: refused(server.port), what="the server to stop accepting")  # first
                assert not closed.is_set()  # the reader is still being served
                body = (await reader.aread()).decode()
        assert "timeout_error" in body and body.rstrip().endswith("data: [DONE]"), body
    assert closed.wait(10)
    async with mnemex.open_runtime(cfg(tmp_path)) as runtime:
        page = await runtime.agent("ark").messages("s")
        assert [m.message["content"] for m in page.messages] == ["kept"]


def test_a_busy_port_is_refused_at_construction_naming_it(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(mnemex.InvalidInput, match="in use"):
            Server(cfg(tmp_path), ServerSettings(host="127.0.0.1", port=port))


async def test_a_data_dir_in_use_fails_start_in_the_callers_thread(tmp_path: Path) -> None:
    async with mnemex.open_runtime(cfg(tmp_path)):
        server = Server(cfg(tmp_path), ServerSettings(host="127.0.0.1", port=0))
        with pytest.raises(mnemex.DataDirLocked):
            await trio.to_thread.run_sync(server.start)
