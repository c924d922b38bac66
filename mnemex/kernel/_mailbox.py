"""An actor's mailbox: a bounded FIFO that senders may wait on.

Not a trio memory channel: an idle actor has no task parked on a receive (its
task starts with its next message), so the receive side is a plain
``get_nowait`` and only senders ever wait. That makes a mailbox a deque held
while it has items and a parking lot made on first need — cheap enough that a
hundred thousand idle actors cost little memory and spawn fast (an empty deque
is 760 bytes: an idle actor's mailbox holds none).
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import trio

__all__ = ["Mailbox", "MailboxClosed"]

T = TypeVar("T")


class MailboxClosed(Exception):
    """The mailbox was closed (its actor stopped); the message was not queued."""


class Mailbox(Generic[T]):
    """Bounded FIFO. ``put_nowait`` raises trio.WouldBlock when full; ``put``
    waits for room (senders are woken in the order they started waiting)."""

    __slots__ = ("_waiting", "capacity", "closed", "items")

    def __init__(self, capacity: int) -> None:
        self.items: deque[T] | None = None
        """The queued items; None while there are none."""
        self.capacity = capacity
        self.closed = False
        self._waiting: trio.lowlevel.ParkingLot | None = None

    def __len__(self) -> int:
        items = self.items
        return 0 if items is None else len(items)

    def put_nowait(self, item: T) -> None:
        if self.closed:
            raise MailboxClosed
        items = self.items
        if items is None:
            self.items = items = deque()
        elif len(items) >= self.capacity:
            raise trio.WouldBlock
        items.append(item)

    async def put(self, item: T) -> None:
        """Queue ``item``, waiting while the mailbox is full. Cancellable."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                self.put_nowait(item)
            except trio.WouldBlock:
                if self._waiting is None:
                    self._waiting = trio.lowlevel.ParkingLot()
                await self._waiting.park()
            else:
                return

    def get_nowait(self) -> T:
        """The oldest item; raises trio.WouldBlock when empty."""
        items = self.items
        if items is None:
            raise trio.WouldBlock
        item = items.popleft()
        if not items:
            self.items = None
        if self._waiting is not None and self._waiting:
            self._waiting.unpark()
        return item

    def close(self) -> None:
        """Refuse new items; wake every waiting sender (they get MailboxClosed).
        Items already queued stay for ``get_nowait``."""
        self.closed = True
        if self._waiting is not None:
            self._waiting.unpark_all()
