"""Per-actor storage as the runtime uses it: recover, append, sync, snapshot.

``FileStore`` keeps one actor's journal and snapshots in its folder;
``MemoryStore`` keeps the same things in RAM (``config.storage.data_dir = None``) so an
actor restarts and passivates identically, only nothing survives the process.
Both are plain blocking code: the runtime calls them from worker threads, and
``write_snapshot`` may run in one thread while ``append`` runs in another.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import itertools
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson

from mnemex.errors import CorruptData, InvalidInput, MnemexError, StorageError
from mnemex.persistence._files import (
    describe_os_error,
    fsync_dir,
    log,
    remove_quietly,
    write_all,
    write_atomic,
)
from mnemex.persistence.journal import (
    JOURNAL,
    JournalEntry,
    archive_name,
    cut_offset,
    cut_tail,
    encode_entries,
    encode_lines,
    list_archives,
    read_journal,
    scan_journal,
)
from mnemex.persistence.layout import KEY_MANIFEST, actor_dir, check_key, check_kind
from mnemex.persistence.openfiles import OpenFile, OpenFiles
from mnemex.persistence.snapshot import (
    Sidecar,
    SidecarReads,
    SnapshotHeader,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    load_newest_snapshot,
    read_sidecars,
    sidecar_bytes,
    sidecar_name,
    snapshot_storage_error,
    start_newest_sidecar_reads,
    write_snapshot_stream,
)

__all__ = ["ActorStore", "FileStore", "MemoryStore", "Recovered", "stitch_entries"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class Recovered:
    """An actor's persisted state: a snapshot and the commands to replay after it."""

    header: SnapshotHeader | None
    """The snapshot used, or None if there is none (start from an empty actor)."""
    records: Sequence[bytes]
    """Its record lines (empty without a snapshot)."""
    sidecars: dict[str, bytes | memoryview]
    """Its sidecars that exist and pass their check (views of the files mapped in memory)."""
    journal: list[JournalEntry]
    """The commands after the snapshot (seq > header.seq), in order, seq by seq."""
    sidecar_paths: dict[str, str] = field(default_factory=dict)
    """The files of those sidecars, by name (none for a store in memory)."""

    @property
    def last_seq(self) -> int:
        """Seq of the last command recovered: the last journal entry's, else the
        snapshot's, else 0."""
        if self.journal:
            return self.journal[-1].seq
        return self.header.seq if self.header is not None else 0


def stitch_entries(after: int, sources: Iterable[Sequence[JournalEntry]], where: str) -> list[JournalEntry]:
    """Entries with seq > ``after`` from ``sources`` (archive segments then the
    journal, each in order), each seq once, with no gap; CorruptData on a gap."""
    result: list[JournalEntry] = []
    expected = after + 1
    for entries in sources:
        if not entries or entries[-1].seq < expected:
            continue
        start = 0
        if entries[0].seq < expected:  # overlap with what came before: skip it
            start = expected - entries[0].seq
        if entries[start].seq != expected:
            following = entries[start].seq
            missing = (f"command {expected} is" if following == expected + 1
                       else f"commands {expected} to {following - 1} are")
            raise CorruptData(f"{where}: {missing} missing (the state is at seq {expected - 1} and the "
                              f"next command kept is {following}); the actor cannot be replayed")
        result.extend(entries[start:] if start else entries)
        expected = entries[-1].seq + 1
    return result


def _check_keep(keep: int) -> int:
    if type(keep) is not int or keep < 1:
        raise InvalidInput(f"snapshots kept is {keep!r}; it must be at least 1 "
                           f"(config.storage.snapshots_kept)",
                           field="keep")
    return keep


class ActorStore(abc.ABC):
    """Where one actor's journal and snapshots live (on disk or in memory)."""

    __slots__ = ()  # (a FileStore's own: every live actor holds one)

    kind: str
    key: tuple[str, ...]
    keep: int

    @abc.abstractmethod
    def exists(self) -> bool:
        """True if anything was ever persisted for this actor (journal or snapshot)."""

    @abc.abstractmethod
    def recover(self) -> Recovered:
        """The newest valid snapshot and the journal after it. A torn journal tail
        (an unterminated last line, after unwritten space) is cut; any other damage,
        a complete last line that fails its check included, raises CorruptData."""

    @abc.abstractmethod
    def append(self, entries: Sequence[tuple[int, int, bytes]]) -> None:
        """Journal ``(seq, ts_ms, payload)`` lines with one write, without fsync.
        Seqs must continue from the last one this store knows. On failure nothing
        of the batch remains and StorageError is raised."""

    @abc.abstractmethod
    def cut_after(self, seq: int) -> None:
        """Remove every journal line after ``seq``: lines an actor wrote ahead of
        handling commands it then refused, or lines whose fsync failed. Only lines
        nobody was told are durable may be cut, and ``seq`` must not be older than
        the newest snapshot. Cheap when the lines cut are all from the latest
        append. Raises StorageError if the journal cannot be cut; the store then
        refuses writes (``needs_recovery``) and ``recover()`` cuts it."""

    @property
    @abc.abstractmethod
    def needs_recovery(self) -> bool:
        """True when the store refuses writes until ``recover()`` runs: an fsync
        failed (lines written since the last good one may be lost) or a failed
        write or cut left bytes it could not remove."""

    @abc.abstractmethod
    def sync(self) -> None:
        """Make every appended line durable (fsync). After it raises, every later
        append and sync raises too, until ``recover()``. Syncs of one store do not
        overlap (one waits for the other): so a sync that returns normally leaves no
        earlier failure unreported, which lets the kernel release every pending reply
        on its own sync while a group commit of the same store is still on disk."""

    @abc.abstractmethod
    def write_snapshot(self, seq: int, ts: int, records: Iterable[bytes], *, created: int,
                       extra: Mapping[str, object] | None = None,
                       sidecars: Mapping[str, Sidecar] | None = None,
                       required: Iterable[str] = ()) -> int:
        """Persist the state at ``seq`` (``ts`` = time of that command, ``created`` =
        now, both epoch ms), then move journal lines up to ``seq`` to an archive
        and drop what is older than the newest ``keep`` snapshots. Safe while
        another thread appends lines after ``seq``. ``records`` may be a generator
        (read once); a sidecar may be a writer streaming it to a file; ``required``
        names the sidecars a recovery cannot do without. Returns the size of the
        snapshot's body in bytes."""

    @abc.abstractmethod
    def synced_by_fs(self) -> None:
        """Record that a storage-wide sync (``Storage.syncfs``) covered every line
        appended so far; raises StorageError (or NotOwner) if this store's lines
        were refused meanwhile."""

    @abc.abstractmethod
    def disk_bytes(self) -> int:
        """Bytes this actor's persisted files take."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release open files (idempotent). The store stays usable: a later call reopens."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind!r}, {self.key!r})"


class FileStore(ActorStore):
    """One actor's folder ``data_dir/shards/<vvv>/<kind>s/<encoded key>/``:

    - ``journal.jsonl``: commands since the newest snapshot, appended;
    - ``snapshot-<seq>.jsonl`` (+ sidecars): the newest ``keep`` snapshots;
    - ``journal-<first>-<last>.jsonl``: archived lines back to the oldest kept snapshot;
    - ``key.json``: the kind and key (so the key is known even for hashed names).

    Nothing is created until the first append or snapshot. The journal is opened
    through ``files``, the runtime's bounded set of open journals, which may close
    it between two writes (the next one reopens it); without one the store keeps
    its own journal open.
    """

    __slots__ = ("_broken", "_cut_pending", "_cuts", "_data_dir", "_dirty", "_fence", "_file", "_files",
                 "_last_lines", "_last_seq", "_lock", "_made_files", "_made_folders", "_size",
                 "_snapshot_lock", "_sync_lock", "_unsynced", "keep", "key", "kind", "path")

    def __init__(self, data_dir: Path | str, kind: str, key: tuple[str, ...], *, keep: int = 2,
                 files: OpenFiles | None = None,
                 fence: Callable[[], AbstractContextManager[None]] | None = None) -> None:
        self.kind = check_kind(kind)
        # one store per live actor: the data directory's Path is shared, not copied
        self._data_dir = data_dir if isinstance(data_dir, Path) else Path(data_dir)
        self.path = actor_dir(self._data_dir, kind, key)
        self.key = key
        self.keep = _check_keep(keep)
        self._files = files if files is not None else OpenFiles(1)
        self._file: OpenFile | None = None  # the journal's descriptor, which _files may close
        # _lock guards the journal's descriptor (used only while it is held: _files
        # closes it only when it can take this lock) and what describes the journal:
        # _size, _dirty, _last_seq, _last_lines, _broken, _cut_pending, _cuts,
        # _unsynced. Held only for short writes and cuts, plus the final swap of a
        # journal cut.
        self._lock = threading.Lock()
        self._snapshot_lock = threading.Lock()  # one snapshot / recovery at a time
        # One fsync at a time: a writeback error is reported once per file, so two at
        # once could see the later one succeed while the earlier one's lines failed.
        self._sync_lock = threading.Lock()
        self._size = 0  # bytes in the journal, while its descriptor is open
        self._dirty = False  # lines appended since the last sync() began
        self._last_seq: int | None = None
        # the latest append: its first seq and where each of its lines ends (bytes
        # from its start), so cut_after can take lines off it without reading the file
        self._last_lines: tuple[int, list[int]] | None = None
        self._broken: str | None = None
        self._cut_pending: int | None = None  # a cut that failed: recover() makes it
        self._cuts = 0  # journal lines cut so far; a journal cut under way starts over
        # what this store's appends created, removed again when a cut leaves nothing else,
        # so an actor whose every line was cut leaves nothing: the files in its folder (key
        # manifest, journal; names, in the order made) and how many folders, its own and
        # those above it (counted, not kept as Paths: two Paths were ~600 bytes a live actor)
        self._made_files: tuple[str, ...] = ()
        self._made_folders = 0
        self._unsynced: list[Path] = []  # new files and folders whose entries are not yet durable
        # held around every change to the folder when the actor's virtual shard is leased
        # (see leases.py): NotOwner, and nothing changed, once another process took it over
        self._fence = fence if fence is not None else _unfenced

    @property
    def _journal(self) -> Path:
        """The journal's path (made when asked: a live actor's store keeps fewer Paths)."""
        return self.path / JOURNAL

    # -- reading ---------------------------------------------------------------

    def exists(self) -> bool:
        return self._journal.exists() or bool(list_snapshots(self.path))

    def recover(self) -> Recovered:
        with self._snapshot_lock, self._fence():  # recovery may cut a torn tail
            # the sidecars (most of the bytes) are read in threads while the snapshot is
            early = start_newest_sidecar_reads(self.path)
            try:
                return self._recover(early)
            finally:
                if early is not None:
                    early.close()

    def _recover(self, early: SidecarReads | None) -> Recovered:
        skip: set[int] = set()
        while True:
            loaded = load_newest_snapshot(self.path, self.kind, self.key, skip=skip)
            header, records = loaded if loaded is not None else (None, [])
            if header is None:
                sidecars: dict[str, bytes | memoryview] = {}
                break
            if early is not None and early.header == header:
                sidecars = early.result()
            else:
                sidecars = read_sidecars(self.path, header)
            absent = [name for name in header.required if name not in sidecars]
            if not absent:
                break
            log.warning("%s: snapshot %d cannot be restored without its sidecar(s) %s; trying an older one",
                        self.path, header.seq, ", ".join(absent))
            skip.add(header.seq)
        after = header.seq if header is not None else 0
        with self._lock:
            pending = self._cut_pending
            if pending is not None:
                try:
                    self._cut_now(pending, durable=True)
                except OSError as exc:
                    raise StorageError(f"could not cut journal {self._journal} after seq {pending}, as a "
                                       f"failed write needs: {describe_os_error(exc)}") from exc
            scan = read_journal(self._journal, repair=False)
            if scan.is_torn:
                cut_tail(self._journal, scan)
                self._size = scan.good_bytes  # an open descriptor appends after the cut
            # The file is consistent again and the caller rebuilds from it.
            self._broken = None
        sources: list[Sequence[JournalEntry]] = []
        for _first, last, path in list_archives(self.path):
            if last > after:
                sources.append(read_journal(path, repair=False).entries)
        sources.append(scan.entries)
        where = f"{self.path} (snapshot {after})" if header is not None else f"{self.path} (no snapshot)"
        if header is None and list_snapshots(self.path):
            where += ", every snapshot failed its checks"
        journal = stitch_entries(after, sources, where)
        paths = {} if header is None else {name: str(self.path / sidecar_name(header.seq, name))
                                           for name in sidecars}
        recovered = Recovered(header, records, sidecars, journal, paths)
        self._check_reaches_known_seqs(recovered)
        with self._lock:
            self._last_seq = recovered.last_seq
        return recovered

    def _check_reaches_known_seqs(self, recovered: Recovered) -> None:
        """File names prove the actor reached some seqs; recovering less than that
        (a damaged newest snapshot whose commands are no longer kept) would
        silently lose accepted commands."""
        known = max([seq for seq, _path in list_snapshots(self.path)]
                    + [last for _first, last, _path in list_archives(self.path)], default=0)
        if recovered.last_seq < known:
            raise CorruptData(f"{self.path}: the files show the actor reached seq {known}, but only seq "
                              f"{recovered.last_seq} can be recovered (a newer snapshot failed its checks "
                              f"and the commands it covered are not kept); `mnemex inspect` says more")

    def disk_bytes(self) -> int:
        total = 0
        try:
            with os.scandir(self.path) as entries:
                for entry in entries:
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            return 0
        return total

    # -- appending -------------------------------------------------------------

    def _ensure_folder(self) -> None:
        """Create the actor folder and its key manifest (call with _lock held)."""
        if (self.path / KEY_MANIFEST).exists():
            return
        # data_dir, shards/, <vvv>/, <kind>s/ and the actor's own folder, top down
        depth = len(self.path.relative_to(self._data_dir).parts)
        chain = (*reversed(self.path.parents[:depth]), self.path)
        # the folders made: from the highest one missing down (a folder missing, the ones
        # in it are too, unless another actor makes them meanwhile)
        top = next((at for at, folder in enumerate(chain) if not folder.exists()), len(chain))
        created = chain[top:]
        self.path.mkdir(parents=True, exist_ok=True)
        manifest = self.path / KEY_MANIFEST
        tmp = manifest.with_name(KEY_MANIFEST + ".tmp")
        tmp.write_bytes(orjson.dumps({"kind": self.kind, "key": list(self.key)}))
        os.replace(tmp, manifest)
        self._made_folders = max(self._made_folders, len(created))
        self._made_files = (*self._made_files, KEY_MANIFEST)
        # Made durable by the next sync() (off the caller's thread), not here.
        self._unsynced.extend([manifest, self.path, *(folder.parent for folder in created)])

    def _journal_fd(self) -> int:
        """The journal's descriptor, opened again if the runtime closed it to make
        room for others (call with _lock held; use it only while it is held)."""
        file = self._file
        fd = file.use() if file is not None else -1
        if fd < 0:
            file = self._file = self._files.open(self, self._lock, self._open)
            fd = file.fd
        return fd

    def _open(self) -> int:
        """Open the journal for appending (called by _files, with _lock held)."""
        self._ensure_folder()
        existed = self._journal.exists()
        fd = os.open(self._journal, os.O_RDWR | os.O_APPEND | os.O_CREAT | _CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # A torn tail nobody recovered: cut it, or new lines would follow garbage.
                scan = read_journal(self._journal, repair=True)
                size = scan.good_bytes
                if scan.entries and self._last_seq is None:
                    self._last_seq = scan.entries[-1].seq
        except BaseException:
            os.close(fd)
            raise
        if not existed:
            self._unsynced.append(self.path)
            self._made_files = (*self._made_files, JOURNAL)
        self._size = size
        return fd

    def append(self, entries: Sequence[tuple[int, int, bytes]]) -> None:
        if not entries:
            return
        lines = encode_lines(entries)
        if len(lines) == 1:  # an inline write's
            data = lines[0]
            ends = [len(data)]
        else:
            ends = list(itertools.accumulate(map(len, lines)))
            data = b"".join(lines)
        del lines
        first, last = entries[0][0], entries[-1][0]
        with self._fence(), self._lock:
            if self._broken is not None:
                raise StorageError(self._broken)
            if self._last_seq is not None and first != self._last_seq + 1:
                raise InvalidInput(f"{self._journal}: appending seq {first} after seq {self._last_seq}; "
                                   f"journal seqs must be consecutive", field="seq")
            try:
                fd = self._journal_fd()
            except OSError as exc:
                raise StorageError(f"could not open the journal {self._journal}: "
                                   f"{describe_os_error(exc)}") from exc
            before = self._size
            try:
                write_all(fd, (data,))
            except OSError as exc:
                raise self._undo_append(fd, before, len(entries), exc) from exc
            self._size = before + len(data)
            self._last_seq = last
            self._last_lines = (first, ends)
            self._dirty = True

    def _undo_append(self, fd: int, before: int, count: int, exc: OSError) -> StorageError:
        what = f"could not append {count} journal line{'s' if count != 1 else ''} to {self._journal}: " \
               f"{describe_os_error(exc)}"
        try:
            os.ftruncate(fd, before)
        except OSError as again:
            self._broken = (f"{what}; cutting the partial line off failed too ({describe_os_error(again)}), "
                            f"so this journal refuses writes until the actor is reloaded (recover() "
                            f"cuts the partial line)")
            return StorageError(self._broken)
        return StorageError(f"{what}; none of them was kept (the file is back at {before:,} bytes)")

    def sync(self) -> None:
        with self._sync_lock:
            self._sync()

    def _sync(self) -> None:
        pinned: OpenFile | None = None
        fd: int | None = None
        try:
            with self._lock:
                if self._broken is not None:
                    raise StorageError(self._broken)
                unsynced, self._unsynced = self._unsynced, []
                if self._dirty:
                    # Reopened if the runtime closed it since the write (an fsync
                    # through any descriptor makes the file's data durable), then
                    # pinned: not closed once the lock is released (by a journal
                    # cut's swap, or to make room) until the fsync is done. No dup
                    # and close a round: each would give the GIL up and take it back
                    # in the commit thread. Fsyncing the old file after a cut is
                    # harmless: the cut made its lines durable in the new one.
                    fd = self._journal_fd()
                    pinned = self._file
                    assert pinned is not None
                    OpenFiles.pin(pinned)
                    self._dirty = False
            # fdatasync: the data and the size that reads need, without the
            # timestamps fsync also writes. Outside the lock: appends go on meanwhile.
            # A new actor's folders and manifest are synced beside it (see _sync_entries).
            if unsynced:
                self._sync_entries(unsynced, fd)
            elif fd is not None:  # a round's usual work: no list, no closure
                os.fdatasync(fd)
        except OSError as exc:
            what = (f"journal {self._journal}" if exc.filename is None
                    else f"{exc.filename} (beside journal {self._journal})")
            message = (f"could not fsync {what}: {describe_os_error(exc)}; lines written "
                       f"since the last fsync may be lost, so this journal refuses writes until the "
                       f"actor is reloaded (recover())")
            with self._lock:
                self._broken = message
            raise StorageError(message) from exc
        finally:
            if pinned is not None:
                with self._lock:
                    OpenFiles.unpin(pinned)

    @property
    def needs_recovery(self) -> bool:
        return self._broken is not None

    def cut_after(self, seq: int) -> None:
        try:
            with self._fence(), self._lock:
                self._cut_now(seq, durable=False)
        except (OSError, MnemexError) as exc:
            # the disk refused, or the fence did (NotOwner while the lease was not ours,
            # a lock held too long): the lines stay until a recovery cuts them, and were
            # the store to take writes meanwhile, the next would follow lines the actor
            # never accepted
            message = (f"could not cut journal {self._journal} after seq {seq}: "
                       f"{describe_os_error(exc) if isinstance(exc, OSError) else exc}")
            with self._lock:
                if self._last_seq is None or seq < self._last_seq:  # (else there was nothing to cut)
                    message = self._cut_failed(seq, message)
            if isinstance(exc, OSError):
                raise StorageError(message) from exc
            raise

    def _cut_failed(self, seq: int, message: str) -> str:
        """Note a cut after ``seq`` that could not be made (call with _lock held), and
        why (``message``): no write is taken until ``recover`` makes it. Returns what
        the store now answers writes with."""
        self._broken = f"{message}; it refuses writes until the actor is reloaded (recover() cuts it)"
        if self._cut_pending is None or seq < self._cut_pending:
            self._cut_pending = seq
        return self._broken

    def _cut_now(self, seq: int, *, durable: bool) -> None:
        """Truncate the journal after line ``seq`` (call with _lock held); with
        ``durable``, fsync it even if there was nothing to cut. Raises OSError."""
        last = self._last_seq
        beyond = last is not None and seq >= last  # no line after seq
        if beyond and not durable:
            self._cut_pending = None
            return
        fd = self._journal_fd()
        if not beyond:
            lines = self._last_lines
            left: tuple[int, list[int]] | None = None
            if lines is not None and lines[0] - 1 <= seq:
                # the lines cut are the tail of the latest append: no need to read the file
                first, ends = lines
                keep = seq - first + 1
                size = self._size - (ends[-1] - (ends[keep - 1] if keep else 0))
                left = (first, ends[:keep]) if keep else None
                kept = seq
            else:
                with open(self._journal, "rb") as reader:
                    size, _first, found = cut_offset(reader.read(self._size), seq)
                kept = seq if found is None else found
            if size != self._size:
                os.ftruncate(fd, size)
                self._size = size
                self._cuts += 1
                self._dirty = True  # the next sync makes the cut durable
            self._last_lines = left
            self._last_seq = kept
            if size == 0 and (self._made_files or self._made_folders) and self._remove_created():
                self._cut_pending = None
                return
        if durable:
            os.fdatasync(fd)
        self._cut_pending = None

    def _remove_created(self) -> bool:
        """Remove the journal, key manifest and folders this store's appends created,
        if the actor's folder holds nothing else (call with _lock held): a command
        whose line was written ahead and cut again leaves no trace. True if removed."""
        ours = set(self._made_files)
        try:
            if not set(os.listdir(self.path)) <= ours:
                return False
        except OSError:
            return False
        self._files.discard(self)  # closes the journal's descriptor
        self._file = None
        self._size = 0
        files = [self.path / name for name in reversed(self._made_files)]  # the journal, the manifest
        folders = [self.path, *self.path.parents][: self._made_folders]   # bottom up
        for path in (*files, *folders):
            try:
                if path.is_dir():
                    path.rmdir()
                else:
                    path.unlink()
            except OSError:
                pass  # a folder another actor now uses, say
        self._made_files = ()
        self._made_folders = 0
        self._unsynced = []
        self._dirty = False
        return True

    def synced_by_fs(self) -> None:
        """Record that a filesystem-wide sync (DataDir.syncfs) made every line and
        folder written so far durable; raises StorageError if this journal refused
        writes meanwhile."""
        with self._lock:
            if self._broken is not None:
                raise StorageError(self._broken)
            self._unsynced = []

    @staticmethod
    def _sync_entries(paths: list[Path], journal_fd: int | None = None) -> None:
        """Fsync each of ``paths`` (files and folders; each once) and fdatasync
        ``journal_fd``, all at once when there are several: a new actor's manifest
        and the folders holding it and its journal (up to six) took 4-20 ms one
        after another, the filesystem's commits being waited for one by one, and
        about 1.5 ms together (one thread each; the first OSError is raised once
        all are done)."""
        syncs: list[Callable[[], None]] = [] if journal_fd is None else [lambda: os.fdatasync(journal_fd)]
        syncs += [functools.partial(_fsync_entry, path) for path in dict.fromkeys(paths)]
        if len(syncs) <= 1:
            for sync in syncs:
                sync()
            return
        failures: list[BaseException] = []

        def run(sync: Callable[[], None]) -> None:
            try:
                sync()
            except BaseException as exc:  # raised below, in the caller's thread
                failures.append(exc)

        helpers: list[threading.Thread] = []
        for sync in syncs[1:]:
            helper = threading.Thread(target=run, args=(sync,), name="mnemex-fsync-entry", daemon=True)
            try:
                helper.start()
            except RuntimeError:  # no thread to be had (a process at its limit): done here
                run(sync)
                continue
            helpers.append(helper)
        run(syncs[0])
        for helper in helpers:
            helper.join()
        if failures:
            raise failures[0]

    def close(self) -> None:
        with self._lock:
            self._files.discard(self)
            self._file = None
            if self._cut_pending is None:
                self._broken = None
            self._size = 0

    # -- snapshots -------------------------------------------------------------

    def write_snapshot(self, seq: int, ts: int, records: Iterable[bytes], *, created: int,
                       extra: Mapping[str, object] | None = None,
                       sidecars: Mapping[str, Sidecar] | None = None,
                       required: Iterable[str] = ()) -> int:
        with self._snapshot_lock, self._fence():
            existing = list_snapshots(self.path)
            if existing and seq < existing[0][0]:
                raise InvalidInput(f"{self.path}: snapshot seq {seq} is older than the newest snapshot "
                                   f"({existing[0][0]}); snapshots only move forward", field="seq")
            try:
                with self._lock:
                    self._ensure_folder()
                    unsynced, self._unsynced = self._unsynced, []
                self._sync_entries(unsynced)
                self._remove_stale_sidecars(seq, sidecars or {})
                size = write_snapshot_stream(self.path, records, kind=self.kind, key=self.key, seq=seq, ts=ts,
                                             created=created, extra=extra, sidecars=sidecars,
                                             required=required)
            except OSError as exc:
                raise snapshot_storage_error(self.path, seq, exc) from exc
            with self._lock:
                if self._last_seq is not None and seq > self._last_seq:
                    self._last_seq = seq
            try:
                self._cut_journal(seq)
            except OSError as exc:
                raise StorageError(f"snapshot {seq} of {self.path} was written, but moving the journal "
                                   f"lines it covers to an archive failed: {describe_os_error(exc)}; "
                                   f"the journal is intact") from exc
            self._prune()
        return size

    def _remove_stale_sidecars(self, seq: int, keep: Mapping[str, object]) -> None:
        """Sidecars of an earlier, interrupted write of snapshot ``seq`` that this one does not replace."""
        prefix = f"snapshot-{seq}."
        for name in os.listdir(self.path):
            if name.startswith(prefix) and name.endswith(".bin") and name[len(prefix):-4] not in keep:
                remove_quietly(self.path / name)

    def _cut_journal(self, seq: int) -> None:
        """Move the journal lines with seq <= ``seq`` into an archive segment and
        rewrite journal.jsonl with the rest, while appends may go on."""
        try:
            reader = open(self._journal, "rb")  # noqa: SIM115 - closed below, spans two locked sections
        except FileNotFoundError:
            return
        with reader:
            with self._lock:
                copied = self._journal_size(reader)
                cuts = self._cuts
            # read a chunk at a time: a journal can be far larger than what is worth holding
            offset, first, last = _cut_offset_of_file(reader, copied, seq)
            if first is None or last is None:
                return
            write_atomic(self.path / archive_name(first, last), _file_chunks(reader, 0, offset))
            tmp = self._journal.with_name(JOURNAL + ".tmp")
            fd = os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o644)
            handed_over = False
            try:
                size = write_all(fd, _file_chunks(reader, offset, copied))
                reader.seek(copied)
                # Catch up with lines appended meanwhile without holding the lock,
                # so that the locked swap below only has a few lines left to copy.
                for _round in range(4):
                    with self._lock:
                        now = self._journal_size(reader)
                        if self._cuts != cuts:
                            return  # lines copied were cut since (see below)
                    if now - copied < 65_536:
                        break
                    size += write_all(fd, (reader.read(now - copied),))
                    copied = now
                os.fsync(fd)
                with self._lock:
                    if self._cuts != cuts:
                        # cut_after took lines off the end of the journal after they were
                        # copied: leave the journal whole (the next snapshot cuts it; lines
                        # a snapshot covers are skipped when it is replayed)
                        return
                    now = self._journal_size(reader)
                    if now > copied:
                        size += write_all(fd, (reader.read(now - copied),))
                        # Some of these lines may be acknowledged already (fsynced in the
                        # old file): they must be durable here before the old file goes.
                        os.fsync(fd)
                    os.replace(tmp, self._journal)
                    if self._files.swap(self, fd):  # the old descriptor is closed
                        self._size = size
                        handed_over = True
                    # The rename is durable once the folder is fsynced: just below, or
                    # by a sync() that gets there first (before it acknowledges lines
                    # written to the new file).
                    self._unsynced.append(self.path)
                fsync_dir(self.path)
            finally:
                if not handed_over:
                    os.close(fd)
                    remove_quietly(tmp)

    def _journal_size(self, reader: BinaryIO) -> int:
        """Bytes in the journal as appends left it (call with _lock held)."""
        return self._size if self._files.is_open(self) else os.fstat(reader.fileno()).st_size

    def _prune(self) -> None:
        """Keep the newest ``keep`` snapshots; drop older ones with their sidecars,
        archive segments nothing kept needs, and leftovers of interrupted writes."""
        snapshots = list_snapshots(self.path)
        kept = {seq for seq, _path in snapshots[: self.keep]}
        if not kept:
            return
        oldest = min(kept)
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return
        for name in names:
            if name.endswith(".tmp") and name != KEY_MANIFEST + ".tmp":
                remove_quietly(self.path / name)
            elif name.startswith("snapshot-"):
                seq_text = name[len("snapshot-"):].split(".", 1)[0]
                if seq_text.isdigit() and int(seq_text) not in kept:
                    remove_quietly(self.path / name)
        for _first, last, path in list_archives(self.path):
            if last <= oldest:
                remove_quietly(path)


_CUT_CHUNK = 1 << 20  # read at a time by a journal cut (8 MiB held up to 24 MiB at once)
_NOT_FENCED = contextlib.nullcontext()


def _unfenced() -> AbstractContextManager[None]:
    return _NOT_FENCED


def _cut_offset_of_file(reader: BinaryIO, size: int, seq: int) -> tuple[int, int | None, int | None]:
    """:func:`cut_offset` of the first ``size`` bytes of the file, read a chunk at a time."""
    reader.seek(0)
    offset, first, last = 0, None, None
    pending = b""  # read from ``offset`` on, not yet passed
    read = 0
    while True:
        if read < size:
            more = reader.read(min(_CUT_CHUNK, size - read))
            read += len(more)
            pending += more
        part, part_first, part_last = cut_offset(pending, seq)
        if part_first is not None:
            first = part_first if first is None else first
            last = part_last
        offset += part
        pending = pending[part:]
        # stopped before a whole line: at the end of what is read so far, or for good
        if read >= size or b"\n" in pending:
            return offset, first, last


def _file_chunks(reader: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    """Bytes ``start`` to ``end`` of the file, a chunk at a time."""
    fd = reader.fileno()
    while start < end:
        chunk = os.pread(fd, min(_CUT_CHUNK, end - start), start)
        if not chunk:
            raise OSError(f"{reader.name}: ended at byte {start:,}, expected {end:,}")
        start += len(chunk)
        yield chunk


class MemoryStore(ActorStore):
    """The same store in RAM: journal lines and the latest snapshot, encoded and
    checked exactly as on disk. Survives close() (the runtime reuses it to
    restart or passivate an actor), not the process."""

    def __init__(self, kind: str, key: tuple[str, ...], *, keep: int = 2) -> None:
        self.kind = check_kind(kind)
        self.key = check_key(key, printable=False)
        self.keep = _check_keep(keep)
        self._lock = threading.Lock()
        self._journal = bytearray()
        self._snapshot: tuple[int, bytes, dict[str, bytes]] | None = None
        self._last_seq: int | None = None
        self._last_append = (0, 1)  # (offset, first seq) of the latest append

    @property
    def _where(self) -> str:
        return f"memory store {self.kind} {list(self.key)!r}"

    def exists(self) -> bool:
        with self._lock:
            return bool(self._journal) or self._snapshot is not None

    def recover(self) -> Recovered:
        with self._lock:
            journal = bytes(self._journal)
            snapshot = self._snapshot
        header: SnapshotHeader | None = None
        records: Sequence[bytes] = []
        sidecars: dict[str, bytes | memoryview] = {}
        if snapshot is not None:
            header, records = decode_snapshot(snapshot[1], self._where)
            sidecars = dict(snapshot[2])
            absent = [name for name in header.required if name not in sidecars]
            if absent:
                raise CorruptData(f"{self._where}: snapshot {header.seq} lacks its required sidecar(s) "
                                  f"{', '.join(absent)}")
        after = header.seq if header is not None else 0
        entries = stitch_entries(after, [scan_journal(journal, self._where).entries], self._where)
        recovered = Recovered(header, records, sidecars, entries)
        with self._lock:
            self._last_seq = recovered.last_seq
        return recovered

    def append(self, entries: Sequence[tuple[int, int, bytes]]) -> None:
        if not entries:
            return
        data = encode_entries(entries)
        with self._lock:
            if self._last_seq is not None and entries[0][0] != self._last_seq + 1:
                raise InvalidInput(f"{self._where}: appending seq {entries[0][0]} after seq "
                                   f"{self._last_seq}; journal seqs must be consecutive", field="seq")
            self._journal += data
            self._last_seq = entries[-1][0]
            self._last_append = (len(self._journal) - len(data), entries[0][0])

    @property
    def needs_recovery(self) -> bool:
        return False

    def cut_after(self, seq: int) -> None:
        with self._lock:
            if self._last_seq is not None and seq >= self._last_seq:
                return
            start, first = self._last_append
            if first - 1 <= seq:  # within the latest append: read only that
                offset = start + cut_offset(bytes(self._journal[start:]), seq)[0]
            else:
                offset = cut_offset(bytes(self._journal), seq)[0]
            del self._journal[offset:]
            self._last_seq = seq
            self._last_append = (len(self._journal), seq + 1)

    def sync(self) -> None:
        return None

    def synced_by_fs(self) -> None:
        return None

    def write_snapshot(self, seq: int, ts: int, records: Iterable[bytes], *, created: int,
                       extra: Mapping[str, object] | None = None,
                       sidecars: Mapping[str, Sidecar] | None = None,
                       required: Iterable[str] = ()) -> int:
        blobs = {name: sidecar_bytes(blob) for name, blob in (sidecars or {}).items()}
        header_line, body = encode_snapshot(self.kind, self.key, seq, ts, records, created=created,
                                            extra=extra, sidecars=blobs, required=required)
        data = b"".join([header_line, *body])
        with self._lock:
            if self._snapshot is not None and seq < self._snapshot[0]:
                raise InvalidInput(f"{self._where}: snapshot seq {seq} is older than the newest snapshot "
                                   f"({self._snapshot[0]}); snapshots only move forward", field="seq")
            self._snapshot = (seq, data, blobs)
            offset, _first, _last = cut_offset(bytes(self._journal), seq)
            del self._journal[:offset]
            start, first = self._last_append
            self._last_append = (max(0, start - offset), first)
            if self._last_seq is not None and seq > self._last_seq:
                self._last_seq = seq
        return len(data) - len(header_line)

    def disk_bytes(self) -> int:
        with self._lock:
            total = len(self._journal)
            if self._snapshot is not None:
                total += len(self._snapshot[1]) + sum(len(blob) for blob in self._snapshot[2].values())
            return total

    def close(self) -> None:
        return None


def _fsync_entry(path: Path) -> None:
    """Make ``path`` durable: a folder's entries, or a file's data. An OSError names
    ``path`` (its ``filename``)."""
    try:
        if path.is_dir():
            fsync_dir(path)
            return
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
