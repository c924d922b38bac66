"""The open journal files of one runtime: at most ``limit`` at once, least recently
used closed first.

Every actor that writes needs its journal open, and a runtime keeps up to
``config.kernel.max_live_actors`` (100,000) actors live: far more than a process
may open files (``RLIMIT_NOFILE``, often 1,024). So a store does not own its
journal's descriptor: it holds an ``OpenFile`` that ``OpenFiles`` may close
between two writes, and asks for a new one when it finds it closed (opened
again in append mode, by the store's own opener). A write to an open journal
costs one counter step (``OpenFile.use``), touching nothing shared: the order of
use is sorted out only when a descriptor must be closed, from the counter's
stamps (a heap, entries re-queued lazily), which is exactly least recently used.
A write to a closed journal costs one ``open``.

A store uses its descriptor while it holds its own lock, or while it has it
pinned (``pin``/``unpin``, each with that lock held): an fsync pins it and runs
without the lock, so appends go on meanwhile. To close it, ``OpenFiles`` takes
that lock without waiting and passes over a store that holds it or a file that
is pinned; a descriptor replaced or discarded while pinned is closed by the last
``unpin``. So a descriptor is never closed under a write, a journal cut or an
fsync, and nobody waits.

Closing a descriptor loses nothing. Journals are written with ``os.write`` on
raw descriptors, so there is no buffer in this process to flush: every byte
written is in the kernel before the descriptor can be let go. Durability does
not depend on the descriptor either: ``fdatasync`` through a descriptor opened
later, and ``syncfs``, make a file's data durable whichever descriptor wrote it
(Linux keeps dirty pages, and reports a writeback error not yet seen, per file).
"""

from __future__ import annotations

import heapq
import itertools
import os
import resource
import threading
from collections.abc import Callable, Hashable

from mnemex.errors import InvalidInput
from mnemex.persistence._files import describe_os_error, log

__all__ = ["RESERVED_FILES", "OpenFile", "OpenFiles", "open_files_limit"]

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


class OpenFile:
    """One owner's open descriptor: ``fd``, or -1 once ``OpenFiles`` closed it.
    Read and used only with the owner's lock held (``lock``)."""

    __slots__ = ("_clock", "fd", "lock", "owner", "pins", "queued", "retired", "used")

    def __init__(self, owner: Hashable, fd: int, lock: threading.Lock, clock: itertools.count[int]) -> None:
        self.owner = owner
        self.fd = fd
        self.lock = lock
        self._clock = clock
        self.used = next(clock)
        """Stamp of the last use (a runtime-wide counter)."""
        self.queued = self.used
        """Stamp of this file's entry in the LRU heap."""
        self.pins = 0
        """Users of ``fd`` without the owner's lock (an fsync under way): not closed meanwhile."""
        self.retired: list[int] | None = None
        """Descriptors replaced or discarded while pinned: closed by the last ``unpin``."""

    def use(self) -> int:
        """``fd``, and the file marked as the most recently used; -1 if it was closed
        (then ask ``OpenFiles.open`` for a new one). Call with the owner's lock held."""
        self.used = next(self._clock)
        return self.fd


class OpenFiles:
    """An LRU of open descriptors, one per owner (a store), at most ``limit``.

    An owner holds its ``OpenFile`` and calls ``use()`` at each write; when that
    says -1 (or it has none yet) it calls ``open``, which closes the least
    recently used descriptors whose owners are not using them to make room. Every
    call for an owner is made with that owner's lock held. Thread-safe. The count
    exceeds ``limit`` only when every owner's lock is held, by at most the number
    of threads holding one at that moment.
    """

    def __init__(self, limit: int) -> None:
        if type(limit) is not int or limit < 1:
            raise InvalidInput(f"open files limit is {limit!r}; it must be an integer >= 1", field="limit")
        self.limit = limit
        self._lock = threading.Lock()
        self._files: dict[Hashable, OpenFile] = {}
        # (stamp, file) per open file, stamp <= file.used: the least recently used
        # file is found by popping and re-queueing those used since (see _make_room).
        # Entries of files closed by discard() stay until popped or compacted.
        self._heap: list[tuple[int, OpenFile]] = []
        self._clock = itertools.count()
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

    def open(self, owner: Hashable, owner_lock: threading.Lock, open_fd: Callable[[], int]) -> OpenFile:
        """``owner``'s open file: the one open, or a new one from ``open_fd()``
        (called without this object's lock held; what it raises escapes). Call
        with ``owner_lock`` held."""
        with self._lock:
            file = self._files.get(owner)
            if file is not None:
                file.use()
                return file
            self._opening += 1
            victims = self._make_room()
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
            file = self._files[owner] = OpenFile(owner, fd, owner_lock, self._clock)
            heapq.heappush(self._heap, (file.queued, file))
        return file

    def _make_room(self) -> list[int]:
        """Close the least recently used descriptors whose owners are not using them
        until one more fits (call with the lock held); the descriptors to close.

        The heap's smallest stamp belongs to the least recently used file unless
        that file was used since it was queued: then it is queued again with its
        newer stamp, and the next smallest tried (every file's queued stamp is at
        most its last use, so a file whose two agree is the least recently used)."""
        excess = len(self._files) + self._opening - self.limit
        victims: list[int] = []
        busy = 0
        heap = self._heap
        while excess > 0 and heap and busy <= len(self._files):
            stamp, file = heapq.heappop(heap)
            if file.fd < 0 or stamp != file.queued:
                continue  # closed by discard(), or queued again since
            if file.used != stamp:
                file.queued = file.used
                heapq.heappush(heap, (file.queued, file))
            elif file.lock.acquire(blocking=False):  # not waiting: an owner in use is passed over
                if file.pins:  # an fsync under way: in use too
                    file.lock.release()
                    busy += 1
                    file.used = file.queued = next(self._clock)
                    heapq.heappush(heap, (file.queued, file))
                    continue
                del self._files[file.owner]
                victims.append(file.fd)
                file.fd, file.owner = -1, None  # no cycle with the store, which keeps its file
                file.lock.release()
                excess -= 1
            else:  # in use right now: the most recently used
                busy += 1
                file.used = file.queued = next(self._clock)
                heapq.heappush(heap, (file.queued, file))
        self.evicted += len(victims)
        return victims

    def swap(self, owner: Hashable, fd: int) -> bool:
        """Make ``fd`` ``owner``'s descriptor in place of the open one, which is
        closed; False, and nothing changed, if ``owner`` has none open (the caller
        keeps ``fd``). Call with the owner's lock held."""
        with self._lock:
            file = self._files.get(owner)
            if file is None:
                return False
            old, file.fd = file.fd, fd
        if not _retire(file, old):
            _close([old])
        return True

    @staticmethod
    def pin(file: OpenFile) -> int:
        """Keep ``file``'s descriptor open until ``unpin``, for use without the owner's
        lock (an fsync); returns it. Call with the owner's lock held and ``fd`` open."""
        file.pins += 1
        return file.fd

    @staticmethod
    def unpin(file: OpenFile) -> None:
        """End one ``pin``; the last closes the descriptors replaced or discarded
        meanwhile. Call with the owner's lock held."""
        file.pins -= 1
        if not file.pins and file.retired:
            retired, file.retired = file.retired, None
            _close(retired)

    def discard(self, owner: Hashable) -> None:
        """Close ``owner``'s descriptor, if it has one. Call with the owner's lock held."""
        with self._lock:
            file = self._files.pop(owner, None)
            if file is None:
                return
            fd, file.fd, file.owner = file.fd, -1, None
            if len(self._heap) > 2 * len(self._files) + 64:  # mostly closed files' entries: compact
                self._heap = [(open_.queued, open_) for open_ in self._files.values()]
                heapq.heapify(self._heap)
        if not _retire(file, fd):
            _close([fd])

    def close(self) -> None:
        """Close every descriptor whose owner is not using it now (at shutdown,
        every store is closed already: this closes what a store left open)."""
        victims: list[int] = []
        with self._lock:
            for owner, file in list(self._files.items()):
                if file.lock.acquire(blocking=False):
                    del self._files[owner]
                    if not _retire(file, file.fd):
                        victims.append(file.fd)
                    file.fd, file.owner = -1, None
                    file.lock.release()
            if not self._files:
                self._heap = []
        _close(victims)

    def __repr__(self) -> str:
        return f"OpenFiles({len(self)} of {self.limit} open)"


def _retire(file: OpenFile, fd: int) -> bool:
    """Leave ``fd`` for ``file``'s last ``unpin`` to close, if it is pinned (call with
    the owner's lock held); False when it is not: close it now."""
    if not file.pins:
        return False
    if file.retired is None:
        file.retired = []
    file.retired.append(fd)
    return True


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError as exc:  # the data is written; an fsync through another descriptor still reports
            log.warning("closing a journal descriptor failed: %s", describe_os_error(exc))
