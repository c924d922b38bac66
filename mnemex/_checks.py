"""The one check of each kind of value that crosses into an actor: ids and names,
texts with a byte limit, integers in a range, JSON objects. Each raises InvalidInput
(or TooLarge) naming the field, the value and the limit. (Times:
``mnemex._time.check_seconds``.)"""

from __future__ import annotations

import math
import re
from typing import Any, Final

import msgspec

from mnemex.errors import InvalidInput, TooLarge

__all__ = ["check_id", "check_int", "check_json_object", "check_text"]

_CONTROL: Final = re.compile(r"[\x00-\x1f]")


def _byte_size(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


_MAX_INT: Final = 2**62  # counts and sizes far beyond any real one, and inside JSON's 64-bit integers


def check_int(value: Any, what: str, low: int, high: int | None = None) -> int:
    """An int (not a bool) in ``low..high`` (``high`` None: no bound but 2**62)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        span = f">= {low}" if high is None else f"in {low}..{high:,}"
        raise InvalidInput(f"{what} must be an integer {span}, got {value!r}", field=what)
    if value > _MAX_INT:
        raise InvalidInput(f"{what} is {value:,}; the limit is 2**62", field=what)
    return value


def check_text(value: Any, what: str, limit: int, *, optional: bool = True) -> str | None:
    """A non-empty string of at most ``limit`` UTF-8 bytes (None too when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string{' or null' if optional else ''}, "
                           f"got {value!r}", field=what)
    if len(value) > limit // 4 and _byte_size(value) > limit:
        raise TooLarge(f"{what} is {_byte_size(value):,} bytes; the limit is {limit:,}", field=what)
    return value


def check_id(value: Any, what: str, limit: int, *, optional: bool = False) -> str | None:
    """An id or name: a non-empty string of at most ``limit`` UTF-8 bytes with no
    control character (None too when ``optional``)."""
    if type(value) is str and 0 < len(value) <= limit // 4 and value.isprintable():
        return value  # the common case: at most 4 UTF-8 bytes a character, no control character
    text = check_text(value, what, limit, optional=optional)
    if text is not None and _CONTROL.search(text):
        raise InvalidInput(f"{what} {text!r} contains a control character", field=what)
    return text


_MAX_DEPTH: Final = 32
_encoder: Final = msgspec.json.Encoder()


def _json_value(value: Any, path: str, depth: int) -> None:
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise InvalidInput(f"{path} is {value}; JSON integers here fit in 64 bits", field=path)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"{path} is {value}; JSON has no NaN or infinity", field=path)
        return
    if depth >= _MAX_DEPTH:
        raise InvalidInput(f"{path} nests deeper than {_MAX_DEPTH} levels", field=path)
    if isinstance(value, list):
        for index, item in enumerate(value):
            _json_value(item, f"{path}[{index}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"{path} has the key {key!r}; JSON object keys are strings", field=path)
            _json_value(item, f"{path}.{key}", depth + 1)
        return
    raise InvalidInput(f"{path} holds a {type(value).__name__} ({value!r:.40}); a JSON value is null, true, "
                       f"false, a number, a string, a list or an object", field=path)


def check_json_object(value: Any, what: str, limit: int, limit_name: str) -> dict[str, Any]:
    """A JSON object of at most ``limit`` bytes encoded: string keys, and values that
    are JSON as they are (no sets, tuples, NaN or other objects a JSON encoder would
    change or refuse). ``limit_name`` names the setting in the TooLarge message."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {type(value).__name__}", field=what)
    _json_value(value, what, 0)
    size = len(_encoder.encode(value))
    if size > limit:
        raise TooLarge(f"{what} is {size:,} bytes as JSON; the limit is {limit:,} ({limit_name})", field=what)
    return value
