"""Test-wide settings: hypothesis profiles (quick locally, larger in CI), and the
tests folder on the import path for the shared helpers (``waiting``)."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# tests in every folder import the shared waiting helpers as ``from waiting import ...``
sys.path.insert(0, str(Path(__file__).resolve().parent))

from postgres_server import PostgresServer, start_server  # noqa: E402


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the whole run (see postgres_server.py); the
    tests that use it skip, saying why, where none can be started."""
    pytest.importorskip("psycopg", reason="psycopg (the mnemex[postgres] extra) is not installed")
    server = start_server()
    if isinstance(server, str):
        pytest.skip(server)
    yield server
    server.stop()


_schemas = itertools.count()


@pytest.fixture
def postgres_schema(postgres_server: PostgresServer) -> str:
    """A schema of its own for one test (the tables are made on first open)."""
    return f"t{os.getpid()}_{next(_schemas)}"
