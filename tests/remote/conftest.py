"""The remote tests' fixtures: a server and ``mnemex.connect`` to it from the test's
trio run; beside it, an in-process runtime of the same config, to compare the two."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from remote_servers import config_at, running, url_of

import mnemex
from mnemex.remote import RemoteRuntime


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
