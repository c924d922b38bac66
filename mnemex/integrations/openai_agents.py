"""mnemex as the session memory of the OpenAI Agents SDK: ``MnemexSession``.

The SDK keeps a conversation in a *session* (its ``Session`` protocol: ``get_items``,
``add_items``, ``pop_item``, ``clear_session``) that holds OpenAI Responses input
items: messages, and the items that have no role (``function_call``,
``function_call_output``, ``reasoning``...). ``MnemexSession`` keeps them as items of
an agent's session in mnemex, verbatim, journaled before a call returns::

    import mnemex
    from agents import Agent, Runner
    from mnemex.integrations.openai_agents import MnemexSession

    with mnemex.Client(mnemex.Config(data_dir="mnemex-data")) as client:
        session = MnemexSession("user-42", client)
        result = Runner.run_sync(Agent(name="Assistant"), "Hi!", session=session)

Costs: ``add_items`` appends, ``pop_item`` takes the newest item off in O(1) (nothing
is rewritten), ``get_items(limit)`` reads the newest ``limit`` items in O(limit).

The runtime runs on trio, on the thread of its ``mnemex.Client``; the SDK runs on
asyncio. Each call is handed to the Client (thread-safe: it carries the call into the
runtime's thread and waits) from a worker thread (``asyncio.to_thread``), so the
event loop never blocks and any loop or thread may share one session, as with the
SDK's own ``SQLiteSession``. A write cancelled while in flight still completes, and
the cancellation is raised once its outcome is settled: it cannot be half-done.

Needs the ``openai-agents`` package: ``pip install 'mnemex[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import msgspec
from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import coerce_session_settings

import mnemex
from mnemex.integrations._common import settled as _settled

__all__ = ["MnemexSession"]

_encode = msgspec.json.Encoder()


class _OwnedClients:
    """The Clients MnemexSession opened itself: one per data directory in this process
    (a data directory is open in one runtime at a time), closed with the last
    session using it. A Config without a data directory gets a Client of its own."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _open: ClassVar[dict[str, tuple[mnemex.Client, int]]] = {}

    @classmethod
    def acquire(cls, config: mnemex.Config) -> tuple[mnemex.Client, str | None]:
        if config.data_dir is None:
            return mnemex.Client(config), None
        key = str(Path(config.data_dir).expanduser().resolve())
        with cls._lock:
            client, users = cls._open.get(key) or (None, 0)
            if client is None:
                client = mnemex.Client(config)
            cls._open[key] = (client, users + 1)
            return client, key

    @classmethod
    def release(cls, client: mnemex.Client, key: str | None) -> None:
        if key is not None:
            with cls._lock:
                _, users = cls._open[key]
                if users > 1:
                    cls._open[key] = (client, users - 1)
                    return
                del cls._open[key]
        client.close()


class MnemexSession:
    """One conversation of the OpenAI Agents SDK (its ``Session`` protocol), kept by
    mnemex as session ``session_id`` of agent ``agent``.

    ``store``: a ``mnemex.Client`` (the caller's: several sessions may share it, and
    ``close()`` leaves it open), or a ``mnemex.Config`` or data directory for which
    the session opens a Client itself (shared by the sessions of this process on
    that directory, closed by the last one's ``close()``). ``session_settings``: the
    SDK's ``SessionSettings`` (or a dict of them); its ``limit`` is the default of
    ``get_items``. ``pruned``: ``get_items`` returns the session's context under
    mnemex's pruning policy for it (set with ``client.agent(agent).set_policy(...,
    session_id=...)``: ``mnemex.TokenBudget`` summarizes old turns, ``MaxMessages``
    keeps the newest) rather than its whole history; model responses and tool
    outputs are never split.

    Items are stored as given (JSON objects: a ``type``, or a message role); one that
    JSON cannot hold raises TypeError, one that is not an item InvalidInput, and
    nothing of that call is stored.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, store: mnemex.Client | mnemex.Config | str | os.PathLike[str], *,
                 agent: str = "openai-agents",
                 session_settings: SessionSettings | Mapping[str, Any] | None = None,
                 pruned: bool = False) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise mnemex.InvalidInput(f"session_id must be a non-empty string, got {session_id!r}",
                                      field="session_id")
        self.session_id = session_id
        self.agent_name = agent
        self.pruned = pruned
        self.session_settings = (SessionSettings() if session_settings is None
                                 else coerce_session_settings(dict(session_settings)
                                                              if isinstance(session_settings, Mapping)
                                                              else session_settings))
        self._owns_client = not isinstance(store, mnemex.Client)
        self._key: str | None = None
        if isinstance(store, mnemex.Client):
            self.client = store
        else:
            config = store if isinstance(store, mnemex.Config) else mnemex.Config(data_dir=os.fspath(store))
            self.client, self._key = _OwnedClients.acquire(config)
        self._agent = self.client.agent(agent)
        self._closed = False

    def __repr__(self) -> str:
        return f"MnemexSession({self.session_id!r}, agent={self.agent_name!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise mnemex.ActorClosed(f"MnemexSession {self.session_id!r} is closed")

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: the newest ``limit`` of them (default
        ``session_settings.limit``; None or a negative limit: all of them, 0: none).
        With ``pruned``, of the session's context rather than its history."""
        self._check_open()
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and limit < 0:
            limit = None  # as SQLiteSession: a negative limit is no limit
        if limit == 0:
            return []
        if self.pruned:
            context = await asyncio.to_thread(self._agent.context, self.session_id)
            items = context if limit is None else context[-limit:]
        else:
            stored = await asyncio.to_thread(self._agent.history, self.session_id, limit)
            items = [message.message for message in stored]
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items`` at the end of the session, in order, all or none."""
        self._check_open()
        if not items:
            return
        # encoded here: TypeError, as json.dumps gives, for what JSON cannot hold
        encoded = [_encode.encode(item) for item in items]
        await _settled(asyncio.to_thread(self._agent.append_items, self.session_id, encoded))

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest item off the session and return it (None when it is empty)."""
        self._check_open()
        popped = await _settled(asyncio.to_thread(self._agent.pop, self.session_id))
        return None if popped is None else cast(TResponseInputItem, popped.message)

    async def clear_session(self) -> None:
        """Delete every item of the session (the session itself goes; adding starts it again)."""
        self._check_open()
        await _settled(asyncio.to_thread(self._agent.delete_session, self.session_id))

    def close(self) -> None:
        """Stop using the session; a Client it opened itself is closed with the last
        session using it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            _OwnedClients.release(self.client, self._key)
