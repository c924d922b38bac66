"""The one definition of a memory's fields and their limits.

``MemoryFields`` declares what a caller may give with a memory's content (HTTP
bodies extend it); ``FIELD_NAMES`` names them; ``new_memory`` reads a caller's
fields by name; ``record_of`` turns a ``NewMemory`` into the ``MemoryRecord`` the
scope stores, checking every field against the rules below, and
``checked_changes`` checks an update the same way, and ``check_record`` a whole
record made elsewhere (an export being imported). The ref runs them before it
embeds anything (a bad field costs no model call) and the actor runs them again at
its edge (a command may come from anywhere: the journal, another process): the same
functions at both edges, so the rules cannot drift apart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final

import msgspec

from mnemex._checks import check_id, check_int, check_json_object, check_text
from mnemex._time import check_seconds, seconds
from mnemex.errors import InvalidInput, TooLarge
from mnemex.index import normalize_phrase
from mnemex.memories.protocol import Change, MemoryRecord, NewMemory, SourceRef

__all__ = [
    "CHANGEABLE",
    "FIELD_NAMES",
    "MAX_FIELD_BYTES",
    "MAX_CHANGES",
    "MAX_ID_BYTES",
    "MAX_LABELS",
    "MAX_SOURCES",
    "MemoryFields",
    "check_content",
    "check_importance",
    "check_keyed",
    "check_kind",
    "check_labels",
    "check_memory_id",
    "check_metadata",
    "check_record",
    "check_scope_part",
    "checked_changes",
    "new_memory",
    "record_of",
]

MAX_ID_BYTES: Final = 256
"""Longest memory id, in UTF-8 bytes."""
MAX_FIELD_BYTES: Final = 1024
"""Longest author, session_id, actor_id, source, category or entity, in UTF-8 bytes."""
MAX_LABELS: Final = 256
"""Most categories (or entities, or links) of one memory."""
MAX_SOURCES: Final = 16
"""Source references a memory keeps (the oldest and the newest ones)."""
MAX_CHANGES: Final = 64
"""Changes a memory's history keeps (the first and the latest ones)."""
MAX_NAMESPACE_DEPTH: Final = 32
"""Most labels in a keyed memory's namespace."""
MAX_VECTORS: Final = 256
"""Most extra vectors of one keyed memory."""


class MemoryFields(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """What may come with a memory's content; None (or absent) leaves the default.

    * ``author``: who said it. ``source``: where it came from.
    * ``timestamp``: when it happened: seconds since the epoch, or ISO 8601 text
      (a ``datetime`` too, in Python); default: when it is stored.
    * ``importance``: 0..1, default 0.5.
    * ``session_id``, ``actor_id``: what it belongs to.
    * ``categories``, ``entities``: up to 256 labels each (an entity needs a word).
    * ``metadata``: a JSON object of at most ``config.memories.max_metadata_bytes``.
    * ``kind``: fact (default), preference, event, plan, relationship, ... (a label).
    * ``attributed_to``: whom it is about ("user", a name).
    * ``valid_at``, ``invalid_at``: when what it says became and stopped being true
      (as ``timestamp``; default unknown).
    * ``scope_kind``, ``scope_id``: the part of the user's memory it belongs to
      (``campaign`` and ``ash``, ``session`` and ``s1``, ``actor`` and ``gandros``...;
      default ``global``, no id).
    """

    author: str | None = None
    timestamp: float | str | None = None
    importance: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    session_id: str | None = None
    actor_id: str | None = None
    categories: list[str] | None = None
    entities: list[str] | None = None
    metadata: dict[str, Any] | None = None
    source: str | None = None
    kind: str | None = None
    attributed_to: str | None = None
    valid_at: float | str | None = None
    invalid_at: float | str | None = None
    scope_kind: str | None = None
    scope_id: str | None = None

    def given(self) -> dict[str, Any]:
        """The fields that were given (not None), by name: what ``remember`` takes."""
        return {name: value for name in FIELD_NAMES if (value := getattr(self, name)) is not None}


FIELD_NAMES: Final = frozenset(MemoryFields.__struct_fields__)


def check_memory_id(value: Any, what: str = "id") -> str:
    """A memory id: a non-empty string of at most 256 bytes, no control character."""
    text = check_id(value, what, MAX_ID_BYTES)
    assert text is not None
    return text


def check_importance(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidInput(f"importance must be a number in 0..1, got {value!r}", field="importance")
    return float(value)


def check_labels(value: Any, what: str, *, phrases: bool = False) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidInput(f"{what} must be a list of strings, got {value!r}", field=what)
    if len(value) > MAX_LABELS:
        raise TooLarge(f"{what} has {len(value):,} values; the limit is {MAX_LABELS}", field=what)
    out: list[str] = []
    for item in value:
        label = check_text(item, what, MAX_FIELD_BYTES, optional=False)
        assert label is not None
        if phrases and not normalize_phrase(label):
            raise InvalidInput(f"entity {label!r} has no word characters to match", field=what)
        out.append(label)
    return tuple(dict.fromkeys(out))


def check_metadata(value: Any, limit: int) -> dict[str, Any]:
    return check_json_object(value, "metadata", limit, "config.memories.max_metadata_bytes")


def check_content(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"memory content must be a string, got {type(value).__name__}", field="content")
    if not value.strip():
        raise InvalidInput("memory content is empty", field="content")
    if len(value) > limit // 4:
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise TooLarge(f"memory content is {size:,} bytes; the limit is {limit:,} "
                           f"(config.memories.max_content_bytes)", field="content")
    return value


def check_kind(value: Any, what: str = "kind") -> str:
    """A memory's kind: a short label of letters, digits, ``_`` or ``-``."""
    text = check_text(value, what, 64, optional=False)
    assert text is not None
    if not _KIND.fullmatch(text):
        raise InvalidInput(f"{what} must be a short label of letters, digits, _ or - (such as fact, "
                           f"preference, event, plan), got {text!r}", field=what)
    return text


def check_scope_part(scope_kind: Any, scope_id: Any) -> tuple[str, str | None]:
    """A memory's part of its scope: ``global`` without an id, or a kind (a label as
    ``kind`` is: campaign, session, actor...) with an id."""
    kind = "global" if scope_kind is None else check_kind(scope_kind, "scope_kind")
    if kind == "global":
        if scope_id is not None:
            raise InvalidInput(f"scope_id {scope_id!r} needs a scope_kind other than global (campaign, "
                               f"session, actor...)", field="scope_id")
        return kind, None
    part = check_text(scope_id, "scope_id", MAX_FIELD_BYTES, optional=False)
    if part is None or ":" in kind:
        raise InvalidInput(f"a memory of scope_kind {kind!r} needs its scope_id", field="scope_id")
    return kind, part


def _check_validity(valid_at: Any, invalid_at: Any) -> tuple[float | None, float | None]:
    start = None if valid_at is None else check_seconds(valid_at, "valid_at")
    end = None if invalid_at is None else check_seconds(invalid_at, "invalid_at")
    if start is not None and end is not None and end < start:
        raise InvalidInput(f"invalid_at ({end}) is before valid_at ({start})", field="invalid_at")
    return start, end


def check_namespace(value: Any, what: str = "namespace") -> tuple[str, ...]:
    """A namespace: a list of at most 32 non-empty labels (no control character)."""
    if not isinstance(value, tuple | list) or len(value) > MAX_NAMESPACE_DEPTH:
        raise InvalidInput(f"{what} must be a list of at most {MAX_NAMESPACE_DEPTH} labels, got {value!r}",
                           field=what)
    return tuple(str(check_id(label, f"{what} label", MAX_FIELD_BYTES)) for label in value)


def check_keyed(memory: NewMemory, now: float) -> dict[str, Any]:
    """The keyed fields of a record made from ``memory`` at ``now`` (see MemoryRecord),
    checked; only those that are set."""
    found: dict[str, Any] = {}
    if memory.namespace:
        found["namespace"] = check_namespace(memory.namespace)
    if memory.key is not None:
        found["key"] = check_text(memory.key, "key", MAX_FIELD_BYTES, optional=False)
    if memory.vectors:
        if not isinstance(memory.vectors, tuple | list) or len(memory.vectors) > MAX_VECTORS or not all(
                isinstance(vector, bytes) for vector in memory.vectors):
            raise InvalidInput(f"vectors must be a list of at most {MAX_VECTORS} vectors (bytes)",
                               field="vectors")
        if memory.vector is None:
            raise InvalidInput("a memory with extra vectors needs its first vector in 'vector'",
                               field="vectors")
        found["vectors"] = tuple(memory.vectors)
    if memory.ttl is not None:
        ttl = memory.ttl
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
            raise InvalidInput(f"ttl must be a positive number of seconds or null, got {ttl!r}", field="ttl")
        found["ttl"] = float(ttl)
        found["expires_at"] = now + float(ttl)
    if not isinstance(memory.dedupe, bool):
        raise InvalidInput(f"dedupe must be true or false, got {memory.dedupe!r}", field="dedupe")
    return found


def record_of(memory: NewMemory, now: float, max_content_bytes: int, max_metadata_bytes: int) -> MemoryRecord:
    """The record a scope stores for ``memory`` at ``now``: every field checked (the
    limits named by their config settings), labels de-duplicated, the timestamp
    defaulting to ``now``. InvalidInput or TooLarge naming the field otherwise."""
    # (each check is called only for a value that is not its default: most memories
    # give a few fields, and a check per field was most of the cost; a default is
    # kept as the very object given, as a check returns it: the records encode
    # with omit_defaults, which knows a default by identity)
    timestamp = now if memory.timestamp is None else check_seconds(memory.timestamp, "timestamp")
    valid_at, invalid_at = ((None, None) if memory.valid_at is None and memory.invalid_at is None
                            else _check_validity(memory.valid_at, memory.invalid_at))
    scope_kind, scope_id = (("global", None) if memory.scope_kind is None and memory.scope_id is None
                            else check_scope_part(memory.scope_kind, memory.scope_id))
    metadata = memory.metadata
    importance = memory.importance
    return MemoryRecord(
        id=check_memory_id(memory.id),
        content=check_content(memory.content, max_content_bytes),
        author=_text(memory.author, "author"),
        timestamp=timestamp,
        created_at=now,
        importance=(importance if type(importance) is float and 0.0 <= importance <= 1.0
                    else check_importance(importance)),
        session_id=_text(memory.session_id, "session_id"),
        actor_id=_text(memory.actor_id, "actor_id"),
        categories=_labels(memory.categories, "categories"),
        entities=_labels(memory.entities, "entities", phrases=True),
        metadata=(metadata if type(metadata) is dict and not metadata and max_metadata_bytes >= 2
                  else check_metadata(metadata, max_metadata_bytes)),
        source=_text(memory.source, "source"),
        kind="fact" if memory.kind is None else check_kind(memory.kind),
        attributed_to=_text(memory.attributed_to, "attributed_to"),
        valid_at=valid_at,
        invalid_at=invalid_at,
        scope_kind=scope_kind,
        scope_id=scope_id,
        **(_NOT_KEYED if not memory.namespace and memory.key is None and not memory.vectors
           and memory.ttl is None and memory.dedupe is True else check_keyed(memory, now)),
    )


_NOT_KEYED: Final[dict[str, Any]] = {}


def _text(value: Any, what: str) -> str | None:
    return None if value is None else check_text(value, what, MAX_FIELD_BYTES)


def _labels(value: Any, what: str, *, phrases: bool = False) -> tuple[str, ...]:
    return () if type(value) is tuple and not value else check_labels(value, what, phrases=phrases)


def _unknown(names: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(names) - allowed)
    if unknown:
        raise InvalidInput(f"unknown memory field(s) {', '.join(unknown)}; the fields are "
                           f"{', '.join(sorted(allowed))}", field=unknown[0])


def _as_given(name: str, value: Any) -> Any:
    """A caller's value as the protocol carries it: times parsed, label lists as tuples."""
    if name in _TIMES:
        return seconds(value, name)
    if name in ("categories", "entities") and isinstance(value, list):
        return tuple(value)
    return value


def new_memory(memory_id: str, content: Any, fields: Mapping[str, Any]) -> NewMemory:
    """A ``NewMemory`` from a caller's content and fields by name (None, or absent,
    leaves a field's default). Unknown names are InvalidInput listing the fields; a
    time may be seconds, a ``datetime`` or ISO 8601. The values themselves are
    checked by ``record_of``."""
    _unknown(fields, FIELD_NAMES)
    values = {name: _as_given(name, value) for name, value in fields.items() if value is not None}
    return NewMemory(id=memory_id, content=content, **values)


_TIMES: Final = frozenset({"timestamp", "valid_at", "invalid_at"})
_KIND: Final = re.compile(r"[A-Za-z0-9_-]+")

CHANGEABLE: Final = FIELD_NAMES | {"content"}
"""What an update may change."""


def checked_changes(changes: Mapping[str, Any], max_content_bytes: int,
                    max_metadata_bytes: int) -> dict[str, Any]:
    """The changes of an update, each checked by the rule of its field (None clears
    author, session_id, actor_id, source, attributed_to, valid_at and invalid_at;
    for the others it is refused), as the record will hold them."""
    _unknown(changes, CHANGEABLE)
    out: dict[str, Any] = {}
    if "scope_kind" in changes or "scope_id" in changes:
        if "scope_kind" not in changes:
            raise InvalidInput("give scope_kind with scope_id (global, or a kind with its id)",
                               field="scope_kind")
        out["scope_kind"], out["scope_id"] = check_scope_part(changes["scope_kind"], changes.get("scope_id"))
    for name, given in changes.items():
        if name in ("scope_kind", "scope_id"):
            continue
        value = _as_given(name, given)
        if name == "content":
            out[name] = check_content(value, max_content_bytes)
        elif name == "timestamp":
            out[name] = check_seconds(value, "timestamp")
        elif name in ("valid_at", "invalid_at"):
            out[name] = None if value is None else check_seconds(value, name)
        elif name == "kind":
            out[name] = check_kind(value)
        elif name == "importance":
            out[name] = check_importance(value)
        elif name in ("categories", "entities"):
            out[name] = check_labels(value, name, phrases=name == "entities")
        elif name == "metadata":
            out[name] = check_metadata(value, max_metadata_bytes)
        else:
            out[name] = check_text(value, name, MAX_FIELD_BYTES)
    return out


_STATUSES: Final = ("active", "superseded", "merged")


def check_record(record: Any, max_content_bytes: int, max_metadata_bytes: int) -> MemoryRecord:
    """A whole record made elsewhere (an export being imported) as a scope stores it:
    id, times, status and history kept. What a caller may give is checked as
    ``record_of`` checks it (``created_at`` standing for the time it was stored); the
    knowledge fields by their own rules: counts >= 0, one confidence in 0..1 per
    category (or none), a status whose pointer is set (``superseded_by`` for
    superseded, ``merged_into`` for merged), ids for the links, at most
    ``MAX_SOURCES`` sources and ``MAX_CHANGES`` changes. InvalidInput or TooLarge
    naming the field otherwise."""
    if not isinstance(record, MemoryRecord):
        raise InvalidInput(f"a memory record must be a MemoryRecord, got {type(record).__name__}", field="")
    created_at = check_seconds(record.created_at, "created_at")
    given = record_of(NewMemory(
        id=record.id, content=record.content, author=record.author, timestamp=record.timestamp,
        importance=record.importance, session_id=record.session_id, actor_id=record.actor_id,
        categories=record.categories, entities=record.entities, metadata=record.metadata,
        source=record.source, kind=record.kind, attributed_to=record.attributed_to, valid_at=record.valid_at,
        invalid_at=record.invalid_at, scope_kind=record.scope_kind, scope_id=record.scope_id), created_at,
        max_content_bytes, max_metadata_bytes)
    confidences = _items(record.category_confidences, "category_confidences", MAX_LABELS)
    if confidences and len(confidences) != len(given.categories):
        raise InvalidInput(f"category_confidences has {len(confidences)} values for {len(given.categories)} "
                           f"categories; give one per category, or none", field="category_confidences")
    for index, confidence in enumerate(confidences):
        if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not (
                math.isfinite(confidence) and 0.0 <= confidence <= 1.0):
            raise InvalidInput(f"category_confidences[{index}] must be a number in 0..1, got {confidence!r}",
                               field=f"category_confidences[{index}]")
    status = record.status
    if status not in _STATUSES:
        raise InvalidInput(f"status must be active, superseded or merged, got {status!r}", field="status")
    superseded_by = check_id(record.superseded_by, "superseded_by", MAX_ID_BYTES, optional=True)
    merged_into = check_id(record.merged_into, "merged_into", MAX_ID_BYTES, optional=True)
    for needed, name, pointer in (("superseded", "superseded_by", superseded_by),
                                  ("merged", "merged_into", merged_into)):
        if status == needed and pointer is None:
            raise InvalidInput(f"a {status} memory must name the memory that took its place in {name}",
                               field=name)
    sources = _items(record.sources, "sources", MAX_SOURCES)
    for index, source in enumerate(sources):
        _check_source(source, f"sources[{index}]")
    links = _items(record.links, "links", MAX_LABELS)
    for index, link in enumerate(links):
        check_memory_id(link, f"links[{index}]")
    history = _items(record.history, "history", MAX_CHANGES)
    for index, change in enumerate(history):
        _check_change(change, f"history[{index}]")
    return msgspec.structs.replace(
        given, last_accessed_at=check_seconds(record.last_accessed_at, "last_accessed_at"),
        access_count=check_int(record.access_count, "access_count", 0),
        category_confidences=tuple(float(confidence) for confidence in confidences), status=status,
        superseded_by=superseded_by, merged_into=merged_into,
        sources=sources, extractor=check_text(record.extractor, "extractor", MAX_FIELD_BYTES),
        reinforced=check_int(record.reinforced, "reinforced", 0), links=tuple(dict.fromkeys(links)),
        history=history, classified_by=check_text(record.classified_by, "classified_by", MAX_FIELD_BYTES))


def _items(value: Any, what: str, limit: int) -> tuple[Any, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidInput(f"{what} must be a list, got {value!r}", field=what)
    if len(value) > limit:
        raise TooLarge(f"{what} has {len(value):,} values; the limit is {limit}", field=what)
    return tuple(value)


def _check_source(source: Any, what: str) -> None:
    if not isinstance(source, SourceRef):
        raise InvalidInput(f"{what} must be a SourceRef, got {type(source).__name__}", field=what)
    for name in ("session_id", "document"):
        check_text(getattr(source, name), f"{what}.{name}", MAX_FIELD_BYTES)
    for name in ("first", "last", "chunk"):
        if getattr(source, name) is not None:
            check_int(getattr(source, name), f"{what}.{name}", 0)


def _check_change(change: Any, what: str) -> None:
    if not isinstance(change, Change):
        raise InvalidInput(f"{what} must be a Change, got {type(change).__name__}", field=what)
    check_seconds(change.at, f"{what}.at")
    check_id(change.op, f"{what}.op", 64)
    check_text(change.by, f"{what}.by", MAX_FIELD_BYTES)
    check_id(change.other, f"{what}.other", MAX_ID_BYTES, optional=True)
    check_text(change.note, f"{what}.note", MAX_FIELD_BYTES)
    if change.source is not None:
        _check_source(change.source, f"{what}.source")
