"""Request bodies and server settings, as msgspec Structs. Request bodies forbid
unknown fields: a typo must fail loudly, not lose data."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec

from mnemex import Category, DocumentStatus, MemoryFields, MemoryRecord
from mnemex.config import ServerConfig
from mnemex.server._http import HttpError, decode_json

__all__ = ["Health", "MessageRecord", "MessagesPage", "MessagesStored", "PostArchive", "PostMemory",
           "PostMemoryBatch", "PostMessages", "PostSearch", "Purged", "ServerSettings", "one_session"]


class PostMessages(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /messages``: store ``messages`` (OpenAI chat messages, each kept
    verbatim) in order in the session ``session_id`` (or ``conversation_id``, its
    synonym), as the turn of ``query_id``."""

    session_id: str | None = None
    conversation_id: str | None = None
    query_id: str | None = None
    messages: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    """Kept raw here: each message is checked, and stored verbatim, by the agent."""

    @property
    def session(self) -> str:
        return self.session_id or self.conversation_id or ""

    @classmethod
    def decode(cls, raw: bytes) -> PostMessages:
        """The body, with the errors the platform's clients expect (400 each)."""
        body = decode_json(raw, cls)
        one_session(body.session_id or None, body.conversation_id or None, required=True)
        if not bytes(body.messages).lstrip().startswith(b"["):
            raise HttpError(400, "messages array is required", field="messages")
        return body

    @property
    def message_list(self) -> list[msgspec.Raw]:
        """The messages, each its raw JSON. A number no float can hold (``1e999``) is
        refused here: stored, it would fail every later read of the session."""
        raw = bytes(self.messages)
        if (_EXPONENT.search(raw) is not None or (len(raw) >= 300 and _LONG_NUMBER.search(raw) is not None)):
            try:
                msgspec.json.decode(raw)
            except msgspec.ValidationError as exc:
                raise HttpError(400, f"messages: {exc}", field="messages") from None
            except RecursionError:
                raise HttpError(400, "messages are nested too deeply to be read; flatten them",
                                field="messages") from None
        return _raw_list.decode(self.messages)

    @classmethod
    def decode_parts(cls, raw: bytes) -> tuple[str, str | None, list[msgspec.Raw]]:
        """(the session, the query id, the messages) of a body: what ``decode`` and
        ``message_list`` give, with the same refusals, in one decoding when the body
        is well formed (the messages decoded as a list there and then); any body
        that is not, or that holds a number the check of ``message_list`` looks at,
        goes their way, which says what is wrong."""
        if _EXPONENT.search(raw) is None and (len(raw) < 300 or _LONG_NUMBER.search(raw) is None):
            try:
                listed = _decode_listed(raw)
            except (msgspec.MsgspecError, RecursionError):
                pass
            else:
                if listed.messages is not None:
                    session = one_session(listed.session_id or None, listed.conversation_id or None,
                                          required=True)
                    assert session is not None
                    return session, listed.query_id, listed.messages
        body = cls.decode(raw)
        return body.session, body.query_id, body.message_list


_raw_list = msgspec.json.Decoder(list[msgspec.Raw])
_decode_listed: Any = msgspec.json.Decoder(msgspec.defstruct(
    "_ListedMessages",
    [(field.name, list[msgspec.Raw] | None if field.name == "messages" else field.type, None)
     for field in msgspec.structs.fields(PostMessages)],
    forbid_unknown_fields=True)).decode
"""PostMessages with its messages decoded as a list (None when missing or null): the
same fields, from its own definition."""
# a number too large for a float has an exponent of 3 digits or 300 digits in a row; only
# then is the whole array decoded to be sure
_EXPONENT = re.compile(rb"[0-9][eE][+-]?[0-9]{3}")
_LONG_NUMBER = re.compile(rb"[0-9]{300}")


def one_session(session_id: str | None, conversation_id: str | None, *, required: bool) -> str | None:
    """The session a request names: ``session_id``, or ``conversation_id`` (its synonym
    from newer controllers). Both given and different, or neither (nor a non-empty
    one) when ``required``: 400."""
    if session_id is not None and conversation_id is not None and session_id != conversation_id:
        raise HttpError(400, "session_id and conversation_id name the same thing and differ; give one",
                        field="conversation_id")
    value = session_id if session_id is not None else conversation_id
    if required and not value:
        raise HttpError(400, "session_id is required", field="session_id")
    return value


class MessagesStored(msgspec.Struct):
    """The answer to ``POST /messages``."""

    status: str
    session_id: str
    conversation_id: str
    stored: int
    first_sequence: int | None


class MessageRecord(msgspec.Struct):
    """One stored message: ``message`` is the object that was posted, verbatim;
    ``sequence`` counts from 1 across the agent's sessions in insertion order."""

    sequence: int
    timestamp: str
    session_id: str
    query_id: str
    message: Annotated[msgspec.Raw, msgspec.Meta(extra_json_schema={"type": "object"})]
    """The stored JSON, passed on as it is (never decoded and encoded again)."""


class MessagesPage(msgspec.Struct):
    """``GET /messages``: oldest first; without ``limit``, every message."""

    messages: list[MessageRecord]
    total: int
    limit: int
    offset: int


class Purged(msgspec.Struct, omit_defaults=True):
    """The answer to ``DELETE /messages``."""

    status: str
    message: str
    sessions: list[str]
    messages: int | None = None


class Health(msgspec.Struct, omit_defaults=True):
    """``GET /health`` asked for JSON (``Accept: application/json``); plain clients get ``OK``.
    ``data_dir`` only to a request carrying the token. ``graph``: the entity graphs of
    the scopes loaded now, summed (scopes, entities, mentions, relations, declared,
    merges)."""

    status: str
    uptime_seconds: float
    actors: dict[str, int]
    streams: int
    journal: dict[str, Any]
    data_dir: str | None = None
    categories: dict[str, Any] | None = None
    """Over the scopes loaded now (at most ``scopes_asked``): memories per category,
    memories the offline classifier, a caller or an extractor classified, scopes
    with a catalog of their own and scopes re-classifying."""
    graph: dict[str, int] | None = None
    shards: list[dict[str, Any]] | None = None
    """A cluster's (``mnemex serve --ray``): each shard as it answered, or as not
    answering (``reachable`` false: dead, restarting or frozen); ``status`` is then
    degraded while some shard does not serve, unavailable (503) while none does."""


class PostEntity(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /entities``: declare an entity of (app_name, user_id): its name, type and
    aliases (every memory naming one of them, stored or to come, mentions it)."""

    user_id: str
    app_name: str
    name: str
    type: str = "other"
    aliases: list[str] = msgspec.field(default_factory=list)


class PostAliases(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /entities/{name}/aliases``: make ``names`` aliases of the entity (merge)."""

    user_id: str
    app_name: str
    names: list[str]


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
    """``POST /memory/search``: one scope (user_id + app_name) or several (scopes:
    ``[{user_id, app_name}, ...]``); or, with user_id and app_name, several parts of
    that scope (scopes: ``["global", "campaign", "session"]``, the bare kinds' ids in
    ``scope_ids``, or ``"campaign:ash"``) in one ranking. ``facets``: memories per
    category over the ``hits`` or the ``scope``."""

    query: str
    user_id: str | None = None
    app_name: str | None = None
    scopes: list[ScopeName | str] | None = None
    scope_ids: dict[str, str] | None = None
    top_k: int = 10
    min_score: float | None = None
    mode: str | None = None
    filters: dict[str, Any] | None = None
    include_history: bool = False
    as_of: float | str | None = None
    facets: Literal["hits", "scope"] | None = None


class PutCategories(msgspec.Struct, forbid_unknown_fields=True):
    """``PUT /categories``: extend or change a scope's category catalog (see
    ``ScopeRef.set_categories``)."""

    user_id: str
    app_name: str
    categories: list[Category] = msgspec.field(default_factory=list)
    remove: list[str] = msgspec.field(default_factory=list)
    replace: bool = False
    reclassify: bool = False


class PostFacets(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /memory/facets``: memories per category among those ``filters`` let
    through (a category counted where its confidence >= ``min_confidence``)."""

    user_id: str
    app_name: str
    filters: dict[str, Any] | None = None
    min_confidence: float = 0.0
    include_history: bool = False
    as_of: float | str | None = None


class CategoriesOut(msgspec.Struct):
    """A scope's category catalog: ``counts`` of active memories per category;
    ``threshold`` under which a memory gets ``misc``; a re-classification's progress."""

    categories: list[Category]
    version: int
    counts: dict[str, int]
    threshold: float
    classifier: str
    reclassifying: bool
    reclassified: int
    total: int


class FacetsOut(msgspec.Struct):
    """Memories per category, most first; ``total`` memories counted."""

    counts: dict[str, int]
    total: int


class ActorMemories(msgspec.Struct):
    """``GET /actors/{actor_id}/memories``: the memories linked to an actor, oldest first."""

    actor_id: str
    total: int
    memories: list[MemoryRecord]


class PostExtract(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /sessions/{session_id}/extract``: facts from a conversation into the long-term
    memory of (app_name, user_id); ``if_needed``: only when the session's buffer is full."""

    user_id: str
    app_name: str
    agent: str | None = None
    if_needed: bool = False


class PostArchive(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /sessions/{session_id}/archive``: a conversation into long-term memory."""

    user_id: str
    app_name: str
    agent: str | None = None


class PostDocument(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /documents`` as JSON: a document into the (app_name, user_id) scope.
    ``content``: its bytes, base64; ``media_type``: text/plain, text/markdown,
    application/pdf, image/png or image/jpeg (absent: told from the bytes); the rest as
    ``ScopeRef.ingest`` takes them. (As multipart/form-data, the same names are form
    fields, ``metadata`` a JSON object as text, and ``content`` the file.)"""

    user_id: str
    app_name: str
    content: bytes
    media_type: str | None = None
    document_id: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    extract: bool = True


class Documents(msgspec.Struct):
    """``GET /documents``: the scope's documents, in the order ingested."""

    documents: list[DocumentStatus]


class DocumentDeleted(msgspec.Struct):
    """``DELETE /documents/{id}``: the memories forgotten with it (its chunks and the
    facts extracted from them)."""

    status: str
    id: str
    memories: list[str]


class Sessions(msgspec.Struct):
    """``GET /sessions``: the agent's session ids, oldest first."""

    sessions: list[str]


class SessionCounts(msgspec.Struct):
    message_count: int
    query_count: int
    completed: bool


class MemoryStatus(msgspec.Struct):
    """``GET /memory-status``: counts per session."""

    total_sessions: int
    total_messages: int
    sessions: dict[str, SessionCounts]


class SessionCompleted(msgspec.Struct):
    """``POST /session/{id}/complete``: the session's readers got the end."""

    status: str
    session: str


class Context(msgspec.Struct, kw_only=True):
    """``GET /context``: what to send to the model next (``messages``), after pruning
    and compression by the session's policy, and how it was made."""

    session_id: str
    messages: list[dict[str, Any]]
    tokens: int
    stored: int
    kept: int
    summarized: int
    summary_version: int
    pending_summary: bool
    over_budget: bool
    budget: int | None = None
    policy: dict[str, Any] | None = None
    """The session's pruning policy (``{"type": "max_messages", ...}``)."""


class StreamPushed(msgspec.Struct):
    """The answer to ``POST /stream/{id}`` once its body ended."""

    status: str
    query: str
    chunks_received: int


class StreamCompleted(msgspec.Struct, omit_defaults=True):
    """``POST /stream/{id}/complete``: ``completed`` or ``already_completed``."""

    status: str
    query: str
    session: str | None = None


class StreamsPurged(msgspec.Struct):
    status: str
    message: str
    streams: int


class StreamInfo(msgspec.Struct):
    total_chunks: int
    completed: bool
    has_done_marker: bool
    chunk_types: dict[str, int]
    bytes: int
    readers: int


class StreamStatistics(msgspec.Struct):
    """``GET /stream-statistics``: every pushed stream kept."""

    total_queries: int
    queries: dict[str, StreamInfo]


class MemoryId(msgspec.Struct):
    id: str


class MemoryIds(msgspec.Struct):
    """Ids in the order the memories were given."""

    ids: list[str]


class SearchHitOut(msgspec.Struct):
    """One hit; ``scope``: the part of its scope the memory belongs to (``global``,
    ``campaign:ash``...); ``found_by``: the candidate lists that brought it
    (fulltext, vector, date, graph: see ``mnemex.Hit``)."""

    id: str
    content: str
    score: float
    scores: dict[str, float]
    user_id: str
    app_name: str
    memory: MemoryRecord
    scope: str = "global"
    found_by: tuple[str, ...] = ()


class SearchResults(msgspec.Struct, omit_defaults=True):
    """``POST /memory/search``: best first; ``facets`` when asked for."""

    mode: str
    results: list[SearchHitOut]
    facets: dict[str, int] | None = None


class MemoryDeleted(msgspec.Struct):
    status: str
    id: str


class Archived(msgspec.Struct):
    """``POST /sessions/{id}/archive``: the memory of each message, ``added`` new."""

    status: str
    session_id: str
    memories: int
    added: int
    ids: list[str]


class Error(msgspec.Struct, omit_defaults=True):
    """Every error: what was wrong; ``field`` names the parameter or field at fault."""

    error: str
    field: str | None = None
    type: str | None = None
