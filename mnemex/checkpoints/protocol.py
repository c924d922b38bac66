"""The commands and replies of a thread's checkpoint actor, and its snapshot records.

Opaque values (a checkpoint without its channel values, a channel's value, a
pending write's value) are ``Blob``s: a type tag and the bytes of the caller's
serializer, stored as they came (base64 in JSON journal and snapshot lines).
Checkpoint metadata is a JSON object, so ``ListCheckpoints`` can filter on it.
Versions are whatever the caller uses (int, float or str), compared by equality.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from mnemex._protocol import Command, JsonCodec, Reply

__all__ = [
    "Blob",
    "ChannelValue",
    "CheckpointCommand",
    "CheckpointEntry",
    "CheckpointPage",
    "CheckpointsDeleted",
    "CopyInto",
    "DeleteRuns",
    "DeleteThread",
    "ExportThread",
    "GetCheckpoint",
    "ListCheckpoints",
    "PendingWrite",
    "PruneThread",
    "PutCheckpoint",
    "PutWrites",
    "ThreadExport",
    "Version",
    "WriteValue",
    "checkpoint_codec",
]

Version = int | float | str


class Blob(msgspec.Struct, frozen=True, array_like=True):
    """A value as the caller's serializer made it: its type tag and its bytes."""

    type: str
    data: bytes


class ChannelValue(msgspec.Struct, frozen=True, array_like=True):
    """The value of ``channel`` at ``version``; ``value`` None: the channel was empty."""

    channel: str
    version: Version
    value: Blob | None = None


class WriteValue(msgspec.Struct, frozen=True, array_like=True):
    """One write of a task: its position ``idx`` (negative for the special channels
    that replace an earlier write of the task), the channel and the value."""

    idx: int
    channel: str
    value: Blob


class PendingWrite(msgspec.Struct, frozen=True, array_like=True):
    """A write pending on a checkpoint, as stored (and returned)."""

    task_id: str
    idx: int
    channel: str
    value: Blob
    task_path: str = ""


class CheckpointCommand(Command, frozen=True, kw_only=True):
    """Base of a thread's checkpoint commands; ``ns`` is the checkpoint namespace
    ("" for the root graph)."""


class PutCheckpoint(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.put"):
    """Store checkpoint ``checkpoint_id`` of namespace ``ns`` (replacing one of that
    id), child of ``parent_id``. ``versions`` are its channels' versions (where its
    values are looked up); ``values`` the channel values new in it."""

    ns: str = ""
    checkpoint_id: str
    parent_id: str | None = None
    checkpoint: Blob
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    versions: dict[str, Version] = msgspec.field(default_factory=dict)
    values: list[ChannelValue] = msgspec.field(default_factory=list)


class PutWrites(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.put_writes"):
    """Store the writes of task ``task_id`` pending on checkpoint ``checkpoint_id``.
    A write at an index the task has written already is kept as it was, but a
    special write (negative index) replaces the earlier one."""

    ns: str = ""
    checkpoint_id: str
    task_id: str
    task_path: str = ""
    writes: list[WriteValue] = msgspec.field(default_factory=list)


class GetCheckpoint(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.get"):
    """One checkpoint of ``ns``: ``checkpoint_id``, or the newest when None."""

    ns: str = ""
    checkpoint_id: str | None = None


class ListCheckpoints(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.list"):
    """Checkpoints newest first: of namespace ``ns`` (None: every namespace), only
    ``checkpoint_id`` when given, only those older than ``before``, whose metadata
    has every key of ``filter`` with an equal value; at most ``limit``."""

    ns: str | None = None
    checkpoint_id: str | None = None
    before: str | None = None
    filter: dict[str, Any] = msgspec.field(default_factory=dict)
    limit: int | None = None


class DeleteThread(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.delete_thread"):
    """Delete every checkpoint, value and write of the thread."""


class DeleteRuns(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.delete_runs"):
    """Delete the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with
    their writes (and the values no remaining checkpoint points at)."""

    run_ids: list[str] = msgspec.field(default_factory=list)


class PruneThread(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.prune"):
    """``keep_latest``: keep only the newest checkpoint of each namespace (and its
    writes); ``delete``: delete everything."""

    strategy: Literal["keep_latest", "delete"] = "keep_latest"


class ExportThread(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.export"):
    """Everything the thread holds, to copy it into another thread."""


class CheckpointEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One stored checkpoint with what it points at: its channel values (the empty
    ones left out) and its pending writes in order."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None = None
    checkpoint: Blob
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    values: list[ChannelValue] = msgspec.field(default_factory=list)
    writes: list[PendingWrite] = msgspec.field(default_factory=list)


class ThreadExport(Reply, frozen=True, kw_only=True, tag="checkpoints.export"):
    """A thread's whole content: every checkpoint (with the versions of its channels),
    every stored channel value and every pending write."""

    checkpoints: list[PutCheckpoint] = msgspec.field(default_factory=list)
    writes: list[PutWrites] = msgspec.field(default_factory=list)


class CopyInto(CheckpointCommand, frozen=True, kw_only=True, tag="checkpoints.copy_into"):
    """Store a copy of another thread's content (``ExportThread``'s reply) in this
    one, all or none; what this thread held under the same ids is replaced."""

    content: ThreadExport


class CheckpointPage(Reply, frozen=True, kw_only=True, tag="checkpoints.page"):
    entries: list[CheckpointEntry] = msgspec.field(default_factory=list)


class CheckpointsDeleted(Reply, frozen=True, kw_only=True, tag="checkpoints.deleted"):
    """How many checkpoints a delete or a prune removed."""

    count: int = 0


CheckpointCommands = (PutCheckpoint | PutWrites | GetCheckpoint | ListCheckpoints | DeleteThread
                      | DeleteRuns | PruneThread | ExportThread | CopyInto)

checkpoint_codec: JsonCodec[Any] = JsonCodec(CheckpointCommands, "checkpoint command")
