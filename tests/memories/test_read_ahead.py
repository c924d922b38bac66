"""``ScopeMemory.read_ahead``: hybrid searches about to come get their vectors'
scores from one coarse pass for all of them; each search takes what was made for
it and finds what it would have found alone; a write in between drops it all."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from scope_support import EMBEDDER, Driver

from mnemex.index import _coarse
from mnemex.memories import behaviour
from mnemex.memories.protocol import Forget, Search


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Driver:
    monkeypatch.setattr(_coarse, "MIN_VALUES", 64 * EMBEDDER.dim)  # these memories take the coarse pass
    driver = Driver(expansion=True)
    driver.remember(*[f"Caroline: the pottery class number {i} was fun" for i in range(100)])
    driver.remember(*[f"Melanie: I painted a sunrise at the lake, picture {i}" for i in range(100)])
    return driver


def passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The coarse passes made from now on: how many queries each scored."""
    made: list[int] = []
    real = _coarse.CoarseScan.scan_many

    def counted(self: _coarse.CoarseScan, matrix: Any, high: int, queries: Any) -> Any:
        made.append(len(queries))
        return real(self, matrix, high, queries)

    monkeypatch.setattr(_coarse.CoarseScan, "scan_many", counted)
    return made


def hits(result: Any) -> list[tuple[str, float, dict[str, float]]]:
    return [(hit.memory.id, hit.score, hit.scores) for hit in result.hits]


QUERIES = ["What did Melanie paint?", "Caroline's pottery class", "a sunrise at the lake"]


def test_searches_read_ahead_take_one_pass_and_find_what_they_find_alone(
        driver: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = [hits(driver.search(query, min_score=-1.0)) for query in QUERIES]
    made = passes(monkeypatch)
    commands = [driver.search_command(query, min_score=-1.0) for query in QUERIES]
    memory = driver.memory
    before = memory.live_bytes()
    memory.read_ahead(commands)
    assert made == [len(QUERIES)]
    assert memory.live_bytes() > before  # what it holds counts until it is taken
    assert [hits(driver.send(command)) for command in commands] == alone
    assert made == [len(QUERIES)]  # no search made a pass of its own
    assert memory.live_bytes() == before


def test_a_write_between_drops_what_was_read_ahead(driver: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    commands = [driver.search_command(query, min_score=-1.0) for query in QUERIES]
    driver.memory.read_ahead(commands)
    [new] = driver.remember("Melanie: what did I paint? A sunrise, Melanie painted it")
    made = passes(monkeypatch)
    first = driver.send(commands[0])
    assert made == [1]  # scored afresh, with the new memory
    assert new in [hit.memory.id for hit in first.hits]
    assert hits(first) == hits(driver.send(msgspec.structs.replace(commands[0])))
    driver.send(Forget(ids=[new], now=driver.tick()))
    second = driver.send(commands[1])
    assert new not in [hit.memory.id for hit in second.hits]
    assert hits(second) == hits(driver.send(msgspec.structs.replace(commands[1])))


def test_only_hybrid_searches_of_this_scopes_vectors_are_read_ahead(
        driver: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    made = passes(monkeypatch)
    hybrid = driver.search_command(QUERIES[0])
    others = [driver.search_command(QUERIES[1], mode=mode) for mode in ("vector", "fulltext")]
    foreign = Search(query=QUERIES[2], vector=hybrid.vector, embedder="another-model", dim=hybrid.dim,
                     mode="hybrid", now=driver.now)
    driver.memory.read_ahead([hybrid, *others, foreign])
    assert made == []  # one search alone shares nothing
    driver.memory.read_ahead([hybrid, driver.search_command(QUERIES[2]), *others, foreign])
    assert made == [2]
    with pytest.raises(behaviour.InvalidInput, match="another-model"):
        driver.send(foreign)  # refused as it would be, read ahead or not


def test_a_small_scope_reads_nothing_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = Driver(expansion=True)  # 200 memories of 32 dimensions: below the coarse pass
    driver.remember(*[f"memory {i}" for i in range(200)])
    made = passes(monkeypatch)
    driver.memory.read_ahead([driver.search_command(query) for query in QUERIES])
    assert made == [] and driver.memory._ahead is None


def test_only_the_searches_before_another_command_and_at_most_read_ahead_max_are_prepared(
        driver: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    made = passes(monkeypatch)
    many = [driver.search_command(f"{QUERIES[i % 3]} {i}") for i in range(behaviour.READ_AHEAD_MAX + 4)]
    driver.memory.read_ahead(many)
    assert made == [behaviour.READ_AHEAD_MAX]
    write = Forget(ids=[], now=driver.now)
    driver.memory.read_ahead([many[0], many[1], write, many[2], many[3]])
    assert made[-1] == 2  # what follows the write would be dropped by it


def test_nothing_more_coming_lets_what_was_made_go(driver: Driver) -> None:
    memory = driver.memory
    before = memory.live_bytes()
    commands = [driver.search_command(query) for query in QUERIES]
    memory.read_ahead(commands)
    # the searches' bounds are rows of two arrays made by their one pass: counted once
    rows = len(memory.vectors._rows[: memory.vectors._high])  # type: ignore[union-attr]
    each_alone = rows * (4 + 1)  # its scores (float32) and which are known
    assert memory.live_bytes() - before == 2 * len(QUERIES) * rows * 8 + len(QUERIES) * each_alone
    memory.read_ahead([])
    assert memory._ahead is None and memory.live_bytes() == before
