"""Hybrid rankings over an exact index scored by the coarse int8 pass
(mnemex.index._coarse) are those of the float32 product over every memory: the same
hits in the same order with the same scores and signals, bit for bit (one BLAS
thread, as ``mnemex serve`` runs), in the actor's turn and beside it, filtered, and
after memories are forgotten (rows freed)."""

from __future__ import annotations

import pytest
from test_scope_search_golden import searches
from threadpoolctl import threadpool_limits

from mnemex.index import _coarse
from mnemex.memories import behaviour


@pytest.mark.parametrize("beside", [False, True], ids=["in-turn", "beside"])
def test_hybrid_hits_through_the_coarse_pass_are_the_full_products(
        beside: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(behaviour, "BESIDE_MIN_MEMORIES", 0)
    with threadpool_limits(1, user_api="blas"):
        monkeypatch.setattr(_coarse, "MIN_VALUES", 10**12)
        full = searches(beside)
        monkeypatch.setattr(_coarse, "MIN_VALUES", 64 * 48)  # the corpus' 300 memories pass through it
        passes = []
        real_scan = _coarse.CoarseScan.scan

        def counted(self: _coarse.CoarseScan, *args: object) -> object:
            passes.append(1)
            return real_scan(self, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(_coarse.CoarseScan, "scan", counted)
        coarse = searches(beside)
    assert passes and coarse == full
