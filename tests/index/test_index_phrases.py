"""PhraseMatcher and EntityIndex: whole-word, case-insensitive phrase finding."""

from __future__ import annotations

import pytest

from mnemex.errors import InvalidInput, NotFound
from mnemex.index import EntityIndex, PhraseMatcher, normalize_phrase

PHRASES = ["New York", "York", "Caroline", "support group", "LGBTQ support group", "café crème"]


@pytest.mark.parametrize(("text", "expected"), [
    ("I moved to NEW YORK last year", {"new york", "york"}),
    ("new-york, new  york!", {"new york", "york"}),
    ("Yorkshire pudding and newyork", set()),
    ("caroline went to the LGBTQ support group", {"caroline", "lgbtq support group", "support group"}),
    ("Un CAFÉ CRÈME, s'il vous plaît", {"café crème"}),
    ("", set()),
])
def test_find_reports_registered_phrases_as_whole_words(text: str, expected: set[str]) -> None:
    assert PhraseMatcher(PHRASES).find(text) == expected


def test_adds_are_counted_and_the_automaton_follows_changes() -> None:
    matcher = PhraseMatcher()
    assert matcher.find("anything") == set()
    assert matcher.add("Melanie") == "melanie"
    matcher.add("melanie")
    assert matcher.find("Melanie paints") == {"melanie"}
    matcher.remove("MELANIE")
    assert matcher.find("Melanie paints") == {"melanie"}
    matcher.remove("melanie")
    assert matcher.find("Melanie paints") == set()
    matcher.remove("never added")
    matcher.add("paints")
    assert matcher.find("Melanie paints") == {"paints"}
    assert "Paints" in matcher and len(matcher) == 1 and matcher.phrases() == ["paints"]


@pytest.mark.parametrize("bad", ["", "   ", "!!!", 42])
def test_a_phrase_without_words_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInput):
        PhraseMatcher().add(bad)  # type: ignore[arg-type]


def test_normalize_phrase_joins_casefolded_words() -> None:
    assert normalize_phrase("  The   Big-Apple ") == "the big apple"


def test_entity_index_ranks_docs_by_entities_named_in_the_query() -> None:
    entities = EntityIndex()
    entities.add(1, ["Caroline", "Sweden"])
    entities.add(2, ["Caroline"])
    entities.add(3, ["Melanie", "Sweden"])
    entities.add(4, [])
    assert entities.find("Did Caroline move from Sweden?") == {"caroline", "sweden"}
    assert entities.search("Did Caroline move from Sweden?") == [(1, 2), (2, 1), (3, 1)]
    assert entities.search("Did Caroline move from Sweden?", top_k=1) == [(1, 2)]
    assert entities.search("Caroline and Sweden", allowed={2, 3}) == [(2, 1), (3, 1)]
    entities.update(1, ["Melanie"])
    assert entities.search("Caroline") == [(2, 1)]
    entities.remove(2)
    assert entities.search("Caroline") == []
    assert entities.entities() == ["melanie", "sweden"]
    assert len(entities) == 3


def test_entity_index_refuses_bad_changes_without_changing() -> None:
    entities = EntityIndex()
    entities.add(1, ["Caroline"])
    with pytest.raises(InvalidInput):
        entities.add(1, ["x"])
    with pytest.raises(InvalidInput):
        entities.add(2, ["ok", "!!"])
    with pytest.raises(NotFound):
        entities.remove(2)
    assert 2 not in entities
    assert entities.entities() == ["caroline"]
