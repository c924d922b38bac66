"""LangGraph integration benchmark: ``MnemexStore.search`` beside LangGraph's
``InMemoryStore``, and ``MnemexSaver`` put/get beside ``SqliteSaver``, measured in one
run.

Run: python bench/integrations_langgraph.py [--quick] [--items N] [--queries N] [--steps N] [--fields F]

Prints a table and writes bench/results/integrations_langgraph.json; ``run(args)``
returns the same report (for a combined integrations bench).

1. Store search: ``--items`` items (default 10,000; a text of a few words from a
   fixed vocabulary, two tags, a number; every text unique, as InMemoryStore needs) in 100 namespaces ``("users", "u<k>")``,
   indexed on ``["text", "tags[*]"]`` (three vectors an item; ``--fields text``: one) with one embedder, the
   same object for both stores (mnemex's ``HashingEmbedder``, 384 dimensions, as a
   LangChain ``Embeddings``; its query embedding is in both timings). Both stores are
   filled first (not timed), then each answers the same ``--queries`` searches
   (``search(("users",), query=..., limit=10)``), alternating; medians. Bar: mnemex at
   least 20x faster. A filtered search (``filter={"n": {"$gte": 50}}``) is reported too.
2. Checkpointer: ``--steps`` checkpoints of one thread (a checkpoint of five channels,
   one of them a list of 20 chat messages of ~200 bytes that changes every step, the
   others every fifth step), each put with its new versions, then the newest read
   back with ``get_tuple``; ``SqliteSaver`` on a file in the same temporary folder
   (WAL, as it sets itself up) and ``MnemexSaver`` on a data directory there
   (``fsync=batch``, the default: both durable at each put). Steps alternate between
   the two savers; medians. Bar: mnemex within 2x of SqliteSaver for put and for get.
   The same steps through the async interface beside ``AsyncSqliteSaver`` are reported
   too (no bar).

``--quick``: 2,000 items, 20 queries, 100 steps (a smoke run; the bars are still
computed).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_BENCH = Path(__file__).resolve().parent
# bench/http.py would shadow the standard library's http: bench/ goes last
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import fmt_ms, fmt_ratio, latency_summary, machine, table, write_results  # noqa: E402

WORDS = ("python rust garden pasta chess travel music coffee tea bike river mountain book film dog cat "
         "sunday work family school city beach rain snow winter summer doctor piano guitar paint").split()


def _embeddings(dim: int) -> Any:
    from langchain_core.embeddings import Embeddings

    from mnemex.lowlevel import HashingEmbedder

    model = HashingEmbedder(dim=dim)

    class Hashing(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return model.embed(texts).tolist()  # type: ignore[no-any-return]

        def embed_query(self, text: str) -> list[float]:
            return model.embed([text])[0].tolist()  # type: ignore[no-any-return]

    return Hashing()


def _items(count: int, seed: int = 1) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    rng = random.Random(seed)
    # every text unique: InMemoryStore fails a batch where two texts are equal
    return [(("users", f"u{i % 100}"), f"item-{i}",
             {"text": " ".join(rng.sample(WORDS, 5)) + f" #{i}",
              "tags": [f"{word} #{i}" for word in rng.sample(WORDS, 2)], "n": rng.randrange(100)})
            for i in range(count)]


def _fill(store: Any, items: list[tuple[tuple[str, ...], str, dict[str, Any]]]) -> float:
    from langgraph.store.base import PutOp

    started = time.perf_counter()
    for start in range(0, len(items), 1000):
        store.batch([PutOp(ns, key, value) for ns, key, value in items[start:start + 1000]])
    return time.perf_counter() - started


def bench_store(items: int, queries: int, tmp: Path, fields: list[str]) -> dict[str, Any]:
    from langgraph.store.memory import InMemoryStore

    import mnemex
    from mnemex.integrations.langgraph import MnemexStore

    index: Any = {"embed": _embeddings(384), "dims": 384, "fields": fields}
    data = _items(items)
    rng = random.Random(2)
    asked = [" ".join(rng.sample(WORDS, 3)) for _ in range(queries)]
    report: dict[str, Any] = {"items": items, "queries": queries, "fields": fields,
                              "vectors_per_item": 3 if "tags[*]" in fields else 1}
    with mnemex.Client(mnemex.Config(data_dir=str(tmp / "store"))) as client:
        theirs = InMemoryStore(index=index)
        ours = MnemexStore(client, index=index)
        report["fill_s"] = {"InMemoryStore": _fill(theirs, data), "MnemexStore": _fill(ours, data)}
        for name, kwargs in (("search", {}), ("filtered search", {"filter": {"n": {"$gte": 50}}})):
            times: dict[str, list[float]] = {"InMemoryStore": [], "MnemexStore": []}
            same = 0
            for query in asked:
                found = {}
                for label, store in (("InMemoryStore", theirs), ("MnemexStore", ours)):
                    started = time.perf_counter()
                    found[label] = store.search(("users",), query=query, limit=10, **kwargs)
                    times[label].append((time.perf_counter() - started) * 1000)
                same += [round(i.score, 4) for i in found["InMemoryStore"]] == \
                    [round(i.score, 4) for i in found["MnemexStore"]]
            report[name] = {label: latency_summary(ms) for label, ms in times.items()}
            report[name]["same_scores"] = f"{same}/{len(asked)}"
            report[name]["speedup"] = (report[name]["InMemoryStore"]["p50"] /
                                       report[name]["MnemexStore"]["p50"])
    return report


def _checkpoint(step: int, messages: list[dict[str, str]], versions: dict[str, str]) -> dict[str, Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": messages, "step": step, "user": "ada", "plan": ["a", "b"],
                                    "notes": "n" * 200}
    checkpoint["channel_versions"] = dict(versions)
    return checkpoint  # type: ignore[return-value]


def bench_saver(steps: int, tmp: Path) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    import mnemex
    from mnemex.integrations.langgraph import MnemexSaver

    times: dict[str, dict[str, list[float]]] = {"SqliteSaver": {"put": [], "get": []},
                                                "MnemexSaver": {"put": [], "get": []}}
    with mnemex.Client(mnemex.Config(data_dir=str(tmp / "saver"))) as client:
        conn = sqlite3.connect(str(tmp / "checkpoints.sqlite"), check_same_thread=False)
        savers = {"SqliteSaver": SqliteSaver(conn), "MnemexSaver": MnemexSaver(client)}
        state = {label: {"config": {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}},
                         "versions": {}} for label in savers}
        rng = random.Random(3)
        messages = [{"role": "user", "content": "x" * 180} for _ in range(20)]
        for step in range(steps):
            messages = [*messages[1:], {"role": rng.choice(["user", "assistant"]),
                                        "content": " ".join(rng.choices(WORDS, k=30))}]
            changed = ["messages", "step"] + (["user", "plan", "notes"] if step % 5 == 0 else [])
            for label, saver in savers.items():
                mine = state[label]
                versions: dict[str, Any] = mine["versions"]
                for channel in changed:
                    versions[channel] = saver.get_next_version(versions.get(channel), None)
                checkpoint = _checkpoint(step, messages, versions)
                started = time.perf_counter()
                mine["config"] = saver.put(mine["config"], checkpoint,  # type: ignore[arg-type]
                                           {"source": "loop", "step": step, "parents": {}},
                                           {channel: versions[channel] for channel in changed})
                times[label]["put"].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                got = saver.get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
                times[label]["get"].append((time.perf_counter() - started) * 1000)
                assert got is not None and got.checkpoint["channel_values"]["step"] == step
        conn.close()
    report: dict[str, Any] = {"steps": steps}
    for what in ("put", "get"):
        report[what] = {label: latency_summary(times[label][what]) for label in times}
        report[what]["ratio"] = report[what]["MnemexSaver"]["p50"] / report[what]["SqliteSaver"]["p50"]
    return report


def bench_async_saver(steps: int, tmp: Path) -> dict[str, Any]:
    """The same steps through the async interface: ``AsyncSqliteSaver`` beside
    ``MnemexSaver``'s ``aput``/``aget_tuple``, in one event loop, alternating."""
    import asyncio

    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    import mnemex
    from mnemex.integrations.langgraph import MnemexSaver

    times: dict[str, dict[str, list[float]]] = {"AsyncSqliteSaver": {"put": [], "get": []},
                                                "MnemexSaver": {"put": [], "get": []}}

    async def main(client: mnemex.Client) -> None:
        async with AsyncSqliteSaver.from_conn_string(str(tmp / "async.sqlite")) as theirs:
            savers = {"AsyncSqliteSaver": theirs, "MnemexSaver": MnemexSaver(client)}
            configs: dict[str, Any] = {label: {"configurable": {"thread_id": "a1", "checkpoint_ns": ""}}
                                       for label in savers}
            versions: dict[str, dict[str, Any]] = {label: {} for label in savers}
            messages = [{"role": "user", "content": "x" * 180} for _ in range(20)]
            for step in range(steps):
                for label, saver in savers.items():
                    mine = versions[label]
                    for channel in ("messages", "step"):
                        mine[channel] = saver.get_next_version(mine.get(channel), None)
                    checkpoint = _checkpoint(step, messages, mine)
                    started = time.perf_counter()
                    configs[label] = await saver.aput(configs[label], checkpoint,  # type: ignore[arg-type]
                                                      {"source": "loop", "step": step, "parents": {}},
                                                      {c: mine[c] for c in ("messages", "step")})
                    times[label]["put"].append((time.perf_counter() - started) * 1000)
                    started = time.perf_counter()
                    got = await saver.aget_tuple({"configurable": {"thread_id": "a1", "checkpoint_ns": ""}})
                    times[label]["get"].append((time.perf_counter() - started) * 1000)
                    assert got is not None

    with mnemex.Client(mnemex.Config(data_dir=str(tmp / "async-saver"))) as client:
        asyncio.run(main(client))
    report: dict[str, Any] = {"steps": steps}
    for what in ("put", "get"):
        report[what] = {label: latency_summary(times[label][what]) for label in times}
        report[what]["ratio"] = report[what]["MnemexSaver"]["p50"] / report[what]["AsyncSqliteSaver"]["p50"]
    return report


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both measurements, as the report written to bench/results/integrations_langgraph.json."""
    with tempfile.TemporaryDirectory(prefix="mnemex-bench-langgraph-") as folder:
        tmp = Path(folder)
        store = bench_store(args.items, args.queries, tmp, args.fields.split(","))
        saver = bench_saver(args.steps, tmp)
        async_saver = bench_async_saver(args.steps, tmp)
    bars = {
        "store_search_speedup_at_least_20x": store["search"]["speedup"] >= 20,
        "saver_put_within_2x": saver["put"]["ratio"] <= 2,
        "saver_get_within_2x": saver["get"]["ratio"] <= 2,
    }
    return {"machine": machine(), "store": store, "saver": saver, "async_saver": async_saver, "bars": bars}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 items, 20 queries, 100 steps")
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--fields", default="text,tags[*]",
                        help="the fields indexed (comma-separated): 'text' alone makes one vector an item")
    args = parser.parse_args()
    if args.quick:
        args.items, args.queries, args.steps = 2_000, 20, 100
    report = run(args)
    store, saver = report["store"], report["saver"]
    rows = []
    for name in ("search", "filtered search"):
        row = store[name]
        rows.append((f"store {name} ({store['items']:,} items x {store['vectors_per_item']} vectors)", fmt_ms(row["InMemoryStore"]["p50"]),
                     fmt_ms(row["MnemexStore"]["p50"]), fmt_ratio(row["speedup"]), row["same_scores"]))
    for what in ("put", "get"):
        row = saver[what]
        rows.append((f"checkpointer {what} ({saver['steps']} steps)", fmt_ms(row["SqliteSaver"]["p50"]),
                     fmt_ms(row["MnemexSaver"]["p50"]), fmt_ratio(row["ratio"]) + " (mnemex/theirs)", ""))
    for what in ("put", "get"):
        row = report["async_saver"][what]
        rows.append((f"async checkpointer a{what} ({saver['steps']} steps)",
                     fmt_ms(row["AsyncSqliteSaver"]["p50"]), fmt_ms(row["MnemexSaver"]["p50"]),
                     fmt_ratio(row["ratio"]) + " (mnemex/theirs)", ""))
    print(table(("median ms", "LangGraph's", "mnemex", "ratio", "same scores"), rows))
    print("bars:", ", ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in report["bars"].items()))
    print(f"written to {write_results('integrations_langgraph', report)}")


if __name__ == "__main__":
    main()
