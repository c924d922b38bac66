"""``rounded6`` (the hybrid breakdown's signals rounded in one pass) is Python's
``round(x, 6)`` bit for bit: on random scores of every range, on values at and next
to halves of the sixth decimal (where rounding a scaled product could go wrong),
on exact binary halves, signed zeros, large and non-finite values. So are
``rounded`` (one value) and ``rounded_all`` (a vector search's few, in one format)."""

from __future__ import annotations

import math

import numpy as np

from mnemex.memories.ranking import rounded, rounded6, rounded_all


def python_rounded(values: np.ndarray) -> np.ndarray:
    return np.array([round(float(x), 6) for x in values.reshape(-1)], dtype=np.float64).reshape(values.shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def test_random_scores_of_every_range() -> None:
    rng = np.random.default_rng(0)
    for scale in (1e-9, 1e-6, 1e-3, 1.0, 1.5, 40.0, 1e3):
        values = rng.uniform(-scale, scale, (9, 500))
        assert same_bits(rounded6(values), python_rounded(values))


def test_values_at_and_next_to_halves() -> None:
    rng = np.random.default_rng(1)
    wholes = rng.integers(0, 3_000_000, 2000)
    halves = (wholes + 0.5) / 1e6  # the float nearest each half of the sixth decimal
    near = np.concatenate([halves, np.nextafter(halves, np.inf), np.nextafter(halves, -np.inf),
                           -halves, np.arange(1, 4000) / 128.0, np.arange(1, 4000) / 2.0**20])
    assert same_bits(rounded6(near), python_rounded(near))


def test_zeros_large_and_non_finite_values() -> None:
    values = np.array([0.0, -0.0, -1e-9, 1e-9, -4e-7, 5e-7, 1073.741823, 1073.7418245, 1e9 + 0.1234567,
                       1e15, -1e300, 1e308, math.inf, -math.inf, 2.0**30 / 1e6, 2.0**52])
    got, want = rounded6(values), python_rounded(values)
    assert same_bits(got, want)
    assert math.isnan(rounded6(np.array([math.nan]))[0])


def test_rounded_and_rounded_all_are_round_to_6_places_bit_for_bit() -> None:
    rng = np.random.default_rng(2)
    wholes = rng.integers(0, 3_000_000, 500)
    halves = (wholes + 0.5) / 1e6
    values = [*rng.uniform(-1.0, 1.0, 500).tolist(), *halves.tolist(), *np.nextafter(halves, np.inf).tolist(),
              *(-halves).tolist(), 0.0, -0.0, -1e-9, 5e-7, 1e15, -1e300, math.inf, -math.inf]
    want = [round(value, 6) for value in values]
    assert [rounded(value) for value in values] == want
    for size in (0, 1, 10, 20, len(values)):  # what a search rounds: none, one, its hits' two signals
        got = rounded_all(values[:size])
        assert got == want[:size] and [math.copysign(1.0, x) for x in got] == \
            [math.copysign(1.0, x) for x in want[:size]]
    assert math.isnan(rounded_all([math.nan, 0.5])[0]) and rounded_all([math.nan, 0.5])[1] == 0.5
