"""``ThreadCheckpoints``: the sans-io behaviour of one thread's checkpoint actor.

State, per namespace of the thread: its checkpoints by id (the checkpoint's own
blob, metadata, parent id and the versions of its channels), the newest id, each
channel value once per (channel, version) however many checkpoints point at it,
and the writes pending on each checkpoint by (task id, index). Every command is
checked whole before anything changes, so a refused one changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from mnemex._checks import check_id, check_int
from mnemex.checkpoints.protocol import (
    Blob,
    ChannelValue,
    CheckpointEntry,
    CheckpointPage,
    CheckpointsDeleted,
    CopyInto,
    DeleteRuns,
    DeleteThread,
    ExportThread,
    GetCheckpoint,
    ListCheckpoints,
    PendingWrite,
    PruneThread,
    PutCheckpoint,
    PutWrites,
    ThreadExport,
    Version,
    WriteValue,
)
from mnemex.effects import Image, Key, SnapshotData, Step
from mnemex.errors import CorruptData, InvalidInput

__all__ = ["SNAPSHOT_FORMAT", "ThreadCheckpoints", "is_checkpoint_write"]

SNAPSHOT_FORMAT: Final = 1
_ID_BYTES: Final = 1024          # thread ids, namespaces, checkpoint ids, task ids, channels
_READS = (GetCheckpoint, ListCheckpoints, ExportThread)


def is_checkpoint_write(command: Any) -> bool:
    """Whether ``command`` changes a thread (reads are not journaled)."""
    return not isinstance(command, _READS)


@dataclass(slots=True)
class _Stored:
    checkpoint: Blob
    metadata: dict[str, Any]
    parent_id: str | None
    versions: dict[str, Version]


class _ValueLine(msgspec.Struct, frozen=True, tag="checkpoints.value", tag_field="type"):
    """A snapshot line: one stored channel value."""

    ns: str
    channel: str
    version: Version
    value: Blob | None = None


_encode = msgspec.json.Encoder().encode
_decode_line = msgspec.json.Decoder(_ValueLine | PutCheckpoint | PutWrites).decode


def _check_name(value: Any, what: str, *, empty: bool = False) -> str:
    if empty and value == "":
        return ""
    checked = check_id(value, what, _ID_BYTES)
    assert checked is not None
    return checked


def _check_version(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidInput(f"{what} must be an int, a float or a string, got {value!r}", field=what)


def _check_blob(value: Any, what: str) -> None:
    if not isinstance(value, Blob) or not isinstance(value.type, str) or not isinstance(value.data, bytes):
        raise InvalidInput(f"{what} must be a Blob (type, bytes), got {value!r}", field=what)


class ThreadCheckpoints:
    """The checkpoints of one thread, in every namespace (see the module docstring)."""

    def __init__(self, key: Key) -> None:
        self.key = key
        self._checkpoints: dict[str, dict[str, _Stored]] = {}
        self._latest: dict[str, str] = {}
        self._values: dict[tuple[str, str, Version], Blob | None] = {}
        self._writes: dict[tuple[str, str], dict[tuple[str, int], PendingWrite]] = {}

    def __repr__(self) -> str:
        return f"ThreadCheckpoints({self.key!r}, {len(self)} checkpoints)"

    def __len__(self) -> int:
        return sum(len(stored) for stored in self._checkpoints.values())

    def live_bytes(self) -> int:
        """An estimate of what this thread holds while live, for the runtime's
        ``kernel.max_live_bytes``: the blobs' bytes and a constant per checkpoint,
        value and write (their records, keys and metadata)."""
        size = 2_000
        for stored in self._checkpoints.values():
            size += sum(1_000 + len(entry.checkpoint.data) for entry in stored.values())
        size += sum(300 + (len(blob.data) if blob is not None else 0) for blob in self._values.values())
        for writes in self._writes.values():
            size += sum(300 + len(write.value.data) for write in writes.values())
        return size

    # -- commands
    def handle(self, command: Any) -> Any:
        match command:
            case PutCheckpoint():
                self._check_put(command)
                self._put(command)
                return None
            case PutWrites():
                self._check_writes(command)
                return None if self._put_writes(command) else Step(None, unchanged=True)
            case GetCheckpoint():
                return self._get(command)
            case ListCheckpoints():
                return CheckpointPage(entries=list(self._list(command)))
            case DeleteThread():
                count = len(self)
                if not count and not self._values and not self._writes:
                    return Step(CheckpointsDeleted(count=0), unchanged=True)
                self._checkpoints.clear()
                self._latest.clear()
                self._values.clear()
                self._writes.clear()
                return CheckpointsDeleted(count=count)
            case DeleteRuns():
                runs = set(command.run_ids)
                for run_id in runs:
                    _check_name(run_id, "run_ids[]")
                doomed = [(ns, checkpoint_id) for ns, stored in self._checkpoints.items()
                          for checkpoint_id, one in stored.items() if one.metadata.get("run_id") in runs]
                return self._delete(doomed)
            case PruneThread():
                if command.strategy not in ("keep_latest", "delete"):
                    raise InvalidInput(f"prune strategy must be 'keep_latest' or 'delete', got "
                                       f"{command.strategy!r}", field="strategy")
                doomed = [(ns, checkpoint_id) for ns, stored in self._checkpoints.items()
                          for checkpoint_id in stored
                          if command.strategy == "delete" or checkpoint_id != self._latest[ns]]
                return self._delete(doomed, all_writes=command.strategy == "delete")
            case ExportThread():
                return self._export()
            case CopyInto():
                content = command.content
                if not isinstance(content, ThreadExport):
                    raise InvalidInput("copy_into takes a ThreadExport", field="content")
                for put in content.checkpoints:
                    self._check_put(put)
                for writes in content.writes:
                    self._check_writes(writes)
                if not content.checkpoints and not content.writes:
                    return Step(None, unchanged=True)
                for put in content.checkpoints:
                    self._put(put)
                for writes in content.writes:
                    self._put_writes(writes)
                return None
            case _:
                raise TypeError(f"a thread's checkpoints do not handle {type(command).__name__}")

    def _check_put(self, cmd: PutCheckpoint) -> None:
        _check_name(cmd.ns, "checkpoint_ns", empty=True)
        _check_name(cmd.checkpoint_id, "checkpoint_id")
        if cmd.parent_id is not None:
            _check_name(cmd.parent_id, "parent_checkpoint_id")
        _check_blob(cmd.checkpoint, "checkpoint")
        if not isinstance(cmd.metadata, dict):
            raise InvalidInput(f"metadata must be a JSON object, got {cmd.metadata!r}", field="metadata")
        for channel, version in cmd.versions.items():
            _check_name(channel, "channel_versions key")
            _check_version(version, f"channel_versions[{channel!r}]")
        for value in cmd.values:
            _check_name(value.channel, "channel")
            _check_version(value.version, f"version of channel {value.channel!r}")
            if value.value is not None:
                _check_blob(value.value, f"value of channel {value.channel!r}")

    def _put(self, cmd: PutCheckpoint) -> None:
        ns = cmd.ns
        for value in cmd.values:
            self._values[(ns, value.channel, value.version)] = value.value
        stored = self._checkpoints.setdefault(ns, {})
        stored[cmd.checkpoint_id] = _Stored(cmd.checkpoint, cmd.metadata, cmd.parent_id, dict(cmd.versions))
        latest = self._latest.get(ns)
        if latest is None or cmd.checkpoint_id > latest:
            self._latest[ns] = cmd.checkpoint_id

    def _check_writes(self, cmd: PutWrites) -> None:
        _check_name(cmd.ns, "checkpoint_ns", empty=True)
        _check_name(cmd.checkpoint_id, "checkpoint_id")
        _check_name(cmd.task_id, "task_id")
        if cmd.task_path:
            _check_name(cmd.task_path, "task_path")
        for write in cmd.writes:
            check_int(write.idx, "write index", -(2**31), 2**31)
            _check_name(write.channel, "write channel")
            _check_blob(write.value, f"value written to {write.channel!r}")

    def _put_writes(self, cmd: PutWrites) -> bool:
        """Store the writes; whether any was new."""
        pending = self._writes.setdefault((cmd.ns, cmd.checkpoint_id), {})
        changed = False
        for write in cmd.writes:
            key = (cmd.task_id, write.idx)
            if write.idx >= 0 and key in pending:
                continue
            pending[key] = PendingWrite(cmd.task_id, write.idx, write.channel, write.value, cmd.task_path)
            changed = True
        if not pending:
            del self._writes[(cmd.ns, cmd.checkpoint_id)]
        return changed

    def _delete(self, doomed: Sequence[tuple[str, str]], *, all_writes: bool = False) -> Any:
        if not doomed and not (all_writes and self._writes):
            return Step(CheckpointsDeleted(count=0), unchanged=True)
        for ns, checkpoint_id in doomed:
            del self._checkpoints[ns][checkpoint_id]
            self._writes.pop((ns, checkpoint_id), None)
        if all_writes:
            self._writes.clear()
        for ns in {ns for ns, _ in doomed}:
            if self._checkpoints[ns]:
                self._latest[ns] = max(self._checkpoints[ns])
            else:
                del self._checkpoints[ns]
                del self._latest[ns]
        referenced = {(ns, channel, version) for ns, stored in self._checkpoints.items()
                      for one in stored.values() for channel, version in one.versions.items()}
        for key in [key for key in self._values if key not in referenced]:
            del self._values[key]
        return CheckpointsDeleted(count=len(doomed))

    # -- reads
    def _entry(self, ns: str, checkpoint_id: str, stored: _Stored) -> CheckpointEntry:
        values = []
        for channel, version in stored.versions.items():
            blob = self._values.get((ns, channel, version))
            if blob is not None:
                values.append(ChannelValue(channel, version, blob))
        pending = self._writes.get((ns, checkpoint_id))
        writes = (sorted(pending.values(), key=lambda w: (w.task_path, w.task_id, w.idx))
                  if pending else [])
        return CheckpointEntry(thread_id=self.key[0], ns=ns, checkpoint_id=checkpoint_id,
                               parent_id=stored.parent_id, checkpoint=stored.checkpoint,
                               metadata=stored.metadata, values=values, writes=writes)

    def _get(self, cmd: GetCheckpoint) -> CheckpointEntry | None:
        _check_name(cmd.ns, "checkpoint_ns", empty=True)
        checkpoint_id = cmd.checkpoint_id if cmd.checkpoint_id is not None else self._latest.get(cmd.ns)
        if checkpoint_id is None:
            return None
        stored = self._checkpoints.get(cmd.ns, {}).get(checkpoint_id)
        return None if stored is None else self._entry(cmd.ns, checkpoint_id, stored)

    def _list(self, cmd: ListCheckpoints) -> Iterator[CheckpointEntry]:
        if cmd.limit is not None:
            check_int(cmd.limit, "limit", 0)
        if not isinstance(cmd.filter, dict):
            raise InvalidInput(f"filter must be a JSON object, got {cmd.filter!r}", field="filter")
        left = cmd.limit
        namespaces = (sorted(self._checkpoints) if cmd.ns is None
                      else [cmd.ns] if cmd.ns in self._checkpoints else [])
        for ns in namespaces:
            stored = self._checkpoints[ns]
            for checkpoint_id in sorted(stored, reverse=True):
                if left is not None and left <= 0:
                    return
                if cmd.checkpoint_id is not None and checkpoint_id != cmd.checkpoint_id:
                    continue
                if cmd.before is not None and checkpoint_id >= cmd.before:
                    continue
                one = stored[checkpoint_id]
                if any(one.metadata.get(k, _MISSING) != v for k, v in cmd.filter.items()):
                    continue
                if left is not None:
                    left -= 1
                yield self._entry(ns, checkpoint_id, one)

    def _export(self) -> ThreadExport:
        puts: list[PutCheckpoint] = []
        given: set[tuple[str, str, Version]] = set()
        for ns, stored in sorted(self._checkpoints.items()):
            for checkpoint_id in sorted(stored):
                one = stored[checkpoint_id]
                values = []
                for channel, version in one.versions.items():
                    key = (ns, channel, version)
                    if key in self._values and key not in given:
                        given.add(key)
                        values.append(ChannelValue(channel, version, self._values[key]))
                puts.append(PutCheckpoint(ns=ns, checkpoint_id=checkpoint_id, parent_id=one.parent_id,
                                          checkpoint=one.checkpoint, metadata=one.metadata,
                                          versions=one.versions, values=values))
        return ThreadExport(checkpoints=puts, writes=list(self._write_commands()))

    def _write_commands(self) -> Iterator[PutWrites]:
        for (ns, checkpoint_id), pending in sorted(self._writes.items()):
            by_task: dict[tuple[str, str], list[PendingWrite]] = {}
            for write in pending.values():
                by_task.setdefault((write.task_id, write.task_path), []).append(write)
            for (task_id, task_path), writes in sorted(by_task.items()):
                yield PutWrites(ns=ns, checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path,
                                writes=[_as_write_value(w) for w in writes])

    # -- persistence
    def snapshot(self) -> SnapshotData:
        """One line per stored value, per checkpoint and per task's pending writes."""
        values = [_ValueLine(ns, channel, version, blob)
                  for (ns, channel, version), blob in self._values.items()]
        puts = [PutCheckpoint(ns=ns, checkpoint_id=checkpoint_id, parent_id=one.parent_id,
                              checkpoint=one.checkpoint, metadata=one.metadata, versions=one.versions)
                for ns, stored in self._checkpoints.items() for checkpoint_id, one in stored.items()]
        writes = list(self._write_commands())

        def lines() -> Iterable[bytes]:
            for line in (*values, *puts, *writes):
                yield _encode(line)

        return SnapshotData(records=lines, extra={"format": SNAPSHOT_FORMAT, "checkpoints": len(puts)})

    @classmethod
    def restore(cls, key: Key, image: Image) -> ThreadCheckpoints:
        thread = cls(key)
        found = image.extra.get("format", SNAPSHOT_FORMAT)
        if found != SNAPSHOT_FORMAT:
            raise CorruptData(f"checkpoints of thread {key!r}: snapshot format {found!r}, "
                              f"this version reads {SNAPSHOT_FORMAT}")
        for number, line in enumerate(image.records, 1):
            try:
                record = _decode_line(line)
            except msgspec.DecodeError as exc:
                raise CorruptData(f"checkpoints of thread {key!r}: snapshot record {number}: {exc}") from exc
            match record:
                case _ValueLine():
                    thread._values[(record.ns, record.channel, record.version)] = record.value
                case PutCheckpoint():
                    thread._put(record)
                case PutWrites():
                    thread._put_writes(record)
        return thread


_MISSING: Final[Any] = object()


def _as_write_value(write: PendingWrite) -> WriteValue:
    return WriteValue(write.idx, write.channel, write.value)
