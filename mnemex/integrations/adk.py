"""mnemex as the session and memory services of Google ADK.

``MnemexSessionService`` is a ``BaseSessionService``: pass it to a ``Runner`` and
every session, its events and its state are kept by mnemex, journaled before a
call returns. ``MnemexMemoryService`` is a ``BaseMemoryService``: what
``load_memory`` and ``preload_memory`` find, searched by mnemex's indexes::

    import mnemex
    from google.adk.runners import Runner
    from mnemex.integrations.adk import MnemexMemoryService, MnemexSessionService

    with mnemex.Client(mnemex.Config(data_dir="mnemex-data")) as client:
        runner = Runner(app_name="shop", agent=agent, session_service=MnemexSessionService(client),
                        memory_service=MnemexMemoryService(client))

Where things live. The sessions of an app are sessions of one mnemex agent
(``adk:<app_name>``), each session's id being the user's id (percent-encoded) and the
ADK session id joined by ``/``; its events are items of that session, each the
event's JSON (``{"type": "adk_event", "event": {...}}``), stamped with the event's
timestamp. State follows ADK's prefixes: a session's own keys are kept by the agent
actor with its events (an event and its session-state delta are one journaled
step); ``app:`` keys in the app's key-value state (``client.state(app_name=...)``),
``user:`` keys in the user's (``client.state(app_name=..., user_id=...)``), without
their prefix; ``temp:`` keys live in the session object passed in only, never
stored. Reading a session reads its header and the events asked for
(``GetSessionConfig``: ``num_recent_events``, ``after_timestamp``) and the two
states: nothing is replayed.

An event's app and user state changes are written after the event (so an event
appended to a session that does not exist, SessionNotFoundError, changes nothing);
a crash between the two leaves the event stored and those keys unchanged.

Memory: each (app_name, user_id) is a mnemex memory scope; every event with text
becomes a memory (kind ``message``, its author, timestamp and session; the event id
in ``metadata["event_id"]``), stored once however often the session is added: the
event ids a scope holds, or forgot (``delete_memory``), are indexed in the key-value
state of app ``"adk-memory:" + app_name`` for the user, so adding a session looks up
its events' ids and nothing else.

Both services take a ``mnemex.Client`` (one may serve both and any number of other
callers). The runtime runs on trio, on the Client's thread; each call is handed to
the Client from a worker thread (``asyncio.to_thread``), so ADK's event loop never
blocks, and a write cancelled in flight completes before the cancellation is raised.

Needs the ``google-adk`` package: ``pip install 'mnemex[adk]'``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote, unquote

import msgspec
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from google.genai import types
from pydantic_core import to_jsonable_python

import mnemex
from mnemex.config import DEFAULT, UseDefault
from mnemex.integrations._common import run_blocking, run_write

__all__ = ["EVENT_ITEM_TYPE", "MnemexMemoryService", "MnemexSessionService"]

log = logging.getLogger("mnemex.integrations.adk")

EVENT_ITEM_TYPE: Final = "adk_event"
"""The ``type`` of the items that hold ADK events in a mnemex session."""
_INDEX_PREFIX: Final = "adk-memory:"
"""The events a memory scope holds or forgot are indexed, by event id, in the key-value
state of app ``_INDEX_PREFIX + app_name`` for the user."""


class _EventItem(msgspec.Struct):
    type: str
    event: msgspec.Raw


_decode_item = msgspec.json.Decoder(_EventItem).decode


def _json_safe(values: Mapping[str, Any]) -> dict[str, Any]:
    """State values as JSON holds them (datetimes, pydantic models and the like
    serialized as pydantic does; anything else by its ``str``), as ADK's database
    services store them."""
    safe: dict[str, Any] = to_jsonable_python(dict(values), fallback=str)
    return safe


def _split_state(state: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) parts of a state or state delta, the app and user keys
    without their prefix; ``temp:`` keys dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in (state or {}).items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = value
    return app, user, own


def _merged(own: Mapping[str, Any], app: Mapping[str, Any], user: Mapping[str, Any]) -> dict[str, Any]:
    state = dict(own)
    state.update((State.APP_PREFIX + key, value) for key, value in app.items())
    state.update((State.USER_PREFIX + key, value) for key, value in user.items())
    return state


def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise mnemex.InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
    return value


class MnemexSessionService(BaseSessionService):
    """ADK's session service on mnemex (see the module doc for where things live).

    ``client``: a ``mnemex.Client`` (left open by this service). ``agent_prefix``:
    the sessions of app A are those of mnemex agent ``agent_prefix + A``. The
    Client's configuration must keep every message (``conversations.retain =
    "all"``, the default): events are never pruned away.
    """

    def __init__(self, client: mnemex.Client, *, agent_prefix: str = "adk:") -> None:
        if not isinstance(client, mnemex.Client):
            raise mnemex.InvalidInput("MnemexSessionService takes a mnemex.Client, got "
                                      f"{type(client).__name__}", field="client")
        if client.config.conversations.retain != "all":
            raise mnemex.InvalidInput("ADK sessions need config.conversations.retain = \"all\": with "
                                      "\"pruned\", events would be dropped from stored sessions",
                                      field="conversations.retain")
        self.client = client
        self.agent_prefix = agent_prefix

    def __repr__(self) -> str:
        return f"MnemexSessionService(agent_prefix={self.agent_prefix!r})"

    # -- where things live
    def _agent(self, app_name: str) -> Any:
        return self.client.agent(self.agent_prefix + _check_name(app_name, "app_name"))

    @staticmethod
    def _user_prefix(user_id: str) -> str:
        return quote(_check_name(user_id, "user_id"), safe="") + "/"

    def _key(self, user_id: str, session_id: str) -> str:
        return self._user_prefix(user_id) + session_id

    @staticmethod
    def _session_id(session_id: Any) -> str:
        if not isinstance(session_id, str):
            raise mnemex.InvalidInput(f"session_id must be a string, got {session_id!r}", field="session_id")
        stripped = session_id.strip()
        if not stripped:
            raise mnemex.InvalidInput(f"session_id must not be blank, got {session_id!r}", field="session_id")
        return stripped

    def _app_state(self, app_name: str) -> dict[str, Any]:
        return self.client.state(app_name=app_name).get()

    def _user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        return self.client.state(app_name=app_name, user_id=user_id).get()

    def _write_scoped(self, app_name: str, user_id: str, app: Mapping[str, Any],
                      user: Mapping[str, Any]) -> None:
        if app:
            self.client.state(app_name=app_name).update(_json_safe(app))
        if user:
            self.client.state(app_name=app_name, user_id=user_id).update(_json_safe(user))

    # -- the service
    async def create_session(self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Session:
        """A new session (``session_id`` stripped of surrounding blanks; a new uuid4
        when None or blank) with ``state`` split by prefix; AlreadyExistsError when
        the user has a session of that id (then nothing is stored)."""
        chosen = session_id.strip() if isinstance(session_id, str) else session_id
        sid = self._session_id(chosen) if chosen else str(uuid.uuid4())
        return await run_write(self._create, app_name, user_id, state, sid)

    def _create(self, app_name: str, user_id: str, state: Mapping[str, Any] | None, sid: str) -> Session:
        app, user, own = _split_state(state)
        created = self._agent(app_name).create_session(self._key(user_id, sid), _json_safe(own))
        if not created.created:
            raise AlreadyExistsError(f"Session with id {sid} already exists.")
        self._write_scoped(app_name, user_id, app, user)
        header = created.header
        return Session(id=sid, app_name=app_name, user_id=user_id,
                       state=_merged(header.values(), self._app_state(app_name),
                                     self._user_state(app_name, user_id)),
                       last_update_time=_last_update(header))

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> Session | None:
        """The session with its events (all, or as ``config`` says: the newest
        ``num_recent_events``, then those from ``after_timestamp`` on) and its state
        merged with the app's and the user's; None when there is none."""
        sid = self._session_id(session_id)
        last = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        return await run_blocking(self._get, app_name, user_id, sid, last, after)

    def _get(self, app_name: str, user_id: str, sid: str, last: int | None, after: float | None
             ) -> Session | None:
        read = self._agent(app_name).read_session(self._key(user_id, sid), last, after)
        if read is None:
            return None
        events = [event for event in map(_event_of, read.entries) if event is not None]
        header = read.header
        return Session(id=sid, app_name=app_name, user_id=user_id, events=events,
                       state=_merged(header.values(), self._app_state(app_name),
                                     self._user_state(app_name, user_id)),
                       last_update_time=_last_update(header))

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The sessions of the user (of every user of the app when None), without
        events, with their merged state, least recently updated first."""
        return await run_blocking(self._list, app_name, user_id)

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        prefix = None if user_id is None else self._user_prefix(user_id)
        headers = self._agent(app_name).session_headers(prefix)
        app = self._app_state(app_name)
        users: dict[str, dict[str, Any]] = {}
        sessions: list[Session] = []
        for header in headers:
            quoted, slash, sid = header.session_id.partition("/")
            if not slash:
                continue  # not a session this service made
            owner = unquote(quoted)
            if owner not in users:
                users[owner] = self._user_state(app_name, owner)
            sessions.append(Session(id=sid, app_name=app_name, user_id=owner,
                                    state=_merged(header.values(), app, users[owner]),
                                    last_update_time=_last_update(header)))
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events (nothing when there is none)."""
        sid = self._session_id(session_id)
        await run_write(self._agent(app_name).delete_session, self._key(user_id, sid))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state in the app, keys without the ``user:`` prefix ({} for none)."""
        _check_name(app_name, "app_name")
        _check_name(user_id, "user_id")
        return await run_blocking(self._user_state, app_name, user_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` at the end of ``session`` with its state delta (``temp:``
        keys applied to the session object only, never stored), and apply it to
        ``session``; a partial event is returned untouched. SessionNotFoundError when
        the stored session is gone."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await run_write(self._append, session, event)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    def _append(self, session: Session, event: Event) -> None:
        delta = event.actions.state_delta if event.actions is not None else None
        app, user, own = _split_state(delta)
        item = (b'{"type":"' + EVENT_ITEM_TYPE.encode() + b'","event":'
                + event.model_dump_json(exclude_none=True).encode() + b"}")
        try:
            self._agent(session.app_name).append_items(
                self._key(session.user_id, self._session_id(session.id)), [item],
                state=_json_safe(own) if own else None, existing=True, timestamp=event.timestamp)
        except mnemex.NotFound as exc:
            raise SessionNotFoundError(f"Session {session.id} not found.") from exc
        self._write_scoped(session.app_name, session.user_id, app, user)


def _last_update(header: Any) -> float:
    """ADK's ``last_update_time``: the timestamp of the newest event (what ADK's own
    services set on each append, older or newer), else when the session was made."""
    last: float | None = header.last_entry_at
    return header.created_at if last is None else last


def _event_of(entry: Any) -> Event | None:
    """The ADK event an entry of a session holds (None for an entry of another shape,
    which this service never writes)."""
    try:
        item = _decode_item(entry.message)
    except msgspec.MsgspecError:
        return None
    if item.type != EVENT_ITEM_TYPE:
        return None
    return Event.model_validate_json(bytes(item.event))


# -- memory -------------------------------------------------------------------------------
def _event_text(content: types.Content | None) -> str | None:
    if content is None or not content.parts:
        return None
    texts = [part.text for part in content.parts if part.text]
    return " ".join(texts) if texts else None


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


class MnemexMemoryService(BaseMemoryService):
    """ADK's memory service on mnemex: each (app_name, user_id) a memory scope.

    ``search_memory`` answers the ``top_k`` best memories (ADK's own service gives at
    most ten) by mnemex's search in ``mode``: ``"keyword"`` (the default: ADK's own
    matching, memories sharing the most words with the query first, ties in the
    order they were stored), ``"fulltext"`` (BM25), ``"vector"`` or ``"hybrid"``
    (finds paraphrases too), or ``DEFAULT`` (``config.memories.search_mode``); with
    ``min_score`` (``DEFAULT``: the mode's cut). Every mode reads Chinese, Japanese,
    Korean and Thai written without spaces.
    """

    def __init__(self, client: mnemex.Client, *, top_k: int = 10, mode: Any = "keyword",
                 min_score: float | UseDefault | None = DEFAULT) -> None:
        if not isinstance(client, mnemex.Client):
            raise mnemex.InvalidInput("MnemexMemoryService takes a mnemex.Client, got "
                                      f"{type(client).__name__}", field="client")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise mnemex.InvalidInput(f"top_k must be an integer >= 1, got {top_k!r}", field="top_k")
        self.client = client
        self.top_k = top_k
        self.mode = mode
        self.min_score = min_score

    def __repr__(self) -> str:
        return f"MnemexMemoryService(top_k={self.top_k}, mode={self.mode!r})"

    def _scope(self, app_name: str, user_id: str) -> Any:
        return self.client.scope(user_id=_check_name(user_id, "user_id"),
                                 app_name=_check_name(app_name, "app_name"))

    async def add_session_to_memory(self, session: Session) -> None:
        """Every event of the session that has text, as a memory of the session's
        (app_name, user_id); adding a session again stores nothing twice."""
        await self.add_events_to_memory(app_name=session.app_name, user_id=session.user_id,
                                        events=session.events, session_id=session.id)

    async def add_events_to_memory(self, *, app_name: str, user_id: str, events: Sequence[Event],
                                   session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None) -> None:
        """The events with text as memories (a delta: what was stored stays; an event
        whose id the scope holds already, or held and forgot, is not stored again);
        ``custom_metadata`` (a JSON object) goes into each memory's metadata."""
        await run_write(self._add_events, app_name, user_id, events, session_id, custom_metadata)

    def _add_events(self, app_name: str, user_id: str, events: Sequence[Event], session_id: str | None,
                    custom_metadata: Mapping[str, object] | None) -> None:
        scope, index = self._scope(app_name, user_id), self._index(app_name, user_id)
        texts = [(event, _event_text(event.content)) for event in events]
        wanted = [(event, text) for event, text in texts if text is not None and text.strip()]
        ids = sorted({event.id for event, _ in wanted if _indexable(event.id)})
        known: set[str] = set(index.get(ids)) if ids else set()
        memories: list[dict[str, Any]] = []
        added: list[str] = []
        extra = dict(custom_metadata or {})
        for event, text in wanted:
            if event.id in known:
                continue
            known.add(event.id)
            metadata: dict[str, Any] = {**extra, "event_id": event.id}
            if event.invocation_id:
                metadata["invocation_id"] = event.invocation_id
            role = event.content.role if event.content is not None else None
            if role:
                metadata["role"] = "assistant" if role == "model" else role
            fields: dict[str, Any] = {"content": text, "author": event.author or None,
                                      "timestamp": event.timestamp, "kind": "message", "metadata": metadata}
            if session_id:
                fields["session_id"] = session_id
            memories.append(fields)
            added.append(event.id)
        if memories:
            memory_ids = scope.remember_many(memories)
            stored = {event_id: memory_id for event_id, memory_id in zip(added, memory_ids, strict=True)
                      if _indexable(event_id)}
            if stored:
                index.update(stored)

    async def add_memory(self, *, app_name: str, user_id: str, memories: Sequence[MemoryEntry],
                         custom_metadata: Mapping[str, object] | None = None) -> None:
        """Store explicit memories (their text parts; author, timestamp and custom
        metadata kept), all or none."""
        records = []
        extra = dict(custom_metadata or {})
        for index, entry in enumerate(memories):
            text = _event_text(entry.content)
            if text is None or not text.strip():
                raise mnemex.InvalidInput(f"memory {index} has no text", field=f"memories[{index}].content")
            fields: dict[str, Any] = {"content": text, "metadata": {**extra, **entry.custom_metadata}}
            if entry.author:
                fields["author"] = entry.author
            if entry.timestamp:
                fields["timestamp"] = entry.timestamp
            records.append(fields)
        if records:
            await run_write(self._scope(app_name, user_id).remember_many, records)

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """The memories of (app_name, user_id) that best match ``query``, best first,
        each with its id, author and ISO 8601 timestamp."""
        result = await run_blocking(self._scope(app_name, user_id).search, query, self.top_k, self.mode,
                                    self.min_score)
        entries = []
        for hit in result.hits:
            memory = hit.memory
            role = "model" if memory.metadata.get("role") == "assistant" else "user"
            metadata = {key: value for key, value in memory.metadata.items() if key != "role"}
            content = types.Content(role=role, parts=[types.Part(text=memory.content)])
            entries.append(MemoryEntry(id=memory.id, author=memory.author, content=content,
                                       timestamp=_iso(memory.timestamp) if memory.timestamp else None,
                                       custom_metadata=metadata))
        return SearchMemoryResponse(memories=entries)

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Forget one memory by the id ``search_memory`` gave (nothing when None or
        unknown). The event it came from is not stored again when its session is
        added again."""
        if not memory_id:
            return
        await run_write(self._delete, app_name, user_id, memory_id)

    def _index(self, app_name: str, user_id: str) -> Any:
        return self.client.state(app_name=_INDEX_PREFIX + _check_name(app_name, "app_name"), user_id=user_id)

    def _delete(self, app_name: str, user_id: str, memory_id: str) -> None:
        scope = self._scope(app_name, user_id)
        try:
            memory = scope.get(memory_id)
        except mnemex.NotFound:
            return
        event_id = memory.metadata.get("event_id")
        if _indexable(event_id):  # kept: the event is not stored again
            self._index(app_name, user_id).update({event_id: None})
        scope.forget(memory_id)


def _indexable(event_id: Any) -> bool:
    """Whether an event id can be a key of the events' index (at most 256 characters,
    none a control character: every id ADK makes)."""
    return isinstance(event_id, str) and 0 < len(event_id) <= 256 and event_id.isprintable()
