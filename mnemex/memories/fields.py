"""The one definition of a memory's fields and their limits.

``MemoryFields`` declares what a caller may give with a memory's content (HTTP
bodies extend it); ``FIELD_NAMES`` names them; ``new_memory`` reads a caller's
fields by name; ``record_of`` turns a ``NewMemory`` into the ``MemoryRecord`` the
scope stores, checking every field against the rules below, and
``checked_changes`` checks an update the same way. The ref runs them before it
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

from mnemex._checks import check_id, check_json_object, check_text
from mnemex._time import check_seconds, seconds
from mnemex.errors import InvalidInput, TooLarge
from mnemex.index import normalize_phrase
from mnemex.memories.protocol import MemoryRecord, NewMemory

__all__ = [
    "CHANGEABLE",
    "FIELD_NAMES",
    "MAX_FIELD_BYTES",
    "MAX_ID_BYTES",
    "MAX_LABELS",
    "MemoryFields",
    "check_content",
    "check_importance",
    "check_kind",
    "check_labels",
    "check_memory_id",
    "check_metadata",
    "checked_changes",
    "new_memory",
    "record_of",
]

MAX_ID_BYTES: Final = 256
"""Longest memory id, in UTF-8 bytes."""
MAX_FIELD_BYTES: Final = 1024
"""Longest author, session_id, actor_id, source, category or entity, in UTF-8 bytes."""
MAX_LABELS: Final = 256
"""Most categories (or entities) of one memory."""


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


def check_kind(value: Any) -> str:
    """A memory's kind: a short label of letters, digits, ``_`` or ``-``."""
    text = check_text(value, "kind", 64, optional=False)
    assert text is not None
    if not _KIND.fullmatch(text):
        raise InvalidInput(f"kind must be a short label of letters, digits, _ or - (such as fact, "
                           f"preference, event, plan), got {text!r}", field="kind")
    return text


def _check_validity(valid_at: Any, invalid_at: Any) -> tuple[float | None, float | None]:
    start = None if valid_at is None else check_seconds(valid_at, "valid_at")
    end = None if invalid_at is None else check_seconds(invalid_at, "invalid_at")
    if start is not None and end is not None and end < start:
        raise InvalidInput(f"invalid_at ({end}) is before valid_at ({start})", field="invalid_at")
    return start, end


def record_of(memory: NewMemory, now: float, max_content_bytes: int, max_metadata_bytes: int) -> MemoryRecord:
    """The record a scope stores for ``memory`` at ``now``: every field checked (the
    limits named by their config settings), labels de-duplicated, the timestamp
    defaulting to ``now``. InvalidInput or TooLarge naming the field otherwise."""
    timestamp = now if memory.timestamp is None else check_seconds(memory.timestamp, "timestamp")
    valid_at, invalid_at = _check_validity(memory.valid_at, memory.invalid_at)
    return MemoryRecord(
        id=check_memory_id(memory.id),
        content=check_content(memory.content, max_content_bytes),
        author=check_text(memory.author, "author", MAX_FIELD_BYTES),
        timestamp=timestamp,
        created_at=now,
        importance=check_importance(memory.importance),
        session_id=check_text(memory.session_id, "session_id", MAX_FIELD_BYTES),
        actor_id=check_text(memory.actor_id, "actor_id", MAX_FIELD_BYTES),
        categories=check_labels(memory.categories, "categories"),
        entities=check_labels(memory.entities, "entities", phrases=True),
        metadata=check_metadata(memory.metadata, max_metadata_bytes),
        source=check_text(memory.source, "source", MAX_FIELD_BYTES),
        kind="fact" if memory.kind is None else check_kind(memory.kind),
        attributed_to=check_text(memory.attributed_to, "attributed_to", MAX_FIELD_BYTES),
        valid_at=valid_at,
        invalid_at=invalid_at,
    )


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
    for name, given in changes.items():
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
