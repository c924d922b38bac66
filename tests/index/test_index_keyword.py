"""KeywordIndex: the classic word-overlap matching, checked against brute force."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from mnemex.errors import InvalidInput, NotFound
from mnemex.index import KeywordIndex, words
from mnemex.index._sidecar import pack_sidecar, unpack_sidecar


def brute_force(docs: dict[int, tuple[str, float]], query: str, top_k: int,
                allowed: set[int] | None = None) -> list[tuple[int, int]]:
    wanted = set(words(query))
    scored = []
    for doc_id, (text, ts) in docs.items():
        if allowed is not None and doc_id not in allowed:
            continue
        matched = len(wanted & set(words(text)))
        if matched:
            scored.append((-matched, -ts, doc_id))
    scored.sort()
    return [(doc_id, -neg) for neg, _, doc_id in scored[:top_k]]


class Tiny(KeywordIndex):
    """Every code path at toy sizes: words go dense at 8 documents, every match
    level is read off the recency order."""

    _dense_min = 8
    _dense_share = 10**9
    _few = 0


@pytest.fixture(params=[KeywordIndex, Tiny], ids=["default", "tiny-thresholds"])
def index(request: pytest.FixtureRequest) -> KeywordIndex:
    cls: type[KeywordIndex] = request.param
    return cls()


CORPUS = {
    1: ("I write Java at a bank", 10.0),
    2: ("Java coffee is strong", 20.0),
    3: ("I drink coffee and write poems", 30.0),
    4: ("Nothing in common here", 40.0),
    5: ("java JAVA Java", 5.0),
}


@pytest.mark.parametrize(("query", "expected"), [
    ("java", [(2, 1), (1, 1), (5, 1)]),
    ("write java", [(1, 2), (3, 1), (2, 1), (5, 1)]),
    ("coffee, write!", [(3, 2), (2, 1), (1, 1)]),
    ("unknown words", []),
    ("", []),
])
def test_ranked_by_words_matched_then_recency(index: KeywordIndex, query: str,
                                               expected: list[tuple[int, int]]) -> None:
    for doc_id, (text, ts) in CORPUS.items():
        index.add(doc_id, text, ts)
    assert index.search(query, top_k=10) == expected


def test_equal_timestamps_fall_back_to_lower_id(index: KeywordIndex) -> None:
    for doc_id in (7, 3, 5):
        index.add(doc_id, "same words", 1.0)
    assert index.search("words") == [(3, 1), (5, 1), (7, 1)]


@pytest.mark.parametrize("make_allowed", [
    set,
    list,
    lambda ids: np.array(sorted(ids)),
    lambda ids: np.isin(np.arange(10), sorted(ids)),
], ids=["set", "list", "int-array", "bool-mask"])
def test_filter_applies_before_the_cut(index: KeywordIndex, make_allowed: object) -> None:
    for doc_id in range(8):
        index.add(doc_id, "common word" + (" rare" if doc_id < 2 else ""), float(doc_id))
    allowed = make_allowed({0, 1})  # type: ignore[operator]
    # The two allowed docs are the oldest, so unfiltered they are far below top 2.
    assert index.search("common", top_k=2) == [(7, 1), (6, 1)]
    assert index.search("common", top_k=2, allowed=allowed) == [(1, 1), (0, 1)]


def test_removed_documents_are_never_returned(index: KeywordIndex) -> None:
    for doc_id in range(20):
        index.add(doc_id, "apple banana", float(doc_id))
    for doc_id in range(0, 20, 2):
        index.remove(doc_id)
    assert [d for d, _ in index.search("apple", top_k=20)] == list(range(19, 0, -2))
    assert len(index) == 10


def test_update_replaces_text_and_timestamp(index: KeywordIndex) -> None:
    index.add(1, "old text", 1.0)
    index.add(2, "other text", 2.0)
    index.update(1, "new text", 3.0)
    assert index.search("old") == []
    assert index.search("text") == [(1, 1), (2, 1)]


@pytest.mark.parametrize(("call", "error"), [
    (lambda ix: ix.add(1, "again", 0.0), InvalidInput),
    (lambda ix: ix.add(-1, "x", 0.0), InvalidInput),
    (lambda ix: ix.add(2, "x", math.nan), InvalidInput),
    (lambda ix: ix.add(2, b"bytes", 0.0), InvalidInput),
    (lambda ix: ix.add(True, "x", 0.0), InvalidInput),
    (lambda ix: ix.remove(99), NotFound),
    (lambda ix: ix.update(99, "x", 0.0), NotFound),
    (lambda ix: ix.search("x", top_k=0), InvalidInput),
])
def test_bad_arguments_are_refused(call: object, error: type[Exception]) -> None:
    index = KeywordIndex()
    index.add(1, "present", 0.0)
    with pytest.raises(error):
        call(index)  # type: ignore[operator]
    assert index.search("present") == [(1, 1)]


@pytest.mark.parametrize("cls", [KeywordIndex, Tiny])
def test_large_random_corpus_matches_brute_force(cls: type[KeywordIndex]) -> None:
    # Enough documents for common words to go dense and for crowded match levels.
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(40)] + ["the"] * 30
    index = cls()
    docs: dict[int, tuple[str, float]] = {}
    for doc_id in range(3000):
        text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 6)))
        ts = float(rng.randint(0, 500))
        index.add(doc_id, text, ts)
        docs[doc_id] = (text, ts)
    for doc_id in rng.sample(range(3000), 1200):
        index.remove(doc_id)
        del docs[doc_id]
    for doc_id in rng.sample(sorted(docs), 300):
        text = " ".join(rng.choice(vocabulary) for _ in range(3))
        index.update(doc_id, text, float(rng.randint(0, 500)))
        docs[doc_id] = (text, index.timestamp(doc_id))
    allowed = set(rng.sample(sorted(docs), 400))
    for _ in range(40):
        query = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 4)))
        top_k = rng.choice([1, 10, 50])
        assert index.search(query, top_k) == brute_force(docs, query, top_k)
        assert index.search(query, top_k, allowed=allowed) == brute_force(docs, query, top_k, allowed)


VOCABULARY = ["apple", "Banana", "cherry", "date", "elder", "fig"]
texts = st.lists(st.sampled_from(VOCABULARY), min_size=0, max_size=5).map(" ".join)
timestamps = st.integers(0, 5).map(float)


class KeywordMachine(RuleBasedStateMachine):
    """KeywordIndex (with tiny thresholds, so dense columns and recency scans are
    used) against a dict of documents scored by brute force."""

    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.index = Tiny()
        self.docs: dict[int, tuple[str, float]] = {}
        self.next_id = 0
        self.freed: list[int] = []

    @rule(target=ids, text=texts, ts=timestamps)
    def add(self, text: str, ts: float) -> int:
        doc_id = self.next_id
        self.next_id += 1
        self.index.add(doc_id, text, ts)
        self.docs[doc_id] = (text, ts)
        return doc_id

    @rule(doc_id=consumes(ids))
    def remove(self, doc_id: int) -> None:
        self.index.remove(doc_id)
        del self.docs[doc_id]
        self.freed.append(doc_id)

    @rule(target=ids, text=texts, ts=timestamps, data=st.data())
    def add_again(self, text: str, ts: float, data: st.DataObject) -> int:
        # a doc id let go taken again (a scope reuses its freed slots), searched or not between
        assume(self.freed)
        doc_id = self.freed.pop(data.draw(st.integers(0, len(self.freed) - 1)))
        self.index.add(doc_id, text, ts)
        self.docs[doc_id] = (text, ts)
        return doc_id

    @rule(doc_id=ids, text=texts, ts=timestamps)
    def update(self, doc_id: int, text: str, ts: float) -> None:
        self.index.update(doc_id, text, ts)
        self.docs[doc_id] = (text, ts)

    @rule(query=texts, top_k=st.integers(1, 12), data=st.data())
    def search(self, query: str, top_k: int, data: st.DataObject) -> None:
        allowed = None
        if data.draw(st.booleans()):
            allowed = data.draw(st.sets(st.integers(0, max(0, self.next_id))))
        assert self.index.search(query, top_k, allowed=allowed) == brute_force(self.docs, query, top_k,
                                                                                 allowed)

    @invariant()
    def sizes_agree(self) -> None:
        assert len(self.index) == len(self.docs)


KeywordMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
test_keyword_index_matches_brute_force = KeywordMachine.TestCase


def test_an_index_that_keeps_no_words_removes_by_the_text_given() -> None:
    texts = {0: "Tea in Paris", 1: "tea and coffee", 2: "Paris in spring", 3: "coffee coffee"}
    kept, lean = KeywordIndex(), KeywordIndex(keep_words=False)
    for doc, text in texts.items():
        kept.add(doc, text, float(doc))
        lean.add(doc, text, float(doc))
    kept.remove(1)
    lean.remove(1, texts[1])
    for query in ("tea", "coffee Paris", "spring tea coffee"):
        assert lean.search(query) == kept.search(query)
    with pytest.raises(InvalidInput, match="not kept"):
        lean.remove(2)
    assert 2 in lean and lean.search("spring") == [(2, 1)]  # the refused removal changed nothing


def test_a_common_words_docs_are_bits_in_packbits_order_in_memory_and_in_the_sidecar() -> None:
    # the sidecar's format (dense_bits) is np.packbits' order: doc d at bit 7 - d % 8 of byte d // 8
    tiny = Tiny()
    docs = [0, 3, 7, 8, 9, 17, 18, 19, 20]
    tiny.add_many(docs, ["common"] * len(docs), [float(doc) for doc in docs])
    column = np.zeros(tiny._capacity, dtype=np.uint8)
    column[docs] = 1
    np.testing.assert_array_equal(tiny._dense["common"], np.packbits(column))
    sidecar = unpack_sidecar(tiny.to_sidecar(), KeywordIndex.sidecar_magic, "keyword", KeywordIndex.sidecar_arrays)
    np.testing.assert_array_equal(sidecar.arrays["dense_bits"], np.packbits(column)[None, :])


def test_a_sidecars_bits_past_its_capacity_never_become_docs() -> None:
    # capacity 45: the last byte's three low bits are no doc's; a damaged file setting them
    # must not name docs 45..47 once the index grows past them
    class Sorting(Tiny):
        _few = 2048  # (a match level is sorted from its counts, not read off the recency order)

    tiny = Sorting()
    docs = list(range(9))
    tiny.add_many(docs, ["common"] * len(docs), [1.0] * len(docs))
    tiny._ensure_capacity(45)
    assert tiny._capacity == 45
    blob = bytearray(tiny.to_sidecar())
    sidecar = unpack_sidecar(bytes(blob), KeywordIndex.sidecar_magic, "keyword", KeywordIndex.sidecar_arrays)
    arrays = dict(sidecar.arrays)
    bits = arrays["dense_bits"].copy()
    bits[0, -1] |= 0x07
    arrays["dense_bits"] = bits
    damaged = pack_sidecar(KeywordIndex.sidecar_magic, {k: v for k, v in sidecar.header.items() if k != "arrays"},
                           arrays)
    loaded = Sorting.from_sidecar(damaged)
    loaded._ensure_capacity(100)
    loaded.add_many([40], ["other"], [2.0])
    assert sorted(doc for doc, _ in loaded.search("common", top_k=50)) == docs


def test_a_bool_is_no_doc_id(index: KeywordIndex) -> None:
    index.add_many([0, 1, 2, 3], ["a b", "a c", "a d", "b"], [1.0, 2.0, 3.0, 4.0])
    assert True not in index and False not in index and -1 not in index and np.int64(1) in index
    with pytest.raises(NotFound):
        index.remove(True)  # type: ignore[arg-type]
    assert index.doc_ids() == [0, 1, 2, 3] and len(index) == 4
    index.remove(np.int64(1))  # type: ignore[arg-type]
    assert index.doc_ids() == [0, 2, 3] and len(index) == 3


def test_a_doc_removed_before_the_recency_order_took_it_never_enters_it() -> None:
    # (the docs added since the last search wait in an array; one removed meanwhile is
    # left there, and the merge takes the live ones, each once, even when added again)
    index = Tiny()
    index.add_many([0, 1, 2], ["tea time", "tea", "tea for two"], [1.0, 2.0, 3.0])
    index.remove(0)
    index.remove(2)
    index.add(2, "tea again", 4.0)
    assert index.search("tea", 10) == brute_force({1: ("tea", 2.0), 2: ("tea again", 4.0)}, "tea", 10, None)
    assert sorted(index._order.tolist()) == [1, 2]
    index.add(0, "tea", 5.0)
    index.remove(1)
    assert [doc for doc, _ in index.search("tea", 10)] == [0, 2]
    assert sorted(index._order.tolist()) == [0, 2]
