"""mnemex as LangGraph's persistence: ``MnemexSaver`` (a checkpointer) and
``MnemexStore`` (a long-term memory store).

``MnemexSaver`` is a ``BaseCheckpointSaver`` on mnemex's ``checkpoint`` actors, one
per thread: a checkpoint is stored as the bytes of the saver's serializer, each
channel value once per version (a checkpoint that changes one channel stores one
value), writes pending on a checkpoint beside it; every put is journaled before
it returns, and the thread's state is snapshotted like any actor's::

    import mnemex
    from mnemex.integrations.langgraph import MnemexSaver

    with mnemex.Client(mnemex.Config(data_dir="mnemex-data")) as client:
        graph = builder.compile(checkpointer=MnemexSaver(client))
        graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})

It implements every method of the interface, sync and async: ``get_tuple``,
``list``, ``put``, ``put_writes``, ``delete_thread``, ``delete_for_runs``,
``copy_thread`` and ``prune``. ``list`` without a thread and ``delete_for_runs``
visit every thread of the data directory.

The runtime runs on trio, on the thread of its ``mnemex.Client``; LangGraph's
async methods run on asyncio. Each async call is handed to the Client (thread-safe)
from a worker thread (``asyncio.to_thread``), so the event loop never blocks; a
write cancelled in flight still completes, and the cancellation is raised once it
is settled.

Needs the ``langgraph`` package: ``pip install 'mnemex[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Iterator, Sequence
from typing import Any, TypeVar

import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

import mnemex
from mnemex.lowlevel import Blob, ChannelValue, CheckpointEntry, WriteValue

__all__ = ["MnemexSaver"]

T = TypeVar("T")


async def _settled(call: Awaitable[T]) -> T:
    """The outcome of a write already handed to the runtime, waited for even when the
    caller is cancelled meanwhile; the cancellation is raised after it."""
    task = asyncio.ensure_future(call)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()
        raise cancelled
    return task.result()


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(configurable, dict):
        raise mnemex.InvalidInput("a checkpointer config needs a 'configurable' dict with a thread_id",
                                  field="configurable")
    return configurable


def _thread_id(configurable: dict[str, Any]) -> str:
    thread_id = configurable.get("thread_id")
    if isinstance(thread_id, int | float) and not isinstance(thread_id, bool):
        thread_id = str(thread_id)
    if not isinstance(thread_id, str) or not thread_id:
        raise mnemex.InvalidInput(f"configurable.thread_id must be a non-empty string, got {thread_id!r}",
                                  field="thread_id")
    return thread_id


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


class MnemexSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on mnemex (see the module docstring).

    ``client``: the ``mnemex.Client`` whose runtime keeps the checkpoints (the
    caller's: it stays open). ``serde``: LangGraph's serializer of the values
    (default ``JsonPlusSerializer``)."""

    def __init__(self, client: mnemex.Client, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        if not isinstance(client, mnemex.Client):
            raise mnemex.InvalidInput(f"MnemexSaver needs a mnemex.Client, got {type(client).__name__}",
                                      field="client")
        self.client = client
        self._checkpoints = client.checkpoints()

    def __repr__(self) -> str:
        return f"MnemexSaver({self.client.config.data_dir!r})"

    # -- values to and from the serializer
    def _blob(self, value: Any) -> Blob:
        type_, data = self.serde.dumps_typed(value)
        return Blob(type_, data)

    def _load(self, blob: Blob) -> Any:
        return self.serde.loads_typed((blob.type, blob.data))

    def _tuple(self, entry: CheckpointEntry) -> CheckpointTuple:
        checkpoint: Checkpoint = self._load(entry.checkpoint)
        checkpoint["channel_values"] = {value.channel: self._load(value.value)
                                        for value in entry.values if value.value is not None}
        parent = (_config(entry.thread_id, entry.ns, entry.parent_id) if entry.parent_id is not None
                  else None)
        metadata: CheckpointMetadata = dict(entry.metadata)  # type: ignore[assignment]
        return CheckpointTuple(
            config=_config(entry.thread_id, entry.ns, entry.checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=parent,
            pending_writes=[(write.task_id, write.channel, self._load(write.value))
                            for write in entry.writes],
        )

    # -- the sync interface
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, or the newest of its
        thread and namespace), with its pending writes; None if there is none."""
        configurable = _configurable(config)
        entry = self._checkpoints.get(_thread_id(configurable), get_checkpoint_id(config),
                                      ns=configurable.get("checkpoint_ns", "") or "")
        return None if entry is None else self._tuple(entry)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, and id, when
        it names them) or of every thread (None); only those before ``before``,
        whose metadata has ``filter``'s values; at most ``limit``."""
        thread_id = ns = checkpoint_id = None
        if config is not None:
            configurable = _configurable(config)
            thread_id = _thread_id(configurable)
            ns = configurable.get("checkpoint_ns")
            checkpoint_id = get_checkpoint_id(config)
        entries = self._checkpoints.list(thread_id, ns=ns, checkpoint_id=checkpoint_id,
                                         before=get_checkpoint_id(before) if before else None,
                                         filter=filter, limit=limit)
        for entry in entries:
            yield self._tuple(entry)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` (child of the checkpoint ``config`` names) with the
        channel values new at ``new_versions``; durable when this returns. Returns
        the config of the stored checkpoint."""
        configurable = _configurable(config)
        thread_id = _thread_id(configurable)
        ns = configurable.get("checkpoint_ns", "") or ""
        stored = dict(checkpoint)
        values: dict[str, Any] = stored.pop("channel_values", {})  # type: ignore[assignment]
        new = [ChannelValue(channel, version, self._blob(values[channel]) if channel in values else None)
               for channel, version in new_versions.items()]
        try:
            meta = msgspec.to_builtins(get_checkpoint_metadata(config, metadata))
        except TypeError as exc:
            raise mnemex.InvalidInput(f"checkpoint metadata must be JSON-like: {exc}",
                                      field="metadata") from exc
        self._checkpoints.put(thread_id, checkpoint["id"], self._blob(stored), ns=ns,
                              parent_id=configurable.get("checkpoint_id"), metadata=meta,
                              versions=checkpoint["channel_versions"], values=new)
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store the writes of task ``task_id`` pending on the checkpoint ``config``
        names; durable when this returns."""
        configurable = _configurable(config)
        checkpoint_id = configurable.get("checkpoint_id")
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise mnemex.InvalidInput("put_writes needs configurable.checkpoint_id", field="checkpoint_id")
        stored = [WriteValue(WRITES_IDX_MAP.get(channel, idx), channel, self._blob(value))
                  for idx, (channel, value) in enumerate(writes)]
        self._checkpoints.put_writes(_thread_id(configurable), checkpoint_id, task_id, stored,
                                     ns=configurable.get("checkpoint_ns", "") or "", task_path=task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of ``thread_id``."""
        self._checkpoints.delete_thread(_thread_id({"thread_id": thread_id}))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) of runs ``run_ids``, in every thread."""
        self._checkpoints.delete_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread into another."""
        self._checkpoints.copy_thread(_thread_id({"thread_id": source_thread_id}),
                                      _thread_id({"thread_id": target_thread_id}))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep the newest checkpoint of each namespace (and its
        writes); ``delete``: delete every checkpoint of ``thread_ids``."""
        if strategy not in ("keep_latest", "delete"):
            raise mnemex.InvalidInput(f"prune strategy must be 'keep_latest' or 'delete', got {strategy!r}",
                                      field="strategy")
        if isinstance(thread_ids, str):
            raise mnemex.InvalidInput("thread_ids must be a list of thread ids, not one string",
                                      field="thread_ids")
        self._checkpoints.prune([_thread_id({"thread_id": t}) for t in thread_ids],
                                "delete" if strategy == "delete" else "keep_latest")

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version greater than ``current``: a counter and a random tail, so that a
        branch forked from an older checkpoint never reuses a version of another."""
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(current.split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"

    # -- the async interface: the same calls, from a worker thread
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        def collect() -> list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await asyncio.to_thread(collect):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await _settled(asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await _settled(asyncio.to_thread(self.put_writes, config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await _settled(asyncio.to_thread(self.delete_thread, thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await _settled(asyncio.to_thread(self.delete_for_runs, run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await _settled(asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await _settled(asyncio.to_thread(self.prune, thread_ids, strategy=strategy))
