"""Config: every knob mnemex has, with defaults that work with no file.

A Config is a frozen msgspec Struct. It is checked when it is built (in code,
from TOML or from JSON), so a bad value fails at start-up with a message that
names the field, never on the first write an hour later.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import msgspec

from mnemex.errors import InvalidInput

__all__ = ["Config", "load_config"]

FsyncPolicy = Literal["always", "batch", "never"]
OverloadPolicy = Literal["wait", "fail"]


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Runtime settings. Times are seconds, sizes are bytes unless named otherwise."""

    data_dir: str | None = "mnemex-data"
    """Where actors persist. ``None`` keeps everything in memory (tests, caches):
    nothing survives the process."""

    # -- mailboxes and asks ------------------------------------------------------
    mailbox_size: int = 1024
    """Messages an actor's mailbox holds before senders wait (or fail, below)."""
    overload: OverloadPolicy = "wait"
    """``"wait"``: a full mailbox makes senders wait (backpressure).
    ``"fail"``: a full mailbox raises Busy at once."""
    ask_timeout: float = 30.0
    """Default seconds an ask waits for its answer before raising Timeout."""
    max_key_bytes: int = 1024
    """Longest actor key (agent name, user id, app name) in UTF-8 bytes."""

    # -- lifecycle ---------------------------------------------------------------
    idle_timeout: float = 300.0
    """Seconds without a message after which a live actor is snapshotted and unloaded."""
    max_live_actors: int = 100_000
    """Live actors kept at once; past it the least recently used is passivated."""
    restore_attempts: int = 3
    """Tries at loading an actor before its asks fail with ActorCrashed."""
    restore_backoff: float = 0.05
    """Seconds before the first retry of a failed load; doubles each try."""
    restore_quarantine: float = 30.0
    """Seconds an actor that failed every load attempt answers ActorCrashed
    at once before another load is tried (so a broken actor never loops hot)."""

    # -- persistence -------------------------------------------------------------
    fsync: FsyncPolicy = "batch"
    """``always``: fsync every journal line before answering. ``batch`` (group
    commit): one fsync covers every line written within ``fsync_window``; callers
    are answered after it. ``never``: the OS flushes when it likes; a power loss
    loses the tail the OS had buffered (a process crash loses nothing)."""
    fsync_window: float = 0.002
    """Seconds a group commit waits to gather more lines before its fsync."""
    snapshot_every: int = 10_000
    """Journaled commands after which an actor is snapshotted."""
    snapshot_interval: float = 600.0
    """Seconds after which an actor with unsnapshotted commands is snapshotted."""
    snapshots_kept: int = 2
    """Snapshots kept per actor (the newest ones)."""

    # -- content limits ----------------------------------------------------------
    max_content_bytes: int = 10_240
    """Longest memory content in UTF-8 bytes."""
    max_message_bytes: int = 1_048_576
    """Longest chat message (encoded) in bytes."""

    def __post_init__(self) -> None:
        _check_positive_int(self, "mailbox_size", "max_key_bytes", "max_live_actors",
                            "restore_attempts", "snapshot_every", "snapshots_kept",
                            "max_content_bytes", "max_message_bytes")
        _check_positive_float(self, "ask_timeout", "idle_timeout", "snapshot_interval")
        _check_non_negative_float(self, "restore_backoff", "restore_quarantine", "fsync_window")
        if self.data_dir is not None and not self.data_dir.strip():
            raise _invalid("data_dir", "config.data_dir is empty; give a path or None for in-memory")


def _invalid(name: str, message: str) -> InvalidInput:
    return InvalidInput(message, field=name)


def _check_positive_int(cfg: Config, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _invalid(name, f"config.{name} is {value!r}; it must be an integer >= 1")


def _check_positive_float(cfg: Config, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0
        ):
            raise _invalid(name, f"config.{name} is {value!r}; it must be a number of seconds > 0")


def _check_non_negative_float(cfg: Config, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value >= 0
        ):
            raise _invalid(name, f"config.{name} is {value!r}; it must be a number of seconds >= 0")


def load_config(data: bytes | str | dict[str, Any], *, fmt: Literal["toml", "json"] = "toml") -> Config:
    """Build a Config from TOML or JSON text, or from a dict; unknown keys and wrong
    types raise InvalidInput naming the key."""
    try:
        if isinstance(data, dict):
            return msgspec.convert(data, Config)
        if fmt == "toml":
            return msgspec.toml.decode(data, type=Config)
        return msgspec.json.decode(data, type=Config)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"config: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"config is not valid {fmt}: {exc}") from exc
