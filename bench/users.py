"""Many users through HTTP (issue 17's first bar): ``mnemex serve`` with its open-file
limit at 1,024 (soft and hard: it cannot raise it), then one memory for each of
--users users (``POST /memory``, a scope each) from --connections concurrent
clients; every answer must be 201. Reports errors, the rate, and the server's
RSS before and after (and per user), then checks that a sample of users' memories
come back from a search.

With --max-live-mb N the server runs with ``kernel.max_live_bytes`` at N MB, and the
table shows what its budget did (the live actors' estimate at the end, and how many
actors it passivated).

Run: python bench/users.py [--users 20000] [--connections 16] [--limit 1024] [--max-live-mb N] [--out FILE]

Prints a table and writes bench/results/users.json. Exits 1 when any request
failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/ goes last on the import path: httpx must import the standard library's
# http package, not bench/http.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.append(str(_BENCH))

import httpx  # noqa: E402
from _common import ROOT, fmt_num, machine, table, write_results  # noqa: E402

BAR_RSS_MB = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def start(port: int, data: Path, limit: int, log: Path, max_live_mb: float | None) -> subprocess.Popen[bytes]:
    limited = (f"import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit})); "
               f"from mnemex.cli import main; sys.exit(main(sys.argv[1:]))")
    config = data.parent / "users.toml"
    budget = "" if max_live_mb is None else f"\n[kernel]\nmax_live_bytes = {int(max_live_mb * 2**20)}\n"
    config.write_text('embedder = "hashing"\n' + budget)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MNEMEX_")}, "PYTHONPATH": str(ROOT)}
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-c", limited, "serve", "--port", str(port), "--data-dir",
                                 str(data), "--config", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=ROOT)


async def wait_serving(base: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    async with httpx.AsyncClient(base_url=base, timeout=2) as http:
        while True:
            try:
                if (await http.get("/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server at {base} did not answer within {limit_s:g} s")
            await asyncio.sleep(0.1)


async def store(base: str, users: int, connections: int) -> dict[str, Any]:
    """One memory per user, ``connections`` clients at once; counts what failed."""
    errors: dict[str, int] = {}
    next_user = iter(range(users))
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)

    async def client(http: httpx.AsyncClient) -> None:
        for i in next_user:
            try:
                r = await http.post("/memory", json={"content": f"user {i} keeps bees near Lisbon",
                                                     "user_id": f"user-{i}", "app_name": "bench"})
                if r.status_code != 201:
                    errors[str(r.status_code)] = errors.get(str(r.status_code), 0) + 1
            except httpx.TransportError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(connections)))
    return {"seconds": time.perf_counter() - started, "errors": errors}


async def actors(base: str) -> dict[str, int]:
    """The server's actor counts (GET /health as JSON)."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        r = await http.get("/health", headers={"accept": "application/json"})
        counts: dict[str, int] = r.json()["actors"]
        return counts


async def sample(base: str, users: int) -> int:
    """How many of 50 users spread over the range find their memory again."""
    found = 0
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        for i in range(0, users, max(1, users // 50)):
            r = await http.post("/memory/search", json={"query": "bees", "user_id": f"user-{i}",
                                                        "app_name": "bench", "mode": "keyword"})
            if r.status_code == 200 and any(f"user {i} " in hit["content"] for hit in r.json()["results"]):
                found += 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--limit", type=int, default=1024,
                        help="the server's open-file limit (soft and hard)")
    parser.add_argument("--max-live-mb", type=float, default=None,
                        help="the server's kernel.max_live_bytes, in MB (default: the server's own)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemex-users-") as tmp:
        port = free_port()
        log = Path(tmp) / "serve.log"
        server = start(port, Path(tmp) / "data", args.limit, log, args.max_live_mb)
        base = f"http://127.0.0.1:{port}"
        try:
            asyncio.run(wait_serving(base))
            before = rss_mb(server.pid)
            stored = asyncio.run(store(base, args.users, args.connections))
            after = rss_mb(server.pid)
            time.sleep(2.5)  # the budget counts every second
            counts = asyncio.run(actors(base))
            found = asyncio.run(sample(base, args.users))
        finally:
            server.terminate()
            server.wait(timeout=120)
        server_log = log.read_text()
    failed = sum(stored["errors"].values())
    per_user_kb = (after - before) * 1024 / args.users
    budget = "default" if args.max_live_mb is None else f"{args.max_live_mb:g}"
    rate = fmt_num(args.users / stored["seconds"])
    rows = [[args.users, args.connections, args.limit, budget, rate, failed, f"{before:,.0f}",
             f"{after:,.0f}", f"{per_user_kb:.1f}", counts.get("live", 0),
             f"{counts.get('live_bytes', 0) / 2**20:,.1f}", counts.get("budget_passivations", 0),
             f"{found}/50"]]
    print(table(["users", "conns", "file limit", "budget MB", "memories/s", "errors", "RSS before MB",
                 "RSS after MB", "KB/user", "live actors", "their estimate MB", "passivated for budget",
                 "found again"], rows))
    verdict = "pass" if failed == 0 and after <= BAR_RSS_MB else "FAIL"
    print(f"\nbar (issue 17): {args.users:,} users, 0 errors, RSS <= {BAR_RSS_MB} MB: "
          f"{failed} errors, {after:,.0f} MB -> {verdict}")
    if "Too many open files" in server_log:
        print("WARNING: the server's log says 'Too many open files'")
    report = {"machine": machine(), "users": args.users, "connections": args.connections,
              "file_limit": args.limit, "seconds": stored["seconds"], "errors": stored["errors"],
              "max_live_mb": args.max_live_mb, "actors": counts,
              "rss_before_mb": before, "rss_after_mb": after, "kb_per_user": per_user_kb,
              "found_again_of_50": found, "bar": verdict}
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        path = args.out
    else:
        path = write_results("users", report)
    print(f"wrote {path}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
