"""Memory ids: 26 Crockford base-32 digits that sort as the values they write."""

from __future__ import annotations

import os
import random

import pytest

from mnemex._ids import CROCKFORD, IdClock, encode_id, id_at


def digit_by_digit(value: int) -> str:
    digits = []
    for _ in range(26):
        digits.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(digits))


def test_an_id_writes_its_value_five_bits_a_digit() -> None:
    draw = random.Random(17)
    values = [0, 1, 31, 32, 1023, 1024, (1 << 128) - 1, (1 << 130) - 1, 1 << 129]
    values += [draw.getrandbits(draw.choice((5, 10, 48, 80, 127, 128, 130))) for _ in range(20_000)]
    for value in values:
        assert encode_id(value) == digit_by_digit(value), value


def test_ids_sort_as_they_are_made_and_blocks_count_on() -> None:
    clock = IdClock()
    made = [clock.next(1_700_000_000.0 + step / 7) for step in range(5_000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    first = clock.reserve(1_700_000_100.0, 10)
    assert [id_at(first, i) for i in range(3)] == sorted({id_at(first, i) for i in range(3)})
    assert id_at(first, 0) == first


def test_ids_made_in_a_row_keep_their_shared_prefix_right() -> None:
    # encode_id keeps the first 20 digits of the last id: values in a row, across the
    # 2**30 boundaries where they change, and values that alternate between far ones
    draw = random.Random(5)
    for _ in range(200):
        base = draw.getrandbits(128) | ((1 << 30) - 3)
        run = [base + step for step in range(6)]
        far = draw.getrandbits(128)
        for value in [*run, far, run[0], far + 1, run[-1], base >> 1]:
            assert encode_id(value) == digit_by_digit(value), value



def test_ids_taken_at_once_are_the_ids_taken_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # each millisecond's random start drawn alike for both clocks: the same ids
    monkeypatch.setattr(os, "urandom", lambda size: bytes(range(7, 7 + size)))
    now = 1_700_000_000.0
    clock = IdClock()
    made = [clock.next(now) for _ in range(1_000)] + [clock.next(now + 0.002), clock.next(now)]
    clock = IdClock()
    taken = [*clock.next_many(now, 1_000), clock.next(now + 0.002), *clock.next_many(now, 1)]
    assert taken == made and made == sorted(made) and len(set(made)) == len(made)
    assert clock.next_many(now, 0) == []
