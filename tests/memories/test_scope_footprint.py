"""What a live scope of one memory costs (issue 17: 20,000 users at 1,024 open files in
600 MB): tracemalloc over scopes served from a data directory, and the parts shared
between scopes staying shared and unwritten."""

from __future__ import annotations

import gc
import pathlib
import tracemalloc

import trio

import mnemex
from mnemex.knowledge import graph as graph_module
from mnemex.memories import behaviour
from mnemex.memories import filters as filters_module

SCOPES = 200
PER_SCOPE_MAX = 19_500
"""Bytes a scope of one memory naming one entity may allocate (17.8 KB measured on
2026-11-26, 23.6 KB before the cheaper-live-users changes of that day)."""


def test_a_live_scope_of_one_memory_stays_small(tmp_path: pathlib.Path) -> None:
    out: list[float] = []

    async def main() -> None:
        async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path), embedder="hashing")) as rt:
            for user in range(5):  # (what the first scopes make once for the process)
                await rt.scope(user_id=f"warm{user}", app_name="app").remember("keeps bees near Lisbon")
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for user in range(SCOPES):
                    await rt.scope(user_id=f"user{user}", app_name="app").remember("keeps bees near Lisbon")
                await trio.sleep(0.2)  # (the names' vectors come back from a job)
                gc.collect()
                out.append((tracemalloc.get_traced_memory()[0] - before) / SCOPES)
            finally:
                tracemalloc.stop()
            scopes = [rt.kernel._cells[("scope", ("app", f"user{user}"))].behaviour for user in range(2)]
            assert all(isinstance(scope, behaviour.ScopeMemory) for scope in scopes)
            first, second = scopes
            assert first.bm25.tokenizer is second.bm25.tokenizer is second.categories.tokenizer
            assert first.graph.vectors.matrix.base is second.graph.vectors.matrix.base  # Lisbon's row
            assert sorted(first.table.fields) == sorted(second.table.fields) != []
            for field, values in first.table.fields.items():  # (author, kind, scope, categories)
                assert all(docs is second.table.values_of(field)[value] for value, docs in values.items())
            hits = await rt.scope(user_id="user7", app_name="app").search("bees in Lisbon", mode="hybrid")
            assert [hit.memory.content for hit in hits.hits] == ["keeps bees near Lisbon"]

    trio.run(main)
    assert out[0] <= PER_SCOPE_MAX, out
    # what scopes share is never written by any of them
    assert graph_module._NOT_MADE == {} and behaviour._NOTHING_KEPT == {}
    assert all(one == frozenset((doc,)) for doc, one in filters_module._ONE_DOC.items())
