"""The coarse int8 pass of exact searches (mnemex.index._coarse): its bound holds for
every row, rescored rows get bit for bit what the full product gives them, and an
exact index's searches, look-ups and cuts find what the full product finds, through
removals, reused rows, writes after a pass, growth and hybrid rankings."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from mnemex.index import VectorIndex, _coarse
from mnemex.index._coarse import CoarseScan, exact_rows
from mnemex.index.vector import ExactScores


@pytest.fixture(autouse=True)
def one_blas_thread() -> Iterator[None]:
    """As ``mnemex serve`` runs (config server.blas_threads): a product split over
    threads can give a row at a thread's boundary another last bit."""
    with threadpool_limits(1, user_api="blas"):
        yield


def unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def rows_of_every_kind(n: int, dim: int, seed: int) -> np.ndarray:
    """Dense, sparse, one-hot, one large component among tiny ones, and zero rows."""
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((n, dim))
    sparse = dense * (rng.random((n, dim)) < 0.1)
    one_hot = np.eye(dim)[rng.integers(0, dim, n)] * rng.choice([-1.0, 1.0], (n, 1))
    spiky = rng.standard_normal((n, dim)) * 1e-4
    spiky[np.arange(n), rng.integers(0, dim, n)] = 1.0
    kinds = np.stack([dense, sparse, one_hot, spiky])[rng.integers(0, 4, n), np.arange(n)]
    kinds[rng.random(n) < 0.01] = 0.0
    return unit(kinds)


def clustered(n: int, dim: int, seed: int) -> np.ndarray:
    """Rows near a few centres: many cosines close to each other (cuts among near-ties)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((5, dim))
    return unit(centres[rng.integers(0, 5, n)] + 0.3 * rng.standard_normal((n, dim)))


@pytest.mark.parametrize("dim", [16, 384])
def test_every_rows_product_lies_within_its_bounds(dim: int) -> None:
    matrix = rows_of_every_kind(3000, dim, seed=dim)
    rng = np.random.default_rng(1)
    queries = [*unit(rng.standard_normal((5, dim))), *rows_of_every_kind(5, dim, seed=7),
               (5.0 * unit(rng.standard_normal((1, dim))))[0],  # any length: the bound scales with it
               (1e-3 * unit(rng.standard_normal((1, dim))))[0], np.zeros(dim, dtype=np.float32)]
    scan = CoarseScan(dim)
    for given in queries:
        query = np.ascontiguousarray(given, dtype=np.float32)
        lower, upper = scan.scan(matrix, len(matrix), query)
        products = (matrix @ query).astype(np.float64)
        assert (lower <= products).all() and (products <= upper).all()
    # and useful: over dense unit rows and queries, far narrower than the cosines' range
    dense = unit(rng.standard_normal((2000, dim)))
    lower, upper = CoarseScan(dim).scan(dense, len(dense), unit(rng.standard_normal((1, dim)))[0])
    assert float(np.median(upper - lower)) < (0.05 if dim == 384 else 0.25)


@pytest.mark.parametrize("dim", [16, 33, 384])
def test_a_pass_for_several_queries_gives_each_the_bounds_it_gets_alone(dim: int) -> None:
    matrix = rows_of_every_kind(1500, dim, seed=dim + 1)
    rng = np.random.default_rng(dim)
    queries = [np.ascontiguousarray(q, dtype=np.float32) for q in (
        *unit(rng.standard_normal((6, dim))), *rows_of_every_kind(4, dim, seed=3),
        (1e-6 * unit(rng.standard_normal((1, dim))))[0], np.zeros(dim, dtype=np.float32))]
    scan = CoarseScan(dim)
    scan.scan(matrix, len(matrix), queries[0])  # packed; then rows written since, scored exactly
    matrix[[3, 700, 1499]] = rows_of_every_kind(3, dim, seed=9)
    scan.stale(np.array([3, 700, 1499], dtype=np.int64))
    for many in (queries, queries[:2], queries[-3:]):
        together = scan.scan_many(matrix, len(matrix), many)
        for query, (lower, upper) in zip(many, together, strict=True):
            alone_lower, alone_upper = scan.scan(matrix, len(matrix), query)
            assert np.array_equal(lower, alone_lower) and np.array_equal(upper, alone_upper)


def test_rescored_rows_get_the_full_products_bits() -> None:
    rng = np.random.default_rng(2)
    for high in (1, 3, 4, 5, 7, 8, 101, 1001, 4099):
        matrix = unit(rng.standard_normal((high + 13, 384)))  # rows past high are not the product's
        for _ in range(10):
            query = unit(rng.standard_normal((1, 384)))[0]
            full = matrix[:high] @ query
            for count in (1, 2, 3, 5, 30, min(high, 281)):
                rows = np.sort(rng.choice(high, min(count, high), replace=False))
                taken, products = exact_rows(matrix, high, query, rows)
                assert set(rows.tolist()) <= set(taken.tolist())
                assert len(set(taken.tolist())) == len(taken)
                assert np.array_equal(products, full[taken])


def full_scores(index: VectorIndex, query: np.ndarray) -> ExactScores:
    """What exact_scores gave before the coarse pass: the product over every row."""
    unit_query = index._as_matrix(query, 1)[0]
    return ExactScores(index, index._rows[: index._high] @ unit_query)


def assert_same_answers(index: VectorIndex, queries: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ids = np.array(index.doc_ids(), dtype=np.int64)
    for query in queries:
        coarse, full = index.exact_scores(query), full_scores(index, query)
        assert coarse is not None and coarse._known is not None  # the coarse pass ran
        for top_k in (1, 10, 30, 200):
            assert coarse.search(top_k) == full.search(top_k) == index.search(query, top_k)
            for allowed in (set(rng.choice(ids, 40).tolist()), ids[rng.random(len(ids)) < 0.3],
                            rng.random(int(ids.max()) + 1) < 0.5, [], [int(ids.max()) + 10]):
                assert coarse.search(top_k, allowed) == full.search(top_k, allowed)
        docs = np.concatenate([rng.choice(ids, 50, replace=False), [int(ids.max()) + 5, -1]]).astype(np.int64)
        # docs read next, rescored with a search's rows: the same search, the same cosines
        early = index.exact_scores(query)
        assert early is not None
        assert early.search(30, None, docs) == full.search(30)
        known = int(early._known.sum()) if early._known is not None else 0
        assert np.array_equal(early.of(docs), full.of(docs))
        assert early._known is not None and int(early._known.sum()) == known  # nothing left to rescore
        assert early.search(10, ids[::3], docs[:5]) == full.search(10, ids[::3])
        assert np.array_equal(coarse.of(docs), full.of(docs))
        assert np.array_equal(coarse.of(docs[:-2]), full.of(docs[:-2]))
        # the docs that could be among the best by offset + cosine: the same best found among them
        offsets = rng.random(len(docs)) * rng.choice([0.0, 0.05, 1.0])
        for count in (1, 8, 30):
            reach = coarse.reach(docs, offsets, count)
            kept = docs if reach is None else docs[reach]
            kept_offsets = offsets if reach is None else offsets[reach]
            assert best(kept, kept_offsets + coarse.of(kept), count) == \
                best(docs, offsets + full.of(docs), count)


def best(docs: np.ndarray, scores: np.ndarray, count: int) -> set[int]:
    """The ``count`` distinct docs of highest score, ties by lower doc."""
    order = sorted(zip((-scores).tolist(), docs.tolist(), strict=True))
    chosen: list[int] = []
    for _, doc in order:
        if doc not in chosen:
            chosen.append(doc)
    return set(chosen[:count])


@pytest.fixture
def coarse_from_3072_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_coarse, "MIN_VALUES", 64 * 48)


@pytest.mark.usefixtures("coarse_from_3072_values")
def test_an_exact_index_finds_what_the_full_product_finds() -> None:
    dim = 48
    index = VectorIndex(dim, hnsw_threshold=100_000)
    index.add_many(np.arange(2500), clustered(2500, dim, seed=3))
    queries = np.concatenate([clustered(6, dim, seed=4),
                              unit(np.random.default_rng(5).standard_normal((3, dim)))])
    assert_same_answers(index, queries, seed=6)
    # free rows (high above count), then rows reused and written after the pass,
    # fewer than DIRTY_MAX (scored exactly) and then more (packed again)
    for doc in range(0, 2500, 9):
        index.remove(doc)
    assert_same_answers(index, queries, seed=7)
    index.add_many(np.arange(5000, 5100), clustered(100, dim, seed=8))
    index.update(10, clustered(1, dim, seed=9)[0])
    assert index._coarse is not None and 0 < len(index._coarse._state.dirty) <= _coarse.DIRTY_MAX
    assert_same_answers(index, queries, seed=10)
    more = 2 * _coarse.DIRTY_MAX
    index.add_many(np.arange(6000, 6000 + more), clustered(more, dim, seed=11))
    assert_same_answers(index, queries, seed=12)  # past the rows once packed, and a grown rows array
    assert not index._coarse._state.dirty and index._coarse._state.packed == index._high
    for doc in index.doc_ids()[: len(index) - 100]:  # shrunk below the coarse pass: the full product again
        index.remove(doc)
    index.add_many(np.arange(9000, 9010), clustered(10, dim, seed=13))
    assert index.exact_scores(queries[0]) is not None and index._coarse is not None


@pytest.mark.usefixtures("coarse_from_3072_values")
def test_writes_past_dirty_max_without_a_search_let_the_copy_go() -> None:
    dim = 48
    index = VectorIndex(dim, hnsw_threshold=100_000)
    index.add_many(np.arange(2500), clustered(2500, dim, seed=21))
    queries = clustered(4, dim, seed=22)
    assert_same_answers(index, queries, seed=23)  # packed
    coarse = index._coarse
    assert coarse is not None and coarse._state.packed == index._high
    fresh = clustered(_coarse.DIRTY_MAX + 40, dim, seed=24)
    for doc, vector in enumerate(fresh[: _coarse.DIRTY_MAX]):
        index.update(doc, vector)
    assert len(coarse._state.dirty) == _coarse.DIRTY_MAX
    for doc, vector in enumerate(fresh[_coarse.DIRTY_MAX:], start=_coarse.DIRTY_MAX):
        index.update(doc, vector)  # one past: no set kept or copied any more
        assert coarse._state.packed == 0 and not coarse._state.dirty and coarse.nbytes == 0
    assert_same_answers(index, queries, seed=25)  # every block packed again
    assert coarse._state.packed == index._high


@pytest.mark.usefixtures("coarse_from_3072_values")
def test_a_small_index_uses_the_full_product_and_a_graph_none() -> None:
    index = VectorIndex(16, hnsw_threshold=300)
    index.add_many(np.arange(50), clustered(50, 16, seed=1))
    scores = index.exact_scores(clustered(1, 16, seed=2)[0])
    assert scores is not None and scores._known is None and index._coarse is None
    index.add_many(np.arange(50, 200), clustered(150, 16, seed=3))
    assert index.exact_scores(clustered(1, 16, seed=2)[0]) is not None and index._coarse is not None
    index.add_many(np.arange(200, 400), clustered(200, 16, seed=4))
    assert index.mode == "hnsw" and index.exact_scores(clustered(1, 16, seed=2)[0]) is None
    assert index._coarse is None  # its copy let go with exact mode


@pytest.mark.usefixtures("coarse_from_3072_values")
def test_passes_side_by_side_each_read_one_copy() -> None:
    """Searches beside the actor pass at once (the first ones packing): each answer
    is the full product's."""
    dim = 32
    index = VectorIndex(dim, hnsw_threshold=100_000)
    index.add_many(np.arange(3000), clustered(3000, dim, seed=14))
    queries = clustered(40, dim, seed=15)
    expected = [full_scores(index, query).search(10) for query in queries]
    answers: dict[int, list[tuple[int, float]]] = {}
    failures: list[BaseException] = []

    def run(part: int) -> None:
        try:
            for i in range(part, len(queries), 4):
                scores = index.exact_scores(queries[i])
                assert scores is not None
                answers[i] = scores.search(10)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(part,)) for part in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures and [answers[i] for i in range(len(queries))] == expected



@pytest.mark.usefixtures("coarse_from_3072_values")
def test_the_int8_copy_is_let_go_once_it_cannot_serve() -> None:
    """A copy holds its rows' array: it goes when the rows move to a larger array and
    when the index starts searching a graph (it was kept for good, with the old rows),
    and a graph never has one."""
    index = VectorIndex(16, hnsw_threshold=2_000)
    index.add_many(np.arange(300), clustered(300, 16, seed=1))
    query = clustered(1, 16, seed=2)[0]
    index.search(query, 5)  # a vector-mode search packs the copy
    assert index._coarse is not None
    rows = index._rows
    more = len(rows) - 300 + 1  # one past the array's room: a larger array
    index.add_many(np.arange(300, 300 + more), clustered(more, 16, seed=3))
    assert index._rows is not rows and index._coarse is None
    index.search(query, 5)
    assert index._coarse is not None
    index.hnsw_threshold = 100
    index.build_graph()
    assert index.mode == "hnsw" and index._coarse is None
    index.search(query, 5)
    # over a graph nothing makes it again: a ranking reads its cosines from rows
    assert index.exact_scores(query) is None and index._coarse is None and index.coarse_bytes == 0
