"""HTTP benchmark: POST /messages throughput and latency under wrk, client and
server on this machine (loopback), beside a bare ASGI app on the same server stack
and, with --baseline-tree, beside the same server run from another source checkout.

Run: python bench/http.py [--baseline-tree PATH] [--rounds N] [--connections 1,16]
                          [--quick] [--duration SECONDS] [--health] [--search]
                          [--memories N] [--embedder NAME]

Every server is a subprocess: ``mnemex serve`` on a temporary data directory from
this checkout ("new"), the same command from --baseline-tree ("baseline": its cwd
and PYTHONPATH are that tree, so its own mnemex is imported; each side prints the
file it imports), and bench/bare_asgi.py ("bare ASGI": hypercorn's trio worker and
an app that only reads the body and answers 200). All stay up for the whole run;
each round measures every side at every connection count in turn (baseline, new,
bare), and the table gives the median (nearest rank) over --rounds. The bar
(issue 15): new/baseline POST /messages req/s >= 0.90 at 1 and 16 connections.

--health adds GET /health per mnemex server (the routing + JSON floor of the app);
--search stores --memories memories in the new server after the rounds and adds
POST /memory/search. Any non-2xx answer or socket error is printed as a WARNING
row and the script exits with status 1 (after writing the JSON). Prints tables and
writes bench/results/http.json (http-quick.json with --quick, http-custom.json
with other --rounds, --connections or --duration).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# this file is named http.py: its folder goes last on the import path so that the
# standard library's http package (which httpx and hypercorn need) is the one
# imported, and the shared helpers still come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.append(str(_BENCH))

import httpx  # noqa: E402
import hypercorn  # noqa: E402
from _common import LOCOMO as DATA  # noqa: E402
from _common import ROOT, fmt_ms, fmt_num, fmt_ratio, machine, percentile, table, write_results  # noqa: E402

BAR_RATIO = 0.90
POST_MESSAGES = "POST /messages"

POST_MESSAGES_LUA = r"""
counter = 0
request = function()
  counter = counter + 1
  local body = '{"session_id":"s' .. (counter % 64) .. '","query_id":"q' .. counter ..
    '","messages":[{"role":"user","content":"message number ' .. counter .. ' about the weekend trip"}]}'
  return wrk.format("POST", "/messages", {["Content-Type"] = "application/json"}, body)
end
"""
# the body one request of POST_MESSAGES_LUA sends, for the probe before the rounds
PROBE_MESSAGE = {"session_id": "s1", "query_id": "q1",
                 "messages": [{"role": "user", "content": "message number 1 about the weekend trip"}]}

SEARCH_LUA = r"""
queries = {QUERIES}
counter = 0
request = function()
  counter = counter + 1
  local q = queries[(counter % #queries) + 1]
  local body = '{"query":"' .. q .. '","user_id":"bench","app_name":"bench","top_k":10}'
  return wrk.format("POST", "/memory/search", {["Content-Type"] = "application/json"}, body)
end
"""


@dataclass
class Server:
    """One server subprocess under test: ``side`` is "baseline", "new" or "bare ASGI"."""

    side: str
    process: subprocess.Popen[bytes]
    base: str
    imported: str
    log: Path
    rows: list[dict[str, Any]] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def texts_and_questions() -> tuple[list[str], list[str]]:
    if not DATA.exists():
        words = ["trip", "weekend", "paint", "music", "garden", "dog", "work", "school", "family", "book",
                 "movie", "city"]
        rng = random.Random(1)
        texts = [" ".join(rng.choices(words, k=12)) for _ in range(2000)]
        return texts, [" ".join(rng.choices(words, k=5)) for _ in range(200)]
    convs = json.loads(DATA.read_text())
    texts, questions = [], []
    for conv in convs:
        c = conv["conversation"]
        for key, turns in c.items():
            if key.startswith("session_") and isinstance(turns, list):
                texts += [f"{t['speaker']}: {t['text']}" for t in turns]
        questions += [q["question"] for q in conv["qa"]]
    return texts, questions


def wrk(url: str, script: str, connections: int, duration: float) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
        path = f.name
    try:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency", "-s", path, url],
            capture_output=True, text=True, timeout=duration + 60, check=True).stdout
    finally:
        os.unlink(path)

    def ms(text: str) -> float:
        value, unit = re.match(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]

    latency = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    # wrk counts answers with a status of 400 and above here (3xx are caught by the probe)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    count = re.search(r"(\d+) requests in", out)
    return {"rps": rate, "p50_ms": ms(latency["50"]), "p99_ms": ms(latency["99"]),
            "non_2xx": float(errors.group(1)) if errors else 0.0,
            "socket_errors": float(sum(int(g) for g in sockets.groups())) if sockets else 0.0,
            "requests": float(count.group(1)) if count else 0.0}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far, all its threads (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int, url: str, script: str, connections: int, duration: float) -> dict[str, float]:
    """wrk's figures plus the server's CPU time per request (microseconds): unlike
    req/s, it hardly moves when other work shares the machine."""
    before = cpu_seconds(pid)
    row = wrk(url, script, connections, duration)
    after = cpu_seconds(pid)
    if before is not None and after is not None and row["requests"]:
        row["server_cpu_us"] = round(1e6 * (after - before) / row["requests"], 1)
    return row


def wait_until_idle(pid: int, limit_s: float = 5.0) -> None:
    """Return once the server just measured stops using CPU (under 5% over 0.2 s),
    at most ``limit_s`` later: work it queued during one side's run (journal
    flushes, snapshots) should not run during the next side's."""
    deadline = time.monotonic() + limit_s
    last = cpu_seconds(pid)
    while last is not None and time.monotonic() < deadline:
        time.sleep(0.2)
        now = cpu_seconds(pid)
        if now is None or now - last < 0.01:
            return
        last = now


def wait_until_serving(server: subprocess.Popen[bytes], url: str, log: Path, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    with httpx.Client(timeout=10) as http:
        while True:
            try:
                http.get(url)
                return
            except httpx.TransportError:
                if server.poll() is not None:
                    raise SystemExit(f"{url}: the server exited with status {server.returncode} before "
                                     f"answering; its log:\n{log.read_text()[-3000:]}") from None
                if time.monotonic() > deadline:
                    raise SystemExit(f"{url}: no answer after {limit_s:.0f} s; its log:\n"
                                     f"{log.read_text()[-3000:]}") from None
                time.sleep(0.1)


def imported_mnemex(env: dict[str, str], cwd: Path) -> str:
    """The file ``import mnemex`` resolves to in a child started as the server is."""
    return subprocess.run([sys.executable, "-c", "import mnemex; print(mnemex.__file__)"], env=env, cwd=cwd,
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


@contextlib.contextmanager
def started(side: str, command: list[str], *, env: dict[str, str], cwd: Path, ready_path: str,
            imported: str, log: Path) -> Iterator[Server]:
    port = int(command[command.index("--port") + 1])
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    try:
        wait_until_serving(process, base + ready_path, log)
        print(f"{side:9} serving on {base} (pid {process.pid}), {imported}", flush=True)
        yield Server(side, process, base, imported, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_mnemex(stack: contextlib.ExitStack, side: str, tree: Path, tmp: Path,
                 config_file: Path | None) -> Server:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(tree)}
    imported = imported_mnemex(env, tree)
    if not Path(imported).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{side}: `import mnemex` from {tree} resolves to {imported}, outside that tree")
    command = [sys.executable, "-m", "mnemex.cli", "serve", "--port", str(free_port()),
               "--data-dir", str(tmp / f"data-{side}")]
    if config_file is not None:
        command += ["--config", str(config_file)]
    return stack.enter_context(started(side, command, env=env, cwd=tree, ready_path="/health",
                                       imported=f"mnemex from {imported}", log=tmp / f"{side}.log"))


def start_bare(stack: contextlib.ExitStack, tmp: Path) -> Server:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(_BENCH / "bare_asgi.py"), "--port", str(free_port())]
    return stack.enter_context(started("bare ASGI", command, env=env, cwd=ROOT, ready_path="/",
                                       imported=f"hypercorn from {hypercorn.__file__}", log=tmp / "bare.log"))


def probe(server: Server) -> str | None:
    """One POST /messages as wrk sends it; a warning unless the answer is 2xx."""
    answer = httpx.post(server.base + "/messages", json=PROBE_MESSAGE, timeout=30)
    print(f"{server.side:9} probe: POST /messages -> {answer.status_code}", flush=True)
    if not 200 <= answer.status_code < 300:
        return f"{server.side}: probe POST /messages answered {answer.status_code}: {answer.text[:200]}"
    return None


def store_memories(server: Server, n_memories: int) -> None:
    texts, _ = texts_and_questions()
    started_at = time.perf_counter()
    rng = random.Random(7)
    batch: list[dict[str, Any]] = []
    with httpx.Client(base_url=server.base, timeout=600) as http:
        for i in range(n_memories):
            text = f"{texts[i % len(texts)]} (note {i}, {rng.randrange(10**6)})"
            batch.append({"content": text, "user_id": "bench", "app_name": "bench"})
            if len(batch) == 500 or i == n_memories - 1:
                r = http.post("/memory/batch", json={"memories": batch})
                if r.status_code == 404:
                    for item in batch:
                        http.post("/memory", json=item).raise_for_status()
                else:
                    r.raise_for_status()
                batch = []
    print(f"stored {n_memories:,} memories in {time.perf_counter() - started_at:.1f} s", flush=True)


def search_script() -> str:
    _, questions = texts_and_questions()
    safe = [q.replace('"', "").replace("\\", "") for q in questions[:200]]
    # Lua string escapes are not JSON's: keep non-ASCII text as UTF-8 bytes
    listed = ",".join(json.dumps(q, ensure_ascii=False) for q in safe)
    return SEARCH_LUA.replace("{QUERIES}", "{" + listed + "}")


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (route, side, connections): medians over the rounds, errors summed."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["route"], row["side"], row["connections"]), []).append(row)
    out = []
    for (route, side, connections), runs in groups.items():
        med = {key: percentile([r[key] for r in runs if key in r], 0.5)
               for key in ("rps", "p50_ms", "p99_ms", "server_cpu_us")}
        out.append({"route": route, "side": side, "connections": connections, "runs": len(runs),
                    **{f"median_{key}": value for key, value in med.items()},
                    "rps_min": min(r["rps"] for r in runs), "rps_max": max(r["rps"] for r in runs),
                    "non_2xx": sum(r["non_2xx"] for r in runs),
                    "socket_errors": sum(r["socket_errors"] for r in runs)})
    return out


def bar_rows(rows: list[dict[str, Any]], medians: list[dict[str, Any]],
             connections: list[int]) -> list[dict[str, Any]]:
    """new/baseline POST /messages req/s per connection count: the ratio of the
    medians (the bar's figure) and each round's own ratio."""
    def median_rps(side: str, conns: int) -> float:
        return float(next(m["median_rps"] for m in medians
                          if (m["route"], m["side"], m["connections"]) == (POST_MESSAGES, side, conns)))

    out = []
    for conns in connections:
        per_round: dict[int, dict[str, float]] = {}
        for row in rows:
            if row["route"] == POST_MESSAGES and row["connections"] == conns:
                per_round.setdefault(row["round"], {})[row["side"]] = row["rps"]
        baseline, new = median_rps("baseline", conns), median_rps("new", conns)
        ratio = new / baseline if baseline else float("nan")
        # a side that answered errors measured something else than POST /messages
        failed = any(m["non_2xx"] or m["socket_errors"] for m in medians
                     if (m["route"], m["connections"]) == (POST_MESSAGES, conns))
        out.append({"connections": conns, "baseline_rps": baseline, "new_rps": new, "ratio": ratio,
                    "round_ratios": [round(r["new"] / r["baseline"], 3) for r in per_round.values()],
                    "bar": f">= {BAR_RATIO:.2f}", "met": None if failed else ratio >= BAR_RATIO})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="another source checkout (e.g. a git worktree of an earlier commit) whose "
                             "server is measured beside this one's, interleaved")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every side and connection count "
                                                              "(default 3); the table gives the medians")
    parser.add_argument("--connections", default="1,16", help="wrk connection counts (default 1,16)")
    parser.add_argument("--quick", action="store_true", help="3 s wrk runs, 10,000 memories for --search")
    parser.add_argument("--duration", type=float, default=None, help="seconds per wrk run (default 8)")
    parser.add_argument("--health", action="store_true", help="add GET /health per mnemex server")
    parser.add_argument("--search", action="store_true",
                        help="after the rounds, store --memories memories in the new server and add "
                             "POST /memory/search")
    parser.add_argument("--memories", type=int, default=None,
                        help="memories stored before the search rows (default 100,000; 10,000 with --quick)")
    parser.add_argument("--embedder", default=None,
                        help="config.embedder of every mnemex server (default: mnemex's default, MiniLM, "
                             "which embeds the memories stored for search at ~150/s on 2 cores; 'hashing' "
                             "stores them in seconds)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/http.py needs wrk: apt-get install wrk")
    if args.baseline_tree is not None and not (args.baseline_tree / "mnemex" / "__init__.py").exists():
        sys.exit(f"--baseline-tree {args.baseline_tree}: no mnemex/__init__.py there")
    duration = args.duration or (3.0 if args.quick else 8.0)
    n_memories = args.memories or (10_000 if args.quick else 100_000)
    connections = [int(c) for c in args.connections.split(",")]
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []

    def run(server: Server, route: str, url: str, script: str, *, conns: int, round_: int) -> None:
        row = {"route": route, "side": server.side, "connections": conns, "round": round_,
               **measured(server.process.pid, url, script, conns, duration)}
        rows.append(row)
        print(f"  round {round_} {server.side:9} {route:16} c={conns:<3} {row['rps']:>8,.0f} req/s"
              f"  CPU {row.get('server_cpu_us', float('nan')):>6,.0f} us/req", flush=True)
        if row["non_2xx"] or row["socket_errors"]:
            warnings.append(f"{server.side} {route} c={conns} round {round_}: {row['non_2xx']:,.0f} non-2xx "
                            f"answers, {row['socket_errors']:,.0f} socket errors")
        wait_until_idle(server.process.pid)

    with tempfile.TemporaryDirectory() as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        config_file = None
        if args.embedder is not None:
            config_file = tmp / "mnemex.toml"
            config_file.write_text(f"embedder = {json.dumps(args.embedder)}\n")
        mnemex_servers = []
        if args.baseline_tree is not None:
            mnemex_servers.append(start_mnemex(stack, "baseline", args.baseline_tree.resolve(), tmp,
                                               config_file))
        mnemex_servers.append(start_mnemex(stack, "new", ROOT, tmp, config_file))
        bare = start_bare(stack, tmp)
        new = mnemex_servers[-1]
        warnings += [w for w in map(probe, [*mnemex_servers, bare]) if w]
        for round_ in range(1, args.rounds + 1):
            for conns in connections:
                for server in [*mnemex_servers, bare]:
                    run(server, POST_MESSAGES, server.base, POST_MESSAGES_LUA, conns=conns, round_=round_)
                if args.health:
                    for server in mnemex_servers:
                        run(server, "GET /health", server.base + "/health", "", conns=conns, round_=round_)
        for server in [*mnemex_servers, bare]:
            if any(w.startswith((f"{server.side}:", f"{server.side} ")) for w in warnings):
                tail = server.log.read_text(errors="replace").splitlines()[-20:]
                print(f"\n{server.side} answered errors; the end of its log:", *tail, sep="\n  ")
        if args.search:
            probe_search = httpx.post(new.base + "/memory/search", timeout=60,
                                      json={"query": "x", "user_id": "bench", "app_name": "bench"})
            if probe_search.status_code == 404:
                print("POST /memory/search: not served (404); search rows skipped")
            else:
                store_memories(new, n_memories)
                script = search_script()
                for conns in connections:
                    run(new, f"POST /memory/search ({n_memories:,} memories)", new.base, script,
                        conns=conns, round_=1)

    medians = summary(rows)
    print()
    print(table(["route", "server", "conns", "runs", "req/s (median)", "min-max", "p50 ms", "p99 ms",
                 "CPU us/req", "non-2xx", "socket err"],
                [[m["route"], m["side"], m["connections"], m["runs"], fmt_num(m["median_rps"]),
                  f"{m['rps_min']:,.0f}-{m['rps_max']:,.0f}", fmt_ms(m["median_p50_ms"]),
                  fmt_ms(m["median_p99_ms"]), fmt_num(m["median_server_cpu_us"]), fmt_num(m["non_2xx"]),
                  fmt_num(m["socket_errors"])] for m in medians], left=2))
    bars = []
    if args.baseline_tree is not None:
        bars = bar_rows(rows, medians, connections)
        print()
        verdict = {True: "met", False: "NOT MET", None: "no verdict: non-2xx answers"}
        print(table(["POST /messages", "baseline req/s", "new req/s", "new/baseline", "per round", "bar", ""],
                    [[f"{b['connections']} conns", fmt_num(b["baseline_rps"]), fmt_num(b["new_rps"]),
                      fmt_ratio(b["ratio"]), " ".join(f"{r:.2f}" for r in b["round_ratios"]), b["bar"],
                      verdict[b["met"]]] for b in bars]))
    for warning in warnings:
        print(f"WARNING: {warning}")
    # a smoke or partial run leaves the last full run's http.json alone
    custom = any(getattr(args, key) != parser.get_default(key)
                 for key in ("rounds", "connections", "duration"))
    name = "http-quick" if args.quick else "http-custom" if custom else "http"
    path = write_results(name, {
        "benchmark": "http", "machine": machine(), "duration_s": duration, "rounds": args.rounds,
        "connections": connections, "memories": n_memories if args.search else None,
        "embedder": args.embedder or "default",
        "servers": {s.side: s.imported for s in [*mnemex_servers, bare]},
        "baseline_tree": str(args.baseline_tree.resolve()) if args.baseline_tree else None,
        "medians": medians, "bars": bars, "warnings": warnings, "rows": rows})
    print(f"\nwrote {path}")
    if warnings:
        sys.exit(1)


if __name__ == "__main__":
    main()
