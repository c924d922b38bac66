"""The open journal files of one runtime: at most ``limit`` at once, least recently
used closed first.

Every actor that writes needs its journal open, and a runtime keeps up to
``config.kernel.max_live_actors`` (100,000) actors live: far more than a process
may open files (``RLIMIT_NOFILE``, often 1,024). So a store does not own its
journal's descriptor; it asks ``OpenFiles`` for it at each write, and one closed
meanwhile is opened again (in append mode, by the store's own opener). A hit
costs a lock and a move in an ordered dict (about 0.2 us); a miss, one ``open``.

A store asks with its own lock held and uses the descriptor only until it
releases that lock; to close a store's descriptor, ``OpenFiles`` takes that lock
without waiting, and passes over a store that holds it. So a descriptor is never
closed under a write, a journal cut or an fsync's ``dup``, and nobody waits.

Closing a descriptor loses nothing. Journals are written with ``os.write`` on
raw descriptors, so there is no buffer in this process to flush: every byte
written is in the kernel before the descriptor can be let go. Durability does
not depend on the descriptor either: ``fdatasync`` through a descriptor opened
later, and ``syncfs``, make a file's data durable whichever descriptor wrote it
(Linux keeps dirty pages, and reports a writeback error not yet seen, per file).
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from mnemex.errors import InvalidInput
from mnemex.persistence._files import describe_os_error, log

__all__ = ["RESERVED_FILES", "OpenFiles", "open_files_limit"]

RESERVED_FILES = 128
"""Descriptors ``max_open_files`` must leave to the rest of the process: snapshot
writes and recoveries under way (a few files each, in a bounded number of
threads), fsyncs, the data directory's lock, the model's files, stdio."""

_DEFAULT_CAP = 4096


def open_files_limit(configured: int | None) -> int:
    """How many journals a runtime may keep open: ``configured``
    (``config.storage.max_open_files``), checked against this process's open-file
    limit, or for None half that limit and at most 4,096.

    Half, because the other half belongs to the rest of the process (sockets of
    the HTTP server above all). At most 4,096, because more buys nothing: a
    write to a journal that was closed costs one ``open`` (about 10 us) against
    the fsync every write waits for (100 us and more), and 4,096 journals are far
    more than are written within one group-commit round. Raises InvalidInput when
    ``configured`` leaves less than RESERVED_FILES of the limit to the rest.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = soft == resource.RLIM_INFINITY
    if configured is None:
        if unlimited:
            return _DEFAULT_CAP
        return max(1, min(_DEFAULT_CAP, soft // 2, soft - RESERVED_FILES))
    if type(configured) is not int or configured < 1:
        raise InvalidInput(f"config.storage.max_open_files is {configured!r}; it must be an integer >= 1 "
                           f"or None (half the process's open-file limit)", field="storage.max_open_files")
    if not unlimited and configured > soft - RESERVED_FILES:
        raise InvalidInput(
            f"config.storage.max_open_files is {configured:,}, but this process may open {soft:,} files "
            f"(RLIMIT_NOFILE) and {RESERVED_FILES} of them must stay free for sockets, snapshots and "
            f"recoveries: set at most {max(0, soft - RESERVED_FILES):,}, or raise the limit (ulimit -n)",
            field="storage.max_open_files")
    return configured


class _Open:
    """One owner's open descriptor, and the owner's lock that guards its use."""

    __slots__ = ("fd", "lock")

    def __init__(self, fd: int, lock: threading.Lock) -> None:
        self.fd = fd
        self.lock = lock


class OpenFiles:
    """An LRU of open descriptors, one per owner (a store), at most ``limit``.

    ``fd`` gives an owner its descriptor, opening it (after closing the least
    recently used ones to make room) if it is not open. Every call for an owner
    is made with that owner's lock held, and the descriptor is used only while
    it is held: a descriptor is closed only by a thread that holds its owner's
    lock, or took it without waiting. Thread-safe. The count exceeds ``limit``
    only when every owner's lock is held, by at most the number of threads
    holding one at that moment.
    """

    def __init__(self, limit: int) -> None:
        if type(limit) is not int or limit < 1:
            raise InvalidInput(f"open files limit is {limit!r}; it must be an integer >= 1", field="limit")
        self.limit = limit
        self._lock = threading.Lock()
        self._files: OrderedDict[Hashable, _Open] = OrderedDict()
        self._opening = 0  # slots taken by opens under way
        self.opened = 0
        """Descriptors opened so far."""
        self.evicted = 0
        """Descriptors closed to make room so far."""

    def __len__(self) -> int:
        """Descriptors open now (those being opened included)."""
        with self._lock:
            return len(self._files) + self._opening

    def is_open(self, owner: Hashable) -> bool:
        """True if ``owner``'s descriptor is open now."""
        return owner in self._files

    def fd(self, owner: Hashable, owner_lock: threading.Lock, open_fd: Callable[[], int]) -> int:
        """``owner``'s descriptor, valid while the caller holds ``owner_lock`` (it
        must hold it now): the one open, or a new one from ``open_fd()``, called
        without this object's lock held (what it raises escapes)."""
        lock = self._lock
        lock.acquire()  # explicit calls, not ``with``: this is every write's path
        try:
            file = self._files.get(owner)
            if file is not None:
                self._files.move_to_end(owner)
                return file.fd
            self._opening += 1
            victims = self._make_room()
        finally:
            lock.release()
        _close(victims)
        try:
            fd = open_fd()
        except BaseException:
            with self._lock:
                self._opening -= 1
            raise
        with self._lock:
            self._opening -= 1
            self.opened += 1
            self._files[owner] = _Open(fd, owner_lock)
        return fd

    def _make_room(self) -> list[int]:
        """Unlink the least recently used descriptors whose owners are not using
        them until one more fits (call with the lock held); the descriptors to
        close. Once unlinked, an owner asks for a new one: nobody uses the old."""
        excess = len(self._files) + self._opening - self.limit
        if excess <= 0:
            return []
        owners: list[Hashable] = []
        for owner, file in self._files.items():
            if file.lock.acquire(blocking=False):  # not waiting: an owner in use is passed over
                owners.append(owner)
                if len(owners) == excess:
                    break
        victims = [self._files.pop(owner) for owner in owners]
        for file in victims:
            file.lock.release()
        self.evicted += len(victims)
        return [file.fd for file in victims]

    def swap(self, owner: Hashable, fd: int) -> bool:
        """Make ``fd`` ``owner``'s descriptor in place of the open one, which is
        closed; False, and nothing changed, if ``owner`` has none open (the caller
        keeps ``fd``). Call with the owner's lock held."""
        with self._lock:
            file = self._files.get(owner)
            if file is None:
                return False
            old, file.fd = file.fd, fd
        _close([old])
        return True

    def discard(self, owner: Hashable) -> None:
        """Close ``owner``'s descriptor, if it has one. Call with the owner's lock held."""
        with self._lock:
            file = self._files.pop(owner, None)
        if file is not None:
            _close([file.fd])

    def close(self) -> None:
        """Close every descriptor whose owner is not using it now (at shutdown,
        every store is closed already: this closes what a store left open)."""
        with self._lock:
            victims: list[int] = []
            for owner in list(self._files):
                file = self._files[owner]
                if file.lock.acquire(blocking=False):
                    del self._files[owner]
                    file.lock.release()
                    victims.append(file.fd)
        _close(victims)

    def __repr__(self) -> str:
        return f"OpenFiles({len(self)} of {self.limit} open)"


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError as exc:  # the data is written; an fsync through another descriptor still reports
            log.warning("closing a journal descriptor failed: %s", describe_os_error(exc))
