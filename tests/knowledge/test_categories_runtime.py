"""Categories, actors and parts of a scope on a real runtime with real files: a
re-classification that a restart interrupts finishes after it, an old data
directory gets categories when asked, and the HTTP routes through a real server."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import trio

import mnemex
from mnemex.knowledge.prompt import PROMPT_VERSION
from mnemex.memories.categories import BATCH
from waiting import eventually

OLD = Path(__file__).parent.parent / "fixtures" / "datadir-0.1" / "data"


def config(data_dir: Path, **more: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=str(data_dir), embedder="hashing", **more)


async def test_a_reclassification_goes_on_across_a_restart_and_its_result_stays(tmp_path: Path) -> None:
    texts = [f"Spell {i} is a fireball" if i % 3 == 0 else f"Entry {i} of the log" for i in range(BATCH + 500)]
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")
        await scope.remember_many(texts)
        catalog = await scope.set_categories([mnemex.Category("spells", "Spells", ("fireball",))])
        assert catalog.version == 1 and catalog.reclassifying
        # closing now: the job in flight (if still running) is lost with the runtime
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")

        async def finished() -> bool:
            return not (await scope.categories()).reclassifying

        await eventually(finished, what="the re-classification to finish after the restart", timeout=30)
        catalog = await scope.categories()
        assert catalog.version == 1 and catalog.counts["spells"] == len(range(0, len(texts), 3))
        spells = await scope.count({"categories": ["spells"]})
        assert spells == catalog.counts["spells"]
    async with mnemex.open_runtime(config(tmp_path)) as rt:  # and it stays done, from the files alone
        catalog = await rt.scope(user_id="gm", app_name="campaign").categories()
        assert not catalog.reclassifying and catalog.counts["spells"] == spells


async def test_an_old_data_directory_opens_and_gets_categories_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "data"
    shutil.copytree(OLD, target)
    (target / "LOCK").unlink(missing_ok=True)
    async with mnemex.open_runtime(config(target, snapshot_every=5, snapshot_growth=0.0)) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        before = (await scope.memories(limit=None)).memories
        assert before and all(m.classified_by is None and m.scope_label == "global" for m in before)
        assert (await scope.categories()).version == 0
        await scope.set_categories(reclassify=True)

        async def finished() -> bool:
            return not (await scope.categories()).reclassifying

        await eventually(finished, what="the old memories to be classified", timeout=30)
        after = {m.id: m for m in (await scope.memories(limit=None)).memories}
        assert set(after) == {m.id for m in before}
        assert all(m.categories for m in after.values())
        assert all(m.categories == o.categories for o in before if o.categories for m in [after[o.id]])
        facets = await scope.facets()
        assert facets.total == len(before)


async def test_the_chunks_of_a_document_are_classified_as_stored(tmp_path: Path) -> None:
    notes = (b"# Gandros\n\nGandros the wizard owes the party a favour since the rescue.\n\n"
             b"# Rules\n\nRoll a d20 with advantage on stealth checks in darkness.\n")
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")
        report = await scope.ingest(notes, "text/markdown", extract=False)
        chunks = [await scope.get(memory_id) for memory_id in report.ids]
        assert chunks and all(chunk.kind == "document_chunk" and chunk.classified_by for chunk in chunks)
        held = {name for chunk in chunks for name in chunk.categories}
        assert {"favor_owed", "rules"} <= held


async def test_the_llm_is_shown_the_catalog_and_its_confident_categories_are_kept(tmp_path: Path) -> None:
    from mnemex.testing import FakeLLM

    answer = {"facts": [
        {"content": "Gandros owes the party a favour.", "categories": ["favor_owed", "quests"],
         "confidences": [0.9, 0.2], "actor_id": "gandros", "messages": [0]},
        {"content": "The user likes dice.", "categories": ["lore"], "confidences": [0.1], "messages": [0]}]}
    with FakeLLM() as llm:
        llm.add("Gandros", answer)
        settings = config(tmp_path, llm_base_url=llm.base_url, llm_model="fake-llm", llm_timeout=5.0,
                          llm_retries=0)
        async with mnemex.open_runtime(settings) as rt:
            scope = rt.scope(user_id="gm", app_name="campaign")
            await scope.set_categories([mnemex.Category("dice", "Dice and rolls", ("dice", "d20"))])
            done = await scope.extract_from("s1", [{"role": "user", "content": "Gandros owes us one."}])
            assert done.status == "committed" and len(done.added) == 2
            prompt = str(llm.requests[0]["messages"])
            assert "- favor_owed: Favours, debts and promises" in prompt and "- dice: Dice and rolls" in prompt
            owed, dice = [await scope.get(memory_id) for memory_id in done.added]
            assert (owed.categories, owed.category_confidences, owed.classified_by, owed.actor_id) == (
                ("favor_owed",), (0.9,), f"llm:fake-llm:{PROMPT_VERSION}", "gandros")
            # the model's only category was not sure enough: the offline classifier chose
            assert "dice" in dice.categories and "lore" not in dice.categories
            assert dice.classified_by == "rules-classifier:c1"
