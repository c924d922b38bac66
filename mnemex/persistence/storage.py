"""Where a runtime keeps its actors: the storage-backend protocol the kernel is
given, and its two implementations here (files in a data directory, or memory).

A backend hands out one ``ActorStore`` per (kind, key) (exists, recover, append,
sync, write_snapshot, close); a shared volume or a database can take the place of
local files by implementing the same two protocols, as the postgres journal does
(postgres.py: journal rows in PostgreSQL, the ``mnemex[postgres]`` extra).
"""

from __future__ import annotations

from typing import Protocol

from mnemex.persistence.datadir import DataDir
from mnemex.persistence.store import ActorStore, MemoryStore

__all__ = ["MemoryStorage", "Storage", "open_storage"]


class Storage(Protocol):
    """A runtime's storage: every actor's store, and the one lock held while open."""

    def store(self, kind: str, key: tuple[str, ...], keep: int = 2) -> ActorStore:
        """The store of one actor (made on first use; the same one each time in memory)."""
        ...

    def syncfs(self) -> bool:
        """Make every journal durable in one call if this backend can (one syncfs, one
        COMMIT); False if it cannot (the kernel then syncs each journal). After True
        the kernel asks each store whether its lines were refused (``synced_by_fs``)."""
        ...

    def close(self) -> None:
        """Release the backend (a data directory's lock). Stores already handed out
        must be closed first."""
        ...


class MemoryStorage:
    """Every actor's store in RAM, encoded and checked as on disk: nothing survives
    the process (tests, caches; ``config.storage.data_dir = None``)."""

    def __init__(self) -> None:
        self._stores: dict[tuple[str, tuple[str, ...]], MemoryStore] = {}

    def store(self, kind: str, key: tuple[str, ...], keep: int = 2) -> MemoryStore:
        store = self._stores.get((kind, key))
        if store is None:
            store = self._stores[(kind, key)] = MemoryStore(kind, key, keep=keep)
        return store

    def syncfs(self) -> bool:
        return False

    def close(self) -> None:
        pass


def open_storage(data_dir: str | None, *, max_open_files: int | None = None) -> Storage:
    """Files under ``data_dir`` (locked until ``close``; at most ``max_open_files``
    journals open at once, see ``open_files_limit``), or memory for None."""
    return DataDir(data_dir, max_open_files=max_open_files) if data_dir is not None else MemoryStorage()
