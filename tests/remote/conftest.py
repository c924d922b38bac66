"""A real ``mnemex serve`` on a free 127.0.0.1 port (its own thread: uvicorn on uvloop,
the runtime a trio guest) and ``mnemex.connect`` to it from the test's trio run;
beside it, an in-process runtime of the same config, to compare the two."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import mnemex
from mnemex.remote import RemoteRuntime
from mnemex.server import Server, ServerSettings


def config_at(path: Path, **more: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=str(path), embedder="hashing", **more)


@contextmanager
def served(config: mnemex.Config, **settings: Any) -> Iterator[Server]:
    """A server on its own thread, stopped on exit (for sync code: threads, processes)."""
    server = Server(config, ServerSettings(host="127.0.0.1", port=0, **settings))
    server.start()
    try:
        yield server
    finally:
        server.close()


@asynccontextmanager
async def running(config: mnemex.Config, **settings: Any) -> AsyncIterator[Server]:
    server = Server(config, ServerSettings(host="127.0.0.1", port=0, **settings))
    await trio.to_thread.run_sync(server.start)
    try:
        yield server
    finally:
        await trio.to_thread.run_sync(server.close)


def url_of(server: Server) -> str:
    return f"http://127.0.0.1:{server.port}"


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[RemoteRuntime]:
    """A remote runtime connected to a fresh server (hashing embedder)."""
    async with running(config_at(tmp_path / "served")) as server, mnemex.connect(url_of(server)) as rt:
        yield rt


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[mnemex.MnemexRuntime]:
    """An in-process runtime of the same config, on its own data directory."""
    async with mnemex.open_runtime(config_at(tmp_path / "local")) as rt:
        yield rt
