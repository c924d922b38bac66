"""Byte strings kept in an unnamed file, read back one by one, instead of in memory.

A scope of a million memories held its records as Python objects: about 640 bytes
a memory (the struct, its id, its content, its times, an empty metadata dict),
for records a search reads ten at a time. :class:`RecordFiles` gives a large scope
(``storage.records_file_from`` memories) a :class:`RecordFile` of its own in the
data directory, made unnamed as the vector rows' are (``mnemex.persistence.rowfiles``):
nothing of it is left after the process, whichever way it ends, and the journal and
snapshots stay the truth. The file is only ever appended to: what its owner keeps is
each record's offset and length (``mnemex.memories.records``), and an offset it read
stays valid for as long as it holds the file, so a snapshot's view of the records
stays valid while the scope goes on writing. Reads are ``pread`` calls: nothing is
mapped, the page cache holds the pages (reclaimable), and the process's resident
memory does not grow with the file.

Written bytes are handed to the kernel's writeback at once (``sync_file_range``),
so that few are dirty when a group-commit round syncs the file system. The file is
never synced: it is a cache of what the journal and snapshots hold. A write that
fails (a full disk) raises :class:`OSError` and changes nothing: the caller keeps
those records in memory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import IO

from mnemex.persistence._files import start_writeback, unnamed_file

__all__ = ["RecordFile", "RecordFiles"]


class RecordFiles:
    """Opens a :class:`RecordFile` in ``directory`` for each scope that holds
    ``min_records`` memories (0 or 1: from the first), whose owner writes records to
    it ``batch`` at a time."""

    def __init__(self, directory: str, min_records: int, *, batch: int = 4096) -> None:
        self.directory = directory
        self._min_records = max(1, int(min_records))
        self.batch = max(1, int(batch))

    def __repr__(self) -> str:
        return f"RecordFiles({self.directory!r}, min_records={self._min_records}, batch={self.batch})"

    @property
    def min_records(self) -> int:
        return self._min_records

    def open(self) -> RecordFile:
        """A new, empty file (OSError when it cannot be made)."""
        return RecordFile(self.directory)

    @staticmethod
    def usable() -> bool:
        """Whether this platform reads and writes files at an offset (``pread``)."""
        return hasattr(os, "pread") and hasattr(os, "pwrite")


class RecordFile:
    """One append-only unnamed file; closed when the last holder lets it go."""

    __slots__ = ("__weakref__", "_file", "_size", "directory")

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._file: IO[bytes] = unnamed_file(self, directory, ".mnemex-records-")
        self._size = 0

    def __repr__(self) -> str:
        return f"RecordFile({self.directory!r}, bytes={self._size:,})"

    @property
    def size(self) -> int:
        """Bytes appended so far (where the next append starts)."""
        return self._size

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the file's end; its offset. Raises OSError (nothing counts
        as written then: the next append writes over what a failed one left)."""
        view = memoryview(data).cast("B")
        start = self._size
        descriptor = self._file.fileno()
        done = 0
        while done < len(view):
            written = os.pwrite(descriptor, view[done:], start + done)
            if written <= 0:
                raise OSError(f"pwrite wrote {written} bytes")
            done += written
        if done:
            start_writeback(descriptor, start, done)
        self._size = start + done
        return start

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (both from an append of this file)."""
        data = os.pread(self._file.fileno(), length, offset)
        if len(data) != length:
            raise OSError(f"{self!r}: read {len(data)} of {length} bytes at {offset}")
        return data

    def read_spans(self, spans: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (offset, length): a run of spans that lie close together
        in the file (at least half of the bytes between the first and the last
        wanted) is read in one call and sliced."""
        out: list[bytes] = []
        at = 0
        while at < len(spans):
            first = spans[at][0]
            end = stop = at
            wanted = 0
            last = first
            # (grow the run while the bytes read stay at most twice those wanted)
            while stop < len(spans):
                offset, length = spans[stop]
                if offset < first:
                    break
                reach = max(last, offset + length)
                if wanted and reach - first > 2 * (wanted + length) + 65_536:
                    break
                wanted += length
                last = reach
                stop += 1
                end = stop
            if end - at <= 1:
                offset, length = spans[at]
                out.append(self.read(offset, length))
                at += 1
                continue
            block = memoryview(self.read(first, last - first))
            out.extend(bytes(block[offset - first : offset - first + length])
                       for offset, length in spans[at:end])
            at = end
        return out
