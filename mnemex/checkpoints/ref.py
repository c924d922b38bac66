"""Graph checkpoints on the runtime: ``Checkpoints``, what ``rt.checkpoints()`` hands
out. Calls about one thread go to that thread's actor; the calls about many
threads (listing every thread, deleting runs, copying, pruning) visit each."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from mnemex._host import Host
from mnemex.checkpoints.kind import CHECKPOINT_KIND
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
    PruneThread,
    PutCheckpoint,
    PutWrites,
    ThreadExport,
    Version,
    WriteValue,
)
from mnemex.errors import InvalidInput
from mnemex.persistence import find_actors

__all__ = ["Checkpoints", "get_command", "put_command", "thread_key", "writes_command"]


def _thread(thread_id: Any) -> str:
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidInput(f"thread_id must be a non-empty string, got {thread_id!r}", field="thread_id")
    return thread_id


def thread_key(thread_id: Any) -> tuple[str]:
    """The key of ``thread_id``'s actor; InvalidInput unless a non-empty string."""
    return (_thread(thread_id),)


# The commands of the calls about one thread, made where the call is made (the
# blocking Client builds them in the caller's thread and asks the kernel itself).
def put_command(checkpoint_id: str, checkpoint: Blob, *, ns: str = "", parent_id: str | None = None,
                metadata: Mapping[str, Any] | None = None, versions: Mapping[str, Version] | None = None,
                values: Iterable[ChannelValue] = ()) -> PutCheckpoint:
    return PutCheckpoint(ns=ns, checkpoint_id=checkpoint_id, parent_id=parent_id, checkpoint=checkpoint,
                         metadata=dict(metadata or {}), versions=dict(versions or {}), values=list(values))


def writes_command(checkpoint_id: str, task_id: str, writes: Iterable[WriteValue], *, ns: str = "",
                   task_path: str = "") -> PutWrites:
    return PutWrites(ns=ns, checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path,
                     writes=list(writes))


def get_command(checkpoint_id: str | None = None, *, ns: str = "") -> GetCheckpoint:
    return GetCheckpoint(ns=ns, checkpoint_id=checkpoint_id)


class Checkpoints:
    """The checkpoints of every thread: one actor per thread id, each journaling a
    put before it returns (see ``mnemex.checkpoints``)."""

    def __init__(self, host: Host, kind: str = CHECKPOINT_KIND) -> None:
        self._host = host
        self.kind = kind

    def __repr__(self) -> str:
        return f"Checkpoints(kind={self.kind!r})"

    @property
    def host(self) -> Host:
        """What carries the commands: the kernel in-process, a remote host otherwise."""
        return self._host

    async def _ask(self, thread_id: str, command: Any) -> Any:
        return await self._host.ask(self.kind, thread_key(thread_id), command)

    async def put(self, thread_id: str, checkpoint_id: str, checkpoint: Blob, *, ns: str = "",
                  parent_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                  versions: Mapping[str, Version] | None = None,
                  values: Iterable[ChannelValue] = ()) -> None:
        """Store a checkpoint (see ``PutCheckpoint``); durable when this returns."""
        await self._ask(thread_id, put_command(checkpoint_id, checkpoint, ns=ns, parent_id=parent_id,
                                               metadata=metadata, versions=versions, values=values))

    async def put_writes(self, thread_id: str, checkpoint_id: str, task_id: str,
                         writes: Iterable[WriteValue], *, ns: str = "", task_path: str = "") -> None:
        """Store writes pending on a checkpoint (see ``PutWrites``); durable when this returns."""
        await self._ask(thread_id, writes_command(checkpoint_id, task_id, writes, ns=ns, task_path=task_path))

    async def get(self, thread_id: str, checkpoint_id: str | None = None, *,
                  ns: str = "") -> CheckpointEntry | None:
        """Checkpoint ``checkpoint_id`` of namespace ``ns`` (None: the newest), or None."""
        entry: CheckpointEntry | None = await self._ask(thread_id, get_command(checkpoint_id, ns=ns))
        return entry

    async def list(self, thread_id: str | None = None, *, ns: str | None = None,
                   checkpoint_id: str | None = None, before: str | None = None,
                   filter: Mapping[str, Any] | None = None,
                   limit: int | None = None) -> list[CheckpointEntry]:
        """Checkpoints newest first (see ``ListCheckpoints``), of ``thread_id`` or, when
        None, of every thread in turn (threads sorted by id)."""
        threads = [_thread(thread_id)] if thread_id is not None else await self.threads()
        found: list[CheckpointEntry] = []
        for thread in threads:
            left = None if limit is None else limit - len(found)
            if left is not None and left <= 0 and thread_id is None:
                break
            page: CheckpointPage = await self._ask(thread, ListCheckpoints(
                ns=ns, checkpoint_id=checkpoint_id, before=before, filter=dict(filter or {}), limit=left))
            found += page.entries
        return found

    async def threads(self) -> builtins.list[str]:
        """Every thread id: those in the data directory and those loaded now, sorted."""
        keys = {key for _, key in self._host.live_keys(self.kind)}
        data_dir = self._host.config.data_dir
        if data_dir is not None:
            keys.update(location.key for location in find_actors(data_dir) if location.kind == self.kind)
        return sorted(key[0] for key in keys if len(key) == 1)

    async def delete_thread(self, thread_id: str) -> int:
        """Delete everything of a thread; how many checkpoints went."""
        deleted: CheckpointsDeleted = await self._ask(thread_id, DeleteThread())
        return deleted.count

    async def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete the checkpoints (and their writes) that runs ``run_ids`` made, in every
        thread (each thread is visited); how many went."""
        runs = list(run_ids)
        if isinstance(run_ids, str) or any(not isinstance(run, str) or not run for run in runs):
            raise InvalidInput(f"run_ids must be a list of non-empty strings, got {run_ids!r}",
                               field="run_ids")
        if not runs:
            return 0
        count = 0
        for thread in await self.threads():
            deleted: CheckpointsDeleted = await self._ask(thread, DeleteRuns(run_ids=runs))
            count += deleted.count
        return count

    async def copy_thread(self, source: str, target: str) -> None:
        """Copy every checkpoint and pending write of thread ``source`` into ``target``
        (all or none; the source is unchanged)."""
        _thread(target)
        content: ThreadExport = await self._ask(source, ExportThread())
        await self._ask(target, CopyInto(content=content))

    async def prune(self, thread_ids: Sequence[str],
                    strategy: Literal["keep_latest", "delete"] = "keep_latest") -> int:
        """Keep only the newest checkpoint of each namespace of each thread
        (``keep_latest``) or delete them all (``delete``); how many went."""
        if isinstance(thread_ids, str):
            raise InvalidInput("thread_ids must be a list of thread ids, not one string", field="thread_ids")
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(f"prune strategy must be 'keep_latest' or 'delete', got {strategy!r}",
                               field="strategy")
        threads = [_thread(thread) for thread in thread_ids]
        count = 0
        for thread in threads:
            deleted: CheckpointsDeleted = await self._ask(thread, PruneThread(strategy=strategy))
            count += deleted.count
        return count
