"""A scope's searches in every language: keyword, full-text and hybrid search find
words in text written without spaces, and accents are folded as
``config.memories.fold_accents`` says; a restart from text-index sidecars of
another tokenization (a data directory written before it changed, or other
settings) rebuilds the indexes from the records instead of trusting them."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import trio
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scope_support import KEY, Driver, snapshot_image

import mnemex
from mnemex.effects import Image
from mnemex.index import words
from mnemex.memories.behaviour import ScopeMemory

FIXTURE = Path(__file__).parents[1] / "fixtures" / "datadir-tok1"

MEMORIES = [
    "私の名前は太郎です",
    "私はPythonでADKを使っています",
    "我住在北京\uff0c在一家银行工作。",
    "서울에서 소프트웨어 개발자로 일해요",
    "ผมชอบกินข้าวผัดกับไก่",
    "Café crème with Zoë",
    "I write Java at a bank",
    "猫が好きです",
]

FOUND = [
    ("太郎", MEMORIES[0]),
    ("Python", MEMORIES[1]),
    ("ADK", MEMORIES[1]),
    ("北京", MEMORIES[2]),
    ("银行", MEMORIES[2]),
    ("서울", MEMORIES[3]),
    ("ข้าวผัด", MEMORIES[4]),
    ("猫", MEMORIES[7]),
    ("cafe creme", MEMORIES[5]),
    ("ZOE", MEMORIES[5]),
    ("\uff2a\uff41\uff56\uff41", MEMORIES[6]),   # full-width "Java"
    ('"名前は太郎"', MEMORIES[0]),
]


def stored(**overrides: object) -> Driver:
    driver = Driver(**overrides)
    driver.remember(*MEMORIES)
    return driver


def modes_of(query: str) -> list[str]:
    """The modes that can run *query* (keyword search has no quoted phrases)."""
    return ["fulltext", "hybrid"] if query.startswith('"') else ["keyword", "fulltext", "hybrid"]


@pytest.mark.parametrize(("mode", "query", "expected"),
                         [(mode, query, expected) for query, expected in FOUND for mode in modes_of(query)])
def test_every_mode_finds_words_of_every_script(mode: str, query: str, expected: str) -> None:
    hits = stored().search(query, mode).hits
    assert hits and hits[0].memory.content == expected


def test_a_keyword_query_matching_all_its_words_scores_one() -> None:
    driver = stored()
    for query in ("太郎", "私はPython", "café CAFE cafe"):
        assert driver.search(query, "keyword").hits[0].score == 1.0


def test_accents_are_folded_by_default_and_kept_when_configured() -> None:
    assert mnemex.Config().memories.fold_accents is True
    kept = stored(fold_accents=False)
    for mode in ("keyword", "fulltext"):
        assert kept.search("cafe", mode).hits == []
        assert [h.memory.content for h in kept.search("Café", mode).hits] == [MEMORIES[5]]


def test_stemming_takes_a_language_from_the_config() -> None:
    pytest.importorskip("snowballstemmer")
    assert mnemex.Config(fulltext_stem="french").memories.fulltext_stem == "french"
    with pytest.raises(mnemex.InvalidInput, match="fulltext_stem"):
        mnemex.Config(fulltext_stem="klingon")
    driver = Driver(fulltext_stem="french")
    driver.remember("Les éléphants étaient élégants")
    assert driver.search("elephant", "fulltext").hits


@settings(max_examples=150, deadline=None)
@given(text=st.text(min_size=1, max_size=30) | st.lists(
    st.sampled_from(["太郎", "です", "Python", "서울", "ข้าว", "Café", "\uff21\uff22", "the", "猫", "'s"]),
    min_size=1, max_size=5).map("".join))
def test_a_query_equal_to_a_memory_finds_it(text: str) -> None:
    text = text.replace('"', " ")
    assume(words(text) and text.strip() == text)
    driver = Driver()
    driver.remember(text)
    keyword = driver.search(text, "keyword").hits
    assert [h.memory.content for h in keyword] == [text] and keyword[0].score == 1.0
    fulltext = driver.search(text, "fulltext").hits
    has_terms = bool(driver.memory.bm25.tokenizer.query_tokens(text))   # (not all stop words)
    assert [h.memory.content for h in fulltext] == ([text] if has_terms else [])


# -- restarts over sidecars of another tokenization ----------------------------------------------
def test_sidecars_of_other_settings_are_not_trusted_and_the_indexes_are_rebuilt(
        caplog: pytest.LogCaptureFixture) -> None:
    driver = stored()   # accents folded
    image = snapshot_image(driver.memory)
    with caplog.at_level(logging.INFO, logger="mnemex.memories"):
        same = ScopeMemory.restore(KEY, image, driver.memory.settings)
    assert not [r for r in caplog.records if "sidecars not used" in r.getMessage()]
    assert [h.memory.content for h in Driver(same).search("cafe", "keyword").hits] == [MEMORIES[5]]

    kept = Driver(fold_accents=False).memory.settings
    with caplog.at_level(logging.INFO, logger="mnemex.memories"):
        other = ScopeMemory.restore(KEY, Image(image.records, image.extra, image.sidecars), kept)
    assert [r for r in caplog.records if "stale" in r.getMessage() and "rebuilding" in r.getMessage()]
    restarted = Driver(other)
    for mode in ("keyword", "fulltext"):
        assert restarted.search("cafe", mode).hits == []
        assert [h.memory.content for h in restarted.search("猫", mode).hits] == [MEMORIES[7]]


@pytest.fixture
def old_data_dir(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(FIXTURE / "data", target)
    return target


async def search_all(data_dir: Path, queries: list[str]) -> dict[str, list[str]]:
    config = mnemex.Config(data_dir=str(data_dir), embedder="hashing")
    async with mnemex.open_runtime(config) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        assert await scope.count() == len(MEMORIES)
        found: dict[str, list[str]] = {}
        for query in queries:
            for mode in ("keyword", "fulltext", "hybrid"):
                result = await scope.search(query, mode=mode)
                found[f"{mode}|{query}"] = [h.memory.content for h in result.hits[:1]]
        return found


def test_a_data_directory_of_the_first_tokenization_is_reindexed_on_open(
        old_data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    queries = [query for query, _ in FOUND]
    with caplog.at_level(logging.INFO, logger="mnemex.memories"):
        found = trio.run(search_all, old_data_dir, queries)
    stale = [r.getMessage() for r in caplog.records if "sidecars not used" in r.getMessage()]
    assert stale and all("stale" in message and "words1" in message for message in stale)
    for query, expected in FOUND:
        for mode in modes_of(query):
            assert found[f"{mode}|{query}"] == [expected], (mode, query)
    # and the next start reads the sidecars written since (by today's tokenization)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mnemex.memories"):
        again = trio.run(search_all, old_data_dir, queries)
    assert again == found
    assert not [r for r in caplog.records if "sidecars not used" in r.getMessage()]
