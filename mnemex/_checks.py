"""The one check of each kind of value that crosses into an actor: ids and names,
texts with a byte limit. Each raises InvalidInput (or TooLarge) naming the field,
the value and the limit. (Times: ``mnemex._time.check_seconds``.)"""

from __future__ import annotations

import re
from typing import Any, Final

from mnemex.errors import InvalidInput, TooLarge

__all__ = ["check_id", "check_text"]

_CONTROL: Final = re.compile(r"[\x00-\x1f]")


def _byte_size(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


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
