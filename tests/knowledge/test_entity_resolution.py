"""Entity resolution by embeddings, sans-io: names whose vectors are close become
aliases by a merge record marked ``embedding``; types, declarations, speakers,
sibling words and unmerges veto it; the decision is the same whatever order the
names came in, and a replay or a restore decides the same without the model."""

from __future__ import annotations

import gc
import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memories.scope_support import KEY, Driver, restored, run_work

from mnemex.effects import Job, JobResult, Step
from mnemex.errors import InvalidInput
from mnemex.knowledge.graph import EntityGraph
from mnemex.knowledge.resolution import (
    NameVectors,
    decode_rows,
    default_similarity,
    encode_rows,
    nearest_merges,
    siblings,
    vetoed,
)
from mnemex.memories.behaviour import ScopeMemory, is_scope_write
from mnemex.memories.graph import NameEmbedFailed
from mnemex.memories.protocol import (
    DeclareEntity,
    EntityChanged,
    GetEntity,
    GetGraphStats,
    NewFact,
    ResolveNames,
    UnmergeEntity,
)
from mnemex.models.hashing import HashingEmbedder

HASHING = HashingEmbedder()  # the default 384 dimensions, whose threshold was measured
THRESHOLD = 0.8


def rows(*keys: str) -> Any:
    return HASHING.embed(list(keys))


def resolve(driver: Driver, keys: list[str], threshold: float = THRESHOLD) -> Any:
    return driver.send(ResolveNames(keys=keys, vectors=encode_rows(rows(*keys)), embedder=HASHING.name,
                                    dim=HASHING.dim, threshold=threshold, now=driver.tick()))


class Journaled(Driver):
    """A driver that keeps the writes a kernel would journal (``sent``)."""

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.sent: list[Any] = []

    def send(self, command: Any) -> Any:
        out = self.memory.handle(command)
        if is_scope_write(command) and not (isinstance(out, Step) and out.unchanged):
            self.sent.append(command)
        if isinstance(out, Step):
            self.jobs.extend(effect for effect in out.effects if isinstance(effect, Job))
            return out.reply
        return out


def tower_campaign() -> Journaled:
    driver = Journaled()
    driver.remember("We camped below the Tower of Gandros.", session_id="s1")
    driver.remember("Gandros Tower was dark at midnight.", session_id="s2")
    driver.remember("Guards shut the North Gate at Saltmere.", session_id="s2")
    driver.remember("Fire took the South Gate at Saltmere.", session_id="s3")
    return driver


# -- the rules ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b", "expected"), [
    ("session 1", "session 2", True),
    ("north korea", "south korea", True),
    ("york", "new york", True),
    ("world war i", "world war ii", True),
    ("king aldric", "prince aldric", True),
    ("tower of gandros", "gandros tower", False),
    ("new york city", "new york", False),
    ("paris", "paris hilton", False),  # no sibling word: the threshold keeps these apart
])
def test_names_differing_by_a_number_direction_rank_or_kinship_are_siblings(a: str, b: str,
                                                                            expected: bool) -> None:
    assert siblings(a, b) is expected


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("kelcor", "halkelcor", True),             # one word each: the spelling rules judge those
    ("lorvinmar", "lorvinmar vale", True),      # a name and a longer one holding it
    ("paris", "paris hilton", True),
    ("john smith", "jane smith", True),         # namesakes: one word differs
    ("anbel vale", "anbelor vale", True),
    ("dr chen", "doctor chen", False),          # an abbreviation
    ("saltmere harbor", "saltmere harbour", False),  # one letter
    ("acme corp", "acme corporation", False),
    ("new york", "new york city", False),       # a longer name of two words or more may be the same
    ("tower of gandros", "gandros tower", False),
    ("session 1", "session 2", True),
])
def test_pairs_vetoed_whatever_their_vectors_say(a: str, b: str, expected: bool) -> None:
    assert vetoed(a, b) is expected and vetoed(b, a) is expected


def test_thresholds_are_known_for_the_measured_embedders_only() -> None:
    assert default_similarity(HASHING.name) == 0.80
    assert default_similarity("minilm-l6-v2-int8") == 0.92
    assert default_similarity(HashingEmbedder(dim=32).name) is None  # fewer dimensions collide more
    assert default_similarity("text-embedding-3-small") is None and default_similarity(None) is None


def test_rows_travel_as_float16_and_bad_rows_are_refused() -> None:
    matrix = rows("gandros", "black tower")
    back = decode_rows(encode_rows(matrix), 2, HASHING.dim)
    assert back.dtype == np.float32 and np.abs(back - matrix).max() < 1e-3
    with pytest.raises(ValueError, match="2 names of dimension 384 need 1536"):
        decode_rows(encode_rows(matrix[:1]), 2, HASHING.dim)


BATCH = ["tower of gandros", "gandros tower", "gandros", "staff of gandros", "gandros's staff", "north gate",
         "south gate", "drowned rat", "drowned rat inn"]


def batch_merges(keys: list[str]) -> list[tuple[str, str, float]]:
    return nearest_merges(NameVectors(), keys, rows(*keys), HASHING.name, threshold=THRESHOLD,
                          allowed=lambda a, b: True)


def test_a_batch_merges_reordered_words_and_not_siblings() -> None:
    made = {(a, b) for a, b, _ in batch_merges(BATCH)}
    assert made == {("tower of gandros", "gandros tower"), ("staff of gandros", "gandros's staff"),
                    ("drowned rat inn", "drowned rat")}


@given(st.permutations(BATCH))
@settings(max_examples=30, deadline=None)
def test_a_batch_decides_the_same_merges_whatever_order_its_names_came_in(keys: list[str]) -> None:
    vectors = NameVectors()
    made = nearest_merges(vectors, keys, rows(*keys), HASHING.name, threshold=THRESHOLD,
                          allowed=lambda a, b: True)
    assert made == batch_merges(BATCH)
    assert sorted(vectors.keys) == sorted(keys)


def test_name_vectors_hold_room_for_the_names_they_have_growing_by_doubling() -> None:
    # a live scope of one name held 64 rows of 384 dimensions (98 KB: 20,000 users took 2 GB)
    vectors = NameVectors()
    row_bytes = HASHING.dim * 4
    gc.collect()  # (no graph of another test holds a row for lisbon)
    vectors.add(["lisbon"], rows("lisbon"), HASHING.name)
    assert vectors.nbytes == row_bytes
    names = [f"name {i}" for i in range(5)]
    vectors.add(names, rows(*names), HASHING.name)
    assert len(vectors) == 6 and vectors.nbytes == 6 * row_bytes
    vectors.add(["name 5"], rows("name 5"), HASHING.name)  # room doubles
    assert vectors.nbytes == 12 * row_bytes
    assert np.array_equal(vectors.matrix, rows("lisbon", *names, "name 5"))


def test_graphs_whose_first_name_is_the_same_share_its_one_row_until_a_second() -> None:
    gc.collect()  # (no graph of another test holds a row for lisbon)
    row_bytes = HASHING.dim * 4
    first, second, other = NameVectors(), NameVectors(), NameVectors()
    first.add(["lisbon"], rows("lisbon"), HASHING.name)
    second.add(["lisbon"], rows("lisbon"), HASHING.name)
    assert second._matrix is first._matrix and not second.matrix.flags.writeable
    assert (first.nbytes, second.nbytes) == (row_bytes, 0)  # counted once, by the graph that made it
    other.add(["lisbon"], rows("porto"), HASHING.name)  # other values for the name: a row of its own
    assert np.array_equal(other.matrix, rows("porto")) and np.array_equal(first.matrix, rows("lisbon"))
    assert other.nbytes == row_bytes
    second.add(["porto", "lisbon"], rows("porto", "lisbon"), HASHING.name)  # a second name: a copy, grown
    assert second.matrix.flags.writeable and second.nbytes == 2 * row_bytes
    assert np.array_equal(second.matrix, rows("lisbon", "porto")) and second.row == {"lisbon": 0, "porto": 1}
    assert np.array_equal(first.matrix, rows("lisbon"))  # the shared row is unchanged
    again = NameVectors()
    again.load_extra(first.to_extra())  # restored (float16 in the snapshot): a row of those values
    assert np.array_equal(again.matrix, decode_rows(encode_rows(rows("lisbon")), 1, HASHING.dim))
    assert again.keys == ["lisbon"]
    del first, other, again
    gc.collect()
    later = NameVectors()  # no graph holds the row any more: it is not kept for later ones
    later.add(["lisbon"], rows("lisbon"), HASHING.name)
    assert later.nbytes == row_bytes


def test_graph_vetoes_other_types_declared_pairs_and_two_speakers() -> None:
    def graph_of(*names: tuple[str, str | None]) -> EntityGraph:
        graph = EntityGraph(detect=False)
        for doc, (name, kind) in enumerate(names):
            graph.add(doc, name, None, [name])
            if kind:
                graph.note_types({name: kind})
        return graph

    def joined(graph: EntityGraph, a: str, b: str) -> bool:
        keys = graph.unembedded(10)
        graph.place_vectors(keys, rows(*keys), HASHING.name, THRESHOLD, 5.0)
        return graph.resolve(a) == graph.resolve(b)

    assert joined(graph_of(("Tower of Gandros", "location"), ("Gandros Tower", None)), "Gandros Tower",
                  "Tower of Gandros")
    assert not joined(graph_of(("Tower of Gandros", "location"), ("Gandros Tower", "organization")),
                      "Gandros Tower", "Tower of Gandros")
    declared = EntityGraph(detect=False)
    from mnemex.knowledge.graph import Declared
    declared.declare(Declared("Tower of Gandros", "location"))
    declared.declare(Declared("Gandros Tower", "location"))
    assert not joined(declared, "Gandros Tower", "Tower of Gandros")
    speakers = EntityGraph()
    speakers.add(0, "Mara Voss: hello")
    speakers.add(1, "Voss Mara: hello")
    assert speakers.resolve("Mara Voss") != speakers.resolve("Voss Mara")
    assert not joined(speakers, "Mara Voss", "Voss Mara")
    one_speaks = EntityGraph()
    one_speaks.add(0, "Mara Voss: hello")
    one_speaks.add(1, "We met Voss Mara.")
    assert joined(one_speaks, "Mara Voss", "Voss Mara")


# -- in the scope: journaled, replayed, snapshotted, reversible ------------------------------------------
def test_close_names_become_aliases_by_an_embedding_record_that_an_unmerge_undoes() -> None:
    driver = tower_campaign()
    reply = resolve(driver, ["gandros tower", "north gate", "saltmere", "south gate", "tower of gandros"])
    assert isinstance(reply, EntityChanged) and len(reply.entities) == 1
    entity = reply.entities[0]
    assert entity.mentions == 2 and {entity.name, *entity.aliases} >= {"Tower of Gandros", "Gandros Tower"}
    [record] = entity.merged
    assert (record.how, record.at) == ("embedding", driver.now) and record.score is not None
    assert record.score >= THRESHOLD
    # the gates are siblings (a direction apart): never merged, however close their vectors
    assert driver.send(GetEntity(name="North Gate")).entity.mentions == 1
    stats = driver.send(GetGraphStats())
    assert (stats.embedded_names, stats.embedding_merges, stats.merges) == (5, 1, 1)
    with pytest.raises(InvalidInput, match=f"it is what '{record.name}' merged into: unmerge those"):
        driver.memory.handle(UnmergeEntity(name=record.into, now=driver.tick()))
    undone = driver.send(UnmergeEntity(name=record.name, now=driver.tick()))
    assert sorted(e.mentions for e in undone.entities) == [1, 1]
    # a later batch does not join them again: the unmerge keeps them apart
    driver.remember("Gandros Towers rise over the bay.", session_id="s4")
    resolve(driver, ["gandros towers"])
    assert driver.send(GetEntity(name="Gandros Tower")).entity.mentions == 1


def test_a_replay_and_a_restore_decide_the_same_merges_without_the_model() -> None:
    driver = tower_campaign()
    resolve(driver, ["gandros tower", "tower of gandros", "north gate", "south gate", "saltmere"])
    driver.remember("We found the Staff of Gandros.", session_id="s4")
    driver.memory.snapshot()  # a snapshot in between changes nothing
    from_snapshot = restored(driver.memory)
    driver.remember("The Gandros Staff glowed.", session_id="s4")
    from_snapshot.handle(driver.sent[-1])
    keys = driver.memory.graph.unembedded(10)
    assert keys == ["gandros staff", "staff of gandros"]
    batch = ResolveNames(keys=keys, vectors=encode_rows(rows(*keys)), embedder=HASHING.name, dim=HASHING.dim,
                         threshold=THRESHOLD, now=driver.tick())
    live = driver.send(batch)
    assert from_snapshot.handle(batch) == live and len(live.entities) == 1
    replayed = ScopeMemory(KEY, driver.memory.settings)
    replayed.replay(driver.sent)
    for name in ("Gandros Tower", "Gandros Staff", "North Gate"):
        expected = driver.send(GetEntity(name=name))
        assert replayed.handle(GetEntity(name=name)) == expected == from_snapshot.handle(GetEntity(name=name))
    assert replayed.graph.vectors.keys == driver.memory.graph.vectors.keys
    assert restored(replayed).graph.to_extra() == driver.memory.graph.to_extra()


def test_the_threshold_journaled_with_the_vectors_decides_not_the_configuration() -> None:
    driver = tower_campaign()
    resolve(driver, ["gandros tower", "tower of gandros"], threshold=0.95)  # stricter than their 0.87
    assert driver.send(GetEntity(name="Gandros Tower")).entity.mentions == 1
    stricter = ScopeMemory(KEY, replace(driver.memory.settings, entity_similarity=0.5))
    stricter.replay(driver.sent)
    assert stricter.handle(GetEntity(name="Gandros Tower")).entity.mentions == 1


def test_extractor_types_keep_a_person_and_a_place_apart() -> None:
    driver = Journaled()
    facts = [NewFact(id="f1", content="Mara Voss captains the ship.", entities=("Mara Voss",),
                     entity_types={"Mara Voss": "person"}),
             NewFact(id="f2", content="Voss Mara is a harbour town.", entities=("Voss Mara",),
                     entity_types={"Voss Mara": "location"})]
    from mnemex.memories.protocol import ApplyExtraction
    driver.send(ApplyExtraction(session_id="s1", first=0, upto=2, facts=facts, now=driver.tick()))
    resolve(driver, ["mara voss", "voss mara"])
    assert driver.send(GetEntity(name="Voss Mara")).entity.type == "location"
    assert driver.send(GetEntity(name="Mara Voss")).entity.type == "person"


def test_bad_vectors_are_refused_and_change_nothing() -> None:
    driver = tower_campaign()
    good = dict(keys=["gandros tower"], vectors=encode_rows(rows("gandros tower")), embedder=HASHING.name,
                dim=HASHING.dim, threshold=THRESHOLD, now=driver.tick())
    for bad, message in [({"vectors": "not base64!"}, "vectors"), ({"dim": 12}, "vectors"),
                         ({"threshold": 0.2}, "threshold"), ({"keys": [""]}, "keys"), ({"embedder": ""}, "embedder")]:
        with pytest.raises(InvalidInput, match=message):
            driver.memory.handle(ResolveNames(**{**good, **bad}))
    assert len(driver.memory.graph.vectors) == 0
    driver.send(ResolveNames(**good))
    with pytest.raises(InvalidInput, match="holds name vectors of"):
        driver.memory.handle(ResolveNames(**{**good, "embedder": "other-model", "keys": ["saltmere"],
                                             "vectors": encode_rows(rows("saltmere"))}))


# -- the job beside the actor ---------------------------------------------------------------------------
async def embed384(texts: Any) -> Any:
    return HASHING.embed(list(texts))


def test_new_names_are_embedded_by_one_job_at_a_time_and_come_back_journaled() -> None:
    driver = Journaled(embed=embed384, embedder_name=HASHING.name, embedder_dim=HASHING.dim)
    driver.remember("We camped below the Tower of Gandros.", session_id="s1")
    names = [job for job in driver.jobs if job.name.startswith("scope.resolve-names")]
    assert len(names) == 1
    driver.remember("Gandros Tower was dark at midnight.", session_id="s2")  # one in flight: no second
    assert len([job for job in driver.jobs if job.name.startswith("scope.resolve-names")]) == 1
    driver.run_jobs()  # the first batch, then the names that came while it ran
    assert [type(c).__name__ for c in driver.sent].count("ResolveNames") == 2
    assert all(c.threshold == 0.80 for c in driver.sent if isinstance(c, ResolveNames))
    assert driver.send(GetEntity(name="Gandros Tower")).entity.mentions == 2
    assert driver.memory.graph.unembedded(10) == []
    # a failure is not journaled and is retried later
    driver.send(DeclareEntity(name="Aria", entity_type="npc", now=driver.tick()))
    [job] = [job for job in driver.jobs if job.name.startswith("scope.resolve-names")]
    driver.jobs.clear()
    failed = job.deliver(JobResult(error=RuntimeError("model down")))
    assert isinstance(failed, NameEmbedFailed) and not is_scope_write(failed)
    driver.send(failed)
    driver.remember("Aria sang.", session_id="s3")
    assert not driver.jobs
    driver.tick(61)
    driver.remember("Aria sang again.", session_id="s3")
    [retry] = driver.jobs
    assert run_work(retry.work) and retry.deliver(JobResult(value=run_work(retry.work))).keys == ["aria"]


@pytest.mark.parametrize("overrides", [{"entity_embeddings": False}, {"embed": None},
                                       {"embedder_name": HashingEmbedder(dim=32).name}])
def test_no_job_without_a_model_a_measured_threshold_or_when_turned_off(overrides: dict[str, Any]) -> None:
    base = {"embed": embed384, "embedder_name": HASHING.name, "embedder_dim": HASHING.dim}
    driver = Journaled(**{**base, **overrides})
    driver.remember("We camped below the Tower of Gandros.", session_id="s1")
    assert not [job for job in driver.jobs if job.name.startswith("scope.resolve-names")]
    configured = Journaled(**{**base, **overrides, "entity_similarity": 0.9})
    configured.remember("We camped below the Tower of Gandros.", session_id="s1")
    wanted = overrides.get("entity_embeddings", True) and overrides.get("embed", embed384) is not None
    assert bool([job for job in configured.jobs if job.name.startswith("scope.resolve-names")]) is wanted


def test_no_job_runs_in_a_replay() -> None:
    driver = Journaled(embed=embed384, embedder_name=HASHING.name, embedder_dim=HASHING.dim)
    driver.remember("We camped below the Tower of Gandros.", session_id="s1")
    replayed = ScopeMemory(KEY, driver.memory.settings)
    replayed.replay(driver.sent)
    assert replayed.names_since is None and replayed.graph.unembedded(5) == ["tower of gandros"]
    out = replayed.handle(GetGraphStats())
    assert not isinstance(out, Step)


def test_permutations_of_a_scope_give_one_grouping() -> None:
    texts = ["We camped below the Tower of Gandros.", "Gandros Tower was dark.", "The Drowned Rat Inn was full.",
             "We drank at the Drowned Rat."]
    groupings = set()
    for order in itertools.permutations(texts):
        driver = Journaled()
        for text in order:
            driver.remember(text)
        keys = driver.memory.graph.unembedded(20)
        resolve(driver, keys)
        graph = driver.memory.graph
        groupings.add(frozenset(frozenset(graph.keys_of(entity)) for entity in graph.entities()))
    assert len(groupings) == 1
