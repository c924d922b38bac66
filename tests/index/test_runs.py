"""Runs (mnemex.index._runs) holds byte strings by doc id as a dict of them does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.index import _runs
from mnemex.index._runs import Runs

_docs = st.integers(min_value=0, max_value=40)
_data = st.binary(max_size=24)
_ops = st.lists(st.one_of(st.tuples(st.just("set"), _docs, _data), st.tuples(st.just("pop"), _docs, _data)),
                max_size=200)


def _same(runs: Runs, model: dict[int, bytes]) -> None:
    assert len(runs) == len(model)
    assert list(runs) == sorted(model)
    for doc in range(45):
        assert (doc in runs) == (doc in model)
        assert runs.get(doc) == model.get(doc)
    ids, sizes, data = runs.arrays()
    assert ids.tolist() == sorted(model)
    at = 0
    for doc, size in zip(ids.tolist(), sizes.tolist(), strict=True):
        assert data[at : at + size] == model[doc]
        at += size
    assert at == len(data)
    again = Runs.from_arrays(ids, sizes, data)
    assert {doc: again[doc] for doc in again} == model


def _play(runs: Runs, model: dict[int, bytes], op: str, doc: int, data: bytes) -> None:
    """One change to the runs and to the dict alike (a pop gives what the dict's gives)."""
    if op == "set":
        runs[doc] = data
        model[doc] = data
    else:
        assert runs.pop(doc) == model.pop(doc, None)


@settings(max_examples=200, deadline=None)
@given(_ops)
def test_runs_hold_what_a_dict_holds(ops: list[tuple[str, int, bytes]]) -> None:
    runs, model = Runs(), {}
    for op, doc, data in ops:
        _play(runs, model, op, doc, data)
    _same(runs, model)


@settings(max_examples=50, deadline=None)
@given(_ops)
def test_runs_packed_again_keep_every_run(ops: list[tuple[str, int, bytes]]) -> None:
    # packed from the first byte of garbage: every change may move the runs
    original = _runs._PACK_MIN
    _runs._PACK_MIN = 0
    try:
        runs, model = Runs(), {}
        for op, doc, data in ops:
            _play(runs, model, op, doc, data)
            _same(runs, model)
            assert runs._garbage * 2 < max(1, len(runs._heap)) or runs._garbage == 0
    finally:
        _runs._PACK_MIN = original


def test_garbage_is_packed_away_once_it_outweighs_the_live_runs() -> None:
    runs = Runs()
    for round_ in range(40):
        for doc in range(1000):
            runs[doc] = bytes([round_ % 256]) * 100
    # 4 MB written, 100 KB live: the buffer holds at most about twice the live bytes
    assert len(runs._heap) <= 2 * 100_000 + _runs._PACK_MIN
    assert runs[999] == bytes([39]) * 100


def test_refusals_and_misses() -> None:
    runs = Runs()
    with pytest.raises(ValueError, match="not an int >= 0"):
        runs[-1] = b"x"
    with pytest.raises(KeyError):
        runs[3]
    assert runs.pop(3) is None and runs.get(3, b"d") == b"d"
    assert "3" not in runs and 3.5 not in runs and 10**9 not in runs
    empty_ids, empty_sizes, empty_data = Runs().arrays()
    assert len(empty_ids) == 0 and len(empty_sizes) == 0 and empty_data == b""
    loaded = Runs.from_arrays(np.array([5, 2]), np.array([2, 1]), b"abc")
    assert loaded[5] == b"ab" and loaded[2] == b"c" and list(loaded) == [2, 5] and len(loaded) == 2


def test_runs_compare_as_dicts_do() -> None:
    one, two = Runs(), Runs()
    one[3], one[1] = b"ab", b""
    two[1], two[3] = b"", b"a"
    assert one != two
    two[3] = b"ab"
    assert one == two and one != {1: b"", 3: b"ab"}
    two.pop(1)
    assert one != two
