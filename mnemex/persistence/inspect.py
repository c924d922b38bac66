"""Read-only looks at one actor folder, for the CLI (``mnemex inspect``,
``mnemex replay --verify``) and for point-in-time reads. Nothing here writes: a
torn journal tail is reported, never cut."""

from __future__ import annotations

import bisect
import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mnemex.errors import CorruptData, InvalidInput, StorageError
from mnemex.persistence._files import describe_os_error, read_file
from mnemex.persistence.datadir import read_manifest
from mnemex.persistence.findings import Finding, Level
from mnemex.persistence.journal import JOURNAL, JournalEntry, audit_journal, list_archives, scan_journal
from mnemex.persistence.layout import KEY_MANIFEST, decode_key, encode_key
from mnemex.persistence.snapshot import (
    SnapshotHeader,
    damaged_snapshot_line,
    decode_header,
    decode_snapshot,
    list_snapshots,
    load_newest_snapshot,
    map_file,
    read_sidecars,
    sidecar_name,
    sidecar_problems,
)
from mnemex.persistence.store import Recovered, stitch_entries

__all__ = ["ActorInfo", "inspect_actor", "read_history", "verify_actor"]


@dataclass(frozen=True, slots=True)
class ActorInfo:
    """What an actor folder holds. Times are epoch milliseconds."""

    path: Path
    kind: str | None
    """From key.json, else from the parent folder's name."""
    key: tuple[str, ...] | None
    """From key.json, else decoded from the folder name, else from a snapshot header."""
    snapshots: list[int] = field(default_factory=list)
    """Seqs of the snapshot files kept, oldest first."""
    snapshot_seq: int | None = None
    """The newest snapshot with a readable header: its seq, record count, creation
    time and the time of the last command it includes."""
    snapshot_count: int | None = None
    snapshot_created: int | None = None
    snapshot_ts: int | None = None
    journal_first: int | None = None
    journal_last: int | None = None
    journal_lines: int = 0
    """Valid lines in journal.jsonl (a damaged line and a torn tail are not counted)."""
    archives: list[tuple[int, int]] = field(default_factory=list)
    """``(first seq, last seq)`` of each archive segment, oldest first."""
    total_bytes: int = 0
    findings: list[Finding] = field(default_factory=list)
    """Every problem :func:`verify_actor` found (empty when it was not asked to check)."""


def _identity(path: Path) -> tuple[str | None, tuple[str, ...] | None]:
    manifest = read_manifest(path)
    if manifest is not None:
        return manifest
    parent = path.parent.name
    return (parent[:-1] if parent.endswith("s") else None), decode_key(path.name)


def _read_header(path: Path) -> SnapshotHeader | None:
    try:
        with open(path, "rb") as handle:
            line = handle.readline()
        return decode_header(line.rstrip(b"\n"), str(path))
    except (OSError, CorruptData):
        return None


def _folder_bytes(path: Path) -> int:
    total = 0
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    return total


def _check_folder(path: Path) -> None:
    if not path.is_dir():
        raise InvalidInput(f"{path} is not an actor folder (no such directory)", field="path")


def inspect_actor(path: Path | str, *, verify: bool = True) -> ActorInfo:
    """A summary of the actor folder at ``path``, read without changing anything;
    with ``verify`` (the default) its ``findings`` are :func:`verify_actor`'s, which
    reads every byte of the folder."""
    path = Path(path)
    _check_folder(path)
    kind, key = _identity(path)
    snapshots = list_snapshots(path)
    newest: SnapshotHeader | None = None
    for _seq, snapshot_path in snapshots:
        newest = _read_header(snapshot_path)
        if newest is not None:
            break
    if key is None and newest is not None:
        key = newest.key
    try:
        entries, _found = audit_journal(read_file(path / JOURNAL, "journal", missing_ok=True), path / JOURNAL)
    except StorageError:
        entries = []  # verify_actor reports it
    return ActorInfo(
        path=path, kind=kind, key=key,
        snapshots=sorted(seq for seq, _path in snapshots),
        snapshot_seq=newest.seq if newest else None,
        snapshot_count=newest.count if newest else None,
        snapshot_created=newest.created if newest else None,
        snapshot_ts=newest.ts if newest else None,
        journal_first=entries[0].seq if entries else None,
        journal_last=entries[-1].seq if entries else None,
        journal_lines=len(entries),
        archives=[(first, last) for first, last, _path in list_archives(path)],
        total_bytes=_folder_bytes(path),
        findings=verify_actor(path) if verify else [],
    )


def verify_actor(path: Path | str) -> list[Finding]:
    """Every problem in the actor folder at ``path`` (empty = healthy), each naming
    its file and, where one can be told, its line: each snapshot's header, count,
    checksum and sidecars; each journal and archive line's checksum and seq
    order; and that the commands after every snapshot kept are all there. Reads
    only. A torn journal tail is a :attr:`Level.NOTE`, a damaged or missing
    sidecar a :attr:`Level.WARNING` (the snapshot loads without it) unless the
    snapshot requires it, the rest :attr:`Level.ERROR`."""
    path = Path(path)
    _check_folder(path)
    findings: list[Finding] = []
    manifest = read_manifest(path)
    manifest_path = path / KEY_MANIFEST
    if manifest is None:
        findings.append(Finding(Level.ERROR, manifest_path, None, f"{manifest_path}: missing or unreadable"))
    else:
        kind, key = manifest
        try:
            if encode_key(key) != path.name or path.parent.name != f"{kind}s":
                findings.append(Finding(Level.ERROR, manifest_path, None,
                                        f"{manifest_path}: {kind} {list(key)!r} does not belong in {path}"))
        except InvalidInput as exc:
            findings.append(Finding(Level.ERROR, manifest_path, None, f"{manifest_path}: {exc}"))

    valid_snapshots: list[int] = []
    for seq, snapshot_path in sorted(list_snapshots(path)):
        header, found = _check_snapshot(snapshot_path, seq, manifest)
        findings.extend(found)
        if header is None:
            continue
        problems = sidecar_problems(path, header)
        if not any(name in header.required for name in problems):
            valid_snapshots.append(seq)
        for name, problem in problems.items():
            sidecar_path = path / sidecar_name(seq, name)
            if name in header.required:
                findings.append(Finding(Level.ERROR, sidecar_path, None, (
                    f"{sidecar_path}: required sidecar {problem}; {snapshot_path.name} cannot be restored "
                    f"without it (recovery uses an older snapshot)")))
            else:
                findings.append(Finding(Level.WARNING, sidecar_path, None, (
                    f"{sidecar_path}: sidecar {problem}; {snapshot_path.name} loads without it and what it "
                    f"held is rebuilt from the snapshot's lines (nothing is lost)")))

    sources: list[Sequence[JournalEntry]] = []
    for first, last, archive_path in list_archives(path):
        entries, found = _audit(archive_path, is_archive=True)
        if entries and (entries[0].seq != first or entries[-1].seq != last):
            found.append(Finding(Level.ERROR, archive_path, None, (
                f"{archive_path}: holds seqs {entries[0].seq} to {entries[-1].seq}, not what its name says")))
        findings.extend(found)
        sources.append(entries)
    journal_entries, found = _audit(path / JOURNAL, is_archive=False)
    findings.extend(found)
    sources.append(journal_entries)

    # Damage inside a file is reported above; what follows checks the files join up.
    sources = [_consecutive_prefix(entries) for entries in sources]
    for start in valid_snapshots or [0]:
        try:
            stitch_entries(start, sources, f"{path} (from snapshot {start})" if start else f"{path}")
        except CorruptData as exc:
            findings.append(Finding(Level.ERROR, path, None, str(exc)))
    return findings


def _check_snapshot(path: Path, seq: int, manifest: tuple[str, tuple[str, ...]] | None,
                    ) -> tuple[SnapshotHeader | None, list[Finding]]:
    """The header of the snapshot at ``path`` if recovery could use it, and what is wrong with it."""
    try:
        data = map_file(path)
    except OSError as exc:
        return None, [Finding(Level.ERROR, path, None,
                              f"could not read snapshot {path}: {describe_os_error(exc)}")]
    try:
        header, _records = decode_snapshot(data, str(path))
    except CorruptData as exc:
        line, where = damaged_snapshot_line(data)
        return None, [Finding(Level.ERROR, path, line, f"{exc}{where}; loading skips this snapshot")]
    if header.seq != seq:
        return None, [Finding(Level.ERROR, path, 1, (
            f"{path}: line 1: header seq {header.seq} does not match the file name; loading skips this "
            f"snapshot"))]
    if manifest is not None and (header.kind, header.key) != manifest:
        return None, [Finding(Level.ERROR, path, 1, (
            f"{path}: line 1: header belongs to {header.kind} {list(header.key)!r}, not {manifest[0]} "
            f"{list(manifest[1])!r}; loading skips this snapshot"))]
    return header, []


def _consecutive_prefix(entries: Sequence[JournalEntry]) -> Sequence[JournalEntry]:
    for index in range(1, len(entries)):
        if entries[index].seq != entries[index - 1].seq + 1:
            return entries[:index]
    return entries


def _audit(path: Path, *, is_archive: bool) -> tuple[list[JournalEntry], list[Finding]]:
    try:
        data = read_file(path, "archive segment" if is_archive else "journal", missing_ok=True)
    except StorageError as exc:
        return [], [Finding(Level.ERROR, path, None, str(exc))]
    return audit_journal(data, path, is_archive=is_archive)


def _iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def read_history(path: Path | str, *, until_ms: int | None = None) -> Recovered:
    """The actor at ``path`` as it was at ``until_ms`` (epoch ms; None = now):
    the newest valid snapshot that includes nothing later, plus the archived
    and journaled commands after it up to that time. Reads only.

    Raises InvalidInput if nothing kept reaches back that far (the message says
    the oldest point kept), CorruptData if the commands needed are damaged.
    """
    path = Path(path)
    _check_folder(path)
    if until_ms is not None and (type(until_ms) is not int or until_ms < 0):
        raise InvalidInput(f"until_ms is {until_ms!r}; it must be epoch milliseconds (an int >= 0)",
                           field="until_ms")
    kind, key = _identity(path)
    headers = [header for _seq, snapshot_path in list_snapshots(path)
               if (header := _read_header(snapshot_path)) is not None]
    if (kind is None or key is None) and headers:
        kind, key = headers[0].kind, headers[0].key
    loaded = None
    sidecars: dict[str, bytes | memoryview] = {}
    skip: set[int] = set()
    while kind is not None and key is not None:
        loaded = load_newest_snapshot(path, kind, key, max_ts=until_ms, skip=skip)
        if loaded is None:
            break
        sidecars = read_sidecars(path, loaded[0])
        if all(name in sidecars for name in loaded[0].required):
            break
        skip.add(loaded[0].seq)  # it cannot be restored without what is missing
    header, records = loaded if loaded is not None else (None, [])

    sources: list[Sequence[JournalEntry]] = []
    after = header.seq if header is not None else 0
    for _first, last, archive_path in list_archives(path):
        if last > after:
            sources.append(scan_journal(read_file(archive_path, "archive"), archive_path).entries)
    # A torn tail is simply not part of the history (it was never acknowledged).
    journal_path = path / JOURNAL
    sources.append(scan_journal(read_file(journal_path, "journal", missing_ok=True), journal_path).entries)
    earliest = min((entries[0].seq for entries in sources if entries), default=None)
    if header is None and headers and earliest != 1:
        oldest = min(headers, key=lambda h: h.seq)
        if until_ms is not None and until_ms < oldest.ts:
            raise InvalidInput(f"{path} keeps nothing as old as {until_ms} ms ({_iso(until_ms)}): the "
                               f"oldest point kept is {oldest.ts} ms ({_iso(oldest.ts)}), snapshot "
                               f"{oldest.seq}", field="until_ms")
        raise CorruptData(f"{path}: every snapshot that could serve this point in time failed its checks "
                          f"and the commands before them are not kept (`mnemex inspect` says why)")
    journal = stitch_entries(after, sources, str(path))
    if until_ms is not None:
        journal = journal[: bisect.bisect_right(journal, until_ms, key=lambda entry: entry.ts)]
    paths = {} if header is None else {name: str(path / sidecar_name(header.seq, name)) for name in sidecars}
    return Recovered(header, records, sidecars if header is not None else {}, journal, paths)
