"""The HNSW graph is usearch's over quantised vectors (int8 by default): results are
rescored from the float32 rows (a hit's score is its exact cosine), recall against
exact search stays high, the quantisation is part of what a saved graph must match,
graphs saved by hnswlib (sidecar version 3, graph file version 1) are rebuilt, and
usearch and onnxruntime load into one process in either order."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

import mnemex.index._graph as graph_calls
from mnemex.errors import InvalidInput
from mnemex.index import VectorIndex
from mnemex.index.vector import read_vectors_file

DIM = 32


def unit_vectors(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@pytest.mark.parametrize("quantization", ["i8", "f16", "f32"])
def test_graph_hits_carry_exact_cosines_and_recall_stays_high(quantization: str) -> None:
    vectors = unit_vectors(3000)
    index = VectorIndex(DIM, hnsw_threshold=500, quantization=quantization)  # type: ignore[arg-type]
    index.add_many(np.arange(3000), vectors)
    assert index.mode == "hnsw"
    queries = unit_vectors(100, seed=1)
    found = 0
    for query in queries:
        hits = index.search(query, 10)
        exact = index.exact_search(query, 10)
        for doc_id, score in hits:  # rescored from the float32 rows
            assert score == pytest.approx(float(vectors[doc_id] @ query), abs=1e-6)
        found += len({d for d, _ in hits} & {d for d, _ in exact})
    assert found / 1000 >= 0.95


def test_a_filtered_graph_search_gives_only_allowed_docs_and_falls_back_to_exact() -> None:
    vectors = unit_vectors(3000)
    index = VectorIndex(DIM, hnsw_threshold=500, exact_filter_max=0)
    index.add_many(np.arange(3000), vectors)
    allowed = set(range(0, 3000, 2))  # a half: searched in the graph, its answer filtered
    query = unit_vectors(1, seed=3)[0]
    hits = index.search(query, 10, allowed=allowed)
    assert len(hits) == 10 and {d for d, _ in hits} <= allowed
    exact = index.exact_search(query, 10, allowed=allowed)
    assert len({d for d, _ in hits} & {d for d, _ in exact}) >= 8
    few = {7, 1234, 2999}  # too few for the graph's answer to hold them: exact
    assert {d for d, _ in index.search(query, 10, allowed=few)} == few


def test_beam_widths_grow_with_the_graph_beyond_the_size_they_are_given_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # ef_search and ef_construction apply as given up to WIDTHS_AT elements
    # (100,000), then grow as the square root of the size (a near-duplicate corpus
    # fills a fixed beam with copies of one text; bench/million.py measures it)
    monkeypatch.setattr(graph_calls, "WIDTHS_AT", 400)
    assert graph_calls.scaled(100, 400, 1024) == 100
    assert graph_calls.scaled(100, 1600, 1024) == 200
    assert graph_calls.scaled(100, 400 * 10_000, 1024) == 1024
    index = VectorIndex(DIM, hnsw_threshold=300, ef_search=40, ef_construction=30)
    index.add_many(np.arange(300), unit_vectors(300))
    graph = index._graph
    assert graph.expansion_add == 30  # built at up to 400 elements
    query = unit_vectors(1, seed=5)[0]
    index.search(query, 10)
    assert graph.expansion_search == 40
    index.add_many(np.arange(300, 1300), unit_vectors(1000, seed=2))
    assert graph.expansion_add == 30  # added to a graph of 300
    index.add_many(np.arange(1300, 1600), unit_vectors(300, seed=3))
    assert graph.expansion_add == math.ceil(30 * math.sqrt(1300 / 400))  # to a graph of 1,300
    index.search(query, 10)
    assert graph.expansion_search == 80  # 40 * sqrt(1,600 / 400)
    index.search(query, 20)
    assert graph.expansion_search == 80  # the larger of 80 and 40 * 20 / 10
    index.search(query, 30)
    assert graph.expansion_search == 120  # 40 * 30 / 10: a ranking's candidates cost as before


def test_bad_quantization_or_rescore_is_refused() -> None:
    with pytest.raises(InvalidInput, match="quantization"):
        VectorIndex(DIM, quantization="i4")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="rescore"):
        VectorIndex(DIM, rescore=0)


def test_a_graph_saved_with_another_quantization_is_rebuilt(tmp_path: Path) -> None:
    vectors = unit_vectors(800)
    index = VectorIndex(DIM, hnsw_threshold=200)
    index.add_many(np.arange(800), vectors)
    view = index.snapshot_view()
    blob = b"".join(view.vector_chunks())
    graph = str(tmp_path / "graph.bin")
    view.write_graph(graph)
    meta = b"".join(view.meta_chunks())
    view.release()
    ids, rows = read_vectors_file(blob)
    same = VectorIndex.from_snapshot(ids, rows, DIM, graph=graph, meta=meta, hnsw_threshold=200)
    assert same.sidecar_status == "loaded"
    other = VectorIndex.from_snapshot(ids, rows, DIM, graph=graph, meta=meta, hnsw_threshold=200,
                                      quantization="f16")
    assert other.sidecar_status == "stale" and other.mode == "hnsw"
    assert other.search(vectors[5], 1)[0][0] == 5
    sidecar = index.to_sidecar()
    assert sidecar is not None
    assert VectorIndex.from_sidecar(sidecar, ids, rows, DIM, hnsw_threshold=200,
                                    quantization="f32").sidecar_status == "stale"


def test_an_hnswlib_graph_of_earlier_versions_is_rebuilt(tmp_path: Path) -> None:
    vectors = unit_vectors(400)
    index = VectorIndex(DIM, hnsw_threshold=200)
    index.add_many(np.arange(400), vectors)
    sidecar = index.to_sidecar()
    assert sidecar is not None
    # an hnswlib sidecar (version 3): the same layout, another version and body
    size = int.from_bytes(sidecar[8:16], "little")
    header = orjson.loads(sidecar[16 : 16 + size])
    header["version"] = 3
    old_header = orjson.dumps(header)
    old = b"MNXHNSW1" + len(old_header).to_bytes(8, "little") + old_header + b"hnswlib arrays"
    restored = VectorIndex.from_sidecar(old, np.arange(400), vectors, DIM, hnsw_threshold=200)
    assert restored.sidecar_status == "stale" and restored.mode == "hnsw"
    # hnswlib's graph file (meta version 1)
    view = index.snapshot_view()
    blob = b"".join(view.vector_chunks())
    meta = orjson.loads(b"".join(view.meta_chunks()))
    view.release()
    meta["version"] = 1
    graph = tmp_path / "hnswlib.bin"
    graph.write_bytes(b"not usearch")
    ids, rows = read_vectors_file(blob)
    loaded = VectorIndex.from_snapshot(ids, rows, DIM, graph=str(graph), meta=orjson.dumps(meta),
                                       hnsw_threshold=200)
    assert loaded.sidecar_status == "stale" and loaded.search(vectors[9], 1)[0][0] == 9


@pytest.mark.parametrize("order", [("usearch.index", "onnxruntime"), ("onnxruntime", "usearch.index")])
def test_usearch_and_onnxruntime_load_into_one_process_in_either_order(order: tuple[str, str]) -> None:
    # (onnxruntime is not imported here: this process holds usearch already)
    if importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("onnxruntime is not installed")
    code = f"import {order[0]}, {order[1]}; print('both')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip() == "both", done.stderr[-2000:]
