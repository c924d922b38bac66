"""A scope whose snapshot holds an hnswlib graph (format 2 before the graph moved to
usearch: tests/fixtures/datadir-hnswlib, written by the code of commit b211b05)
opens with today's code: the old graph's sidecars are passed over, the graph is
rebuilt over the same vectors, searches answer as exact searches over the same
memories imported into a new scope do, and the next snapshot holds the new graph,
which loads back.

The rebuilt graph is built by one thread in one go, so its shape (and so its
answers) does not depend on timing; a graph grown beside imports batch by batch
could miss a node these queries want, which is why the reference is exact."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import trio

import mnemex

FIXTURE = Path(__file__).parent.parent / "fixtures" / "datadir-hnswlib"
QUERIES = ("tea and lake", "violin with snow on day 3", "note 150 market", "bicycle museum soup")


def config(data_dir: Path | None, *, hnsw_threshold: int = 50) -> mnemex.Config:
    return mnemex.Config(data_dir=None if data_dir is None else str(data_dir), embedder="hashing",
                         hnsw_threshold=hnsw_threshold, hnsw_threads=1)


async def graph_ready(scope: Any) -> mnemex.ScopeStats:
    """The scope's stats once its graph is built beside the actor (real threads: at most 60 s)."""
    deadline = time.monotonic() + 60
    stats = await scope.stats()
    while stats.vector_mode != "hnsw" or stats.graph_pending:
        assert time.monotonic() < deadline, "the graph was not rebuilt within 60 s"
        await trio.sleep(0.05)
        stats = await scope.stats()
    return stats


async def answers(scope: Any) -> dict[str, list[tuple[str, float]]]:
    out = {}
    for query in QUERIES:
        result = await scope.search(query, top_k=5, mode="vector", min_score=-1)
        out[query] = [(hit.memory.id, round(hit.score, 6)) for hit in result.hits]
    return out


def test_a_scope_with_an_hnswlib_graph_opens_and_its_graph_is_rebuilt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE / "data", data)
    folder = next(data.rglob("chat.carol"))
    assert list(folder.glob("snapshot-1.hnswlib.bin")), "the fixture holds an hnswlib graph"

    async def main() -> None:
        async with mnemex.open_runtime(config(data)) as rt:
            scope = rt.scope(user_id="carol", app_name="chat")
            stats = await graph_ready(scope)
            assert stats.count == 151  # the snapshot's 150 and the journal's one after it
            old = await answers(scope)
            exported = [item async for item in scope.export()]
            await rt.passivate("scope", ("chat", "carol"))
            # the new snapshot holds the new graph's sidecars, and they load back
            assert list(folder.glob("snapshot-*.usearch.bin"))
            assert list(folder.glob("snapshot-*.usearchmeta.bin"))
            stats = await scope.stats()
            assert stats.vector_mode == "hnsw" and not stats.graph_pending
            assert await answers(scope) == old
        async with mnemex.open_runtime(config(None, hnsw_threshold=1000)) as fresh:
            anew = fresh.scope(user_id="carol", app_name="chat")
            await anew.import_records(exported)
            assert (await anew.stats()).vector_mode == "exact"
            assert await answers(anew) == old
            assert all(len(hits) == 5 for hits in old.values())

    trio.run(main)
