"""The numpy postings a BM25 index keeps between searches (``_PostingsTable.filled``):
bounded by ``FILLED_MAX_BYTES``, least recently read first out, let go when a term
changes, and read off a restored index's sidecar without copying its postings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.index import BM25Index
from mnemex.index import bm25 as bm25_module

WORDS = ["tea", "lake", "hiking", "caroline", "melanie", "pottery", "sunrise", "camping", "dog", "race"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
steps = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 30), texts),
    st.tuples(st.just("remove"), st.integers(0, 30), st.just("")),
    st.tuples(st.just("search"), st.integers(0, 0), texts),
), max_size=40)


def played(steps_: list[tuple[str, int, str]], *, restored: bool) -> list[object]:
    index = BM25Index()
    for doc in range(0, 30, 3):  # some memories before the sidecar
        index.add(doc, f"{WORDS[doc % len(WORDS)]} {WORDS[(doc * 7) % len(WORDS)]} tea")
    if restored:
        index = BM25Index.from_sidecar(index.to_sidecar())
    out: list[object] = []
    for name, doc, text in steps_:
        if name == "add":
            if doc in index:
                index.remove(doc)
            index.add(doc, text)
        elif name == "remove":
            if doc in index:
                index.remove(doc)
        else:
            scores = index.score_all(text)
            out.append((index.search(text, 5), None if scores is None else scores.tolist(),
                        index.content_matches(text).tolist()))
    return out


@settings(max_examples=80, deadline=None)
@given(steps_=steps, restored=st.booleans(), bound=st.sampled_from([0, 40, 200]))
def test_searches_read_the_same_whatever_is_kept(steps_: list[tuple[str, int, str]], restored: bool,
                                                 bound: int) -> None:
    """With nothing kept (0), or a few terms' worth, each search finds what it finds
    with everything kept; writes between searches let changed terms go."""
    everything = played(steps_, restored=restored)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm25_module, "FILLED_MAX_BYTES", bound)
        assert played(steps_, restored=restored) == everything


def test_what_is_kept_stays_within_its_bound_and_a_restored_term_stays_a_slice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built = BM25Index()
    words = [f"w{i}" for i in range(200)]
    for doc in range(400):
        built.add(doc, " ".join(words[(doc + k) % 200] for k in range(0, 200, 9)))
    index = BM25Index.from_sidecar(built.to_sidecar())
    monkeypatch.setattr(bm25_module, "FILLED_MAX_BYTES", 4_000)
    table = index._postings
    for word in words:
        assert index.search(word, 3) == built.search(word, 3)
        assert table._filled_bytes <= 4_000 and table._filled_bytes == sum(size for _, size in
                                                                          table._filled.values())
    assert 0 < len(table._filled) < 200
    assert all(item is None for item in table._items)  # read: no term became arrays of its own
    recent = next(reversed(table._filled))
    assert recent == index._vocab[words[-1]]  # the last read is the last to go
    docs = table._filled[recent][0][0]
    assert not docs.flags.owndata  # a view of the sidecar's postings, not a copy
    # a write lets the term's arrays go; the next search reads the new postings
    index.add(400, words[-1])
    assert recent not in table._filled
    assert 400 in [doc for doc, _ in index.search(words[-1], 500)]
