"""What one hybrid search shares with the next (memories.ranking.RankCache: the
query expansion's term scores, kept until the scope's full-text index changes) gives
the hits a search computing everything afresh gives, across writes, forgets and
filters; the cache stays within its bounds."""

from __future__ import annotations

import gc
import weakref

import numpy as np
from scope_support import Driver

from mnemex.index import BM25Index, VectorIndex
from mnemex.knowledge.graph import Expansion
from mnemex.memories.protocol import Forget
from mnemex.memories.ranking import RankCache

TURNS = [
    "Melanie: I went hiking with the kids in the mountains.",
    "Caroline: Mel, that sounds wonderful! Where did you go?",
    "Melanie: We camped by the lake and painted the sunrise.",
    "Caroline: I joined a support group at the LGBTQ center.",
    "Mel: the kids loved the pottery class too.",
    "Caroline: Oliver the cat knocked over my paints again.",
    "Jon: the dance studio opens next month.",
]
QUERIES = ["What did Melanie paint?", "Where did Mel go camping?", "What does Caroline do at the center?",
           "pottery with the kids", "the dance studio"]


def hits(driver: Driver, query: str, **options: object) -> list[tuple[str, float, dict[str, float]]]:
    return [(h.memory.id, h.score, h.scores) for h in driver.search(query, **options).hits]  # type: ignore[arg-type]


def assert_fresh_agrees(driver: Driver, **options: object) -> None:
    """Each query's hits with the scope's cache as it stands equal those of an empty cache."""
    for query in QUERIES:
        warm = hits(driver, query, **options)
        kept = driver.memory.rank_cache
        driver.memory.rank_cache = RankCache()
        try:
            assert hits(driver, query, **options) == warm, query
        finally:
            driver.memory.rank_cache = kept


def test_a_kept_expansion_gives_the_hits_of_a_fresh_one_across_writes_and_filters() -> None:
    driver = Driver(expansion=True)
    ids = driver.remember(*TURNS)
    for query in QUERIES:  # fill the cache
        driver.search(query)
    assert driver.memory.rank_cache.nbytes > 0  # the queries name entities with aliases: kept
    assert_fresh_agrees(driver)
    # new memories hold the expansion's terms: kept scores from before would miss them
    driver.remember("Mel painted the lake at dawn.", "Caroline: Melanie, your painting is lovely!",
                    session_id="s2")
    assert_fresh_agrees(driver)
    result = driver.search("What did Melanie paint?", top_k=20, min_score=-1)
    found = {h.memory.content: h for h in result.hits}
    assert found["Mel painted the lake at dawn."].scores["expansion"] > 0  # "mel", an alias: a new match
    driver.send(Forget(ids=[ids[2], ids[4]], now=driver.tick()))
    assert_fresh_agrees(driver)
    assert_fresh_agrees(driver, filter={"session_id": "s2"})
    # a filter hides memories; it changes no expansion score of those it lets through
    for query in QUERIES:
        everything = {h.memory.id: h.scores["expansion"] for h in
                      driver.search(query, top_k=20, min_score=-1).hits}
        filtered = driver.search(query, top_k=20, min_score=-1, filter={"session_id": "s2"}).hits
        assert {h.memory.session_id for h in filtered} <= {"s2"}
        for hit in filtered:
            assert hit.scores["expansion"] == everything[hit.memory.id], query


def test_the_cache_keeps_the_most_recently_used_within_its_bounds() -> None:
    bm25 = BM25Index()
    bm25.add(0, "a sunrise over the lake")
    computed: list[str] = []

    def compute(key: object) -> np.ndarray:
        computed.append(str(key))
        return np.full(1000, len(computed), dtype=np.float64)

    cache = RankCache(limit=2, max_bytes=100_000)
    first = cache.expanded(bm25, "a", compute)
    assert not first.flags.writeable  # shared between searches: read-only
    cache.expanded(bm25, "b", compute)
    cache.expanded(bm25, "a", compute)  # a hit: "a" is now the most recently used
    cache.expanded(bm25, "c", compute)  # over the limit: "b" goes
    assert computed == ["a", "b", "c"] and cache.nbytes == 16_000
    cache.expanded(bm25, "a", compute)
    cache.expanded(bm25, "b", compute)
    assert computed == ["a", "b", "c", "b"]
    small = RankCache(limit=8, max_bytes=12_000)  # bytes bound: one array of 8,000 fits
    small.expanded(bm25, "a", compute)
    small.expanded(bm25, "b", compute)
    assert small.nbytes == 8_000
    bm25.add(1, "the kids")  # the index changed: nothing kept holds
    small.expanded(bm25, "b", compute)
    assert computed[-1] == "b" and len(computed) == 7
    other = BM25Index()  # another index (a scope's rebuilt) at the same count of changes
    for doc in range(2, 100):
        if other.changes == bm25.changes:
            break
        (other if other.changes < bm25.changes else bm25).add(doc, "the lake")
    assert other.changes == bm25.changes
    small.expanded(bm25, "b", compute)
    count = len(computed)
    small.expanded(other, "b", compute)
    assert len(computed) == count + 1


def test_an_expansions_entries_last_as_long_as_the_expansion_and_within_bounds() -> None:
    # what the cache keeps per expansion must not keep the expansion (and its arrays of
    # memories) alive once the entity graph let it go: 32 kept here held 108 MB in a
    # scope of 300,000 memories
    bm25 = BM25Index()
    bm25.add(0, "a sunrise over the lake")
    index = VectorIndex(4)
    index.add(3, np.eye(4, dtype=np.float32)[0])
    made: list[int] = []

    def expansion(first: int, size: int) -> Expansion:
        return Expansion(("e",), (), (), np.arange(first, first + size, dtype=np.int64))

    def centroid(key: tuple[Expansion, object]) -> np.ndarray:
        made.append(len(key[0].docs))
        return np.ones(4, dtype=np.float32)

    cache = RankCache(limit=3, max_bytes=8 * 1000)
    one = expansion(0, 500)
    cache.centroid(bm25, one, index, centroid)
    cache.centroid(bm25, one, index, centroid)
    assert made == [500]  # kept
    alive = weakref.ref(one)
    del one
    gc.collect()
    assert alive() is None  # the cache did not keep it
    two = expansion(0, 500)  # equal, another object (it may even reuse the id)
    cache.centroid(bm25, two, index, centroid)
    assert made == [500, 500]  # the entries of the one gone are not read, and are dropped
    assert len(cache._centroids) == 1
    # bounds: at most ``limit`` expansions, the least recently used going first
    kept = [expansion(1000 * i, 300) for i in range(4)]
    for each in kept:
        cache.centroid(bm25, each, index, centroid)
    assert list(cache._centroids) == [id(each) for each in kept[1:]]
    bm25.add(1, "the kids")  # the index changed: nothing kept holds
    cache.centroid(bm25, kept[3], index, centroid)
    assert list(cache._centroids) == [id(kept[3])] and made == [500, 500, 300, 300, 300, 300, 300]
