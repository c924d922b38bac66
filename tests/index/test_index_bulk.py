"""Bulk indexing: ``add_many`` leaves an index exactly as adding its documents
one by one would, whatever the batches, chunks and removals in between, and an
invalid batch changes nothing."""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.index import BM25Index, KeywordIndex, words

# Unicode, case and compatibility forms (full-width, ligature), apostrophes and
# possessives, stop words, and a few words often enough to repeat in a text.
WORDS = ["apple", "Apple", "banana", "café", "CAFÉ", "naïve", "straße", "東京",
         "\uff46\uff55\uff4c\uff4c", "full", "ﬁne", "o'neil", "don't", "caroline's", "it\u2019s",
         "the", "of", "and", "state", "art", "x1"]
SEPARATORS = [" ", " ", " ", ", ", "! ", "\n"]
# Small ids, plus some far apart so that capacity grows in the middle of a run.
POOL = [*range(20), 1023, 1024, 1100, 2047, 5000]

KEYWORD_QUERIES = [*WORDS, "apple banana café", "the of and", "full naïve x1", "state art o neil", "",
                   "missing"]
BM25_QUERIES = [*WORDS, "apple banana café", "full naïve x1 state", "the of and", "missing",
                '"state of the art"', '"the of"', '"apple banana" café', '"caroline fine"']

Doc = tuple[int, list[str], str, Any]       # doc id, its words, its text, timestamp or context

texts = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=8).map(
    lambda pairs: ([w for w, _ in pairs], "".join(w + sep for w, sep in pairs)))
stamps = st.sampled_from([0.0, 1.0, 1.0, 2.5, -3.0, 1e9])
contexts = st.none() | texts.map(lambda pair: pair[1])


class Tiny(KeywordIndex):
    """Every keyword code path at toy sizes: words go dense at 4 documents (and
    back to sparse below 1), every match level is read off the recency order."""

    _dense_min = 4
    _dense_share = 10**9
    _few = 0


class LeanTiny(Tiny):
    """Tiny thresholds, and the words of a document are not kept (removal is by text)."""

    def __init__(self, *, fold_accents: bool = False) -> None:
        super().__init__(keep_words=False, fold_accents=fold_accents)


def draw_docs(data: st.DataObject, live: dict[int, Any], extra: st.SearchStrategy[Any]) -> list[Doc]:
    free = [d for d in POOL if d not in live]
    ids = data.draw(st.lists(st.sampled_from(free), unique=True, max_size=24)) if free else []
    return [(d, *data.draw(texts), data.draw(extra)) for d in ids]


def draw_chunks(data: st.DataObject, docs: list[Doc]) -> list[list[Doc]]:
    cuts = sorted(data.draw(st.sets(st.integers(1, len(docs) - 1)))) if len(docs) > 1 else []
    bounds = [0, *cuts, len(docs)]
    return [docs[lo:hi] for lo, hi in itertools.pairwise(bounds)]


def draw_removals(data: st.DataObject, live: dict[int, Any]) -> list[int]:
    if not live:
        return []
    return data.draw(st.lists(st.sampled_from(sorted(live)), unique=True, max_size=4))


# -- KeywordIndex --------------------------------------------------------------------

def brute_force(docs: dict[int, tuple[str, float]], query: str, top_k: int,
                allowed: set[int] | None = None) -> list[tuple[int, int]]:
    wanted = set(words(query))
    scored = []
    for doc_id, (text, ts) in docs.items():
        matched = len(wanted & set(words(text)))
        if matched and (allowed is None or doc_id in allowed):
            scored.append((-matched, -ts, doc_id))
    scored.sort()
    return [(doc_id, -neg) for neg, _, doc_id in scored[:top_k]]


def assert_keyword_alike(expected: KeywordIndex, got: KeywordIndex,
                         docs: dict[int, tuple[str, float]]) -> None:
    assert len(got) == len(expected) == len(docs)
    assert got.doc_ids() == expected.doc_ids() == sorted(docs)
    assert [got.timestamp(d) for d in docs] == [ts for _, ts in docs.values()]
    even = {d for d in docs if d % 2 == 0}
    for query in KEYWORD_QUERIES:
        for top_k in (3, 100):
            want = brute_force(docs, query, top_k)
            assert got.search(query, top_k) == expected.search(query, top_k) == want
        assert got.search(query, 100, allowed=even) == brute_force(docs, query, 100, even)


def play_keyword(data: st.DataObject, one_by_one: KeywordIndex, bulk: KeywordIndex,
                 docs: dict[int, tuple[str, float]]) -> None:
    """Random batches (split into random chunks) and removals, applied alike."""
    for _ in range(data.draw(st.integers(1, 4))):
        if data.draw(st.booleans()):
            batch = draw_docs(data, docs, stamps)
            for doc, _, text, ts in batch:
                one_by_one.add(doc, text, ts)
                docs[doc] = (text, ts)
            for chunk in draw_chunks(data, batch):
                bulk.add_many([d for d, *_ in chunk], [text for _, _, text, _ in chunk],
                              [ts for *_, ts in chunk])
        else:
            for doc in draw_removals(data, docs):
                text, _ = docs.pop(doc)
                one_by_one.remove(doc, text)
                bulk.remove(doc, text)
        assert_keyword_alike(one_by_one, bulk, docs)


@settings(max_examples=60, deadline=None)
@given(cls=st.sampled_from([KeywordIndex, Tiny, LeanTiny]), data=st.data())
def test_keyword_add_many_matches_adding_one_by_one(cls: type[KeywordIndex], data: st.DataObject) -> None:
    one_by_one, bulk = cls(), cls()
    docs: dict[int, tuple[str, float]] = {}
    for doc, _, text, ts in draw_docs(data, docs, stamps):       # present before any batch
        one_by_one.add(doc, text, ts)
        bulk.add(doc, text, ts)
        docs[doc] = (text, ts)
    play_keyword(data, one_by_one, bulk, docs)

    restored = cls.from_sidecar(bulk.to_sidecar())
    assert_keyword_alike(bulk, restored, docs)
    play_keyword(data, one_by_one, restored, docs)     # batches and removals on restored docs too


def test_bulk_adds_promote_words_to_dense_columns_and_match_one_by_one() -> None:
    class Small(KeywordIndex):
        _dense_min = 8
        _dense_share = 10**9
        _few = 4

    one_by_one, bulk = Small(), Small()
    docs: dict[int, tuple[str, float]] = {}

    def add_batch(ids: list[int]) -> None:
        batch = [(d, f"common w{d % 5}" + (" rare" if d % 7 == 0 else "") + (" late" if d >= 100 else ""),
                  float(d % 3)) for d in ids]
        for doc, text, ts in batch:
            one_by_one.add(doc, text, ts)
            docs[doc] = (text, ts)
        bulk.add_many([d for d, _, _ in batch], [t for _, t, _ in batch], [ts for *_, ts in batch])

    def check() -> None:
        for query in ["common", "w1", "rare", "common w1 rare", "w2 w3", "common w4", "late w0"]:
            for top_k in (3, 100):
                assert bulk.search(query, top_k) == one_by_one.search(query, top_k) == brute_force(
                    docs, query, top_k)

    add_batch([0, 1, 2, 3, 4])
    assert "common" not in bulk._dense                 # 5 postings: still sparse
    check()
    add_batch(list(range(5, 20)))
    assert "common" in bulk._dense and "w1" not in bulk._dense   # sparse postings extended, then promoted
    check()
    add_batch([20, 21, 3000, 40, 41, 42, 43, 44])       # into a dense column, widened to the new capacity
    assert bulk._capacity > 3000 and bulk._dense["common"].shape == ((bulk._capacity + 7) // 8,)  # a bit a doc
    check()
    for doc in [*range(22), 40, 41, 42, 43, 44]:       # "common" falls below 2 documents: demoted
        one_by_one.remove(doc)
        bulk.remove(doc)
        del docs[doc]
    assert "common" not in bulk._dense
    check()
    add_batch(list(range(100, 130)))                    # a word new to the batch goes dense at once
    assert "late" in bulk._dense
    check()


def test_a_batch_reaches_the_default_dense_threshold_in_one_go() -> None:
    one_by_one, bulk = KeywordIndex(), KeywordIndex()
    ids = list(range(300))
    batch_texts = [f"shared t{d % 10}" for d in ids]
    batch_stamps = [float(d % 17) for d in ids]
    for doc, text, ts in zip(ids, batch_texts, batch_stamps, strict=True):
        one_by_one.add(doc, text, ts)
    bulk.add_many(ids, batch_texts, batch_stamps)
    assert "shared" in bulk._dense and "t1" not in bulk._dense
    docs = dict(zip(ids, zip(batch_texts, batch_stamps, strict=True), strict=True))
    for query in ["shared", "t3", "shared t3", "t1 t2 t9"]:
        assert bulk.search(query, 1000) == one_by_one.search(query, 1000) == brute_force(docs, query, 1000)
        assert bulk.search(query, 5) == one_by_one.search(query, 5)


# -- BM25Index -----------------------------------------------------------------------

def assert_bm25_alike(expected: BM25Index, got: BM25Index,
                      docs: dict[int, tuple[list[str], str | None]]) -> None:
    """Equal scores and rankings. Bit for bit when both numbered the terms alike;
    otherwise (a context brought a new term, numbered after the batch's contents
    by ``add_many``) scores are summed in another order and may differ in the
    last place, so near-ties may swap."""
    assert len(got) == len(expected) == len(docs)
    assert got.doc_ids() == expected.doc_ids() == sorted(docs)
    assert got.vocabulary_size == expected.vocabulary_size
    exact = list(got._vocab) == list(expected._vocab)
    phrases = ['"' + " ".join(ws[i:i + n]) + '"' for ws, _ in list(docs.values())[:4]
               for i, n in ((0, 2), (1, 3)) if len(ws) >= i + n]
    even = {d for d in docs if d % 2 == 0}
    for query in [*BM25_QUERIES, *phrases]:
        want, have = expected.score_all(query), got.score_all(query)
        assert (have is None) == (want is None)
        if want is not None and have is not None:
            n = min(len(want), len(have))           # slots past the larger doc id hold zeros
            assert not want[n:].any() and not have[n:].any()
            if exact:
                np.testing.assert_array_equal(have[:n], want[:n])
            else:
                np.testing.assert_allclose(have[:n], want[:n], rtol=0, atol=1e-12)
        for allowed in (None, even):
            hits, wanted = got.search(query, 1000, allowed), expected.search(query, 1000, allowed)
            if exact:
                assert hits == wanted
                assert got.search(query, 3, allowed) == expected.search(query, 3, allowed)
            else:
                assert sorted(d for d, _ in hits) == sorted(d for d, _ in wanted)
                assert [s for _, s in hits] == pytest.approx([s for _, s in wanted], rel=0, abs=1e-12)
                assert dict(hits) == pytest.approx(dict(wanted), rel=0, abs=1e-12)


def play_bm25(data: st.DataObject, one_by_one: BM25Index, bulk: BM25Index,
              docs: dict[int, tuple[list[str], str | None]]) -> None:
    """Random batches (split into random chunks) and removals, applied alike."""
    for _ in range(data.draw(st.integers(1, 4))):
        if data.draw(st.booleans()):
            batch = draw_docs(data, docs, contexts)
            for doc, ws, text, context in batch:
                one_by_one.add(doc, text, context)
                docs[doc] = (ws, context)
            for chunk in draw_chunks(data, batch):
                bulk.add_many([(doc, text, context) for doc, _, text, context in chunk])
        else:
            for doc in draw_removals(data, docs):
                del docs[doc]
                one_by_one.remove(doc)
                bulk.remove(doc)
        assert_bm25_alike(one_by_one, bulk, docs)


@settings(max_examples=60, deadline=None)
@given(every_word_known=st.booleans(), data=st.data())
def test_bm25_add_many_matches_adding_one_by_one(every_word_known: bool, data: st.DataObject) -> None:
    one_by_one, bulk = BM25Index(), BM25Index()
    docs: dict[int, tuple[list[str], str | None]] = {}
    if every_word_known:   # every term numbered up front, so batches number none: scores equal bit for bit
        for index in (one_by_one, bulk):
            index.add(5000, " ".join(WORDS))
        docs[5000] = (WORDS, None)
    for doc, ws, text, context in draw_docs(data, docs, contexts):    # present before any batch
        one_by_one.add(doc, text, context)
        bulk.add(doc, text, context)
        docs[doc] = (ws, context)
    play_bm25(data, one_by_one, bulk, docs)
    if every_word_known:
        assert list(bulk._vocab) == list(one_by_one._vocab)

    restored = BM25Index.from_sidecar(bulk.to_sidecar())
    assert_bm25_alike(bulk, restored, docs)
    play_bm25(data, one_by_one, restored, docs)


def test_new_terms_are_numbered_contents_first_then_contexts() -> None:
    items: list[tuple[int, str, str | None]] = [(0, "sun", "moon sky"), (1, "star moon", None),
                                                (2, "sea", "sun")]
    one_by_one, bulk = BM25Index(), BM25Index()
    for item in items:
        one_by_one.add(*item)
    bulk.add_many(items)
    assert list(one_by_one._vocab) == ["sun", "moon", "sky", "star", "sea"]
    assert list(bulk._vocab) == ["sun", "star", "moon", "sea", "sky"]
    # A context reusing only words of its own or an earlier content numbers alike.
    reuse = [(0, "sun moon", "moon"), (1, "star", "sun star"), (2, "sky", None)]
    one_by_one, bulk = BM25Index(), BM25Index()
    for item in reuse:
        one_by_one.add(*item)
    bulk.add_many(reuse)
    assert list(bulk._vocab) == list(one_by_one._vocab) == ["sun", "moon", "star", "sky"]


# -- invalid and degenerate batches --------------------------------------------------

def keyword_with_two_docs() -> KeywordIndex:
    index = Tiny()
    index.add(1, "present tense", 1.0)
    index.add(2, "present day", 2.0)
    return index


@pytest.mark.parametrize(("ids", "batch_texts", "batch_stamps"), [
    ([3, -1], ["fresh", "fresh"], [0.0, 0.0]),
    ([3, 2**31], ["fresh", "fresh"], [0.0, 0.0]),
    ([3, True], ["fresh", "fresh"], [0.0, 0.0]),
    ([3, 4.0], ["fresh", "fresh"], [0.0, 0.0]),
    ([3, "4"], ["fresh", "fresh"], [0.0, 0.0]),
    ([3, 4], ["fresh", b"fresh"], [0.0, 0.0]),
    ([3, 4], ["fresh", None], [0.0, 0.0]),
    ([3, 4], ["fresh", "fresh"], [0.0, math.nan]),
    ([3, 4], ["fresh", "fresh"], [0.0, math.inf]),
    ([3, 4], ["fresh", "fresh"], [0.0, -math.inf]),
    ([3, 4], ["fresh", "fresh"], [0.0, "1"]),
    ([3, 1], ["fresh", "fresh"], [0.0, 0.0]),           # doc 1 is already indexed
    ([3, 3], ["fresh", "fresh"], [0.0, 0.0]),           # doc 3 twice in the batch
    ([3, 4], ["fresh"], [0.0, 0.0]),
    ([3, 4], ["fresh", "fresh"], [0.0]),
    ([3], ["fresh", "fresh"], [0.0, 0.0]),
], ids=["negative-id", "id-too-large", "bool-id", "float-id", "str-id", "bytes-text", "none-text", "nan-ts",
        "inf-ts", "minus-inf-ts", "str-ts", "already-indexed", "repeated-id", "fewer-texts",
        "fewer-timestamps", "fewer-ids"])
def test_an_invalid_keyword_batch_changes_nothing(ids: list[Any], batch_texts: list[Any],
                                                  batch_stamps: list[Any]) -> None:
    index = keyword_with_two_docs()
    before = index.to_sidecar()
    with pytest.raises(InvalidInput):
        index.add_many(ids, batch_texts, batch_stamps)
    assert index.to_sidecar() == before
    assert len(index) == 2 and index.doc_ids() == [1, 2]
    assert index.search("present fresh tense") == [(1, 2), (2, 1)]
    index.add_many([3, 4], ["fresh", "fresh day"], [0.0, 0.0])     # the valid part still goes in whole
    assert index.search("fresh day") == [(4, 2), (2, 1), (3, 1)]


def bm25_with_two_docs() -> BM25Index:
    index = BM25Index()
    index.add(1, "present tense", "grammar")
    index.add(2, "present day")
    return index


@pytest.mark.parametrize("bad", [
    (-1, "fresh", None), (2**31, "fresh", None), (True, "fresh", None), (4.0, "fresh", None),
    ("4", "fresh", None), (4, b"fresh", None), (4, None, None), (4, "fresh", 5), (4, "fresh", b"ctx"),
    (1, "fresh", None),          # already indexed
    (3, "fresh again", None),    # doc 3 twice in the batch
], ids=["negative-id", "id-too-large", "bool-id", "float-id", "str-id", "bytes-text", "none-text",
        "int-context", "bytes-context", "already-indexed", "repeated-id"])
def test_an_invalid_bm25_batch_changes_nothing(bad: tuple[Any, Any, Any]) -> None:
    index = bm25_with_two_docs()
    before, hits = index.to_sidecar(), index.search("present tense grammar day")
    with pytest.raises(InvalidInput):
        index.add_many([(3, "fresh words", "novel context"), bad])
    assert index.to_sidecar() == before
    assert len(index) == 2 and index.doc_ids() == [1, 2] and index.vocabulary_size == 4
    assert index.search("present tense grammar day") == hits
    assert index.search("fresh novel") == []
    index.add_many([(3, "fresh words", "novel context")])    # the valid part still goes in whole
    assert [d for d, _ in index.search("fresh novel")] == [3]


@pytest.mark.parametrize("make", [Tiny, bm25_with_two_docs, keyword_with_two_docs, BM25Index],
                         ids=["empty-keyword", "bm25", "keyword", "empty-bm25"])
def test_an_empty_batch_changes_nothing(make: Callable[[], KeywordIndex | BM25Index]) -> None:
    index = make()
    before, ids = index.to_sidecar(), index.doc_ids()
    if isinstance(index, KeywordIndex):
        index.add_many([], [], [])
    else:
        index.add_many([])
    assert index.to_sidecar() == before
    assert index.doc_ids() == ids and len(index) == len(ids)


def test_a_keyword_batch_of_empty_and_stop_word_texts() -> None:
    batch = {5: ("", 1.0), 6: ("  ,! ", 2.0), 7: ("the of the", 3.0), 8: ("and", 0.0)}
    one_by_one, bulk = Tiny(), Tiny()
    for doc, (text, ts) in batch.items():
        one_by_one.add(doc, text, ts)
    bulk.add_many(list(batch), [t for t, _ in batch.values()], [ts for _, ts in batch.values()])
    assert len(bulk) == 4 and bulk.doc_ids() == [5, 6, 7, 8]
    for query in ["the", "the and", "of", "anything"]:     # keyword matching keeps stop words
        assert bulk.search(query) == one_by_one.search(query) == brute_force(batch, query, 10)
    assert bulk.search("the and") == [(7, 1), (8, 1)]
    bulk.remove(5)
    bulk.remove(7)
    assert bulk.doc_ids() == [6, 8] and bulk.search("the and") == [(8, 1)]


def test_a_bm25_batch_of_empty_and_stop_word_texts() -> None:
    batch: list[tuple[int, str, str | None]] = [(5, "", None), (6, "the of and", "a the"), (7, "", ""),
                                                (8, "it\u2019s", "don't")]
    one_by_one, bulk = BM25Index(), BM25Index()
    for item in batch:
        one_by_one.add(*item)
    bulk.add_many(batch)
    assert len(bulk) == 4 and bulk.doc_ids() == [5, 6, 7, 8] and bulk.vocabulary_size == 0
    assert bulk.score_all("the of") is None and bulk.search("anything") == []
    # The empty documents still count: they set N and the average length for later ones.
    for index in (one_by_one, bulk):
        index.add_many([(9, "sun sun moon", "sky"), (10, "moon", None)])
    for query in ["sun", "moon", "sky", '"sun moon"']:
        assert bulk.search(query) == one_by_one.search(query)
        np.testing.assert_array_equal(bulk.score_all(query), one_by_one.score_all(query))
    assert [d for d, _ in bulk.search("moon")] == [10, 9]
    bulk.remove(6)
    bulk.remove(7)
    assert bulk.doc_ids() == [5, 8, 9, 10]


def test_a_large_bm25_batch_keeps_each_documents_word_stream() -> None:
    # past a few documents a batch's word streams are placed in one array and cut per
    # document: each keeps its terms at their positions, stop words as gaps, as when
    # added one by one (what phrase search reads)
    texts = ["the sun and the moon", "", "the of and", "moon", "a star is born", "sun sun the end of it",
             "it is the sun", "moon and star", "of", "star", "born of a star the", "sun moon star"]
    items: list[tuple[int, str, str | None]] = [(doc, text, None) for doc, text in enumerate(texts)]
    one_by_one, bulk = BM25Index(), BM25Index()
    for item in items:
        one_by_one.add(*item)
    bulk.add_many(items)
    assert bulk._content == one_by_one._content
    assert bulk._content[0] == array("i", [-1, 0, -1, -1, 1]).tobytes() and bulk._content[1] == b""
    assert [doc for doc, _ in bulk.search('"born of a star"')] == [10]
