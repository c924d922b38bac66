"""A storage backend for tests whose journals live in memory and whose fsync the
test can hold (``gate``, or ``hold()``) or fail (``fail``): stores that are not a
MemoryStore to the kernel (their type differs), so replies wait for a group commit
that calls ``sync``, as on disk. Used by the blocking bridge's tests, the inline
reads' and the HTTP server bridge's; with ``count_activations``, which tells a
reply made in the asking thread or task from one made by the actor's task."""

from __future__ import annotations

import threading
from typing import Any

from mnemex.errors import StorageError
from mnemex.kernel import Runtime
from mnemex.persistence import MemoryStore
from mnemex.testing import counter_kind


class GatedStore(MemoryStore):
    """A journal in memory whose fsync waits for the storage's gate (when set) and
    fails while the storage says so."""

    def __init__(self, storage: GatedStorage, kind: str, key: tuple[str, ...], keep: int) -> None:
        super().__init__(kind, key, keep=keep)
        self.storage = storage

    def sync(self) -> None:
        storage = self.storage
        storage.entered.set()
        gate = storage.gate
        if gate is not None:
            assert gate.wait(10), "the test never opened the fsync gate"
        if storage.fail:
            raise StorageError("could not fsync the journal: Input/output error (EIO)")
        storage.syncs += 1

    def commands(self) -> list[Any]:
        """The counter commands of the journal as it is now."""
        kind = counter_kind()
        return [kind.decode(entry.payload) for entry in self.recover().journal]


class GatedStorage:
    def __init__(self) -> None:
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        """Set by every fsync as it starts."""
        self.fail = False
        self.syncs = 0
        """fsyncs that succeeded."""
        self.stores: dict[tuple[str, tuple[str, ...]], GatedStore] = {}

    def store(self, kind: str, key: tuple[str, ...], keep: int = 2) -> GatedStore:
        if (kind, key) not in self.stores:
            self.stores[(kind, key)] = GatedStore(self, kind, key, keep)
        return self.stores[(kind, key)]

    def hold(self) -> threading.Event:
        """Hold every fsync from now on until the returned gate is set."""
        self.entered.clear()
        self.gate = gate = threading.Event()
        return gate

    def syncfs(self) -> bool:
        return False

    def close(self) -> None:
        pass


def count_activations(runtime: Runtime) -> list[int]:
    """How many times the kernel starts an actor's task from now on (one count in a
    list, read as the test goes)."""
    started = [0]
    activate = runtime._activate

    def counted(cell: Any) -> None:
        started[0] += 1
        activate(cell)

    runtime._activate = counted  # type: ignore[method-assign]
    return started
