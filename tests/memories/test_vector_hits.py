"""A vector search's hits, built in one pass (``Ranker.vector_hits``) from a query
checked on the index's short way (``VectorIndex._as_query``), against the general
path they replaced: the index searched with the query as a list of floats (checked
and normalised as any vector is), the calibrated cosine by its formula with numpy's
own ``clip``, each value rounded by Python's ``round``, the score cut applied after.
The same memories in the same order, every score and signal equal to the bit, over
random scopes with tied vectors, removals and rows reused, filters and cuts."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scope_support import EMBEDDER, KEY, Driver
from scope_support import settings as scope_settings

from mnemex.effects import Step
from mnemex.memories import ranking
from mnemex.memories.behaviour import ScopeMemory
from mnemex.memories.keyed import MultiVectorSearch
from mnemex.memories.protocol import Forget, NewMemory, PutMemories, Search
from mnemex.memories.snapshot import encode_vector

WORDS = ["alice", "bob", "tea", "coffee", "likes", "hates", "the", "park", "walks", "Alice,", "TEA!"]


def general_scores(memory: ScopeMemory, command: Search) -> list[tuple[int, float, float]]:
    """(doc, cosine, calibrated score) of the top_k by the general path, before the cut."""
    index = memory.vectors
    if index is None or not len(index):
        return []
    assert command.vector is not None
    query = np.frombuffer(command.vector, dtype="<f4")
    found = index.search(query.tolist(), command.top_k, memory.allowed_docs(command.filter))
    cosines = np.array([cosine for _, cosine in found], dtype=np.float64)
    floor, ceiling = memory.settings.cosine_floor, memory.settings.cosine_ceiling
    s = ranking._SMOOTHING
    rise = s * (np.logaddexp(0.0, (cosines - floor) / s) - np.logaddexp(0.0, (cosines - ceiling) / s))
    calibrated = np.clip(rise / max(ceiling - floor, 1e-6), 0.0, 1.0)
    return [(doc, cosine, score) for (doc, cosine), score in zip(found, calibrated.tolist(), strict=True)]


def general_hits(memory: ScopeMemory, command: Search) -> list[tuple[str, float, dict[str, float], str, str]]:
    """(id, score, signals, app_name, user_id) of each hit, by the general path."""
    cut = memory.settings.vector_min_score if command.min_score is None else command.min_score
    return [(memory.docs_record(doc).id, round(score, 6),
             {"vector": round(score, 6), "cosine": round(cosine, 6)}, memory.app_name, memory.user_id)
            for doc, cosine, score in general_scores(memory, command) if cut is None or score >= cut]


def fast_hits(driver: Driver, command: Search) -> list[tuple[str, float, dict[str, float], str, str]]:
    result = driver.send(command)
    assert all(hit.found_by == () for hit in result.hits)
    return [(hit.memory.id, hit.score, hit.scores, hit.app_name, hit.user_id) for hit in result.hits]


def assert_same(driver: Driver, command: Search) -> list[tuple[str, float, dict[str, float], str, str]]:
    fast, general = fast_hits(driver, command), general_hits(driver.memory, command)
    assert fast == general
    for (_, score, signals, _, _), (_, want, want_signals, _, _) in zip(fast, general, strict=True):
        assert np.float64(score).tobytes() == np.float64(want).tobytes()  # (-0.0 and 0.0 apart)
        assert [np.float64(v).tobytes() for v in signals.values()] == \
            [np.float64(v).tobytes() for v in want_signals.values()]
    return fast


def test_tied_memories_come_lowest_doc_first_with_equal_scores_by_both_paths() -> None:
    driver = Driver()
    ids = driver.remember("Alice likes tea", "alice likes tea!", "ALICE, likes tea.", "Bob hates coffee",
                          "alice likes TEA")
    driver.send(Forget(ids=[ids[1]], now=driver.tick()))
    ids += driver.remember("alice, likes tea", "the park")  # the first takes the forgotten one's doc
    hits = assert_same(driver, driver.search_command("alice tea", mode="vector", min_score=-1.0))
    tied = [hit for hit in hits if hit[1] == hits[0][1]]
    assert [hit[0] for hit in tied] == [ids[0], ids[5], ids[2], ids[4]]  # by doc: the reused one second
    assert [hit[0] for hit in hits[len(tied):]] == [ids[6], ids[3]]


def test_a_cut_at_a_hits_exact_score_keeps_it_and_one_just_above_drops_it() -> None:
    driver = Driver()
    driver.remember("Alice likes tea", "Bob hates coffee")
    (_, _, best), _ = general_scores(driver.memory, driver.search_command("alice likes tea", mode="vector"))
    kept = assert_same(driver, driver.search_command("alice likes tea", mode="vector", min_score=best))
    assert len(kept) == 1
    above = float(np.nextafter(best, 2.0))
    assert assert_same(driver, driver.search_command("alice likes tea", mode="vector", min_score=above)) == []


def test_the_default_cut_drops_what_the_general_path_drops() -> None:
    driver = Driver()
    driver.remember("Alice likes tea", "Bob hates coffee", "the park")
    hits = assert_same(driver, driver.search_command("alice tea", mode="vector"))
    assert hits and len(hits) < 3


texts = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
                 min_size=1, max_size=30)


@given(texts, st.data())
@settings(max_examples=80, deadline=None)
def test_vector_hits_equal_the_general_path_over_random_scopes(first: list[str], data: Any) -> None:
    driver = Driver()
    ids = driver.remember(*[driver.new(text, session_id=f"s{i % 2}") for i, text in enumerate(first)])
    gone = data.draw(st.lists(st.sampled_from(ids), max_size=len(ids)), label="forgotten")
    if gone:
        driver.send(Forget(ids=gone, now=driver.tick()))
    more = data.draw(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
                              max_size=10), label="added after")
    if more:
        driver.remember(*[driver.new(text, session_id="s1") for text in more])  # rows reused first
    for _ in range(data.draw(st.integers(1, 4), label="searches")):
        query = " ".join(data.draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), label="query"))
        top_k = data.draw(st.integers(1, 12), label="top_k")
        spec = data.draw(st.sampled_from([None, {"session_id": "s0"}, {"session_id": "s9"}]), label="filter")
        scores = [score for _, _, score in general_scores(
            driver.memory, driver.search_command(query, mode="vector", top_k=top_k, filter=spec))]
        # a cut at a hit's own score keeps it
        cut = data.draw(st.sampled_from([None, -1.0, 0.0, 0.3, 0.9, 1.0, *scores]), label="min_score")
        command = driver.search_command(query, mode="vector", top_k=top_k, min_score=cut, filter=spec)
        assert_same(driver, command)


def test_the_embedder_gives_tied_vectors_to_these_wordings() -> None:
    """(What the tie tests stand on.)"""
    rows = EMBEDDER.embed(["Alice likes tea", "alice likes tea!", "ALICE, likes tea."])
    assert np.array_equal(rows[0], rows[1]) and np.array_equal(rows[0], rows[2])


def test_hits_of_memories_with_several_vectors_equal_the_general_path() -> None:
    """(Ranker.vector_hits reads such a scope through MultiVectorSearch's pairs, not
    the index's arrays.)"""
    rng = np.random.default_rng(3)
    memory = ScopeMemory(KEY, scope_settings())
    rows = rng.standard_normal((40, 3, 4)).astype(np.float32)
    rows[7] = rows[3]  # tied memories: lower doc first
    news = [NewMemory(id=f"m{i:02}", content=f"c{i}", namespace=("docs",), key=f"m{i:02}",
                      vector=encode_vector(rows[i, 0]),
                      vectors=tuple(encode_vector(r) for r in rows[i, 1:i % 3 + 1]))
            for i in range(40)]
    memory.handle(PutMemories(memories=news, forget=[], embedder="test", dim=4, now=100.0))
    search = memory.keyed.vector_search(memory.vectors)
    assert isinstance(search, MultiVectorSearch)
    floor, ceiling = memory.settings.cosine_floor, memory.settings.cosine_ceiling
    s = ranking._SMOOTHING
    for query in rng.standard_normal((8, 4)).astype(np.float32):
        for top_k, cut in ((5, -1.0), (12, 0.5), (40, None)):
            unit = query / np.linalg.norm(query)
            found = search.search(unit, top_k, None)
            cosines = np.array([cosine for _, cosine in found], dtype=np.float64)
            rise = s * (np.logaddexp(0.0, (cosines - floor) / s) - np.logaddexp(0.0, (cosines - ceiling) / s))
            calibrated = np.clip(rise / max(ceiling - floor, 1e-6), 0.0, 1.0).tolist()
            want_cut = memory.settings.vector_min_score if cut is None else cut
            want = [(memory.docs_record(doc).id, round(score, 6), {"vector": round(score, 6),
                                                                    "cosine": round(cosine, 6)})
                    for (doc, cosine), score in zip(found, calibrated, strict=True)
                    if want_cut is None or score >= want_cut]
            reply = memory.handle(Search(query="", vector=encode_vector(unit), embedder="test", dim=4,
                                         top_k=top_k, mode="vector", min_score=cut, now=100.0))
            result = reply.reply if isinstance(reply, Step) else reply
            got = [(hit.memory.id, hit.score, hit.scores) for hit in result.hits]
            assert got == want
            assert bits(got) == bits(want)


def bits(hits: list[tuple[str, float, dict[str, float]]]) -> list[bytes]:
    return [np.float64(value).tobytes() for _, score, signals in hits for value in (score, *signals.values())]
