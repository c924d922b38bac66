"""What the refs (``AgentRef``, ``ScopeRef``) need of whatever runs the actors.

The in-process kernel provides it today; the same refs can run over another host
later (an HTTP client, a cluster) by implementing this small protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mnemex.config import DEFAULT, Config, UseDefault
from mnemex.effects import Key

if TYPE_CHECKING:
    from mnemex.kernel import ActorRef, Subscription

__all__ = ["Host"]


class Host(Protocol):
    """Addresses actors by (kind, key) and carries commands to them."""

    @property
    def config(self) -> Config: ...

    def ref(self, kind: str, key: str | Key) -> ActorRef:
        """A cheap handle on one actor (spawned on first message)."""
        ...

    async def ask(self, kind: str, key: str | Key, command: Any, *,
                  timeout: float | UseDefault | None = DEFAULT) -> Any:
        """Send ``command`` and wait for its reply."""
        ...

    async def tell(self, kind: str, key: str | Key, command: Any) -> None:
        """Send ``command`` without waiting for its reply."""
        ...

    async def subscribe(self, kind: str, key: str | Key, topic: str, command: Any = None, *,
                        buffer: int = 1024, timeout: float | UseDefault | None = DEFAULT) -> Subscription:
        """A live feed of the actor's events on ``topic``."""
        ...

    def live_keys(self, kind: str | None = None) -> list[tuple[str, Key]]:
        """The actors loaded now."""
        ...
