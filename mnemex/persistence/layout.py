"""Where an actor lives on disk: one safe folder name per key.

Any key (a user id such as ``../x``, one with NUL bytes, one 10 KB long) maps
to exactly one folder name made of ``[a-z0-9._~-]``, at most 120 characters,
never ``.`` or ``..``, and two distinct keys never share a name.

Each key component keeps ``[a-z0-9-]`` as is; every other character (upper
case included, so names never differ only by case) becomes ``_`` and two hex
digits per UTF-8 byte; components are joined by ``.``. A name that would be
longer than 120 characters is shortened to its first 80 characters, ``~`` and
32 hex digits of its SHA-256; such a folder can only be mapped back to its key
through its ``key.json`` manifest, which every actor folder carries.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from mnemex.errors import InvalidInput

__all__ = [
    "KEY_MANIFEST",
    "MAX_NAME_CHARS",
    "actor_dir",
    "check_kind",
    "decode_key",
    "encode_key",
    "kind_dir",
]

MAX_NAME_CHARS = 120
"""Longest folder name kept readable; longer ones are shortened and hashed."""
_HASHED_PREFIX_CHARS = 80
_HASH_HEX_CHARS = 32
KEY_MANIFEST = "key.json"
"""File in every actor folder holding ``{"kind": ..., "key": [...]}``."""

_UNSAFE = re.compile(r"[^a-z0-9-]+")
_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")
_CANONICAL_NAME = re.compile(r"(?:[a-z0-9-]|_[0-9a-f]{2})+(?:\.(?:[a-z0-9-]|_[0-9a-f]{2})+)*")
_ESCAPE = re.compile(r"((?:_[0-9a-f]{2})+)")


def _escape(match: re.Match[str]) -> str:
    return "".join(f"_{byte:02x}" for byte in match.group().encode("utf-8"))


def _encode_component(component: str, key: tuple[str, ...]) -> str:
    if not isinstance(component, str):
        raise InvalidInput(f"key {key!r} has a component of type {type(component).__name__}; "
                           f"every component must be a str", field="key")
    if not component:
        raise InvalidInput(f"key {key!r} has an empty component; every component needs at least "
                           f"one character", field="key")
    try:
        return _UNSAFE.sub(_escape, component)
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"key {key!r} is not valid Unicode text (it holds a lone surrogate); "
                           f"keys must encode to UTF-8", field="key") from exc


def check_key(key: tuple[str, ...]) -> tuple[str, ...]:
    """``key`` if ``encode_key`` would take it, without building the name (for stores
    that never touch a disk). Raises the same InvalidInput as ``encode_key``."""
    if not isinstance(key, tuple) or not key:
        raise InvalidInput(f"actor key {key!r} must be a non-empty tuple of strings", field="key")
    for component in key:
        if not isinstance(component, str) or not component:
            _encode_component(component, key)  # raises the same error encode_key would
        try:
            component.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInput(f"key {key!r} is not valid Unicode text (it holds a lone surrogate); "
                               f"keys must encode to UTF-8", field="key") from exc
    return key


def encode_key(key: tuple[str, ...]) -> str:
    """The folder name for ``key``: ``[a-z0-9._~-]``, 1 to 120 characters.

    Raises InvalidInput for an empty key, an empty component or text that is
    not valid Unicode (lone surrogates).
    """
    if not isinstance(key, tuple) or not key:
        raise InvalidInput(f"actor key {key!r} must be a non-empty tuple of strings", field="key")
    encoded = ".".join(_encode_component(component, key) for component in key)
    if len(encoded) <= MAX_NAME_CHARS:
        return encoded
    digest = hashlib.sha256(encoded.encode("ascii")).hexdigest()[:_HASH_HEX_CHARS]
    return f"{encoded[:_HASHED_PREFIX_CHARS]}~{digest}"


def _unescape(match: re.Match[str]) -> str:
    return bytes.fromhex(match.group().replace("_", "")).decode("utf-8")


def decode_key(name: str) -> tuple[str, ...] | None:
    """The key whose folder name is ``name``, or None when ``name`` is a shortened
    (hashed) name or not a name ``encode_key`` produces (read ``key.json`` then)."""
    if len(name) > MAX_NAME_CHARS or not _CANONICAL_NAME.fullmatch(name):
        return None
    try:
        key = tuple(_ESCAPE.sub(_unescape, component) for component in name.split("."))
    except UnicodeDecodeError:
        return None
    # Only the canonical spelling counts: "_61" would decode to "a", whose name is "a".
    return key if encode_key(key) == name else None


def check_kind(kind: str) -> str:
    """``kind`` if it is a valid actor kind name (``[a-z][a-z0-9_]*``, at most 32)."""
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise InvalidInput(f"actor kind {kind!r} must be 1 to 32 characters of [a-z0-9_] starting "
                           f"with a letter", field="kind")
    return kind


def kind_dir(data_dir: Path, kind: str) -> Path:
    """The folder holding every actor of ``kind``: ``data_dir/<kind>s``."""
    return Path(data_dir) / f"{check_kind(kind)}s"


def actor_dir(data_dir: Path, kind: str, key: tuple[str, ...]) -> Path:
    """The folder of one actor: ``data_dir/<kind>s/<encode_key(key)>``."""
    return kind_dir(data_dir, kind) / encode_key(key)
