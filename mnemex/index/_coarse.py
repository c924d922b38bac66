"""A coarse int8 pass over an exact vector index, with a bound on its error.

An exact search of a scope of 10,000 vectors of 384 dimensions spent ~175 us of one
core on its float32 product (OpenBLAS' AVX2 kernel; 15 MB of rows read per query).
:class:`CoarseScan` keeps every row also as int8 (a scale per row), packed for
numkong's integer dot products (AVX-512 VNNI here): the same pass over int8 rows
costs ~50 us, and each row's approximation comes with a bound on how far it can be
from the float32 product. The float32 product then only runs over the rows that could
still be among the best (:func:`exact_rows`, called by ``vector.ExactScores``): a
search's results, ids and scores, are those of the full product.

The bound, for a row ``r`` (stored float32) and the query ``u`` (float32). The row's
codes are ``c = rint(r * fl(1 / s))`` with ``s = max |r| / 127``, so each component of
``r - s c`` is at most ``s (1/2 + CODE_SLACK)`` in size; the query's codes ``u^`` are
made the same way in float64. Then
``|r.u - s c.u^| <= |(r - s c).u| + |s c.(u - u^)| <= s (1/2 + CODE_SLACK) ||u||_1 + ||s c|| ||u - u^||``
(the first term component by component, the second by Cauchy-Schwarz, with the
largest ``||s c||`` of any row), and the float32 product differs from the real
``r.u`` by at most ``gamma_d sum |r_j u_j| <= gamma_d 127 sqrt(d) s ||u||``
(``gamma_d = d 2**-24 / (1 - d 2**-24)``: any order of summation, fused or not;
``||r|| <= sqrt(d) max |r|``). The integer products are exact (int32); the rest is
float64, whose rounding ``SLACK`` covers. On the LoCoMo rows of bench/http.py the
bound is ~0.012 in cosine (the real error at most a third of it) and a top 30 needs
~70 of 10,000 rows rescored.

Which rows are rescored does not change their scores: OpenBLAS' float32 product
computes rows four at a time (each row's sum on its own, in one order) and the last
``n % 4`` rows after them with another kernel, so a product over the rows wanted,
padded to a multiple of four (and the full product's last rows after at least one
group of four), gives each row bit for bit what the product over every row gives
(one BLAS thread, as ``mnemex serve`` runs; tests/index/test_coarse_scan.py checks
it; a product split over several threads can put a row among a thread's last ones).
A BLAS that grouped otherwise could differ in the last bit of a score; which rows
are found would still be the same, as the bound includes the product's own rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

import numkong as _nk  # usearch's SIMD kernels (a dependency of usearch, and of mnemex)
import numpy as np
import numpy.typing as npt

__all__ = ["BLOCK", "DIRTY_MAX", "MIN_VALUES", "CoarseScan", "exact_rows"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

BLOCK: Final = 1024
"""Rows quantised and packed together (~0.35 ms a block of 384 dimensions)."""

DIRTY_MAX: Final = 256
"""Rows written since they were packed that a pass scores exactly, one by one,
before their blocks are packed again: a write then a search costs no packing."""

MIN_VALUES: Final = 7500 * 384
"""Rows times dimensions from which an exact index scores a query by the coarse pass
(what it saves grows with both, its own costs with neither). Hybrid searches
of bench/http.py's memories, 384 dimensions, one core, caches warm (cold: the caches
evicted between searches, as a busy machine or many scopes do), coarse against the
full product: 5,000 rows 522 vs 483 us; 7,500 547 vs 548 (cold 849 vs 950); 10,000
651 vs 715 (cold 978 vs 1,171)."""

SLACK: Final = 1e-9
"""Added to every row's bound: the float64 rounding of scales, norms and sums (and of
the offsets a caller adds, below 2**10) is far below it."""

CODE_SLACK: Final = 1e-3
"""How far past one half a code may be from ``r / s``: the float32 rounding of
``fl(1 / s)`` and of the product (each below 2**-24 relative, on values up to 127)
is below 2e-5; clipping to +-127 moves a code by no more."""

_GROUP: Final = 4
"""Rows OpenBLAS' float32 gemv kernel computes together (see the module doc)."""


def exact_rows(matrix: F32, high: int, query: F32, rows: I64,
               gather: Callable[[I64], F32] | None = None) -> tuple[I64, F32]:
    """The float32 products of ``rows`` (in [0, high); a repeat is computed again)
    with ``query`` as the product over ``matrix[:high]`` computes them (see the module
    doc): the rows of whole groups of four in the full product in groups of four (the
    last one padded with a repeat), those of its last ``high % 4`` after them, all of
    those. Returns the rows computed (``rows``, and the last ones whenever one of them
    is asked for) and their products. ``gather(rows)`` gives ``matrix[rows]`` (the
    rows of a file read without mapping them, say)."""
    full = high - high % _GROUP
    if full == 0:
        every = np.arange(high, dtype=np.int64)
        return every, matrix[:high] @ query
    grouped = rows[rows < full]
    tail = len(grouped) < len(rows)
    if not len(grouped):
        grouped = np.arange(_GROUP, dtype=np.int64)  # the last rows follow a group, as in the full product
    pad = -len(grouped) % _GROUP
    parts = [grouped, np.repeat(grouped[-1:], pad)]
    if tail:
        parts.append(np.arange(full, high, dtype=np.int64))
    wanted = np.concatenate(parts)
    products: F32 = (matrix[wanted] if gather is None else gather(wanted)) @ query
    if not tail:
        return grouped, products[: len(grouped)]
    return (np.concatenate([grouped, parts[2]]),
            np.concatenate([products[: len(grouped)], products[len(grouped) + pad:]]))


class _Packed(NamedTuple):
    """What a pass reads, replaced as a whole (never changed in place): searches
    beside the actor may pass side by side, and each reads one of these."""

    source: F32 | None       # the rows array the blocks were made from
    blocks: tuple[Any, ...]  # numkong PackedMatrix per block of BLOCK rows
    packed: int              # rows [0, packed) are in the blocks
    dirty: frozenset[int]    # rows below packed written since
    scales: F64              # per row: its scale s (a float32's value)
    recon: float             # the largest ||s c|| packed so far


_EMPTY = _Packed(None, (), 0, frozenset(), np.zeros(0, dtype=np.float64), 0.0)


class CoarseScan:
    """The int8 copy of an exact index's rows, in packed blocks of ``BLOCK`` rows,
    with each row's scale. Rows written since their block was packed, and rows past
    the packed ones, are scored exactly (their bounds are their products) until there
    are more than ``DIRTY_MAX`` of them; then their blocks are packed again, on the
    next pass. The owner says which rows it wrote (:meth:`stale`; never while a pass
    runs: searches run beside the actor only while nothing changes the scope); a new
    rows array (the index grew, or was replaced) packs every block again."""

    __slots__ = ("_state", "dim", "settle")

    def __init__(self, dim: int, settle: Callable[[F32, int, int], None] | None = None) -> None:
        self.dim = dim
        self._state = _EMPTY
        self.settle = settle
        """Told ``(matrix, start, stop)`` once rows ``[start, stop)`` of ``matrix`` are
        packed (an owner whose rows live in a file lets their pages go)."""

    @property
    def nbytes(self) -> int:
        state = self._state
        return sum(int(block.nbytes) for block in state.blocks) + state.scales.nbytes

    def stale(self, rows: I64) -> None:
        """Rows ``rows`` were written: scored exactly until their blocks are packed again.
        Past ``DIRTY_MAX`` of them the copy is let go (the next pass packs every block,
        as it would pack most of them): writes with no search between them keep no
        growing set of rows, each copied at the next write."""
        state = self._state
        written = rows[rows < state.packed]
        if len(written):
            if len(state.dirty) + len(written) > DIRTY_MAX:
                self._state = _EMPTY
            else:
                self._state = state._replace(dirty=state.dirty.union(written.tolist()))

    def scan(self, matrix: F32, high: int, query: F32) -> tuple[F64, F64]:
        """Bounds on each row's float32 product with ``query``: (lower, upper), by row,
        rows [0, high) of ``matrix`` (the index's rows, which the copy is brought up to
        first)."""
        return self.scan_many(matrix, high, [query])[0]

    def scan_many(self, matrix: F32, high: int, queries: Sequence[F32]) -> list[tuple[F64, F64]]:
        """:meth:`scan` of each of ``queries``, in one pass over the int8 rows: the
        rows are read once for all of them (a pass is bound by reading them: over
        10,000 rows of 384 dimensions, caches cold, ~95 us for one query, ~39 us a
        query for 16; the products alone ~54 and ~23 us).
        Each query's bounds are those :meth:`scan` gives it alone (integer products
        are exact; the rest is the same arithmetic, query by query)."""
        state = self._state
        if state.source is not matrix or high < state.packed:
            state = _EMPTY._replace(source=matrix)
        if len(state.dirty) + high - state.packed > DIRTY_MAX:
            state = self._repacked(state, matrix, high)
        if state is not self._state:
            self._state = state
        return self._scan(state, matrix, high, queries)

    def _repacked(self, state: _Packed, matrix: F32, high: int) -> _Packed:
        """``state`` with the blocks of its dirty rows and of rows [packed, high) packed again."""
        todo = {row // BLOCK for row in state.dirty}
        todo.update(range(state.packed // BLOCK, -(-high // BLOCK)))
        scales = state.scales.copy() if len(state.scales) >= high else _resized(state.scales, high)
        blocks = list(state.blocks)
        recon = state.recon
        for block in sorted(todo):
            end = min(high, (block + 1) * BLOCK)
            packed, largest = self._pack(matrix, block, end, scales)
            if self.settle is not None:
                self.settle(matrix, block * BLOCK, end)
            if block < len(blocks):
                blocks[block] = packed
            else:
                blocks.append(packed)
            recon = max(recon, largest)
        return _Packed(matrix, tuple(blocks), high, frozenset(), scales, recon)

    def _pack(self, matrix: F32, block: int, end: int, scales_out: F64) -> tuple[Any, float]:
        """Rows [block * BLOCK, end) quantised and packed: codes ``rint(r * fl(1 / s))``
        with ``s = max |r| / 127`` (float32), their scales written to ``scales_out``;
        and the largest ``||s c||`` among them."""
        start = block * BLOCK
        rows = matrix[start:end]
        peak = np.abs(rows).max(axis=1)
        scales = np.where(peak > 0, peak / np.float32(127.0), np.float32(1.0)).astype(np.float32)
        codes = np.rint(rows * (np.float32(1.0) / scales)[:, None])
        np.clip(codes, -127.0, 127.0, out=codes)
        # sums of squared codes: whole numbers below 2**24, exact in float32
        squares = np.einsum("ij,ij->i", codes, codes)
        scales_out[start:end] = scales
        largest = float((scales.astype(np.float64) * np.sqrt(squares.astype(np.float64))).max())
        return _nk.dots_pack(codes.astype(np.int8)), largest

    def _scan(self, state: _Packed, matrix: F32, high: int, queries: Sequence[F32]) -> list[tuple[F64, F64]]:
        """The bounds of each query, as rows of a (queries, rows) array, computed for
        all of them at once: each query's values are those it gets alone (the same
        arithmetic, element by element, its sums along its own row)."""
        packed = state.packed
        lower = np.empty((len(queries), high), dtype=np.float64)
        upper = np.empty((len(queries), high), dtype=np.float64)
        if packed:
            codes, scale, per_scale, offset = self._query_terms(queries, state.recon)
            dots = np.concatenate([np.asarray(_nk.dots_packed(codes, block)) for block in state.blocks],
                                  axis=1)
            scales = state.scales[:packed]
            np.multiply(dots, scales * scale, out=lower[:, :packed])
            bound = scales * per_scale
            bound += offset
            np.add(lower[:, :packed], bound, out=upper[:, :packed])
            lower[:, :packed] -= bound
        exact = np.arange(packed, high, dtype=np.int64)
        if state.dirty:
            exact = np.concatenate([np.array(sorted(state.dirty), dtype=np.int64), exact])
        if len(exact):  # rows written since they were packed: their products, exactly
            for low, up, query in zip(lower, upper, queries, strict=True):
                taken, products = exact_rows(matrix, high, query, exact)
                low[taken] = products
                up[taken] = products
        return list(zip(lower, upper, strict=True))

    def _query_terms(self, queries: Sequence[F32],
                     recon: float) -> tuple[npt.NDArray[np.int8], Any, Any, Any]:
        """Each query's int8 codes ``u^`` (a (queries, dim) array), and what its rows'
        bounds take from it (see the module doc): its codes' scale, per unit of a row's
        scale ``(1/2 + CODE_SLACK) ||u||_1 + gamma_d 127 sqrt(d) ||u||``, and
        ``recon ||u - u^|| + SLACK``; as floats for one query, as columns for several
        (the same values: the same operations, sums along each query's own row)."""
        gamma = _gamma(self.dim) * 127.0 * math.sqrt(self.dim)
        if len(queries) == 1:  # (plain floats: a one-element array's every operation costs ~1 us)
            wide = queries[0].astype(np.float64)
            size = np.abs(wide)
            peak = float(np.maximum.reduce(size))
            scale = peak / 127.0 if peak > 0 else 1.0
            codes = np.minimum(np.maximum(np.rint(wide / scale), -127), 127)
            rest = wide - codes * scale
            length = float(np.sqrt(np.add.reduce(wide * wide)))
            per_scale = (0.5 + CODE_SLACK) * float(np.add.reduce(size)) + gamma * length
            offset = recon * float(np.sqrt(np.add.reduce(rest * rest))) + SLACK
            return codes.astype(np.int8)[None, :], scale, per_scale, offset
        wide2 = np.array(queries, dtype=np.float64, ndmin=2)
        size2 = np.abs(wide2)
        peaks = np.maximum.reduce(size2, axis=1)
        scales = np.where(peaks > 0, peaks / 127.0, 1.0)[:, None]
        codes2 = np.minimum(np.maximum(np.rint(wide2 / scales), -127), 127)
        rest2 = wide2 - codes2 * scales
        lengths = np.sqrt(np.add.reduce(wide2 * wide2, axis=1))
        per_scales = (0.5 + CODE_SLACK) * np.add.reduce(size2, axis=1) + gamma * lengths
        offsets = recon * np.sqrt(np.add.reduce(rest2 * rest2, axis=1)) + SLACK
        return codes2.astype(np.int8), scales, per_scales[:, None], offsets[:, None]


def _gamma(dim: int) -> float:
    unit = 2.0 ** -24
    return dim * unit / (1.0 - dim * unit)


def _resized(values: F64, size: int) -> F64:
    out = np.zeros(max(size, 2 * len(values)), dtype=np.float64)
    out[: len(values)] = values
    return out
