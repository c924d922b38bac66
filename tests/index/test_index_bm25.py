"""BM25Index: Okapi BM25 (BM25F with a context field), phrases and filters,
checked against a straightforward reimplementation."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from mnemex.errors import InvalidInput, NotFound
from mnemex.index import BM25Index, Tokenizer

Doc = tuple[str, str | None]


def brute_force_scores(docs: dict[int, Doc], query: str, tokenizer: Tokenizer, *, k1: float = 1.5,
                       b: float = 0.75, weight: float = 0.5) -> dict[int, float]:
    """Score of every matching document, computed the long way round."""
    parsed = tokenizer.parse_query(query)
    content = {d: tokenizer.positioned(text) for d, (text, _) in docs.items()}
    context = {d: tokenizer.tokens(ctx) if ctx else [] for d, (_, ctx) in docs.items()}
    n = len(docs)
    if n == 0:
        return {}
    avg_content = sum(len(t) for t, _ in content.values()) / n
    with_context = [len(c) for c in context.values() if c]
    avg_context = sum(with_context) / len(with_context) if with_context else 0.0

    def holds(doc_id: int, tokens: tuple[str, ...], offsets: tuple[int, ...]) -> bool:
        terms, positions = content[doc_id]
        at = dict(zip(positions, terms, strict=True))
        stops = set(range(max(positions, default=-1) + 1)) - set(positions)
        span = offsets[-1]
        for start in positions:
            if all(at.get(start + o) == t for t, o in zip(tokens, offsets, strict=True)) and all(
                    start + g in stops for g in range(span + 1) if g not in offsets):
                return True
        return False

    scores: dict[int, float] = {}
    for doc_id in docs:
        if not all(holds(doc_id, p.tokens, p.offsets) for p in parsed.phrases):
            continue
        tf_c = Counter(content[doc_id][0])
        tf_x = Counter(context[doc_id])
        total = 0.0
        matched = False
        for term in parsed.all_terms:
            df = sum(1 for d in docs if term in content[d][0] or term in context[d])
            if df == 0 or (tf_c[term] == 0 and tf_x[term] == 0):
                continue
            matched = True
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            norm_c = 1 - b + b * len(content[doc_id][0]) / avg_content if avg_content else 1 - b
            tf = tf_c[term] / norm_c
            if weight > 0 and avg_context > 0:
                norm_x = 1 - b + b * len(context[doc_id]) / avg_context
                tf += weight * tf_x[term] / norm_x
            total += idf * tf * (k1 + 1) / (k1 + tf)
        if matched:
            scores[doc_id] = total
    return scores


def assert_same_ranking(got: list[tuple[int, float]], expected: dict[int, float], top_k: int) -> None:
    """``got`` is a correct top_k of ``expected`` (ties broken by lower id; floats
    compared with a tolerance, so near-ties may come in either order)."""
    tol = 1e-9
    assert len(got) == min(top_k, len(expected))
    for doc_id, score in got:
        assert doc_id in expected
        assert score == pytest.approx(expected[doc_id], rel=1e-9, abs=1e-12)
    scores = [s for _, s in got]
    assert all(a >= b - tol for a, b in itertools.pairwise(scores))
    if got:
        floor = min(scores)
        chosen = {d for d, _ in got}
        assert all(s <= floor + tol for d, s in expected.items() if d not in chosen)


CORPUS: dict[int, Doc] = {
    1: ("Caroline went to the LGBTQ support group yesterday", None),
    2: ("Melanie painted a sunrise over the lake", "Caroline asked about the painting"),
    3: ("The support group meets on Tuesdays", None),
    4: ("state of the art design for the new group", None),
    5: ("Art of the state; design is state of mind", "sunrise hikes"),
}


@pytest.mark.parametrize("query", [
    "support group", "caroline", "sunrise", "painting", "art state design", "nothing here",
    '"support group"', '"state of the art"', '"art of the state" design', '"group yesterday" caroline',
    '"unknownword group"', "the of", '"the of"',
])
def test_scores_match_the_formula(query: str) -> None:
    index = BM25Index()
    for doc_id, (text, ctx) in CORPUS.items():
        index.add(doc_id, text, ctx)
    expected = brute_force_scores(CORPUS, query, index.tokenizer)
    assert_same_ranking(index.search(query, top_k=10), expected, 10)


def test_without_context_it_is_plain_okapi_bm25() -> None:
    docs = {1: "a b c", 2: "a a d", 3: "c d e f"}
    index = BM25Index(tokenizer=Tokenizer(stop_words=False))
    for doc_id, text in docs.items():
        index.add(doc_id, text)
    n, avgdl = 3, 10 / 3
    df, tf, dl = 2, 2, 3  # term "a" in doc 2
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    by_hand = idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / avgdl))
    assert index.search("a")[0] == (2, pytest.approx(by_hand))


def test_a_quoted_phrase_is_required_as_consecutive_words() -> None:
    index = BM25Index()
    index.add(1, "new york pizza")
    index.add(2, "york new pizza")
    index.add(3, "new pizza in york")
    assert [d for d, _ in index.search('"new york"')] == [1]
    assert [d for d, _ in index.search('"new york" pizza')] == [1]
    assert sorted(d for d, _ in index.search("new york")) == [1, 2, 3]


def test_phrase_words_must_be_in_content_not_context() -> None:
    index = BM25Index()
    index.add(1, "plain content", "new york")
    index.add(2, "visited new york")
    assert [d for d, _ in index.search('"new york"')] == [2]
    assert sorted(d for d, _ in index.search("new york")) == [1, 2]


@pytest.mark.parametrize(("weight", "context_found"), [(0.0, False), (0.5, True), (2.0, True)])
def test_context_field_is_weighted(weight: float, context_found: bool) -> None:
    index = BM25Index(context_weight=weight)
    index.add(1, "Melanie paints", "we talked about the lake")
    index.add(2, "the lake is cold")
    found = {d for d, _ in index.search("lake")}
    assert found == ({1, 2} if context_found else {2})


def test_context_counts_less_than_content_at_weight_below_one() -> None:
    index = BM25Index(context_weight=0.5)
    index.add(1, "lake trip planned", "other words here")
    index.add(2, "other words here", "lake trip planned")
    hits = index.search("lake")
    assert [d for d, _ in hits] == [1, 2]


def test_filter_returns_best_allowed_even_when_worse() -> None:
    index = BM25Index()
    for doc_id in range(10):
        index.add(doc_id, "apple " * (10 - doc_id) + "filler words")
    top = index.search("apple", top_k=3)
    assert [d for d, _ in top] == [0, 1, 2]
    assert [d for d, _ in index.search("apple", top_k=3, allowed={7, 8, 42})] == [7, 8]


def test_removed_and_updated_documents() -> None:
    index = BM25Index()
    index.add(1, "alpha beta")
    index.add(2, "beta gamma", "alpha")
    index.remove(1)
    assert [d for d, _ in index.search("alpha")] == [2]
    index.update(2, "delta")
    assert index.search("alpha") == []
    assert index.search("beta") == []
    assert [d for d, _ in index.search("delta")] == [2]
    assert len(index) == 1


@pytest.mark.parametrize(("call", "error"), [
    (lambda ix: ix.add(1, "again"), InvalidInput),
    (lambda ix: ix.add(2, None), InvalidInput),
    (lambda ix: ix.add(2, "x", 5), InvalidInput),
    (lambda ix: ix.add(2**31, "x"), InvalidInput),
    (lambda ix: ix.remove(3), NotFound),
    (lambda ix: ix.update(3, "x"), NotFound),
    (lambda ix: ix.search("x", top_k=-1), InvalidInput),
])
def test_bad_arguments_are_refused(call: object, error: type[Exception]) -> None:
    index = BM25Index()
    index.add(1, "present")
    with pytest.raises(error):
        call(index)  # type: ignore[operator]
    assert [d for d, _ in index.search("present")] == [1]


@pytest.mark.parametrize("params", [{"k1": -1.0}, {"b": 1.5}, {"context_weight": math.inf}])
def test_bad_parameters_are_refused(params: dict[str, float]) -> None:
    with pytest.raises(InvalidInput):
        BM25Index(**params)  # type: ignore[arg-type]


def test_random_corpus_matches_brute_force() -> None:
    rng = random.Random(3)
    vocabulary = ["red", "green", "blue", "the", "of", "sky", "sea", "tree", "leaf", "rock"]
    tokenizer = Tokenizer()
    index = BM25Index(tokenizer=tokenizer)
    docs: dict[int, Doc] = {}
    for doc_id in range(300):
        text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 8)))
        ctx = None
        if rng.random() < 0.5:
            ctx = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 8)))
        index.add(doc_id, text, ctx)
        docs[doc_id] = (text, ctx)
    for doc_id in rng.sample(range(300), 100):
        index.remove(doc_id)
        del docs[doc_id]
    for _ in range(30):
        words = [rng.choice(vocabulary) for _ in range(rng.randint(1, 4))]
        query = " ".join(words) if rng.random() < 0.6 else f'"{" ".join(words[:2])}" {words[-1]}'
        top_k = rng.choice([1, 5, 20])
        assert_same_ranking(index.search(query, top_k), brute_force_scores(docs, query, tokenizer), top_k)


WORDS = ["sun", "moon", "star", "the", "of", "sky"]
texts = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
queries = st.one_of(texts, st.tuples(texts, texts).map(lambda p: f'"{p[0]}" {p[1]}'))


def assert_scored(index: BM25Index, docs: dict[int, Doc], query: str, allowed: set[int] | None) -> None:
    """One pass gives score_all's scores, content_matches' counts and the docs that
    hold a query term in their context only, as the long way round finds them."""
    tokenizer = index.tokenizer
    found = index.scored(query, allowed)
    alone = index.score_all(query, allowed)
    if found is None:
        assert alone is None
        return
    assert alone is not None
    np.testing.assert_array_equal(found.scores, alone)
    np.testing.assert_array_equal(found.matches, index.content_matches(query))
    terms = set(tokenizer.parse_query(query).all_terms)
    content = {d: set(tokenizer.positioned(text)[0]) for d, (text, _) in docs.items()}
    context = {d: set(tokenizer.tokens(ctx)) if ctx else set() for d, (_, ctx) in docs.items()}
    for doc_id in docs:
        assert found.matches[doc_id] == len(terms & content[doc_id])
    assert set(found.context_docs.tolist()) == {
        d for d in docs if (terms & context[d]) - content[d]}
    expected = brute_force_scores(docs, query, tokenizer)
    for doc_id in docs:
        want = expected.get(doc_id, 0.0) if allowed is None or doc_id in allowed else 0.0
        assert found.scores[doc_id] == pytest.approx(want, rel=1e-9, abs=1e-12)
    if allowed is None:  # the scores and the docs matched by their context alone
        cut = index.context_only(query)
        assert cut is not None
        np.testing.assert_array_equal(cut[0], alone)
        assert sorted(cut[1].tolist()) == sorted(
            d for d in docs if terms & context[d] and not terms & content[d])
        cut[0][:] = -1.0
    # each call's scores are the caller's own (a ranking scales and adds to them in place)
    expected_again = found.scores.copy()
    alone += 1.0
    found.scores[:] = -1.0
    again = index.scored(query, allowed)
    assert again is not None
    np.testing.assert_array_equal(again.scores, expected_again)


class BM25Machine(RuleBasedStateMachine):
    """BM25Index against a dict of documents scored by the formula, the long way."""

    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.index = BM25Index()
        self.docs: dict[int, Doc] = {}
        self.next_id = 0

    @rule(target=ids, text=texts, ctx=st.none() | texts)
    def add(self, text: str, ctx: str | None) -> int:
        doc_id = self.next_id
        self.next_id += 1
        self.index.add(doc_id, text, ctx)
        self.docs[doc_id] = (text, ctx)
        return doc_id

    @rule(doc_id=consumes(ids))
    def remove(self, doc_id: int) -> None:
        self.index.remove(doc_id)
        del self.docs[doc_id]

    @rule(doc_id=ids, text=texts, ctx=st.none() | texts)
    def update(self, doc_id: int, text: str, ctx: str | None) -> None:
        self.index.update(doc_id, text, ctx)
        self.docs[doc_id] = (text, ctx)

    @rule(query=queries, top_k=st.integers(1, 8), data=st.data())
    def search(self, query: str, top_k: int, data: st.DataObject) -> None:
        allowed = None
        if data.draw(st.booleans()):
            allowed = data.draw(st.sets(st.integers(0, max(0, self.next_id))))
        expected = {d: s for d, s in brute_force_scores(self.docs, query, self.index.tokenizer).items()
                    if allowed is None or d in allowed}
        assert_same_ranking(self.index.search(query, top_k, allowed=allowed), expected, top_k)

    @rule(query=queries, data=st.data())
    def scored(self, query: str, data: st.DataObject) -> None:
        assert_scored(self.index, self.docs, query,
                      data.draw(st.none() | st.sets(st.integers(0, max(0, self.next_id)))))

    @invariant()
    def sizes_agree(self) -> None:
        assert len(self.index) == len(self.docs)


BM25Machine.TestCase.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
test_bm25_index_matches_brute_force = BM25Machine.TestCase


@given(st.lists(st.tuples(texts, st.none() | texts), min_size=1, max_size=12), queries,
       st.none() | st.sets(st.integers(0, 12)), st.sets(st.integers(0, 11)))
@settings(max_examples=200, deadline=None)
def test_one_pass_scores_counts_and_finds_the_context_only_docs(
        docs: list[Doc], query: str, allowed: set[int] | None, removed: set[int]) -> None:
    index, held = BM25Index(), dict(enumerate(docs))
    for doc_id, (text, ctx) in held.items():
        index.add(doc_id, text, ctx)
    for doc_id in sorted(removed & set(held))[:-1]:  # one doc stays
        index.remove(doc_id)
        del held[doc_id]
    assert_scored(index, held, query, allowed)
