"""The rule-based extractor: each pattern family, what it must not extract, how it
relates new statements to offered memories, and the evaluation sets' bars."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemex.knowledge.rules as rules_module
from mnemex.knowledge.facts import (
    INJECTED_CLOSE,
    INJECTED_OPEN,
    ExtractedFact,
    ExtractionRequest,
    ExtractionResult,
    Extractor,
    OfferedMemory,
    SourceMessage,
)
from mnemex.knowledge.rules import SINGLE_VALUED, SLOTS, RulesExtractor, slot_of

BENCH = Path(__file__).resolve().parents[2] / "bench"
EXTRACTOR = RulesExtractor()


def extract(*texts: str, offered: tuple[str, ...] = (), role: str = "user", time: float = 0.0,
            categories: dict[str, str] | None = None) -> ExtractionResult:
    request = ExtractionRequest(
        session_id="s",
        messages=[SourceMessage(position, role, text, time=time) for position, text in enumerate(texts)],
        offered=[OfferedMemory(number, f"m{number}", text) for number, text in enumerate(offered, 1)],
        categories=categories or {})
    return EXTRACTOR.extract(request)


def facts(*texts: str, offered: tuple[str, ...] = ()) -> list[ExtractedFact]:
    return extract(*texts, offered=offered).facts


def only(text: str, offered: tuple[str, ...] = ()) -> ExtractedFact:
    found = facts(text, offered=offered)
    assert len(found) == 1, [f.content for f in found]
    return found[0]


def test_the_rules_extractor_is_an_extractor_named_rules() -> None:
    assert isinstance(EXTRACTOR, Extractor)
    assert EXTRACTOR.name == "rules"
    assert extract("I live in Berlin.").extractor == "rules"


# -- what it finds --------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "slot", "content"), [
    # name
    ("My name is John.", "name", "The user's name is John."),
    ("Hi, I'm Olga!", "name", "The user's name is Olga."),
    ("Just call me J.", "name", "The user goes by J."),
    ("I go by Sam at work.", "name", "The user goes by Sam."),
    # age
    ("I'm 41 years old.", "age", "The user is 41 years old."),
    ("I turned thirty last week.", "age", "The user is thirty years old."),
    # where the user lives
    ("I live in Berlin.", "residence", "The user lives in Berlin."),
    ("We just moved to Rotterdam for work.", "residence", "The user just moved to Rotterdam."),
    ("I'm based in Nairobi these days.", "residence", "The user is based in Nairobi."),
    ("I've lived in Oslo for ten years.", "residence", "The user has lived in Oslo for ten years."),
    # where the user is from
    ("I'm originally from Chile.", "origin", "The user is originally from Chile."),
    ("I grew up in Ohio.", "origin", "The user grew up in Ohio."),
    ("I'm Portuguese.", "origin", "The user is Portuguese."),
    # work
    ("I work as a software developer at a bank.", "work",
     "The user works as a software developer at a bank."),
    ("I'm a software developer at a bank.", "work", "The user is a software developer at a bank."),
    ("I work for Deloitte.", "work", "The user works for Deloitte."),
    ("I'm a registered nurse.", "work", "The user is a registered nurse."),
    ("I run a small coffee shop in Leith.", "work", "The user runs a small coffee shop in Leith."),
    ("I'm retired.", "work", "The user is retired."),
    # studies
    ("I'm studying law at McGill.", "education", "The user is studying law at McGill."),
    ("I'm a second-year physics student.", "education", "The user is a second-year physics student."),
    ("I have a master's in statistics.", "education", "The user has a master's in statistics."),
    # likes and dislikes
    ("I love rock climbing.", "likes", "The user loves rock climbing."),
    ("I really enjoy baking bread.", "likes", "The user really enjoys baking bread."),
    ("I prefer window seats.", "likes", "The user prefers window seats."),
    ("My favourite film is Alien.", "likes", "The user's favourite film is Alien."),
    ("I'm a huge jazz fan.", "likes", "The user is a huge jazz fan."),
    ("I can't stand mushrooms.", "dislikes", "The user can't stand mushrooms."),
    ("I hate cold weather.", "dislikes", "The user hates cold weather."),
    ("I don't like horror films.", "dislikes", "The user doesn't like horror films."),
    # diet and health
    ("I'm vegetarian.", "diet", "The user is vegetarian."),
    ("I don't eat pork.", "diet", "The user doesn't eat pork."),
    ("I'm allergic to penicillin.", "health", "The user is allergic to penicillin."),
    ("I have a peanut allergy.", "health", "The user has a peanut allergy."),
    ("I'm lactose intolerant.", "health", "The user is lactose intolerant."),
    # relationships and pets
    ("My wife Anna is a surgeon.", "relationship", "The user's wife Anna is a surgeon."),
    ("My brother lives in Porto.", "relationship", "The user's brother lives in Porto."),
    ("I have two kids.", "relationship", "The user has two kids."),
    ("My sister's name is Eva.", "relationship", "The user's sister's name is Eva."),
    ("I'm married to Tom.", "relationship", "The user is married to Tom."),
    ("My dog Rex chews everything.", "pet", "The user has a dog named Rex."),
    ("We have a cat called Miso.", "pet", "The user has a cat called Miso."),
    # languages
    ("I speak Greek and Turkish.", "language", "The user speaks Greek and Turkish."),
    ("I'm fluent in Korean.", "language", "The user is fluent in Korean."),
    ("I'm learning Italian.", "language", "The user is learning Italian."),
    # plans
    ("I'm going to Japan in May.", "plan", "The user is going to Japan in May."),
    ("I plan to open a bakery.", "plan", "The user plans to open a bakery."),
    ("We're moving to Denver next month.", "plan", "The user is moving to Denver next month."),
    ("I'm training for a marathon.", "plan", "The user is training for a marathon."),
    # possessions and events
    ("I drive a Tesla.", "possession", "The user drives a Tesla."),
    ("We bought a house in Leeds.", "possession", "The user bought a house in Leeds."),
    ("I got promoted last month.", "event", "The user got promoted last month."),
    ("I ran my first marathon in April.", "event", "The user ran their first marathon in April."),
])
def test_a_first_person_statement_becomes_a_third_person_fact_of_its_slot(
        text: str, slot: str, content: str) -> None:
    fact = only(text)
    assert (fact.content, slot_of(fact)) == (content, slot)
    assert fact.attributed_to == "user"


@pytest.mark.parametrize(("text", "content", "slot"), [
    ("Remember that my locker code is 4512.", "The user's locker code is 4512.", "note"),
    ("Please remember I take my tea with oat milk.", "The user takes their tea with oat milk.", "likes"),
    ("Don't forget that I'm allergic to shellfish.", "The user is allergic to shellfish.", "health"),
    ("Note that I use metric units.", "The user uses metric units.", "note"),
    ("Can you remember that my son's name is Ivo?", "The user's son's name is Ivo.", "relationship"),
    ("Keep in mind: I work night shifts.", "The user works night shifts.", "note"),
])
def test_an_explicit_request_is_kept_in_the_third_person_with_importance_0_9(
        text: str, content: str, slot: str) -> None:
    fact = only(text)
    assert (fact.content, slot_of(fact), fact.importance) == (content, slot, 0.9)


def test_a_reminder_to_do_something_is_not_a_fact() -> None:
    assert facts("Remember to buy milk.", "Don't forget to call me back.",
                 "Do you remember my dog's name?") == []


def test_a_long_turn_gives_one_fact_per_statement() -> None:
    found = facts("Quick intro: I'm Marta, 36, I live in Valencia with my husband Joan and our two dogs. "
                  "I work as an architect, and in my free time I love sailing. I can't stand cruise ships.")
    assert [(slot_of(f), f.content) for f in found] == [
        ("name", "The user's name is Marta."),
        ("age", "The user is 36 years old."),
        ("residence", "The user lives in Valencia."),
        ("relationship", "The user's husband is named Joan."),
        ("pet", "The user has two dogs."),
        ("work", "The user works as an architect."),
        ("likes", "The user loves sailing."),
        ("dislikes", "The user can't stand cruise ships."),
    ]


def test_entities_keep_multi_word_names_together() -> None:
    assert only("I graduated from the University of Cape Town.").entities == ("University of Cape Town",)
    assert only("I work as a porter at St. Thomas' Hospital in London.").entities[-1] == "London"
    assert only("My dog Rex is a menace.").entities == ("Rex",)
    assert only("my name is tomás").entities == ("tomás",)


def test_names_and_places_may_be_written_in_any_script() -> None:
    assert only("My name's Łukasz.").content == "The user's name is Łukasz."
    assert only("I live in Kraków.").entities == ("Kraków",)
    assert only("Our daughter Zoë starts school in June.").entities[0] == "Zoë"
    assert only("I moved to Zürich.").content == "The user moved to Zürich."


# -- what it must not extract ---------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    # questions
    "Do you know where I live?",
    "What's a good job for someone who loves maths?",
    "Is it normal that I hate broccoli?",
    # hypotheticals and conditionals
    "If I lived in Paris I'd eat croissants every day.",
    "Suppose I worked at Google, what would I earn?",
    "I'd love to live by the sea.",
    "I wish I spoke French.",
    "Maybe I'll move to Spain one day.",
    "I'm thinking about becoming a teacher.",
    # negations
    "I don't live in Paris anymore.",
    "I'm not vegetarian anymore.",
    "I never worked at Amazon.",
    "I don't have any pets.",
    "I have no kids.",
    # other people's words and lives
    "My coworker said she's moving to Denver.",
    "He said 'I work at Microsoft' but I doubt it.",
    "My friend thinks I should learn Spanish.",
    "In the story, my character is an elf who lives in the forest.",
    # greetings, chit-chat, requests to the assistant
    "Hi there! How's it going?",
    "Thanks, that's really helpful!",
    "lol yeah",
    "I'm fine, just tired today.",
    "I love it!",
    "Write me a poem about the sea.",
    "You can call me anytime.",
    "I'll think about it tomorrow.",
    # text that reads like an assistant's
    "As an AI language model, I don't have preferences, but many people enjoy hiking.",
    "Sure, I'd be happy to help. Here is a first draft:",
    # love of the obviously unlovable
    "I love waiting in line for hours.",
    "I love sitting in traffic, said no one ever.",
])
def test_it_does_not_extract(text: str) -> None:
    assert [f.content for f in facts(text)] == []


def test_an_expected_baby_is_a_plan_not_a_relative_yet() -> None:
    assert [slot_of(f) for f in facts("We're expecting our first baby in June!")] == ["plan"]


def test_a_negation_never_becomes_its_positive() -> None:
    for text in ("I don't live in Paris anymore.", "I no longer work at the bank.", "I'm not married."):
        assert all("Paris" not in f.content and "bank" not in f.content and "married" not in f.content
                   for f in facts(text)), text


@pytest.mark.parametrize("role", ["assistant", "system", "tool"])
def test_only_the_users_messages_are_a_source(role: str) -> None:
    assert extract("I live in Berlin and I work at Siemens.", role=role).facts == []


def test_context_messages_are_never_extracted() -> None:
    request = ExtractionRequest(session_id="s", messages=[SourceMessage(5, "user", "ok thanks")],
                                context=[SourceMessage(4, "user", "I live in Berlin.")])
    assert EXTRACTOR.extract(request).facts == []


def test_the_injected_memory_block_is_never_extracted() -> None:
    text = (f"{INJECTED_OPEN}[1] The user lives in Oslo. [2] The user's name is Erik. "
            f"I'm a dentist.{INJECTED_CLOSE} By the way, I moved to Bergen.")
    assert [f.content for f in facts(text)] == ["The user moved to Bergen."]
    assert facts(f"I love chess. {INJECTED_OPEN}I live in Oslo, unclosed") == facts("I love chess.")


# -- offered memories -----------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "offered", "relation", "target"), [
    ("I moved to Berlin.", ("The user lives in Lisbon.",), "updates", 1),
    ("I live in Lisbon.", ("The user lives in Lisbon.",), "duplicate", 1),
    ("I live in Berlin.", ("The user likes jazz.", "User lives in Lisbon, Portugal."), "updates", 2),
    ("I live in Berlin.", ("Lives in Lisbon.",), "updates", 1),
    ("I live in Berlin.", ("I live in Lisbon",), "updates", 1),
    ("My name is Jon.", ("The user's name is John.",), "updates", 1),
    ("I'm 35.", ("The user is 34 years old.",), "updates", 1),
    ("I work at Google.", ("The user is a nurse.",), "updates", 1),
    ("I love pizza.", ("The user likes pizza.",), "duplicate", 1),
    ("I love hiking and kayaking.", ("The user loves hiking.",), "extends", 1),
    # multi-valued slots never update
    ("I also like burgers.", ("The user likes pizza.",), None, None),
    ("I speak German too.", ("The user speaks Spanish.",), None, None),
    ("My sister lives in Rome.", ("The user's brother lives in Porto.",), None, None),
    # a nickname is no new name; another slot is no update
    ("Call me Jo.", ("The user's name is Joanna.",), None, None),
    ("I moved to Berlin.", ("The user's brother lives in Lisbon.",), None, None),
])
def test_a_statement_is_related_to_the_offered_memory_of_its_slot(
        text: str, offered: tuple[str, ...], relation: str | None, target: int | None) -> None:
    fact = only(text, offered)
    assert (fact.relation, fact.target) == (relation, target)


def test_an_offered_memory_stated_by_name_is_about_the_speaker() -> None:
    request = ExtractionRequest(session_id="s", messages=[SourceMessage(0, "user", "I moved to Leeds.",
                                                                        speaker="Maria")],
                                offered=[OfferedMemory(1, "a", "Maria lives in York.")])
    (fact,) = EXTRACTOR.extract(request).facts
    assert (fact.relation, fact.target) == ("updates", 1)


SAMPLE = ("I'm Priya, 29, and I live in Leeds. I work as a nurse at a hospice. I love gardening and I hate "
          "flying. I'm vegan and allergic to kiwi. My brother Dev lives in Pune. We have a cat named Pickle. "
          "I speak Hindi. I'm going to Goa in March. I drive an old Volvo. I got engaged last year.")


def test_its_own_facts_offered_back_are_duplicates() -> None:
    first = facts(SAMPLE)
    assert len(first) >= 12
    again = facts(SAMPLE, offered=tuple(f.content for f in first))
    assert [(f.relation, f.target) for f in again] == [("duplicate", n) for n in range(1, len(first) + 1)]


def test_single_valued_slots_are_the_documented_ones() -> None:
    assert set(SINGLE_VALUED) == {"name", "age", "residence", "work"}
    assert set(SLOTS) >= SINGLE_VALUED


# -- what a fact carries --------------------------------------------------------------------------
def test_positions_and_message_time_are_carried() -> None:
    request = ExtractionRequest(session_id="s", messages=[
        SourceMessage(7, "user", "I live in Porto.", time=1_700_000_000.0),
        SourceMessage(8, "assistant", "Nice! Porto is lovely."),
        SourceMessage(9, "user", "I'm a chef."),
    ])
    found = EXTRACTOR.extract(request).facts
    assert [(f.messages, f.valid_at) for f in found] == [((7,), 1_700_000_000.0), ((9,), None)]


def test_the_same_fact_in_two_messages_is_one_fact_naming_both() -> None:
    (fact,) = extract("I live in Porto.", "Like I said, I live in Porto!").facts
    assert fact.messages == (0, 1)


def test_kind_categories_confidence_and_importance_follow_the_slot() -> None:
    name, likes, brother, plan = facts("My name is Ana. I love tennis. My brother Rui is a pilot. "
                                       "I'm flying to Lima next week.")
    assert (name.kind, name.categories, name.importance) == ("fact", ("personal_details",), 0.85)
    assert (likes.kind, likes.categories) == ("preference", ("preferences",))
    assert (brother.kind, brother.categories) == ("relationship", ("relationships",))
    assert (plan.kind, plan.categories) == ("plan", ("plans",))
    assert brother.importance > likes.importance
    for fact in (name, likes, brother, plan):
        assert len(fact.confidences) == len(fact.categories)
        assert all(0.8 <= c <= 0.95 for c in fact.confidences)


def test_categories_outside_the_requests_catalog_are_left_out() -> None:
    (fact,) = extract("I'm vegan.", categories={"health": "diet, allergies, conditions"}).facts
    assert (fact.categories, fact.confidences) == (("health",), (0.7,))


def test_extraction_is_deterministic() -> None:
    request = ExtractionRequest(session_id="s", messages=[SourceMessage(0, "user", SAMPLE)],
                                offered=[OfferedMemory(1, "a", "The user lives in York.")])
    first = RulesExtractor().extract(request)
    assert first == RulesExtractor().extract(request) == EXTRACTOR.extract(request)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "system"]), st.text(max_size=300)),
                max_size=4))
def test_any_text_gives_facts_about_the_user_from_the_users_messages(messages: list[tuple[str, str]]) -> None:
    request = ExtractionRequest(session_id="s", messages=[SourceMessage(i, role, text)
                                                          for i, (role, text) in enumerate(messages)])
    users = {i for i, (role, _) in enumerate(messages) if role == "user"}
    for fact in EXTRACTOR.extract(request).facts:
        assert fact.attributed_to == "user" and set(fact.messages) <= users and fact.content.endswith(".")
        assert slot_of(fact) in SLOTS


def test_the_module_is_pure_python_and_re() -> None:
    tree = ast.parse(Path(rules_module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported <= {"__future__", "re", "unicodedata", "collections.abc", "dataclasses", "typing",
                        "msgspec", "mnemex.knowledge.facts"}


# -- the evaluation sets --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bench_rules() -> Iterator[ModuleType]:
    """bench/rules_extractor.py as a module (it puts bench/ on the import path)."""
    saved = sys.path[:]
    spec = importlib.util.spec_from_file_location("bench_rules_extractor", BENCH / "rules_extractor.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_rules_extractor"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path[:] = saved
        del sys.modules["bench_rules_extractor"]


@pytest.mark.parametrize("name", ["development", "held-out"])
def test_the_evaluation_set_meets_the_bars(bench_rules: ModuleType, name: str) -> None:
    rows = bench_rules.load(bench_rules.SETS[name])
    assert len(rows) >= (100 if name == "development" else 30)
    assert sum(not row["facts"] for row in rows) >= (25 if name == "development" else 10)
    evaluation = bench_rules.evaluate(rows)
    assert evaluation.overall.precision >= bench_rules.BAR_PRECISION, evaluation.spurious
    assert evaluation.overall.recall >= bench_rules.BAR_RECALL, evaluation.missed
    assert evaluation.silent_turns_with_facts == 0


def test_the_evaluation_matches_slot_and_value_as_whole_words(bench_rules: ModuleType) -> None:
    gold = {"slot": "residence", "value": "krakow"}
    assert bench_rules.matches("residence", "The user lives in Kraków.", gold)
    assert not bench_rules.matches("origin", "The user lives in Kraków.", gold)
    assert not bench_rules.matches("work", "The user works at Bankside.", {"slot": "work", "value": "bank"})
    assert bench_rules.matches("work", "The user works at St. Mary's.", {"slot": "work", "value": "St Marys"})
