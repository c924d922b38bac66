"""Hybrid rankings over an exact index scored by the coarse int8 pass
(mnemex.index._coarse) are those of the float32 product over every memory: the same
hits in the same order with the same scores and signals, bit for bit (one BLAS
thread, as ``mnemex serve`` runs), in the actor's turn, beside it and read ahead
(one pass for several searches), filtered, and after memories are forgotten (rows
freed)."""

from __future__ import annotations

import pytest
from test_read_ahead import passes
from test_scope_search_golden import QUERIES, searches
from threadpoolctl import threadpool_limits

from mnemex.index import _coarse
from mnemex.memories import behaviour


@pytest.mark.parametrize("how", ["in-turn", "beside", "ahead"])
def test_hybrid_hits_through_the_coarse_pass_are_the_full_products(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "beside":
        monkeypatch.setattr(behaviour, "BESIDE_MIN_MEMORIES", 0)
    with threadpool_limits(1, user_api="blas"):
        monkeypatch.setattr(_coarse, "MIN_VALUES", 10**12)
        full = searches(how)
        monkeypatch.setattr(_coarse, "MIN_VALUES", 64 * 48)  # the corpus' 300 memories pass through it
        made = passes(monkeypatch)
        coarse = searches(how)
    assert made and coarse == full
    # read ahead, each set of queries takes one pass; else one a search
    assert set(made) == ({len(QUERIES)} if how == "ahead" else {1})
