"""Float32 vector rows kept in an unnamed file, mapped, instead of in anonymous memory.

A scope of a million memories of 384 dimensions holds 1.5 GB of float32 rows, which
its searches read a few at a time (the graph walks its int8 copy; a search rescores
its best candidates from the rows). :class:`RowFiles` gives each large vector index
(``mnemex.index.VectorIndex(row_files=...)``) a file of its own in the data
directory, made unnamed (``O_TMPFILE``, or unlinked at once): nothing of it is left
after the process, whichever way it ends, and the journal and snapshots stay the
truth. The index's rows are a shared mapping of that file:

* growing costs no copy once the rows are there: the file is extended and mapped
  again, and the new mapping shows the same pages (arrays handed out before stay
  valid for the readers holding them);
* after bulk writes and reads (a batch added, a snapshot's block, a graph build's
  block, a coarse pass packing the rows) the pages touched leave the process
  (``MADV_DONTNEED``; a shared mapping loses nothing) and the page cache keeps them,
  reclaimable: a search reads back the pages it needs (a few microseconds each);
  the mapping reads no pages around those asked for (``MADV_RANDOM``): a search that
  rescores 40 rows maps about 3 MB back into the process, not 50 (measured at
  100,000 rows on ext4, whose page cache holds large folios, each mapped whole);
* written pages are handed to the kernel's writeback at once (``sync_file_range``
  where there is one), so that few are dirty when a group-commit round syncs the
  file system;
* the file's blocks are reserved when it grows (``posix_fallocate``): a full disk
  refuses the growth there, and the index grows in memory instead, where writing
  to a mapped page the disk has no room for would stop the process (SIGBUS).

A scope restored from a large snapshot keeps its rows where the snapshot wrote
them instead (:class:`SnapshotRows`): its vectors file, mapped copy-on-write, whose
pages leave the process in the same way, but for the pages of rows written since
the restore (the process's own copies), until the index's first growth moves the
rows to a file of its own.

What it costs: the file's size on disk (the rows' capacity, up to twice the rows),
their writing once (1.5 GB at 1,000,000), and two descriptors per large index (the
file's, and its mapping's; one more for each older mapping a reader still holds)
beside the journals ``max_open_files`` counts.

Where it is not for: a file system that copies on write (btrfs, ZFS, XFS with shared
extents) may need new blocks to write a row again, which reserving them at growth
does not promise, and a full disk then stops the process (SIGBUS) where memory would
not have; a network file system (a cluster's shared ``data_dir``) may do the same on
a failed writeback. Point ``storage.vector_rows_dir`` at a local disk of another
file system there, or set ``storage.vector_rows_file_from`` to None. The file is
never synced: a writeback error the kernel sees is not reported to the process.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from typing import IO, Final

import numpy as np
import numpy.typing as npt

from mnemex.persistence._files import let_pages_go_from, log, start_writeback, unnamed_file

__all__ = ["FileRows", "RowFiles", "SnapshotRows"]

F32 = npt.NDArray[np.float32]

_COPY_ROWS: Final = 16_384
"""Rows copied into a new file at a time (24 MB at 384 dimensions), their pages let go
after each block: copying 1.5 GB of rows does not hold them all in the process."""

_PAGE: Final = mmap.PAGESIZE

_SPAN: Final = 2 << 20
"""Alignment to which a range of rows let go is widened, both ways. A fault maps more
than the page it asks for: the page cache's pages around it (fault-around, 64 KB),
or the whole large folio it sits in (up to 2 MB). Those neighbours stayed after the
rows read were let go: a catch-up adding 700,000 rows to a graph in place left 444 MB
of its row file in the process, in about 12,000 runs of ~40 KB (read from
/proc/self/pagemap at the end of a 1,000,000-memory ingest), 24% of the steady RSS."""


class RowFiles:
    """Opens a :class:`FileRows` in ``directory`` for each vector index whose rows
    reach ``min_bytes`` (see the module docstring); ``min_bytes`` 0 means from the
    first row."""

    def __init__(self, directory: str, min_bytes: int) -> None:
        self.directory = directory
        self._min_bytes = max(0, int(min_bytes))

    def __repr__(self) -> str:
        return f"RowFiles({self.directory!r}, min_bytes={self._min_bytes})"

    @property
    def min_bytes(self) -> int:
        return self._min_bytes

    def open(self, dim: int) -> FileRows:
        return FileRows(self.directory, dim)

    @staticmethod
    def usable() -> bool:
        """Whether this platform can keep rows so (shared mappings that can be let go)."""
        return hasattr(mmap, "MADV_DONTNEED") and hasattr(os, "posix_fallocate")


class FileRows:
    """One index's row file: made at its first :meth:`grow`, closed when the last
    array mapped from it is let go (each mapping holds a descriptor of its own)."""

    grows: Final = True

    def __init__(self, directory: str, dim: int) -> None:
        self.directory = directory
        self.dim = dim
        self._file: IO[bytes] | None = None
        self._size = 0
        self._mapped: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"FileRows({self.directory!r}, dim={self.dim}, bytes={self._size:,})"

    @property
    def nbytes(self) -> int:
        """The file's size (its blocks reserved)."""
        return self._size

    def grow(self, rows: F32, used: int, capacity: int) -> F32 | None:
        width = self.dim * 4
        size = capacity * width
        try:
            if self._file is None:
                # (kept open while the index lives; each mapping holds a descriptor of its own)
                self._file = unnamed_file(self, self.directory, ".mnemex-rows-")
            descriptor = self._file.fileno()
            if size > self._size:
                os.posix_fallocate(descriptor, self._size, size - self._size)
                self._size = size
            mapped = mmap.mmap(descriptor, size)
        except (OSError, ValueError) as exc:
            log.warning("vector rows: could not keep %s rows in a file in %s (%s); they stay in memory",
                        f"{capacity:,}", self.directory, exc)
            return None
        # no read-around: this file system's page cache keeps large folios (up to 2 MB)
        # for pages written or read in sequence, and a fault maps a whole folio in; 40
        # rows a search rescores mapped ~50 MB back into the process
        _read_at_random(mapped)
        self._mapped.add(mapped)
        grown = np.frombuffer(mapped, dtype=np.float32).reshape(capacity, self.dim)
        if _mapping_of(rows) not in self._mapped:  # rows from memory (or a snapshot's file): copied once
            for start in range(0, used, _COPY_ROWS):
                stop = min(used, start + _COPY_ROWS)
                grown[start:stop] = rows[start:stop]
                self._let_go(mapped, start * width, stop * width, wrote=True)
        # (else the file's pages already hold rows[:used]: the new mapping shows them)
        return grown

    def will_write(self, rows: F32, which: npt.NDArray[np.int64]) -> None:
        pass  # (a shared mapping loses nothing let go: its pages are the file's)

    def settle(self, rows: F32, start: int = 0, stop: int | None = None, *, written: bool = False) -> None:
        mapped = _mapping_of(rows)
        if mapped is None or mapped not in self._mapped:
            return
        width = self.dim * 4
        end = len(mapped) if stop is None else min(len(mapped), stop * width)
        self._let_go(mapped, start * width, end, wrote=written)

    def read(self, rows: F32, which: npt.NDArray[np.int64]) -> F32 | None:
        mapped = _mapping_of(rows)
        if mapped is None or mapped not in self._mapped or self._file is None:
            return None
        return _read_rows(self._file.fileno(), 0, self.dim, which)

    def _let_go(self, mapped: mmap.mmap, begin: int, end: int, *, wrote: bool) -> None:
        """Bytes ``[begin, end)`` of ``mapped`` leave the process, with the pages around
        them to ``_SPAN`` (a shared mapping loses nothing let go); written ones go to
        the kernel's writeback now."""
        let_pages_go_from(mapped, *_widened(begin, end, len(mapped)))
        first = begin - begin % _PAGE
        if wrote and self._file is not None and end > first:
            start_writeback(self._file.fileno(), first, end - first)


class SnapshotRows:
    """The rows of a snapshot's vectors file, mapped copy-on-write (``mapped``) and
    kept as a restored index's rows in place (``rows``, a view of it): no copy of them
    is made, and the index lets their pages go after bulk reads as it does a row
    file's (a coarse pass packing them, a snapshot, a graph build, the restore's own
    checks) and reads a search's few rows with ``preadv`` (from ``descriptor``, the
    file's, which it owns from here on), so a restored scope holds no more of its
    rows than one whose rows are in a :class:`FileRows`.

    A row written (a freed one reused) makes its page the process's own copy, which
    would read back as the file has it once let go: the pages of rows about to be
    written are noted first (:meth:`will_write`) and never let go, and noting and
    letting go take one lock (a snapshot or a graph build lets pages go from its own
    thread while the actor writes). The file is not changed (snapshot files never
    are); the index's first growth moves the rows to a row file, or to memory
    (:attr:`grows` is False)."""

    grows: Final = False

    def __init__(self, path: str, descriptor: int, mapped: mmap.mmap, rows: F32) -> None:
        weakref.finalize(self, os.close, descriptor)
        if _mapping_of(rows) is not mapped or rows.ndim != 2:
            raise ValueError("the rows are not a view of the mapping")
        self.path = path
        self.dim = rows.shape[1]
        self._descriptor = descriptor
        self._mapped = mapped
        self._width = self.dim * 4
        start = np.frombuffer(mapped, dtype=np.uint8)  # (where the mapping starts)
        self._rows_at = rows.__array_interface__["data"][0] - start.__array_interface__["data"][0]
        self._written = np.zeros(-(-len(mapped) // _PAGE), dtype=np.bool_)  # by page
        self._lock = threading.Lock()
        _read_at_random(mapped)

    def __repr__(self) -> str:
        return f"SnapshotRows({self.path!r}, dim={self.dim}, pages written={self.pages_written:,})"

    @property
    def pages_written(self) -> int:
        """Pages of the mapping the process has its own copy of (rows written)."""
        return int(self._written.sum())

    def grow(self, rows: F32, used: int, capacity: int) -> F32 | None:
        return None

    def will_write(self, rows: F32, which: npt.NDArray[np.int64]) -> None:
        if _mapping_of(rows) is not self._mapped or not len(which):
            return
        begins = self._rows_at + which.astype(np.int64) * self._width
        firsts, lasts = begins // _PAGE, (begins + self._width - 1) // _PAGE
        with self._lock:
            if self._width <= _PAGE:  # (a row spans one page or two)
                self._written[firsts] = True
                self._written[lasts] = True
            else:
                for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
                    self._written[first : last + 1] = True

    def settle(self, rows: F32, start: int = 0, stop: int | None = None, *, written: bool = False) -> None:
        if written or _mapping_of(rows) is not self._mapped:
            return  # (pages written were noted before: they stay)
        begin = self._rows_at + start * self._width
        size = len(self._mapped)
        end = size if stop is None else min(size, self._rows_at + stop * self._width)
        if end > begin:
            low, high = _widened(begin, end, size)
            self._let_go(low // _PAGE, -(-high // _PAGE))

    def let_go(self) -> None:
        """Every page of the mapping not written leaves the process (the restore
        read it all: the header and the doc ids too)."""
        self._let_go(0, len(self._written))

    def read(self, rows: F32, which: npt.NDArray[np.int64]) -> F32 | None:
        if _mapping_of(rows) is not self._mapped or not len(which):
            return None
        written = self._written
        if written.any():  # (a row on a page written: the file does not have it)
            begins = self._rows_at + which * self._width
            if written[begins // _PAGE].any() or written[(begins + self._width - 1) // _PAGE].any():
                return None
        return _read_rows(self._descriptor, self._rows_at, self.dim, which)

    def _let_go(self, first: int, last: int) -> None:
        """Pages ``[first, last)`` of the mapping leave the process, but those written."""
        with self._lock:  # (a page noted as written meanwhile would be lost)
            written = self._written[first:last]
            if not written.any():
                runs = [(first, last)]
            else:  # the runs of pages not written
                edges = np.flatnonzero(np.diff(np.concatenate(([True], written, [True])).astype(np.int8)))
                runs = [(first + int(low), first + int(high))
                        for low, high in zip(edges[::2], edges[1::2], strict=True)]
            for low, high in runs:
                let_pages_go_from(self._mapped, low * _PAGE, high * _PAGE)


def _widened(begin: int, end: int, size: int) -> tuple[int, int]:
    """``[begin, end)`` widened to ``_SPAN`` both ways, within ``size`` bytes."""
    return begin - begin % _SPAN, min(size, end + (-end) % _SPAN)


def _read_rows(descriptor: int, offset: int, dim: int, which: npt.NDArray[np.int64]) -> F32 | None:
    """Rows ``which`` of the float32 rows of ``dim`` values that start at ``offset`` of
    a file, read with ``preadv`` (nothing mapped); None when one cannot be read."""
    width = dim * 4
    out = np.empty((len(which), dim), dtype=np.float32)
    buffer = out.data.cast("B")
    try:
        for at, row in enumerate(which.tolist()):
            if os.preadv(descriptor, [buffer[at * width : (at + 1) * width]], offset + row * width) != width:
                return None  # (past the file's end: not a row of it)
    except OSError:
        return None  # (the mapping reads it, or says what is wrong)
    return out


def _read_at_random(mapped: mmap.mmap) -> None:
    """No read-around for ``mapped`` (``MADV_RANDOM``), where the platform has it."""
    try:
        mapped.madvise(mmap.MADV_RANDOM)
    except (OSError, ValueError, AttributeError) as exc:
        log.debug("vector rows: madvise(MADV_RANDOM) refused (%s)", exc)


def _mapping_of(rows: object) -> mmap.mmap | None:
    """The mmap an array's memory belongs to, if any (through its views)."""
    base = rows
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None
