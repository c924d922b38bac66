"""mnemex as LangGraph's persistence: ``MnemexSaver`` (a checkpointer) and
``MnemexStore`` (a long-term memory store, LangGraph's ``BaseStore``).

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

``MnemexStore`` keeps a store's items as keyed memories of one mnemex scope
(``(app_name, user_id)``, default ``("langgraph", "store")``): an item is a memory
whose id comes from its namespace and key, whose metadata is its value (so filters
are metadata filters, on the value's top-level keys) and whose content is the text
it is indexed by. A batch's puts and deletes are one command: all or none, and
concurrent batches never interleave. With ``index={"embed": ..., "dims": ...,
"fields": [...]}`` each indexed field of an item is embedded with the caller's
model (one vector per text) and a search scores an item by the best of them
(``item.score`` is that cosine); ``ttl`` (LangGraph's TTLConfig) expires items,
refreshed on reads. Values are limited by ``config.memories.max_metadata_bytes``.

The runtime runs on trio, on the thread of its ``mnemex.Client``; LangGraph's
async methods run on asyncio. The saver's async calls are started in the runtime's
thread straight from the event loop (``Client.submit``: no worker thread, the loop
never blocks); the store's go through a worker thread (``asyncio.to_thread``), as
its embedding calls may block. A write cancelled in flight still completes, and the
cancellation is raised once it is settled.

Needs the ``langgraph`` package: ``pip install 'mnemex[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
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
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

import mnemex
from mnemex.integrations._common import settled
from mnemex.lowlevel import Blob, ChannelValue, CheckpointEntry, WriteValue

__all__ = ["MnemexSaver", "MnemexStore"]

T = TypeVar("T")


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
        self._async = client.runtime.checkpoints()  # called only in the runtime's thread (submit)

    def __repr__(self) -> str:
        return f"MnemexSaver({self.client.config.data_dir!r})"

    @classmethod
    @contextmanager
    def from_data_dir(cls, data_dir: str | os.PathLike[str] | mnemex.Config, *,
                      serde: SerializerProtocol | None = None) -> Iterator[MnemexSaver]:
        """A saver on a Client of its own, opened on ``data_dir`` (a path or a Config)
        and closed (drained, snapshotted) when the block ends, as
        ``SqliteSaver.from_conn_string`` is used. A data directory is open in one
        Client at a time: to use a store too, give both the same Client."""
        config = (data_dir if isinstance(data_dir, mnemex.Config)
                  else mnemex.Config(data_dir=os.fspath(data_dir)))
        with mnemex.Client(config) as client:
            yield cls(client, serde=serde)

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

    # -- requests: what each call asks of the checkpoints (the sync and async calls share them)
    def _get_request(self, config: RunnableConfig) -> tuple[tuple[Any, ...], dict[str, Any]]:
        configurable = _configurable(config)
        return ((_thread_id(configurable), get_checkpoint_id(config)),
                {"ns": configurable.get("checkpoint_ns", "") or ""})

    def _list_request(self, config: RunnableConfig | None, filter: dict[str, Any] | None,
                      before: RunnableConfig | None, limit: int | None
                      ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        thread_id = ns = checkpoint_id = None
        if config is not None:
            configurable = _configurable(config)
            thread_id = _thread_id(configurable)
            ns = configurable.get("checkpoint_ns")
            checkpoint_id = get_checkpoint_id(config)
        return ((thread_id,), {"ns": ns, "checkpoint_id": checkpoint_id,
                               "before": get_checkpoint_id(before) if before else None,
                               "filter": filter, "limit": limit})

    def _put_request(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                     new_versions: ChannelVersions) -> tuple[tuple[Any, ...], dict[str, Any], RunnableConfig]:
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
        return ((thread_id, checkpoint["id"], self._blob(stored)),
                {"ns": ns, "parent_id": configurable.get("checkpoint_id"), "metadata": meta,
                 "versions": checkpoint["channel_versions"], "values": new},
                _config(thread_id, ns, checkpoint["id"]))

    def _writes_request(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                        task_path: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        configurable = _configurable(config)
        checkpoint_id = configurable.get("checkpoint_id")
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise mnemex.InvalidInput("put_writes needs configurable.checkpoint_id", field="checkpoint_id")
        stored = [WriteValue(WRITES_IDX_MAP.get(channel, idx), channel, self._blob(value))
                  for idx, (channel, value) in enumerate(writes)]
        return ((_thread_id(configurable), checkpoint_id, task_id, stored),
                {"ns": configurable.get("checkpoint_ns", "") or "", "task_path": task_path})

    @staticmethod
    def _prune_request(thread_ids: Sequence[str], strategy: str) -> tuple[list[str], str]:
        if strategy not in ("keep_latest", "delete"):
            raise mnemex.InvalidInput(f"prune strategy must be 'keep_latest' or 'delete', got {strategy!r}",
                                      field="strategy")
        if isinstance(thread_ids, str):
            raise mnemex.InvalidInput("thread_ids must be a list of thread ids, not one string",
                                      field="thread_ids")
        return [_thread_id({"thread_id": t}) for t in thread_ids], strategy

    # -- the sync interface
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, or the newest of its
        thread and namespace), with its pending writes; None if there is none."""
        args, kwargs = self._get_request(config)
        entry = self._checkpoints.get(*args, **kwargs)
        return None if entry is None else self._tuple(entry)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, and id, when
        it names them) or of every thread (None); only those before ``before``,
        whose metadata has ``filter``'s values; at most ``limit``."""
        args, kwargs = self._list_request(config, filter, before, limit)
        for entry in self._checkpoints.list(*args, **kwargs):
            yield self._tuple(entry)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` (child of the checkpoint ``config`` names) with the
        channel values new at ``new_versions``; durable when this returns. Returns
        the config of the stored checkpoint."""
        args, kwargs, stored = self._put_request(config, checkpoint, metadata, new_versions)
        self._checkpoints.put(*args, **kwargs)
        return stored

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store the writes of task ``task_id`` pending on the checkpoint ``config``
        names; durable when this returns."""
        args, kwargs = self._writes_request(config, writes, task_id, task_path)
        self._checkpoints.put_writes(*args, **kwargs)

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
        threads, chosen = self._prune_request(thread_ids, strategy)
        self._checkpoints.prune(threads, "delete" if chosen == "delete" else "keep_latest")

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

    # -- the async interface: the same requests, started in the runtime's thread from
    # the event loop (no worker thread); a write runs to its end even when cancelled
    async def _read(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return await asyncio.wrap_future(self.client.submit(fn, *args, **kwargs))

    async def _write(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return await settled(asyncio.wrap_future(self.client.submit(fn, *args, **kwargs)))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        args, kwargs = self._get_request(config)
        entry = await self._read(self._async.get, *args, **kwargs)
        return None if entry is None else self._tuple(entry)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        args, kwargs = self._list_request(config, filter, before, limit)
        for entry in await self._read(self._async.list, *args, **kwargs):
            yield self._tuple(entry)

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        args, kwargs, stored = self._put_request(config, checkpoint, metadata, new_versions)
        await self._write(self._async.put, *args, **kwargs)
        return stored

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        args, kwargs = self._writes_request(config, writes, task_id, task_path)
        await self._write(self._async.put_writes, *args, **kwargs)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._write(self._async.delete_thread, _thread_id({"thread_id": thread_id}))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._write(self._async.delete_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._write(self._async.copy_thread, _thread_id({"thread_id": source_thread_id}),
                          _thread_id({"thread_id": target_thread_id}))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        threads, chosen = self._prune_request(thread_ids, strategy)
        await self._write(self._async.prune, threads, "delete" if chosen == "delete" else "keep_latest")


# -- the store ----------------------------------------------------------------------------------
def _item_id(namespace: tuple[str, ...], key: str) -> str:
    """The memory id of an item: stable, from its namespace and key."""
    digest = hashlib.sha256(json.dumps([list(namespace), key], ensure_ascii=False).encode()).hexdigest()
    return f"lg-{digest[:40]}"


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _clipped(text: str, limit: int) -> str:
    """``text`` within ``limit`` UTF-8 bytes (cut at a character)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


class _Batch:
    """A store batch checked and planned: the reads, and the puts as one write."""

    def __init__(self) -> None:
        self.puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        self.texts: list[str] = []           # to embed, in order
        self.owners: list[tuple[tuple[str, ...], str]] = []  # the item of each text
        self.queries: dict[str, list[float] | None] = {}
        self.vectors: dict[tuple[tuple[str, ...], str], list[list[float]]] = {}  # of each item, in order


class MnemexStore(BaseStore):
    """LangGraph's ``BaseStore`` on a mnemex scope (see the module docstring).

    ``client``: the ``mnemex.Client`` keeping it (the caller's; it stays open).
    ``app_name``/``user_id``: the scope holding the items. ``index``: LangGraph's
    IndexConfig (``embed``: an Embeddings, a function or a provider string; ``dims``;
    ``fields``, default ``["$"]``, the whole value); ``embedder_name`` names that
    model in the scope (its vectors are never mixed with another model's; default
    from the Embeddings' class and ``dims``). ``ttl``: LangGraph's TTLConfig
    (minutes); ``sweep_interval_minutes`` starts a sweeper thread that forgets
    expired items (``stop_ttl_sweeper``, or ``close``)."""

    supports_ttl: bool = True

    def __init__(self, client: mnemex.Client, *, app_name: str = "langgraph", user_id: str = "store",
                 index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 embedder_name: str | None = None) -> None:
        if not isinstance(client, mnemex.Client):
            raise mnemex.InvalidInput(f"MnemexStore needs a mnemex.Client, got {type(client).__name__}",
                                      field="client")
        self.client = client
        self.scope = client.scope(user_id=user_id, app_name=app_name)
        self.ttl_config = ttl
        self.index_config = dict(index) if index else None
        self.embeddings = None
        self._fields: list[tuple[str, str | list[str]]] = []
        self._vectors_of: tuple[str, int] | None = None
        if index:
            dims = index.get("dims")
            if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
                raise mnemex.InvalidInput(f"index dims must be a positive int, got {dims!r}",
                                          field="index.dims")
            self.embeddings = ensure_embeddings(index.get("embed"))
            self._fields = [(path, path if path == "$" else tokenize_path(path))
                            for path in (index.get("fields") or ["$"])]
            self._vectors_of = (embedder_name or f"langgraph:{type(self.embeddings).__name__}:{dims}", dims)
        self._content_limit = client.config.memories.max_content_bytes
        self._sweeper: threading.Thread | None = None
        self._stop_sweeper = threading.Event()
        interval = (ttl or {}).get("sweep_interval_minutes")
        if interval:
            self.start_ttl_sweeper(float(interval) * 60)

    def __repr__(self) -> str:
        return f"MnemexStore(app_name={self.scope.app_name!r}, user_id={self.scope.user_id!r})"

    # -- batches
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (GetOp, SearchOp, ListNamespacesOp, PutOp) in order of their
        results: the reads see the store as it was before the batch's puts, which are
        stored together, all or none."""
        ops = list(ops)
        plan = self._plan(ops)
        if self.embeddings is not None:
            if plan.texts:
                self._take_vectors(plan, self.embeddings.embed_documents(plan.texts))
            for query in plan.queries:
                plan.queries[query] = self.embeddings.embed_query(query)
        return self._run(ops, plan)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` for asyncio: embeddings through the model's async calls, the rest
        from a worker thread (a write cancelled in flight still completes)."""
        ops = list(ops)
        plan = self._plan(ops)
        if self.embeddings is not None:
            if plan.texts:
                self._take_vectors(plan, await self.embeddings.aembed_documents(plan.texts))
            queries = list(plan.queries)
            for query, vector in zip(queries, await asyncio.gather(
                    *(self.embeddings.aembed_query(q) for q in queries)), strict=True):
                plan.queries[query] = vector
        return await settled(asyncio.to_thread(self._run, ops, plan))

    def _plan(self, ops: Sequence[Op]) -> _Batch:
        plan = _Batch()
        for op in ops:
            if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
                raise mnemex.InvalidInput(f"unknown store operation {type(op).__name__}", field="ops")
            try:
                validate_op_namespace(op)
            except ValueError as exc:
                raise mnemex.InvalidInput(str(exc), field="namespace") from exc
            if isinstance(op, PutOp):
                if not op.namespace:
                    raise mnemex.InvalidInput("a namespace cannot be empty", field="namespace")
                if op.value is not None and not isinstance(op.value, dict):
                    raise mnemex.InvalidInput(f"a value must be a dict, got {type(op.value).__name__}",
                                              field="value")
                plan.puts[(op.namespace, op.key)] = op
            elif isinstance(op, SearchOp) and op.query and self.embeddings is not None:
                plan.queries[op.query] = None
        for (namespace, key), op in plan.puts.items():
            for text in self._texts_of(op):
                plan.texts.append(text)
                plan.owners.append((namespace, key))
        return plan

    def _texts_of(self, op: PutOp) -> list[str]:
        if op.value is None or op.index is False or self.embeddings is None:
            return []
        fields = self._fields if op.index is None else [(path, tokenize_path(path)) for path in op.index]
        texts: list[str] = []
        for _, field in fields:
            texts += [text for text in get_text_at_path(op.value, field) if text]
        return texts

    @staticmethod
    def _take_vectors(plan: _Batch, vectors: Sequence[Sequence[float]]) -> None:
        if len(vectors) != len(plan.texts):
            raise mnemex.EmbedderError(f"the store's model returned {len(vectors)} vectors for "
                                       f"{len(plan.texts)} texts")
        for owner, vector in zip(plan.owners, vectors, strict=True):
            plan.vectors.setdefault(owner, []).append(list(vector))

    def _run(self, ops: Sequence[Op], plan: _Batch) -> list[Result]:
        results: list[Result] = []
        refresh: list[str] = []
        now = datetime.now(UTC).timestamp()
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op, now, refresh))
            elif isinstance(op, SearchOp):
                results.append(self._search(op, plan, refresh))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                results.append(None)
        if plan.puts:
            self._write(plan)
        if refresh:
            self.scope.refresh_expiry(dict.fromkeys(refresh))
        return results

    def _write(self, plan: _Batch) -> None:
        vectors = plan.vectors
        memories: list[dict[str, Any]] = []
        forget: list[str] = []
        for (namespace, key), op in plan.puts.items():
            memory_id = _item_id(namespace, key)
            if op.value is None:
                forget.append(memory_id)
                continue
            texts = self._texts_of(op)
            content = "\n".join(texts) if texts else json.dumps(op.value, ensure_ascii=False, default=str)
            memory: dict[str, Any] = {
                "id": memory_id, "content": _clipped(content or key, self._content_limit) or key,
                "namespace": list(namespace), "key": key, "metadata": dict(op.value), "dedupe": False}
            if op.ttl is not None:
                memory["ttl"] = float(op.ttl) * 60
            found = vectors.get((namespace, key))
            if found:
                memory["vector"] = found[0]
                if len(found) > 1:
                    memory["vectors"] = found[1:]
            memories.append(memory)
        self.scope.put(memories, forget=forget, vectors_of=self._vectors_of)

    @staticmethod
    def _search_item(record: mnemex.MemoryRecord, score: float | None) -> SearchItem:
        return SearchItem(namespace=tuple(record.namespace), key=str(record.key), value=dict(record.metadata),
                          created_at=_utc(record.created_at), updated_at=_utc(record.timestamp), score=score)

    @staticmethod
    def _item(record: mnemex.MemoryRecord) -> Item:
        namespace = tuple(record.namespace)
        return Item(value=dict(record.metadata), key=str(record.key), namespace=namespace,
                    created_at=_utc(record.created_at), updated_at=_utc(record.timestamp))

    def _get(self, op: GetOp, now: float, refresh: list[str]) -> Item | None:
        memory_id = _item_id(op.namespace, op.key)
        try:
            record = self.scope.get(memory_id)
        except mnemex.NotFound:
            return None
        if record.expires_at is not None and record.expires_at <= now:
            return None
        if op.refresh_ttl and record.ttl is not None:
            refresh.append(memory_id)
        return self._item(record)

    def _search(self, op: SearchOp, plan: _Batch, refresh: list[str]) -> list[SearchItem]:
        if op.limit < 0 or op.offset < 0:
            raise mnemex.InvalidInput("search limit and offset must be >= 0", field="limit")
        metadata_filter = {"metadata": dict(op.filter)} if op.filter else None
        wanted = op.offset + op.limit
        found: list[SearchItem] = []
        records: list[mnemex.MemoryRecord] = []
        vector = plan.queries.get(op.query) if op.query else None
        if vector is not None and self._vectors_of is not None and wanted > 0:
            asked = min(wanted, self.client.config.memories.max_top_k)
            result = self.scope.search_vector(vector, asked, vectors_of=self._vectors_of,
                                              namespace=op.namespace_prefix, filter=metadata_filter)
            records = [hit.memory for hit in result.hits[op.offset:]]
            found = [self._search_item(hit.memory, hit.scores.get("cosine", hit.score))
                     for hit in result.hits[op.offset:]]
            if len(result.hits) < asked:
                # every matching item with a vector is among the hits: the others (not
                # indexed) come after them, unscored, as in LangGraph's own stores
                seen = {hit.memory.id for hit in result.hits}
                page = self.scope.memories_in(op.namespace_prefix, metadata_filter, limit=None)
                rest = [record for record in page.memories if record.id not in seen]
                skip = max(0, op.offset - len(result.hits))
                records += rest[skip:skip + op.limit - len(found)]
                found += [self._search_item(record, None)
                          for record in rest[skip:skip + op.limit - len(found)]]
        else:
            page = self.scope.memories_in(op.namespace_prefix, metadata_filter, limit=op.limit,
                                          offset=op.offset)
            records = list(page.memories)
            found = [self._search_item(record, None) for record in records]
        if op.refresh_ttl:
            refresh += [record.id for record in records if record.ttl is not None]
        return found

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefixes = [c.path for c in op.match_conditions or () if c.match_type == "prefix"]
        suffixes = [c.path for c in op.match_conditions or () if c.match_type == "suffix"]
        if len(prefixes) <= 1 and len(suffixes) <= 1:
            return self.scope.list_namespaces(prefixes[0] if prefixes else (),
                                              suffixes[0] if suffixes else (), max_depth=op.max_depth,
                                              limit=op.limit, offset=op.offset)
        every = self.scope.list_namespaces(limit=2**31)
        kept = [ns for ns in every
                if all(_label_match(ns, p) for p in prefixes)
                and all(_label_match(tuple(reversed(ns)), tuple(reversed(s))) for s in suffixes)]
        if op.max_depth is not None:
            kept = sorted({ns[:op.max_depth] for ns in kept})
        return kept[op.offset:op.offset + op.limit]

    # -- TTL
    def sweep_ttl(self) -> int:
        """Forget the items whose TTL has passed; how many."""
        return len(self.scope.forget_expired())

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)

    def start_ttl_sweeper(self, interval_seconds: float = 300.0) -> None:
        """Sweep expired items every ``interval_seconds`` on a daemon thread."""
        if self._sweeper is not None:
            return
        self._stop_sweeper.clear()

        def sweep() -> None:
            while not self._stop_sweeper.wait(interval_seconds):
                try:
                    self.sweep_ttl()
                except mnemex.MnemexError:
                    if self._stop_sweeper.is_set():
                        return

        self._sweeper = threading.Thread(target=sweep, name="mnemex-store-ttl", daemon=True)
        self._sweeper.start()

    def stop_ttl_sweeper(self) -> None:
        self._stop_sweeper.set()
        if self._sweeper is not None:
            self._sweeper.join()
            self._sweeper = None

    def close(self) -> None:
        """Stop the TTL sweeper (the Client stays open)."""
        self.stop_ttl_sweeper()


def _label_match(namespace: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(namespace) >= len(path) and all(p in ("*", n) for n, p in zip(namespace, path, strict=False))
