"""The tolerant parser against a corpus of what models really answer: every odd
answer gives exactly the facts it holds or an ExtractionError(malformed) saying
what is wrong, never another exception; "nothing to extract" stays an empty list
and never an error."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemex.errors import ExtractionError
from mnemex.knowledge.facts import ExtractedFact
from mnemex.knowledge.parse import parse_facts

OFFERED = frozenset({1, 2, 3})
POSITIONS = frozenset({4, 5, 6})


def parse(text: str, finish_reason: str | None = None) -> list[ExtractedFact]:
    return parse_facts(text, offered_numbers=OFFERED, positions=POSITIONS, finish_reason=finish_reason)


def fact(content: str, **fields: Any) -> ExtractedFact:
    return ExtractedFact(content=content, **fields)


BERLIN = '{"facts": [{"content": "The user lives in Berlin.", "entities": ["Berlin"], "messages": [4]}]}'
LIVES_IN_BERLIN = [fact("The user lives in Berlin.", entities=("Berlin",), messages=(4,))]

# (name, answer, finish_reason, the facts it holds)
GOOD: list[tuple[str, str, str | None, list[ExtractedFact]]] = [
    ("plain", BERLIN, "stop", LIVES_IN_BERLIN),
    ("nothing to extract", '{"facts": []}', "stop", []),
    ("facts null", '{"facts": null}', None, []),
    ("code fence", f"```json\n{BERLIN}\n```", None, LIVES_IN_BERLIN),
    ("bare code fence in prose", f"Here you go:\n```\n{BERLIN}\n```\nAnything else?", None, LIVES_IN_BERLIN),
    ("prose before and after", f"Sure! The facts are: {BERLIN} Hope this helps.", None, LIVES_IN_BERLIN),
    ("a number in brackets in the prose first", f"From message [4]: {BERLIN}", None, LIVES_IN_BERLIN),
    ("think block with a decoy", '<think>maybe {"facts": [{"content": "decoy"}]}</think>\n' + BERLIN, None,
     LIVES_IN_BERLIN),
    ("only the end of a think block", 'the user said Berlin {"facts": ["decoy"]}</think>' + BERLIN, None,
     LIVES_IN_BERLIN),
    ("trailing commas", '{"facts": [{"content": "The user lives in Berlin.", "entities": ["Berlin",], '
                        '"messages": [4,],},],}', None, LIVES_IN_BERLIN),
    ("a comma inside a string is kept", '{"facts": [{"content": "The user likes tea, ]not coffee",},]}', None,
     [fact("The user likes tea, ]not coffee")]),
    ("bare list", '[{"content": "The user lives in Berlin.", "entities": ["Berlin"], "messages": [4]}]', None,
     LIVES_IN_BERLIN),
    ("one fact object alone", '{"content": "The user lives in Berlin.", "entities": "Berlin", "messages": 4}',
     None, LIVES_IN_BERLIN),
    ("facts as strings", '{"facts": ["The user likes tea.", "  ", "The user has a cat named Tom."]}', None,
     [fact("The user likes tea."), fact("The user has a cat named Tom.")]),
    ("numbers as strings",
     '{"facts": [{"content": "c", "importance": "0.8", "relation": "updates", "target": "2", '
     '"messages": ["5", "#4"], "categories": ["personal"], "confidences": ["0.9"]}]}', None,
     [fact("c", importance=0.8, relation="updates", target=2, messages=(4, 5), categories=("personal",),
           confidences=(0.9,))]),
    ("scores out of range are clamped",
     '{"facts": [{"content": "a", "importance": 7, "categories": ["x", "y"], "confidences": [1.5, -2]}, '
     '{"content": "b", "importance": -1}, {"content": "c", "importance": "high"}]}', None,
     [fact("a", importance=1.0, categories=("x", "y"), confidences=(1.0, 0.0)), fact("b", importance=0.0),
      fact("c")]),
    ("unknown relation dropped, target too",
     '{"facts": [{"content": "a", "relation": "related", "target": 1}, '
     '{"content": "b", "relation": "NONE"}]}', None, [fact("a"), fact("b")]),
    ("relation synonyms", '{"facts": [{"content": "a", "relation": "Update", "target": 3}, '
                          '{"content": "b", "relation": "duplicates", "target": "[1]"}]}', None,
     [fact("a", relation="updates", target=3), fact("b", relation="duplicate", target=1)]),
    ("a target not offered drops the relation, keeps the fact",
     '{"facts": [{"content": "a", "relation": "duplicate", "target": 9}, '
     '{"content": "b", "relation": "extends", "target": null}, {"content": "c", "target": 2}]}', None,
     [fact("a"), fact("b"), fact("c")]),
    ("messages not shown are dropped",
     '{"facts": [{"content": "a", "messages": [99, 6, 6, "x", 4.0, true]}]}', None,
     [fact("a", messages=(4, 6))]),
    ("empty content dropped", '{"facts": [{"content": ""}, {"content": "  \\n "}, {"content": " The  user\\n'
                              'rows. "}]}', None, [fact("The user rows.")]),
    ("other content keys", '{"facts": [{"fact": "a"}, {"text": "b"}, {"name": "no content"}]}', None,
     [fact("a"), fact("b")]),
    ("valid_at in its forms",
     '{"facts": [{"content": "a", "valid_at": "2024-05-01T12:00:00Z"}, {"content": "b", "valid_at": '
     '"2024-05-01"}, {"content": "c", "valid_at": 1714564800}, {"content": "d", "valid_at": "yesterday"}, '
     '{"content": "e", "valid_at": "2024"}, {"content": "f", "valid_at": "1714564800"}, '
     '{"content": "g", "valid_at": 1714564800000}, {"content": "h", "valid_at": "2024-13-45"}, '
     '{"content": "i", "valid_at": "2024-05-01T14:00:00+02:00"}]}', None,
     [fact("a", valid_at=1714564800.0), fact("b", valid_at=1714521600.0), fact("c", valid_at=1714564800.0),
      fact("d"), fact("e", valid_at=1704067200.0), fact("f", valid_at=1714564800.0),
      fact("g", valid_at=1714564800.0), fact("h"), fact("i", valid_at=1714564800.0)]),
    ("categories and confidences of different lengths",
     '{"facts": [{"content": "a", "categories": ["x", "y", "z"], "confidences": [0.9]}, '
     '{"content": "b", "categories": ["x"], "confidences": [0.7, 0.2]}, '
     '{"content": "c", "categories": "x", "confidence": 0.6}, '
     '{"content": "d", "categories": {"x": 0.3, "y": "0.4"}}, '
     '{"content": "e", "categories": [{"name": "x", "confidence": 0.1}, "X"]}]}', None,
     [fact("a", categories=("x", "y", "z"), confidences=(0.9, 0.5, 0.5)),
      fact("b", categories=("x",), confidences=(0.7,)),
      fact("c", categories=("x",), confidences=(0.6,)),
      fact("d", categories=("x", "y"), confidences=(0.3, 0.4)),
      fact("e", categories=("x",), confidences=(0.1,))]),
    ("entities de-duplicated", '{"facts": [{"content": "a", "entities": ["Anna", "anna", " Anna ", "Bo", '
                               '{"name": "Carl"}, 3, ""]}]}', None,
     [fact("a", entities=("Anna", "Bo", "Carl"))]),
    ("kind and attribution", '{"facts": [{"content": "a", "kind": " Preference ", "attributed_to": "Anna"}, '
                             '{"content": "b", "kind": 3, "attributed_to": " "}]}', None,
     [fact("a", kind="preference", attributed_to="Anna"), fact("b")]),
    ("a Facts key in another case", '{"Facts": ["a"]}', None, [fact("a")]),
    ("items that are no fact beside one that is", '{"facts": [1, null, ["x"], "a"]}', None, [fact("a")]),
    ("complete JSON at the token limit is kept", BERLIN, "length", LIVES_IN_BERLIN),
    ("numbers past every bound", '{"facts": [{"content": "a", "importance": 1' + "0" * 400 + ', "target": "1'
     + "0" * 5000 + '", "relation": "extends", "messages": [1' + "0" * 400 + ', 5], "valid_at": 1' + "0" * 400
     + ', "confidences": ["1e999"], "categories": ["x"]}]}', None,
     [fact("a", messages=(5,), categories=("x",), confidences=(0.5,))]),
]


@pytest.mark.parametrize(("answer", "finish_reason", "expected"), [case[1:] for case in GOOD],
                         ids=[case[0] for case in GOOD])
def test_an_odd_answer_gives_exactly_the_facts_it_holds(answer: str, finish_reason: str | None,
                                                         expected: list[ExtractedFact]) -> None:
    assert parse(answer, finish_reason) == expected


# (name, answer, finish_reason, what the error says)
BAD: list[tuple[str, str, str | None, str]] = [
    ("empty", "", "stop", "the answer is empty"),
    ("blank", " \n\t ", None, "the answer is empty"),
    ("only an unclosed think block", '<think>The user lives in {"facts": [', "length",
     "only an unfinished <think> block"),
    ("prose without JSON", "I could not find any facts worth remembering.", None, "holds no JSON object"),
    ("truncated at the token limit",
     '{"facts": [{"content": "The user lives in Berlin."}, {"content": "The us', "length", "never closes"),
    ("truncated inside a fence", '```json\n{"facts": [{"content": "a"}, {"content": "b"}', "length",
     "never closes"),
    ("the schema echoed back",
     '{"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]}', None,
     "echoes the JSON schema"),
    ("the schema echoed with $schema", '{"$schema": "http://json-schema.org/draft-07/schema#"}', None,
     "echoes the JSON schema"),
    ("no facts key", '{"result": "The user lives in Berlin.", "status": "ok"}', None,
     'no "facts" key (its keys: result, status)'),
    ("an empty object", "{}", None, 'an empty object, without "facts"'),
    ("facts not a list", '{"facts": 3}', None, '"facts" is \'3\', not a list'),
    ("items none of which is a fact", '{"facts": [1, 2, {"name": "Berlin"}]}', None,
     'none of the 3 items of "facts" is a fact'),
    ("a list of no facts", "[1, 2, 3]", None, "a JSON array of no facts"),
    ("a JSON string", '"The user lives in Berlin."', None, "not an object"),
    ("broken JSON", '{"facts": [{"content": "a" "importance": 1}]}', None, "does not parse"),
    ("single quotes", "{'facts': []}", None, "does not parse"),
]


@pytest.mark.parametrize(("answer", "finish_reason", "says"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_an_unusable_answer_raises_malformed_saying_why(answer: str, finish_reason: str | None,
                                                        says: str) -> None:
    with pytest.raises(ExtractionError) as error:
        parse(answer, finish_reason)
    assert error.value.reason == "malformed"
    assert says in str(error.value)
    assert ("cut off at the token limit" in str(error.value)) == (finish_reason == "length")


def test_the_corpus_is_large_enough() -> None:
    assert len(GOOD) + len(BAD) >= 12 and len(BAD) >= 12


def test_nothing_to_extract_is_an_empty_list_and_a_failure_is_an_error() -> None:
    assert parse('{"facts": []}') == []
    assert parse("```json\n{\"facts\": []}\n```") == []
    with pytest.raises(ExtractionError):
        parse("")
    with pytest.raises(ExtractionError):
        parse('{"facts": [')


def test_a_truncated_answer_never_gives_the_pieces_it_did_finish() -> None:
    # the first fact closed before the cut; taking it would hide that the rest is lost
    with pytest.raises(ExtractionError, match="never closes"):
        parse('{"facts": [{"content": "a", "messages": [4]}, {"content": "b", "mess', "length")


def test_an_unpaired_bracket_in_prose_does_not_hide_the_answer() -> None:
    assert parse('Facts [see below: ' + BERLIN) == LIVES_IN_BERLIN


def check_invariants(facts: list[ExtractedFact]) -> None:
    for found in facts:
        assert found.content.strip() == found.content and found.content
        assert 0.0 <= found.importance <= 1.0
        assert len(found.categories) == len(found.confidences)
        assert all(0.0 <= c <= 1.0 for c in found.confidences)
        assert (found.relation is None) == (found.target is None)
        assert found.target is None or found.target in OFFERED
        assert set(found.messages) <= POSITIONS and list(found.messages) == sorted(set(found.messages))
        assert len({e.casefold() for e in found.entities}) == len(found.entities)
        assert found.valid_at is None or math.isfinite(found.valid_at)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**500), max_value=10**500)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["facts", "content", "importance", "target", "relation", "messages", "categories",
                         "confidences", "entities", "valid_at", "kind", "x"]), inner, max_size=6),
    max_leaves=20)


@given(json_values, st.text(max_size=30), st.text(max_size=30), st.sampled_from([None, "stop", "length"]))
def test_no_answer_crashes_the_parser(value: Any, before: str, after: str, finish_reason: str | None) -> None:
    text = f"{before}{json.dumps(value)}{after}"
    try:
        facts = parse(text, finish_reason)
    except ExtractionError as error:
        assert error.reason == "malformed"
    else:
        check_invariants(facts)


@given(st.text(max_size=200))
def test_no_text_crashes_the_parser(text: str) -> None:
    try:
        check_invariants(parse(text))
    except ExtractionError as error:
        assert error.reason == "malformed"


def test_typed_relations_are_read_normalised_and_their_ends_become_entities() -> None:
    text = json.dumps({"facts": [{"content": "Gandros owes Aria a favour.", "entities": ["Gandros"],
                                  "actor_id": " Gandros ",
                                  "relations": [{"source": "Gandros", "type": "Owes favour-to", "target": "Aria"},
                                                {"subject": "Aria", "relation": "rescued", "object": "Gandros"},
                                                {"source": "Gandros", "type": "owes favour to", "target": "Aria"},
                                                {"source": "Gandros", "type": "is", "target": "gandros"},
                                                {"source": "Gandros", "type": "likes"},
                                                {"source": "Gandros", "type": "no/slash", "target": "Aria"},
                                                "Gandros owes Aria"]}]})
    [found] = parse(text)
    assert found.entity_relations == (("Gandros", "owes_favour_to", "Aria"), ("Aria", "rescued", "Gandros"))
    assert found.entities == ("Gandros", "Aria") and found.actor_id == "Gandros"
    assert parse(json.dumps({"facts": [{"content": "x y", "relations": None}]}))[0].entity_relations == ()


def test_the_prompt_asks_for_the_actor_and_typed_relations() -> None:
    from mnemex.knowledge.prompt import EXTRACTION_SCHEMA, PROMPT_VERSION, extraction_messages
    from mnemex.knowledge.facts import ExtractionRequest

    item = EXTRACTION_SCHEMA["properties"]["facts"]["items"]
    assert {"actor_id", "relations"} <= set(item["required"]) and PROMPT_VERSION == "x3"
    assert item["properties"]["relations"]["items"]["required"] == ["source", "type", "target"]
    system = extraction_messages(ExtractionRequest(session_id="s1", messages=[]))[0]["content"]
    assert "- relations:" in system and "- actor_id:" in system and '"relations": []' in system
