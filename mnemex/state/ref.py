"""Key-value state on the runtime: the async StateRef that ``rt.state(...)`` hands out.

Values are anything JSON holds (as ``msgspec`` encodes it: dicts, lists, strings,
numbers, booleans, None, datetimes...); they come back decoded. Changes are stamped
here with the wall clock, inside the command, so the actor stays deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from mnemex._host import Host
from mnemex.errors import InvalidInput
from mnemex.kernel import ActorRef
from mnemex.state.kind import STATE_KIND
from mnemex.state.protocol import ClearState, GetState, StateValues, UpdateState
from mnemex.state.values import encode_values

__all__ = ["StateRef"]


def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
    return value


class StateRef:
    """The key-value state of an app (``user_id`` None) or of one user in an app.
    Cheap to make; refs to the same (app_name, user_id) reach the same actor."""

    __slots__ = ("_ref", "app_name", "user_id")

    def __init__(self, kernel: Host, *, app_name: str, user_id: str | None = None,
                 kind: str = STATE_KIND) -> None:
        self.app_name = _check_name(app_name, "app_name")
        self.user_id = None if user_id is None else _check_name(user_id, "user_id")
        key = (self.app_name,) if self.user_id is None else (self.app_name, self.user_id)
        self._ref: ActorRef = kernel.ref(kind, key)

    def __repr__(self) -> str:
        return f"StateRef(app_name={self.app_name!r}, user_id={self.user_id!r})"

    @property
    def ref(self) -> ActorRef:
        """The underlying actor ref (raw commands of ``mnemex.state.protocol``)."""
        return self._ref

    async def get(self, keys: Iterable[str] | None = None) -> dict[str, Any]:
        """The values of ``keys`` that exist (every key when None), decoded."""
        reply: StateValues = await self._ref.ask(GetState(keys=None if keys is None else list(keys)))
        return reply.decoded()

    async def values(self) -> StateValues:
        """Every value as raw JSON, with the time of the latest change."""
        reply: StateValues = await self._ref.ask(GetState())
        return reply

    async def update(self, values: Mapping[str, Any] | None = None, *, remove: Iterable[str] = ()) -> None:
        """Set ``values`` (a None value is stored, not a removal) and remove the keys
        ``remove``, all or nothing; journaled before it returns."""
        encoded = encode_values(values or {})
        removed = [remove] if isinstance(remove, str) else list(remove)
        if encoded or removed:
            await self._ref.ask(UpdateState(set=encoded, remove=removed, timestamp=time.time()))

    async def clear(self) -> None:
        """Remove every key."""
        await self._ref.ask(ClearState(timestamp=time.time()))
