"""The compact doc lists with values (a category's confidences): what a dict holds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.index._held import LISTED, HeldValues

CONFIDENCES = st.sampled_from([0.1, 0.25, 0.5, 0.6, 0.75, 0.99])


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 3 * LISTED), st.lists(st.tuples(st.booleans(), st.integers(0, 4 * LISTED), CONFIDENCES),
                                            max_size=400),
       st.sampled_from([0.0, 0.3, 0.6, 1.0]))
def test_held_values_are_what_a_dict_of_them_holds(first: int, steps: list[tuple[bool, int, float]],
                                                   limit: float) -> None:
    """Docs put with a value and let go (taken out at once while few, kept aside
    and compacted at a quarter when many), put again with another value: the docs,
    their values and those below a limit are a dict's."""
    held, expected = HeldValues(), {}
    for doc in range(first):
        held.put(doc, doc % 7 / 7)
        expected[doc] = doc % 7 / 7
    for putting, doc, value in steps:
        if putting and doc not in expected:
            held.put(doc, value)
            expected[doc] = value
        elif not putting and doc in expected:
            held.discard(doc)
            del expected[doc]
        assert len(held) == len(expected)
        assert len(held.docs) == len(held.values)
        if held.gone is not None:
            assert 4 * len(held.gone) <= len(held.docs)
            assert len(held.docs) > LISTED or not held.gone
    assert dict(held.items()) == expected
    assert held.array().tolist() == sorted(expected)
    assert held.below(limit) == {doc for doc, value in expected.items() if value < limit}
    fresh = HeldValues()
    for doc in sorted(expected, reverse=True):
        fresh.put(doc, expected[doc])
    assert fresh == held


def test_a_doc_let_go_and_put_again_before_a_compaction_takes_its_new_value() -> None:
    held = HeldValues()
    for doc in range(2 * LISTED):
        held.put(doc, 0.5)
    held.discard(7)
    assert held.gone == {7} and 7 not in held.below(1.0)
    held.put(7, 0.2)
    assert held.gone == set() and len(held.docs) == 2 * LISTED
    assert held.below(0.3) == {7} and dict(held.items())[7] == 0.2
    with pytest.raises(TypeError, match="put"):
        held.add(3)


def test_a_compaction_keeps_each_doc_with_its_own_value() -> None:
    held = HeldValues()
    for doc in range(100):
        held.put(doc, doc / 100)
    for doc in range(0, 100, 3):  # (34 let go: past a quarter of them, the array is copied out)
        held.discard(doc)
    assert len(held.docs) < 100 and len(held) == 66
    assert dict(held.items()) == {doc: doc / 100 for doc in range(100) if doc % 3}
    assert held.below(0.1) == {1, 2, 4, 5, 7, 8}
