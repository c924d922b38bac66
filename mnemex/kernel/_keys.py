"""Actor keys: tuples of non-empty strings, checked once where they enter."""

from __future__ import annotations

import re
from typing import Any

from mnemex.effects import Key
from mnemex.errors import InvalidInput, TooLarge

__all__ = ["check_key"]


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _first_control(text: str) -> int:
    match = _CONTROL.search(text)
    return match.start() if match else -1


def check_key(kind: str, key: Any, max_bytes: int) -> Key:
    """Return ``key`` as a tuple of strings, or raise InvalidInput saying what is wrong.

    A component must be a non-empty str of at most ``max_bytes`` UTF-8 bytes with no
    control characters (NUL, newline...). Path-like text such as ``../x`` is a valid
    key: the on-disk layout encodes every key into one safe folder name.
    """
    parts: tuple[Any, ...] = (key,) if isinstance(key, str) else key
    if not isinstance(parts, tuple) or not parts:
        raise InvalidInput(
            f"{kind} key must be a non-empty str or tuple of str, got {type(key).__name__}", field="key"
        )
    for part in parts:
        if not isinstance(part, str):
            raise InvalidInput(f"{kind} key part must be str, got {type(part).__name__}: {part!r}",
                               field="key")
        if not part:
            raise InvalidInput(f"{kind} key part is empty; keys must be non-empty strings", field="key")
        try:
            size = len(part.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidInput(f"{kind} key part {part[:40]!r} is not valid unicode text "
                               f"(a lone surrogate at position {exc.start})", field="key") from exc
        if size > max_bytes:
            raise TooLarge(
                f"{kind} key part is {size:,} bytes; the limit is {max_bytes:,} "
                f"(config.kernel.max_key_bytes)",
                field="key",
            )
        bad = _first_control(part)
        if bad >= 0:
            raise InvalidInput(
                f"{kind} key part {part[:40]!r} has control character U+{ord(part[bad]):04X} "
                f"at position {bad}; keys must be printable text",
                field="key",
            )
    return parts
