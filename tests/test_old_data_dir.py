"""A data directory written before the redesign (tests/fixtures/datadir-0.1, by the
code of commit dc71c43) opens with today's code and gives the same answers: the
same searches in every mode (ids, contents, scores), memories, counts, histories.
Snapshots, sidecars and a journal tail after the newest snapshot are all read.

Full-text, vector and hybrid scoring changed on purpose since (issue 20: stemming,
calibrated cosines, adaptive fusion), so those searches are compared with the same
memories exported from it and imported into a new scope: the old directory answers
as new data does. Keyword searches still give what the old code gave."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

import mnemex

FIXTURE = Path(__file__).parent / "fixtures" / "datadir-0.1"
EXPECTED: dict[str, Any] = json.loads((FIXTURE / "expected.json").read_text())


def config(data_dir: Path) -> mnemex.Config:
    # what the old code was given when it wrote the directory
    return mnemex.Config(data_dir=str(data_dir), embedder="hashing", snapshot_every=5, snapshot_growth=0.0)


@pytest.fixture
def old_data_dir(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(FIXTURE / "data", target)
    (target / "LOCK").unlink(missing_ok=True)
    return target


async def searches(scope: Any) -> dict[str, list[list[Any]]]:
    out = {}
    for key in EXPECTED["searches"]:
        mode, query = key.split("|", 1)
        result = await scope.search(query, top_k=5, mode=mode, min_score=-1)
        out[key] = [[h.memory.id, h.memory.content, round(h.score, 6)] for h in result.hits]
    return out


async def read(data_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"searches": {}, "messages": {}, "context": {}, "counts": {}}
    async with mnemex.open_runtime(config(data_dir)) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        out["searches"] = await searches(scope)
        exported = [item async for item in scope.export()]
        async with mnemex.open_runtime(config(data_dir).replace(data_dir=None)) as fresh:
            anew = fresh.scope(user_id="alice", app_name="chat")
            await anew.import_records(exported)
            out["searches_of_new_data"] = await searches(anew)
        out["counts"]["alice"] = await scope.count()
        out["counts"]["bob"] = await rt.scope(user_id="bob", app_name="chat").count()
        page = await scope.memories(limit=100)
        out["memories"] = sorted([[m.id, m.content, m.importance, list(m.categories), m.metadata]
                                  for m in page.memories])
        agent = rt.agent("assistant")
        for session in ("s1", "s2"):
            out["messages"][session] = [json.loads(msgspec.json.encode(m)) for m in await agent.history(session)]
            out["context"][session] = await agent.context(session)
    return out


def test_an_old_data_directory_gives_the_same_searches_memories_and_histories(old_data_dir: Path) -> None:
    got = trio.run(read, old_data_dir)
    assert got["counts"] == EXPECTED["counts"] == {"alice": 9, "bob": 1}
    assert got["memories"] == EXPECTED["memories"]
    assert got["messages"] == EXPECTED["messages"]
    for key, hits in EXPECTED["searches"].items():
        if not key.startswith("keyword|"):
            hits = got["searches_of_new_data"][key]
        assert [h[:2] for h in got["searches"][key]] == [h[:2] for h in hits], key
        assert [h[2] for h in got["searches"][key]] == pytest.approx([h[2] for h in hits], abs=1e-6), key


def test_an_old_data_directory_gives_the_contexts_its_policies_give_today(old_data_dir: Path) -> None:
    got = trio.run(read, old_data_dir)
    assert got["context"]["s2"] == EXPECTED["context"]["s2"]
    # MaxMessages(4) now counts the system message among the 4 (issue 16): the old view was the
    # system message and the 4 newest others; today it is the system message and the 3 newest.
    old = EXPECTED["context"]["s1"]
    assert old[0]["role"] == "system" and len(old) == 5
    assert got["context"]["s1"] == [old[0], *old[2:]]


def test_the_old_data_directory_is_still_there_and_still_checks(old_data_dir: Path) -> None:
    # reading it again after today's code snapshotted it gives the same answers: written by today's code
    first = trio.run(read, old_data_dir)
    again = trio.run(read, old_data_dir)
    assert first == again
