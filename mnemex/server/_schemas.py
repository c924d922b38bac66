"""Request bodies and server settings, as msgspec Structs. Request bodies forbid
unknown fields: a typo must fail loudly, not lose data."""

from __future__ import annotations

from typing import Any

import msgspec

from mnemex import MemoryFields
from mnemex.config import ServerConfig

__all__ = ["PostMessages", "ServerSettings"]


class PostMessages(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /messages``: store ``messages`` in order in ``session_id``."""

    session_id: str
    messages: list[dict[str, Any]]
    query_id: str = ""


# the server's section of Config, under the name earlier versions gave it
ServerSettings = ServerConfig


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
