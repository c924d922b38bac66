"""Categories, actors and parts of a scope, sans-io: the offline classifier on a
labelled set, memories classified as stored, category filters and facets, the
re-classification job (across a restart), actor memories, and parts of a scope
that never leak into each other."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.knowledge.categories import (
    CLASSIFIER,
    DEFAULT_CATEGORIES,
    MISC,
    Category,
    Classifier,
    check_catalog,
    merged_catalog,
)
from mnemex.memories.behaviour import ScopeMemory
from mnemex.memories.categories import BATCH, CALLER
from mnemex.memories.protocol import (
    ApplyClassification,
    ApplyExtraction,
    CategoryCatalog,
    Classified,
    Facets,
    GetActorMemories,
    GetCategories,
    GetFacets,
    ListMemories,
    NewFact,
    Remember,
    SetCategories,
    UpdateMemory,
)
from mnemex.memories.subscopes import scope_labels

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "memories"))

from category_examples import EXAMPLES  # noqa: E402
from scope_support import EMBEDDER, KEY, Driver, restored  # noqa: E402


class Classifying(Driver):
    """Sends Remember as the ref does now: classify on."""

    def remember(self, *contents: Any, **fields: Any) -> list[str]:
        memories = [c if not isinstance(c, str) else self.new(c, **fields) for c in contents]
        reply = self.send(Remember(memories=memories, embedder=EMBEDDER.name, dim=EMBEDDER.dim,
                                   now=self.tick(), classify=True))
        return list(reply.ids)

    def record(self, memory_id: str) -> Any:
        record = self.memory.record(memory_id)
        assert record is not None
        return record


def precision_recall(threshold: float) -> tuple[float, float]:
    classifier = Classifier(DEFAULT_CATEGORIES, threshold)
    tp = fp = fn = 0
    for text, gold in EXAMPLES:
        got = set(classifier.classify(text)[0])
        tp += len(got & set(gold))
        fp += len(got - set(gold))
        fn += len(set(gold) - got)
    return tp / (tp + fp), tp / (tp + fn)


# -- the classifier --------------------------------------------------------------------------------
def test_the_offline_classifier_is_precise_on_the_labelled_set() -> None:
    precision, recall = precision_recall(0.5)
    assert precision >= 0.95, precision
    assert recall >= 0.85, recall


def test_a_text_nothing_fits_is_misc_and_the_threshold_decides() -> None:
    classifier = Classifier(DEFAULT_CATEGORIES, 0.5)
    assert classifier.classify("Okay, sounds good") == ((MISC,), (1.0,))
    names, confidences = classifier.classify("Gandros the wizard owes the party a favour")
    assert names[0] == "favor_owed" and confidences[0] > 0.8
    strict = Classifier(DEFAULT_CATEGORIES, 0.9)
    assert strict.classify("The user loves tea")[0] == (MISC,)


def test_an_apps_category_is_learnt_from_its_keywords_and_description() -> None:
    catalog = (*DEFAULT_CATEGORIES, Category("spells", "Spells the wizard knows", ("fireball", "cantrip")))
    classifier = Classifier(catalog, 0.5)
    assert classifier.classify("Elda learnt the fireball cantrip")[0] == ("spells",)


def test_catalogs_are_checked_and_merged() -> None:
    with pytest.raises(InvalidInput, match="lower-case"):
        check_catalog([{"name": "Bad Name"}])
    with pytest.raises(InvalidInput, match="twice"):
        check_catalog([{"name": "a"}, {"name": "a"}])
    with pytest.raises(InvalidInput, match="reserved"):
        check_catalog([{"name": "misc"}])
    with pytest.raises(InvalidInput, match="keywords"):
        check_catalog([{"name": "a", "keywords": "not a list"}])
    base = (Category("a", "A"), Category("b", "B"))
    merged = merged_catalog(base, (Category("b", "better B"), Category("c")), ["a"], replace=False)
    assert [c.name for c in merged] == ["b", "c"] and merged[0].description == "better B"
    assert merged_catalog(base, (Category("z"),), [], replace=True) == (Category("z"),)


# -- classified as stored ----------------------------------------------------------------------------
def test_every_memory_stored_gets_categories_and_says_who_chose_them() -> None:
    d = Classifying()
    quest, hello, own = d.remember("The party's quest is to rescue the miller's daughter", "Hello there",
                                   d.new("Buy milk", categories=("chores",)))
    assert d.record(quest).categories[0] == "quests" and d.record(quest).classified_by == CLASSIFIER
    assert d.record(hello).categories == (MISC,)
    assert (d.record(own).categories, d.record(own).category_confidences, d.record(own).classified_by) == (
        ("chores",), (), CALLER)


def test_commands_journaled_before_categories_replay_as_they_were() -> None:
    d = Driver()  # classify defaults to False: an old journal's Remember
    (memory_id,) = d.remember("The party's quest is to rescue the miller's daughter")
    record = d.memory.record(memory_id)
    assert record is not None and record.categories == () and record.classified_by is None


def test_an_extractors_categories_are_kept_where_confident_else_the_classifier_decides() -> None:
    d = Classifying()
    facts = [NewFact(id="f1", content="The user is allergic to peanuts", categories=("health",),
                     confidences=(0.9,), actor_id="npc-1"),
             NewFact(id="f2", content="The tower of Ash stands on the cliffs", categories=("health",),
                     confidences=(0.2,))]
    reply = d.send(ApplyExtraction(session_id="s1", first=0, upto=2, facts=facts, extractor="llm:m:x1",
                                   now=d.tick(), classify=True))
    assert reply.status == "committed"
    confident, doubtful = d.record("f1"), d.record("f2")
    assert (confident.categories, confident.classified_by, confident.actor_id) == (("health",), "llm:m:x1",
                                                                                    "npc-1")
    assert (doubtful.categories, doubtful.classified_by) == (("location",), CLASSIFIER)


def test_categories_a_caller_updates_are_theirs_and_new_content_is_classified_again() -> None:
    d = Classifying()
    (memory_id,) = d.remember("The user loves spicy Thai food")
    text = "The user is allergic to peanuts"
    updated = d.send(UpdateMemory(id=memory_id, content=text, vector=d.new(text).vector, embedder=EMBEDDER.name,
                                  dim=EMBEDDER.dim, now=d.tick()))
    assert updated.memory.categories == ("health",)
    mine = d.send(UpdateMemory(id=memory_id, categories=("food",), now=d.tick())).memory
    assert (mine.categories, mine.classified_by) == (("food",), CALLER)


# -- filters and facets --------------------------------------------------------------------------------
def test_a_category_filter_with_a_confidence_finds_only_those_memories() -> None:
    d = Classifying()
    strong, weak, other = d.remember("Gandros owes the party a favour and a debt",
                                     "Gandros owes the party", "Gandros lives in the tower")
    assert d.record(strong).category_confidences[0] > d.record(weak).category_confidences[0] >= 0.5
    hits = d.search("Gandros", mode="fulltext", filter={"categories": ["favor_owed"]}).hits
    assert {hit.memory.id for hit in hits} == {strong, weak}
    hits = d.search("Gandros", mode="fulltext",
                    filter={"categories": ["favor_owed"], "min_category_confidence": 0.8}).hits
    assert [hit.memory.id for hit in hits] == [strong]
    hits = d.search("Gandros", mode="fulltext", filter={"min_category_confidence": 0.9}).hits
    assert [hit.memory.id for hit in hits] == [strong]  # any category held that surely
    assert d.record(other).categories[0] in ("location", "personal_details")
    with pytest.raises(InvalidInput, match="min_category_confidence"):
        d.search("x", mode="fulltext", filter={"min_category_confidence": 2})


def test_facets_count_memories_per_category_over_hits_or_the_scope() -> None:
    d = Classifying()
    d.remember("The tavern sits at the crossroads", "The dungeon lies beneath the temple ruins",
               "The party's quest is to rescue the miller's daughter", "Hello there")
    result = d.send(msgspec.structs.replace(d_search(d, "tavern"), facets="hits"))
    assert result.facets == {"location": 1}
    result = d.send(msgspec.structs.replace(d_search(d, "tavern"), facets="scope"))
    assert result.facets == {"location": 2, "misc": 1, "quests": 1}
    facets: Facets = d.send(GetFacets(filter={"categories": ["location"]}))
    assert (facets.counts, facets.total) == ({"location": 2}, 2)
    catalog: CategoryCatalog = d.send(GetCategories())
    assert catalog.counts["location"] == 2 and catalog.version == 0 and not catalog.reclassifying


def d_search(d: Driver, query: str) -> Any:
    from mnemex.memories.protocol import Search

    return Search(query=query, mode="fulltext", now=d.now)


# -- the re-classification -----------------------------------------------------------------------------
def test_changing_the_catalog_reclassifies_in_jobs_and_leaves_a_callers_categories() -> None:
    d = Classifying()
    spell, own = d.remember("Elda learnt the fireball cantrip", d.new("Fireball burns", categories=("mine",)))
    assert d.record(spell).categories == (MISC,)
    catalog = d.send(SetCategories(categories=[Category("spells", "Spells", ("fireball", "cantrip"))],
                                   now=d.tick()))
    assert catalog.version == 1 and catalog.reclassifying and len(d.jobs) == 1
    d.run_jobs()
    assert d.record(spell).categories == ("spells",) and d.record(own).categories == ("mine",)
    done = d.send(GetCategories())
    assert not done.reclassifying and done.reclassified == 2 and done.counts["spells"] == 1
    again = d.send(SetCategories(categories=[Category("spells", "Spells", ("fireball", "cantrip"))],
                                 now=d.tick()))
    assert again.version == 1 and not d.jobs  # no change: nothing journaled, nothing to do


def test_a_batch_of_an_older_catalog_changes_nothing() -> None:
    d = Classifying()
    (memory_id,) = d.remember("Elda learnt the fireball cantrip")
    d.send(SetCategories(categories=[Category("spells", "", ("fireball",))], now=d.tick()))
    stale = ApplyClassification(version=0, after=None, upto=memory_id,
                                results=[Classified(memory_id, ("rules",), (0.9,), CLASSIFIER)], now=d.tick())
    assert d.memory.handle(stale).unchanged
    assert d.record(memory_id).categories == (MISC,)


def test_a_reclassification_survives_a_restart_and_finishes_batch_after_batch() -> None:
    d = Classifying()
    texts = [f"Spell number {i} is a fireball" if i % 2 else f"Note number {i}" for i in range(BATCH + 10)]
    step = 500
    for start in range(0, len(texts), step):
        d.remember(*texts[start:start + step])
    d.send(SetCategories(categories=[Category("spells", "", ("fireball",))], now=d.tick()))
    first = d.jobs.pop(0)
    from mnemex.effects import JobResult

    d.send(first.deliver(JobResult(value=first.work())))  # the first batch is applied (journaled)
    assert d.send(GetCategories()).reclassified == BATCH
    d.jobs.clear()  # the next job is lost in a crash
    again = Classifying(restored(d.memory))
    again.now = d.now
    catalog = again.send(GetCategories())  # the next command plans the job again
    assert catalog.reclassifying and catalog.reclassified == BATCH and len(again.jobs) == 1
    again.run_jobs()
    done = again.send(GetCategories())
    assert not done.reclassifying and done.reclassified == len(texts)
    assert done.counts["spells"] == len(texts) // 2
    page = again.send(ListMemories(filter={"categories": ["spells"]}, limit=None))
    assert all("fireball" in record.content for record in page.memories)


def test_replaying_the_journal_of_a_reclassification_gives_the_same_state() -> None:
    d = Classifying()
    log: list[Any] = []
    original = d.send

    def send(command: Any) -> Any:
        log.append(command)
        return original(command)

    d.send = send  # type: ignore[method-assign]
    d.remember("Elda learnt the fireball cantrip", "The tavern sits at the crossroads")
    d.send(SetCategories(categories=[Category("spells", "", ("fireball",))], now=d.tick()))
    d.run_jobs()
    writes = [c for c in log if isinstance(c, Remember | SetCategories | ApplyClassification)]
    replayed = ScopeMemory(KEY, d.memory.settings)
    replayed.replay(writes)
    assert sorted(replayed.records(), key=lambda r: r.id) == sorted(d.memory.records(), key=lambda r: r.id)
    assert not replayed.categories.reclassifying and replayed.categories.version == 1


# -- actors --------------------------------------------------------------------------------------------
def test_an_actors_memories_are_those_linked_to_it_and_its_own() -> None:
    d = Classifying()
    about, own, other = d.remember(d.new("Gandros owes the party a favour", actor_id="gandros"),
                                   d.new("I must guard the tower", scope_kind="actor", scope_id="gandros"),
                                   d.new("Mira runs the tavern", actor_id="mira"))
    page = d.send(GetActorMemories(actor_id="gandros"))
    assert [m.id for m in page.memories] == [about, own] and page.total == 2
    assert [h.memory.id for h in d.search("tavern", mode="fulltext", filter={"actor_id": "mira"}).hits] == [
        other]


# -- parts of a scope ----------------------------------------------------------------------------------
def test_parts_of_a_scope_are_named_and_checked() -> None:
    assert scope_labels(["global", "campaign", "session:s1"], {"campaign": "ash"}) == (
        "global", "campaign:ash", "session:s1")
    for bad in (["campaign"], [""], ["global:x"], [], ["a b:c"]):
        with pytest.raises(InvalidInput):
            scope_labels(bad)


PARTS = ("global", "campaign:ash", "campaign:oak", "session:s1", "session:s2", "actor:gandros")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed=st.lists(st.sampled_from(PARTS), min_size=1, max_size=30),
       asked=st.lists(st.sampled_from(PARTS), min_size=1, max_size=4, unique=True),
       mode=st.sampled_from(["keyword", "fulltext", "vector", "hybrid"]))
def test_parts_of_a_scope_never_leak_into_each_other(placed: list[str], asked: list[str], mode: str) -> None:
    d = Classifying()
    memories = []
    for i, part in enumerate(placed):
        kind, _, part_id = part.partition(":")
        fields = {"scope_kind": kind, "scope_id": part_id} if part_id else {}
        memories.append(d.new(f"the wizard's favour number {i} in {part}", **fields))
    ids = d.remember(*memories)
    part_of = dict(zip(ids, placed, strict=True))
    hits = d.search("wizard favour", mode=mode, top_k=50, min_score=-1.0, filter={"scope": asked}).hits
    assert all(hit.memory.scope_label in asked for hit in hits)
    assert {hit.memory.id for hit in hits} == {i for i, part in part_of.items() if part in asked}
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)  # one ranking over the parts


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["I", "love", "hiking", "my", "job", "at", "the", "bank", "dog",
                                          "doctor", "pizza", "quest", "sister", "paint", "run", "the"]),
                         max_size=10).map(" ".join), min_size=1, max_size=8))
def test_a_kept_answer_is_the_answer_of_a_classifier_that_kept_none(texts: list[str]) -> None:
    # (issue 17: a classifier keeps its answer per set of cue words found in a text)
    from mnemex.index import Tokenizer
    from mnemex.knowledge.categories import DEFAULT_CATEGORIES, Classifier

    tokenizer = Tokenizer(stem=True, fold_accents=True)
    keeping = Classifier(DEFAULT_CATEGORIES, 0.3, tokenizer)
    for text in [*texts, *reversed(texts)]:
        fresh = Classifier(DEFAULT_CATEGORIES, 0.3, tokenizer)
        assert keeping.classify(text) == fresh.classify(text)
        assert keeping.classify(text, tokenizer.tokens(text)) == fresh.classify(text)
