"""Request bodies and server settings, as msgspec Structs. Request bodies forbid
unknown fields: a typo must fail loudly, not lose data."""

from __future__ import annotations

from typing import Any

import msgspec

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
