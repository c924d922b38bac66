"""A real mnemex server on a free 127.0.0.1 port, on a thread of its own (uvicorn on
uvloop, the runtime a trio guest of that loop), beside the test's trio run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

import mnemex
from mnemex.server import Server, ServerSettings


@asynccontextmanager
async def running_server(config: mnemex.Config, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    server = Server(config, ServerSettings(host="127.0.0.1", port=0, **settings))
    await trio.to_thread.run_sync(server.start)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client:
            yield client
    finally:
        await trio.to_thread.run_sync(server.close)


@pytest.fixture
def server() -> Any:
    """``async with server(config, **settings) as http:`` — a real server and a client."""
    return running_server
