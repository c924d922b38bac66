"""The base of every actor command and reply, and the JSON codec that names the
offending field of a bad input (``$.messages[0].role``).

Persisted types tolerate unknown fields (old readers read new files); every new
field gets a default. Junk that fails to decode raises ``InvalidInput`` naming
the field path (``$.messages[0].role``), never a bare KeyError or msgspec error.
"""

from __future__ import annotations

import re
from typing import Any, Generic, TypeVar

import msgspec

from mnemex.errors import InvalidInput

__all__ = ["Command", "JsonCodec", "Reply", "decode_json"]

T = TypeVar("T")


class Command(msgspec.Struct, frozen=True, tag_field="type"):
    """Base of every actor command. Subclasses set ``tag="<kind>.<verb>"``."""


class Reply(msgspec.Struct, frozen=True, tag_field="type"):
    """Base of every structured reply. Subclasses set ``tag="<kind>.<noun>"``."""


_PATH = re.compile(r"- at `(\$[^`]*)`")
_MISSING = re.compile(r"missing required field `([^`]*)`")


def _field_of(exc: msgspec.ValidationError) -> str | None:
    """The JSON path of the offending field: ``$.messages[0].role``."""
    text = str(exc)
    match = _PATH.search(text)
    path = match.group(1) if match else None
    missing = _MISSING.search(text)
    if missing:
        return f"{path or '$'}.{missing.group(1)}"
    return path


class JsonCodec(Generic[T]):
    """One shared JSON encoder/decoder pair for a type, built once and reused.

    ``decode`` raises InvalidInput naming the offending field; ``what`` says what
    was being decoded (``"journal command"``, ``"POST /memory body"``).
    """

    __slots__ = ("_decoder", "_encoder", "type", "what")

    def __init__(self, type_: Any, what: str) -> None:
        self.type = type_
        self.what = what
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(type_)
        self._encoder = msgspec.json.Encoder()

    def encode(self, value: T) -> bytes:
        return self._encoder.encode(value)

    def decode(self, data: bytes | str) -> T:
        try:
            return self._decoder.decode(data)
        except msgspec.ValidationError as exc:
            field = _field_of(exc)
            raise InvalidInput(f"{self.what}: {exc}", field=field) from exc
        except msgspec.DecodeError as exc:
            raise InvalidInput(f"{self.what} is not valid JSON: {exc}") from exc


def decode_json(data: bytes | str, type_: type[T], what: str) -> T:
    """Decode ``data`` as ``type_`` once; prefer a module-level JsonCodec in hot paths."""
    return JsonCodec[T](type_, what).decode(data)

