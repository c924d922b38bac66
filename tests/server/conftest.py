"""A real mnemex server on a free 127.0.0.1 port, inside the test's trio run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

import mnemex
from mnemex.server import ServerSettings, serve


@asynccontextmanager
async def running_server(config: mnemex.Config, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    stop = trio.Event()
    server = ServerSettings(host="127.0.0.1", port=0, **settings)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(lambda task_status: serve(config, server, shutdown=stop, handle_signals=False,
                                                             task_status=task_status))
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                yield client
        finally:
            stop.set()


@pytest.fixture
def server() -> Any:
    """``async with server(config, **settings) as http:`` — a real server and a client."""
    return running_server
