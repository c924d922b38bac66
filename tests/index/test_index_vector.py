"""VectorIndex: exact mode equals brute force, HNSW mode by recall, deletes,
filters, growth, tombstone rebuilds, planned builds and sidecars."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from mnemex.errors import InvalidInput, NotFound
from mnemex.index import VectorIndex

DIM = 16


def unit_vectors(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def brute_force(vectors: dict[int, np.ndarray], query: np.ndarray, top_k: int,
                allowed: set[int] | None = None) -> list[tuple[int, float]]:
    q = query / np.linalg.norm(query)
    scored = []
    for doc_id, v in vectors.items():
        if allowed is None or doc_id in allowed:
            scored.append((-float(np.dot(v / np.linalg.norm(v), q)), doc_id))
    scored.sort()
    return [(d, -s) for s, d in scored[:top_k]]


def assert_same_results(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    """Same ranking up to float32 rounding: equal scores, ids equal except inside near-ties."""
    assert len(got) == len(expected)
    for (gid, gs), (eid, es) in zip(got, expected, strict=True):
        assert gs == pytest.approx(es, abs=1e-5)
        if gid != eid:
            assert abs(gs - es) < 1e-5
    if expected:
        assert {d for d, s in got if s > expected[-1][1] + 1e-5} == {
            d for d, s in expected if s > expected[-1][1] + 1e-5}


def recall(got: list[tuple[int, float]], exact: list[tuple[int, float]]) -> float:
    return len({d for d, _ in got} & {d for d, _ in exact}) / max(1, len(exact))


def test_exact_mode_equals_brute_force_with_filters() -> None:
    vectors = unit_vectors(500)
    index = VectorIndex(DIM)
    for doc_id, v in enumerate(vectors):
        index.add(doc_id, v * 3.0)  # any scale: stored normalised
    model = dict(enumerate(vectors))
    for doc_id in range(0, 500, 3):
        index.remove(doc_id)
        del model[doc_id]
    allowed = set(range(0, 500, 7))
    for query in unit_vectors(20, seed=1):
        assert index.mode == "exact"
        assert_same_results(index.search(query, 10), brute_force(model, query, 10))
        assert_same_results(index.search(query, 10, allowed=allowed), brute_force(model, query, 10, allowed))


def test_exact_scores_search_and_look_up_as_the_index_does() -> None:
    """One product for several searches of a query (ExactScores): the index's own
    results with and without filters, after removals and reused rows; cosines of any
    doc (0 without a vector); none once a graph answers instead."""
    vectors = unit_vectors(300)
    index = VectorIndex(DIM, hnsw_threshold=400)
    index.add_many(list(range(300)), vectors)
    for doc_id in range(0, 300, 4):
        index.remove(doc_id)
    index.add_many([500, 501], unit_vectors(2, seed=3))  # into freed rows
    everything = {d: index.vector(d) for d in index.doc_ids()}
    for query in unit_vectors(10, seed=2):
        scores = index.exact_scores(query * 2.0)  # any scale, as search takes it
        assert scores is not None
        for top_k in (1, 10, 400):
            assert scores.search(top_k) == index.search(query * 2.0, top_k)
            for allowed in (set(range(0, 600, 3)), set(), np.arange(600) % 5 == 0, [501, 7, 9999]):
                got = scores.search(top_k, allowed)
                assert [d for d, _ in got] == [d for d, _ in index.search(query * 2.0, top_k, allowed)]
                assert_same_results(got, brute_force(everything, query, top_k, set(np.flatnonzero(allowed))
                                                     if isinstance(allowed, np.ndarray) else set(allowed)))
        docs = np.array([1, 4, 500, 9999, 2], dtype=np.int64)  # 4 was removed, 9999 never added
        expected = [float(everything[d] @ query) if d in everything else 0.0 for d in docs.tolist()]
        assert scores.of(docs) == pytest.approx(expected, abs=1e-6)
    index.add_many(list(range(1000, 1200)), unit_vectors(200, seed=4))
    assert index.mode == "hnsw" and index.exact_scores(vectors[0]) is None


def test_rows_of_removed_documents_are_reused() -> None:
    index = VectorIndex(DIM)
    vectors = unit_vectors(10)
    for doc_id in range(10):
        index.add(doc_id, vectors[doc_id])
    index.remove(3)
    index.add(10, vectors[3])
    assert index.search(vectors[3], 1) == [(10, pytest.approx(1.0, abs=1e-6))]
    assert len(index) == 10


@pytest.mark.parametrize(("call", "error"), [
    (lambda ix: ix.add(0, np.ones(DIM)), InvalidInput),
    (lambda ix: ix.add(1, np.ones(DIM + 1)), InvalidInput),
    (lambda ix: ix.add(1, np.full(DIM, np.nan)), InvalidInput),
    (lambda ix: ix.add(1, "text"), InvalidInput),
    (lambda ix: ix.add_many([1, 1], np.ones((2, DIM))), InvalidInput),
    (lambda ix: ix.add_many([1, 2], np.ones((3, DIM))), InvalidInput),
    (lambda ix: ix.search(np.ones(DIM - 1)), InvalidInput),
    (lambda ix: ix.search(np.ones(DIM), top_k=0), InvalidInput),
    (lambda ix: ix.remove(5), NotFound),
    (lambda ix: ix.update(5, np.ones(DIM)), NotFound),
    (lambda ix: ix.vector(5), NotFound),
])
def test_bad_arguments_are_refused(call: object, error: type[Exception]) -> None:
    index = VectorIndex(DIM)
    index.add(0, np.ones(DIM))
    with pytest.raises(error):
        call(index)  # type: ignore[operator]
    assert len(index) == 1 and index.search(np.ones(DIM), 5)[0][0] == 0


@pytest.mark.parametrize("params", [{"dim": 0}, {"tombstone_ratio": 1.0}, {"m": 1}, {"ef_search": 0}])
def test_bad_parameters_are_refused(params: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        VectorIndex(**{"dim": DIM, **params})  # type: ignore[arg-type]


def test_zero_vector_is_stored_and_scores_zero() -> None:
    index = VectorIndex(DIM)
    index.add(0, np.zeros(DIM))
    index.add(1, np.ones(DIM))
    assert index.search(np.ones(DIM), 2) == [(1, pytest.approx(1.0, abs=1e-6)), (0, 0.0)]


@pytest.fixture(scope="module")
def big() -> np.ndarray:
    return unit_vectors(3000, dim=32, seed=7)


def test_hnsw_mode_recall_against_exact(big: np.ndarray) -> None:
    index = VectorIndex(32, hnsw_threshold=1000)
    index.add_many(list(range(len(big))), big)
    assert index.mode == "hnsw"
    queries = unit_vectors(50, dim=32, seed=8)
    recalls = [recall(index.search(q, 10), index.exact_search(q, 10)) for q in queries]
    assert np.mean(recalls) >= 0.95
    # Rescored from the stored vectors: every score is the exact cosine.
    got = index.search(queries[0], 10)
    exact = dict(index.exact_search(queries[0], len(big)))
    assert all(s == pytest.approx(exact[d], abs=1e-5) for d, s in got)


def test_hnsw_never_returns_deleted_and_rebuilds_past_the_tombstone_ratio(big: np.ndarray) -> None:
    index = VectorIndex(32, hnsw_threshold=500, tombstone_ratio=0.2)
    index.add_many(list(range(1000)), big[:1000])
    assert index.mode == "hnsw"
    deleted = set(range(0, 1000, 7))
    for doc_id in sorted(deleted):
        index.remove(doc_id)
    assert 0 < index.tombstones <= 0.2 * 1000
    for q in big[:50]:
        assert not {d for d, _ in index.search(q, 20)} & deleted
    for doc_id in range(1, 1000, 7):
        index.remove(doc_id)
    # 286 tombstones of 1000 would pass the ratio: the graph was rebuilt on the way.
    assert index.tombstones < 286 - 200
    assert index.mode == "hnsw" and len(index) == 1000 - 286
    for q in big[:20]:
        assert recall(index.search(q, 10), index.exact_search(q, 10)) >= 0.8


def test_hnsw_grows_past_its_capacity(big: np.ndarray) -> None:
    index = VectorIndex(32, hnsw_threshold=300)
    for doc_id in range(1500):
        index.add(doc_id, big[doc_id])
    assert index.mode == "hnsw" and len(index) == 1500
    assert index.search(big[1499], 1)[0][0] == 1499


def test_update_moves_a_vector_in_hnsw_mode(big: np.ndarray) -> None:
    index = VectorIndex(32, hnsw_threshold=100)
    index.add_many(list(range(500)), big[:500])
    index.update(3, big[2000])
    assert index.search(big[2000], 1)[0][0] == 3
    assert 3 not in {d for d, _ in index.search(big[3], 5)} or index.search(big[3], 1)[0][0] != 3


@pytest.mark.parametrize("allowed_count", [5, 50, 1200])
def test_hnsw_filtered_search_returns_only_allowed(big: np.ndarray, allowed_count: int) -> None:
    index = VectorIndex(32, hnsw_threshold=1000, exact_filter_max=100)
    index._filter_crossover = 0  # only exact_filter_max decides
    index.add_many(list(range(len(big))), big)
    rng = np.random.default_rng(allowed_count)
    allowed = set(rng.choice(len(big), allowed_count, replace=False).tolist())
    recalls = []
    for q in unit_vectors(20, dim=32, seed=9):
        got = index.search(q, 10, allowed=allowed)
        exact = index.exact_search(q, 10, allowed=allowed)
        assert {d for d, _ in got} <= allowed
        assert len(got) == min(10, allowed_count)
        if allowed_count <= 100:  # answered exactly
            assert_same_results(got, exact)
        recalls.append(recall(got, exact))
    assert np.mean(recalls) >= 0.95


def test_planned_build_replays_changes_made_while_it_ran(big: np.ndarray) -> None:
    index = VectorIndex(32, hnsw_threshold=500, auto_build=False)
    index.add_many(list(range(600)), big[:600])
    assert index.mode == "exact" and index.wants_graph
    build = index.plan_graph()
    index.add_many(list(range(600, 700)), big[600:700])
    index.remove(5)
    index.update(6, big[2500])
    assert index.adopt(build.run())
    assert index.mode == "hnsw" and not index.wants_graph
    assert index.search(big[650], 1)[0][0] == 650
    assert index.search(big[2500], 1)[0][0] == 6
    assert 5 not in {d for d, _ in index.search(big[5], 10)}
    stale = index.plan_graph()
    newer = index.plan_graph()
    assert not index.adopt(stale.run())
    assert index.adopt(newer.run())


def test_sidecar_round_trip_gives_identical_results(big: np.ndarray) -> None:
    index = VectorIndex(32, hnsw_threshold=500)
    index.add_many(list(range(1000)), big[:1000])
    index.remove(10)
    sidecar = index.to_sidecar()
    assert sidecar is not None
    ids = index.doc_ids()
    vectors = np.stack([index.vector(d) for d in ids])
    restored = VectorIndex.from_sidecar(sidecar, ids, vectors, 32, hnsw_threshold=500)
    assert restored.sidecar_status == "loaded" and restored.tombstones == 1
    for q in big[1000:1030]:
        assert restored.search(q, 10) == index.search(q, 10)
    restored.add(5000, big[2999])
    assert restored.search(big[2999], 1)[0][0] == 5000


@pytest.mark.parametrize(("tamper", "status"), [
    (lambda ids, vecs, data: (ids[:-1], vecs[:-1], data), "stale"),
    (lambda ids, vecs, data: (ids, np.roll(vecs, 1, axis=0), data), "stale"),
    (lambda ids, vecs, data: (ids, vecs, data[:-10] + b"0123456789"), "corrupt"),
    (lambda ids, vecs, data: (ids, vecs, b"garbage"), "corrupt"),
    (lambda ids, vecs, data: (ids, vecs, None), "absent"),
])
def test_a_mismatched_sidecar_is_detected_and_the_graph_rebuilt(big: np.ndarray, tamper: object,
                                                               status: str) -> None:
    index = VectorIndex(32, hnsw_threshold=200)
    index.add_many(list(range(400)), big[:400])
    ids = index.doc_ids()
    vectors = np.stack([index.vector(d) for d in ids])
    new_ids, new_vectors, data = tamper(ids, vectors, index.to_sidecar())  # type: ignore[operator]
    restored = VectorIndex.from_sidecar(data, new_ids, new_vectors, 32, hnsw_threshold=200)
    assert restored.sidecar_status == status
    assert restored.mode == "hnsw"
    assert restored.search(new_vectors[0], 1)[0][0] == new_ids[0]


def test_exact_mode_has_no_sidecar() -> None:
    index = VectorIndex(DIM)
    index.add(0, np.ones(DIM))
    assert index.to_sidecar() is None
    assert VectorIndex.from_vectors([0], np.ones((1, DIM)), DIM).mode == "exact"


vectors_st = st.lists(st.integers(-3, 3), min_size=4, max_size=4).filter(any).map(
    lambda xs: np.array(xs, dtype=np.float32))


class ExactMachine(RuleBasedStateMachine):
    """Exact mode against a dict of vectors ranked by brute force."""

    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.index = VectorIndex(4)
        self.model: dict[int, np.ndarray] = {}
        self.next_id = 0

    @rule(target=ids, vector=vectors_st)
    def add(self, vector: np.ndarray) -> int:
        doc_id = self.next_id
        self.next_id += 1
        self.index.add(doc_id, vector)
        self.model[doc_id] = vector
        return doc_id

    @rule(doc_id=consumes(ids))
    def remove(self, doc_id: int) -> None:
        self.index.remove(doc_id)
        del self.model[doc_id]

    @rule(doc_id=ids, vector=vectors_st)
    def update(self, doc_id: int, vector: np.ndarray) -> None:
        self.index.update(doc_id, vector)
        self.model[doc_id] = vector

    @rule(query=vectors_st, top_k=st.integers(1, 6), data=st.data())
    def search(self, query: np.ndarray, top_k: int, data: st.DataObject) -> None:
        allowed = data.draw(st.none() | st.sets(st.integers(0, self.next_id)))
        assert_same_results(self.index.search(query, top_k, allowed=allowed),
                            brute_force(self.model, query, top_k, allowed))

    @invariant()
    def sizes_agree(self) -> None:
        assert len(self.index) == len(self.model)


ExactMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
test_exact_vector_index_matches_brute_force = ExactMachine.TestCase


class HnswMachine(RuleBasedStateMachine):
    """HNSW mode (threshold 8, small graphs, frequent rebuilds): deletes are never
    returned, filters are respected, and results are real cosines of live docs."""

    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.index = VectorIndex(8, hnsw_threshold=8, m=4, ef_construction=16, exact_filter_max=2)
        self.index._filter_crossover = 0
        self.model: dict[int, np.ndarray] = {}
        self.next_id = 0
        self.pool = unit_vectors(64, dim=8, seed=3)

    @rule(target=ids, which=st.integers(0, 63))
    def add(self, which: int) -> int:
        doc_id = self.next_id
        self.next_id += 1
        self.index.add(doc_id, self.pool[which])
        self.model[doc_id] = self.pool[which]
        return doc_id

    @rule(doc_id=consumes(ids))
    def remove(self, doc_id: int) -> None:
        self.index.remove(doc_id)
        del self.model[doc_id]

    @rule(doc_id=ids, which=st.integers(0, 63))
    def update(self, doc_id: int, which: int) -> None:
        self.index.update(doc_id, self.pool[which])
        self.model[doc_id] = self.pool[which]

    @rule(which=st.integers(0, 63), top_k=st.integers(1, 10), data=st.data())
    def search(self, which: int, top_k: int, data: st.DataObject) -> None:
        allowed = data.draw(st.none() | st.sets(st.integers(0, self.next_id)))
        got = self.index.search(self.pool[which], top_k, allowed=allowed)
        live = set(self.model) if allowed is None else set(self.model) & allowed
        assert {d for d, _ in got} <= live
        assert len(got) == min(top_k, len(live))
        for doc_id, score in got:
            assert score == pytest.approx(float(self.model[doc_id] @ self.pool[which]), abs=1e-5)

    @invariant()
    def sizes_agree(self) -> None:
        assert len(self.index) == len(self.model)
        assert self.index.doc_ids() == sorted(self.model)


HnswMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
test_hnsw_vector_index_keeps_its_promises = HnswMachine.TestCase


def test_same_operations_give_the_same_graph_and_results(big: np.ndarray) -> None:
    def build() -> VectorIndex:
        index = VectorIndex(32, hnsw_threshold=300)
        index.add_many(list(range(800)), big[:800])
        for doc_id in range(0, 800, 9):
            index.remove(doc_id)
        index.update(1, big[2900])
        return index

    first, second = build(), build()
    assert first.to_sidecar() == second.to_sidecar()
    for q in big[2000:2020]:
        assert first.search(q, 10) == second.search(q, 10)


# -- deferred inserts: searched exactly until a catch-up build takes them in ----------------------
class DeferredIndex(RuleBasedStateMachine):
    """With ``defer_inserts`` a graph-mode index keeps new vectors pending, searched
    exactly and merged; catch-up builds (clone + add, planned and adopted later, with
    changes in between) take them in. Checked against brute force: every live doc is
    found by its own vector, and nothing removed is ever returned."""

    def __init__(self) -> None:
        super().__init__()
        self.index = VectorIndex(DIM, hnsw_threshold=40, m=8, ef_construction=40, ef_search=64,
                                 auto_build=False, defer_inserts=True, catch_up_min=8, catch_up_share=0.05)
        self.vectors: dict[int, np.ndarray] = {}
        self.rng = np.random.default_rng(7)
        self.plans: list[object] = []

    def _vector(self) -> np.ndarray:
        v = self.rng.standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    @rule(count=st.integers(1, 12))
    def add(self, count: int) -> None:
        start = max(self.vectors, default=-1) + 1
        ids = list(range(start, start + count))
        matrix = np.stack([self._vector() for _ in ids])
        self.index.add_many(ids, matrix)
        self.vectors.update(zip(ids, matrix, strict=True))

    @rule(data=st.data())
    def remove_or_update(self, data: st.DataObject) -> None:
        if not self.vectors:
            return
        doc = data.draw(st.sampled_from(sorted(self.vectors)))
        if data.draw(st.booleans()):
            self.index.remove(doc)
            del self.vectors[doc]
        else:
            vector = self._vector()
            self.index.update(doc, vector)
            self.vectors[doc] = vector

    @rule()
    def plan(self) -> None:
        if self.index.wants_graph:
            self.plans.append(self.index.plan_graph())

    @rule()
    def finish(self) -> None:
        if self.plans:
            build = self.plans.pop()
            self.index.adopt(build.run())  # type: ignore[attr-defined]
            self.plans.clear()  # older plans are stale now

    @invariant()
    def every_live_doc_is_found_by_its_own_vector_and_no_removed_one_at_all(self) -> None:
        for doc, vector in list(self.vectors.items())[-10:]:
            hits = self.index.search(vector, 5)
            assert hits and hits[0][0] == doc
            assert all(hit in self.vectors for hit, _ in hits)
        if self.index.mode == "hnsw":
            assert self.index.pending < len(self.vectors) + 1


TestDeferredIndex = DeferredIndex.TestCase
TestDeferredIndex.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


def test_deferred_vectors_are_searched_exactly_beside_the_graph_with_and_without_filters() -> None:
    """A graph over few vectors with a wide beam is exact, so graph + deferred pass
    must equal an exact search, through adds (the contiguous copy grows), removals
    and updates of deferred docs (it is rebuilt), filters and top_k past the pending."""
    vectors = unit_vectors(700, seed=11)
    index = VectorIndex(DIM, hnsw_threshold=300, ef_search=400, auto_build=False, defer_inserts=True,
                        catch_up_min=10_000)
    index.add_many(range(300), vectors[:300])
    index.adopt(index.plan_graph().run())
    live = {d: vectors[d] for d in range(300)}
    queries = unit_vectors(30, seed=12)
    rng = np.random.default_rng(13)

    def check() -> None:
        allowed = {int(d) for d in rng.choice(sorted(live), size=len(live) // 2, replace=False)}
        for q in (*queries, *(live[d] for d in sorted(live)[-5:])):
            for top_k in (1, 10, 400):
                assert_same_results(index.search(q, top_k), brute_force(live, q, top_k))
                assert_same_results(index.search(q, top_k, allowed), brute_force(live, q, top_k, allowed))

    for start in range(300, 700, 100):
        index.add_many(range(start, start + 100), vectors[start : start + 100])
        live.update((d, vectors[d]) for d in range(start, start + 100))
        assert index.mode == "hnsw" and index.pending == len(live) - 300
        check()
    for doc in (350, 699, 120):  # deferred, deferred, in the graph
        index.remove(doc)
        del live[doc]
    index.update(400, vectors[5])
    live[400] = vectors[5]
    check()
    assert index.search(vectors[5], 2)[0][1] == pytest.approx(1.0, abs=1e-5)


def test_deferred_inserts_survive_a_sidecar_round_trip() -> None:
    vectors = unit_vectors(300, seed=3)
    index = VectorIndex(DIM, hnsw_threshold=200, auto_build=False, defer_inserts=True, catch_up_min=1000)
    index.add_many(range(200), vectors[:200])
    index.adopt(index.plan_graph().run())
    index.add_many(range(200, 300), vectors[200:])
    assert index.mode == "hnsw" and index.pending == 100 and not index.wants_graph
    sidecar = index.to_sidecar()
    restored = VectorIndex.from_sidecar(sidecar, list(range(300)), vectors, DIM, hnsw_threshold=200,
                                        auto_build=False, defer_inserts=True, catch_up_min=1000)
    assert restored.sidecar_status == "loaded" and restored.pending == 100
    for doc in (5, 250, 299):
        assert restored.search(vectors[doc], 3)[0][0] == doc
    # a catch-up takes the pending vectors into the graph
    restored.catch_up_min = 50
    assert restored.wants_graph
    restored.adopt(restored.plan_graph().run())
    assert restored.pending == 0 and restored.search(vectors[250], 1)[0][0] == 250


def test_unit_rows_adopted_from_a_snapshot_give_the_state_add_many_gives() -> None:
    vectors = unit_vectors(400, seed=21)
    docs = np.arange(0, 800, 2, dtype=np.int64)  # sparse doc ids, as after deletions
    checked = VectorIndex.from_sidecar(None, docs, vectors, DIM, hnsw_threshold=10_000)
    adopted = VectorIndex.from_sidecar(None, docs, vectors, DIM, hnsw_threshold=10_000, unit_rows=True)
    assert len(adopted) == len(checked) == 400
    assert adopted._vectors_checksum() == checked._vectors_checksum()
    assert adopted._ids_checksum() == checked._ids_checksum()
    for doc in (0, 398, 798):
        assert np.array_equal(adopted.vector(doc), checked.vector(doc))
    query = unit_vectors(1, seed=22)[0]
    assert adopted.search(query, 10) == checked.search(query, 10)
    # it grows, removes and updates like any index
    extra = unit_vectors(150, seed=23)
    for index in (adopted, checked):
        index.add_many(range(1000, 1150), extra)
        index.remove(2)
        index.update(4, extra[0])
    assert adopted.search(extra[0], 5) == checked.search(extra[0], 5)
    assert adopted._vectors_checksum() == checked._vectors_checksum()


def test_unit_rows_refuse_a_mismatched_shape_or_repeated_ids() -> None:
    vectors = unit_vectors(4, seed=24)
    with pytest.raises(InvalidInput):
        VectorIndex.from_sidecar(None, [1, 2, 3], vectors, DIM, unit_rows=True)
    with pytest.raises(InvalidInput):
        VectorIndex.from_sidecar(None, [1, 2, 2, 3], vectors, DIM, unit_rows=True)
    with pytest.raises(InvalidInput):
        VectorIndex.from_sidecar(None, [9, 1, 7, 9], vectors, DIM, unit_rows=True)
    with pytest.raises(InvalidInput):
        VectorIndex.from_snapshot(np.array([4, 0, 4, 2]), vectors, DIM, graph=None, meta=None)
    with pytest.raises(InvalidInput):
        VectorIndex.from_sidecar(None, [1, 2, 3, -4], vectors, DIM, unit_rows=True)


@pytest.mark.parametrize("count", [3, 40])
def test_a_tiny_graph_round_trips_through_its_sidecar(count: int) -> None:
    """Three elements leave hnswlib's link_lists array empty: the sidecar must still
    be written and read back (an empty array has no bytes to view)."""
    vectors = unit_vectors(count, seed=31)
    index = VectorIndex(DIM, hnsw_threshold=2)
    index.add_many(range(count), vectors)
    index.build_graph()
    blob = index.to_sidecar()
    assert blob is not None
    loaded = VectorIndex.from_sidecar(blob, np.arange(count), vectors, DIM, hnsw_threshold=2)
    assert loaded.sidecar_status == "loaded"
    assert loaded.search(vectors[1], 1)[0][0] == 1


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_float32_query_with_a_value_not_finite_is_refused(bad: float) -> None:
    index = VectorIndex(DIM)
    index.add_many(list(range(5)), unit_vectors(5))
    query = unit_vectors(1, seed=3)[0].copy()
    query[2] = np.float32(bad)
    with pytest.raises(InvalidInput, match="finite"):
        index.search(query, 2)
    with pytest.raises(InvalidInput, match="finite"):
        index.exact_scores(query)


def test_a_float32_query_is_kept_bit_for_bit_when_of_unit_length_and_normalised_otherwise() -> None:
    index = VectorIndex(DIM)
    index.add_many(list(range(20)), unit_vectors(20))
    query = unit_vectors(1, seed=5)[0]
    assert index._as_matrix(query, 1)[0].tobytes() == query.tobytes()
    long = (query * np.float32(3.0)).astype(np.float32)
    np.testing.assert_array_equal(index._as_matrix(long, 1)[0],
                                  index._as_matrix(long.astype(np.float64), 1)[0])
    assert abs(float(np.linalg.norm(index._as_matrix(long, 1)[0])) - 1.0) < 1e-6
    found, expected = index.search(long, 5), index.search(query, 5)
    assert [doc for doc, _ in found] == [doc for doc, _ in expected]
    assert [score for _, score in found] == pytest.approx([score for _, score in expected], abs=1e-6)
