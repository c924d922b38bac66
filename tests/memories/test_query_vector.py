"""A search's query vector on its way: the ref's mean of the query's wordings, made
unit (``_search_of``), carried as float32 bytes and read back by the scope
(``decode_vector``), which refuses a vector holding NaN or infinity and takes every
finite one, however large its values. The bytes a ref made of a finite vector
(``encode_noted``) are read back without being read and checked again."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mnemex
from mnemex.memories.ref import _search_of
from mnemex.memories.snapshot import decode_vector, encode_noted, encode_vector
from mnemex.models.hashing import HashingEmbedder


def test_finite_vectors_are_read_back_as_they_were_sent_however_large() -> None:
    rng = np.random.default_rng(3)
    for vector in (rng.standard_normal(16).astype(np.float32), np.zeros(16, dtype=np.float32),
                   np.full(16, 1e20, dtype=np.float32),  # squares past float32's range
                   np.array([3e38, -3e38] + [0.0] * 14, dtype=np.float32),
                   np.full(16, 1e-45, dtype=np.float32)):
        read = decode_vector(encode_vector(vector), 16)
        assert read.dtype == np.float32 and read.tobytes() == vector.tobytes()
        assert read.flags.writeable  # the scope's own copy
    assert decode_vector(b"", 0).shape == (0,)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("at", [0, 7, 15])
@pytest.mark.parametrize("rest", [0.25, 1e20])
def test_a_vector_holding_nan_or_infinity_is_refused(bad: float, at: int, rest: float) -> None:
    vector = np.full(16, rest, dtype=np.float32)
    vector[at] = bad
    with pytest.raises(mnemex.InvalidInput, match="NaN or infinity"):
        decode_vector(encode_vector(vector), 16)


def test_a_vector_of_the_wrong_size_or_type_is_refused() -> None:
    with pytest.raises(mnemex.InvalidInput, match="16 float32 values"):
        decode_vector(b"\0" * 60, 16)
    with pytest.raises(mnemex.InvalidInput, match="16 float32 values"):
        decode_vector("not bytes", 16)  # type: ignore[arg-type]


class _Services:
    """What ``_search_of`` reads of a scope kind's services."""

    def __init__(self) -> None:
        self.embedder = HashingEmbedder(dim=16)


def test_the_query_vector_is_the_mean_scaled_by_its_float32_norm_bit_for_bit() -> None:
    rng = np.random.default_rng(4)
    unit = HashingEmbedder(dim=16).embed(["what does she drink?", "tea or coffee", "hiking"])
    rows = [unit[:1], unit[1:2], unit[:2], rng.standard_normal((1, 16)).astype(np.float32),
            np.zeros((1, 16), dtype=np.float32), (unit[:1] * np.float32(3.0))]
    assert any(float(np.sqrt(r[0].dot(r[0]))) == 1.0 for r in rows)  # a row needing no division
    assert any(float(np.sqrt(r[0].dot(r[0]))) not in (0.0, 1.0) for r in rows)
    for matrix in rows:
        command = _search_of(_Services(), "q", 10, "vector", matrix, min_score=None,  # type: ignore[arg-type]
                             filter=None, include_history=False, as_of=None, facets=None)
        mean = matrix[0] if len(matrix) == 1 else matrix.mean(axis=0)
        norm = np.sqrt(mean.dot(mean))
        assert command.vector == encode_vector(mean / norm if norm > 0 else mean)


def test_the_bytes_noted_last_give_their_vector_back_as_it_was_and_read_only() -> None:
    vector = np.random.default_rng(5).standard_normal(16).astype(np.float32)
    data = encode_noted(vector)
    assert data == encode_vector(vector)
    read = decode_vector(data, 16)
    assert read.tobytes() == vector.tobytes() and not read.flags.writeable
    assert decode_vector(data, 16) is read  # not read again
    copy = bytes(bytearray(data))  # equal bytes, another object: read and checked as any
    again = decode_vector(copy, 16)
    assert again is not read and again.flags.writeable and again.tobytes() == vector.tobytes()
    with pytest.raises(mnemex.InvalidInput, match="8 float32 values"):
        decode_vector(data, 8)  # the noted bytes, read as another size: refused as any
    later = encode_noted(vector * np.float32(2.0))  # only the last one is noted
    assert decode_vector(data, 16).flags.writeable and not decode_vector(later, 16).flags.writeable


def test_a_query_vector_holding_nan_is_not_noted_and_the_scope_refuses_it() -> None:
    rows = np.full((1, 16), np.nan, dtype=np.float32)
    command = _search_of(_Services(), "q", 10, "vector", rows, min_score=None,  # type: ignore[arg-type]
                         filter=None, include_history=False, as_of=None, facets=None)
    assert command.vector is not None
    with pytest.raises(mnemex.InvalidInput, match="NaN or infinity"):
        decode_vector(command.vector, 16)
