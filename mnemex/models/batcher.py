"""The one embedding path: every text mnemex embeds (memories a ref stores, queries,
sessions a scope embeds in a job) goes through an ``EmbeddingBatcher``.

It embeds in a worker thread, one call at a time, gathering the texts of every
caller waiting into one ``embed`` call of up to ``batch_size`` texts (a larger
request is cut into such calls, interleaved fairly with the others). A request the
embedder is measured to finish within ``inline_budget`` seconds (a short query to
the hashing embedder: tens of microseconds) is embedded at once in the calling task
instead: less than the thread hop would cost. A model (milliseconds per text)
always goes to the thread.

Search queries go through ``embed_queries``: an embedder whose model embeds a query
unlike a stored text (an e5 or bge model with a query prefix) has an
``embed_queries`` method, and queries are gathered into calls of their own for it;
for any other embedder a query is a text like the rest.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import trio

from mnemex.errors import EmbedderError, MnemexError
from mnemex.models.hashing import Embedder

__all__ = ["EmbeddingBatcher", "embed_checked"]

F32 = npt.NDArray[np.float32]


class _Request:
    __slots__ = ("done", "error", "is_query", "offset", "parts", "texts")

    def __init__(self, texts: list[str], is_query: bool) -> None:
        self.texts = texts
        self.is_query = is_query
        self.offset = 0
        self.parts: list[F32] = []
        self.done = trio.Event()
        self.error: BaseException | None = None


class _Rate:
    """Seconds per character, as the median of the last few calls measured. Not a
    mean: on a busy machine one call in a few dozen is preempted and reads ten or a
    hundred times slower, and a mean would send the next queries through the thread
    hop (measured: 16% of them with one core kept busy beside); the first call of a
    cold embedder is slow the same way. A real change shows after three calls."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: deque[float] = deque(maxlen=5)

    def observe(self, rate: float) -> None:
        self._last.append(rate)

    @property
    def value(self) -> float | None:
        if not self._last:
            return None
        return sorted(self._last)[(len(self._last) - 1) // 2]


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
    task of the runtime's nursery; ``embed`` may be called from any task of that run."""

    inline_budget: Final = 0.0002
    _SMALL: Final = 4

    def __init__(self, embedder: Embedder, batch_size: int) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self._queue: list[_Request] = []
        self._wake = trio.Event()
        # measured seconds per character of text, for bulk calls and for small ones
        # (queries) apart: a bulk call timed while the actors index beside it reads
        # several times slower than a lone query is
        self._per_char = _Rate()
        self._per_char_small = _Rate()
        self.calls = 0
        self.texts = 0
        # queries need calls of their own only where the model embeds them apart
        self._has_queries = callable(getattr(embedder, "embed_queries", None))

    def _observe(self, texts: Sequence[str], seconds: float) -> None:
        chars = max(1, sum(len(text) for text in texts))
        rate = seconds / chars
        if len(texts) <= self._SMALL:
            self._per_char_small.observe(rate)
        else:
            self._per_char.observe(rate)

    async def embed(self, texts: Sequence[str]) -> F32:
        """Vectors of ``texts`` to store (float32, one unit row each). EmbedderError
        when the embedder fails."""
        return await self._embed(texts, False)

    async def embed_queries(self, texts: Sequence[str]) -> F32:
        """Vectors of search queries, as ``embed`` (see the module docstring)."""
        return await self._embed(texts, self._has_queries)

    async def _embed(self, texts: Sequence[str], is_query: bool) -> F32:
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        per_char = self._per_char_small.value if len(texts) <= self._SMALL else None
        if per_char is None:
            per_char = self._per_char.value
        if per_char is not None and not self._queue and \
                per_char * sum(len(text) for text in texts) <= self.inline_budget:
            started = time.perf_counter()
            matrix = embed_checked(self.embedder, list(texts), is_query)
            self._observe(texts, time.perf_counter() - started)
            self.calls += 1
            self.texts += len(texts)
            await trio.lowlevel.checkpoint()
            return matrix
        request = _Request(list(texts), is_query)
        self._queue.append(request)
        self._wake.set()
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.parts[0] if len(request.parts) == 1 else np.concatenate(request.parts)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve embedding requests until cancelled."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._queue:
                await self._one_call()

    async def _one_call(self) -> None:
        room = self.batch_size
        taken: list[tuple[_Request, int]] = []
        texts: list[str] = []
        is_query = self._queue[0].is_query
        for request in self._queue:
            if room <= 0:
                break
            if request.is_query != is_query:
                continue
            count = min(room, len(request.texts) - request.offset)
            texts.extend(request.texts[request.offset:request.offset + count])
            taken.append((request, count))
            room -= count
        try:
            matrix, seconds = await trio.to_thread.run_sync(_embed_timed, self.embedder, texts, is_query)
        except MnemexError as error:
            for request, _ in taken:
                request.error = error
                self._finish(request)
            return
        self._observe(texts, seconds)
        self.calls += 1
        self.texts += len(texts)
        row = 0
        for request, count in taken:
            request.parts.append(matrix[row:row + count])
            row += count
            request.offset += count
            if request.offset >= len(request.texts):
                self._finish(request)

    def _finish(self, request: _Request) -> None:
        self._queue.remove(request)
        request.done.set()
