"""Blocking file primitives shared by the journal, snapshots and the data dir:
complete writes, atomic replacement, directory fsync, OSError translation."""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import mmap
import os
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any, Final

from mnemex.errors import StorageError

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

__all__ = ["describe_os_error", "fsync_dir", "let_pages_go_from", "libc_function", "log", "read_file",
           "remove_quietly", "start_writeback", "unnamed_file", "write_all", "write_atomic"]

log = logging.getLogger("mnemex.persistence")

_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


@functools.cache
def libc_function(name: str, argtypes: tuple[type[Any], ...]) -> Callable[..., int] | None:
    """The C library's function ``name`` taking ``argtypes`` and returning an int (the
    process's own symbols: no library search), or None off Linux or where it lacks it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    result: Callable[..., int] = function
    return result


def let_pages_go_from(mapped: mmap.mmap, begin: int, end: int) -> int:
    """Bytes ``[begin, end)`` of ``mapped`` leave the process (``MADV_DONTNEED``, the
    whole pages around them: the caller knows that loses nothing); returns where the
    pages let go begin. Refused (pages locked in memory, or no such advice here): they
    stay."""
    first = begin - begin % mmap.PAGESIZE
    if end > first and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mapped.madvise(mmap.MADV_DONTNEED, first, end - first)
        except (OSError, ValueError) as exc:
            log.debug("madvise(MADV_DONTNEED) refused (%s)", exc)
    return first


def describe_os_error(exc: OSError) -> str:
    """``"No space left on device (ENOSPC)"``: the OS's words and the errno name."""
    text = exc.strerror or str(exc)
    name = errno.errorcode.get(exc.errno or 0)
    return f"{text} ({name})" if name else text


_WRITEV_MAX: Final = 512
"""Chunks ``write_all`` hands the kernel in one call (IOV_MAX is 1024 on Linux): a
snapshot of a closing scope lends its indexes' buffers, a chunk per word."""

_WRITEV_BYTES: Final = 4 << 20
"""Bytes from which ``write_all`` writes what it gathered (chunks are not held long)."""


def write_all(fd: int, chunks: Iterable[bytes | bytearray | memoryview]) -> int:
    """Write every byte of ``chunks`` to ``fd`` (retrying short writes), a few hundred
    chunks to a call; the count written."""
    total = 0
    batch: list[memoryview] = []
    gathered = 0
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        if not view:
            continue
        batch.append(view)
        gathered += len(view)
        if len(batch) >= _WRITEV_MAX or gathered >= _WRITEV_BYTES:
            total += _write_gathered(fd, batch)
            batch, gathered = [], 0
    if batch:
        total += _write_gathered(fd, batch)
    return total


def _write_gathered(fd: int, views: list[memoryview]) -> int:
    """Write ``views`` end to end (one ``writev``, then the rest of a short one)."""
    written = os.writev(fd, views) if len(views) > 1 else os.write(fd, views[0])
    total = written
    for view in views:
        if written >= len(view):
            written -= len(view)
            continue
        rest = view[written:]
        written = 0
        while rest:
            done = os.write(fd, rest)
            total += done
            rest = rest[done:]
    return total


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, chunks: Iterable[bytes | bytearray | memoryview], *,
                 sync_dir: bool = True, durable: bool = True) -> int:
    """Replace ``path`` with ``chunks`` all at once: write ``<path>.tmp``, fsync it,
    rename it over ``path`` and (unless ``sync_dir`` is False, when the caller
    syncs the folder itself) fsync the folder. A crash leaves either the old file
    or the new one, never a mix. With ``durable`` False nothing is fsynced: readers
    still see the old file or the new one, never a mix, but a crash of the machine
    may leave the old one, or an empty one. Raises OSError; no ``.tmp`` is left behind."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, _OPEN_FLAGS, 0o644)
    try:
        try:
            size = write_all(fd, chunks)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    if sync_dir and durable:
        fsync_dir(path.parent)
    return size


def probe_writable(folder: Path) -> None:
    """Prove ``folder`` takes writes: a file written, fsynced and removed in it (a
    read-only or full disk fails here, when opening, and not on the first command).
    Raises OSError."""
    probe = folder / f".probe-{os.getpid()}-{threading.get_ident():x}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o644)
    try:
        write_all(fd, (b"mnemex write probe\n",))
        os.fsync(fd)
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def remove_quietly(path: Path) -> bool:
    """Delete ``path`` if it exists; True if it was deleted. Failures are logged."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("could not delete %s: %s", path, describe_os_error(exc))
        return False
    return True


def read_file(path: Path, what: str, *, missing_ok: bool = False) -> bytes:
    """The whole content of ``path`` (``b""`` if it is missing and ``missing_ok``);
    OSError becomes StorageError naming ``what``."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        if missing_ok:
            return b""
        raise StorageError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise StorageError(f"could not read {what} {path}: {describe_os_error(exc)}") from exc


def unnamed_file(owner: object, directory: str, prefix: str) -> IO[bytes]:
    """A new file in ``directory`` (made if need be) with no name left on disk
    (``O_TMPFILE``, or unlinked at once): its descriptor is its only name, kept open
    while ``owner`` lives and closed with it, so nothing of it outlives the process
    however that ends. OSError when it cannot be made."""
    os.makedirs(directory, exist_ok=True)
    made = tempfile.TemporaryFile(dir=directory, prefix=prefix)  # noqa: SIM115
    weakref.finalize(owner, made.close)
    return made


_SYNC_FILE_RANGE_WRITE: Final = 2


def start_writeback(descriptor: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing these bytes back (not to wait for it): libc's
    sync_file_range, where there is one."""
    sync = libc_function("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint))
    if sync is not None:
        sync(descriptor, offset, length, _SYNC_FILE_RANGE_WRITE)
