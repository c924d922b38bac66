"""OpenAI Responses items as an agent takes them: each stored verbatim, read only for
what pruning, counting and search need.

The Responses API, and the OpenAI Agents SDK whose sessions hold its input items,
speak in items rather than chat messages: messages (``{"type": "message", "role":
..., "content": [...]}``, or the short ``{"role": ..., "content": ...}``),
``function_call`` and ``function_call_output``, ``reasoning``, hosted tool calls,
and more with every API release. Most have no role; and what a session wrapper
stores through another session may be anything (the SDK's ``EncryptedSession``
stores envelopes with neither a type nor a role). So an item is checked only as
far as the agent reads it: a JSON object; its ``type``, if any, a string; a message
(``type`` "message", or a ``role`` and no type) has a role of system, developer,
user or assistant. Any other field, and any item type, is kept unread (the role
of an item that is not a message too). An object with neither a type nor a role
is kept as an ``untyped`` item: counted whole, never read for text.

What pruning needs from an item is where a context may start. An item *joins* the
entry before it (a context never starts on it) when it answers an earlier call (a
``*_output`` item, an ``mcp_approval_response``), or when both are the model's own
output (reasoning, an assistant message, a call) with no input between them: the
items of one model response stay together, since the API refuses a reasoning item
without the item it led to, and parallel calls come before all of their outputs.
Every other item starts a unit, as a chat message that is not a tool result does.
A user, system or developer message never joins, nor does an untyped item, and
nothing joins one.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from mnemex.conversations.protocol import MessageEntry
from mnemex.conversations.tokens import TokenCounter, content_text, message_tokens
from mnemex.conversations.validation import CheckedMessage, check_raw
from mnemex.errors import InvalidInput

__all__ = ["MESSAGE_ROLES", "UNTYPED", "check_item", "item_as_chat", "joins", "recount_item_tokens"]

MESSAGE_ROLES: Final = frozenset({"system", "developer", "user", "assistant"})
"""The roles of a Responses message item (tool results are items of their own)."""
UNTYPED: Final = "untyped"
"""The ``item`` of an entry stored from an object with neither a type nor a role."""


class _Item(msgspec.Struct):
    """The fields of an item the agent reads; any others are kept, unread."""

    type: str | None = None
    role: str | None = None
    content: Any = None
    name: Any = None
    arguments: Any = None
    input: Any = None
    output: Any = None
    call_id: Any = None
    approval_request_id: Any = None
    summary: Any = None
    encrypted_content: Any = None


_decode_item = msgspec.json.Decoder(_Item)
_encode = msgspec.json.Encoder()


def _is_answer(kind: str) -> bool:
    return kind.endswith("_output") or kind == "mcp_approval_response"


def _is_model_output(kind: str, role: str) -> bool:
    if not kind or kind == UNTYPED:  # a chat message, or what cannot be read
        return False
    if kind == "message":
        return role == "assistant"
    return not _is_answer(kind)


def joins(kind: str, role: str, previous_kind: str, previous_role: str) -> bool:
    """Whether an item of type ``kind`` (and ``role``) continues the unit of the entry
    before it (``previous_kind`` "" for a chat message or none): see the module doc."""
    return _is_answer(kind) or (_is_model_output(kind, role)
                                and _is_model_output(previous_kind, previous_role))


def _text_of(value: Any) -> tuple[str, int]:
    """The text of a content or output value and its parts that are not text."""
    if value is None or isinstance(value, str):
        return content_text(value)
    if isinstance(value, list):
        return content_text([part if isinstance(part, dict) else {"text": part} if isinstance(part, str)
                             else {} for part in value])
    return _encode.encode(value).decode(), 0


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _encode.encode(value).decode()


def _read(shape: _Item, kind: str, raw: bytes) -> tuple[str, int, list[str]]:
    """(text, non-text parts, extra strings) of an item: what is counted, and the text
    searched. An item with nothing of these is counted whole, as its JSON."""
    if kind == "message":
        text, other = _text_of(shape.content)
        return text, other, []
    if kind == "reasoning":
        text, _ = _text_of(shape.summary)
        return text, 0, [_as_text(shape.encrypted_content)]
    text, other = _text_of(shape.output)
    extras = [piece for piece in (_as_text(shape.name), _as_text(shape.arguments), _as_text(shape.input))
              if piece]
    if not text and not other and not extras:
        extras = [raw.decode("utf-8", "replace")]
    return text, other, extras


def check_item(raw: Any, index: int, counter: TokenCounter, limit: int, *,
               previous: tuple[str, str]) -> CheckedMessage:
    """Item ``index`` of a batch, checked: InvalidInput or TooLarge (over ``limit``
    bytes) naming its JSON path (``$.items[3].role``). ``previous``: the (type, role)
    of the entry before it in the session, ("", "") for none or a chat message."""
    where = f"$.items[{index}]"
    check_raw(raw, index, limit, "item", "items")
    try:
        shape = _decode_item.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        path = where
        if "- at `$" in text:
            path = where + text.rsplit("- at `$", 1)[1].rstrip("`")
            text = text.rsplit(" - at ", 1)[0]
        raise InvalidInput(f"item {index} is not a Responses item: {text} (at {path})", field=path) from exc
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"item {index} is not valid JSON: {exc}", field=where) from exc
    kind = shape.type
    if kind is None:
        kind = "message" if shape.role is not None else UNTYPED
    elif not kind:
        raise InvalidInput(f"item {index} has an empty type", field=where + ".type")
    role = ""
    if kind == "message":
        role = shape.role or ""
        if role not in MESSAGE_ROLES:
            shown = repr(role) if role else "none"
            hint = " (a chat tool result goes through append)" if role in ("tool", "function") else ""
            raise InvalidInput(f"message item {index} has role {shown}; a role must be one of "
                               f"{', '.join(sorted(MESSAGE_ROLES))}{hint}", field=where + ".role")
    text, other, extras = _read(shape, kind, bytes(raw))
    call_id = shape.call_id if isinstance(shape.call_id, str) and shape.call_id else None
    calls: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    answered: str | None = None
    if _is_answer(kind):
        request = shape.approval_request_id
        answered = call_id or (request if isinstance(request, str) and request else None)
    elif kind.endswith("_call"):
        calls = (call_id,) if call_id is not None else ()
        names = (shape.name,) if isinstance(shape.name, str) and shape.name else ()
    tokens = message_tokens(counter, text, other, extras)
    return CheckedMessage(raw, role, tokens, text, calls, names, answered, item=kind,
                          joined=joins(kind, role, *previous))


def recount_item_tokens(entry: MessageEntry, counter: TokenCounter) -> MessageEntry:
    """``entry`` (stored as an item) with its tokens counted again by ``counter``."""
    shape = _decode_item.decode(entry.message)
    text, other, extras = _read(shape, entry.item, bytes(entry.message))
    return msgspec.structs.replace(entry, tokens=message_tokens(counter, text, other, extras))


def item_as_chat(item: dict[str, Any]) -> dict[str, Any] | None:
    """An item as the chat message a summarizer reads (a message, a call, a tool
    result); None for what a summary leaves out (reasoning, hosted tool calls)."""
    kind = item.get("type") or ("message" if "role" in item else UNTYPED)
    if kind == "message":
        return {"role": item.get("role"), "content": item.get("content")}
    if kind in ("function_call", "custom_tool_call"):
        arguments = item.get("arguments", item.get("input", ""))
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": item.get("call_id"), "type": "function",
             "function": {"name": item.get("name", "?"), "arguments": _as_text(arguments)}}]}
    if _is_answer(kind):
        text, _ = _text_of(item.get("output"))
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": text}
    return None
