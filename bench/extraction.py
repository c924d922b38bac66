"""Issue 18's bars for extraction (the knowledge layer), on this machine, each
beside a baseline measured in the same run.

Run: python bench/extraction.py [--quick] [--rounds 3] [--seconds 8] [--callers 16]
     [--sessions 50] [--jobs-sessions 50] [--memories 10000] [--queries 500] [--out FILE]

1. **Appends while extraction jobs run.** One agent, ``--sessions`` sessions, each
   extracted automatically into a scope of its own (``--turns``, default the
   config's ``knowledge_turns``: one job per that many messages), the
   fake LLM answering every call after ``--slow`` (2) s with one fact, in a child
   process (a real endpoint is not in the host's process; its threads would hold
   our GIL).
   ``--callers`` trio tasks append one user message per call, round robin over
   the sessions, for ``--seconds``; each append's latency is timed. The same run
   without automatic extraction is the baseline; the two alternate, ``--rounds``
   times each, on fresh data directories (fsync=batch, hashing embedder), and
   the medians of the rounds are compared. Bars: p99 <= 5 ms, appends/s within
   10% of the baseline.
2. **One LLM call per job, none during replay, usage for every job.**
   ``--jobs-sessions`` sessions, a scope each, extracted twice through
   ``rt.extract`` (the second job supersedes the first job's fact) by an
   in-process FakeLLM that reports usage. Counts its calls against the jobs the
   scopes committed, reads every ``scope.apply_extraction`` line of the scopes'
   journals for its usage, then copies the data directory while the runtime is
   open (a crash image: journals, no snapshots), opens a runtime on the copy with
   the FakeLLM still serving, and counts the calls replay made and compares every
   memory, history included.
3. **Search over 10,000 extracted memories.** ``ApplyExtraction`` commands sent
   straight to one scope (``scope.ref.ask``), 100 facts each, with kinds,
   categories and confidences, one to three entities, and relations to earlier
   facts: about 15% update one (superseded records with their end time), 10%
   extend one (links), 3% repeat one closely (merged). ``scope.search(query,
   mode="hybrid")`` over ``--queries`` varied queries, then with
   ``include_history=True``; the baseline is the same texts stored with
   ``remember_many`` (no knowledge fields) in another scope. Bar: p95 <= 50 ms.

numpy's BLAS runs on ``--blas-threads`` threads (1, as ``mnemex serve`` sets it: a
product spread over both cores waits for a core other work holds, in steps of the
scheduler's 4 ms tick). Prints a table per bar and writes
bench/results/extraction.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import threadpoolctl
import trio

# bench/ goes last on the path (its http.py would hide the standard library's http);
# the checkout goes first, before mnemex is imported (else an installed mnemex is
# measured); the shared helpers come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

from _common import ROOT, fmt_ms, fmt_num, machine, percentile, table, write_results  # noqa: E402

import mnemex  # noqa: E402
from mnemex.memories.protocol import ApplyExtraction, NewFact  # noqa: E402
from mnemex.memories.snapshot import encode_vector  # noqa: E402
from mnemex.persistence.datadir import find_actors  # noqa: E402
from mnemex.persistence.inspect import read_history  # noqa: E402
from mnemex.testing import FakeLLM  # noqa: E402

BAR_APPEND_P99_MS = 5.0
BAR_RATE_SHARE = 0.90
BAR_SEARCH_P95_MS = 50.0
AGENT = "assistant"
MEDIANS = ("rate", "p50_ms", "p99_ms", "max_ms", "jobs_started", "jobs_committed", "jobs_failed", "cpu_share",
           "fsync_rounds_per_s", "fsync_p99_ms")
APP = "bench"
USAGE = {"prompt_tokens": 640, "completion_tokens": 48, "total_tokens": 688}

PEOPLE = ["Ana", "Bruno", "Carla", "Diego", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kenji",
          "Lena", "Marco", "Nadia", "Omar", "Paula", "Quentin", "Rosa", "Sven", "Tara", "Umberto", "Vera",
          "Walter", "Ximena", "Yusuf", "Zoe", "Amir", "Beatriz", "Chen", "Dora", "Emil", "Fatima", "Gustav",
          "Hana", "Ivan", "Julia", "Karim", "Lucia", "Mateo", "Nora"]
PLACES = ["Lisbon", "Berlin", "Porto", "Madrid", "Paris", "Rome", "Vienna", "Prague", "Oslo", "Dublin",
          "Warsaw", "Athens", "Zurich", "Munich", "Seville", "Lyon", "Milan", "Krakow", "Bergen", "Tallinn",
          "Riga", "Ghent", "Bruges", "Malaga", "Naples", "Turin", "Hamburg", "Cologne", "Geneva", "Bologna",
          "Valencia", "Granada", "Nice", "Bordeaux", "Leipzig", "Dresden", "Salzburg", "Graz", "Split",
          "Ljubljana"]
ORGS = ["Acme Bank", "Nordwind", "Bluefin Labs", "Solaris", "Orbital Foods", "Kestrel Health", "Tidewater",
        "Pinecrest School", "Redline Motors", "Harbor Insurance", "Quill Press", "Vantage Air",
        "Copperleaf", "Marrow Studio", "Lumen Energy", "Granite Logistics", "Willow Clinic", "Atlas Games",
        "Juniper Travel", "Basalt Robotics"]
ACTIVITIES = ["lives in", "works at an office in", "moved to", "studies in", "visits family in",
              "plans a trip to", "runs a half marathon in", "takes cooking classes in", "rents a flat in",
              "sings in a choir in", "learns pottery in", "volunteers at a shelter in",
              "plays chess at a club in", "keeps bees near", "teaches Java in", "buys bread at a bakery in",
              "swims in the lake near", "rides a bike to work in", "goes hiking near", "paints murals in",
              "grows tomatoes in a garden in", "adopted a dog in", "celebrated a birthday in",
              "is saving money for a house in", "had knee surgery in"]
CATEGORIES = ["work", "family", "travel", "food", "health", "hobby", "finance", "home"]
KINDS = ["fact", "preference", "event", "plan", "relationship"]
MESSAGES = ["I went hiking near the lake on Sunday.", "My sister is visiting from Porto next week.",
            "I started learning Java for my new job at the bank.", "We adopted a dog called Pixel.",
            "I'm allergic to peanuts, so no satay for me.", "Work has been hectic since the merger.",
            "I prefer tea to coffee in the mornings.", "Planning a trip to Kyoto in April.",
            "My knee still hurts after the half marathon.", "I finally moved into the flat in Berlin."]


# -- the fake LLM in a child process (bar 1) ------------------------------------------------------------
_CHILD = """
import json, sys
from mnemex.testing import FakeLLM
with FakeLLM() as llm:
    llm.slow(float(sys.argv[1]))
    llm.add(lambda request: True, sys.argv[2], usage=json.loads(sys.argv[3]))
    print(llm.base_url, flush=True)
    for _ in sys.stdin:
        print(llm.calls, flush=True)
"""


class ChildLLM:
    """A FakeLLM serving from a child process: ``calls`` asks it how many requests
    it has received."""

    def __init__(self, slow: float, content: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen([sys.executable, "-c", _CHILD, str(slow), content, json.dumps(USAGE)],
                                        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url.startswith("http://"):
            raise RuntimeError(f"the fake LLM child did not start (it printed {self.base_url!r})")

    def calls(self) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("calls\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def one_fact(content: str, **more: Any) -> str:
    return json.dumps({"facts": [{"content": content, "attributed_to": "user", "importance": 0.6, **more}]})


def llm_config(data_dir: str, base_url: str, **more: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=data_dir, embedder="hashing", llm_base_url=base_url, llm_model="fake-llm",
                         llm_timeout=30.0, llm_retries=0, **more)


# -- bar 1: appends while extraction jobs run ----------------------------------------------------------
async def cursor_total(rt: mnemex.MnemexRuntime, users: Sequence[str], field: str = "committed") -> int:
    """``field`` of CursorInfo (committed jobs, failures) summed over the scopes of ``users``."""
    total = 0
    for user in users:
        for status in await rt.scope(user_id=user, app_name=APP).extraction_status():
            total += getattr(status, field)
    return total


async def append_window(data_dir: str, llm: ChildLLM, *, auto: bool, sessions: int, callers: int,
                        seconds: float, slow: float, turns: int) -> dict[str, Any]:
    """Appends/s and per-append latency of ``callers`` tasks for ``seconds``, with
    every session extracted automatically (``auto``) or not."""
    users = [f"user-{k}" for k in range(sessions)]
    async with mnemex.open_runtime(llm_config(data_dir, llm.base_url, knowledge_turns=turns)) as rt:
        agent = rt.agent(AGENT)
        if auto:
            for k, user in enumerate(users):
                rt.extract_automatically(AGENT, app_name=APP, user_id=user, session_id=f"s{k}")
        for k in range(sessions):  # two messages each: with auto, every session starts its first job
            await agent.append(f"s{k}", [{"role": "user", "content": MESSAGES[k % len(MESSAGES)]},
                                         {"role": "assistant", "content": "Noted."}])
        # steady state: every scope has committed its first job (and so made its journal) before the window
        with trio.move_on_after(slow * 3 + 10):
            while auto and await cursor_total(rt, users) < sessions:
                await trio.sleep(0.05)
        calls_before = llm.calls()
        committed_before = await cursor_total(rt, users) if auto else 0
        failed_before = await cursor_total(rt, users, "failures") if auto else 0
        rounds_before = rt.journal_health()["fsync_rounds"]
        cpu_before = time.process_time()
        latencies: list[float] = []
        deadline = time.perf_counter() + seconds

        async def caller(c: int) -> None:
            n = c
            while time.perf_counter() < deadline:
                message = [{"role": "user", "content": MESSAGES[n % len(MESSAGES)]}]
                started = time.perf_counter()
                await agent.append(f"s{n % sessions}", message)
                latencies.append((time.perf_counter() - started) * 1000)
                n += callers

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for c in range(callers):
                nursery.start_soon(caller, c)
        elapsed = time.perf_counter() - started
        cpu = (time.process_time() - cpu_before) / elapsed
        journal = rt.journal_health()
        calls = llm.calls() - calls_before
        committed = (await cursor_total(rt, users) - committed_before) if auto else 0
        failed = (await cursor_total(rt, users, "failures") - failed_before) if auto else 0
        in_flight = 0
        if auto:
            for user in users:
                in_flight += sum(s.in_flight is not None
                                 for s in await rt.scope(user_id=user, app_name=APP).extraction_status())
    return {"auto": auto, "appends": len(latencies), "seconds": elapsed, "rate": len(latencies) / elapsed,
            "p50_ms": percentile(latencies, 0.5), "p99_ms": percentile(latencies, 0.99),
            "max_ms": max(latencies, default=float("nan")), "jobs_started": calls,
            "jobs_committed": committed, "jobs_failed": failed, "in_flight_at_end": in_flight,
            "cpu_share": cpu,
            "fsync_rounds_per_s": (journal["fsync_rounds"] - rounds_before) / elapsed,
            "fsync_p99_ms": journal["fsync_p99_ms"]}


def bar_appends(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    llm = ChildLLM(args.slow, one_fact("The user talks about their week."))
    runs: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    try:
        for r in range(args.rounds):
            for auto in ((False, True) if r % 2 == 0 else (True, False)):
                run = trio.run(functools.partial(
                    append_window, os.path.join(tmp, f"appends-{r}-{int(auto)}"), llm, auto=auto,
                    sessions=args.sessions, callers=args.callers, seconds=args.seconds, slow=args.slow,
                    turns=args.turns))
                runs["with" if auto else "without"].append(run)
                print(f"  round {r + 1}, {'with' if auto else 'without'} extraction: {run['rate']:,.0f} "
                      f"appends/s, p99 {run['p99_ms']:.2f} ms, {run['jobs_started']} jobs started",
                      file=sys.stderr)
    finally:
        llm.close()

    def median(side: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[side])

    with_p99 = median("with", "p99_ms")
    share = median("with", "rate") / median("without", "rate")
    bars = [{"bar": f"append p99 with extraction <= {BAR_APPEND_P99_MS:g} ms", "value": with_p99,
             "pass": with_p99 <= BAR_APPEND_P99_MS},
            {"bar": f"appends/s with extraction >= {BAR_RATE_SHARE:.0%} of without", "value": share,
             "pass": share >= BAR_RATE_SHARE}]
    return {"sessions": args.sessions, "callers": args.callers, "seconds": args.seconds,
            "rounds": args.rounds, "llm_delay_s": args.slow, "turns": args.turns, "runs": runs,
            "medians": {side: {key: median(side, key) for key in MEDIANS} for side in ("without", "with")},
            "rate_share": share, "bars": bars}


# -- bar 2: one call per job, none during replay, usage everywhere --------------------------------------
async def read_scopes(rt: mnemex.MnemexRuntime, users: Sequence[str]) -> dict[str, Any]:
    """Every memory of each scope, history included, as JSON-ready data; and the
    committed jobs their cursors count."""
    memories: dict[str, Any] = {}
    committed = 0
    for user in users:
        scope = rt.scope(user_id=user, app_name=APP)
        page = await scope.memories(limit=None, include_history=True)
        memories[user] = msgspec.to_builtins(page.memories)
        committed += sum(status.committed for status in await scope.extraction_status())
    return {"memories": memories, "committed": committed}


def journaled_jobs(data_dir: str) -> dict[str, int]:
    """The scope.apply_extraction lines of every scope's journal and how many lack
    usage (no model call counted, or no tokens)."""
    lines = without_usage = calls = 0
    for actor in find_actors(data_dir):
        if actor.kind != "scope":
            continue
        for entry in read_history(actor.path).journal:
            command = msgspec.json.decode(entry.payload)
            if command.get("type") != "scope.apply_extraction":
                continue
            usage = msgspec.convert(command, ApplyExtraction).usage
            lines += 1
            calls += usage.calls
            if usage.calls < 1 or usage.total_tokens <= 0:
                without_usage += 1
    return {"lines": lines, "without_usage": without_usage, "calls_recorded": calls}


async def extract_jobs(data_dir: str, llm: FakeLLM, sessions: int) -> dict[str, Any]:
    users = [f"user-{k}" for k in range(sessions)]
    for k in range(sessions):  # the move first: earlier recordings win, and its messages name both cities
        place, later = PLACES[k % len(PLACES)], PLACES[(k + 7) % len(PLACES)]
        moved = one_fact(f"The user moved to {later}.", entities=[later], relation="updates", target=1)
        llm.add(f"[{k}] I moved to", moved, usage=USAGE)
        llm.add(f"[{k}] I live in", one_fact(f"The user lives in {place}.", entities=[place]), usage=USAGE)
    # a few sessions at a time: FakeLLM's server keeps a listen backlog of 5 (socketserver's default)
    # and resets the connections past it
    limit = trio.CapacityLimiter(4)
    async with mnemex.open_runtime(llm_config(data_dir, llm.base_url)) as rt:
        agent = rt.agent(AGENT)

        async def session(k: int) -> None:
            async with limit:
                await extract_twice(k)

        async def extract_twice(k: int) -> None:
            place, later = PLACES[k % len(PLACES)], PLACES[(k + 7) % len(PLACES)]
            await agent.append(f"s{k}", [{"role": "user", "content": f"[{k}] I live in {place}."},
                                         {"role": "assistant", "content": f"{place} is lovely."}])
            await rt.extract(AGENT, f"s{k}", user_id=users[k], app_name=APP)
            await agent.append(f"s{k}", [{"role": "user", "content": f"[{k}] I moved to {later} in May."},
                                         {"role": "assistant", "content": "Congratulations!"}])
            await rt.extract(AGENT, f"s{k}", user_id=users[k], app_name=APP)

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(sessions):
                nursery.start_soon(session, k)
        extract_seconds = time.perf_counter() - started
        live = await read_scopes(rt, users)
        calls = llm.calls
        journal = journaled_jobs(data_dir)
        crash_image = data_dir + "-crash-image"
        shutil.copytree(data_dir, crash_image)
    snapshots = sum(1 for actor in find_actors(crash_image) for path in actor.path.iterdir()
                    if path.name.startswith("snapshot"))
    before_replay = llm.calls
    started = time.perf_counter()
    async with mnemex.open_runtime(llm_config(crash_image, llm.base_url)) as rt:
        replayed = await read_scopes(rt, users)
    replay_seconds = time.perf_counter() - started
    superseded = sum(1 for records in live["memories"].values() for record in records
                     if record.get("status") == "superseded")
    return {"sessions": sessions, "extract_seconds": extract_seconds, "calls": calls,
            "jobs_committed": live["committed"], "calls_per_job": calls / max(1, live["committed"]),
            "journal": journal, "superseded": superseded,
            "memories": sum(len(records) for records in live["memories"].values()),
            "crash_image_snapshots": snapshots, "replay_calls": llm.calls - before_replay,
            "replay_seconds": replay_seconds, "replay_committed": replayed["committed"],
            "replay_identical": replayed["memories"] == live["memories"]}


def bar_jobs(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    with FakeLLM() as llm:
        result = trio.run(extract_jobs, os.path.join(tmp, "jobs"), llm, args.jobs_sessions)
    journal = result["journal"]
    result["bars"] = [
        {"bar": "exactly one LLM call per committed job", "value": result["calls_per_job"],
         "pass": result["calls"] == result["jobs_committed"] == journal["lines"]
         and result["jobs_committed"] > 0},
        {"bar": "zero LLM calls during replay, the same memories", "value": result["replay_calls"],
         "pass": result["replay_calls"] == 0 and result["replay_identical"]
         and result["replay_committed"] == result["jobs_committed"]},
        {"bar": "usage recorded for every job", "value": journal["without_usage"],
         "pass": journal["without_usage"] == 0 and journal["lines"] == result["jobs_committed"]
         and journal["calls_recorded"] == result["calls"]},
    ]
    return result


# -- bar 3: search over 10,000 extracted memories -------------------------------------------------------
class Corpus:
    """Facts to extract, in batches of ``ApplyExtraction``: unique sentences with
    entities, categories and relations to earlier facts (see the module doc)."""

    def __init__(self, size: int, seed: int = 18) -> None:
        self.rng = random.Random(seed)
        combos = [(p, a, q) for p in range(len(PEOPLE)) for a in range(len(ACTIVITIES))
                  for q in range(len(PLACES))]
        self.rng.shuffle(combos)
        self.combos = combos
        self.size = size
        self.used = 0

    def sentence(self) -> tuple[str, str, str, str]:
        person, activity, place = self.combos[self.used]
        self.used += 1
        org = ORGS[(person * 7 + place) % len(ORGS)]
        text = f"{PEOPLE[person]} {ACTIVITIES[activity]} {PLACES[place]}"
        if self.rng.random() < 0.3:
            text += f" and works for {org}"
        return text + ".", PEOPLE[person], PLACES[place], org

    def batches(self, ids: Any, per_command: int = 100) -> list[tuple[list[dict[str, Any]], list[str]]]:
        """[(fact fields, offered ids)] per command; ``ids()`` gives a new memory id."""
        rng = self.rng
        earlier: list[tuple[str, str, str]] = []  # (id, content, person) of facts in earlier commands
        repeated: set[str] = set()  # facts said again once already (a second time would reinforce)
        out = []
        made = 0
        while made < self.size:
            facts: list[dict[str, Any]] = []
            offered: list[str] = []
            for _ in range(min(per_command, self.size - made)):
                content, person, place, org = self.sentence()
                entities = [person, place] + ([org] if org in content else [])
                chosen = rng.sample(CATEGORIES, rng.choice((1, 1, 2)))
                fact: dict[str, Any] = {
                    "id": ids(), "content": content, "kind": rng.choice(KINDS), "categories": tuple(chosen),
                    "confidences": tuple(round(rng.uniform(0.5, 1.0), 2) for _ in chosen),
                    "importance": round(rng.uniform(0.2, 0.95), 2), "entities": tuple(entities[:3]),
                    "attributed_to": person, "observed_at": time.time() - rng.uniform(0, 3e7)}
                roll = rng.random()
                if earlier and roll < 0.28:
                    target_id, target_content, target_person = rng.choice(earlier)
                    if roll < 0.15:  # the same person's life changed: supersedes (shared entity)
                        fact["relation"], fact["target"] = "updates", target_id
                        fact["entities"] = (target_person, *fact["entities"][1:])
                        fact["attributed_to"] = target_person
                    elif roll < 0.25 or target_id in repeated:
                        fact["relation"], fact["target"] = "extends", target_id
                    else:  # said again in other words: merged into the earlier fact
                        fact["relation"], fact["target"] = "duplicate", target_id
                        fact["content"] = target_content.rstrip(".") + " these days."
                        repeated.add(target_id)
                    offered.append(target_id)
                facts.append(fact)
                made += 1
            earlier.extend((f["id"], f["content"], f["attributed_to"]) for f in facts)
            out.append((facts, offered))
        return out


def queries(count: int, seed: int = 81) -> list[str]:
    rng = random.Random(seed)
    shapes = [
        lambda: f"where does {rng.choice(PEOPLE)} live?",
        lambda: f"{rng.choice(PEOPLE)} {rng.choice(PLACES)}",
        lambda: f"who {rng.choice(ACTIVITIES)} {rng.choice(PLACES)}?",
        lambda: f"who works for {rng.choice(ORGS)}",
        lambda: rng.choice(PEOPLE),
        lambda: rng.choice(ACTIVITIES),
        lambda: f"what did {rng.choice(PEOPLE)} do in {rng.choice(PLACES)} last year",
        lambda: f"{rng.choice(['hobbies', 'health', 'money', 'travel plans'])} of {rng.choice(PEOPLE)}",
        lambda: "quantum physics lectures on saturn",  # matches nothing well
    ]
    return [rng.choice(shapes)() for _ in range(count)]


async def build_scope(rt: mnemex.MnemexRuntime, user: str, size: int) -> tuple[float, list[str]]:
    """``size`` extracted memories in scope (APP, user) through ApplyExtraction;
    (seconds, their texts)."""
    scope = rt.scope(user_id=user, app_name=APP)
    embedder = scope.embedder
    ids = rt.scope_services().ids
    corpus = Corpus(size)
    texts: list[str] = []
    started = time.perf_counter()
    for number, (facts, offered) in enumerate(corpus.batches(lambda: ids.next(time.time()))):
        matrix = embedder.embed([fact["content"] for fact in facts])
        built = [NewFact(vector=encode_vector(row), **fact) for fact, row in zip(facts, matrix, strict=True)]
        texts.extend(fact["content"] for fact in facts)
        reply = await scope.ref.ask(ApplyExtraction(
            session_id=f"conversation-{number}", first=0, upto=2, facts=built, offered=offered,
            extractor="llm:bench:x1", embedder=embedder.name, dim=embedder.dim, now=time.time()))
        if reply.status != "committed":
            raise RuntimeError(f"command {number} was not committed: {reply}")
    return time.perf_counter() - started, texts


async def timed_searches(scope: Any, asked: Sequence[str], **options: Any) -> dict[str, float]:
    for query in asked[:20]:  # warm-up: caches, the query path's first imports
        await scope.search(query, mode="hybrid", **options)
    times = []
    hits = 0
    for query in asked:
        started = time.perf_counter()
        result = await scope.search(query, mode="hybrid", **options)
        times.append((time.perf_counter() - started) * 1000)
        hits += len(result.hits)
    return {"p50_ms": percentile(times, 0.5), "p95_ms": percentile(times, 0.95),
            "p99_ms": percentile(times, 0.99), "hits_per_query": hits / len(asked), "n": len(times)}


async def search_bench(data_dir: str, size: int, count: int) -> dict[str, Any]:
    async with mnemex.open_runtime(mnemex.Config(data_dir=data_dir, embedder="hashing")) as rt:
        build_seconds, texts = await build_scope(rt, "extracted", size)
        extracted = rt.scope(user_id="extracted", app_name=APP)
        plain = rt.scope(user_id="plain", app_name=APP)
        for start in range(0, len(texts), 1000):
            await plain.remember_many(texts[start:start + 1000])
        records = (await extracted.memories(limit=None, include_history=True)).memories
        counts = {"records": len(records), "active": await extracted.count(), "plain": await plain.count(),
                  **{status: sum(r.status == status for r in records) for status in ("superseded", "merged")},
                  "with_links": sum(1 for r in records if r.links),
                  "with_history": sum(1 for r in records if len(r.history) > 1)}
        asked = queries(count)
        rows = {"plain (remember_many, no knowledge fields)": await timed_searches(plain, asked),
                "extracted, active only": await timed_searches(extracted, asked),
                "extracted, include_history=True": await timed_searches(extracted, asked,
                                                                        include_history=True)}
    return {"memories": size, "queries": count, "build_seconds": build_seconds, "counts": counts,
            "searches": rows}


def bar_search(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    result = trio.run(search_bench, os.path.join(tmp, "search"), args.memories, args.queries)
    searches = result["searches"]
    result["bars"] = [{"bar": f"hybrid search p95 <= {BAR_SEARCH_P95_MS:g} ms ({label})",
                       "value": searches[label]["p95_ms"],
                       "pass": searches[label]["p95_ms"] <= BAR_SEARCH_P95_MS}
                      for label in ("extracted, active only", "extracted, include_history=True")]
    return result


# -- output ---------------------------------------------------------------------------------------------
def verdict(bar: dict[str, Any]) -> str:
    return "PASS" if bar["pass"] else "FAIL"


def print_tables(appends: dict[str, Any], jobs: dict[str, Any], search: dict[str, Any]) -> None:
    medians = appends["medians"]
    print(f"\n1. appends while extraction jobs run ({appends['sessions']} sessions, "
          f"{appends['callers']} callers, {appends['seconds']:g} s windows, fake LLM "
          f"{appends['llm_delay_s']:g} s per call; medians of "
          f"{appends['rounds']} alternating rounds)")
    print(table(["run", "appends/s", "p50 ms", "p99 ms", "max ms", "jobs started", "committed", "failed",
                 "CPU (1 = a core)", "fsync rounds/s", "fsync p99 ms"], [
        (f"{side} automatic extraction", fmt_num(m["rate"]), fmt_ms(m["p50_ms"]), fmt_ms(m["p99_ms"]),
         fmt_ms(m["max_ms"]), fmt_num(m["jobs_started"]) if side == "with" else "-",
         fmt_num(m["jobs_committed"]) if side == "with" else "-",
         fmt_num(m["jobs_failed"]) if side == "with" else "-", f"{m['cpu_share']:.2f}",
         fmt_num(m["fsync_rounds_per_s"]), fmt_ms(m["fsync_p99_ms"]))
        for side, m in (("without", medians["without"]), ("with", medians["with"]))]))
    p99_bar, rate_bar = appends["bars"]
    print(table(["bar", "measured", "result"], [
        (p99_bar["bar"], f"{fmt_ms(p99_bar['value'])} ms", verdict(p99_bar)),
        (rate_bar["bar"], f"{rate_bar['value']:.1%}", verdict(rate_bar))]))

    journal = jobs["journal"]
    print(f"\n2. one LLM call per job ({jobs['sessions']} sessions extracted twice through rt.extract; "
          f"replay from a crash image of {jobs['crash_image_snapshots']} snapshots)")
    print(table(["figure", "value"], [
        ("jobs committed (extraction_status)", fmt_num(jobs["jobs_committed"])),
        ("LLM calls", fmt_num(jobs["calls"])),
        ("calls per job", f"{jobs['calls_per_job']:.3f}"),
        ("scope.apply_extraction journal lines", fmt_num(journal["lines"])),
        ("of them without usage", fmt_num(journal["without_usage"])),
        ("model calls their usage records", fmt_num(journal["calls_recorded"])),
        ("memories (superseded among them)", f"{jobs['memories']:,} ({jobs['superseded']:,})"),
        ("extracting, wall time", f"{jobs['extract_seconds']:.2f} s"),
        ("LLM calls during replay", fmt_num(jobs["replay_calls"])),
        ("replay: jobs committed / memories identical",
         f"{jobs['replay_committed']:,} / {'yes' if jobs['replay_identical'] else 'NO'}"),
        ("replay (open, load every scope), wall time", f"{jobs['replay_seconds']:.2f} s"),
    ]))
    print(table(["bar", "measured", "result"], [(b["bar"], str(round(b["value"], 3)), verdict(b))
                                                for b in jobs["bars"]]))

    counts = search["counts"]
    print(f"\n3. hybrid search over {counts['records']:,} extracted memories ({counts['active']:,} active, "
          f"{counts['superseded']:,} superseded, {counts['merged']:,} merged, {counts['with_links']:,} with "
          f"links, {counts['with_history']:,} changed after their creation; built in "
          f"{search['build_seconds']:.1f} s), {search['queries']} queries, hashing embedder")
    print(table(["scope", "p50 ms", "p95 ms", "p99 ms", "hits/query"], [
        (label, fmt_ms(row["p50_ms"]), fmt_ms(row["p95_ms"]), fmt_ms(row["p99_ms"]),
         f"{row['hits_per_query']:.1f}") for label, row in search["searches"].items()]))
    print(table(["bar", "measured", "result"], [(b["bar"], f"{fmt_ms(b['value'])} ms", verdict(b))
                                                for b in search["bars"]]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of bar 1, each side")
    parser.add_argument("--seconds", type=float, default=8.0, help="bar 1's window per run")
    parser.add_argument("--callers", type=int, default=16, help="bar 1's concurrent appending tasks")
    parser.add_argument("--sessions", type=int, default=50, help="bar 1's sessions (a scope each)")
    parser.add_argument("--slow", type=float, default=2.0, help="seconds the fake LLM takes per call (bar 1)")
    parser.add_argument("--turns", type=int, default=mnemex.Config().knowledge.turns,
                        help="knowledge_turns of the automatic extraction (bar 1; default: the config's)")
    parser.add_argument("--jobs-sessions", type=int, default=50, help="bar 2's sessions, two jobs each")
    parser.add_argument("--memories", type=int, default=10_000, help="bar 3's extracted memories")
    parser.add_argument("--queries", type=int, default=500, help="bar 3's queries")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="threads numpy's BLAS may use, as `mnemex serve` sets them (0: the library's "
                             "default)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run; figures not comparable)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here instead")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.callers, args.sessions, args.slow = 1, 1.0, 4, 4, 0.2
        args.jobs_sessions, args.memories, args.queries = 4, 500, 40
    for name in [name for name in os.environ if name.startswith("MNEMEX_LLM_")]:
        del os.environ[name]  # the environment would override the fake endpoint
    blas = threadpoolctl.threadpool_limits(args.blas_threads, user_api="blas") if args.blas_threads > 0 \
        else contextlib.nullcontext()
    with blas, tempfile.TemporaryDirectory(prefix="mnemex-extraction-") as tmp:
        appends = bar_appends(args, tmp)
        jobs = bar_jobs(args, tmp)
        search = bar_search(args, tmp)
    print_tables(appends, jobs, search)
    bars = [*appends["bars"], *jobs["bars"], *search["bars"]]
    report = {"machine": machine(), "quick": args.quick, "blas_threads": args.blas_threads,
              "appends": appends, "jobs": jobs, "search": search, "bars": bars}
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        path = args.out
    else:
        path = write_results("extraction", report)
    print(f"\n{sum(b['pass'] for b in bars)} of {len(bars)} bars pass; wrote {path}")


if __name__ == "__main__":
    main()
