"""How the ONNX embedders cut a call into model runs (``runs_by_length``): every text
in exactly one run, in order, within the run limits, and short texts not padded
to long ones when a run costs less than the padding."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemex.models.onnx import runs_by_length


def padded(lengths: list[int], cuts: list[int]) -> int:
    start, total = 0, 0
    for end in cuts:
        total += (end - start) * lengths[end - 1]
        start = end
    return total


@given(st.lists(st.integers(1, 300), max_size=300), st.integers(1, 64), st.integers(1, 4096),
       st.integers(0, 64))
def test_runs_cover_every_text_once_within_the_limits(lengths: list[int], max_texts: int, max_tokens: int,
                                                      run_cost: int) -> None:
    lengths = sorted(lengths)
    cuts = runs_by_length(lengths, max_texts=max_texts, max_tokens=max_tokens, run_cost=run_cost)
    assert cuts == sorted(set(cuts)) and (cuts[-1] == len(lengths) if lengths else cuts == [])
    start = 0
    for end in cuts:
        count = end - start
        assert 1 <= count <= max_texts
        assert count == 1 or count * lengths[end - 1] <= max_tokens
        start = end


@pytest.mark.parametrize("call", [8, 32, 256])
def test_calls_of_texts_of_chat_lengths_run_little_padding(call: int) -> None:
    rng = random.Random(call)
    ours = fixed = text = 0
    for _ in range(50):
        lengths = sorted(min(256, 3 + int(rng.expovariate(1 / 30))) for _ in range(call))
        cuts = runs_by_length(lengths, max_texts=64, max_tokens=1024, run_cost=12)
        ours += padded(lengths, cuts) + 12 * len(cuts)
        by_32 = [*range(32, call, 32), call]
        fixed += padded(lengths, by_32) + 12 * len(by_32)
        text += sum(lengths)
    assert ours < fixed
    assert ours / text < 1.25  # tokens run (and runs' cost) per token of text


def test_texts_of_scattered_lengths_run_apart_and_equal_ones_together() -> None:
    lengths = [10, 11, 12, 40, 41, 90]
    cuts = runs_by_length(lengths, max_texts=64, max_tokens=1024, run_cost=12)
    assert cuts == [3, 5, 6]
    assert runs_by_length([30] * 100, max_texts=64, max_tokens=1024, run_cost=12) == [34, 68, 100]
