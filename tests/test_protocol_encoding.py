"""Every message type of the two actor protocols is plain msgspec data: it encodes to
JSON and decodes back equal, so a reply can cross HTTP or a process boundary."""

from __future__ import annotations

import inspect
from typing import Any

import msgspec
import pytest

from mnemex.conversations import protocol as conversations
from mnemex.memories import protocol as memories


def structs(module: Any) -> list[type[msgspec.Struct]]:
    return [obj for name, obj in sorted(vars(module).items())
            if inspect.isclass(obj) and issubclass(obj, msgspec.Struct) and obj.__module__ == module.__name__]


@pytest.mark.parametrize("struct", [*structs(conversations), *structs(memories)], ids=lambda s: s.__name__)
def test_every_protocol_type_has_a_json_schema(struct: type[msgspec.Struct]) -> None:
    msgspec.json.schema(struct)  # raises for a field msgspec cannot encode


def test_a_reply_round_trips_through_json() -> None:
    record = memories.MemoryRecord(id="m1", content="Alice writes Java", importance=0.7,
                                   categories=("work",), metadata={"n": 1})
    result = memories.SearchResult(hits=[memories.Hit(memory=record, score=0.5, scores={"bm25": 1.0})],
                                   mode="hybrid")
    data = msgspec.json.encode(result)
    assert msgspec.json.decode(data, type=memories.SearchResult) == result
    assert msgspec.json.decode(data)["type"] == "scope.search_result"
