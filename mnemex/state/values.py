"""The one definition of a key-value state change: what a key and a value may be,
and how a change applies. Shared by the ``state`` actors and the agent actor's
per-session state.

Values are JSON, kept verbatim as ``msgspec.Raw`` (the bytes a caller encoded), so a
read returns exactly what was written and a snapshot copies bytes. A JSON null is a
value like any other (stored, not a removal); removing a key is asked for by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from mnemex._checks import check_id
from mnemex.errors import InvalidInput, TooLarge

__all__ = ["MAX_KEY_BYTES", "apply_change", "check_change", "encode_values"]

MAX_KEY_BYTES: Final = 1024

_encode = msgspec.json.Encoder().encode


def check_change(set_: Any, remove: Any, max_value_bytes: int, what: str = "state") -> tuple[
        dict[str, msgspec.Raw], list[str]]:
    """``set_`` (key -> JSON value) and ``remove`` (keys) checked: keys non-empty
    strings of at most MAX_KEY_BYTES without control characters, each value at most
    ``max_value_bytes`` of JSON, a key not both set and removed. InvalidInput or
    TooLarge naming the key otherwise."""
    if set_ is None:
        set_ = {}
    if not isinstance(set_, dict):
        raise InvalidInput(f"{what} must be an object of keys to JSON values, got {type(set_).__name__}",
                           field=what)
    if remove is None:
        remove = []
    if isinstance(remove, str | bytes) or not isinstance(remove, list | tuple):
        raise InvalidInput(f"the keys to remove from {what} must be a list of strings, got {remove!r}",
                           field=f"{what}.remove")
    for key, value in set_.items():
        check_id(key, f"{what} key", MAX_KEY_BYTES)
        if not isinstance(value, msgspec.Raw):
            raise InvalidInput(f"{what}[{key!r}] must be raw JSON (msgspec.Raw), got {type(value).__name__}",
                               field=f"{what}.{key}")
        size = len(value)
        if size == 0:
            raise InvalidInput(f"{what}[{key!r}] is empty; it must be a JSON value", field=f"{what}.{key}")
        if size > max_value_bytes:
            raise TooLarge(f"{what}[{key!r}] is {size:,} bytes of JSON; the limit is {max_value_bytes:,} "
                           f"(config.conversations.max_message_bytes)", field=f"{what}.{key}")
    for key in remove:
        check_id(key, f"{what} key", MAX_KEY_BYTES)
        if key in set_:
            raise InvalidInput(f"{what} key {key!r} is both set and removed", field=f"{what}.{key}")
    return set_, list(remove)


def apply_change(state: dict[str, msgspec.Raw], set_: Mapping[str, msgspec.Raw],
                 remove: Iterable[str]) -> bool:
    """Apply a checked change to ``state`` in place; whether anything changed."""
    changed = False
    for key in remove:
        if state.pop(key, None) is not None:
            changed = True
    for key, value in set_.items():
        old = state.get(key)
        if old is None or bytes(old) != bytes(value):
            state[key] = value
            changed = True
    return changed


def encode_values(values: Mapping[str, Any], what: str = "state") -> dict[str, msgspec.Raw]:
    """Python values as raw JSON, one per key (what a ref sends to an actor).
    TypeError, as ``json.dumps`` gives, for a value JSON cannot hold."""
    if not isinstance(values, Mapping):
        raise InvalidInput(f"{what} must be a mapping of keys to JSON values, got {type(values).__name__}",
                           field=what)
    out: dict[str, msgspec.Raw] = {}
    for key, value in values.items():
        if not isinstance(key, str):
            raise InvalidInput(f"{what} keys must be strings, got {key!r}", field=what)
        out[key] = msgspec.Raw(_encode(value))
    return out
