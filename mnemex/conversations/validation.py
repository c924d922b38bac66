"""Chat messages as the agent takes them: each checked once, where it enters.

A message is stored verbatim (its raw JSON, extra fields kept); the checker reads
only the fields it must (role, content, tool calls, tool_call_id, name) to refuse
what a model API would refuse later: an unknown role, content missing where it is
required, a tool result answering no call of the session. The common case (a plain
text message of a plain role) is decoded once and counted, nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from mnemex.conversations.protocol import MessageEntry
from mnemex.conversations.tokens import MESSAGE_OVERHEAD, TokenCounter, content_text, message_tokens
from mnemex.errors import InvalidInput, TooLarge

__all__ = ["ALLOWED_ROLES", "CheckedMessage", "check_message", "check_raw", "messages_to_raw",
           "recount_tokens"]

ALLOWED_ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_PLAIN_ROLES: Final = frozenset({"system", "developer", "user", "assistant"})  # no tool_call_id to check


class _Function(msgspec.Struct):
    name: str = ""
    arguments: Any = None


class _ToolCall(msgspec.Struct):
    id: str
    type: str = "function"
    function: _Function | None = None


class _Part(msgspec.Struct):
    type: str
    text: str | None = None


class _Shape(msgspec.Struct):
    """The fields of a chat message the actor reads; any others are kept, unread."""

    role: str
    content: str | list[_Part] | None = None
    name: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    function_call: Any = None


_decode_shape = msgspec.json.Decoder(_Shape)
_encode = msgspec.json.Encoder()


class CheckedMessage(msgspec.Struct, gc=False):
    """One message that passed: its raw JSON, what the agent indexes and counts
    (``item`` and ``joined``: see MessageEntry; a chat message leaves them unset).
    (A Struct: made once per message appended, in C, five times faster than a
    dataclass.)"""

    raw: msgspec.Raw
    role: str
    tokens: int
    text: str
    call_ids: tuple[str, ...]
    call_names: tuple[str, ...]
    tool_call_id: str | None
    item: str = ""
    joined: bool = False


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return _encode.encode(arguments).decode()


def check_message(raw: Any, index: int, counter: TokenCounter, limit: int, *,
                  known_calls: set[str], batch_calls: set[str]) -> CheckedMessage:
    """Message ``index`` of a batch, checked: InvalidInput or TooLarge (over ``limit``
    bytes) naming its JSON path. ``known_calls``: tool call ids of the session;
    ``batch_calls``: those of earlier messages of the same batch."""
    if type(raw) is msgspec.Raw and len(raw) <= limit:
        try:
            shape = _decode_shape.decode(raw)
        except msgspec.MsgspecError:
            pass
        else:
            content = shape.content
            if (type(content) is str and shape.tool_calls is None and shape.name is None
                    and shape.role in _PLAIN_ROLES):
                # the common case: a plain text message
                return CheckedMessage(raw, shape.role, MESSAGE_OVERHEAD + counter.count(content), content,
                                (), (), shape.tool_call_id)
            return _check_shape(shape, raw, index, counter, known_calls=known_calls,
                                batch_calls=batch_calls)
    where = f"$.messages[{index}]"
    check_raw(raw, index, limit)
    try:
        shape = _decode_shape.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        path = where
        if "- at `$" in text:
            tail = text.rsplit("- at `$", 1)[1].rstrip("`")
            path = where + tail
            text = text.rsplit(" - at ", 1)[0]
        raise InvalidInput(f"message {index} is not a chat message: {text} (at {path})", field=path) from exc
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"message {index} is not valid JSON: {exc}", field=where) from exc
    return _check_shape(shape, raw, index, counter, known_calls=known_calls, batch_calls=batch_calls)


def check_raw(raw: Any, index: int, limit: int, what: str = "message", path: str = "messages") -> None:
    """InvalidInput unless ``raw`` is raw JSON (msgspec.Raw); TooLarge when it is over
    ``limit`` bytes. ``what`` and ``path`` name it (``message 3``, ``$.messages[3]``)."""
    where = f"$.{path}[{index}]"
    if not isinstance(raw, msgspec.Raw):
        raise InvalidInput(f"{what} {index} must be raw JSON (msgspec.Raw), got {type(raw).__name__}",
                           field=where)
    if len(raw) > limit:
        raise TooLarge(f"{what} {index} is {len(raw):,} bytes; the limit is {limit:,} "
                       f"(config.conversations.max_message_bytes)", field=where)


def _check_shape(shape: _Shape, raw: msgspec.Raw, index: int, counter: TokenCounter, *,
                 known_calls: set[str], batch_calls: set[str]) -> CheckedMessage:
    where = f"$.messages[{index}]"
    role = shape.role
    if role not in ALLOWED_ROLES:
        shown = repr(role) if role else "empty"
        raise InvalidInput(f"message {index} has role {shown}; a role must be one of "
                           f"{', '.join(sorted(ALLOWED_ROLES))}", field=where + ".role")
    content = shape.content
    calls = shape.tool_calls or []
    # an assistant may say nothing: it calls tools, refuses (``refusal``), or the model
    # returned empty content, which platforms store as {"role": "assistant"}
    if content is None and role != "assistant":
        raise InvalidInput(f"message {index} ({role}) has no content; only an assistant message may "
                           f"leave content out", field=where + ".content")
    if calls and role != "assistant":
        raise InvalidInput(f"message {index} ({role}) has tool_calls; only assistant messages call tools",
                           field=where + ".tool_calls")
    call_ids: list[str] = []
    call_names: list[str] = []
    extras: list[str] = []
    for number, call in enumerate(calls):
        if not call.id:
            raise InvalidInput(f"tool call {number} of message {index} has an empty id",
                               field=f"{where}.tool_calls[{number}].id")
        call_ids.append(call.id)
        if call.function is not None:
            call_names.append(call.function.name)
            extras.append(call.function.name)
            extras.append(_arguments_text(call.function.arguments))
    tool_call_id = shape.tool_call_id
    if role == "tool":
        if not tool_call_id:
            raise InvalidInput(f"message {index} is a tool result without tool_call_id",
                               field=where + ".tool_call_id")
        if tool_call_id not in known_calls and tool_call_id not in batch_calls:
            raise InvalidInput(f"message {index} answers tool call {tool_call_id!r}, which no earlier "
                               f"assistant message of this session made", field=where + ".tool_call_id")
    if shape.name:
        extras.append(shape.name)
    text, other = content_text(content)
    tokens = message_tokens(counter, text, other, extras)
    return CheckedMessage(raw, role, tokens, text, tuple(call_ids), tuple(call_names), tool_call_id)


def recount_tokens(entry: MessageEntry, counter: TokenCounter) -> MessageEntry:
    """``entry`` with its tokens counted again by ``counter`` (a snapshot written under
    another counter)."""
    shape = _decode_shape.decode(entry.message)
    extras: list[str] = []
    for call in shape.tool_calls or ():
        if call.function is not None:
            extras += [call.function.name, _arguments_text(call.function.arguments)]
    if shape.name:
        extras.append(shape.name)
    text, other = content_text(shape.content)
    return msgspec.structs.replace(entry, tokens=message_tokens(counter, text, other, extras))


def messages_to_raw(messages: Iterable[Any], *, what: str = "message",
                    path: str = "messages") -> list[msgspec.Raw]:
    """Chat messages (dicts, ChatMessage structs, JSON bytes or Raw) as raw JSON objects
    (``what`` and ``path`` name them in errors: ``item 2``, ``$.items[2]``)."""
    out: list[msgspec.Raw] = []
    for index, message in enumerate(messages):
        if isinstance(message, _BYTES):
            data = bytes(message)
            if b"\n" in data or b"\r" in data:  # a journal line holds no line break: compact it
                try:
                    data = _encode.encode(msgspec.json.decode(data))
                except msgspec.MsgspecError as exc:
                    raise InvalidInput(f"{what} {index} is not valid JSON: {exc}",
                                       field=f"$.{path}[{index}]") from exc
            out.append(msgspec.Raw(data))  # its own bytes: a decoded Raw holds its whole document
        elif isinstance(message, _OBJECTS):
            try:
                value = message if isinstance(message, dict | msgspec.Struct) else dict(message)
                out.append(msgspec.Raw(_encode.encode(value)))
            except (TypeError, ValueError, OverflowError) as exc:
                raise InvalidInput(f"{what} {index} cannot be encoded as JSON: {exc}",
                                   field=f"$.{path}[{index}]") from exc
        else:
            shapes = "a dict or a mnemex.ChatMessage" if what == "message" else "a dict"
            raise InvalidInput(f"{what} {index} must be {shapes}, got {type(message).__name__}",
                               field=f"$.{path}[{index}]")
    return out


_BYTES: Final = (msgspec.Raw, bytes, bytearray, memoryview)
_OBJECTS: Final = (Mapping, msgspec.Struct)
