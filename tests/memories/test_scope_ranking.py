"""Scores that mean something and a fusion that does not lose to its best signal
(memories.ranking, memories.periods, memories.queries): the calibration of cosines,
the full-text weight that adapts to crowding and coverage, the session context that
lifts a memory without making it look relevant, dates named in a query, the query
worded as the user would say it; and, with the default model and settings, what a
new user tries first (bench/data/newcomer.json)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scope_support import EMBEDDER, Driver

import mnemex
from mnemex.memories.periods import DAY, named_periods, period_match
from mnemex.memories.protocol import NewMemory, Remember, Search
from mnemex.memories.queries import first_person, query_texts
from mnemex.memories.ranking import (
    CONTEXT_ONLY,
    COVERAGE_MIN_TERMS,
    COVERAGE_RAMP,
    DATE_SLACK,
    CosineScale,
    calibrated_cosine,
    crowding,
    rounded,
    text_weights,
)
from mnemex.memories.snapshot import encode_vector

NEWCOMER = Path(__file__).resolve().parents[2] / "bench" / "data" / "newcomer.json"


def day(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


# -- calibration ------------------------------------------------------------------------------
def test_a_calibrated_cosine_is_a_ramp_from_floor_to_ceiling_that_keeps_every_order() -> None:
    floor, ceiling = 0.2, 0.65
    cosines = np.linspace(-1.0, 1.0, 2001)
    scores = calibrated_cosine(cosines, floor, ceiling)
    assert np.all(np.diff(scores) > 0)  # strictly rising: no two cosines tie, even far below the floor
    assert np.all((scores >= 0) & (scores <= 1))
    assert calibrated_cosine(np.array([floor, (floor + ceiling) / 2, ceiling]), floor, ceiling) == \
        pytest.approx([0.0, 0.5, 1.0], abs=0.04)
    inside = np.array([0.3, 0.4, 0.5])
    assert calibrated_cosine(inside, floor, ceiling) == pytest.approx((inside - floor) / (ceiling - floor),
                                                                      abs=1e-3)


@pytest.mark.parametrize(("nearest", "crowded", "expected"), [
    (0.2, 0.44, 0.0), (0.33, 0.44, 0.0), (0.385, 0.44, 0.5), (0.44, 0.44, 1.0), (0.9, 0.44, 1.0),
    (0.0, 0.0, 1.0), (-0.5, -1.0, 1.0),
])
def test_crowding_rises_from_three_quarters_of_crowded_to_crowded(nearest: float, crowded: float,
                                                                   expected: float) -> None:
    assert crowding(nearest, crowded) == pytest.approx(expected)


def test_the_text_weight_is_the_larger_of_crowding_and_coverage() -> None:
    low, high = COVERAGE_RAMP
    texts = np.array([0.0, 0.3, low, (low + high) / 2, high, 1.0])
    matched = np.full(len(texts), float(COVERAGE_MIN_TERMS))
    assert text_weights(texts, 0.0, 0.7, matched, 2) == pytest.approx([0, 0, 0, 0.35, 0.7, 0.7])
    assert text_weights(texts, 1.0, 0.7, matched, 2) == pytest.approx([0.7] * 6)
    assert text_weights(texts, 0.4, 0.7, matched, 2) == pytest.approx([0.28, 0.28, 0.28, 0.35, 0.7, 0.7])


def test_coverage_of_a_sentence_counts_only_for_a_memory_holding_several_of_its_words() -> None:
    texts = np.array([1.0, 1.0, 1.0, 1.0])
    matched = np.array([0.0, 1.0, 2.0, 5.0])
    assert COVERAGE_MIN_TERMS == 2
    assert text_weights(texts, 0.0, 0.7, matched, 2) == pytest.approx([0.0, 0.0, 0.7, 0.7])
    assert text_weights(texts, 0.5, 0.7, matched, 2) == pytest.approx([0.35, 0.35, 0.7, 0.7])
    assert text_weights(texts, 0.0, 0.7, matched, 1) == pytest.approx([0.0, 0.7, 0.7, 0.7])


async def test_one_shared_word_does_not_outrank_the_memory_that_answers() -> None:
    """Default embedder: the memory sharing the query's only word ("bike") but not its
    meaning no longer takes the first place from the one that answers."""
    async with mnemex.open_runtime(mnemex.Config(data_dir=None)) as rt:
        scope = rt.scope(user_id="u", app_name="ranking")
        await scope.remember_many([
            "Somebody left a bike chained to our front railings all week.",
            "I cycle to the office on a carbon road racer I bought last spring.",
            "My sister moved to Leeds in March.",
            "We had pasta for dinner on Sunday.",
        ])
        hits = (await scope.search("Which bike is his?", min_score=-1.0)).hits
        assert hits[0].memory.content.startswith("I cycle to the office")
        chained = next(hit for hit in hits if hit.memory.content.startswith("Somebody"))
        assert chained.scores["text_weight"] == 0.0
        # asked as a keyword, the word is what is wanted
        hits = (await scope.search("bike")).hits
        assert hits[0].memory.content.startswith("Somebody") and hits[0].scores["text_weight"] > 0.5


def test_every_embedder_declares_a_cosine_scale_the_scope_reads() -> None:
    from mnemex.memories.kind import cosine_scale_of
    from mnemex.models.embedders import OnnxMiniLMEmbedder
    from mnemex.models.hashing import HashingEmbedder

    assert cosine_scale_of(OnnxMiniLMEmbedder) == CosineScale(0.2, 0.65, 0.44)
    assert cosine_scale_of(HashingEmbedder()) == CosineScale(0.1, 0.6, 0.0)
    assert cosine_scale_of(object()) == CosineScale()  # a model of one's own, until configured
    settings = mnemex.Config(cosine_floor=0.7, cosine_ceiling=0.9).memories
    assert (settings.cosine_floor, settings.cosine_ceiling, settings.cosine_crowded) == (0.7, 0.9, None)


# -- the adaptive weight, with vectors made by hand -------------------------------------------
def unit(vector: np.ndarray) -> np.ndarray:
    out: np.ndarray = (vector / np.linalg.norm(vector)).astype(np.float32)
    return out


def with_cosine(query: np.ndarray, cosine: float, seed: int) -> np.ndarray:
    """A unit vector whose cosine to the unit ``query`` is ``cosine``."""
    other = np.random.default_rng(seed).standard_normal(len(query))
    other -= other.dot(query) * query
    return unit(cosine * query + math.sqrt(1 - cosine * cosine) * unit(other))


def hand_made_scope(crowd_cosine: float, **overrides: Any) -> tuple[Driver, np.ndarray]:
    """A developer memory the query's vector points to (cosine 0.45), a memory sharing
    only the everyday word "work" (cosine 0.3), and ten fillers at ``crowd_cosine``."""
    d = Driver(**overrides)
    query = unit(np.random.default_rng(0).standard_normal(EMBEDDER.dim))
    texts = [("dev", "I'm a software developer at a bank", 0.45),
             ("work", "I'm terrible at saying no to extra work", 0.3)]
    texts += [(f"f{i}", f"filler memory number {i} about gardening", crowd_cosine) for i in range(10)]
    memories = [NewMemory(id=mid, content=text, vector=encode_vector(with_cosine(query, cosine, i + 1)))
                for i, (mid, text, cosine) in enumerate(texts)]
    d.send(Remember(memories=memories, embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=d.tick()))
    return d, query


def hand_search(d: Driver, query: str, vector: np.ndarray, **fields: Any) -> list[Any]:
    result = d.send(Search(query=query, vector=encode_vector(vector), embedder=EMBEDDER.name,
                           dim=EMBEDDER.dim, top_k=3, mode="hybrid", min_score=-1.0, now=d.now, **fields))
    hits: list[Any] = result.hits
    return hits


def test_a_shared_everyday_word_does_not_outrank_the_meaning_among_varied_memories() -> None:
    d, query = hand_made_scope(0.05)
    hits = hand_search(d, "what does the user do for work?", query)
    assert hits[0].memory.id == "dev"
    work = next(h for h in hits if h.memory.id == "work")
    assert 0 < work.scores["fulltext"] < COVERAGE_RAMP[0] and work.scores["text_weight"] == 0.0
    assert hits[0].scores["crowding"] == 0.0
    # with the weights fixed, the word wins: what the adaptive weight is for
    fixed, _ = hand_made_scope(0.05, fusion_adaptive=False)
    assert hand_search(fixed, "what does the user do for work?", query)[0].memory.id == "work"


def test_words_decide_where_the_scope_is_crowded_around_the_query() -> None:
    d, query = hand_made_scope(0.6)
    hits = hand_search(d, "what does the user do for work?", query)
    assert hits[0].scores["crowding"] == 1.0 and hits[0].memory.id == "work"
    assert hits[0].scores["text_weight"] == pytest.approx(0.7)


def test_a_memory_holding_the_whole_query_is_trusted_on_its_words_anywhere() -> None:
    d, query = hand_made_scope(0.05)
    hits = hand_search(d, "saying no to extra work", query)
    assert hits[0].memory.id == "work" and hits[0].scores["text_weight"] == pytest.approx(0.7)
    s = hits[0].scores
    assert s["relevance"] == pytest.approx(0.7 * s["fulltext"] + 0.3 * s["vector"], abs=1e-5)


# -- session context ---------------------------------------------------------------------------
def test_a_neighbour_holding_no_query_word_is_lifted_by_its_context_but_does_not_look_relevant() -> None:
    d = Driver()
    d.remember("My dog is called Rex", session_id="s1")
    [thanks] = d.remember("Thanks, that's lovely!", session_id="s1")
    d.remember(*[f"note {i} about the weather" for i in range(6)], session_id="s2")
    hits = d.search("dog", "fulltext").hits
    assert [h.memory.content for h in hits] == ["My dog is called Rex", "Thanks, that's lovely!"]
    assert hits[0].score > 0.9 and hits[1].score < 0.25
    bm25 = d.memory.bm25.score_all("dog")
    assert bm25 is not None
    doc = d.memory.doc_of[thanks]
    assert hits[1].scores["bm25"] == pytest.approx(bm25[doc], abs=1e-6)  # the breakdown keeps BM25 itself
    ideal = d.memory.bm25.idf("dog")
    assert hits[1].score == pytest.approx(min(1.0, CONTEXT_ONLY * bm25[doc] / ideal), abs=1e-5)


def _best_by(scores: dict[int, float], count: int, noise: float = 0.0) -> tuple[set[int], set[int]]:
    """The ``count`` best docs (ties by lower doc), and those within ``noise`` of the
    cut, which may fall on either side of it."""
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    cut = ranked[count - 1][1] if len(ranked) >= count else -math.inf
    near = {doc for doc, score in ranked if abs(score - cut) <= noise} if len(ranked) > count else set()
    return {doc for doc, _ in ranked[:count]}, near


HYBRID_WORDS = ["dog", "cat", "walk", "park", "rain", "sun", "the", "a", "blue", "river", "tree"]


@given(st.lists(st.tuples(st.lists(st.sampled_from(HYBRID_WORDS), min_size=1, max_size=7).map(" ".join),
                          st.sampled_from([None, "s1", "s2", "s3"])), min_size=1, max_size=40),
       st.lists(st.sampled_from(HYBRID_WORDS), min_size=1, max_size=4).map(" ".join),
       st.integers(1, 12), st.integers(1, 8))
@settings(max_examples=120, deadline=None)
def test_hybrid_signals_and_candidate_lists_are_those_of_the_simple_way(
        notes: list[tuple[str, str | None]], query: str, top_k: int, candidates: int) -> None:
    """Each hybrid hit's BM25, full-text (context-only matches cut to CONTEXT_ONLY),
    cosine and candidate lists, against the indexes read the long way: a score per
    memory, a full sort for each list (ties by lower doc)."""
    d = Driver(expansion=False, fusion_candidates=candidates)
    for content, session in notes:
        d.remember(content, **({"session_id": session} if session else {}))
    memory = d.memory
    bm25, index = memory.bm25, memory.vectors
    assert index is not None
    hits = d.search(query, "hybrid", top_k=top_k, min_score=-1.0).hits
    raw = bm25.score_all(query)
    parsed = bm25.tokenizer.parse_query(query)
    ideal = sum(bm25.idf(term) for term in parsed.all_terms)
    q = EMBEDDER.embed([query])[0].astype(np.float32)
    docs = sorted(memory.doc_of.values())
    # one product per memory: float32 sums in another order than the index's, so a
    # cosine may differ in its last bits
    cosine = {doc: float(index.vectors([doc])[0] @ q) for doc in docs}
    text: dict[int, float] = {}
    for doc in docs:
        own = bm25.content_matches(query)[doc] if raw is not None else 0
        value = 0.0 if raw is None else float(raw[doc]) * (CONTEXT_ONLY if own == 0 else 1.0)
        if value > 0:
            text[doc] = value
    count = max(top_k, candidates)
    (by_text, _), (by_vector, near_cut) = _best_by(text, count), _best_by(cosine, count, 1e-6)
    if not near_cut:
        assert len(hits) == min(top_k, len(by_text | by_vector))
    for hit in hits:
        doc = memory.doc_of[hit.memory.id]
        assert ("fulltext" in hit.found_by) == (doc in by_text)
        if doc not in near_cut:
            assert ("vector" in hit.found_by) == (doc in by_vector)
        assert hit.scores["bm25"] == round(float(raw[doc]) if raw is not None else 0.0, 6)
        assert hit.scores["fulltext"] == round(min(1.0, text.get(doc, 0.0) / ideal) if ideal > 0 else 0.0, 6)
        assert hit.scores["cosine"] == pytest.approx(cosine[doc], abs=1e-6)


# -- dates named in a query --------------------------------------------------------------------
@pytest.mark.parametrize(("query", "periods"), [
    ("What did Gina find on 1 February, 2023?", [("2023-02-01", "2023-02-02")]),
    ("what happened on the 13th of Oct, 2023", [("2023-10-13", "2023-10-14")]),
    ("Where was Tim on October 13, 2023?", [("2023-10-13", "2023-10-14")]),
    ("in December 2023", [("2023-12-01", "2024-01-01")]),
    ("since Sept. 2021", [("2021-09-01", "2021-10-01")]),
    ("log of 2023-10-13 and 2023-11", [("2023-10-13", "2023-10-14"), ("2023-11-01", "2023-12-01")]),
    ("How many times in 2023?", [("2023-01-01", "2024-01-01")]),
    ("When did she go camping in June?", []),        # no year: no period
    ("the 2022-2023 season", []),
    ("31 February 2023", [("2023-02-01", "2023-03-01")]),  # no such day: the month it names
])
def test_a_query_names_days_months_and_years(query: str, periods: list[tuple[str, str]]) -> None:
    assert named_periods(query) == tuple((day(a), day(b)) for a, b in periods)


PIECES = ["in", "on", "the", "of", "13th", "1", "31", "Oct", "oct.", "October", "Sept.", "june", "2023",
          "1999", "2099", "2100", "1899", "19", "20", "23", "2023-10", "2023-10-13", "2022-2023", "12", ",",
          "-", "\u0662\u0660\u0662\u0663", "20\u0662\u0663", "\uff11\uff19\uff19\uff19"]


@given(st.lists(st.sampled_from(PIECES), max_size=8), st.sampled_from([" ", "", ", "]))
@settings(max_examples=300, deadline=None)
def test_periods_are_looked_for_only_where_a_year_is_written(pieces: list[str], glue: str) -> None:
    """A query without the digits of a year names no period (named_periods stops
    there): the same periods as trying every form, as the long way does."""
    from mnemex.memories import periods

    query = glue.join(pieces)
    found: list[tuple[int, float, float]] = []
    taken: list[tuple[int, int]] = []
    for form, pattern in periods._PATTERNS:
        for match in pattern.finditer(query):
            start, end = match.span()
            if any(start < b and a < end for a, b in taken):
                continue
            period = periods._period(form, match.groups())
            if period is not None:
                taken.append((start, end))
                found.append((start, *period))
    assert named_periods(query) == tuple((a, b) for _, a, b in sorted(found))


def test_a_time_near_a_period_counts_less_the_further_it_is() -> None:
    period = ((day("2023-03-01"), day("2023-04-01")),)
    times = np.array([day("2023-03-15"), day("2023-04-01") + 3.5 * DAY, day("2023-02-01"), day("2023-04-09")])
    assert period_match(times, period, 7 * DAY) == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert period_match(times, (), 7 * DAY) == pytest.approx([0.0] * 4)


def garden_scope(**overrides: Any) -> tuple[Driver, str]:
    d = Driver(fusion_candidates=2, **overrides)
    d.remember(*[f"we talked about the garden again, part {i}" for i in range(8)],
               timestamp=day("2023-05-10"))
    [march] = d.remember("a quiet evening at home", timestamp=day("2023-03-20"))
    return d, march


def test_a_memory_observed_in_the_named_month_is_found_even_when_neither_signal_lists_it() -> None:
    d, march = garden_scope()
    hits = d.search("what happened in the garden in March 2023?", "hybrid", top_k=3, min_score=-1.0).hits
    assert march in [h.memory.id for h in hits]
    found = next(h for h in hits if h.memory.id == march)
    assert found.scores["date"] == 1.0 and found.scores["relevance"] >= 0.2
    # three and a half days after the month it counts half
    [april] = d.remember("another quiet evening", timestamp=day("2023-04-01") + DATE_SLACK / 2)
    hits = d.search("what happened in March 2023?", "hybrid", top_k=12, min_score=-1.0).hits
    assert next(h for h in hits if h.memory.id == april).scores["date"] == pytest.approx(0.5)
    # dates weighing nothing: the month is two words like any other
    plain, march = garden_scope(date_weight=0.0)
    hits = plain.search("what happened in the garden in March 2023?", "hybrid", top_k=3, min_score=-1.0).hits
    assert march not in [h.memory.id for h in hits] and all(h.scores["date"] == 0.0 for h in hits)


# -- the query as the user would say it ---------------------------------------------------------
@pytest.mark.parametrize(("query", "said"), [
    ("what does the user do for work?", "what do I do for work?"),
    ("user occupation", "my occupation"),
    ("user's profession", "my profession"),
    ("What is the user's job?", "What is my job?"),
    ("is the user married?", "am I married?"),
    ("who lives with the user?", "who lives with me?"),
    ("Has the user been to Japan?", "have I been to Japan?"),
    ("where does Caroline live?", None),
    ("users of Python", None),
])
def test_a_query_about_the_user_is_also_worded_as_the_user_would_say_it(query: str, said: str | None) -> None:
    assert first_person(query) == said
    assert query_texts(query) == ((query,) if said is None else (query, said))


# -- what a new user tries first, with the default model and settings ---------------------------
async def test_a_newcomers_questions_find_their_memory_and_the_rest_find_nothing() -> None:
    data = json.loads(NEWCOMER.read_text())
    async with mnemex.open_runtime(mnemex.Config(data_dir=None)) as rt:
        scope = rt.scope(user_id="newcomer", app_name="chat")
        await scope.remember_many(data["memories"])
        for query in ("what does the user do for work?", "user occupation", "user's profession"):
            hits = (await scope.search(query)).hits
            assert hits and hits[0].memory.content == "I'm a software developer at a bank.", query
            assert 0.25 <= hits[0].score <= 1.0
        silent = [not (await scope.search(query)).hits for query in data["no_answer"]]
        assert sum(silent) >= 0.8 * len(silent)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["what", "does", "the", "user", "USER", "User's", "u\u017fer", "users", "is",
                                 "has", "to", "about", "work", "?", " ", "  ", "\u2019s", "user\u2019s",
                                 "abuser", "Üser", "do", "I"]), max_size=12))
def test_first_person_skips_only_queries_no_pattern_can_change(pieces: list[str]) -> None:
    from mnemex.memories.queries import _FIRST_PERSON

    query = " ".join(pieces)
    out = query
    for pattern, replacement in _FIRST_PERSON:
        out = pattern.sub(replacement, out)
    assert first_person(query) == (None if out == query else out)


def test_cosines_of_many_memories_are_gathered_a_block_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # the memories of a named entity can be tens of thousands: their vectors are read
    # a block at a time, never all at once, and each doc gets its own cosine
    from mnemex.index import VectorIndex
    from mnemex.memories import ranking

    rng = np.random.default_rng(5)
    index = VectorIndex(16)
    held = np.arange(0, 2600, 2, dtype=np.int64)  # odd docs have no vector
    index.add_many(held, rng.standard_normal((len(held), 16)).astype(np.float32))
    query = rng.standard_normal(16).astype(np.float32)
    unit = query / np.linalg.norm(query)
    gathered: list[int] = []
    vectors = index.vectors
    unpatched = VectorIndex.vectors

    def counted(self: VectorIndex, doc_ids: Any) -> Any:  # (the index has slots: patched on its class)
        gathered.append(len(doc_ids))
        return unpatched(self, doc_ids)

    monkeypatch.setattr(VectorIndex, "vectors", counted)
    docs = np.arange(0, 2700, dtype=np.int64)  # past the last doc too
    cosines = ranking._Cosines(index, unit, None)(docs)
    assert max(gathered) == ranking._COSINE_BLOCK and sum(gathered) == len(held)
    expected = np.zeros(len(docs))
    monkeypatch.undo()
    expected[held] = np.array([float(vectors([doc])[0] @ unit) for doc in held.tolist()])
    assert cosines.dtype == np.float64
    assert np.allclose(cosines, expected, rtol=0, atol=1e-6)
    assert (cosines[1::2] == 0).all() and (cosines[2600:] == 0).all()


@given(st.floats(allow_nan=False) | st.floats(-2.0, 2.0) | st.integers(-10**7, 10**7).map(lambda n: n / 2e6))
@settings(max_examples=2000, deadline=None)
def test_rounded_is_round_to_six_places(value: float) -> None:
    got = rounded(value)
    assert got == round(value, 6) and math.copysign(1.0, got) == math.copysign(1.0, round(value, 6))
