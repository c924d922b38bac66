"""The entity graph through ``mnemex.open_runtime``: query expansion on a small
campaign (the wizard Gandros, his tower, the favour he owes), each hit saying which
signal found it, and the graph kept across a restart (journal, then snapshot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from waiting import eventually

import mnemex

SCOPE = {"user_id": "gm", "app_name": "campaign"}
CAMPAIGN = [
    "The party rescued Gandros from the cells under the Black Tower.",
    "Gandros swore he owes the party a debt for the rescue and will repay it.",
    "Gandros promised Aria a spell of warding when the moon is full.",
    "The tower of Gandros stands on the cliffs above Saltmere.",
    "Aria bought a longsword from the smith in Saltmere.",
    "The innkeeper of the Drowned Rat waters down the ale.",
    "Bandits ambushed the caravan on the north road.",
    "The king's herald announced a tournament for the spring.",
]
DEBT = CAMPAIGN[1]


def config(tmp_path: Path | None = None, **overrides: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path) if tmp_path is not None else None, embedder="hashing",
                         **overrides)


async def campaign(rt: mnemex.MnemexRuntime) -> mnemex.ScopeRef:
    scope = rt.scope(**SCOPE)
    await scope.declare_entity("Gandros", type="npc", aliases=["the wizard", "the old mage"])
    await scope.remember_many([{"content": text, "session_id": f"session-{i // 3}"}
                               for i, text in enumerate(CAMPAIGN)])
    await names_resolved(scope)
    return scope


async def names_resolved(scope: mnemex.ScopeRef) -> None:
    """Wait for the job that embeds new entity names beside the scope to come back."""
    async def done() -> bool:
        return (await scope.graph_stats()).names_pending == 0

    await eventually(done, what="the entity names' vectors")


async def test_wizard_favor_finds_the_memories_about_gandros_debt() -> None:
    async with mnemex.open_runtime(config()) as rt:
        scope = await campaign(rt)
        result = await scope.search("wizard favor", top_k=5)
        contents = [hit.memory.content for hit in result.hits]
        # the hashing embedder knows no synonym of favor: the graph alone brings Gandros's memories
        assert DEBT in contents, contents
        assert set(contents) >= {text for text in CAMPAIGN if "Gandros" in text}
        debt = next(hit for hit in result.hits if hit.memory.content == DEBT)
        assert "graph" in debt.found_by and debt.scores["graph"] == 1.0 and debt.scores["expansion"] > 0
        assert all(hit.found_by for hit in result.hits)
        # the same search without expansion: nothing in the debt memory says wizard or favor
        async with mnemex.open_runtime(config(expansion=False)) as plain_rt:
            plain = await (await campaign(plain_rt)).search("wizard favor", top_k=5)
        assert DEBT not in [hit.memory.content for hit in plain.hits]
        assert all("graph" not in hit.found_by for hit in plain.hits)


async def test_an_actors_memories_include_those_naming_it_by_any_alias() -> None:
    """``actor_memories`` through the graph: "the old mage" is Gandros, so a memory
    that only says that is one of his; so is one stored with his actor_id."""
    async with mnemex.open_runtime(config()) as rt:
        scope = await campaign(rt)
        await scope.remember("The old mage hums while he brews tea.")
        await scope.remember("Owes the smith three silver coins.", actor_id="gandros")
        page = await scope.actor_memories("gandros")
        contents = {memory.content for memory in page.memories}
        assert "The old mage hums while he brews tea." in contents
        assert "Owes the smith three silver coins." in contents
        assert DEBT in contents and CAMPAIGN[4] not in contents
        assert (await scope.actor_memories("nobody")).memories == []


async def test_entity_reads_through_the_ref() -> None:
    async with mnemex.open_runtime(config()) as rt:
        scope = await campaign(rt)
        npcs = await scope.entities("npc")
        assert [(e.name, e.mentions, e.sessions) for e in npcs.entities] == [("Gandros", 4, 2)]
        detail = await scope.entity("the old mage", memories=2, neighbours=3)
        assert detail.entity.name == "Gandros" and len(detail.memories) == 2
        assert {link.entity.name for link in detail.neighbours} == {"Black Tower", "Aria", "Saltmere"}
        related = await scope.related("Gandros", depth=2)
        hops = {link.entity.name: link.hops for link in related.related}
        assert hops["Aria"] == 1 and hops["Saltmere"] == 1
        assert (await scope.entities(name="salt")).total == 1


async def test_the_graph_survives_a_restart(tmp_path: Path) -> None:
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = await campaign(rt)
        await scope.merge_entities(["Drowned Rat"], into="Saltmere")
        before = await scope.entity("Gandros")
        stats = await scope.graph_stats()
        assert stats.declared == 1 and stats.merges == 1
    # from the journal
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = rt.scope(**SCOPE)
        assert await scope.entity("Gandros") == before
        assert (await scope.entity("drowned rat")).entity.name == "Saltmere"
        assert await scope.graph_stats() == stats
        await rt.passivate("scope", (SCOPE["app_name"], SCOPE["user_id"]))  # a snapshot
        assert await scope.entity("the wizard") == before
        await scope.unmerge_entity("Drowned Rat")
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = rt.scope(**SCOPE)
        assert (await scope.entity("drowned rat")).entity.name == "Drowned Rat"
        assert (await scope.graph_stats()).merges == 0
        assert (await rt.graph_stats())["declared"] == 1


async def test_expansion_without_candidates_still_expands_the_words() -> None:
    async with mnemex.open_runtime(config(expansion_candidates=0, expansion_graph_weight=0.0)) as rt:
        scope = await campaign(rt)
        result = await scope.search("what does the wizard owe", top_k=8, min_score=None)
        debt = next(hit for hit in result.hits if hit.memory.content == DEBT)
        assert debt.scores["expansion"] > 0 and "graph" in debt.found_by and debt.scores["graph"] == 1.0


async def test_vector_expansion_moves_the_query_toward_the_named_entity() -> None:
    cosines = []
    for weight in (0.0, 1.0):
        async with mnemex.open_runtime(config(expansion_vector_weight=weight)) as rt:
            scope = await campaign(rt)
            result = await scope.search("wizard favor", top_k=8, min_score=None)
            cosines.append(next(hit.scores["cosine"] for hit in result.hits if hit.memory.content == DEBT))
    assert cosines[1] > cosines[0] + 0.1


async def test_names_whose_vectors_are_close_are_one_entity_across_restarts(tmp_path: Path) -> None:
    """Resolution by embeddings, through the runtime: "Gandros Tower" and "the Tower of
    Gandros" are one place (their vectors are 0.87 close; the hashing embedder's
    threshold is 0.80), the North and South Gates stay two; the merge record is
    journaled (a restart decides nothing again), snapshotted and undone by an unmerge."""
    texts = ["We camped below the Tower of Gandros.", "Gandros Tower was dark at midnight.",
             "Guards shut the North Gate at dusk.", "Fire took the South Gate at dawn."]
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = rt.scope(**SCOPE)
        await scope.remember_many(texts)
        await names_resolved(scope)
        tower = (await scope.entity("Gandros Tower")).entity
        assert tower.mentions == 2 and [(r.how, r.name) for r in tower.merged] == [
            ("embedding", "tower of gandros")]
        assert (await scope.entity("North Gate")).entity.mentions == 1
        stats = await scope.graph_stats()
        assert (stats.embedding_merges, stats.names_pending) == (1, 0) and stats.embedded_names >= 4
    async with mnemex.open_runtime(config(tmp_path)) as rt:  # from the journal
        scope = rt.scope(**SCOPE)
        assert (await scope.entity("tower of gandros")).entity == tower
        assert await scope.graph_stats() == stats
        await rt.passivate("scope", (SCOPE["app_name"], SCOPE["user_id"]))  # a snapshot
        assert (await scope.entity("Gandros Tower")).entity == tower
        await scope.unmerge_entity("tower of gandros")
        assert (await scope.entity("Gandros Tower")).entity.mentions == 1
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = rt.scope(**SCOPE)
        assert (await scope.entity("Tower of Gandros")).entity.mentions == 1
        await scope.remember("Gandros Towers loom over us.")  # a new name near both: kept apart still
        await names_resolved(scope)
        assert (await scope.entity("Tower of Gandros")).entity.mentions == 1


async def test_a_runtime_without_resolution_by_embeddings_resolves_by_spelling_only() -> None:
    async with mnemex.open_runtime(config(entity_embeddings=False)) as rt:
        scope = rt.scope(**SCOPE)
        await scope.remember_many(["We camped below the Tower of Gandros.", "Gandros Tower was dark."])
        stats = await scope.graph_stats()
        assert (stats.embedded_names, stats.names_pending, stats.entities) == (0, 0, 2)
