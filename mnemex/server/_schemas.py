"""Request bodies and server settings, as msgspec Structs. Request bodies forbid
unknown fields: a typo must fail loudly, not lose data."""

from __future__ import annotations

from typing import Any

import msgspec

from mnemex import MemoryFields

__all__ = ["PostMessages", "ServerSettings"]


class PostMessages(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /messages``: store ``messages`` in order in ``session_id``."""

    session_id: str
    messages: list[dict[str, Any]]
    query_id: str = ""


class ServerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[server]`` table of the config file (and ``mnemex serve`` flags)."""

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    """Bearer token required on every route (but /health when ``open_health``)."""
    open_health: bool = True
    agent: str = "ark"
    """The agent the un-prefixed conversation routes use."""
    max_body_bytes: int = 1_048_576
    """Largest request body; past it 413."""
    shutdown_grace: float = 10.0
    """Seconds in-flight requests may take to finish after SIGTERM/SIGINT."""
    access_log: bool = False
    """Log one JSON line per request to the ``mnemex.access`` logger (INFO). Off by
    default: a logged line costs about 70 us of the event loop's time, some 15% of a
    request; the per-route counts and latencies are always on ``/metrics``."""


class PostMemory(MemoryFields, kw_only=True, forbid_unknown_fields=True):
    """``POST /memory``: one memory into the (app_name, user_id) scope, with any of
    the memory's fields (``mnemex.MemoryFields``)."""

    content: str
    user_id: str
    app_name: str


class PostMemoryBatch(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /memory/batch``: many memories (each may name its own scope)."""

    memories: list[PostMemory]


class ScopeName(msgspec.Struct, forbid_unknown_fields=True):
    user_id: str
    app_name: str


class PostSearch(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /memory/search``: one scope (user_id + app_name) or several (scopes)."""

    query: str
    user_id: str | None = None
    app_name: str | None = None
    scopes: list[ScopeName] | None = None
    top_k: int = 10
    min_score: float | None = None
    mode: str | None = None
    filters: dict[str, Any] | None = None


class PostArchive(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /sessions/{session_id}/archive``: a conversation into long-term memory."""

    user_id: str
    app_name: str
    agent: str | None = None
