"""The one embedding path: every text mnemex embeds (memories a ref stores, queries,
sessions a scope embeds in a job) goes through an ``EmbeddingBatcher``.

It has two lanes, each served one call at a time in a worker thread:

* **texts to store** (``embed``, ``embed_nowait``, ``embed_each``): the texts of
  every caller waiting are gathered into one ``embed`` call of up to ``batch_size``.
  A request larger than what is left of a call is cut, and its rest goes to the
  back of the queue, so that a caller of 10,000 texts does not hold up one of 4 for
  minutes.
* **search queries** (``embed_queries``): in calls of their own, through the
  embedder's ``embed_queries`` where it has one (a model that embeds a query
  unlike a stored text: an e5 or bge model with a query prefix), beside the texts
  to store: a search does not wait behind an ingest's call (hundreds of
  milliseconds with a model). The vectors of recent queries are kept
  (``query_cache_size`` of them, see :class:`QueryCache`), so a query asked again
  is not embedded again.

The model never waits for a timer or a full batch: a call starts as soon as the one
before it ends, with whatever is queued by then. How many texts a call has matters
little to the model (the ONNX embedders cut a call into runs of texts of similar
length, see ``mnemex.models.onnx``), so small calls of many callers cost about
what one large call does. ``embed_each`` keeps the next chunk of a caller's texts
queued while it handles the one embedded, so that the model embeds one while the
actor stores the other. A text repeated in one call is embedded once.

A request the embedder is measured to finish within ``inline_budget`` seconds (a
short query to the hashing embedder: tens of microseconds) is embedded at once in
the calling task instead: less than the thread hop would cost. A model
(milliseconds per text) always goes to a thread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import trio

from mnemex.errors import EmbedderError, MnemexError
from mnemex.models.hashing import Embedder
from mnemex.models.query_cache import QueryCache

__all__ = ["EmbeddingBatcher", "PendingEmbedding", "embed_checked"]

F32 = npt.NDArray[np.float32]


class _Lane:
    """The requests waiting for one kind of call, oldest first."""

    __slots__ = ("is_query", "queue", "wake")

    def __init__(self, is_query: bool) -> None:
        self.is_query = is_query
        self.queue: list[PendingEmbedding] = []
        self.wake = trio.Event()

    def add(self, request: PendingEmbedding) -> None:
        self.queue.append(request)
        self.wake.set()

    def take(self, room: int) -> list[tuple[PendingEmbedding, int]]:
        """How many texts of each waiting request the next call embeds: the oldest
        first, as many as fit in ``room``."""
        taken: list[tuple[PendingEmbedding, int]] = []
        for request in self.queue:
            if room <= 0:
                break
            count = min(room, request.remaining)
            taken.append((request, count))
            room -= count
        return taken


class PendingEmbedding:
    """Texts handed to an ``EmbeddingBatcher`` (``embed_nowait``) and not yet
    waited for: ``await vectors()`` gives their rows, in order; ``withdraw()`` takes
    them out of the queue when they are no longer wanted."""

    __slots__ = ("_dim", "_done", "_error", "_lane", "_offset", "_out", "texts")

    def __init__(self, texts: list[str], dim: int, lane: _Lane | None) -> None:
        self.texts = texts
        self._dim = dim
        self._out: F32 | None = None  # a view of the call's rows when one call embedded them all
        self._offset = 0
        self._done = trio.Event()
        self._error: MnemexError | None = None
        self._lane = lane

    @property
    def remaining(self) -> int:
        return len(self.texts) - self._offset

    async def vectors(self) -> F32:
        """The vectors of ``texts`` (float32, one row each); EmbedderError when the
        embedder failed. Cancelling the wait withdraws what is not embedded yet."""
        try:
            await self._done.wait()
        finally:
            if not self._done.is_set():
                self.withdraw()
        if self._error is not None:
            raise self._error
        if self._out is None:  # no texts
            return np.zeros((0, self._dim), dtype=np.float32)
        return self._out

    def withdraw(self) -> None:
        """Leave the queue: what is not embedded yet will not be (a call already
        running finishes, and its rows are dropped)."""
        lane, self._lane = self._lane, None
        if lane is not None and self in lane.queue:
            lane.queue.remove(self)

    def _put(self, rows: F32) -> None:
        if self._offset == 0 and len(rows) == len(self.texts):
            self._out = rows
        else:
            if self._out is None:
                self._out = np.empty((len(self.texts), self._dim), dtype=np.float32)
            self._out[self._offset:self._offset + len(rows)] = rows
        self._offset += len(rows)
        if self._offset >= len(self.texts):
            self._finish()

    def _fail(self, error: MnemexError) -> None:
        self._error = error
        self._finish()

    def _finish(self) -> None:
        self.withdraw()
        self._done.set()


class _Rate:
    """Seconds per character, as the median of the last few calls measured. Not a
    mean: on a busy machine one call in a few dozen is preempted and reads ten or a
    hundred times slower, and a mean would send the next queries through the thread
    hop (measured: 16% of them with one core kept busy beside); the first call of a
    cold embedder is slow the same way. A real change shows after three calls."""

    __slots__ = ("_last", "value")

    def __init__(self) -> None:
        self._last: deque[float] = deque(maxlen=5)
        self.value: float | None = None
        """The median (None before the first call): read before every query, kept."""

    def observe(self, rate: float) -> None:
        last = self._last
        last.append(rate)
        self.value = sorted(last)[(len(last) - 1) // 2]


def embed_checked(embedder: Embedder, texts: list[str], is_query: bool = False) -> F32:
    """``embedder.embed(texts)`` (``embed_queries`` for queries, where the embedder
    has it) as float32 rows, checked for shape; any failure is an EmbedderError naming
    the embedder (the one place a model's exception is translated)."""
    embed = getattr(embedder, "embed_queries", embedder.embed) if is_query else embedder.embed
    try:
        matrix = np.asarray(embed(texts), dtype=np.float32)
    except MnemexError:
        raise
    except Exception as exc:
        raise EmbedderError(f"embedder {embedder.name!r} failed on {len(texts)} texts: {exc!r}") from exc
    if matrix.shape != (len(texts), embedder.dim):
        raise EmbedderError(f"embedder {embedder.name!r} returned shape {matrix.shape} for "
                            f"{len(texts)} texts of dim {embedder.dim}")
    return matrix


def _embed_timed(embedder: Embedder, texts: list[str], is_query: bool) -> tuple[F32, float]:
    started = time.perf_counter()
    matrix = embed_checked(embedder, texts, is_query)
    return matrix, time.perf_counter() - started


class EmbeddingBatcher:
    """Batched embedding beside the actors (see the module docstring). ``run`` is a
    task of the runtime's nursery; the other methods may be called from any task of
    that run. ``query_cache_size`` is how many query vectors are kept (0: none)."""

    inline_budget: Final = 0.0002
    _SMALL: Final = 4

    def __init__(self, embedder: Embedder, batch_size: int, *, query_cache_size: int = 0) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self._texts = _Lane(is_query=False)
        self._queries = _Lane(is_query=True)
        # measured seconds per character of text, for bulk calls and for small ones
        # (queries) apart: a bulk call timed while the actors index beside it reads
        # several times slower than a lone query is
        self._per_char = _Rate()
        self._per_char_small = _Rate()
        self.query_cache = QueryCache(query_cache_size)
        self.calls = 0
        self.texts = 0

    def _observe(self, texts: Sequence[str], seconds: float) -> None:
        chars = max(1, sum(map(len, texts)))
        rate = seconds / chars
        if len(texts) <= self._SMALL:
            self._per_char_small.observe(rate)
        else:
            self._per_char.observe(rate)

    async def embed(self, texts: Sequence[str]) -> F32:
        """Vectors of ``texts`` to store (float32, one unit row each). EmbedderError
        when the embedder fails."""
        return await self._request(list(texts), self._texts).vectors()

    def embed_nowait(self, texts: Sequence[str]) -> PendingEmbedding:
        """Queue ``texts`` to store without waiting for them (see PendingEmbedding)."""
        return self._request(list(texts), self._texts)

    async def embed_each(self, chunks: Sequence[Sequence[str]],
                         handle: Callable[[int, F32], Awaitable[None]]) -> None:
        """Embed each chunk of texts to store and ``await handle(index, vectors)`` for
        it, in order. While a chunk is handled, the ones after it are queued (a
        call's worth of texts at least, one chunk at least), so the model goes on
        embedding them meanwhile; when ``handle`` raises (or the caller is
        cancelled) they are withdrawn."""
        pending: deque[PendingEmbedding] = deque()
        queued = 0
        waiting = 0  # texts of the chunks in ``pending``
        try:
            for index in range(len(chunks)):
                while queued < len(chunks) and (len(pending) < 2 or
                                                waiting - len(pending[0].texts) < self.batch_size):
                    pending.append(self.embed_nowait(chunks[queued]))
                    waiting += len(pending[-1].texts)
                    queued += 1
                current = pending.popleft()
                waiting -= len(current.texts)
                await handle(index, await current.vectors())
        finally:
            for request in pending:
                request.withdraw()

    async def embed_queries(self, texts: Sequence[str]) -> F32:
        """Vectors of search queries, as ``embed`` (see the module docstring); a
        query whose vector is kept is not embedded again. Not a checkpoint when
        nothing waits (every vector kept, or the queries embedded at once in this
        task): a search's next await, its ask, is one."""
        wanted = list(texts)
        ready, rows, missing = self._queries_now(wanted)
        if ready is not None:
            return ready
        lane = self._queries
        if rows is None:
            return await self._request(wanted, lane).vectors()
        return self._kept_with(wanted, rows, missing, await self._request(missing, lane).vectors())

    def embed_queries_now(self, texts: Sequence[str]) -> F32 | None:
        """``embed_queries``' vectors when they need no wait: every one kept, or the
        missing ones measured quick to embed here (in the caller's thread, which
        may be a host's loop, not the runtime's run); None, nothing embedded,
        when they would wait for the embedding thread."""
        return self._queries_now(list(texts))[0]

    def _queries_now(self, wanted: list[str]) -> tuple[F32 | None, list[F32 | None] | None, list[str]]:
        """``(vectors, None, [])`` when they are ready here and now; else ``(None,
        rows, missing)``: the kept rows (None: no cache) and the distinct queries to
        embed in the thread."""
        cache, name, lane = self.query_cache, self.embedder.name, self._queries
        if cache.size == 0:
            if wanted and self._is_quick(wanted, lane):
                return self._embed_now(wanted, lane), None, []
            return None, None, wanted
        if len(wanted) == 1:  # (a search's usual query: what the general way below does for one)
            kept = cache.get(name, wanted[0])
            if kept is not None:
                return kept[None].copy(), None, []
            if not self._is_quick(wanted, lane):
                return None, [None], wanted
            made = self._embed_now(wanted, lane)
            cache.put(name, wanted[0], made[0])
            return made, None, []
        rows = [cache.get(name, text) for text in wanted]
        missing = [text for text, row in zip(wanted, rows, strict=True) if row is None]
        if len(missing) > 1:
            missing = list(dict.fromkeys(missing))  # (a query asked twice in one call is embedded once)
        if not missing:
            if not wanted:
                return np.zeros((0, self.embedder.dim), dtype=np.float32), None, []
            return np.stack([row for row in rows if row is not None]), None, []  # (every one is kept)
        if not self._is_quick(missing, lane):
            return None, rows, missing
        return self._kept_with(wanted, rows, missing, self._embed_now(missing, lane)), None, []

    def _kept_with(self, wanted: list[str], rows: list[F32 | None], missing: list[str], made: F32) -> F32:
        """The vectors of ``wanted``: ``rows`` where kept, the ``missing`` ones ``made``
        (now kept too)."""
        cache, name = self.query_cache, self.embedder.name
        for text, vector in zip(missing, made, strict=True):
            cache.put(name, text, vector)
        if len(missing) == len(wanted):  # each asked once, none kept: the rows as made
            return made
        found = dict(zip(missing, made, strict=True))
        return np.stack([found[text] if row is None else row for text, row in zip(wanted, rows, strict=True)])

    def _embed_now(self, texts: list[str], lane: _Lane) -> F32:
        """``texts`` embedded here and now (measured quick: see ``_is_quick``), the
        call counted and timed; raises EmbedderError."""
        started = time.perf_counter()
        matrix = embed_checked(self.embedder, texts, lane.is_query)
        self._observe(texts, time.perf_counter() - started)
        self.calls += 1
        self.texts += len(texts)
        return matrix

    def _request(self, texts: list[str], lane: _Lane) -> PendingEmbedding:
        """``texts`` queued in ``lane``, or embedded at once when they are measured to
        take less than ``inline_budget`` (or there are none)."""
        if texts and not self._is_quick(texts, lane):
            request = PendingEmbedding(texts, self.embedder.dim, lane)
            lane.add(request)
            return request
        done = PendingEmbedding(texts, self.embedder.dim, None)
        if not texts:
            done._finish()
            return done
        try:
            matrix = self._embed_now(texts, lane)
        except MnemexError as error:
            done._fail(error)
            return done
        done._put(matrix)
        return done

    def _is_quick(self, texts: list[str], lane: _Lane) -> bool:
        per_char = self._per_char_small.value if len(texts) <= self._SMALL else None
        if per_char is None:
            per_char = self._per_char.value
        return per_char is not None and not lane.queue and \
            per_char * sum(map(len, texts)) <= self.inline_budget

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve embedding requests until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._serve, self._texts)
            nursery.start_soon(self._serve, self._queries)
            task_status.started()

    async def _serve(self, lane: _Lane) -> None:
        while True:
            await lane.wake.wait()
            lane.wake = trio.Event()
            while lane.queue:
                await self._one_call(lane)

    async def _one_call(self, lane: _Lane) -> None:
        taken = lane.take(self.batch_size)
        texts = [text for request, count in taken
                 for text in request.texts[request._offset:request._offset + count]]
        distinct = list(dict.fromkeys(texts))
        try:
            matrix, seconds = await trio.to_thread.run_sync(_embed_timed, self.embedder, distinct,
                                                            lane.is_query)
        except MnemexError as error:
            for request, _ in taken:
                request._fail(error)
            return
        self._observe(distinct, seconds)
        self.calls += 1
        self.texts += len(distinct)
        if len(distinct) < len(texts):
            where = {text: row for row, text in enumerate(distinct)}
            matrix = matrix[[where[text] for text in texts]]
        row = 0
        for request, count in taken:
            request._put(matrix[row:row + count])
            row += count
        last, _ = taken[-1]
        if last.remaining and last in lane.queue:
            # cut: its rest waits behind the requests that came meanwhile
            lane.queue.remove(last)
            lane.queue.append(last)
