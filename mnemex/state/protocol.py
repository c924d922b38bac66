"""The commands a ``state`` actor accepts and its replies. Its key is ``(app_name,)``
for an app's state or ``(app_name, user_id)`` for one user's state in that app."""

from __future__ import annotations

from typing import Any

import msgspec

from mnemex._protocol import Command, Reply
from mnemex.conversations.protocol import decode_state

__all__ = ["ClearState", "GetState", "StateCommand", "StateValues", "StateWrite", "UpdateState"]


class StateCommand(Command, frozen=True, kw_only=True):
    """Base of the state actor's commands; ``timestamp`` is seconds since the epoch,
    read by the caller."""


class UpdateState(StateCommand, frozen=True, tag="state.update"):
    """Set keys (``set``: key to JSON value; a null is stored) and remove others
    (``remove``), all or nothing."""

    set: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    remove: list[str] = msgspec.field(default_factory=list)
    timestamp: float = 0.0


class ClearState(StateCommand, frozen=True, tag="state.clear"):
    """Remove every key."""

    timestamp: float = 0.0


class GetState(StateCommand, frozen=True, tag="state.get"):
    """Read: the values of ``keys`` (those that exist), or of every key when None."""

    keys: list[str] | None = None


class StateValues(Reply, frozen=True, kw_only=True, tag="state.values"):
    """Values by key (each value's JSON, verbatim), and when the state last changed
    (0 for never)."""

    values: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    updated_at: float = 0.0

    def decoded(self) -> dict[str, Any]:
        """The values as Python values."""
        return decode_state(self.values)


StateWrite = UpdateState | ClearState
StateCommandType = UpdateState | ClearState | GetState
