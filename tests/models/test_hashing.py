"""HashingEmbedder: shape, normalisation, determinism across processes, lexical
similarity."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest

from mnemex.errors import InvalidInput
from mnemex.models.hashing import Embedder, HashingEmbedder, l2_normalize

TEXTS = ["I write Java at a bank", "Java developer at a bank", "I love painting sunsets", ""]


def test_vectors_are_float32_unit_rows() -> None:
    vectors = HashingEmbedder(64).embed(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (4, 64)
    assert np.linalg.norm(vectors[:3], axis=1) == pytest.approx([1, 1, 1], abs=1e-6)
    assert not vectors[3].any()
    assert HashingEmbedder(64).embed([]).shape == (0, 64)


def test_it_satisfies_the_embedder_protocol() -> None:
    embedder = HashingEmbedder()
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 384 and embedder.name.startswith("hashing-v1-d384")
    assert HashingEmbedder(128).name != embedder.name
    assert HashingEmbedder(char_weight=0.5).name != embedder.name


def test_shared_words_and_word_pieces_score_higher() -> None:
    a, b, c, _ = HashingEmbedder().embed(TEXTS)
    assert float(a @ b) > 0.4 > float(a @ c)
    paint, painting, java = HashingEmbedder().embed(["paint", "painting", "java"])
    assert float(paint @ painting) > 0.15 > abs(float(paint @ java))


def test_batch_and_single_embedding_agree_and_repeat() -> None:
    embedder = HashingEmbedder()
    batch = embedder.embed(TEXTS)
    singles = np.vstack([embedder.embed([t]) for t in TEXTS])
    assert np.array_equal(batch, singles)
    assert np.array_equal(HashingEmbedder().embed(TEXTS), batch)


def test_vectors_are_identical_across_processes_with_other_hash_seeds() -> None:
    code = ("from mnemex.models.hashing import HashingEmbedder; import hashlib; "
            f"print(hashlib.sha256(HashingEmbedder().embed({TEXTS!r}).tobytes()).hexdigest())")
    digests = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": seed}).stdout.strip()
        for seed in ("1", "2")
    }
    assert digests == {hashlib.sha256(HashingEmbedder().embed(TEXTS).tobytes()).hexdigest()}


@pytest.mark.parametrize("call", [
    lambda: HashingEmbedder(dim=4),
    lambda: HashingEmbedder(ngram_range=(4, 3)),
    lambda: HashingEmbedder(bigram_weight=-1.0),
    lambda: HashingEmbedder().embed("one string"),
    lambda: HashingEmbedder().embed([b"bytes"]),
])
def test_bad_arguments_are_refused(call: object) -> None:
    with pytest.raises(InvalidInput):
        call()  # type: ignore[operator]


def test_l2_normalize_keeps_zero_rows() -> None:
    rows = l2_normalize([[3.0, 4.0], [0.0, 0.0]])
    assert rows.dtype == np.float32
    assert rows.tolist() == [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
