"""Messages for actors this runtime does not hold, handed to its host.

A runtime that serves part of a cluster (an ``Ownership``) holds only some
virtual shards. A client's ask for a key of another shard is refused with
NotOwner: the client routes it. But a behaviour's ``Tell`` or ``Forward``, and a
``tell`` the runtime makes itself (automatic extraction), have no client to route
them: when the runtime has a host that can reach the owner (``Runtime.elsewhere``),
the kernel hands each of them over as a ``HandOver`` instead of refusing it.

The kernel performs effects after a step's journal line is written, before it is
durable (as local Tells and Forwards): a hand-over can reach its receiver even
though the step that sent it is lost in a crash before its fsync. The host
delivers at least once, retrying with one request id (``origin`` and
``position`` name it: the same for every handling of the same request), so a
receiver that deduplicates request ids applies it once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mnemex.effects import Key

__all__ = ["Caller", "Elsewhere", "HandOver"]


class Caller(Protocol):
    """The caller a Forward answers: ``resolve`` with the reply (or the error to
    raise) once; ``done`` is True once it was answered or gave up (timed out)."""

    done: bool

    def resolve(self, value: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class HandOver:
    """A message for actor ``(kind, key)``, whose virtual shard another runtime holds.

    ``origin`` is the command whose step carried it as its effect number
    ``position`` (None for a tell the runtime made itself); ``caller`` is who a
    Forward answers (None for a Tell, or a Forward of a told command)."""

    kind: str
    key: Key
    command: Any
    origin: Any = None
    position: int = 0
    caller: Caller | None = None


Elsewhere = Callable[[HandOver], None]
"""Takes a HandOver and delivers it in the background (it must not block)."""
