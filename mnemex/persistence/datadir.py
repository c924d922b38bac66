"""The data directory: checked and locked once, at start-up.

Opening a DataDir creates the folder, proves it is writable (a probe file is
written, fsynced and removed, so a read-only or full disk fails here and not
on the first command) and takes an exclusive ``flock`` on ``data_dir/LOCK``,
held until ``close()``: a second DataDir on the same folder, in this process
or another, raises DataDirLocked naming the holder's pid. Its stores share one
bounded set of open journals (``OpenFiles``), so any number of actors may write
without the process running out of file descriptors.

Shared by the processes of a cluster (``ownership`` given), each takes the
lock shared instead, and serves only the virtual shards it holds a lease on:
every write of a store is fenced by its shard's lease (see leases.py). A
runtime that takes the directory exclusively cannot start while any of them
runs, nor they while it runs.

A data directory written before virtual shards (actor folders straight under
``<kind>s/``) is moved to the current layout when it is opened: each actor
folder is renamed, atomically, into its virtual shard's folder, so a crash part
way leaves every actor whole in one place or the other and the next open moves
the rest. A folder whose key cannot be known from its name or manifest is left
where it is and moved the first time its actor is opened.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import orjson

from mnemex.errors import DataDirLocked, InvalidInput, StorageError
from mnemex.persistence._files import describe_os_error, fsync_dir, libc_function, log, probe_writable
from mnemex.persistence.layout import KEY_MANIFEST, actor_dir, check_kind, decode_key, legacy_actor_dir
from mnemex.persistence.leases import FileLeases, Ownership
from mnemex.persistence.openfiles import OpenFiles, open_files_limit
from mnemex.persistence.shards import iter_shard_dirs, vshard_of
from mnemex.persistence.store import FileStore

__all__ = ["LOCK_FILE", "ActorLocation", "DataDir", "read_manifest"]

LOCK_FILE = "LOCK"
"""File in the data directory that is flocked while a runtime uses it."""

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class ActorLocation:
    """One actor folder found in a data directory."""

    kind: str
    key: tuple[str, ...]
    path: Path


def read_manifest(folder: Path) -> tuple[str, tuple[str, ...]] | None:
    """``(kind, key)`` from ``folder/key.json``, or None if it is missing or unreadable."""
    try:
        raw = orjson.loads((folder / KEY_MANIFEST).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(raw, dict):
        return None
    kind, key = raw.get("kind"), raw.get("key")
    if not isinstance(kind, str) or not isinstance(key, list) or not key:
        return None
    if not all(isinstance(part, str) for part in key):
        return None
    return kind, tuple(key)


class DataDir:
    """An opened, writable, exclusively locked data directory.

    ``DataDir(path)`` raises StorageError if the folder cannot be created or
    written, DataDirLocked if another DataDir (any process) holds it, InvalidInput
    if ``max_open_files`` does not fit the process's open-file limit (None: half
    of it, see ``open_files_limit``).
    """

    def __init__(self, path: str | Path, *, max_open_files: int | None = None,
                 ownership: Ownership | None = None, lease_wait: float = 30.0) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None
        self.ownership = ownership
        """The virtual shards this process may write (None: all of them, alone)."""
        self.leases: FileLeases | None = None
        """The leases of the virtual shards, when shared (None when exclusive)."""
        self.open_files = OpenFiles(open_files_limit(max_open_files))
        """The journals this data directory's stores have open, at most ``max_open_files``."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except FileExistsError as exc:
            raise StorageError(f"data directory {self.path} exists but is not a directory "
                               f"(config.storage.data_dir)") from exc
        except OSError as exc:
            raise StorageError(f"cannot create data directory {self.path}: {describe_os_error(exc)} "
                               f"(config.storage.data_dir)") from exc
        self._probe()
        self._lock_fd = self._lock(shared=ownership is not None)
        try:
            if ownership is None:
                self._legacy_left = move_legacy_actors(self.path)
            else:
                self._legacy_left = False
                self._refuse_legacy_layout()
                self.leases = FileLeases(self.path, wait=lease_wait)
        except BaseException:
            self.close()
            raise

    def _refuse_legacy_layout(self) -> None:
        old = next(_actors_under(self.path, quiet=True), None)
        if old is not None or _kind_dirs(self.path):
            raise StorageError(f"data directory {self.path} holds actors of the layout before virtual shards "
                               f"({old.path if old else 'a <kind>s/ folder'}); open it once with a runtime "
                               f"of its own (mnemex serve, or open_runtime) to move them, then share it")

    def _probe(self) -> None:
        try:
            probe_writable(self.path)
        except OSError as exc:
            raise StorageError(f"data directory {self.path} is not writable: {describe_os_error(exc)} "
                               f"(config.storage.data_dir; mnemex needs to write its journal there)") from exc

    def _lock(self, *, shared: bool) -> int:
        path = self.path / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open the lock file {path}: {describe_os_error(exc)}") from exc
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            if shared:
                who = "a runtime that owns it alone"
            elif _held_shared(path):
                who = "the shard processes of a cluster"
            else:
                holder = _read_pid(fd)
                who = f"process {holder}" if holder else "another process"
            os.close(fd)
            raise DataDirLocked(f"data directory {self.path} is in use by {who} (it holds {path}); "
                                f"stop that runtime first or use another config.storage.data_dir") from exc
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot lock {path}: {describe_os_error(exc)}") from exc
        if shared:
            return fd  # many processes hold it: none writes its pid
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # the lock is what matters; the pid is a courtesy
            log.warning("could not write the pid into %s: %s", path, describe_os_error(exc))
        return fd

    def syncfs(self) -> bool:
        """Make every write to the filesystem holding the data directory durable, in
        one call (Linux ``syncfs(2)``): far cheaper than an fsync per journal when
        many actors commit at once. Returns False where syncfs is not available
        (the caller then fsyncs file by file); raises StorageError if it fails."""
        if self._lock_fd is None:
            raise StorageError(f"data directory {self.path} is closed")
        syncfs = _libc_syncfs()
        if syncfs is None:
            return False
        if syncfs(self._lock_fd) != 0:
            errno_ = ctypes.get_errno()
            raise StorageError(f"syncfs on data directory {self.path} failed: "
                               f"{describe_os_error(OSError(errno_, os.strerror(errno_)))}; writes since "
                               f"the last commit may not be durable")
        return True

    @property
    def is_open(self) -> bool:
        """True until close()."""
        return self._lock_fd is not None

    def store(self, kind: str, key: tuple[str, ...], keep: int = 2) -> FileStore:
        """The store of actor ``kind``/``key`` (nothing is created until it writes)."""
        if self._lock_fd is None:
            raise StorageError(f"data directory {self.path} is closed")
        if self._legacy_left:
            new = actor_dir(self.path, kind, key)
            _sync_folders(_move_actor(legacy_actor_dir(self.path, kind, key), new))
        fence = None
        if self.ownership is not None and self.leases is not None:
            fence = _Fence(self.leases, self.ownership, vshard_of(kind, key))
        return FileStore(self.path, kind, key, keep=keep, files=self.open_files, fence=fence)

    def actors(self) -> Iterator[ActorLocation]:
        """Every actor folder (``<kind>s/<name>/``), its key from ``key.json`` or its name."""
        return find_actors(self.path)

    def close(self) -> None:
        """Close the journals still open and release the lock (idempotent)."""
        self.open_files.close()
        if self.leases is not None:
            self.leases.close()
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock

    def __enter__(self) -> DataDir:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DataDir({str(self.path)!r}{'' if self.is_open else ', closed'})"


class _Fence:
    """What a store holds around every change to its folder when the virtual shard
    is leased: ``leases.fence`` at the epoch ``ownership`` holds it with (one small
    object per live actor's store)."""

    __slots__ = ("_leases", "_ownership", "_vshard")

    def __init__(self, leases: FileLeases, ownership: Ownership, vshard: int) -> None:
        self._leases, self._ownership, self._vshard = leases, ownership, vshard

    def __call__(self) -> AbstractContextManager[None]:
        return self._leases.fence(self._vshard, self._epoch)

    def _epoch(self) -> int | None:
        return self._ownership.epoch(self._vshard)


def _held_shared(path: Path) -> bool:
    """True if ``path`` is flocked shared (by processes sharing the directory)."""
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return False
    else:
        return True
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def find_actors(data_dir: str | Path) -> Iterator[ActorLocation]:
    """Every actor folder under ``data_dir`` (``shards/<vvv>/<kind>s/<name>/``, and
    ``<kind>s/<name>/`` of the layout before virtual shards), its key from
    ``key.json`` or its name. Reads only; takes no lock (inspection tools)."""
    path = Path(data_dir)
    if not path.is_dir():
        raise StorageError(f"cannot list data directory {path}: it is not a directory")
    for _vshard, folder in iter_shard_dirs(path):
        yield from _actors_under(folder)
    yield from _actors_under(path)


def move_legacy_actors(data_dir: Path) -> bool:
    """Move every actor folder of the layout before virtual shards into its virtual
    shard's folder (see the module docstring). True if some are left (their key is
    unknown until their actor is opened)."""
    left = False
    moved = 0
    touched: set[Path] = set()
    for location in list(_actors_under(data_dir, quiet=True)):
        touched |= _move_actor(location.path, actor_dir(data_dir, location.kind, location.key))
        moved += 1
    _sync_folders(touched)  # each folder once, not once per actor moved through it
    for kind_dir in _kind_dirs(data_dir):
        try:
            kind_dir.rmdir()  # only when empty: what is left has an unknown key
        except OSError:
            left = True
    if moved:
        log.info("%s: moved %d actor folders into their virtual shards' folders (shards/<vvv>/)",
                 data_dir, moved)
    return left


def _move_actor(old: Path, new: Path) -> set[Path]:
    """Rename ``old`` to ``new`` (one atomic rename) if ``old`` exists. Returns the
    folders whose entries changed: the move is durable once they are synced."""
    if not old.is_dir():
        return set()
    if new.exists():
        raise StorageError(f"actor folder {old} (layout before virtual shards) and {new} both exist; "
                           f"keep the one with the newer journal and remove the other, then start again")
    try:
        new.parent.mkdir(parents=True, exist_ok=True)
        os.rename(old, new)
    except OSError as exc:
        raise StorageError(f"cannot move actor folder {old} to {new}: {describe_os_error(exc)}") from exc
    return {old.parent, new.parent, new.parent.parent, new.parent.parent.parent}


def _sync_folders(folders: Iterable[Path]) -> None:
    """fsync each of ``folders`` (the entries a move changed)."""
    for folder in sorted(folders):
        try:
            fsync_dir(folder)
        except OSError as exc:
            raise StorageError(f"cannot make the move of actor folders into {folder} durable: "
                               f"{describe_os_error(exc)}") from exc


def _kind_dirs(root: Path) -> list[Path]:
    """The ``<kind>s`` folders directly under ``root``."""
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        raise StorageError(f"cannot list {root}: {describe_os_error(exc)}") from exc
    out = []
    for entry in entries:
        name = entry.name
        if not name.endswith("s") or not entry.is_dir():
            continue
        try:
            check_kind(name[:-1])
        except InvalidInput:
            continue
        out.append(entry)
    return out


def _actors_under(root: Path, *, quiet: bool = False) -> Iterator[ActorLocation]:
    """The actor folders of every ``<kind>s`` folder directly under ``root``."""
    for kind_dir in _kind_dirs(root):
        kind = kind_dir.name[:-1]
        for folder in sorted(kind_dir.iterdir()):
            if not folder.is_dir():
                continue
            manifest = read_manifest(folder)
            if manifest is not None:
                yield ActorLocation(manifest[0], manifest[1], folder)
                continue
            key = decode_key(folder.name)
            if key is None:
                if quiet:
                    continue
                log.warning("%s: actor folder without a readable %s and with a shortened name; "
                            "its key is unknown, skipping it", folder, KEY_MANIFEST)
                continue
            yield ActorLocation(kind, key, folder)


def _libc_syncfs() -> Callable[[int], int] | None:
    """libc's syncfs, or None off Linux (or where the C library lacks it)."""
    return libc_function("syncfs", (ctypes.c_int,))
