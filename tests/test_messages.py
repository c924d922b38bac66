"""Typed messages: round trips, and junk that fails with a mnemex error naming the field."""

from __future__ import annotations

import msgspec
import pytest

import mnemex
from mnemex._protocol import JsonCodec
from mnemex.conversations.protocol import ChatMessage
from mnemex.memories.protocol import MemoryRecord
from mnemex.testing import Add, CounterCommand, Get

_chat = JsonCodec(ChatMessage, "chat message")
_commands: JsonCodec[CounterCommand] = JsonCodec(CounterCommand, "counter command")


def test_chat_message_round_trips_with_tool_calls() -> None:
    message = ChatMessage(role="assistant", content=None,
                          tool_calls=[{"id": "t1", "type": "function",
                                       "function": {"name": "f", "arguments": "{}"}}])
    assert _chat.decode(_chat.encode(message)) == message
    assert b"metadata" not in _chat.encode(message)  # defaults omitted on the wire


def test_tagged_union_decodes_to_the_right_type() -> None:
    assert _commands.decode(b'{"type":"counter.add","n":3,"sender":"x"}') == Add(3, sender="x")
    assert _commands.decode(b'{"type":"counter.get"}') == Get()


@pytest.mark.parametrize(
    ("data", "field", "match"),
    [
        (b'{"content":"hi"}', "$.role", "missing required field `role`"),
        (b'{"role":"user","metadata":[1]}', "$.metadata", "Expected `object`"),
        (b'{"role":5}', "$.role", "Expected `str`"),
        (b'{"role":"user","tool_calls":"x"}', "$.tool_calls", "Expected `array"),
    ],
)
def test_junk_raises_invalid_input_naming_the_field(data: bytes, field: str, match: str) -> None:
    with pytest.raises(mnemex.InvalidInput, match=match) as info:
        _chat.decode(data)
    assert info.value.field == field


def test_unknown_tag_and_bad_json_are_invalid_input() -> None:
    with pytest.raises(mnemex.InvalidInput, match="Invalid value 'counter.nope'"):
        _commands.decode(b'{"type":"counter.nope"}')
    with pytest.raises(mnemex.InvalidInput, match="not valid JSON"):
        _commands.decode(b'{"type":')


def test_persisted_records_tolerate_unknown_fields() -> None:
    record = msgspec.json.decode(b'{"id":"m1","content":"c","from_the_future":1}', type=MemoryRecord)
    assert record.id == "m1"


def test_config_is_checked_when_built() -> None:
    with pytest.raises(mnemex.InvalidInput, match="mailbox_size is 0"):
        mnemex.Config(mailbox_size=0)
    with pytest.raises(mnemex.InvalidInput, match="ask_timeout"):
        mnemex.Config(ask_timeout=float("nan"))
    with pytest.raises(mnemex.InvalidInput, match="no setting 'mailbox'"):
        mnemex.load_config('mailbox = 3\n')
    assert mnemex.load_config('mailbox_size = 3\nfsync = "always"\n').mailbox_size == 3
    with pytest.raises(mnemex.InvalidInput, match="fsync"):
        mnemex.load_config('fsync = "sometimes"\n')
