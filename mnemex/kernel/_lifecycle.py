"""An actor cell's lifecycle: its states and the one table of allowed moves.

::

    LOADING ──> RUNNING ──> STOPPING ──> STOPPED
       │  │        │
       │  └────────┼──────> STOPPING
       └──> CRASHED <┘
              │
              └──> QUARANTINED

* LOADING: spawned; its behaviour is being read from its store (or made fresh).
* RUNNING: serving its mailbox (a task drains it while messages wait).
* STOPPING: unregistered (a new message spawns a successor); its mailbox is failed,
  its writes made durable and its final snapshot written.
* STOPPED: its store is closed; a successor waiting on it may load.
* CRASHED: it could not be loaded (or reloaded after a handler crash); asks fail
  with ActorCrashed until ``config.kernel.restore_quarantine`` passes.
* QUARANTINED: crashed, and its store closed.

A move the table does not allow is a kernel bug: ``Lifecycle.move`` raises.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["CellState", "IllegalMove", "Lifecycle"]


class CellState(enum.Enum):
    # members are singletons: hashing by identity (not Enum's hash of the name, in
    # Python) keeps the table lookups of every move and state test cheap
    __hash__ = object.__hash__

    LOADING = "loading"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CRASHED = "crashed"
    QUARANTINED = "quarantined"


_MOVES: Final[dict[CellState, frozenset[CellState]]] = {
    CellState.LOADING: frozenset({CellState.RUNNING, CellState.CRASHED, CellState.STOPPING}),
    CellState.RUNNING: frozenset({CellState.STOPPING, CellState.CRASHED}),
    CellState.STOPPING: frozenset({CellState.STOPPED}),
    CellState.CRASHED: frozenset({CellState.QUARANTINED}),
    CellState.STOPPED: frozenset(),
    CellState.QUARANTINED: frozenset(),
}

# the states in which a cell answers ActorCrashed at once
DOWN: Final = frozenset({CellState.CRASHED, CellState.QUARANTINED})
# the states in which the cell's store is closed
FINAL: Final = frozenset({CellState.STOPPED, CellState.QUARANTINED})


class IllegalMove(RuntimeError):
    """A cell was moved between two states the table does not connect (a kernel bug)."""


class Lifecycle:
    """The state of one cell, changed only through ``move``. The kernel's cell is a
    Lifecycle (a subclass), not the owner of one: one object fewer per actor for the
    garbage collector to track (with it, spawning cost a fifth more)."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = CellState.LOADING

    @property
    def name(self) -> str:
        return "a cell"

    def move(self, to: CellState) -> None:
        if to not in _MOVES[self.state]:
            raise IllegalMove(f"actor {self.name}: no move from {self.state.value} to {to.value}")
        self.state = to

    @staticmethod
    def allowed(start: CellState) -> frozenset[CellState]:
        """Where a cell in ``start`` may move."""
        return _MOVES[start]
