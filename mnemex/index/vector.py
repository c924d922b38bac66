"""VectorIndex: cosine similarity search, exact while small, HNSW once large.

Vectors are stored L2-normalised as float32 rows of one contiguous matrix (rows
of removed documents are reused), so cosine similarity is a dot product:

* **exact** while the index holds fewer than ``hnsw_threshold`` vectors: one
  matrix-vector product (about 1 ms for 20,000 x 384 on one core);
* **HNSW** past it: a usearch graph (inner product) over a quantised copy of the
  vectors (``quantization``: int8 by default, a quarter of the float32 rows; float16
  or float32 on request). The graph gives ``rescore * top_k`` candidates by their
  quantised scores, rescored from the float32 rows, so a hit's score is its exact
  cosine. Removals take a key out of the graph (its node stays, a tombstone), and
  the graph is rebuilt once tombstones pass ``tombstone_ratio`` of its elements.
  The search beam ``ef`` is ``ef_search`` for up to 10 results and grows in
  proportion beyond (``ef_search * top_k / 10``). Both beams (``ef_search`` and
  the insertion beam ``ef_construction``) are given for graphs of up to 100,000
  elements and grow as the square root of the size beyond (at 1,000,000: 3.2 times);
  a search for more results takes the larger of that and the proportional beam.

  Measured (LoCoMo-like texts and near-copies of them, hashing embedder, 384 dims,
  300 questions, recall@10 against exact, ties at the tenth score counted;
  bench/million.py's corpus, M 16, int8): the graph's walk, not the int8 ranking,
  loses the hits. At 300,000 the top 40 by exact int8 scores rescored from float32
  find 1.000 (the top 20: 0.998), and rescoring 40 to 320 of the graph's candidates
  gives the same 0.862 at ef 320: only the beam matters. 86% of the missed hits
  are copies of texts the beam never reached (the exact top 10 spans 3 texts on
  average, each with ~109 near-copies at 300,000 and ~362 at 1,000,000, which fill
  a beam of fixed width). The insertion beam helps most: at 300,000, ef_construction
  100 / 300 give 0.863 / 0.941 at ef 320, 0.916 / 0.968 at ef 640 (M 32 with 100:
  0.888 / 0.941); at 1,000,000 ef_construction 200 gives 0.753 / 0.864 / 0.898 at
  ef 320 / 1,000 / 1,500 (p50 0.44 / 1.32 / 1.97 ms on a loaded machine). A
  second walk from the query minus the first walk's top 10 found less than one walk
  of twice the beam. The graph costs ~800-860 bytes a vector (int8, M 16).

  Below ``hnsw_threshold`` searches are exact float32 products, as before: small
  scopes give the same hits whatever the graph's quantisation. From about 7,500 x 384
  (``_coarse.MIN_VALUES``) an exact search first scores every row from an int8 copy
  with a bound on its error, then takes the float32 product only of the rows whose
  bound reaches the cut, each as the full product gives it: the same hits and
  scores, in about half the time of the full product (see ``mnemex.index._coarse``).

Several exact searches of one query (a hybrid ranking's candidates, filtered
and not, and the cosines of given docs) share one product:
:meth:`VectorIndex.exact_scores` (None in HNSW mode).

Filtered search (``allowed``) runs inside the search: in exact mode over the
allowed rows only; in HNSW mode by filtering the graph's answer (asked for as
many more candidates as the allowed share is small; exact when too few are allowed), except
when few documents are allowed (at most ``exact_filter_max``, or a small share:
about 24,000 of 100,000), where an exact pass over those rows is both faster
and exact (filtered HNSW slows down as the allowed share shrinks).
Results are rescored from the stored vectors, so exact and HNSW give a document
the same score (up to float32 rounding).

Slow work: inserting into a graph costs about 0.5 ms per 384-dim vector on one
core (``ef_construction=200``), so a graph of 20,000 takes ~10 s. With
``auto_build=True`` (the default) it happens inside the ``add``/``remove`` that
crosses a threshold. An owner that must not stall (an actor) sets
``auto_build=False``, asks :meth:`VectorIndex.plan_graph` for a
:class:`GraphBuild` when :attr:`VectorIndex.wants_graph` is true, runs
``build.run()`` in a worker thread (it reads only its own copy of the vectors),
and hands the result back with :meth:`VectorIndex.adopt`, which replays the
changes made since the plan. Until then searches stay exact and correct. With a
``builder`` (a :class:`~mnemex.index.GraphBuilder`: a runtime's helper processes)
``run`` hands the work to it and waits, and builds in its own thread only when the
builder could not: usearch takes the GIL back after every vector it adds in its
calling thread, so beside a busy actor a build in a thread hardly moves.

Determinism: graphs are built with one thread (``num_threads=1``); usearch draws
node levels from its own fixed seed (``seed`` is kept for compatibility and is not
used), so the same operations give the same graph and the same results.
``num_threads>1`` builds faster but the graph then depends on thread timing.

Persistence: the raw vectors are the truth. :meth:`VectorIndex.snapshot_view` gives
a snapshot's writer the vectors (a raw file, block by block) and the graph
(usearch's own ``save``) without copying them: while the view is read, rows
it covers are not reused, removals are marked in the graph only afterwards
(searches leave them out meanwhile) and inserts wait beside the graph.
:meth:`VectorIndex.from_snapshot` loads the graph after checking that it was saved
from exactly these ids and rows with this quantisation, rebuilding otherwise (an
hnswlib graph of earlier versions is rebuilt). :meth:`VectorIndex.to_sidecar` /
:meth:`VectorIndex.from_sidecar` are the older format (the graph as one blob).

Graph builds beside the owner read the rows through such a view too. A catch-up
copies the live graph, or, when the owner gives a ``guard``
(the lock its searches hold) and a ``save_guard`` (the one snapshots saving the
graph hold), adds to the live graph in place, as many vectors per hold of the guard as
take about 10 ms: one graph in memory instead of two.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import math
import struct
import weakref
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from mnemex.errors import InvalidInput
from mnemex.index import _coarse
from mnemex.index._graph import (
    BUILD_BLOCK,
    BuiltGraph,
    GraphBuilder,
    GraphParams,
    Quantization,
    Rows,
    add_block,
    blocks_of,
    load_graph,
    new_graph,
    release_freed_memory,
    scaled,
)
from mnemex.index._select import (
    Allowed,
    allowed_ids,
    check_doc_id,
    check_top_k,
    missing,
    pairs_as_arrays,
    top_k_arrays,
    top_k_by_score,
)
from mnemex.index._sidecar import byte_view

__all__ = ["ExactScores", "GraphBuild", "RowFile", "RowFiles", "SidecarStatus", "VectorIndex", "VectorsView",
           "read_vectors_file"]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

SidecarStatus = Literal["none", "loaded", "absent", "stale", "corrupt"]
_QUANTIZATIONS: tuple[Quantization, ...] = ("i8", "f16", "f32")
_QUANTIZED_BYTES: dict[str, int] = {"i8": 1, "f16": 2, "f32": 4}

_PLAN_TOKENS = itertools.count(1)
"""Graph plans' tokens, unique in the process: a build planned by one index is never
taken for another's (a scope's instances after a passivation or a reload each count
plans, and a build beside the actor comes back to whichever instance is live)."""

_MAGIC = b"MNXHNSW1"
_SIDECAR_VERSION = 4  # 3 and before: an hnswlib graph (stale: rebuilt)
_GRAPH_FILE_VERSION = 2  # 1: hnswlib's file (stale: rebuilt)
_GRAPH_LIBRARY = "usearch"
_VECTORS_MAGIC = b"MNXVEC01"
_WRITE_BLOCK = 1024  # rows a snapshot copies at a time (1.5 MB at 384 dims; 8,192 made two 12 MB copies)
_IN_PLACE_BATCH = 32  # vectors a catch-up in place adds in its first hold of the guard
_IN_PLACE_MAX = 512  # ...and at most in any hold (a sudden stall holds searches back for one hold of these)
_IN_PLACE_HOLD = 0.01  # seconds a hold aims at: the batch grows or shrinks towards it
_MIN_ROWS = 1
# A catch-up goes to the builder only while the live graph is at most this large: the
# graph goes there and back as usearch's files, and usearch's save and load hold the
# GIL, every actor of the process waiting (measured at 100,000 x 384, int8, M 16:
# 50-72 ms to save, 54-87 ms to load). Past it a catch-up adds to the live graph in
# this thread (in place, a few milliseconds per hold), slower beside busy actors but
# never stalling them; a fresh build always goes to the builder (one load at its end).
_BUILDER_BASE_MAX = 250_000
_VERIFY_CHUNK = 8192
_GATHER_BLOCK = 1024
# Rows searches may read through a row file's mapping between two lettings-go of its
# pages: each read maps up to 64 KB around it (the kernel's fault-around), so at most
# ~256 MB come back into the process meanwhile.
_SETTLE_READS = 4096
_CRC_BLOCK = 16_384  # rows read at a time to check the rows against a graph file's meta
_MAX_EF = 4096


class RowFile(Protocol):
    """Where one index keeps its float32 rows once they are many: arrays backed by a
    file (``mnemex.persistence.rowfiles``), whose pages may leave the process and come
    back from the page cache when read. Either a file its owner made for them, which
    ``grows``, or a snapshot's file the rows were restored from in place, which does
    not (the first growth moves them: to a row file of the first kind, or memory)."""

    @property
    def grows(self) -> bool:
        """Whether :meth:`grow` can give the rows room."""
        ...

    def grow(self, rows: F32, used: int, capacity: int) -> F32 | None:
        """A writable C-ordered ``(capacity, dim)`` float32 array holding ``rows[:used]``
        first, or None when it cannot be made (the index then grows in memory). Arrays
        given earlier stay valid (readers in other threads may hold them)."""
        ...

    def will_write(self, rows: F32, which: I64) -> None:
        """Rows ``which`` of ``rows`` are about to be written (before any settle may
        let their pages go: one of a snapshot's file keeps its pages written)."""
        ...

    def settle(self, rows: F32, start: int = 0, stop: int | None = None, *, written: bool = False) -> None:
        """Rows ``[start, stop)`` of ``rows`` (None: to the end) were read in bulk, or
        ``written``: their pages may leave the process (nothing is lost; written ones
        go to the disk's writeback). Nothing happens unless ``rows`` is one of this
        file's arrays. May be called from any thread."""
        ...

    def read(self, rows: F32, which: I64) -> F32 | None:
        """Rows ``which`` of ``rows`` (one of this file's arrays), read from the file
        without mapping their pages into the process (a search's few rows); None when
        they are to be read from the array."""
        ...


class RowFiles(Protocol):
    """Opens a :class:`RowFile` for an index whose rows reach ``min_bytes``."""

    @property
    def min_bytes(self) -> int:
        """Bytes of rows (capacity included) from which an index keeps them in a file."""
        ...

    def open(self, dim: int) -> RowFile:
        """A row file for one index of ``dim`` dimensions (its first ``grow`` makes it)."""
        ...


@dataclass(slots=True)
class GraphBuild:
    """A graph to build beside the index: ``run()`` may go to a worker thread, then
    :meth:`VectorIndex.adopt` attaches the result. ``token`` ties it to the plan that
    made it. A fresh build reads the index's rows through a view (no copy: rows it
    reads are not reused until it is done); a catch-up copies the live graph (one
    more graph in memory, not two) or adds to it in place, and adds the deferred
    vectors, read through the same view a block at a time (:class:`_RowsOf`)."""

    token: int
    ids: I64
    vectors: F32 | Rows | None
    params: GraphParams
    view: VectorsView | None = field(default=None, repr=False)
    graph: Any = field(default=None, repr=False)
    base: Any = field(default=None, repr=False)
    """For a catch-up: the live graph, cloned by ``run`` before ``ids`` are added."""
    base_labels: frozenset[int] = frozenset()
    base_tombstones: frozenset[int] = frozenset()
    guard: AbstractContextManager[Any] | None = field(default=None, repr=False)
    """For a catch-up in place: the lock searches of the live graph hold."""
    save_guard: AbstractContextManager[Any] | None = field(default=None, repr=False)
    """...and the one a snapshot saving it holds."""
    current: Callable[[], int] | None = field(default=None, repr=False)
    """The index's newest plan token (an in-place catch-up stops once it is stale)."""
    clock: Callable[[], float] | None = field(default=None, repr=False)
    """Seconds, for a catch-up in place to size its holds by (None: _IN_PLACE_BATCH each)."""
    stopping: bool = False
    """Set by :meth:`stop` (from another thread: a plain attribute, read between
    blocks): ``run`` ends at its next block, with no graph."""
    builder: GraphBuilder | None = field(default=None, repr=False)
    """Where the graph is built, when not in ``run``'s own thread."""
    built: BuiltGraph | None = field(default=None, repr=False)
    """What ``builder`` made, loaded by :meth:`VectorIndex.adopt` (instead of ``graph``)."""
    _stop_builder: Callable[[], None] | None = field(default=None, init=False, repr=False)

    def stop(self) -> None:
        """Ask ``run`` (in another thread) to end early, with no graph, once the block it
        is adding is in (a closing runtime waits for that rather than exit with a
        thread inside usearch, which aborts the process); a builder's work is stopped
        at once."""
        self.stopping = True
        stop = self._stop_builder
        if stop is not None:
            stop()

    def _stopping(self) -> bool:
        return self.stopping

    def _started(self, stop: Callable[[], None] | None) -> None:
        self._stop_builder = stop
        if stop is not None and self.stopping:
            stop()

    def run(self) -> GraphBuild:
        """Build the graph (slow: about 0.1-0.5 ms per vector per thread); returns self."""
        try:
            if self.graph is None and self.builder is not None and not self.stopping and (
                    self.base is None or len(self.base) <= _BUILDER_BASE_MAX):
                self.built = self._run_in_builder()
                if self.built is not None or self.stopping:
                    self.base = None
                    return self
            if self.graph is None and not self.stopping:
                if self.base is None:
                    assert self.view is not None
                    self.graph = _build_graph(self.view, self.params, self._stopping)
                elif self.guard is not None:
                    assert self.vectors is not None
                    self.graph = self._add_in_place()
                    self.base = None
                else:
                    assert self.vectors is not None
                    self.graph = _extend_graph(self.base, self.ids, self.vectors, self.params, self._stopping)
                    self.base = None
        finally:
            if self.view is not None:
                self.view.release()
                self.view = None
        return self

    def _run_in_builder(self) -> BuiltGraph | None:
        """The graph, made by ``builder``; None when stopped, or when the builder could
        not (``run`` then builds it in this thread: the same graph)."""
        assert self.builder is not None
        if self.base is None:
            assert self.view is not None
            count, blocks = len(self.view.doc_ids), self.view.blocks()
        else:
            assert self.vectors is not None
            count, blocks = len(self.ids), blocks_of(self.ids, self.vectors)
        return self.builder.build(self.params, count, self._unless_stale(blocks),
                                  base=self._save_base if self.base is not None else None,
                                  started=self._started)

    def _unless_stale(self, blocks: Iterator[tuple[I64, F32]]) -> Iterator[tuple[I64, F32]]:
        """``blocks``, but a build whose plan a newer one replaced is stopped between
        them (its graph would not be adopted)."""
        for block in blocks:
            if self.current is not None and self.current() != self.token:
                self.stop()
            yield block

    def _save_base(self, path: str) -> None:
        """The live graph written at ``path`` for the builder (apart from a catch-up
        adding to it in place, as a snapshot saving it is)."""
        with self.save_guard if self.save_guard is not None else contextlib.nullcontext():
            self.base.save(path)

    def _add_in_place(self) -> Any:
        """The live graph with ``ids`` added, a batch at a time under the guard (a
        search waits for one batch at most, ~10 ms); None when the plan went stale."""
        graph, guard, saving, vectors = self.base, self.guard, self.save_guard, self.vectors
        assert guard is not None and saving is not None and vectors is not None
        # Each hold adds as many vectors as take about _IN_PLACE_HOLD, measured as it
        # goes: a hold of a few vectors spends more time getting the GIL back from a busy
        # actor after usearch's call than adding them, which left the graph far behind a
        # fast ingest (the order of the adds, so the graph, is the same whatever the size).
        clock = self.clock
        size, start = _IN_PLACE_BATCH, 0
        while start < len(self.ids):
            if (self.current is not None and self.current() != self.token) or self.stopping:
                return None  # a newer plan covers these, or the runtime is closing
            began = clock() if clock is not None else 0.0
            batch = slice(start, start + size)
            block = vectors[batch]  # (read before the hold: searches wait only for the adds)
            with saving, guard:
                add_block(graph, self.ids[batch], block, self.params)
            start += size
            if clock is not None:
                took = max(clock() - began, 1e-6)
                size = max(_IN_PLACE_BATCH, min(_IN_PLACE_MAX, 2 * size, round(size * _IN_PLACE_HOLD / took)))
        return graph


class VectorIndex:
    """Cosine-similarity index over L2-normalised float32 vectors of ``dim``
    dimensions, keyed by int doc ids. See the module docstring for the modes.

    Memory: 4 * dim bytes per vector for the matrix, plus, in HNSW mode, the
    graph's quantised copy (dim bytes in int8) and about 8 * m + 16 bytes of links
    per element, and a second copy of the deferred vectors (``defer_inserts``).
    """

    # slots: one index per live scope, with more attributes than Python shares a
    # dict's keys for (30): each would carry a dict of its own (~1.6 KB)
    __slots__ = (
        "_builder",
        "_clock",
        "_coarse",
        "_count",
        "_filter_crossover",
        "_free",
        "_free_later",
        "_graph",
        "_graph_size",
        "_guard",
        "_high",
        "_in_place",
        "_marks_later",
        "_params",
        "_pending",
        "_pending_block",
        "_plan_token",
        "_reads",
        "_row_file",
        "_row_files",
        "_row_ids",
        "_row_of",
        "_rows",
        "_save_guard",
        "_tombstones",
        "_touched",
        "_views",
        "auto_build",
        "catch_up_min",
        "catch_up_share",
        "defer_inserts",
        "dim",
        "ef_search",
        "exact_filter_max",
        "hnsw_threshold",
        "rescore",
        "sidecar_status",
        "tombstone_ratio",
    )

    def __init__(self, dim: int, *, hnsw_threshold: int = 20_000, m: int = 16,
                 ef_construction: int = 200, ef_search: int = 320, tombstone_ratio: float = 0.2,
                 exact_filter_max: int = 4096, seed: int = 100, num_threads: int = 1,
                 auto_build: bool = True, defer_inserts: bool = False, catch_up_min: int = 1024,
                 catch_up_share: float = 0.05, guard: AbstractContextManager[Any] | None = None,
                 save_guard: AbstractContextManager[Any] | None = None, quantization: Quantization = "i8",
                 rescore: int = 4, clock: Callable[[], float] | None = None,
                 builder: GraphBuilder | None = None, row_files: RowFiles | None = None) -> None:
        for name, value, low in (("dim", dim, 1), ("hnsw_threshold", hnsw_threshold, 1), ("m", m, 2),
                                 ("ef_construction", ef_construction, 1), ("ef_search", ef_search, 1),
                                 ("exact_filter_max", exact_filter_max, 0), ("seed", seed, 0),
                                 ("num_threads", num_threads, 1), ("rescore", rescore, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidInput(f"{name} is {value!r}; it must be an int >= {low}", field=name)
        if not (math.isfinite(tombstone_ratio) and 0 < tombstone_ratio < 1):
            raise InvalidInput(f"tombstone_ratio is {tombstone_ratio}; it must be in (0, 1)",
                               field="tombstone_ratio")
        if quantization not in _QUANTIZATIONS:
            raise InvalidInput(f"quantization is {quantization!r}; it must be one of {_QUANTIZATIONS}",
                               field="quantization")
        self.dim = dim
        self.rescore = rescore
        self.hnsw_threshold = hnsw_threshold
        self.ef_search = ef_search
        self.tombstone_ratio = float(tombstone_ratio)
        self.exact_filter_max = exact_filter_max
        self.auto_build = auto_build
        self.defer_inserts = defer_inserts
        self.catch_up_min = catch_up_min
        self.catch_up_share = catch_up_share
        # Filtered HNSW costs about 0.8 ms / (share of documents allowed) at 100,000 x 384,
        # an exact pass over the allowed rows about 0.14 us per row: exact wins while
        # allowed**2 <= _filter_crossover * len(self) (about 24,000 allowed of 100,000).
        self._filter_crossover = 6000
        self._params = GraphParams(dim, m, ef_construction, seed, num_threads, quantization)
        self._builder = builder
        # past ``row_files.min_bytes`` the rows live in a file of its making, mapped
        # (their pages leave the process after bulk writes and reads): see ``_grow_rows``
        self._row_files = row_files
        self._row_file: RowFile | None = None  # set exactly while the rows are the file's
        self._reads = 0  # rows searches read through the row file's mapping since it was settled
        self._rows = np.zeros((0, dim), dtype=np.float32)
        self._row_ids = np.zeros(0, dtype=np.int64)         # doc id per row, -1 when free
        self._row_of = np.zeros(0, dtype=np.int64)          # row per doc id, -1 when absent
        self._free: list[int] = []
        self._high = 0                                      # rows ever used: [0, high)
        self._count = 0
        self._graph: Any = None
        self._coarse: _coarse.CoarseScan | None = None     # the rows' int8 copy for exact_scores
        self._graph_size = 0                                # elements in the graph, tombstones included
        self._tombstones: set[int] = set()
        self._plan_token = 0
        self._touched: set[int] | None = None               # ids changed since the live plan
        self._pending: dict[int, None] = {}                 # live docs not in the graph yet (deferred)
        self._pending_block: _PendingBlock | None = None    # their vectors, contiguous; None: to rebuild
        self._views: list[weakref.ref[VectorsView]] = []   # snapshots being written from this index
        self._free_later: list[int] = []                    # rows freed while a view reads them
        self._marks_later: list[int] = []                   # graph tombstones to mark once no view reads it
        # A lock shared with builder threads (given by an owner that runs builds beside
        # it): with one, a catch-up adds to the live graph in place, in small batches
        # between searches, instead of cloning it (one graph in memory, not two).
        # ``save_guard`` keeps such a build and a snapshot saving the graph apart (searches
        # go on while the graph is saved; the build waits).
        self._guard: AbstractContextManager[Any] = guard if guard is not None else contextlib.nullcontext()
        self._save_guard: AbstractContextManager[Any] = (save_guard if save_guard is not None
                                                         else contextlib.nullcontext())
        self._in_place = guard is not None and save_guard is not None
        # seconds (a steady clock), by which a catch-up in place sizes its holds of ``guard``
        self._clock = clock
        self.sidecar_status: SidecarStatus = "none"

    # -- reading ---------------------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    def __contains__(self, doc_id: object) -> bool:
        if isinstance(doc_id, bool) or not isinstance(doc_id, int | np.integer):
            return False
        i = int(doc_id)
        return 0 <= i < len(self._row_of) and self._row_of[i] >= 0

    def holds(self, doc_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """For each of ``doc_ids``, whether it has a vector here (``in``, for many)."""
        inside = (doc_ids >= 0) & (doc_ids < len(self._row_of))
        held = np.zeros(len(doc_ids), dtype=np.bool_)
        held[inside] = self._row_of[doc_ids[inside]] >= 0
        return held

    @property
    def mode(self) -> Literal["exact", "hnsw"]:
        return "hnsw" if self._graph is not None else "exact"

    @property
    def tombstones(self) -> int:
        return len(self._tombstones)

    @property
    def bytes_per_vector(self) -> int:
        """About what one vector costs in this process: its float32 row (unless the rows
        live in a row file), and in HNSW mode the graph's quantised copy and its links
        (``2 * m`` on the base layer)."""
        row = 4 * self.dim if self._row_file is None else 0  # (a row file's pages are the page cache's)
        if self._graph is None:
            return row
        return row + _QUANTIZED_BYTES[self._params.quantization] * self.dim + 8 * self._params.m + 16

    @property
    def coarse_bytes(self) -> int:
        """What the int8 copy of the rows holds now (0 when there is none)."""
        coarse = self._coarse  # (a search beside the actor may be making it)
        return coarse.nbytes if coarse is not None else 0

    @property
    def pending(self) -> int:
        """Vectors searched exactly until the graph takes them in (``defer_inserts``)."""
        return len(self._pending)

    @property
    def wants_graph(self) -> bool:
        """Whether a graph should be (re)built or caught up: the index passed
        ``hnsw_threshold`` without one, its tombstones passed ``tombstone_ratio``, or
        deferred inserts passed ``max(catch_up_min, catch_up_share * size)``."""
        if self._graph is None:
            return self._count >= self.hnsw_threshold
        if len(self._tombstones) > self.tombstone_ratio * max(1, self._graph_size):
            return True
        return len(self._pending) >= max(self.catch_up_min, self.catch_up_share * self._count)

    def doc_ids(self) -> list[int]:
        """Every indexed doc id, ascending."""
        ids: list[int] = self._sorted_ids().tolist()
        return ids

    def _sorted_ids(self) -> I64:
        ids = self._row_ids[: self._high]
        return np.sort(ids[ids >= 0])

    def vector(self, doc_id: int) -> F32:
        """A copy of the stored (normalised) vector of *doc_id*."""
        return np.array(self._rows[self._row(doc_id)], dtype=np.float32)

    def vectors(self, doc_ids: Sequence[int] | npt.NDArray[np.int64]) -> F32:
        """A copy of the stored (normalised) vectors of *doc_ids*, one row each, in one
        gather (in a row file: read from it, as a search's few rows)."""
        ids = np.asarray(doc_ids, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self._row_of) or (self._row_of[ids] < 0).any()):
            raise missing(next(int(i) for i in ids if int(i) not in self), "vector index")
        return self._few_rows(self._row_of[ids]).reshape(len(ids), self.dim)

    def items(self) -> Iterator[tuple[int, F32]]:
        """(doc_id, normalised vector) for every document, ascending by id."""
        for doc_id in self.doc_ids():
            yield doc_id, self._rows[self._row_of[doc_id]].copy()

    # -- changing --------------------------------------------------------------------
    def add(self, doc_id: int, vector: npt.ArrayLike) -> None:
        """Index *vector* (any non-zero scale; stored normalised) as *doc_id*."""
        self.add_many([doc_id], self._as_matrix(vector, 1))

    def add_many(self, doc_ids: Sequence[int] | I64, vectors: npt.ArrayLike) -> None:
        """Index several vectors at once (one graph insertion batch in HNSW mode)."""
        if isinstance(doc_ids, np.ndarray) and doc_ids.dtype.kind in "iu" and doc_ids.ndim == 1:
            id_array = doc_ids.astype(np.int64)
            if len(id_array) and int(id_array.min()) < 0:
                check_doc_id(int(id_array.min()))
        else:
            id_array = np.array([check_doc_id(d) for d in doc_ids], dtype=np.int64)
        matrix = self._as_matrix(vectors, len(id_array))
        if len(id_array) == 0:
            return
        if len(np.unique(id_array)) != len(id_array):
            raise InvalidInput("doc_ids repeat within one add_many", field="doc_ids")
        known = id_array[id_array < len(self._row_of)]
        present = known[self._row_of[known] >= 0]
        if len(present):
            raise InvalidInput(f"doc {int(present[0])} is already in the vector index; use update",
                               field="doc_id")
        self._ensure_id_capacity(int(id_array.max()) + 1)
        row_array = self._take_rows(len(id_array))
        ids = id_array.tolist()
        if self._row_file is not None:
            self._row_file.will_write(self._rows, row_array)
        self._rows[row_array] = matrix
        _let_rows_go(self._row_file, self._rows, row_array, written=True)
        if self._coarse is not None:
            self._coarse.stale(row_array)
        self._row_ids[row_array] = id_array
        self._row_of[id_array] = row_array
        self._count += len(ids)
        if self._touched is not None:
            self._touched.update(ids)
        if self._graph is not None:
            if self.defer_inserts or self._viewed():
                self._pending.update(dict.fromkeys(ids))
                if self._pending_block is not None:
                    self._pending_block.append(id_array, matrix)
            else:
                # Every live doc is in the graph, so these are new labels or tombstones.
                self._graph_insert(id_array, matrix, sum(1 for d in ids if d not in self._tombstones))
        self._maybe_build()

    def remove(self, doc_id: int) -> None:
        """Forget *doc_id*; NotFound when it is not indexed."""
        row = self._row(doc_id)
        doc_id = int(doc_id)
        viewed = self._viewed()
        self._row_ids[row] = -1
        self._row_of[doc_id] = -1
        # a row is reused only once no snapshot being written reads it
        (self._free_later if viewed else self._free).append(row)
        self._count -= 1
        if self._touched is not None:
            self._touched.add(doc_id)
        if self._graph is not None:
            if doc_id in self._pending:
                # A pending doc is no live label of the graph (new, or its old label
                # already a tombstone): nothing to mark.
                del self._pending[doc_id]
                self._pending_block = None
                self._maybe_build()
                return
            if viewed:
                self._marks_later.append(doc_id)  # searches leave it out meanwhile
            else:
                with self._guard:
                    self._graph.remove(doc_id)
            self._tombstones.add(doc_id)
        self._maybe_build()

    def update(self, doc_id: int, vector: npt.ArrayLike) -> None:
        """Replace the vector of *doc_id* (remove, then add)."""
        self._row(doc_id)
        matrix = self._as_matrix(vector, 1)
        self.remove(doc_id)
        self.add_many([doc_id], matrix)

    # -- searching -------------------------------------------------------------------
    def search(self, vector: npt.ArrayLike, top_k: int = 10,
               allowed: Allowed = None) -> list[tuple[int, float]]:
        """The top_k documents by cosine similarity to *vector*, best first (equal
        scores by lower id), as (doc_id, cosine). ``allowed`` filters inside the
        search. Exact below the HNSW threshold, approximate above it."""
        top_k = check_top_k(top_k)
        query = self._as_query(vector)
        if self._count == 0:
            return []
        self._viewed()
        if allowed is not None:
            ids = allowed_ids(allowed)
            ids = ids[ids < len(self._row_of)]
            rows = self._row_of[ids]
            rows = rows[rows >= 0]
            if len(rows) == 0:
                return []
            if self._graph is None or self._filter_is_cheaper_exact(len(rows)):
                return self._exact_rows(query, rows, top_k)
            mask = np.zeros(len(self._row_of), dtype=np.bool_)
            mask[ids] = True
            return self._with_pending(query, top_k, self._graph_search(query, top_k, len(rows), mask), mask)
        if self._graph is None:
            if self._coarse_due():  # through the coarse pass (exact_scores)
                return self._coarse_scores(query).search(top_k)
            return self._exact_all(query, top_k)
        return self._with_pending(query, top_k, self._graph_search(query, top_k, self._count, None), None)

    def search_arrays(self, vector: npt.ArrayLike, top_k: int = 10,
                      allowed: Allowed = None) -> tuple[I64, F64]:
        """:meth:`search`'s hits as two arrays: the doc ids and their cosines (float64),
        best first. A search of every vector of a small exact index (one product, no
        coarse pass) makes them as arrays; any other takes :meth:`search`'s way."""
        if allowed is None and self._graph is None and self._count and not self._coarse_due():
            top_k = check_top_k(top_k)
            query = self._as_query(vector)
            self._viewed()
            return self._top_rows_arrays(self._rows[: self._high] @ query, top_k)
        return pairs_as_arrays(self.search(vector, top_k, allowed))

    def exact_scores(self, vector: npt.ArrayLike) -> ExactScores | None:
        """The cosine of *vector* to every stored vector, in one product, for several
        exact searches of one query (see :class:`ExactScores`); None in HNSW mode,
        where a search reads the graph instead of every vector (a hybrid search reads
        the rest from the graph and a few rows: ``ranking.NAMED_GATHERED``)."""
        query = self._as_query(vector)
        if self._graph is not None:
            return None
        self._viewed()
        if not self._coarse_due():
            self._coarse = None  # (a scope that shrank)
            return ExactScores(self, self._rows[: self._high] @ query)
        return self._coarse_scores(query)

    def exact_scores_many(self, vectors: Sequence[npt.ArrayLike]) -> list[ExactScores] | None:
        """:meth:`exact_scores` of each of ``vectors`` (the same scores, bounds and
        results), made in one coarse pass over the int8 rows for all of them: several
        searches of one scope asked at once share the reading of the rows. None unless
        the index scores a query by the coarse pass (exact mode, from
        ``_coarse.MIN_VALUES`` rows times dimensions): the rest gains nothing."""
        queries = [self._as_query(vector) for vector in vectors]
        if not self.takes_coarse_pass or not queries:
            return None
        self._viewed()
        every = self._coarse_scan().scan_many(self._rows, self._high, queries)
        return [ExactScores(self, None, query=query, bounds=bounds)
                for query, bounds in zip(queries, every, strict=True)]

    @property
    def takes_coarse_pass(self) -> bool:
        """Whether :meth:`exact_scores` scores a query by the coarse int8 pass now
        (exact mode, from ``_coarse.MIN_VALUES`` rows times dimensions)."""
        return self._graph is None and self._coarse_due()

    def _coarse_due(self) -> bool:
        """Whether an exact search scores the rows by the coarse int8 pass (from
        ``_coarse.MIN_VALUES`` rows times dimensions) rather than the full product."""
        return self._high * self.dim >= _coarse.MIN_VALUES

    def _coarse_scores(self, query: F32) -> ExactScores:
        """``query``'s scores by a coarse int8 pass with a bound on its error; the
        float32 product only over the rows that could be among the best
        (mnemex.index._coarse). The int8 copy is made on first need and let go when the
        rows move to another array or a graph takes over."""
        bounds = self._coarse_scan().scan(self._rows, self._high, query)
        return ExactScores(self, None, query=query, bounds=bounds)

    def _coarse_scan(self) -> _coarse.CoarseScan:
        """The int8 copy of the rows, made on first need."""
        scan = self._coarse
        if scan is None:
            # (packing reads every row: in a row file, their pages go block by block)
            scan = self._coarse = _coarse.CoarseScan(
                self.dim, settle=self._row_file.settle if self._row_file is not None else None)
        return scan

    def _with_pending(self, query: F32, top_k: int, found: list[tuple[int, float]],
                      allowed: npt.NDArray[np.bool_] | None) -> list[tuple[int, float]]:
        """Graph results merged with an exact pass over the deferred vectors."""
        if not self._pending:
            return found
        ids, matrix = self._pending_vectors()
        if allowed is not None:
            keep = allowed[ids]
            ids, matrix = ids[keep], matrix[keep]
            if len(ids) == 0:
                return found
        # In blocks: a product over more rows lets OpenBLAS start its threads, which
        # on a busy machine costs milliseconds waiting for a core.
        scores = np.empty(len(ids), dtype=np.float64)
        for start in range(0, len(ids), _GATHER_BLOCK):
            scores[start : start + _GATHER_BLOCK] = matrix[start : start + _GATHER_BLOCK] @ query
        if len(found) >= top_k:
            # only a deferred vector at least as close as the graph's k-th can enter
            reach = np.flatnonzero(scores >= found[top_k - 1][1])
            if len(reach) == 0:
                return found
            ids, scores = ids[reach], scores[reach]
        # by id: the exact fallback of _graph_search has found the deferred docs already
        merged = dict(found)
        merged.update(top_k_by_score(ids, scores, top_k))
        return top_k_by_score(np.fromiter(merged, dtype=np.int64, count=len(merged)),
                              np.fromiter(merged.values(), dtype=np.float64, count=len(merged)), top_k)

    def _pending_vectors(self) -> tuple[I64, F32]:
        """The deferred docs and their vectors, as one contiguous block (kept between
        searches, grown as inserts defer, rebuilt after any other change)."""
        block = self._pending_block
        if block is None:
            ids = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
            block = self._pending_block = _PendingBlock(self.dim)
            block.append(ids, self._rows[self._row_of[ids]])
            self._mapped_reads(len(ids))
        return block.ids[: block.size], block.vectors[: block.size]

    def exact_search(self, vector: npt.ArrayLike, top_k: int = 10,
                     allowed: Allowed = None) -> list[tuple[int, float]]:
        """Like :meth:`search`, but always exact (a full product), whatever the mode."""
        top_k = check_top_k(top_k)
        query = self._as_query(vector)
        if self._count == 0:
            return []
        if allowed is None:
            return self._exact_all(query, top_k)
        ids = allowed_ids(allowed)
        ids = ids[ids < len(self._row_of)]
        rows = self._row_of[ids]
        return self._exact_rows(query, rows[rows >= 0], top_k)

    # -- graph lifecycle -------------------------------------------------------------
    def plan_graph(self) -> GraphBuild:
        """A build to run anywhere, then :meth:`adopt`: a fresh graph over the current
        vectors, or, when the graph only lags behind deferred inserts, a catch-up
        (a clone of the graph plus those vectors). A later plan makes earlier ones stale."""
        self._plan_token = next(_PLAN_TOKENS)
        self._touched = set()
        graph = self._graph
        if graph is not None and self._pending and \
                len(self._tombstones) <= self.tombstone_ratio * max(1, self._graph_size):
            ids = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
            # read a block at a time as the build adds them (a copy of every deferred
            # vector was 0.75 GB after a fast ingest of 1,000,000): the view below keeps
            # their rows from reuse until the build is over
            vectors = _RowsOf(self._rows, self._row_of[ids], self._row_file)
            docs = self._row_ids[: self._high]
            labels = frozenset(docs[docs >= 0].tolist()).difference(self._pending) | self._tombstones
            # the view keeps removals from the live graph while the builder clones it (or
            # adds to it in place, between searches)
            return GraphBuild(self._plan_token, ids, vectors, self._params, view=self.snapshot_view(),
                              base=graph, base_labels=labels, base_tombstones=frozenset(self._tombstones),
                              guard=self._guard if self._in_place else None, save_guard=self._save_guard,
                              current=functools.partial(getattr, self, "_plan_token"), clock=self._clock,
                              builder=self._builder)
        view = self.snapshot_view()
        return GraphBuild(self._plan_token, view.doc_ids, None, self._params, view=view,
                          builder=self._builder)

    def superseded(self, token: int) -> bool:
        """Whether a newer plan than the one of ``token`` (a :class:`GraphBuild`'s) was
        made here, or that plan was another index's (an instance of the same scope
        before a passivation or a reload): its build is not for adopting."""
        return token != self._plan_token

    def adopt(self, build: GraphBuild) -> bool:
        """Attach a finished build, replaying the changes made since its plan.
        False (and nothing changes) when a newer plan exists or it did not run."""
        if build.token != self._plan_token or (build.graph is None and build.built is None) or \
                self._touched is None:
            if build.built is not None:
                build.built.discard()
                build.built = None
            return False
        graph, first = build.graph, self._graph is None
        if graph is None:
            graph = self._load_built(build, first)
            if graph is None:
                return False
        planned = set(build.ids.tolist())
        labels = planned | build.base_labels
        tombstones = set(build.base_tombstones - planned)
        changed = sorted(self._touched)
        # the live graph, grown in place, may be read by a snapshot being written: its
        # tombstones are marked once that is done (searches leave them out meanwhile)
        later = graph is self._graph and self._viewed()
        marks: list[int] = []
        # Docs changed since the plan: a removed one is a tombstone of the new graph; one
        # added (or re-added) since is inserted now, or left pending when inserts defer.
        for doc_id in changed:
            if doc_id in labels and doc_id not in tombstones and (
                    doc_id not in self or self.defer_inserts or doc_id in self._pending):
                marks.append(doc_id)
                tombstones.add(doc_id)
        readd = [d for d in changed if d in self]
        for doc_id in self._marks_later:  # removed while a snapshot or build read the graph
            if doc_id in labels:
                marks.append(doc_id)
                tombstones.add(doc_id)
        if later:
            self._marks_later = marks
        else:
            self._marks_later = []
            if marks:
                with self._guard:  # (a key removed already is passed over)
                    graph.remove(np.array(marks, dtype=np.uint64))
        # a removed key keeps its node in the graph until a rebuild: counted as a tombstone
        size = len(graph) + len(tombstones) - (len(set(marks)) if later else 0)
        if first:  # searched through the graph from now on: the int8 copy goes
            self._coarse = None
        self._graph, self._graph_size, self._tombstones = graph, size, tombstones
        self._touched = None
        build.graph = None
        release_freed_memory()  # the replaced graph's many small blocks
        self._pending_block = None
        if self.defer_inserts:
            since = set(changed)
            self._pending = {d: None for d in self._pending if d not in planned or d in since}
            self._pending.update(dict.fromkeys(readd))  # added (or re-added) since the plan
        else:
            self._pending = {}
            if readd:
                ids = np.array(readd, dtype=np.int64)
                new = sum(1 for d in readd if d not in labels)
                rows = self._row_of[ids]
                self._graph_insert(ids, self._rows[rows], new)
                _let_rows_go(self._row_file, self._rows, rows)
        return True

    def _load_built(self, build: GraphBuild, first: bool) -> Any:
        """The graph ``build``'s builder left outside memory, loaded once the graph it
        replaces is let go (reads begun before keep theirs; none runs meanwhile). None
        when it cannot be: unchanged when its file is seen to be unreadable before
        anything is let go; exact otherwise (rarely: the file read but did not load),
        wanting a graph again either way."""
        built = build.built
        assert built is not None
        build.built = None
        if not built.loadable():
            return None
        self._graph = None  # (the two graphs never in memory at once)
        if first:
            self._coarse = None  # (it goes at the first graph anyway: before, not beside it)
        try:
            return built.load()
        except BaseException as error:
            self.drop_graph()
            if isinstance(error, OSError | RuntimeError | ValueError):
                return None
            raise

    def build_graph(self) -> None:
        """Build (or rebuild) the graph now, in this thread."""
        build = self.plan_graph().run()
        self.adopt(build)

    def drop_graph(self) -> None:
        """Go back to exact search (frees the graph)."""
        self._marks_later = []
        self._graph, self._graph_size, self._tombstones = None, 0, set()
        self._touched = None
        self._pending = {}
        self._pending_block = None

    # -- persistence -----------------------------------------------------------------
    @classmethod
    def from_vectors(cls, doc_ids: Sequence[int], vectors: npt.ArrayLike, dim: int,
                     **params: Any) -> VectorIndex:
        """An index holding *vectors* under *doc_ids* (in that order), with a graph
        built if there are enough of them and ``auto_build`` is on."""
        return cls.from_sidecar(None, doc_ids, vectors, dim, **params)

    @classmethod
    def from_sidecar(cls, data: bytes | memoryview | None, doc_ids: Sequence[int] | I64,
                     vectors: npt.ArrayLike, dim: int, *, unit_rows: bool = False,
                     **params: Any) -> VectorIndex:
        """An index over *vectors* whose graph is read from *data* (made by
        :meth:`to_sidecar`) when it matches these ids and vectors exactly; otherwise
        the graph is rebuilt (if wanted). ``sidecar_status`` says what happened.

        ``unit_rows``: the caller vouches that *vectors* are rows an index held (as
        a checked snapshot keeps them: finite, unit length), so they are adopted as
        they are instead of being checked and normalised again, with room for a
        quarter more rows (measured at 100,000 x 384: 0.3 s less to restore, and no
        copy of every row when the journal's first vector arrives)."""
        index = cls(dim, **params)
        auto = index.auto_build
        index.auto_build = False
        if unit_rows:
            index._adopt_unit_rows(doc_ids, vectors)
        else:
            index.add_many(doc_ids, vectors)
        index.auto_build = auto
        index.sidecar_status = "absent" if data is None else index._load_sidecar(data)
        index._maybe_build()
        return index

    def to_sidecar(self) -> bytes | None:
        """The graph as bytes (None in exact mode): a header naming the ids and
        tombstones it covers and a checksum, then the graph as usearch serialises it.
        Costs a copy of the graph; call it where the index is not changing."""
        if self._graph is None:
            return None
        body = self._graph.save()  # usearch's own serialisation (a copy)
        header = orjson.dumps({
            "version": _SIDECAR_VERSION,
            "library": _GRAPH_LIBRARY,
            "quantization": self._params.quantization,
            "dim": self.dim,
            "count": self._count,
            "ids_checksum": self._ids_checksum(),
            "vectors_checksum": self._vectors_checksum(),
            "tombstones": sorted(self._tombstones),
            "pending": sorted(self._pending),
            "graph_size": self._graph_size,
            "body_checksum": _crc(body),
        })
        return b"".join([_MAGIC, struct.pack("<Q", len(header)), header, body])

    def snapshot_view(self) -> VectorsView:
        """What a snapshot writes of this index, read later in the writer's thread
        without a copy of the vectors: until the view is released (or dropped), rows
        it reads are not reused, the graph it saves is not changed (removals are
        marked in it afterwards; searches leave them out meanwhile) and inserts wait
        beside the graph as deferred ones do."""
        self._viewed()
        live_rows = np.flatnonzero(self._row_ids[: self._high] >= 0)
        view = VectorsView(self.dim, self._rows, live_rows, self._row_ids[live_rows], graph=self._graph,
                           save_guard=self._save_guard, row_file=self._row_file,
                           tombstones=sorted(self._tombstones), pending=sorted(self._pending),
                           graph_size=self._graph_size, quantization=self._params.quantization)
        self._views.append(weakref.ref(view))
        return view

    @classmethod
    def from_snapshot(cls, doc_ids: I64, vectors: npt.ArrayLike, dim: int, *,
                      graph: str | None, meta: bytes | memoryview | None,
                      rows_in_place: bool | RowFile = False, **params: Any) -> VectorIndex:
        """An index over the vectors a :class:`VectorsView` wrote (rows as the index held
        them), with its graph loaded from the file usearch saved (its path)
        when ``meta`` shows it was saved from exactly these vectors; otherwise the
        graph is rebuilt (if wanted). ``sidecar_status`` says what happened.
        ``rows_in_place``: keep ``vectors`` itself as the rows (a writable float32
        array the index then owns: a file mapped copy-on-write, say) rather than a
        copy with room to grow; the first growth copies them. Given as the
        :class:`RowFile` that array is of, the index lets its pages go after bulk reads
        as it does a row file's (and reads a search's few rows through it)."""
        index = cls(dim, **params)
        auto = index.auto_build
        index.auto_build = False
        index._adopt_unit_rows(doc_ids, vectors, in_place=rows_in_place)
        index.auto_build = auto
        if graph is None or meta is None:
            index.sidecar_status = "absent"
        else:
            index.sidecar_status = index._load_graph_file(graph, meta)
        index._maybe_build()
        return index

    # -- insides ---------------------------------------------------------------------
    def _viewed(self) -> bool:
        """Whether a snapshot being written reads this index now. Once none does, what
        waited for it is done: freed rows become reusable, removals are marked in the graph."""
        if not self._views:
            return False
        with self._guard:  # searches side by side (beside their owner) may all get here
            self._views = [ref for ref in self._views if (view := ref()) is not None and not view.done]
            if self._views:
                return True
            self._free.extend(self._free_later)
            self._free_later = []
            if self._graph is not None and self._marks_later:
                # (a key removed already is passed over)
                self._graph.remove(np.array(self._marks_later, dtype=np.uint64))
            self._marks_later = []
            return False

    def _load_graph_file(self, graph_path: str, meta_data: bytes | memoryview) -> SidecarStatus:
        try:
            meta = orjson.loads(meta_data)
            if not isinstance(meta, dict):
                return "corrupt"
            if meta.get("version") != _GRAPH_FILE_VERSION or meta.get("space") != "ip" or \
                    meta.get("quantization") != self._params.quantization:
                return "stale"  # (version 1: hnswlib's file; the graph is rebuilt)
            if (meta["dim"] != self.dim or meta["count"] != self._count
                    or meta["ids_checksum"] != self._ids_checksum()
                    or meta["rows_crc"] != self._rows_crc()):
                return "stale"
            tombstones = np.asarray(meta["tombstones"], dtype=np.int64)
            pending = np.asarray(meta["pending"], dtype=np.int64)
            graph_size = int(meta["graph_size"])
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            return "corrupt"
        try:
            graph = load_graph(self._params, graph_path)
        except (RuntimeError, ValueError, OSError):
            return "corrupt"
        status = self._check_graph(graph, tombstones, pending)
        if status != "loaded":
            return status
        self._graph_size = graph_size
        return "loaded"

    def _check_graph(self, graph: Any, tombstones: I64, pending: I64) -> SidecarStatus:
        """Adopt a loaded graph when its keys are those of the live docs (but the
        deferred ones) and its quantisation and size are this index's; "stale" otherwise."""
        live = self._sorted_ids()
        if len(pending) and not bool(self.holds(pending).all()):
            return "stale"
        if graph.ndim != self.dim or graph.connectivity != self._params.m or \
                str(graph.dtype).rsplit(".", 1)[-1].lower() != self._params.quantization:
            return "stale"
        expected = np.setdiff1d(live, pending, assume_unique=True)
        labels = np.sort(np.asarray(graph.keys, dtype=np.uint64).astype(np.int64))
        # keys removed while a snapshot read the graph are still in it (and among the
        # tombstones); deferred docs a catch-up in place had added are in it too (they
        # stay deferred: searched exactly as well, and added again)
        extra = np.setdiff1d(labels, expected, assume_unique=True)
        if len(np.setdiff1d(expected, labels, assume_unique=True)) or \
                not np.isin(extra, np.union1d(pending, tombstones)).all():
            return "stale"
        stale_keys = np.intersect1d(extra, tombstones, assume_unique=True)
        if len(stale_keys):
            graph.remove(stale_keys.astype(np.uint64))
        self._graph = graph
        self._coarse = None
        self._tombstones = set(tombstones.tolist())
        self._pending = dict.fromkeys(pending.tolist())
        self._pending_block = None
        self._touched = None
        return "loaded"

    def _load_sidecar(self, data: bytes | memoryview) -> SidecarStatus:
        try:
            if data[: len(_MAGIC)] != _MAGIC:
                return "corrupt"
            (header_size,) = struct.unpack_from("<Q", data, len(_MAGIC))
            start = len(_MAGIC) + 8
            header = orjson.loads(data[start : start + header_size])
            body = memoryview(data)[start + header_size :]
            if header.get("version") != _SIDECAR_VERSION:
                return "stale"  # an hnswlib graph (version 3 and before): rebuilt
            if _crc(body) != header["body_checksum"]:
                return "corrupt"
            if (header["dim"] != self.dim or header["count"] != self._count
                    or header.get("quantization") != self._params.quantization
                    or header["ids_checksum"] != self._ids_checksum()
                    or header["vectors_checksum"] != self._vectors_checksum()):
                return "stale"
            tombstones = {int(t) for t in header["tombstones"]}
            pending = {int(t) for t in header.get("pending", [])}
            graph_size = int(header["graph_size"])
        except (ValueError, KeyError, TypeError, struct.error, orjson.JSONDecodeError):
            return "corrupt"
        try:
            graph = load_graph(self._params, bytes(body))
        except (RuntimeError, ValueError):
            return "corrupt"
        status = self._check_graph(graph, np.array(sorted(tombstones), dtype=np.int64),
                                   np.array(sorted(pending), dtype=np.int64))
        if status != "loaded":
            return status
        self._graph_size = graph_size
        return "loaded"

    def _adopt_unit_rows(self, doc_ids: Sequence[int] | I64, vectors: npt.ArrayLike, *,
                         in_place: bool | RowFile = False) -> None:
        """Fill an empty index with *vectors* as its rows 0..n-1, in order: the
        state ``add_many`` would leave, without its normalising pass. ``in_place``:
        *vectors* itself becomes the rows, if it is a writable C-ordered float32
        array (else a copy with room to grow, as without it); a :class:`RowFile`
        given is then the rows' file."""
        assert self._count == 0 and self._high == 0
        id_array = np.asarray(doc_ids, dtype=np.int64).reshape(-1)
        matrix = np.asarray(vectors, dtype=np.float32)
        count = len(id_array)
        if matrix.ndim != 2 or matrix.shape != (count, self.dim):
            raise InvalidInput(f"got vectors of shape {matrix.shape} for {count} doc ids of dimension "
                               f"{self.dim}", field="vector")
        if count == 0:
            return
        if int(id_array.min()) < 0:
            raise InvalidInput("doc ids of stored vectors must be distinct and >= 0", field="doc_ids")
        # distinct: a repeated id's later row overwrites its earlier one in ``_row_of``
        # (one pass over the ids instead of np.unique's sort: 0.6 s at 1,000,000)
        self._ensure_id_capacity(int(id_array.max()) + 1)
        rows = np.arange(count, dtype=np.int64)
        self._row_of[id_array] = rows
        if not np.array_equal(self._row_of[id_array], rows):
            self._row_of = np.zeros(0, dtype=np.int64)
            raise InvalidInput("doc ids of stored vectors must be distinct and >= 0", field="doc_ids")
        if in_place and matrix.dtype == np.float32 and matrix.flags.c_contiguous and matrix.flags.writeable:
            capacity = count  # (no room: the first rows added move them all to a grown copy)
            self._rows = matrix
            if not isinstance(in_place, bool):
                self._row_file = in_place
        else:
            capacity = max(_MIN_ROWS, count + count // 4)
            self._rows = self._grow_rows(matrix, count, capacity)
        self._coarse = None  # (it would repack from the new rows, but holds the old ones)
        self._row_ids = _grown(id_array, count, capacity, fill=-1)
        self._high = self._count = count

    def _ids_checksum(self) -> str:
        return _ids_checksum(self._sorted_ids())

    def _rows_crc(self) -> str:
        """CRC-32 of the rows in use, in row order (what a graph file's meta names),
        read a block at a time: in a row file, each block's pages go once read."""
        crc = 0
        for start in range(0, self._count, _CRC_BLOCK):
            stop = min(self._count, start + _CRC_BLOCK)
            crc = zlib.crc32(byte_view(self._rows[start:stop]), crc)
            self._settle(start, stop)
        return f"{crc:08x}"

    def _vectors_checksum(self) -> str:
        """CRC-32 of the stored vectors in doc id order (float32 little-endian)."""
        crc = 0
        ids = self._sorted_ids()
        order = self._row_of[ids]
        if len(order) and order[0] == 0 and bool(np.all(np.diff(order) == 1)):
            # rows already in doc id order (a restored index): no gather
            return f"{zlib.crc32(np.ascontiguousarray(self._rows[: len(order)], dtype='<f4').data):08x}"
        for start in range(0, len(ids), _VERIFY_CHUNK):
            block = self._rows[self._row_of[ids[start : start + _VERIFY_CHUNK]]]
            crc = zlib.crc32(np.ascontiguousarray(block, dtype="<f4").data, crc)
        self._settle()
        return f"{crc:08x}"

    def _maybe_build(self) -> None:
        if self.auto_build and self.wants_graph:
            if self._count == 0:
                self.drop_graph()
            else:
                self.build_graph()

    def _graph_insert(self, ids: I64, matrix: F32, new: int) -> None:
        """Add or update *ids* in the graph; *new* of them are labels it lacks."""
        needed = self._graph_size + new
        with self._guard:
            add_block(self._graph, ids, matrix, self._params)
        self._tombstones.difference_update(ids.tolist())
        self._graph_size = needed

    def _graph_search(self, query: F32, top_k: int, allowed_count: int,
                      allowed: npt.NDArray[np.bool_] | None) -> list[tuple[int, float]]:
        k = min(top_k, allowed_count)
        # the beam for 10 results grows with the graph; for more, the proportional beam
        # (a ranking's 50 candidates) is not grown again: hybrid searches cost as before
        ef = max(k, min(max(scaled(self.ef_search, self._graph_size, _MAX_EF),
                            math.ceil(self.ef_search * k / 10)), _MAX_EF))
        # The graph ranks by its quantised vectors: it gives ``rescore`` times as many
        # candidates, rescored below from the float32 rows. A filter is applied to its
        # answer (the graph has none of its own), so it is asked for as many more as the
        # allowed share is small; when too few of them are allowed, the search is exact.
        wanted = self.rescore * k
        if allowed is not None:
            wanted = math.ceil(wanted * 1.5 * max(1, self._count) / max(1, allowed_count))
        unmarked = len(self._marks_later)
        count = min(wanted + unmarked, self._graph_size)
        with self._guard:
            graph = self._graph
            graph.expansion_search = max(ef, count)
            labels = graph.search(query, count, threads=1).keys
        ids = np.asarray(labels, dtype=np.uint64).astype(np.int64).reshape(-1)
        if allowed is not None:
            ids = ids[ids < len(allowed)]
            ids = ids[allowed[ids]]
        if len(ids) < k:
            # fewer than k reachable (or allowed) among the graph's answer: answer exactly instead
            if allowed is None:
                return self._exact_all(query, top_k)
            rows = self._row_of[np.flatnonzero(allowed)]
            return self._exact_rows(query, rows[rows >= 0], top_k)
        ids = ids[ids < len(self._row_of)]
        rows = self._row_of[ids]
        if (rows < 0).any():
            # removed while a snapshot or a build read the graph (not marked in it yet),
            # or added to it in place by a build not adopted (yet)
            kept = rows >= 0
            ids, rows = ids[kept], rows[kept]
        scores = (self._few_rows(rows) @ query).astype(np.float64)
        return top_k_by_score(ids, scores, top_k)

    def _few_rows(self, rows: I64) -> F32:
        """``self._rows[rows]``, a search's few rows: in a row file, read from it (a
        fault maps a whole folio or 64 KB around each row into the process)."""
        if self._row_file is not None:
            read = self._row_file.read(self._rows, rows)
            if read is not None:
                return read
            self._mapped_reads(len(rows))
        gathered: F32 = self._rows[rows]
        return gathered

    def _mapped_reads(self, count: int) -> None:
        """A search read ``count`` rows through the mapping (rows it rescores, beyond
        a few): in a row file, past ``_SETTLE_READS`` of them since the last time, the
        pages they brought into the process leave it."""
        if self._row_file is not None:
            self._reads += count
            if self._reads >= _SETTLE_READS:
                self._reads = 0
                self._settle()

    def _filter_is_cheaper_exact(self, allowed: int) -> bool:
        if allowed <= self.exact_filter_max:
            return True
        return allowed * allowed <= self._filter_crossover * self._count

    def _exact_all(self, query: F32, top_k: int) -> list[tuple[int, float]]:
        return self._top_of_rows(self._rows[: self._high] @ query, top_k)

    def _top_of_rows(self, scores: F32, top_k: int) -> list[tuple[int, float]]:
        """The top_k of every live row by ``scores`` (one per row in use), as pairs."""
        ids, cosines = self._top_rows_arrays(scores, top_k)
        return list(zip(ids.tolist(), cosines.tolist(), strict=True))

    def _top_rows_arrays(self, scores: F32, top_k: int) -> tuple[I64, F64]:
        """The top_k of every live row by ``scores`` (one per row in use), as arrays.
        The cut runs on the float32 scores (their order is that of their float64
        values); only the top_k are widened."""
        ids = self._row_ids[: self._high]
        if self._high != self._count:
            live = ids >= 0
            ids, scores = ids[live], scores[live]
        return top_k_arrays(ids, scores, top_k)

    def _exact_rows(self, query: F32, rows: I64, top_k: int) -> list[tuple[int, float]]:
        # Gathered in blocks that stay in cache: several times faster than one big
        # gather, and than a full product once rows are a small share of the matrix.
        scores = np.empty(len(rows), dtype=np.float64)
        for start in range(0, len(rows), _GATHER_BLOCK):
            block = rows[start : start + _GATHER_BLOCK]
            scores[start : start + len(block)] = self._rows[block] @ query
        self._mapped_reads(len(rows))
        return top_k_by_score(self._row_ids[rows], scores, top_k)

    def _row(self, doc_id: int) -> int:
        if doc_id not in self:
            raise missing(doc_id if isinstance(doc_id, int) else -1, "vector index")
        return int(self._row_of[int(doc_id)])

    def _take_rows(self, count: int) -> I64:
        """``count`` rows for new vectors: freed ones first, then fresh ones in a block."""
        self._viewed()
        reused = [self._free.pop() for _ in range(min(count, len(self._free)))]
        fresh = count - len(reused)
        if fresh and self._high + fresh > len(self._rows):
            size = max(_MIN_ROWS, 2 * len(self._rows), self._high + fresh)
            self._rows = self._grow_rows(self._rows, self._high, size)
            self._coarse = None  # a new array is packed whole: let the old one go now
            self._row_ids = _grown(self._row_ids, self._high, size, fill=-1)
        block = np.arange(self._high, self._high + fresh, dtype=np.int64)
        self._high += fresh
        return np.concatenate([np.array(reused, dtype=np.int64), block]) if reused else block

    def _grow_rows(self, rows: F32, used: int, capacity: int) -> F32:
        """Room for ``capacity`` rows, ``rows[:used]`` first: in the row file from
        ``row_files.min_bytes`` (no copy once the rows are there: the file grows and is
        mapped again), else (or if the file cannot grow) in memory."""
        files = self._row_files
        if files is not None and capacity * self.dim * 4 >= files.min_bytes:
            row_file = self._row_file
            if row_file is None or not row_file.grows:  # (a snapshot's file is left)
                row_file = files.open(self.dim)
            grown = row_file.grow(rows, used, capacity)
            if grown is not None:
                self._row_file = row_file
                return grown
            # (a full disk, say: the file and its reserved blocks go once no array maps
            # them; a later growth tries a new one)
        grown = _grown(rows, used, capacity)
        self._row_file = None
        return grown

    def _settle(self, start: int = 0, stop: int | None = None, *, written: bool = False) -> None:
        """Rows ``[start, stop)`` were read in bulk, or ``written``: in a row file, their
        pages leave the process (searches read back the few they need)."""
        if self._row_file is not None:
            self._row_file.settle(self._rows, start, stop, written=written)

    def _ensure_id_capacity(self, needed: int) -> None:
        if needed <= len(self._row_of):
            return
        size = max(_MIN_ROWS, needed, 2 * len(self._row_of))
        self._row_of = _grown(self._row_of, len(self._row_of), size, fill=-1)

    def _as_query(self, vector: npt.ArrayLike) -> F32:
        """One query vector as ``_as_matrix(vector, 1)[0]`` gives it: the same checks, the
        same bits. A float32 vector of ``dim`` values (what a search's plan decodes)
        takes a short way: its norm by ``np.linalg.norm``'s own sum of squares, whose
        being finite says that every value is; anything else takes the general way."""
        if type(vector) is np.ndarray and vector.dtype == np.float32 and vector.shape == (self.dim,):
            norm = np.sqrt(np.add.reduce(vector * vector))
            # (a NaN or infinity, or squares past float32's range: the general way says which)
            if math.isfinite(norm):
                # near 1, norm - 1 is exact (Sterbenz), and no float32 norm puts it between
                # _as_matrix's bound (1e-6 as a float32) and 1e-6: the same rows are rescaled
                if abs(float(norm) - 1.0) <= 1e-6:
                    return vector if vector.flags.c_contiguous else np.ascontiguousarray(vector)
                rescaled: F32 = vector / norm if norm > 0 else vector.copy()
                return rescaled
        query: F32 = self._as_matrix(vector, 1)[0]
        return query

    def _as_matrix(self, vectors: npt.ArrayLike, rows: int) -> F32:
        try:
            matrix = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise InvalidInput("vectors must be numeric arrays", field="vector") from exc
        if matrix.ndim == 1:
            matrix = matrix[None, :]
        if matrix.ndim != 2 or matrix.shape[1] != self.dim:
            raise InvalidInput(f"vector dimension is {matrix.shape[-1] if matrix.ndim else 0}; "
                               f"this index holds {self.dim}-dimensional vectors", field="vector")
        if matrix.shape[0] != rows:
            raise InvalidInput(f"got {matrix.shape[0]} vectors for {rows} doc ids", field="vector")
        if not np.isfinite(matrix).all():
            raise InvalidInput("vectors must be finite (no NaN or infinity)", field="vector")
        # Rows already of unit length are kept bit for bit, so that normalising is
        # idempotent: vectors read back from a snapshot match the graph's copies.
        norms = np.linalg.norm(matrix, axis=1)
        rescale = np.abs(norms - 1.0) > 1e-6
        if not rescale.any():
            return np.ascontiguousarray(matrix)  # the caller copies it into its rows
        result: F32 = np.array(matrix, dtype=np.float32, order="C", copy=True)
        if rescale.any():
            safe = np.where(norms[rescale] > 0, norms[rescale], 1.0)
            result[rescale] = matrix[rescale] / safe[:, None]
        return result


class ExactScores:
    """One query's cosine to every vector of an exact :class:`VectorIndex`
    (:meth:`VectorIndex.exact_scores`): the searches and look-ups of one ranking
    read it instead of multiplying the vectors again. Valid until the index changes;
    a ranking keeps it for one search only.

    From ``_coarse.MIN_VALUES`` rows times dimensions on, it holds each row's int8
    approximation and the bound on its error instead of the float32 products; a
    search or look-up computes the float32 products of the rows it needs (those whose
    bound reaches the cut), each as the full product gives it (see
    ``mnemex.index._coarse``)."""

    __slots__ = ("_index", "_known", "_lower", "_query", "_scores", "_upper")

    def __init__(self, index: VectorIndex, scores: F32 | None, *, query: F32 | None = None,
                 bounds: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None) -> None:
        self._index = index
        self._query = query
        self._lower: npt.NDArray[np.float64] | None = bounds[0] if bounds is not None else None
        self._upper: npt.NDArray[np.float64] | None = bounds[1] if bounds is not None else None
        self._known: npt.NDArray[np.bool_] | None = None
        if scores is None:  # coarse: products computed as rows are asked for
            assert self._lower is not None
            scores = np.zeros(len(self._lower), dtype=np.float32)
            self._known = np.zeros(len(self._lower), dtype=np.bool_)
        self._scores = scores  # by row, rows [0, high)

    def buffers(self) -> list[npt.NDArray[Any]]:
        """The arrays it keeps alive: its own, or those they are views of (the bounds of
        several queries made in one pass are rows of one array: see ``exact_scores_many``)."""
        held = (self._scores, self._lower, self._upper, self._known)
        return [array if array.base is None else array.base for array in held if array is not None]

    def search(self, top_k: int = 10, allowed: Allowed = None,
               also: I64 | None = None) -> list[tuple[int, float]]:
        """What ``index.search(vector, top_k, allowed)`` finds in exact mode. ``also``:
        docs whose cosines the caller will read next (``of``), computed with the
        search's own (one product instead of two; the same values)."""
        top_k = check_top_k(top_k)
        index = self._index
        if index._count == 0:
            return []
        if allowed is None:
            if self._known is None:
                return index._top_of_rows(self._scores, top_k)
            rows = self._reach(None, top_k)
        else:
            ids = allowed_ids(allowed)
            ids = ids[ids < len(index._row_of)]
            rows = index._row_of[ids]
            rows = rows[rows >= 0]
            if self._known is not None:
                rows = self._reach(rows, top_k)
        if also is not None and self._known is not None and len(also):
            wanted = self._rows_of(also)
            self._rows_scores(np.concatenate((rows, wanted[wanted >= 0])))
        return top_k_by_score(index._row_ids[rows], self._rows_scores(rows), top_k)

    def of(self, doc_ids: I64) -> npt.NDArray[np.float64]:
        """The cosines of ``doc_ids`` (0 for a doc without a vector)."""
        rows = self._rows_of(doc_ids)
        held = rows >= 0
        if held.all():
            every: npt.NDArray[np.float64] = self._rows_scores(rows).astype(np.float64)
            return every
        out = np.zeros(len(doc_ids), dtype=np.float64)
        out[held] = self._rows_scores(rows[held])
        return out

    def reach(self, doc_ids: I64, offsets: npt.NDArray[np.float64],
              count: int) -> npt.NDArray[np.bool_] | None:
        """Which of ``doc_ids`` could be among the ``count`` of highest
        ``offsets + cosine`` (0 for a doc without a vector; ties by lower doc): every
        other one scores below ``count`` of these. None: any of them could (the
        cosines are all computed already, or there are at most ``count``)."""
        lower, upper = self._lower, self._upper
        if lower is None or upper is None or len(doc_ids) <= count:
            return None
        rows = self._rows_of(doc_ids)
        held = rows >= 0
        if held.all():
            low, high = lower[rows] + offsets, upper[rows] + offsets
        else:
            low = np.where(held, lower[rows], 0.0) + offsets
            high = np.where(held, upper[rows], 0.0) + offsets
        out: npt.NDArray[np.bool_] = high >= _kth_largest(low, count)
        return out

    def _rows_of(self, doc_ids: I64) -> I64:
        row_of = self._index._row_of
        if not len(doc_ids):
            return np.zeros(0, dtype=np.int64)
        if int(doc_ids.min()) >= 0 and int(doc_ids.max()) < len(row_of):
            return row_of[doc_ids]
        inside = (doc_ids >= 0) & (doc_ids < len(row_of))
        rows = np.full(len(doc_ids), -1, dtype=np.int64)
        rows[inside] = row_of[doc_ids[inside]]
        return rows

    def _reach(self, rows: I64 | None, count: int) -> I64:
        """Of ``rows`` (None: every live row), those whose upper bound reaches the
        ``count``-th best lower bound (all when there are at most ``count``)."""
        index = self._index
        lower, upper = self._lower, self._upper
        assert lower is not None and upper is not None
        if rows is None:
            if index._high == index._count:  # no free rows: every row, without a gather
                if index._high <= count:
                    return np.arange(index._high, dtype=np.int64)
                return np.flatnonzero(upper >= _kth_largest(lower, count))
            rows = np.flatnonzero(index._row_ids[: index._high] >= 0)
        if len(rows) <= count:
            return rows
        return rows[upper[rows] >= _kth_largest(lower[rows], count)]

    def _rows_scores(self, rows: I64) -> F32:
        """The float32 products of ``rows`` (as the full product gives them)."""
        known = self._known
        if known is not None:
            needed = np.sort(rows[~known[rows]])  # (in order: the gather reads ahead)
            if len(needed):
                assert self._query is not None
                # (in a row file: read without mapping their pages, as a search's few rows)
                taken, products = _coarse.exact_rows(self._index._rows, len(known), self._query, needed,
                                                     self._index._few_rows)
                self._scores[taken] = products
                known[taken] = True
        out: F32 = self._scores[rows]
        return out


class _RowsOf:
    """Rows ``rows`` of ``array``, gathered a slice at a time as a build reads them (a
    catch-up's deferred vectors: the plan's view keeps those rows from reuse); in a
    row file, their pages then leave the process."""

    __slots__ = ("_array", "_file", "_rows")

    def __init__(self, array: F32, rows: I64, row_file: RowFile | None) -> None:
        self._array, self._rows, self._file = array, rows, row_file

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: slice, /) -> F32:
        rows = self._rows[index]
        block: F32 = self._array[rows]
        _let_rows_go(self._file, self._array, rows)
        return block


def _let_rows_go(row_file: RowFile | None, array: F32, rows: I64, *, written: bool = False) -> None:
    """``rows`` of ``array`` were read in bulk, or ``written``: in a row file, the pages
    from the lowest to the highest leave the process."""
    if row_file is not None and len(rows):
        row_file.settle(array, int(rows.min()), int(rows.max()) + 1, written=written)


def _kth_largest(values: npt.NDArray[np.float64], k: int) -> float:
    return float(np.partition(values, len(values) - k)[len(values) - k])


class VectorsView:
    """A snapshot's view of a :class:`VectorIndex` (see ``snapshot_view``): gives the
    vectors and the graph to the snapshot's writer, in its thread, then ``release()``.

    The vectors file: ``MNXVEC01``, the dimension (u32), the dtype (4 bytes, ``<f4``),
    the count (u64), the doc ids (int64), the rows (little-endian): see
    :func:`read_vectors_file`. The graph: usearch's own file (``save``) and a
    small JSON ``meta_chunks`` naming the ids, rows and tombstones it belongs to."""

    __slots__ = ("__weakref__", "_graph", "_graph_size", "_ids", "_live_rows", "_pending", "_quantization",
                 "_row_file", "_rows", "_rows_crc", "_save_guard", "_tombstones", "dim", "done")

    def __init__(self, dim: int, rows: F32, live_rows: I64, ids: I64, *, graph: Any, tombstones: list[int],
                 pending: list[int], graph_size: int,
                 save_guard: AbstractContextManager[Any] | None = None,
                 quantization: Quantization = "i8", row_file: RowFile | None = None) -> None:
        self.dim = dim
        self._row_file = row_file  # (the rows' pages read leave the process block by block)
        self._quantization = quantization
        self._save_guard = save_guard if save_guard is not None else contextlib.nullcontext()
        self._rows, self._live_rows, self._ids = rows, live_rows, ids
        self._graph, self._graph_size = graph, graph_size
        self._tombstones, self._pending = tombstones, pending
        self._rows_crc: int | None = None
        self.done = False

    @property
    def doc_ids(self) -> I64:
        """The doc ids in the order the vectors file holds them."""
        return self._ids

    @property
    def has_graph(self) -> bool:
        return self._graph is not None

    def blocks(self) -> Iterator[tuple[I64, F32]]:
        """(doc ids, float32 rows) a block at a time, in the vectors file's order."""
        for start in range(0, len(self._ids), BUILD_BLOCK):
            rows = self._live_rows[start : start + BUILD_BLOCK]
            block = np.ascontiguousarray(self._rows[rows], dtype=np.float32)
            _let_rows_go(self._row_file, self._rows, rows)
            yield self._ids[start : start + BUILD_BLOCK], block

    def vector_chunks(self) -> Iterator[bytes]:
        """The vectors file, a block of rows at a time."""
        count = len(self._ids)
        yield _VECTORS_MAGIC + struct.pack("<I4sQ", self.dim, b"<f4 ", count)
        yield bytes(byte_view(self._ids.astype("<i8", copy=False)))
        crc = 0
        for start in range(0, count, _WRITE_BLOCK):
            rows = self._live_rows[start : start + _WRITE_BLOCK]
            data = np.ascontiguousarray(self._rows[rows], dtype="<f4").tobytes()
            _let_rows_go(self._row_file, self._rows, rows)
            crc = zlib.crc32(data, crc)
            yield data
        self._rows_crc = crc

    def write_graph(self, path: str) -> None:
        """The graph as usearch saves it into the file at ``path``."""
        assert self._graph is not None
        # a build adding to it in place waits; searches do not (the owner changes
        # nothing in a graph a view reads: removals wait, inserts are deferred)
        with self._save_guard:
            self._graph.save(path)

    def meta_chunks(self) -> Iterator[bytes]:
        """What the graph file belongs to (read after ``vector_chunks``: it names their checksum)."""
        assert self._rows_crc is not None, "vector_chunks first"
        yield orjson.dumps({
            "version": _GRAPH_FILE_VERSION, "library": _GRAPH_LIBRARY, "space": "ip",
            "quantization": self._quantization, "dim": self.dim, "count": len(self._ids),
            "ids_checksum": _ids_checksum(np.sort(self._ids)), "rows_crc": f"{self._rows_crc:08x}",
            "tombstones": self._tombstones, "pending": self._pending, "graph_size": self._graph_size,
        })

    def release(self) -> None:
        """The writer is done reading: the index may reuse what the view held."""
        self.done = True
        self._graph = None


def read_vectors_file(data: bytes | memoryview) -> tuple[I64, F32]:
    """The doc ids and rows of a file :meth:`VectorsView.write_vectors` wrote (views
    of ``data``, no copy); ValueError when it is not one."""
    head = 8 + struct.calcsize("<I4sQ")
    if len(data) < head or bytes(data[:8]) != _VECTORS_MAGIC:
        raise ValueError("not a vectors file")
    dim, dtype, count = struct.unpack_from("<I4sQ", data, 8)
    if dtype != b"<f4 " or len(data) != head + 8 * count + 4 * dim * count:
        raise ValueError(f"vectors file of {len(data):,} bytes does not hold {count:,} rows of {dim} float32")
    ids = np.frombuffer(data, dtype="<i8", count=count, offset=head)
    rows = np.frombuffer(data, dtype="<f4", count=count * dim, offset=head + 8 * count).reshape(count, dim)
    return ids.astype(np.int64, copy=False), rows


class _PendingBlock:
    """A contiguous copy of the deferred vectors, which every graph search scans
    exactly: one product over contiguous rows instead of a gather from the scattered
    rows of the main matrix and an id array rebuilt from a dict (measured at 100,000
    x 384 with 4,900 deferred, on top of the graph search: 0.2 ms against 0.55 ms). Costs 4 * dim
    bytes per deferred vector (up to twice that with the room to grow)."""

    __slots__ = ("ids", "size", "vectors")

    def __init__(self, dim: int) -> None:
        self.ids: I64 = np.zeros(0, dtype=np.int64)
        self.vectors: F32 = np.zeros((0, dim), dtype=np.float32)
        self.size = 0

    def append(self, ids: I64, vectors: F32) -> None:
        end = self.size + len(ids)
        if end > len(self.ids):
            capacity = max(_MIN_ROWS, end, 2 * len(self.ids))
            self.ids = _grown(self.ids, self.size, capacity)
            self.vectors = _grown(self.vectors, self.size, capacity)
        self.ids[self.size : end] = ids
        self.vectors[self.size : end] = vectors
        self.size = end


def _grown(array: npt.NDArray[Any], used: int, capacity: int, fill: int = 0) -> npt.NDArray[Any]:
    """A new array of ``capacity`` rows shaped and typed like ``array``, holding its
    first ``used`` rows, the rest ``fill`` (zeros come from calloc: rows not yet
    written cost no memory)."""
    shape = (capacity, *array.shape[1:])
    grown = np.zeros(shape, dtype=array.dtype) if fill == 0 else np.full(shape, fill, dtype=array.dtype)
    grown[:used] = array[:used]
    return grown


def _ids_checksum(sorted_ids: I64) -> str:
    return hashlib.blake2b(sorted_ids.astype(np.int64, copy=False).tobytes(), digest_size=16).hexdigest()


def _crc(data: bytes | memoryview) -> str:
    return f"{zlib.crc32(data):08x}"


def _extend_graph(base: Any, ids: I64, vectors: F32 | Rows, params: GraphParams,
                  stopped: Callable[[], bool]) -> Any:
    """A copy of ``base`` with ``ids`` added (a catch-up), taken in the builder's
    thread: the owner leaves ``base`` unchanged meanwhile (it only searches it;
    removals wait for the build's view). None once ``stopped``."""
    graph = base.copy()
    for block_ids, block_vectors in blocks_of(ids, vectors):
        if stopped():
            return None
        add_block(graph, block_ids, block_vectors, params)
    return graph


def _build_graph(view: VectorsView, params: GraphParams, stopped: Callable[[], bool]) -> Any:
    """A graph over the rows ``view`` reads, added a block at a time (one thread adds
    them in the same order as one call would: the same graph). None once ``stopped``."""
    graph = new_graph(params)
    for ids, rows in view.blocks():
        if stopped():
            return None
        add_block(graph, ids, rows, params)
    return graph
