"""Where an actor lives on disk: one safe folder name per key, under the folder
of its virtual shard (``data_dir/shards/<vvv>/<kind>s/<name>``, see shards.py).

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
from typing import Any

from mnemex.errors import InvalidInput, TooLarge
from mnemex.persistence.shards import shard_dir, vshard_of

__all__ = [
    "KEY_MANIFEST",
    "MAX_NAME_CHARS",
    "actor_dir",
    "check_key",
    "check_kind",
    "decode_key",
    "encode_key",
    "kind_dir",
    "legacy_actor_dir",
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_key(key: Any, max_bytes: int | None = None, *, kind: str = "actor",
              printable: bool = True) -> tuple[str, ...]:
    """``key`` as a tuple of strings, or InvalidInput saying what is wrong: the one
    rule for actor keys, applied where a key enters (the kernel, a store).

    A key is a str or a non-empty tuple of str; each part is non-empty, valid
    Unicode, free of control characters (NUL, newline...) unless ``printable`` is
    False, and, when ``max_bytes`` is given, at most that many UTF-8 bytes (TooLarge
    past it). The kernel takes keys by the whole rule; the layout can name any key
    of the rest (``printable=False``). Path-like text such as ``../x`` is a valid
    key: ``encode_key`` turns it into one safe name."""
    parts: tuple[Any, ...] = (key,) if isinstance(key, str) else key
    if type(parts) is tuple and parts and _plain(parts, max_bytes):
        return parts  # the common case, tested in C: printable ASCII, a byte a character
    if not isinstance(parts, tuple) or not parts:
        raise InvalidInput(f"{kind} key must be a non-empty str or tuple of str, got {type(key).__name__}",
                           field="key")
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
        if max_bytes is not None and size > max_bytes:
            raise TooLarge(f"{kind} key part is {size:,} bytes; the limit is {max_bytes:,} "
                           f"(config.kernel.max_key_bytes)", field="key")
        control = _CONTROL.search(part) if printable else None
        if control is not None:
            raise InvalidInput(f"{kind} key part {part[:40]!r} has control character "
                               f"U+{ord(control.group()):04X} at position {control.start()}; keys must be "
                               f"printable text", field="key")
    return parts


def _plain(parts: tuple[Any, ...], max_bytes: int | None) -> bool:
    """Every part is printable ASCII text within ``max_bytes`` (the common case)."""
    for part in parts:
        if type(part) is not str or not part or not part.isascii() or not part.isprintable() or (
                max_bytes is not None and len(part) > max_bytes):
            return False
    return True


def encode_key(key: tuple[str, ...]) -> str:
    """The folder name for ``key``: ``[a-z0-9._~-]``, 1 to 120 characters. Any key
    ``check_key(key, printable=False)`` takes has one; others raise its InvalidInput."""
    parts = check_key(key, printable=False)
    encoded = ".".join(_UNSAFE.sub(_escape, component) for component in parts)
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
    if kind == "shard":  # its folder would be "shards", where virtual shards live
        raise InvalidInput("actor kind 'shard' is reserved (its folder would be the virtual shards' "
                           "folder, shards/); choose another name", field="kind")
    return kind


def kind_dir(root: Path, kind: str) -> Path:
    """The folder holding every actor of ``kind`` under ``root`` (a virtual shard's
    folder, or a data directory of the layout before virtual shards): ``root/<kind>s``."""
    return Path(root) / f"{check_kind(kind)}s"


def actor_dir(data_dir: Path, kind: str, key: tuple[str, ...]) -> Path:
    """The folder of one actor: ``data_dir/shards/<vvv>/<kind>s/<encode_key(key)>``."""
    return kind_dir(shard_dir(data_dir, vshard_of(kind, key)), kind) / encode_key(key)


def legacy_actor_dir(data_dir: Path, kind: str, key: tuple[str, ...]) -> Path:
    """Where the actor lived before virtual shards: ``data_dir/<kind>s/<name>``
    (a data directory of that layout is moved on open, see DataDir)."""
    return kind_dir(data_dir, kind) / encode_key(key)
