"""BM25 scoring of a query's terms in one pass, and the frequent terms' contributions
kept between searches: the same scores, bit for bit, as scoring each term alone and
adding them in term order, whether kept, fresh, or kept and then made stale by a write."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mnemex.index import BM25Index
from mnemex.index import bm25 as bm25_module

WORDS = ["trip", "weekend", "paint", "music", "garden", "dog", "work", "school", "family", "book",
         "movie", "city", "lake", "sunrise", "caroline", "melanie"]
QUERIES = ["caroline trip", "weekend garden dog", "paint music work school family",
           "lake sunrise movie book city caroline melanie", "dog", "unknown words only",
           '"weekend trip" garden', "family family caroline"]


def corpus(seed: int, size: int) -> list[tuple[str, str | None]]:
    rng = random.Random(seed)
    return [(" ".join(rng.choices(WORDS, k=rng.randrange(1, 14))),
             " ".join(rng.choices(WORDS, k=4)) if rng.random() < 0.3 else None) for _ in range(size)]


def term_by_term(index: BM25Index, query: str) -> np.ndarray | None:
    """score_all's scores as each term's scores added into zeros in term id order
    (how they were summed before the one-pass scoring)."""
    parsed = index.tokenizer.parse_query(query)
    vocab = index._vocab
    terms = sorted({t for t in parsed.all_terms if t in vocab}, key=vocab.__getitem__)
    if not terms or len(index) == 0 or parsed.phrases:
        return None
    total = np.zeros(index._capacity, dtype=np.float64)
    for term in terms:
        alone = index.score_all(term)
        if alone is not None:
            total += alone
    return total


def cold(index: BM25Index, query: str, monkeypatch: pytest.MonkeyPatch) -> np.ndarray | None:
    """``index``'s scores with nothing kept read or written."""
    with monkeypatch.context() as patch:
        patch.setattr(bm25_module, "TERM_SCORES_MIN_DF", 1 << 40)
        return index.score_all(query)


def built(docs: list[tuple[str, str | None]]) -> BM25Index:
    index = BM25Index()
    index.add_many([(doc, text, ctx) for doc, (text, ctx) in enumerate(docs)])
    return index


@pytest.mark.parametrize("min_df", [1, 128])
def test_one_pass_scores_are_each_terms_added_in_term_order(min_df: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MIN_DF", min_df)
    index = built(corpus(1, 600))
    for _ in range(2):  # fresh, then kept
        for query in QUERIES:
            expected = term_by_term(index, query)
            if expected is not None:
                np.testing.assert_array_equal(index.score_all(query), expected)
    assert index._term_scores.nbytes > 0


def test_kept_scores_equal_fresh_ones_through_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MIN_DF", 8)
    docs = corpus(2, 400)
    index = built(docs)
    rng = random.Random(3)
    for step in range(12):
        for query in QUERIES:
            fresh = cold(index, query, monkeypatch)
            for _ in range(2):  # keeps, then reads what it kept
                found = index.scored(query)
                if fresh is None:
                    assert found is None
                    continue
                assert found is not None
                np.testing.assert_array_equal(found.scores, fresh)
                np.testing.assert_array_equal(found.matches, index.content_matches(query))
        doc = rng.randrange(len(docs) + 5)
        text, ctx = corpus(100 + step, 1)[0]
        if doc in index and step % 3 == 0:
            index.remove(doc)
        elif doc in index:
            index.update(doc, text, ctx)
        else:
            index.add(doc, text, ctx)


def test_what_is_kept_stays_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MIN_DF", 1)
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MAX_BYTES", 4000)
    monkeypatch.setattr(bm25_module, "TERM_SCORES_BYTES_PER_DOC", 0)
    index = built(corpus(4, 500))
    kept = 0
    for query in QUERIES * 3 + WORDS:
        fresh = cold(index, query, monkeypatch)
        scores = index.score_all(query)
        if fresh is None:
            assert scores is None
        else:
            np.testing.assert_array_equal(scores, fresh)
        assert 0 <= index._term_scores.nbytes <= 4000
        kept = max(kept, index._term_scores.nbytes)
    assert kept > 2000  # it did keep terms (each term's postings here: ~250-350 bytes... to 8 x df)


def test_a_term_too_large_to_keep_is_scored_fresh_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MIN_DF", 1)
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MAX_BYTES", 64)
    monkeypatch.setattr(bm25_module, "TERM_SCORES_BYTES_PER_DOC", 0)
    index = built(corpus(5, 300))
    first = index.score_all("caroline trip")
    assert index._term_scores.nbytes == 0
    np.testing.assert_array_equal(index.score_all("caroline trip"), first)
    np.testing.assert_array_equal(first, term_by_term(index, "caroline trip"))


@pytest.mark.parametrize("write", ["add", "update", "remove"])
def test_a_write_lets_the_kept_scores_go_at_once(write: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MIN_DF", 8)
    index = built(corpus(6, 300))
    index.score_all("caroline trip weekend")
    assert index.kept_bytes > 0
    if write == "add":
        index.add(1000, "a new memory about the lake")
    elif write == "update":
        index.update(3, "the lake at sunrise")
    else:
        index.remove(3)
    assert index.kept_bytes == 0 and not index._term_scores._entries  # no postings held either


def test_kept_scores_depend_on_k1_and_the_context_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MIN_DF", 8)
    index = built(corpus(7, 300))
    index.score_all("caroline trip")
    index.k1, index.context_weight = 2.0, 0.2
    np.testing.assert_array_equal(index.score_all("caroline trip"), cold(index, "caroline trip", monkeypatch))


def test_a_larger_index_may_keep_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound grows with the documents: a term too large for the floor is kept
    in an index whose documents allow it, and read back as computed."""
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MIN_DF", 1)
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MAX_BYTES", 64)
    index = built(corpus(7, 400))
    assert bm25_module.term_scores_budget(400) == 400 * bm25_module.TERM_SCORES_BYTES_PER_DOC
    first = index.score_all("caroline")
    assert index.kept_bytes > 64
    assert index.kept_bytes <= bm25_module.term_scores_budget(len(index))
    np.testing.assert_array_equal(index.score_all("caroline"), first)
    np.testing.assert_array_equal(first, term_by_term(index, "caroline"))
    monkeypatch.setattr(bm25_module, "TERM_SCORES_BYTES_PER_DOC", 0)
    smaller = built(corpus(7, 400))
    smaller.score_all("caroline")
    assert smaller.kept_bytes == 0
