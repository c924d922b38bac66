"""``record_of`` calls each field's check only for a value that is not the field's
default (issue 17: the checks ran twice a memory, once at the ref and once at the
actor, and a call per field was most of their cost). It must answer as calling
every check does: the reference below is that reading, as it stood before. Every
answer (the record and its encoding, or the error: its class, field and message)
is compared on fields drawn from valid and invalid values."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex._checks import check_text
from mnemex._time import check_seconds
from mnemex.errors import MnemexError
from mnemex.memories.fields import (
    MAX_FIELD_BYTES,
    _check_validity,
    check_content,
    check_importance,
    check_keyed,
    check_kind,
    check_labels,
    check_memory_id,
    check_metadata,
    check_scope_part,
    record_of,
)
from mnemex.memories.protocol import MemoryRecord, NewMemory


def reference_record(memory: NewMemory, now: float, max_content_bytes: int,
                     max_metadata_bytes: int) -> MemoryRecord:
    timestamp = now if memory.timestamp is None else check_seconds(memory.timestamp, "timestamp")
    valid_at, invalid_at = _check_validity(memory.valid_at, memory.invalid_at)
    scope_kind, scope_id = check_scope_part(memory.scope_kind, memory.scope_id)
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
        scope_kind=scope_kind,
        scope_id=scope_id,
        **check_keyed(memory, now),
    )


def _answer(check: Any, *args: Any) -> Any:
    try:
        record = check(*args)
    except MnemexError as exc:
        return (type(exc), exc.field, str(exc))
    # the bytes too: a record encodes with omit_defaults, which knows a default by
    # identity (a 0.5 made elsewhere is written out; the default's own object is not)
    return record, msgspec.json.encode(record)


_TEXT = st.sampled_from([None, "Anna", "", "x" * 2000, 3, "a\nb"])
_TIME = st.sampled_from([None, 0.0, 12.5, 1e9, -1.0, float("nan"), "2024-01-01", True, 5])
_FIELDS = {
    "id": st.sampled_from(["m1", "", "a\x00b", "é" * 70, 7]),
    "content": st.sampled_from(["hello", "", "  ", "x" * 11_000, "ü" * 3000, None]),
    "author": _TEXT, "session_id": _TEXT, "actor_id": _TEXT, "source": _TEXT, "attributed_to": _TEXT,
    "timestamp": _TIME, "valid_at": _TIME, "invalid_at": _TIME,
    "importance": st.sampled_from([0.5, 0.0, 1, 1.5, True, float("nan"), "0.5", 0.7]),
    "categories": st.sampled_from([(), [], ("a", "a", "b"), "a", ("",), [1], None]),
    "entities": st.sampled_from([(), ("Anna",), ("!!",), ["Bob", "Bob"], "Anna"]),
    "metadata": st.sampled_from([{}, {"a": 1}, {"a": float("inf")}, {"x": "y" * 40}, [], None, {1: 2}]),
    "kind": st.sampled_from([None, "fact", "event", "bad kind", ""]),
    "scope_kind": st.sampled_from([None, "global", "campaign", "a:b", 4]),
    "scope_id": st.sampled_from([None, "ash", ""]),
    "namespace": st.sampled_from([(), ("a", "b"), [], ("",), "ab"]),
    "key": st.sampled_from([None, "k", ""]),
    "vectors": st.sampled_from([(), (b"\x00" * 8,), ["v"]]),
    "vector": st.sampled_from([None, b"\x00" * 8]),
    "ttl": st.sampled_from([None, 10.0, 0, -1, True, float("inf")]),
    "dedupe": st.sampled_from([True, False, 1, None]),
}


@settings(max_examples=600, deadline=None)
@given(st.fixed_dictionaries({"id": _FIELDS["id"], "content": _FIELDS["content"]},
                             optional={name: strategy for name, strategy in _FIELDS.items()
                                       if name not in ("id", "content")}),
       st.sampled_from([(10_240, 16_384), (10_240, 1), (10_240, 2), (4, 30)]))
def test_the_record_or_the_error_of_checking_every_field(fields: dict[str, Any],
                                                        limits: tuple[int, int]) -> None:
    memory = NewMemory(**fields)
    assert _answer(record_of, memory, 100.0, *limits) == _answer(reference_record, memory, 100.0, *limits)
