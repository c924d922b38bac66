"""A real ``mnemex serve`` on a free 127.0.0.1 port (its own thread: uvicorn on uvloop,
the runtime a trio guest), for the remote tests (a module of its own name: another
folder's conftest would shadow ``from conftest import``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import trio

import mnemex
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
