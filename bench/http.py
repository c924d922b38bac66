"""HTTP benchmark: POST /messages and POST /memory/search throughput and latency
at 1, 16 and 64 connections, client and server on this machine (loopback).

Run: python bench/http.py [--quick] [--duration SECONDS] [--memories N] [--embedder NAME]

The server is a real ``mnemex serve`` subprocess on a temporary data directory;
the load generator is wrk (Debian package ``wrk``), bounded by --duration per
run. Prints a table and writes bench/results/http.json. The baseline row is
GET /health (the routing + JSON floor of the stack) measured in the same run.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this file is named http.py: its folder goes last on the import path so that the
# standard library's http package (which httpx needs) is the one imported, and the
# shared helpers still come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.append(str(_BENCH))

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

import httpx
from _common import LOCOMO as DATA
from _common import machine, write_results

POST_MESSAGES_LUA = r"""
counter = 0
request = function()
  counter = counter + 1
  local body = '{"session_id":"s' .. (counter % 64) .. '","query_id":"q' .. counter ..
    '","messages":[{"role":"user","content":"message number ' .. counter .. ' about the weekend trip"}]}'
  return wrk.format("POST", "/messages", {["Content-Type"] = "application/json"}, body)
end
"""

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def texts_and_questions() -> tuple[list[str], list[str]]:
    if not DATA.exists():
        words = ["trip", "weekend", "paint", "music", "garden", "dog", "work", "school", "family", "book", "movie", "city"]
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
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    count = re.search(r"(\d+) requests in", out)
    return {"rps": rate, "p50_ms": ms(latency["50"]), "p99_ms": ms(latency["99"]),
            "non_2xx": float(errors.group(1)) if errors else 0.0,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs, 10,000 memories")
    parser.add_argument("--duration", type=float, default=None, help="seconds per wrk run (default 8)")
    parser.add_argument("--memories", type=int, default=None, help="memories stored before search runs")
    parser.add_argument("--embedder", default=None,
                        help="config.embedder of the server (default: mnemex's default, MiniLM, which "
                             "embeds the memories stored for search at ~150/s on 2 cores; 'hashing' "
                             "stores them in seconds)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/http.py needs wrk: apt-get install wrk")
    duration = args.duration or (3.0 if args.quick else 8.0)
    n_memories = args.memories or (10_000 if args.quick else 100_000)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "mnemex.cli", "serve", "--port", str(port), "--data-dir",
                   os.path.join(tmp, "data")]
        if args.embedder is not None:
            config_file = os.path.join(tmp, "mnemex.toml")
            with open(config_file, "w", encoding="utf-8") as out:
                out.write(f"embedder = {json.dumps(args.embedder)}\n")
            command += ["--config", config_file]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            with httpx.Client(base_url=base, timeout=60) as http:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        http.get("/health")
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
                for connections in (1, 16, 64):
                    rows.append({"route": "GET /health (baseline)", "connections": connections,
                                 **measured(server.pid, base + "/health", "", connections, duration)})
                    rows.append({"route": "POST /messages", "connections": connections,
                                 **measured(server.pid, base, POST_MESSAGES_LUA, connections, duration)})
                texts, questions = texts_and_questions()
                probe = http.post("/memory/search", json={"query": "x", "user_id": "bench", "app_name": "bench"})
                if probe.status_code == 404:
                    print("POST /memory/search: not served yet (404); search rows skipped")
                else:
                    started = time.perf_counter()
                    rng = random.Random(7)
                    batch: list[dict[str, Any]] = []
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
                    print(f"stored {n_memories:,} memories in {time.perf_counter() - started:.1f} s")
                    safe = [q.replace('"', "").replace("\\", "") for q in questions[:200]]
                    # Lua string escapes are not JSON's: keep non-ASCII text as UTF-8 bytes
                    listed = ",".join(json.dumps(q, ensure_ascii=False) for q in safe)
                    script = SEARCH_LUA.replace("{QUERIES}", "{" + listed + "}")
                    for connections in (1, 16, 64):
                        rows.append({"route": f"POST /memory/search ({n_memories:,} memories)",
                                     "connections": connections,
                                     **measured(server.pid, base, script, connections, duration)})
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)

    bars = {("POST /messages", 16): ("rps", ">= 2,000 req/s"),
            (f"POST /memory/search ({n_memories:,} memories)", 16): ("p99_ms", "p99 <= 25 ms")}
    print(f"{'route':44} {'conns':>5} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8} "
          f"{'CPU us/req':>10}  bar")
    for row in rows:
        bar = bars.get((row["route"], row["connections"]), ("", ""))[1]
        print(f"{row['route']:44} {row['connections']:>5} {row['rps']:>10,.0f} {row['p50_ms']:>8.2f} "
              f"{row['p99_ms']:>8.2f} {row['non_2xx']:>8,.0f} "
              f"{row.get('server_cpu_us', float('nan')):>10,.0f}  {bar}")
    path = write_results("http", {
        "benchmark": "http", "machine": machine(),
        "duration_s": duration, "memories": n_memories, "embedder": args.embedder or "default",
        "rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
