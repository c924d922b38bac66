"""ADK memory search at 10,000 events: ``MnemexMemoryService`` against ADK's own
``InMemoryMemoryService``, both through ADK's interface (``add_session_to_memory``,
``search_memory``), in the same process and run.

Run: python bench/integrations_adk.py [--events 10000] [--queries 100] [--repeat 3]
     [--mode keyword] [--embedder hashing]

Events: the LoCoMo dev set's turns (read at run time from ../shared/data/, never
copied), then sentences of an order-2 word chain over them (bench/search.py's) up to
``--events``, each a user or model event of a session of 40 events; the same sessions
go into both services. Queries: LoCoMo questions (categories 1-4). Each query is asked
of both services, ``--repeat`` passes; per service, the median over passes of
the per-pass median latency is reported (in each pass one service answers every
query, then the other: the time one spends collecting the other's garbage is not
counted against it), and the ratio of the two (bar: mnemex at
least 50x faster). mnemex searches in ``--mode`` (the service's default, keyword:
ADK's own matching) on a runtime without a data directory; ``--embedder`` is the
runtime's (hashing by default: keyword search embeds nothing, and it keeps the ingest
short; the default MiniLM works too). Also reported: how often the two return the
same best memory, and each one's mean number of memories per query.

Prints a table and writes bench/results/integrations_adk.json. ``run(args)`` returns
the report, for bench/integrations.py.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# bench/ goes last on the path (its http.py would hide the standard library's http)
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import fmt_ms, load_locomo, locomo_turns, machine, table, write_results  # noqa: E402
from search import markov_corpus, questions  # noqa: E402

BAR = 50.0
SESSION_EVENTS = 40


def corpus(count: int) -> list[str]:
    """``count`` distinct event texts: LoCoMo's turns, then chain sentences."""
    turns = [turn.text for conversation in load_locomo() for turn in locomo_turns(conversation)]
    texts = list(dict.fromkeys(turns))[:count]
    if len(texts) < count:
        extra = markov_corpus(turns, count, seed=7)
        seen = set(texts)
        texts += [t for t in extra if t not in seen][: count - len(texts)]
    return texts


def sessions_of(texts: list[str]) -> list[Any]:
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session
    from google.genai import types

    out = []
    start = 1_700_000_000.0
    for first in range(0, len(texts), SESSION_EVENTS):
        events = []
        for n, words in enumerate(texts[first:first + SESSION_EVENTS], start=first):
            author = "user" if n % 2 == 0 else "assistant"
            events.append(Event(id=f"e{n}", invocation_id=f"i{n}", author=author, timestamp=start + n,
                                content=types.Content(role="user" if author == "user" else "model",
                                                      parts=[types.Part(text=words)])))
        out.append(Session(app_name="bench", user_id="u1", id=f"s{first // SESSION_EVENTS}",
                           last_update_time=start + first, events=events))
    return out


async def _measure(args: argparse.Namespace, client: Any) -> dict[str, Any]:
    from google.adk.memory.in_memory_memory_service import InMemoryMemoryService

    from mnemex.integrations.adk import MnemexMemoryService

    texts = corpus(args.events)
    sessions = sessions_of(texts)
    services = {"mnemex": MnemexMemoryService(client, mode=args.mode), "adk": InMemoryMemoryService()}
    ingest: dict[str, float] = {}
    for name, service in services.items():
        began = time.perf_counter()
        for session in sessions:
            await service.add_session_to_memory(session)
        ingest[name] = time.perf_counter() - began
    stored = client.scope(user_id="u1", app_name="bench").count()
    all_questions = questions(load_locomo())
    random.Random(11).shuffle(all_questions)
    queries = all_questions[: args.queries]
    for service in services.values():  # warm: the scope is loaded, caches filled
        await service.search_memory(app_name="bench", user_id="u1", query=queries[0])
    passes: dict[str, list[float]] = {name: [] for name in services}
    hits: dict[str, int] = dict.fromkeys(services, 0)
    best: dict[str, list[str | None]] = {name: [] for name in services}
    for repeat in range(args.repeat):
        for name, service in services.items():  # one service after the other: neither's garbage is timed
            samples: list[float] = []
            for query in queries:
                began = time.perf_counter()
                found = await service.search_memory(app_name="bench", user_id="u1", query=query)
                samples.append((time.perf_counter() - began) * 1000)
                if repeat == 0:
                    hits[name] += len(found.memories)
                    best[name].append(found.memories[0].content.parts[0].text if found.memories else None)
            passes[name].append(statistics.median(samples))
    same_best = sum(1 for a, b in zip(best["mnemex"], best["adk"], strict=True) if a == b)
    p50 = {name: statistics.median(values) for name, values in passes.items()}
    ratio = p50["adk"] / p50["mnemex"]
    return {
        "events": len(texts), "sessions": len(sessions), "memories_stored": stored, "queries": len(queries),
        "repeat": args.repeat, "mode": args.mode, "embedder": args.embedder,
        "ingest_s": ingest,
        "search_p50_ms": p50, "search_p50_ms_per_pass": passes,
        "mean_memories_per_query": {name: hits[name] / len(queries) for name in services},
        "same_best_memory": same_best / len(queries),
        "ratio": ratio,
        "bar": {"text": f"mnemex search_memory at {len(texts):,} events >= {BAR:g}x faster than "
                        "InMemoryMemoryService (medians, same run)", "ok": ratio >= BAR},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure, print the table, write bench/results/integrations_adk.json; the report."""
    import mnemex

    config = mnemex.Config(data_dir=None, embedder=args.embedder)
    with mnemex.Client(config) as client:
        result = asyncio.run(_measure(args, client))
    report = {"machine": machine(), **result}
    p50 = result["search_p50_ms"]
    ingest, per_query = result["ingest_s"], result["mean_memories_per_query"]
    print(table(["service", "search p50 ms", "ingest s", "memories/query"], [
        [f"MnemexMemoryService ({result['mode']})", fmt_ms(p50["mnemex"]), f"{ingest['mnemex']:.1f}",
         f"{per_query['mnemex']:.1f}"],
        ["InMemoryMemoryService", fmt_ms(p50["adk"]), f"{ingest['adk']:.1f}", f"{per_query['adk']:.1f}"],
    ]))
    print(f"{result['events']:,} events in {result['sessions']} sessions ({result['memories_stored']:,} "
          f"memories stored by mnemex), {result['queries']} queries x {result['repeat']} passes; "
          f"same best memory for {result['same_best_memory']:.0%} of queries")
    verdict = "ok" if result["bar"]["ok"] else "MISSED"
    print(f"bar: {result['bar']['text']}: {result['ratio']:,.0f}x -> {verdict}")
    path = write_results("integrations_adk", report)
    print(f"wrote {path}")
    return report


def parser() -> argparse.ArgumentParser:
    parsed = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parsed.add_argument("--events", type=int, default=10_000)
    parsed.add_argument("--queries", type=int, default=100)
    parsed.add_argument("--repeat", type=int, default=3,
                        help="passes over the queries (the median is reported)")
    parsed.add_argument("--mode", default="keyword", help="MnemexMemoryService's search mode")
    parsed.add_argument("--embedder", default="hashing", help="the mnemex runtime's config.embedder")
    return parsed


def main() -> None:
    run(parser().parse_args())


if __name__ == "__main__":
    main()
