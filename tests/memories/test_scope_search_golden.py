"""Hybrid search with the entity graph's expansion against the hits the ranking
gave before it was made faster (tests/fixtures/search-golden.json, written by the
ranking of commit 62e120b with ``python tests/memories/test_scope_search_golden.py``):
the same memories in the same order, every score and signal within float32 rounding.
A change of ranking on purpose rewrites the fixture and says so. The same searches
run beside the actor (``ScopeMemory.search_beside``), four at a time in threads as
the kernel runs them, or read ahead all at once (``ScopeMemory.read_ahead``, as the
server's batches of searches are) give the same hits."""

from __future__ import annotations

import json
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from scope_support import Driver

from mnemex.index import _coarse
from mnemex.memories import behaviour, ranking
from mnemex.memories.protocol import Forget

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "search-golden.json"
SPEAKERS = ["Caroline", "Melanie", "Jon", "Gina"]
TOPICS = ["hiking in the mountains", "the pottery class", "a support group", "painting the sunrise",
          "the dance studio", "adopting a dog", "the camping trip", "a charity race", "the new job",
          "a concert last weekend", "the family beach day", "a book about courage"]
QUERIES = ["What did Melanie paint?", "Where did Mel go camping?", "When did Caroline join the support group?",
           "What is Jon doing with the dance studio?", "Who ran the charity race?", "Gina's new job",
           "pottery", "What book did Caroline read?", "Did Melanie and Caroline talk about dogs?",
           "the concert last weekend", "What does Mel like about the beach?", "hiking with the kids"]


def corpus() -> list[tuple[str, str]]:
    """(content, session) of 300 turns: speakers talk of topics, sometimes naming
    each other (Melanie also as Mel)."""
    rng = random.Random(11)
    turns = []
    for i in range(300):
        speaker, other = rng.sample(SPEAKERS, 2)
        addressed = "Mel" if other == "Melanie" and rng.random() < 0.5 else other
        topic, second = rng.sample(TOPICS, 2)
        text = rng.choice([f"{addressed}, I loved {topic}!", f"I keep thinking about {topic} and {second}.",
                           f"{addressed} told me about {topic} yesterday.", f"How was {topic}, {addressed}?"])
        turns.append((f"{speaker}: {text} (turn {i})", f"session-{i // 20}"))
    return turns


def searches(how: str = "in-turn") -> list[list[Any]]:
    """Each search's hits as [content, score, signals], after the corpus is stored,
    filtered, and after some memories are forgotten; ``how``: ``in-turn`` (one by
    one), ``beside`` (each set of queries planned in the actor's turn and ranked four
    at a time in threads), ``ahead`` (each set read ahead, then asked one by one) or
    ``graph`` (one by one, over an HNSW graph built as the memories come)."""
    graph = how == "graph"
    driver = Driver(expansion=True, fusion_candidates=30, **({"hnsw_threshold": 50} if graph else {}))
    ids = [driver.remember(content, session_id=session)[0] for content, session in corpus()]
    if graph:
        driver.run_jobs()
        assert driver.memory.vectors is not None and driver.memory.vectors.mode == "hnsw"
    out: list[list[Any]] = []

    def run(**options: Any) -> None:
        if how == "beside":
            plans = [driver.memory.search_beside(driver.search_command(query, top_k=10, min_score=-1.0,
                                                                      **options))
                     for query in QUERIES]
            assert all(plan is not None and not plan.effects for plan in plans)
            with ThreadPoolExecutor(4) as pool:
                results = list(pool.map(lambda plan: plan.run(), plans))  # type: ignore[union-attr]
        elif how == "ahead":
            commands = [driver.search_command(query, top_k=10, min_score=-1.0, **options)
                        for query in QUERIES]
            driver.memory.read_ahead(commands)
            results = [driver.send(command) for command in commands]
        else:
            results = [driver.search(query, top_k=10, min_score=-1.0, **options) for query in QUERIES]
        for result in results:
            out.append([[hit.memory.content, hit.score, hit.scores, list(hit.found_by)]
                        for hit in result.hits])

    run()
    run(filter={"session_id": "session-3"})
    driver.send(Forget(ids=ids[::7], now=driver.tick()))
    driver.run_jobs()
    run()
    return out


@pytest.mark.parametrize("how", ["in-turn", "beside", "ahead", "graph"])
def test_hybrid_hits_are_those_of_the_ranking_before(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "beside":
        monkeypatch.setattr(behaviour, "BESIDE_MIN_MEMORIES", 0)  # 300 memories: beside too
    elif how == "ahead":  # only a coarse pass reads ahead: these 300 memories take it
        monkeypatch.setattr(_coarse, "MIN_VALUES", 64 * 48)
    expected = json.loads(FIXTURE.read_text())
    got = searches(how)
    assert len(got) == len(expected)
    for index, (hits, wanted) in enumerate(zip(got, expected, strict=True)):
        assert [h[0] for h in hits] == [w[0] for w in wanted], (index, QUERIES[index % len(QUERIES)])
        for hit, want in zip(hits, wanted, strict=True):
            assert hit[1] == pytest.approx(want[1], abs=2e-6)
            assert hit[3] == want[3] and set(hit[2]) == set(want[2])
            assert hit[2] == pytest.approx(want[2], abs=2e-6)


def test_over_a_graph_many_named_memories_are_read_by_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """An HNSW scope's hybrid searches that name entities of more memories than
    ``ranking.NAMED_GATHERED`` read them by rounds (every query here names a speaker of
    a quarter or more of the memories, or none): the same hits as gathering each named
    memory's row."""
    rounds: list[int] = []
    by_rounds = ranking._reaching_over_graph

    def counted(docs: Any, *args: Any, **options: Any) -> Any:
        rounds.append(len(docs))
        return by_rounds(docs, *args, **options)

    monkeypatch.setattr(ranking, "_reaching_over_graph", counted)
    gathered = searches("graph")  # (300 memories: fewer than NAMED_GATHERED, each gathered)
    assert not rounds
    monkeypatch.setattr(ranking, "NAMED_GATHERED", 0)
    read = searches("graph")
    assert rounds
    assert len(read) == len(gathered)
    for hits, wanted in zip(read, gathered, strict=True):
        assert [h[0] for h in hits] == [w[0] for w in wanted]
        for hit, want in zip(hits, wanted, strict=True):
            assert hit[1] == pytest.approx(want[1], abs=2e-6) and hit[3] == want[3]
            assert hit[2] == pytest.approx(want[2], abs=2e-6)


if __name__ == "__main__":  # writes the fixture from the ranking this runs on
    FIXTURE.write_text(json.dumps(searches(), indent=None, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}", file=sys.stderr)
