"""A memory's full-text terms are found once (issue 17): classifying a Remember's
memories keeps the terms and positions, and BM25 indexing reads them. What a scope
holds must be what reading them twice built: the live path (kept terms) against a
replay (which keeps none), on records, categories and every search."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from scope_support import EMBEDDER, KEY, Driver

from mnemex.memories.behaviour import ScopeMemory, scope_codec
from mnemex.memories.protocol import Remember

TEXTS = ["I love hiking near the lake at sunrise", "Our dog loves the lake too", "the and of",
         "Caroline's café in Paris serves tea", "LGBTQ+ support group on Fridays", "Ich trinke gern Tee",
         "東京で友達に会った", "Painting classes with the kids", "Running, runner, runs: ran!", "a"]
QUERIES = ["lake", "tea café", "painting kids", "run", "東京", '"support group"', "dog lake sunrise"]


def _searches(memory: ScopeMemory) -> list[Any]:
    driver = Driver(memory)
    driver.now = 10_000.0
    return [[(hit.memory.id, hit.score) for hit in driver.search(query, mode, top_k=20, min_score=-1.0).hits]
            for query in QUERIES for mode in ("fulltext", "hybrid")]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(TEXTS), st.booleans()), min_size=1, max_size=6),
                min_size=1, max_size=5))
def test_terms_found_once_build_what_finding_them_twice_builds(batches: list[list[tuple[str, bool]]]) -> None:
    driver = Driver()
    journal = []
    for batch in batches:
        memories = [driver.new(text, **({"categories": ["hobbies"]} if own else {})) for text, own in batch]
        command = Remember(memories=memories, embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=driver.tick(),
                           classify=True)
        driver.send(command)
        journal.append(scope_codec.encode(command))
    live = driver.memory
    assert live._analysed == {}  # read and emptied by the indexing
    replayed = ScopeMemory(KEY, live.settings)
    replayed.replay(scope_codec.decode(payload) for payload in journal)
    assert list(replayed.records()) == list(live.records())
    assert [(r.categories, r.category_confidences) for r in live.records()] == \
        [(r.categories, r.category_confidences) for r in replayed.records()]
    assert _searches(replayed) == _searches(live)
