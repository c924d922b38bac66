"""The graph calls (usearch) a scope's HNSW graph is made with, wherever it is made.

A graph may be built in the index owner's thread or elsewhere: a
:class:`GraphBuilder` the owner gives (``mnemex.models.graph_helpers``: a helper
process, since usearch takes the GIL back after every vector it adds in its calling
thread). Both add the same vectors in the same blocks through :func:`add_block`, so
one thread gives the same graph wherever it runs. This module imports only numpy and
usearch: a helper process loads it by its path, without the rest of mnemex.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import numpy as np
import numpy.typing as npt
from usearch.index import Index as _Graph

Quantization = Literal["i8", "f16", "f32"]
F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

WIDTHS_AT: Final = 100_000  # graph size up to which ef_search and ef_construction apply as given
MAX_EF_CONSTRUCTION: Final = 1024
BUILD_BLOCK: Final = 8192  # rows a build adds per call


@dataclass(frozen=True, slots=True)
class GraphParams:
    """How a scope's graphs are made."""

    dim: int
    m: int
    ef_construction: int
    seed: int
    num_threads: int
    quantization: Quantization


class BuiltGraph(Protocol):
    """A graph a :class:`GraphBuilder` made, kept outside this process's memory (a file)
    until it is loaded: its owner lets the graph it replaces go first, so that the
    two are never in memory at once."""

    def loadable(self) -> bool:
        """Whether it can be expected to load (usearch's header reads): asked before
        the graph it replaces is let go (False: it is discarded)."""
        ...

    def load(self) -> Any:
        """The graph (once: what kept it is let go)."""
        ...

    def discard(self) -> None:
        """Let it go unloaded (a build not adopted)."""
        ...


class GraphBuilder(Protocol):
    """Builds graphs away from the calling thread (see the module docstring)."""

    def build(self, params: GraphParams, count: int, blocks: Iterable[tuple[I64, F32]], *,
              base: Callable[[str], None] | None,
              started: Callable[[Callable[[], None] | None], None]) -> BuiltGraph | None:
        """A graph of ``params`` holding the elements of the live graph ``base`` writes
        (usearch's file, at the path it is given; None: a fresh graph) and the ``count``
        vectors ``blocks`` give (``BUILD_BLOCK`` rows each, the last one fewer), added as
        :func:`add_block` adds them. None when it could not (the caller builds it in
        its own thread) or was stopped. ``started`` is told a function that stops the
        work at once (from any thread), then None once it is over."""
        ...


def new_graph(params: GraphParams) -> Any:
    """An empty usearch graph of these parameters (inner product over ``quantization``
    vectors; usearch draws node levels from its own fixed seed, so one thread adding
    the same vectors in the same order gives the same graph)."""
    return _Graph(ndim=params.dim, metric="ip", dtype=params.quantization, connectivity=params.m,
                  expansion_add=params.ef_construction, expansion_search=64)


def load_graph(params: GraphParams, saved: str | bytes) -> Any:
    """The graph usearch saved (at the path ``saved``, or as those bytes), made with
    ``params``; RuntimeError, ValueError or OSError when it is none."""
    graph = new_graph(params)
    graph.load(saved)
    return graph


def graph_file_header(path: str) -> dict[str, Any] | None:
    """What usearch's header of the graph file at ``path`` says; ValueError (or
    OSError) when it is no such file."""
    header: dict[str, Any] | None = _Graph.metadata(path)
    return header


class Rows(Protocol):
    """Vectors read a slice at a time (an array, or rows gathered as they are read)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice, /) -> F32: ...


def blocks_of(ids: I64, vectors: F32 | Rows) -> Iterator[tuple[I64, F32]]:
    """``ids`` and their ``vectors`` a ``BUILD_BLOCK`` at a time, as builds add them."""
    for start in range(0, len(ids), BUILD_BLOCK):
        yield ids[start : start + BUILD_BLOCK], vectors[start : start + BUILD_BLOCK]


def add_block(graph: Any, ids: I64, vectors: F32, params: GraphParams) -> None:
    """Add (or replace) ``ids`` in ``graph``: a key still in it is removed first (usearch
    keeps one vector per key); the insertion beam is the one for the graph's size."""
    keys = ids.astype(np.uint64)
    if len(graph):
        present = np.asarray(graph.contains(keys), dtype=np.bool_).reshape(-1)
        if present.any():
            graph.remove(keys[present])
    graph.expansion_add = scaled(params.ef_construction, len(graph), MAX_EF_CONSTRUCTION)
    graph.add(keys, np.ascontiguousarray(vectors, dtype=np.float32), threads=params.num_threads)


def scaled(width: int, size: int, cap: int) -> int:
    """A beam width given for graphs of up to ``WIDTHS_AT`` elements, for a graph of
    ``size``: grown as the square root of the size beyond (at most ``cap``, never
    below ``width``). Measured on bench/million.py's corpus (LoCoMo turns and
    one-word variations of them; hashing embedder; recall@10 against exact, int8
    graph, M 16): the beam that keeps a recall grows with the graph, as the graph
    holds more near-copies of each text (~36 a text at 100,000, ~109 at 300,000,
    ~362 at 1,000,000) that fill a beam of a fixed width; see mnemex.index.vector."""
    if size <= WIDTHS_AT:
        return width
    return max(width, min(cap, math.ceil(width * math.sqrt(size / WIDTHS_AT))))


@functools.cache
def _malloc_trim() -> Any:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; a
    no-op elsewhere): a graph let go frees thousands of small blocks that would
    otherwise stay resident."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def graph_calls_path() -> str:
    """The path of this module's file, which a helper process loads by itself."""
    return __file__
