"""The entity graph, sans-io: names found offline, deterministic resolution, reversible
merges journaled as scope commands (replayed and snapshotted), and reads."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from memories.scope_support import KEY, Driver, restored, snapshot_image

import mnemex.knowledge.graph as graph_module
from mnemex.index._held import HeldDocs
from mnemex.effects import Image, Step
from mnemex.errors import InvalidInput, NotFound
from mnemex.knowledge.entities import initials, mentions, name_key
from mnemex.knowledge.graph import Declared, EntityGraph, Merge
from mnemex.knowledge.parse import parse_facts
from mnemex.knowledge.prompt import EXTRACTION_SCHEMA
from mnemex.memories.behaviour import GRAPH_SIDECAR, ScopeMemory, is_scope_write
from mnemex.memories.protocol import (
    ApplyExtraction,
    DeclareEntity,
    EntityChanged,
    EntityDetail,
    EntityPage,
    GetEntity,
    GetGraphStats,
    GetRelated,
    GraphStats,
    ListEntities,
    MergeEntities,
    NewFact,
    RelatedEntities,
    UnmergeEntity,
)


def found(text: str, author: str | None = None) -> list[tuple[str, str]]:
    return [(m.surface, m.kind) for m in mentions(text, author)]


# -- names without a model ------------------------------------------------------------------------
def test_patterns_find_speakers_names_acronyms_and_possessives() -> None:
    assert found("Caroline: I went to the LGBTQ support group with Melanie's kids.") == [
        ("Caroline", "speaker"), ("LGBTQ", "acronym"), ("Melanie", "name")]
    assert found("We rescued Gandros from the Black Tower near New York.") == [
        ("Gandros", "name"), ("Black Tower", "name"), ("New York", "name")]
    assert found("My kids loved the Lord of the Rings, and Luna and Oliver too.") == [
        ("Lord of the Rings", "name"), ("Luna", "name"), ("Oliver", "name")]
    # a capitalised word opening a sentence is weak: a name only if written so elsewhere
    assert found("Appreciate it! Thanks, see you Monday.") == [("Appreciate", "weak")]
    assert found("Knowing I'm loved helps.") == []  # a verb form opening a sentence: no name at all


def test_name_keys_fold_articles_possessives_case_and_accents() -> None:
    assert name_key("the Wizard") == name_key("WIZARD's") == name_key("wizard") == "wizard"
    assert name_key("Café Ümlaut") == "cafe umlaut"
    assert initials("national aeronautics and space administration") == "nasa"
    assert initials("gandros") == ""


# -- resolution ------------------------------------------------------------------------------------
def test_an_acronym_mentioned_in_four_sessions_is_one_entity() -> None:
    driver = Driver()
    for n, text in enumerate(["I applied to NASA today.", "The NASA interview went well.",
                              "NASA called me back!", "First week at the National Aeronautics and Space "
                              "Administration, as NASA folks say."]):
        driver.remember(text, session_id=f"s{n}")
    page = driver.send(ListEntities())
    assert isinstance(page, EntityPage)
    nasa = [e for e in page.entities if e.name == "NASA"]
    assert len(nasa) == 1, page.entities
    assert (nasa[0].mentions, nasa[0].sessions) == (4, 4)
    assert "National Aeronautics and Space Administration" in nasa[0].aliases
    assert driver.send(GetEntity(name="national aeronautics and space administration")).entity.name == "NASA"


def test_resolution_joins_spacing_typos_and_nicknames_of_speakers() -> None:
    graph = EntityGraph()
    for doc, text in enumerate(["Melanie: hi there", "Thanks, Mel!", "The Black-Tower fell.",
                                "We saw the Blacktower.", "Gandros came.", "Gandross came too."]):
        graph.add(doc, text)
    assert graph.resolve("Mel") == graph.resolve("melanie") == "melanie"
    assert graph.resolve("black tower") == graph.resolve("blacktower")
    assert graph.resolve("Gandross") == graph.resolve("Gandros")
    assert graph.type_of("melanie") == "person"


@given(st.permutations(["Caroline: I met Mel at NASA.", "Melanie: NASA rocks.",
                        "National Aeronautics and Space Administration is big.", "Oliver and Luna played.",
                        "Mel painted the Grand Canyon.", "Appreciate it, Oliver!"]))
def test_resolution_is_the_same_whatever_the_order_memories_came_in(texts: list[str]) -> None:
    graph = EntityGraph()
    for doc, text in enumerate(texts):
        graph.add(doc, text)
    reference = EntityGraph()
    for doc, text in enumerate(sorted(texts)):
        reference.add(doc, text)
    summary = sorted((entity, tuple(graph.keys_of(entity)), len(graph.docs_of(entity)))
                     for entity in graph.entities())
    expected = sorted((entity, tuple(reference.keys_of(entity)), len(reference.docs_of(entity)))
                      for entity in reference.entities())
    assert summary == expected


def test_removing_memories_takes_their_mentions_away() -> None:
    graph = EntityGraph()
    graph.add(0, "Gandros came.")
    graph.add(1, "Appreciate it!")  # weak only: no entity
    graph.add(2, "We thank Gandros.")
    assert graph.entities() == ["gandros"]
    graph.remove(0)
    assert graph.docs_of("gandros") == {2}
    graph.remove(2)
    assert graph.entities() == [] and graph.mentions == 0


def test_graph_merges_and_unmerges_reversibly() -> None:
    graph = EntityGraph()
    graph.add(0, "The Grey Pilgrim spoke.")
    graph.add(1, "Gandalf smiled.")
    assert graph.resolve("grey pilgrim") != graph.resolve("gandalf")
    graph.merge(Merge("Grey Pilgrim", "Gandalf"))
    assert graph.resolve("grey pilgrim") == graph.resolve("gandalf") == "gandalf"
    assert graph.docs_of("gandalf") == {0, 1}
    assert graph.unmerge("grey pilgrim") == Merge("Grey Pilgrim", "Gandalf")
    assert graph.resolve("grey pilgrim") == "grey pilgrim"
    assert graph.unmerge("grey pilgrim") is None


def test_expansion_adds_aliases_neighbours_and_memories() -> None:
    graph = EntityGraph()
    graph.declare(Declared("Gandros", "npc", ("the wizard",)))
    for doc, text in enumerate(["Gandros owes us for the rescue at the Black Tower.",
                                "The wizard studies alone.", "Mira sells swords in Oakvale."]):
        graph.add(doc, text)
    expansion = graph.expansion("wizard favor")
    assert expansion is not None
    assert expansion.entities == ("gandros",) and "gandros" in expansion.aliases
    assert expansion.neighbours == ("black tower",)
    assert expansion.docs.tolist() == [0, 1]  # ascending
    # equal and hashed by identity (its arrays have no equality of their own)
    assert expansion == expansion and {expansion: 1}[expansion] == 1
    assert expansion != graph_module.Expansion(expansion.entities, expansion.aliases, expansion.neighbours,
                                               expansion.docs)
    assert graph.expansion("swords and shields") is None


def test_expansions_are_kept_until_the_graph_changes_and_within_their_bounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    graph = EntityGraph()
    names = [f"Person{chr(65 + i)}" for i in range(12)]
    for doc in range(120):
        graph.add(doc, f"{names[doc % 12]} met {names[(doc + 1) % 12]} at noon.")
    first = graph.expansion(f"what did {names[0]} say")
    assert first is not None and graph.expansion(f"what did {names[0]} say") is first  # kept
    graph.add(120, f"{names[0]} left.")
    again = graph.expansion(f"what did {names[0]} say")
    assert again is not first and again is not None and 120 in again.docs  # the graph changed
    # an entity's memories are one sorted array, shared by every expansion naming it
    pair = graph.expansion(f"did {names[0]} meet {names[1]}")
    assert pair is not None
    assert pair.each[0][0] is again.docs and pair.each[0][1] is again.spoken
    assert pair.docs.tolist() == sorted(set(again.docs.tolist()) | set(pair.each[1][0].tolist()))
    assert pair.spoken.tolist() == sorted(set(again.spoken.tolist()) | set(pair.each[1][1].tolist()))
    assert again.docs.tolist() == sorted(graph.docs_of(graph.resolve(names[0]) or ""))
    assert not again.docs.flags.writeable  # (shared: read-only)
    # bounded by the memories their own sets (unions over several entities) hold in
    # all: the least recently used go first
    monkeypatch.setattr(graph_module, "_EXPANSION_DOCS_MAX", 50)
    for i, name in enumerate(names):
        graph.expansion(f"and {name} with {names[(i + 5) % 12]}?")
        assert graph._expansion_docs == sum(len(e.docs) + len(e.spoken) for e in graph._expansions.values()
                                            if len(e.entities) > 1)
        assert graph._expansion_docs <= 50 or len(graph._expansions) == 1
    assert len(graph._expansions) < len(names)
    monkeypatch.setattr(graph_module, "_EXPANSIONS_MAX", 3)
    for name in names:
        graph.expansion(f"only {name}")
    assert len(graph._expansions) <= 3


# -- the scope's commands ------------------------------------------------------------------------
class Journaled(Driver):
    """A driver that keeps the writes a kernel would journal (``sent``)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Any] = []

    def send(self, command: Any) -> Any:
        out = self.memory.handle(command)
        if is_scope_write(command) and not (isinstance(out, Step) and out.unchanged):
            self.sent.append(command)
        return out.reply if isinstance(out, Step) else out


def campaign() -> Journaled:
    driver = Journaled()
    driver.send(DeclareEntity(name="Gandros", entity_type="npc", aliases=["the wizard"], now=driver.tick()))
    driver.remember("The party rescued Gandros from the Black Tower.", session_id="s1")
    driver.remember("Gandros swore a debt to the party for the rescue.", session_id="s2")
    driver.remember("The wizard keeps a tower by the sea.", session_id="s2")
    driver.remember("The Grey Mage sent a letter.", session_id="s3")
    return driver


def test_declared_entities_are_found_by_alias_with_memories_and_neighbours() -> None:
    driver = campaign()
    detail = driver.send(GetEntity(name="the wizard", memories=10, neighbours=5))
    assert isinstance(detail, EntityDetail)
    assert (detail.entity.name, detail.entity.type, detail.entity.declared) == ("Gandros", "npc", True)
    assert detail.entity.mentions == 3 and detail.entity.sessions == 2
    assert [n.entity.name for n in detail.neighbours] == ["Black Tower"]
    assert detail.neighbours[0].memories == (detail.memories[-1].id,)
    assert driver.send(ListEntities(entity_type="npc")).total == 1
    with pytest.raises(NotFound):
        driver.send(GetEntity(name="Sauron"))


def test_merge_and_unmerge_are_journaled_replayed_and_snapshotted() -> None:
    driver = campaign()
    assert driver.send(GetEntity(name="grey mage")).entity.name == "Grey Mage"
    merged = driver.send(MergeEntities(names=["Grey Mage"], into="Gandros", now=driver.tick()))
    assert isinstance(merged, EntityChanged) and merged.entities[0].mentions == 4
    assert "Grey Mage" in merged.entities[0].aliases
    again = driver.memory.handle(MergeEntities(names=["grey mage"], into="the wizard", now=driver.tick()))
    assert again.unchanged  # merged already: nothing to journal
    for memory in (restored(driver.memory), restored(driver.memory, sidecars=False)):
        assert memory.handle(GetEntity(name="the grey mage")).entity.name == "Gandros"
    undone = driver.send(UnmergeEntity(name="Grey Mage", now=driver.tick()))
    assert {e.name: e.mentions for e in undone.entities} == {"Grey Mage": 1, "Gandros": 3}
    unaliased = driver.send(UnmergeEntity(name="the wizard", now=driver.tick()))
    assert [(e.name, e.mentions, e.aliases) for e in unaliased.entities] == [("Gandros", 2, ())]
    with pytest.raises(NotFound):  # "wizard" is no name the patterns find on its own
        driver.send(GetEntity(name="wizard"))
    # replaying the journaled commands rebuilds the same graph
    replayed = ScopeMemory(KEY, driver.memory.settings)
    replayed.replay(driver.sent)
    assert replayed.handle(GetEntity(name="Gandros")) == driver.send(GetEntity(name="Gandros"))
    assert replayed.handle(GetEntity(name="Grey Mage")).entity.name == "Grey Mage"


def test_bad_entity_commands_are_refused_clearly() -> None:
    driver = campaign()
    with pytest.raises(InvalidInput, match="no word"):
        driver.send(DeclareEntity(name="the", now=driver.tick()))
    with pytest.raises(InvalidInput, match="type"):
        driver.send(DeclareEntity(name="Mira", entity_type="two words", now=driver.tick()))
    with pytest.raises(NotFound):
        driver.send(MergeEntities(names=["Nobody"], into="Gandros", now=driver.tick()))
    with pytest.raises(InvalidInput, match="no merged name"):
        driver.send(UnmergeEntity(name="Gandros", now=driver.tick()))
    with pytest.raises(InvalidInput):
        driver.send(GetRelated(name="Gandros", depth=3))


def test_related_reaches_two_hops_and_stats_count_the_graph() -> None:
    driver = campaign()
    driver.remember("The Black Tower stands in Oakvale.", session_id="s4")
    related = driver.send(GetRelated(name="Gandros", depth=2))
    assert isinstance(related, RelatedEntities)
    assert [(link.entity.name, link.hops, link.via) for link in related.related] == [
        ("Black Tower", 1, "Gandros"), ("Oakvale", 2, "Black Tower")]
    one_hop = driver.send(GetRelated(name="Gandros", depth=1))
    assert [link.entity.name for link in one_hop.related] == ["Black Tower"]
    stats = driver.send(GetGraphStats())
    assert isinstance(stats, GraphStats)
    assert (stats.entities, stats.relations, stats.declared, stats.merges) == (4, 2, 1, 0)


# -- expansion against the plain ranking ------------------------------------------------------------
TEXTS = ["Gandros owes the party a debt.", "The tower by the sea is empty.", "Aria sings in Saltmere.",
         "the party sleeps at the inn", "NASA sent a probe to the sea", "a debt is a debt",
         "Caroline: I painted the sea again.", "Melanie: the kids love the sea."]


@given(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=8, unique=True),
       st.sampled_from(["the sea", "a debt", "what does Gandros owe", "songs of Saltmere",
                        "Caroline painting", "sea NASA probe", "inn"]))
def test_expansion_changes_only_queries_that_name_an_entity(texts: list[str], query: str) -> None:
    plain, expanded = Driver(expansion=False), Driver(expansion=True)
    for driver in (plain, expanded):
        driver.remember(*texts)
    without = [(h.memory.id, h.score) for h in plain.search(query, top_k=8).hits]
    hits = expanded.search(query, top_k=8).hits
    named = expanded.memory.graph.find(query)
    if not named:
        assert [(h.memory.id, h.score) for h in hits] == without
        assert all("graph" not in h.found_by for h in hits)
        return
    # every memory about a named entity is found, and scores at least what it did without the graph
    graph, docs = expanded.memory.graph, expanded.memory.docs
    about = {docs[doc].id for entity in named for doc in graph.docs_of(entity)}
    assert about <= {h.memory.id for h in hits}
    before = dict(without)
    for hit in hits:
        if hit.memory.id in about:
            assert "graph" in hit.found_by and hit.score >= before.get(hit.memory.id, 0.0) - 1e-9


# -- entities from the LLM extractor ---------------------------------------------------------------
def test_the_parser_reads_typed_entities_and_plain_names_alike() -> None:
    answer = ('{"facts": [{"content": "The user owes Gandros a favour.", "entities": '
              '[{"name": "Gandros", "type": "Person"}, "Black Tower", {"name": "Oakvale", "type": 3}]}]}')
    fact, = parse_facts(answer, offered_numbers=(), positions=(0,))
    assert fact.entities == ("Gandros", "Black Tower", "Oakvale")
    assert fact.entity_types == {"Gandros": "person"}
    assert "entities" in EXTRACTION_SCHEMA["properties"]["facts"]["items"]["required"]


def test_types_from_an_extraction_job_type_the_graph_and_survive_a_restore() -> None:
    driver = Driver()
    facts = [NewFact(id="f1", content="The user owes Gandros a favour for the rescue.", entities=("Gandros",),
                     entity_types={"Gandros": "person"}),
             NewFact(id="f2", content="Gandros lives in the Black Tower.",
                     entities=("Gandros", "Black Tower"),
                     entity_types={"Gandros": "person", "Black Tower": "place"})]
    reply = driver.send(ApplyExtraction(session_id="s1", first=0, upto=2, facts=facts, now=driver.tick()))
    assert reply.status == "committed"
    assert driver.send(GetEntity(name="gandros")).entity.type == "person"
    assert driver.send(ListEntities(entity_type="place")).entities[0].name == "Black Tower"
    driver.send(DeclareEntity(name="Gandros", entity_type="npc", now=driver.tick()))  # a declaration wins
    for memory in (driver.memory, restored(driver.memory)):
        assert memory.handle(GetEntity(name="Gandros")).entity.type == "npc"
        assert memory.handle(GetEntity(name="Black Tower")).entity.type == "place"


# -- the incremental graph is the graph rebuilt from scratch ----------------------------------------
PHRASES = ["Gandros came.", "We met Gandross at NASA.", "Caroline: hi Mel!", "Melanie: the Black Tower fell.",
           "The Blacktower is cold.", "National Aeronautics and Space Administration called.",
           "Appreciate it, Aria.", "Appreciate it.", "Aria and Oliver sang in Saltmere.",
           "the old mage smiled"]
NAMES = ["Gandros", "Mel", "Black Tower", "NASA", "Aria", "Saltmere", "old mage", "Oliver"]


class GraphMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.graph = EntityGraph()
        self.docs: dict[int, str] = {}

    @rule(doc=st.integers(0, 7), text=st.sampled_from(PHRASES))
    def add(self, doc: int, text: str) -> None:
        self.graph.add(doc, text)
        self.docs[doc] = text

    @rule(doc=st.integers(0, 7))
    def remove(self, doc: int) -> None:
        self.graph.remove(doc)
        self.docs.pop(doc, None)

    @rule(name=st.sampled_from(NAMES), into=st.sampled_from(NAMES))
    def merge(self, name: str, into: str) -> None:
        if self.graph.key(name) != self.graph.key(into):
            self.graph.merge(Merge(name, into))

    @rule(name=st.sampled_from(NAMES))
    def unmerge(self, name: str) -> None:
        if self.graph.unmerge(name) is not None:
            self._rebuild(self.graph)

    @rule(name=st.sampled_from(NAMES), aliases=st.lists(st.sampled_from(NAMES), max_size=2))
    def declare(self, name: str, aliases: list[str]) -> None:
        self.graph.declare(Declared(name, "npc", tuple(a for a in aliases if a != name)))
        self._rebuild(self.graph)

    def _rebuild(self, graph: EntityGraph) -> None:
        graph.rebuild((doc, text, None, ()) for doc, text in sorted(self.docs.items()))

    @invariant()
    def same_as_rebuilt(self) -> None:
        fresh = EntityGraph()
        fresh.load_extra(self.graph.to_extra())
        self._rebuild(fresh)
        assert self.graph.entities() == fresh.entities()
        for entity in fresh.entities():
            assert self.graph.keys_of(entity) == fresh.keys_of(entity)
            assert self.graph.docs_of(entity) == fresh.docs_of(entity)
            assert self.graph.type_of(entity) == fresh.type_of(entity)
            assert self.graph.neighbours(entity) == fresh.neighbours(entity)
        assert self.graph.relations() == fresh.relations() and self.graph.mentions == fresh.mentions


TestGraphMachine = GraphMachine.TestCase
TestGraphMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


# -- the graph sidecar: a restart need not find the mentions again -----------------------------------
def graph_summary(memory: ScopeMemory) -> list[Any]:
    page = memory.handle(ListEntities(limit=1000))
    return [(e, memory.handle(GetEntity(name=e.name, memories=100))) for e in page.entities]


def test_a_restore_takes_the_mentions_from_the_sidecar_and_falls_back_when_it_cannot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    driver = campaign()
    driver.remember("Caroline: I met Mel at NASA.", "Melanie: the Black Tower fell.")
    driver.send(MergeEntities(names=["Grey Mage"], into="Gandros", now=driver.tick()))
    expected = graph_summary(driver.memory)
    image = snapshot_image(driver.memory)
    assert GRAPH_SIDECAR in image.sidecars

    def no_detection(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the mentions were found again")

    with monkeypatch.context() as patched:
        patched.setattr(graph_module, "mentions", no_detection)
        assert graph_summary(ScopeMemory.restore(KEY, image, driver.memory.settings)) == expected
    damaged = Image(image.records, image.extra, {**image.sidecars, GRAPH_SIDECAR: b"\x93not a sidecar"})
    assert graph_summary(ScopeMemory.restore(KEY, damaged, driver.memory.settings)) == expected
    other = ScopeMemory.restore(KEY, image, replace(driver.memory.settings, entity_detection=False))
    assert "Black Tower" not in {e.name for e in other.handle(ListEntities()).entities}


def graph_state(graph: EntityGraph) -> dict[str, Any]:
    return {name: getattr(graph, name) for name in (
        "_mentions", "_name_docs", "_surfaces", "_strong", "_speakers",
        "_acronyms", "_unembedded", "_changes")}


def _earlier_sidecar(graph: EntityGraph, piece: int) -> bytes:
    """``graph``'s sidecar in the form written until 2026-11-27 (memories in pieces of
    ``piece``, each memory's mentions in full), which a restore still reads."""
    docs = list(graph._mentions)
    parts = [docs[start : start + piece] for start in range(0, len(docs), piece)]
    pieces = [msgspec.Raw(graph_module._encode_sidecar(graph_module._Piece(
        docs=part, names=[graph._mentions[doc][0] for doc in part], flags=[graph._mentions[doc][1] for doc in part],
        surfaces=[graph._mentions[doc][2] for doc in part]))) for part in parts]
    return graph_module._encode_sidecar(graph_module._Pieces(
        graph_module.DETECTION_VERSION, graph.detect, graph.fold_accents, graph._gazetteer_signature(),
        len(docs), pieces))


@pytest.mark.parametrize("form", ["table", "earlier"])
@pytest.mark.parametrize("piece", [8192, 7])
def test_a_graph_loaded_from_its_sidecar_holds_the_state_adding_each_memory_gave(
        piece: int, form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the sidecar is placed without a call per name (a restore of a million memories): a
    # table of the distinct mentions a row at a time (7: its rows in pieces), or, in the
    # earlier form, a piece of memories at a time (7 memories: the 59 with mentions in 9 pieces)
    monkeypatch.setattr(graph_module, "_PIECE", piece)
    graph = EntityGraph()
    graph.declare(Declared("Gandros", "npc", ("the grey one",), 1.0))
    texts = ["Caroline: I met Mel at NASA with Gandros.", "Melanie: the Black Tower fell, said the NSA.",
             "Caroline: Black Tower and black tower again, Mel.", "a line naming no one", "Melanie: NASA!",
             "Melanie: Zed Quill and Mel, Gandros said.", "Caroline: NSA, nsa and the NASA."]
    for doc in range(60):
        graph.add(doc * 3, texts[doc % len(texts)], author=["Caroline", "Melanie", None][doc % 3],
                  entities=["Zed Quill"] if doc % 11 == 0 else ())
    graph.remove(9)
    sidecar = graph.to_sidecar() if form == "table" else _earlier_sidecar(graph, piece)
    if form == "table":
        table = graph_module._decode_table(sidecar)
        distinct = len(set(graph._mentions.values()))  # (the rows: fewer than the memories)
        assert distinct < len(graph._mentions) and len(table.pieces) == -(-distinct // piece)
        # a table whose rows are not in the order the docs first name them loads the same
        rows = [row for raw in table.pieces for row in zip(*msgspec.structs.astuple(graph_module._decode_rows(raw)),
                                                           strict=True)]
        rows.reverse()
        sidecar = graph_module._encode_sidecar(msgspec.structs.replace(
            table, rows=(len(rows) - 1 - np.frombuffer(table.rows, dtype="<i4")).astype("<i4").data,
            pieces=[msgspec.Raw(graph_module._encode_sidecar(graph_module._Rows(
                *(list(part) for part in zip(*rows[start : start + piece], strict=True)))))
                for start in range(0, len(rows), piece)]))
    loaded = EntityGraph()
    loaded.declare(Declared("Gandros", "npc", ("the grey one",), 1.0))
    assert loaded.load_sidecar(sidecar, range(0, 180, 3))
    state = graph_state(graph)
    # a restore counts each memory placed; a live graph counted its adds and removals too
    assert {k: v for k, v in graph_state(loaded).items() if k != "_changes"} == \
        {k: v for k, v in state.items() if k != "_changes"}
    # in the same order too: the counters' and holders' keys, the spellings of each
    for name in ("_name_docs", "_surfaces", "_strong", "_speakers", "_acronyms"):
        assert list(getattr(loaded, name)) == list(state[name]), name
    assert [list(counts) for counts in loaded._surfaces.values()] == [list(c) for c in graph._surfaces.values()]
    assert loaded._changes == len(graph._mentions)
    assert [(e, sorted(loaded.docs_of(e))) for e in loaded.entities()] == \
        [(e, sorted(graph.docs_of(e))) for e in graph.entities()]
    # one object for each name, spelling and tuple of them (a sidecar decodes one per mention)
    for part in range(3):
        values = [mentions[part] for mentions in loaded._mentions.values()]
        assert len({id(value) for value in values}) == len(set(values))
    assert len({id(value) for value in loaded._mentions.values()}) == len(set(loaded._mentions.values()))
    names = [name for each, _, _ in loaded._mentions.values() for name in each]
    assert len({id(name) for name in names}) == len(set(names))
    # and it goes on as the graph it was loaded from
    for each in (graph, loaded):
        each.remove(0)
        each.add(300, texts[0], author="Caroline")
    assert {k: v for k, v in graph_state(loaded).items() if k != "_changes"} == \
        {k: v for k, v in graph_state(graph).items() if k != "_changes"}


def test_memories_added_one_by_one_share_the_tuples_they_repeat() -> None:
    # a tuple of names, flags or spellings is 60-100 bytes a memory: equal ones are one object
    texts = ["Caroline: I met Mel at NASA.", "Melanie: NASA again!", "Caroline: I met Mel at NASA."]
    graph = EntityGraph()
    for doc in range(30):
        graph.add(doc, texts[doc % 3], author=["Caroline", "Melanie", "Caroline"][doc % 3])
    for values in ([mentions[part] for mentions in graph._mentions.values()] for part in range(3)):
        assert len(set(values)) < len(values)
        assert len({id(value) for value in values}) == len(set(values))
    triples = list(graph._mentions.values())
    assert len({id(value) for value in triples}) == len(set(triples)) < len(triples)
    # the kept tuples are let go when too many (and kept again as they come): nothing changes
    before = graph_state(graph)
    graph_module._SHARED.clear()
    for doc in range(30, 33):
        graph.add(doc, texts[doc % 3], author=["Caroline", "Melanie", "Caroline"][doc % 3])
        graph.remove(doc)
    assert {k: v for k, v in graph_state(graph).items() if k != "_changes"} == \
        {k: v for k, v in before.items() if k != "_changes"}


def test_a_sidecar_naming_a_name_twice_for_one_memory_is_placed_as_adding_it_would() -> None:
    # (a sidecar written here never does: a memory's names are a dict's keys; a table's row,
    # and a memory of the earliest form, every memory in one piece, which is still read)
    empty = graph_module._decode_table(EntityGraph().to_sidecar())
    names, flags, surfaces = [("mel", "nasa", "mel"), ("nasa",)], [(1, 1, 3), (1,)], [("Mel", "NASA", "MEL"),
                                                                                      ("NASA",)]
    twice = graph_module._Sidecar(empty.version, empty.detect, empty.fold_accents, empty.gazetteer, docs=[4, 7],
                                  names=names, flags=flags, surfaces=surfaces)
    table = msgspec.structs.replace(
        empty, docs=np.array([4, 7], dtype="<i4").data, rows=np.array([0, 1], dtype="<i4").data,
        pieces=[msgspec.Raw(graph_module._encode_sidecar(graph_module._Rows(names, flags, surfaces)))])
    placed = EntityGraph()
    placed._place(4, {"mel": (3, "MEL"), "nasa": (1, "NASA")})
    placed._place(7, {"nasa": (1, "NASA")})
    for sidecar in (twice, table):
        loaded = EntityGraph()
        assert loaded.load_sidecar(graph_module._encode_sidecar(sidecar), [4, 7])
        assert graph_state(loaded) == graph_state(placed)


def test_expansions_kept_stay_consistent_when_searches_ask_side_by_side() -> None:
    # searches of a large scope run beside its actor, several at a time
    import random
    import sys
    import threading

    graph = EntityGraph()
    names = [f"Person{chr(65 + i % 26)}{chr(65 + i // 26)}" for i in range(120)]
    for doc in range(1200):
        graph.add(doc, "x", entities=[names[doc % 120], names[(doc * 7) % 120]])
    # one entity (the memo's sets, shared) and two (unions of their own)
    queries = [f"what did {name} say" for name in names] + \
        [f"did {name} meet {names[(i + 1) % 120]}" for i, name in enumerate(names)]
    errors: list[BaseException] = []

    def ask(seed: int) -> None:
        chosen = random.Random(seed)
        try:
            for _ in range(3000):
                graph.expansion(queries[chosen.randrange(len(queries))])
        except BaseException as exc:  # reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=ask, args=(seed,)) for seed in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert graph._expansion_docs == sum(graph_module._own_docs(e) for e in graph._expansions.values())
    assert graph._expansion_docs > 0
    assert len(graph._expansions) <= graph_module._EXPANSIONS_MAX


@pytest.mark.parametrize("mention_only", [0.0, 0.25, 1.0])
def test_an_expansions_lift_is_the_mean_over_its_entities_of_saying_naming_or_neither(
        mention_only: float) -> None:
    def docs(*ids: int) -> np.ndarray:
        return np.array(ids, dtype=np.int64)

    each = ((docs(1, 2, 3), docs(1)),   # says 1; names 2 and 3
            (docs(3, 4), docs()),       # never speaks: naming counts fully
            (docs(2, 5), docs(5)))
    expansion = graph_module.Expansion(entities=("a", "b", "c"), aliases=(), neighbours=(),
                                       docs=docs(1, 2, 3, 4, 5), each=each)
    expected = {1: 1.0 / 3, 2: 2 * mention_only / 3, 3: (mention_only + 1.0) / 3, 4: 1.0 / 3,
                5: 1.0 / 3, 6: 0.0}
    got = expansion.lifts(list(expected), mention_only)
    assert got == pytest.approx(list(expected.values()), abs=1e-15)
    no_entity = graph_module.Expansion(entities=(), aliases=(), neighbours=(), docs=docs())
    assert no_entity.lifts([1, 2], mention_only) == [0.0, 0.0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sets(st.integers(0, 5000), max_size=300), max_size=4))
def test_the_union_of_several_entities_memories_is_every_one_ascending(sets: list[set[int]]) -> None:
    # (a mask of the ids when they are many, a sort when they are few among large ids)
    arrays = [np.array(sorted(docs), dtype=np.int64) for docs in sets]
    union = graph_module._union(arrays)
    assert union.tolist() == sorted(set().union(*sets)) and union.dtype == np.int64
    assert not union.flags.writeable


def test_a_sidecar_that_does_not_fit_places_no_mention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_module, "_PIECE", 2)
    graph = EntityGraph()
    for doc in range(8):
        graph.add(doc, f"Caroline met Mel at NASA, day {doc}." if doc % 3 else "Mel and NASA.", author="Caroline")
    sidecar = graph.to_sidecar()
    table = graph_module._decode_table(sidecar)
    assert len(table.pieces) == 1 and np.frombuffer(table.rows, dtype="<i4").tolist() == [0, 1, 1, 0, 1, 1, 0, 1]
    earlier = _earlier_sidecar(graph, 2)
    header = graph_module._decode_pieces(earlier)
    assert len(header.pieces) == 4 and header.count == 8

    def as_table(**changed: Any) -> bytes:
        return graph_module._encode_sidecar(msgspec.structs.replace(table, **changed))

    def int32s(values: list[int]) -> memoryview:
        return np.array(values, dtype="<i4").data

    fresh = graph_state(EntityGraph())
    for docs, made in [(range(7), sidecar),  # a doc it names is not the owner's
                       (range(1, 8), sidecar),
                       (range(8), as_table(docs=int32s([0, 1, 2, 3, 5, 4, 6, 7]))),  # not ascending
                       (range(8), as_table(docs=int32s([0, 1, 2, 3, 4, 4, 6, 7]))),  # one twice
                       (range(8), as_table(docs=int32s([-1, 1, 2, 3, 4, 5, 6, 7]))),
                       (range(8), as_table(docs=int32s([0, 1, 2, 3, 4, 5, 6, 2**31 - 1]))),  # (no 2 GB mask)
                       (range(8), as_table(docs=int32s(list(range(7))))),  # rows of other lengths
                       (range(8), as_table(docs=memoryview(b"\x00" * 31))),  # no int32s
                       (range(8), as_table(rows=int32s([0, 1, 1, 0, 2, 1, 0, 1]))),  # a row it lacks
                       (range(8), as_table(rows=int32s([0, 1, 1, 0, -1, 1, 0, 1]))),
                       (range(8), as_table(pieces=[msgspec.Raw(b"\x93")])),  # a damaged piece
                       (range(8), as_table(pieces=[msgspec.Raw(graph_module._encode_sidecar(graph_module._Rows(
                           [("mel", "nasa")], [(1, 1)], [("Mel",)])))])),  # a row of other lengths
                       (range(7), earlier),
                       (range(8), graph_module._encode_sidecar(msgspec.structs.replace(
                           header, pieces=[*header.pieces[:3], msgspec.Raw(b"\x93")]))),  # a damaged piece
                       (range(8), graph_module._encode_sidecar(msgspec.structs.replace(header, count=9))),
                       # a piece given twice (its docs placed twice), its count made to match
                       (range(8), graph_module._encode_sidecar(msgspec.structs.replace(
                           header, pieces=[*header.pieces, header.pieces[0]], count=10)))]:
        loaded = EntityGraph()
        assert not loaded.load_sidecar(made, docs)
        assert graph_state(loaded) == fresh
    for made in (sidecar, earlier):
        assert EntityGraph().load_sidecar(made, range(8))
        assert EntityGraph().load_sidecar(made, range(12))  # (memories without mentions too)
        # its header alone says whether it was made with these settings (a restore asks first)
        assert EntityGraph().sidecar_fits(made) and not EntityGraph(detect=False).sidecar_fits(made)
    whole = graph_module._Sidecar(header.version, header.detect, header.fold_accents, header.gazetteer, [], [], [],
                                  [])
    assert EntityGraph(detect=False).sidecar_fits(graph_module._encode_sidecar(whole))  # (not read: True)
    empty = EntityGraph().to_sidecar()
    loaded = EntityGraph()
    assert loaded.load_sidecar(empty, range(8)) and graph_state(loaded) == fresh


def _plain_reading(graph: EntityGraph, entity: str) -> tuple[list[int], list[int], dict[str, list[int]]]:
    """An entity's memories, those it says and, per other entity, the memories naming
    both, read the long way: memory by memory, name by name."""
    keys = set(graph.keys_of(entity))
    docs = sorted(doc for doc in graph._mentions if keys & set(graph.names_of(doc)))
    spoken = []
    shared: dict[str, list[int]] = {}
    for doc in docs:
        names, flags, _ = graph._mentions[doc]
        if any(name in keys and flag & graph_module._SPEAKER and graph._speakers.get(name)
               for name, flag in zip(names, flags, strict=True)):
            spoken.append(doc)
        for other in sorted({graph.resolve(name) for name in names} - {entity, None}):
            shared.setdefault(str(other), []).append(doc)
    return docs, spoken, shared


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Melanie", "Caroline", "Mel", "Oliver", None]),
                          st.lists(st.sampled_from(["Mel", "Melanie", "Caroline", "NASA", "Oliver", "Lisbon",
                                                    "the Black Tower", "Oakvale"]), max_size=4)),
                min_size=1, max_size=30),
       st.booleans())
def test_an_entitys_memories_speakers_and_neighbours_are_read_as_the_long_way(
        memories: list[tuple[str | None, list[str]]], merged: bool) -> None:
    """One pass over an entity's memories finds what reading them memory by memory
    does: its memories, those it says (as speaker or author) and its neighbours with
    the memories they share, each counted once however many names it has there."""
    graph = EntityGraph()
    for doc, (speaker, named) in enumerate(memories):
        words = " and ".join(named) or "nothing much"
        if speaker is not None and doc % 2:
            graph.add(doc, f"{speaker}: we saw {words} today.")
        else:
            graph.add(doc, f"We saw {words} today.", author=speaker)
    if merged:
        graph.merge(Merge("Oakvale", "Lisbon"))
    for entity in graph.entities():
        docs, spoken, shared = _plain_reading(graph, entity)
        assert graph._mentioning(entity).tolist() == docs
        assert graph.spoken_by(entity).tolist() == spoken
        assert {other: list(held) for other, _, held in graph.neighbours(entity)} == shared
        assert [count for _, count, _ in graph.neighbours(entity)] == [len(held) for _, _, held in
                                                                      graph.neighbours(entity)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.integers(0, 199), st.lists(st.tuples(st.booleans(), st.integers(0, 299)),
                                                           max_size=400))
def test_a_names_holders_are_the_set_of_memories_naming_it(held: int, taken: int,
                                                           steps: list[tuple[bool, int]]) -> None:
    """A name's holders (an array with the docs let go since, compacted at a
    quarter) hold what a set does, through adds, removals and adds again."""
    first = 0
    holders, expected = HeldDocs(first), {first}
    for adding, doc in ([(True, doc) for doc in range(1, held)] + [(False, doc) for doc in range(1, taken)]
                        + steps):
        if adding and doc not in expected:
            holders.add(doc)
            expected.add(doc)
        elif not adding and doc in expected and len(expected) > 1:
            holders.discard(doc)
            expected.discard(doc)
        assert len(holders) == len(expected)
        if holders.gone is not None:
            assert 4 * len(holders.gone) <= len(holders.docs)
    assert holders.array().tolist() == sorted(expected)
    fresh = HeldDocs(min(expected))
    for doc in sorted(expected - {min(expected)}, reverse=True):
        fresh.add(doc)
    assert holders == fresh  # (equal as sets, whatever order or docs let go they hold)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 70), st.sampled_from(["a", "b", "c"])), max_size=200))
def test_the_memories_mentions_by_doc_are_what_a_dict_holds(steps: list[tuple[bool, int, str]]) -> None:
    """The mentions kept by doc slot (a list) read as a dict of the docs holding
    some: look-ups, removals, the docs ascending, their count, equality."""
    by_doc, expected = graph_module._ByDoc(), {}
    for putting, doc, name in steps:
        mention = ((name,), (0,), (name,))
        if putting:
            by_doc[doc] = mention
            expected[doc] = mention
        else:
            assert by_doc.pop(doc) == expected.pop(doc, None)
        assert len(by_doc) == len(expected)
        assert (doc in by_doc) == (doc in expected)
        assert by_doc.get(doc) == expected.get(doc)
    assert list(by_doc) == sorted(expected)
    assert dict(by_doc.items()) == expected and list(by_doc.values()) == [expected[d] for d in sorted(expected)]
    other = graph_module._ByDoc()
    for doc in sorted(expected, reverse=True):
        other[doc] = expected[doc]
    assert other == by_doc
    assert by_doc.get(-1) is None and -1 not in by_doc
    with pytest.raises(KeyError):
        by_doc[max(expected, default=0) + 1]
    with pytest.raises(ValueError, match="never negative"):
        by_doc[-1] = ((), (), ())


def test_a_sidecar_placing_a_negative_doc_does_not_fit() -> None:
    graph = EntityGraph()
    graph.add(0, "Gandros met Mira.")
    with pytest.raises(ValueError, match="no doc id"):
        graph._place_rows([(-2, ("gandros",), (0,), ("Gandros",))], graph_module.Repeats())
    assert list(graph._mentions) == [0]


def test_an_entity_of_many_memories_loses_and_regains_them() -> None:
    graph = EntityGraph()
    for doc in range(300):
        graph.add(doc, f"Gandros: I met Mira on day {doc}." if doc % 2 else f"Gandros met Mira on day {doc}.")
    for doc in range(0, 300, 3):
        graph.remove(doc)
    graph.add(3, "Gandros came back.")
    for doc in (1, 2, 4):  # (let go of, not yet copied out: then held again)
        graph.remove(doc)
    graph.add(2, "Gandros came back.")
    expected = {doc for doc in range(300) if doc % 3} - {1, 4} | {3}
    assert graph.docs_of("gandros") == expected
    assert graph.docs_of("mira") == expected - {2, 3}
    assert graph._mentioning("gandros").tolist() == sorted(expected)
    for entity in graph.entities():  # (their holders past the array's direct removals)
        docs, spoken, shared = _plain_reading(graph, entity)
        assert graph.spoken_by(entity).tolist() == spoken
        assert bool(spoken) == (entity == "gandros")
        assert {other: list(held) for other, _, held in graph.neighbours(entity)} == shared
