"""HTTP benchmark (issue 23): ``mnemex serve`` beside the Ark platform's reference
memory service and a bare ASGI app, clients and servers on this machine (loopback).

Run: python bench/http.py [--ark PATH] [--baseline-tree PATH] [--rounds N]
                          [--connections 1,16,64] [--quick] [--duration S]
                          [--memories N] [--users U] [--routes get,search,post,stream]
                          [--chunks K] [--readers R] [--warmup S] [--embedder NAME]
                          [--bare-stack uvicorn|hypercorn-trio] [--fsync batch|always|never]
                          [--out FILE]

Servers, each a subprocess kept up for the whole run:

- ``mnemex``: ``mnemex serve`` from this checkout, a temporary data directory and a
  config file (``embedder``, default hashing; ``[server]`` stream limits that hold
  --chunks); fsync is mnemex's default (batch) unless --fsync names another policy
  (``never``: what the server costs without waiting for the disk).
- ``baseline`` (with --baseline-tree): the same command with cwd and PYTHONPATH set
  to that tree, so that its own mnemex is imported (checked).
- ``ark``: ``node dist/main.js`` of the Ark reference service (``services/ark-cluster-memory``
  of pkg-mck/agents-at-scale-ark), built outside this repository; --ark names its
  folder (default: $MNEMEX_ARK_REFERENCE, else ../ark-ref/ark-cluster-memory beside
  this checkout). Without a build it is skipped, and the line says why.
- ``bare ASGI``: bench/bare_asgi.py, an app that answers every request 200 without
  looking at it (and relays pushed streams), on mnemex's server stack.

What is measured, every route at each --connections count with wrk (one thread),
each server in turn, --rounds times after one unrecorded --warmup run per server,
the tables giving medians (nearest rank):

- ``GET /messages?session_id=``: a 50-message session stored first through POST
  /messages on each server. Measured before anything else is stored: the reference
  service filters every stored message on each GET.
- ``POST /memory/search`` over --memories memories in each of --users scopes (one
  by default; with more, request *i* searches user *i* mod --users), mnemex servers
  and bare only: the reference service has no such route.
- ``POST /messages``: one user message per request, 64 sessions in turn.
- a pushed stream: --readers readers ``GET /stream/{id}?from-beginning=true&wait-for-query=30s``,
  one pusher ``POST /stream/{id}`` with a chunked NDJSON body of --chunks
  ``chat.completion.chunk`` lines, then ``POST /stream/{id}/complete``. The figure is
  the chunks all readers received per second, from the first pushed byte to the
  last reader's ``[DONE]``; each reader's chunks are checked to be every one, once,
  in order (an asyncio client on raw sockets, parsed by httptools).

--routes measures only some of them (names: get, search, post, stream).

The bars of issue 23 are printed as a table with their verdicts. Any answer >= 400,
socket error, or chunk lost, duplicated or out of order prints a WARNING and the
script exits 1 after writing bench/results/http.json (http-quick.json with --quick,
http-custom.json with other settings, or --out).
"""

from __future__ import annotations

import argparse
import asyncio
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# this file is named http.py: its folder goes last on the import path so that the
# standard library's http package (which httpx needs) is the one imported, and the
# shared helpers still come from bench/_common.py
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.append(str(_BENCH))

import httptools  # noqa: E402
import httpx  # noqa: E402
from _common import LOCOMO as DATA  # noqa: E402
from _common import ROOT, fmt_ms, fmt_num, fmt_ratio, machine, percentile, table, write_results  # noqa: E402

POST_MESSAGES = "POST /messages"
GET_MESSAGES = "GET /messages"
SEARCH = "POST /memory/search"
STREAM = "pushed stream"
ROUTES = (GET_MESSAGES, SEARCH, POST_MESSAGES)  # in the order they are measured
MNEMEX, BASELINE, ARK, BARE = "mnemex", "baseline", "ark", "bare ASGI"
READ_SESSION = "bench-read"
READ_SESSION_MESSAGES = 50
ARK_DEFAULT = ROOT.parent / "ark-ref" / "ark-cluster-memory"

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
  local user = 'bench' .. (counter % {USERS})
  local body = '{"query":"' .. q .. '","user_id":"' .. user .. '","app_name":"bench","top_k":10}'
  return wrk.format("POST", "/memory/search", {["Content-Type"] = "application/json"}, body)
end
"""


@dataclass(frozen=True)
class Bar:
    """One bar of issue 23 (or, for searches, 17): ``side`` at 16 connections against
    a figure or the reference service's (``times`` its req/s). A search bar holds for
    its ``memories`` in each of ``users`` scopes, and gets no verdict from a run of
    others."""

    label: str
    route: str
    minimum_rps: float | None = None
    times_ark: float | None = None
    max_p99_over_p50: float | None = None
    memories: int = 10_000
    users: int = 1


BARS = (
    Bar("POST /messages, 16 conns: mnemex >= ark", POST_MESSAGES, times_ark=1.0),
    Bar("GET /messages (50-message session), 16 conns: mnemex >= 1.5x ark", GET_MESSAGES, times_ark=1.5),
    Bar("POST /memory/search (10,000 memories), 16 conns: >= 2,000 req/s", SEARCH, minimum_rps=2000),
    Bar("POST /memory/search (10,000 memories), 16 conns: p99 <= 3x p50", SEARCH, max_p99_over_p50=3.0),
    Bar("POST /memory/search (100,000 memories), 16 conns: p99 <= 3x p50 (issue 17)", SEARCH,
        max_p99_over_p50=3.0, memories=100_000),
    Bar("POST /memory/search (16 users of 10,000 memories), 16 conns: p99 <= 3x p50 (issue 17)", SEARCH,
        max_p99_over_p50=3.0, users=16),
)
BAR_CONNECTIONS = 16
BAR_MEMORIES = 10_000
ROUTE_NAMES = {"get": GET_MESSAGES, "search": SEARCH, "post": POST_MESSAGES, "stream": STREAM}
STREAM_BAR_READERS = 10
STREAM_BAR_RATE = 20_000


@dataclass
class Server:
    """One server subprocess under test."""

    side: str
    kind: str  # MNEMEX (also for the baseline), ARK or BARE
    process: subprocess.Popen[bytes]
    base: str
    imported: str
    log: Path

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def serves(self, route: str) -> bool:
        return not (self.kind == ARK and route == SEARCH)


# -- starting the servers ---------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


@contextlib.contextmanager
def started(side: str, kind: str, command: list[str], *, port: int, env: dict[str, str], cwd: Path,
            ready_path: str, imported: str, log: Path) -> Iterator[Server]:
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    try:
        wait_until_serving(process, base + ready_path, log)
        if not imported:  # the server says what it runs on in its first line
            imported = log.read_text(errors="replace").partition("\n")[0]
        print(f"{side:9} serving on {base} (pid {process.pid}), {imported}", flush=True)
        yield Server(side, kind, process, base, imported, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def mnemex_config(tmp: Path, name: str, *, embedder: str, chunks: int, has_stream_limits: bool,
                  fsync: str) -> Path:
    """The config file of one mnemex server: the embedder, the fsync policy, and
    stream limits that hold the pushed stream (10,000 chunks by default) where the
    tree has them."""
    text = f"embedder = {json.dumps(embedder)}\nfsync = {json.dumps(fsync)}\n"
    if has_stream_limits:
        text += (f"\n[server]\nstream_max_chunks = {max(10_000, chunks)}\n"
                 f"stream_max_bytes = {max(16 << 20, chunks * 1024)}\n")
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return path


_WHICH_MNEMEX = ("import mnemex, mnemex.config as c; print(mnemex.__file__); print('stream_max_chunks' in "
                 "getattr(getattr(c, 'ServerConfig', None), '__struct_fields__', ()))")


def start_mnemex(stack: contextlib.ExitStack, side: str, tree: Path, tmp: Path, *, embedder: str,
                 chunks: int, fsync: str) -> Server:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(tree)}
    # the file `import mnemex` resolves to in a child started as the server is
    imported, has_stream_limits = subprocess.run(
        [sys.executable, "-c", _WHICH_MNEMEX], env=env, cwd=tree, capture_output=True, text=True, check=True,
        timeout=60).stdout.split()
    if not Path(imported).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{side}: `import mnemex` from {tree} resolves to {imported}, outside that tree")
    config = mnemex_config(tmp, side, embedder=embedder, chunks=chunks,
                           has_stream_limits=has_stream_limits == "True", fsync=fsync)
    port = free_port()
    command = [sys.executable, "-m", "mnemex.cli", "serve", "--port", str(port),
               "--data-dir", str(tmp / f"data-{side}"), "--config", str(config)]
    return stack.enter_context(started(side, MNEMEX, command, port=port, env=env, cwd=tree,
                                       ready_path="/health", imported=f"mnemex from {imported}",
                                       log=tmp / f"{side}.log"))


def start_bare(stack: contextlib.ExitStack, tmp: Path, server_stack: str) -> Server:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    port = free_port()
    command = [sys.executable, str(_BENCH / "bare_asgi.py"), "--port", str(port), "--stack", server_stack]
    return stack.enter_context(started(BARE, BARE, command, port=port, env=env, cwd=ROOT, ready_path="/",
                                       imported="", log=tmp / "bare.log"))


def ark_package(path: Path | None) -> tuple[Path | None, str]:
    """The folder of the reference service's package.json whose dist/main.js is
    built, or None and why not. ``path`` is that folder or the exported
    ``services/ark-cluster-memory``, which holds it as ``ark-cluster-memory/``."""
    if path is None:
        return None, (f"no build given (--ark PATH, or $MNEMEX_ARK_REFERENCE, or {ARK_DEFAULT}); "
                      "bench/README.md says how to build it")
    if shutil.which("node") is None:
        return None, "node is not installed"
    for folder in (path, path / "ark-cluster-memory"):
        if (folder / "dist" / "main.js").exists():
            return folder, ""
    return None, (f"no dist/main.js in {path} nor {path / 'ark-cluster-memory'} "
                  "(npm ci && npm run build there)")


def start_ark(stack: contextlib.ExitStack, package: Path, tmp: Path) -> Server:
    # main.ts takes PORT and HOST from the environment; without MEMORY_FILE_PATH and
    # STREAM_FILE_PATH (its chart's default) everything stays in memory. Run as its
    # image runs it: no NODE_ENV; its stdout (a line per request) goes to the log file.
    port = free_port()
    env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1"}
    for key in ("MEMORY_FILE_PATH", "STREAM_FILE_PATH", "NODE_ENV"):
        env.pop(key, None)
    version = json.loads((package / "package.json").read_text()).get("version", "?")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    return stack.enter_context(started(ARK, ARK, ["node", "dist/main.js"], port=port, env=env, cwd=package,
                                       ready_path="/health", log=tmp / "ark.log",
                                       imported=f"ark-cluster-memory {version} from {package}, node {node}"))


# -- data each server holds before the rounds ------------------------------------------------
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


def probe(server: Server) -> str | None:
    """One POST /messages as wrk sends it; a warning unless the answer is 2xx."""
    answer = httpx.post(server.base + "/messages", json=PROBE_MESSAGE, timeout=30)
    print(f"{server.side:9} probe: POST /messages -> {answer.status_code}", flush=True)
    if not 200 <= answer.status_code < 300:
        return f"{server.side}: probe POST /messages answered {answer.status_code}: {answer.text[:200]}"
    return None


def store_read_session(server: Server) -> str | None:
    """The session GET /messages reads, stored one POST /messages each; a warning
    unless every answer is 2xx and GET then returns the 50 messages."""
    texts, _ = texts_and_questions()
    with httpx.Client(base_url=server.base, timeout=30) as http:
        for i in range(READ_SESSION_MESSAGES):
            message = {"role": "user" if i % 2 == 0 else "assistant", "content": texts[i % len(texts)]}
            answer = http.post("/messages", json={"session_id": READ_SESSION, "query_id": f"read-{i // 2}",
                                                  "messages": [message]})
            if not 200 <= answer.status_code < 300:
                return (f"{server.side}: storing the read session, POST /messages answered "
                        f"{answer.status_code}")
        if server.kind == BARE:
            return None
        answer = http.get("/messages", params={"session_id": READ_SESSION})
        count = len(answer.json().get("messages", [])) if answer.status_code == 200 else None
    if count != READ_SESSION_MESSAGES:
        return (f"{server.side}: GET /messages?session_id={READ_SESSION} answered {answer.status_code} with "
                f"{count} messages, not {READ_SESSION_MESSAGES}")
    return None


def store_memories(server: Server, n_memories: int, users: int) -> str | None:
    """--memories memories in each of --users scopes (users ``bench0``, ``bench1``...)
    through POST /memory/batch, then one search of each; a warning unless they answer 2xx."""
    texts, _ = texts_and_questions()
    started_at = time.perf_counter()
    rng = random.Random(7)
    answers = []
    with httpx.Client(base_url=server.base, timeout=600) as http:
        for user in range(users):
            batch: list[dict[str, Any]] = []
            for i in range(n_memories):
                text = f"{texts[i % len(texts)]} (note {i}, {rng.randrange(10**6)})"
                batch.append({"content": text, "user_id": f"bench{user}", "app_name": "bench"})
                if len(batch) == 500 or i == n_memories - 1:
                    http.post("/memory/batch", json={"memories": batch}).raise_for_status()
                    batch = []
        for user in range(users):
            probe = {"query": "weekend trip", "user_id": f"bench{user}", "app_name": "bench", "top_k": 10}
            answers.append(http.post("/memory/search", json=probe))
    print(f"{server.side:9} stored {n_memories:,} memories for each of {users:,} users in "
          f"{time.perf_counter() - started_at:.1f} s; probe: POST /memory/search -> "
          f"{sorted({a.status_code for a in answers})}", flush=True)
    bad = next((a for a in answers if not 200 <= a.status_code < 300), None)
    if bad is not None:
        return f"{server.side}: probe POST /memory/search answered {bad.status_code}: {bad.text[:200]}"
    return None


def search_script(users: int) -> str:
    _, questions = texts_and_questions()
    safe = [q.replace('"', "").replace("\\", "") for q in questions[:200]]
    # Lua string escapes are not JSON's: keep non-ASCII text as UTF-8 bytes
    listed = ",".join(json.dumps(q, ensure_ascii=False) for q in safe)
    return SEARCH_LUA.replace("{QUERIES}", "{" + listed + "}").replace("{USERS}", str(users))


# -- wrk ---------------------------------------------------------------------------------------
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
    return wrk_figures(out)


def wrk_figures(out: str) -> dict[str, float]:
    """req/s, p50 and p99 (ms), answers >= 400, socket errors and requests from wrk's
    report (``--latency``)."""
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
    at most ``limit_s`` later: work it queued during one run (journal flushes,
    snapshots) should not run during the next server's."""
    deadline = time.monotonic() + limit_s
    last = cpu_seconds(pid)
    while last is not None and time.monotonic() < deadline:
        time.sleep(0.2)
        now = cpu_seconds(pid)
        if now is None or now - last < 0.01:
            return
        last = now


# -- the pushed stream -------------------------------------------------------------------------
SEQUENCE = re.compile(rb'"content":"token (\d+) "')


def stream_lines(count: int) -> list[bytes]:
    """``count`` chat.completion.chunk lines, the sequence number in each one's content."""
    return [b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764000000,"model":"bench",'
            b'"choices":[{"index":0,"delta":{"content":"token %d "},"finish_reason":null}]}' % i
            for i in range(count)]


@dataclass(frozen=True)
class Order:
    """What one reader received against what was pushed: ``lost`` chunks never came,
    ``duplicated`` came more than once, ``reordered`` came after a later one."""

    received: int
    lost: int
    duplicated: int
    reordered: int


def check_order(sequence: list[int], pushed: int) -> Order:
    seen: set[int] = set()
    duplicated = reordered = 0
    highest = -1
    for number in sequence:
        if number in seen:
            duplicated += 1
        seen.add(number)
        if number < highest:
            reordered += 1
        highest = max(highest, number)
    lost = sum(1 for number in range(pushed) if number not in seen)
    return Order(len(sequence), lost, duplicated, reordered)


class _Response:
    """One HTTP/1.1 response read with httptools: its status, and its body either
    kept whole or cut into server-sent events."""

    def __init__(self, *, events: bool) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.is_events = events
        self.body = b""
        self.sequence: list[int] = []
        self.unexpected: list[bytes] = []
        self.done_at: float | None = None
        self.is_complete = False

    @property
    def status(self) -> int:
        """The answer's status; 0 when none came."""
        return int(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        self.body += body
        if not self.is_events:
            return
        *events, self.body = self.body.split(b"\n\n")
        for event in events:
            if event.startswith(b"data: "):
                found = SEQUENCE.search(event)
                if found is not None:
                    self.sequence.append(int(found.group(1)))
                elif event == b"data: [DONE]":
                    self.done_at = time.perf_counter()
                else:
                    self.unexpected.append(event[:200])
            elif not event.startswith(b":"):  # ": ping" comments are allowed
                self.unexpected.append(event[:200])

    def on_message_complete(self) -> None:
        self.is_complete = True

    async def read(self, reader: asyncio.StreamReader) -> None:
        while not self.is_complete and self.done_at is None:
            data = await reader.read(1 << 16)
            if not data:
                return
            self.parser.feed_data(data)


def _head(method: str, path: str, port: int, *headers: str) -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *headers, "", ""]).encode()


async def _closed(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def read_stream(port: int, name: str, connected: asyncio.Event) -> _Response:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_head("GET", f"/stream/{name}?from-beginning=true&wait-for-query=30s", port,
                           "Accept: text/event-stream"))
        await writer.drain()
        connected.set()
        response = _Response(events=True)
        await response.read(reader)
        return response
    finally:
        await _closed(writer)


async def post(port: int, path: str, body: bytes) -> _Response:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_head("POST", path, port, "Content-Type: application/json",
                           f"Content-Length: {len(body)}") + body)
        response = _Response(events=False)
        await response.read(reader)
        return response
    finally:
        await _closed(writer)


async def push_stream(port: int, name: str, lines: list[bytes]) -> tuple[float, _Response]:
    """POST the lines as one chunked NDJSON body, each line its own HTTP chunk (as a
    controller relaying a model's tokens sends them), written as fast as the server
    takes them. Returns when the first byte went out, and the answer."""
    framed = [b"%x\r\n%s\n\r\n" % (len(line) + 1, line) for line in lines]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = _head("POST", f"/stream/{name}", port, "Content-Type: application/x-ndjson",
                     "Transfer-Encoding: chunked")
        first = time.perf_counter()
        writer.write(head)
        # a server that refuses the stream (413, 409) may answer and close before the end
        with contextlib.suppress(ConnectionError):
            for start in range(0, len(framed), 64):
                writer.write(b"".join(framed[start:start + 64]))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        response = _Response(events=False)
        with contextlib.suppress(ConnectionError):
            await response.read(reader)
        return first, response
    finally:
        await _closed(writer)


async def relayed(port: int, name: str, *, chunks: int, readers: int, limit_s: float) -> dict[str, Any]:
    """One pushed stream to ``readers`` readers: the chunks/s all of them received,
    and what each got against what was pushed."""
    lines = stream_lines(chunks)
    connected = [asyncio.Event() for _ in range(readers)]
    tasks = [asyncio.create_task(read_stream(port, name, event)) for event in connected]
    for event in connected:
        await event.wait()
    # a reader that is registered late still gets every chunk (from-beginning=true)
    await asyncio.sleep(0.3)
    first, pushed = await asyncio.wait_for(push_stream(port, name, lines), limit_s)
    completed = await asyncio.wait_for(post(port, f"/stream/{name}/complete", b"{}"), 60)
    done, pending = await asyncio.wait(tasks, timeout=limit_s)
    for task in pending:
        task.cancel()
    answers = [task.result() for task in done if task.exception() is None]
    orders = [check_order(a.sequence, chunks) for a in answers]
    finished = [a.done_at for a in answers if a.done_at is not None]
    received = sum(o.received for o in orders)
    seconds = max(finished) - first if finished else float("nan")
    return {"chunks": chunks, "readers": readers, "push_status": pushed.status,
            "push_answer": pushed.body[:200].decode(errors="replace"), "complete_status": completed.status,
            "readers_done": len(finished), "received": received, "seconds": seconds,
            "chunks_per_s": received / seconds if finished else 0.0,
            "lost": sum(o.lost for o in orders) + chunks * (readers - len(answers)),
            "duplicated": sum(o.duplicated for o in orders), "reordered": sum(o.reordered for o in orders),
            "unexpected": sum(len(a.unexpected) for a in answers),
            "unexpected_sample": next((a.unexpected[0].decode(errors="replace")
                                       for a in answers if a.unexpected), None)}


def measured_stream(server: Server, name: str, *, chunks: int, readers: int) -> dict[str, Any]:
    before = cpu_seconds(server.process.pid)
    # at least 1,000 chunks/s, or the run is cut
    row = asyncio.run(relayed(server.port, name, chunks=chunks, readers=readers,
                              limit_s=30 + chunks * readers / 1000))
    after = cpu_seconds(server.process.pid)
    if before is not None and after is not None and row["received"]:
        row["server_cpu_us"] = round(1e6 * (after - before) / row["received"], 2)
    return row


def stream_problems(row: dict[str, Any]) -> list[str]:
    problems = []
    if not 200 <= row["push_status"] < 300 or not 200 <= row["complete_status"] < 300:
        problems.append(f"POST /stream answered {row['push_status']} ({row['push_answer']}), "
                        f"POST /stream/.../complete {row['complete_status']}")
    if row["readers_done"] < row["readers"]:
        problems.append(f"{row['readers'] - row['readers_done']} of {row['readers']} readers got no [DONE]")
    for key in ("lost", "duplicated", "reordered", "unexpected"):
        if row[key]:
            problems.append(f"{row[key]:,} chunks {key}" if key != "unexpected" else
                            f"{row[key]:,} unexpected events, e.g. {row['unexpected_sample']!r}")
    return problems


# -- summaries ----------------------------------------------------------------------------------
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
                    "p99_over_p50": med["p99_ms"] / med["p50_ms"] if med["p50_ms"] else float("nan"),
                    "rps_min": min(r["rps"] for r in runs), "rps_max": max(r["rps"] for r in runs),
                    "non_2xx": sum(r["non_2xx"] for r in runs),
                    "socket_errors": sum(r["socket_errors"] for r in runs)})
    return out


def stream_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per side: the median chunks/s over the rounds, losses summed."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["side"], []).append(row)
    return [{"side": side, "readers": runs[0]["readers"], "chunks": runs[0]["chunks"], "runs": len(runs),
             "median_chunks_per_s": percentile([r["chunks_per_s"] for r in runs], 0.5),
             "min": min(r["chunks_per_s"] for r in runs), "max": max(r["chunks_per_s"] for r in runs),
             "median_seconds": percentile([r["seconds"] for r in runs], 0.5),
             "median_server_cpu_us": percentile([r["server_cpu_us"] for r in runs if "server_cpu_us" in r],
                                                 0.5),
             **{key: sum(r[key] for r in runs) for key in ("lost", "duplicated", "reordered", "unexpected")},
             "readers_done": sum(r["readers_done"] for r in runs),
             "failed": any(stream_problems(r) for r in runs)}
            for side, runs in groups.items()]


def bar_rows(medians: list[dict[str, Any]], streams: list[dict[str, Any]], *,
             memories: int, users: int) -> list[dict[str, Any]]:
    """Issue 23's bars (and 17's search bars): what was measured, and pass (True),
    FAIL (False) or why there is no verdict. Only the search bars of the run's
    memories and users are given (issue 23's when no bar has them)."""
    def median(route: str, side: str) -> dict[str, Any] | None:
        return next((m for m in medians if (m["route"], m["side"], m["connections"]) ==
                     (route, side, BAR_CONNECTIONS)), None)

    out = []
    measured = (memories, users) if (memories, users) in {(b.memories, b.users) for b in BARS} \
        else (BAR_MEMORIES, 1)
    for bar in BARS:
        if bar.route == SEARCH and (bar.memories, bar.users) != measured:
            continue  # the search bars of the run's setting (issue 23's for a setting of none)
        ours, theirs = median(bar.route, MNEMEX), median(bar.route, ARK)
        measured_text, verdict = "-", None
        if ours is not None and bar.times_ark is not None:
            measured_text = f"mnemex {ours['median_rps']:,.0f} req/s"
            if theirs is not None:
                ratio = ours["median_rps"] / theirs["median_rps"]
                measured_text += f", ark {theirs['median_rps']:,.0f} ({fmt_ratio(ratio)})"
                verdict = ratio >= bar.times_ark
        elif ours is not None and bar.minimum_rps is not None:
            measured_text = f"{ours['median_rps']:,.0f} req/s"
            verdict = ours["median_rps"] >= bar.minimum_rps
        elif ours is not None and bar.max_p99_over_p50 is not None:
            measured_text = (f"p50 {fmt_ms(ours['median_p50_ms'])} ms, "
                             f"p99 {fmt_ms(ours['median_p99_ms'])} ms ({fmt_ratio(ours['p99_over_p50'])})")
            verdict = ours["p99_over_p50"] <= bar.max_p99_over_p50
        met: bool | str | None = verdict
        if ours is None:
            met = f"no verdict: not measured at {BAR_CONNECTIONS} connections"
        elif bar.times_ark is not None and theirs is None:
            met = "no verdict: ark not measured"
        elif any(m["non_2xx"] or m["socket_errors"] for m in (ours, theirs) if m is not None):
            met = "no verdict: answers >= 400 or socket errors"
        elif bar.route == SEARCH and (memories, users) != (bar.memories, bar.users):
            met = (f"no verdict: {users:,} x {memories:,} memories, the bar's are "
                   f"{bar.users:,} x {bar.memories:,}")
        out.append({"bar": bar.label, "measured": measured_text, "met": met})
    label = (f"pushed stream to {STREAM_BAR_READERS} readers: >= {STREAM_BAR_RATE:,} chunks/s total, "
             "none lost or reordered")
    ours_stream = next((s for s in streams if s["side"] == MNEMEX), None)
    if ours_stream is None:
        out.append({"bar": label, "measured": "-", "met": "no verdict: not measured"})
        return out
    broken = ours_stream["lost"] + ours_stream["duplicated"] + ours_stream["reordered"]
    text = (f"{ours_stream['median_chunks_per_s']:,.0f} chunks/s, {ours_stream['lost']:,} lost, "
            f"{ours_stream['duplicated']:,} duplicated, {ours_stream['reordered']:,} reordered")
    met = ours_stream["median_chunks_per_s"] >= STREAM_BAR_RATE and not broken and not ours_stream["failed"]
    if ours_stream["readers"] != STREAM_BAR_READERS and met:
        met = f"no verdict: {ours_stream['readers']} readers, the bar's are {STREAM_BAR_READERS}"
    out.append({"bar": label, "measured": text, "met": met})
    return out


def baseline_rows(rows: list[dict[str, Any]], medians: list[dict[str, Any]],
                  streams: list[dict[str, Any]], stream_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """mnemex/baseline for every route and connection count both served: the ratio
    of the medians and each round's own ratio."""
    out = []
    for m in medians:
        if m["side"] != BASELINE:
            continue
        ours = next((o for o in medians if (o["route"], o["side"], o["connections"]) ==
                     (m["route"], MNEMEX, m["connections"])), None)
        if ours is None:
            continue
        per_round: dict[int, dict[str, float]] = {}
        for row in rows:
            if (row["route"], row["connections"]) == (m["route"], m["connections"]):
                per_round.setdefault(row["round"], {})[row["side"]] = row["rps"]
        out.append({"route": m["route"], "connections": m["connections"], "baseline": m["median_rps"],
                    "mnemex": ours["median_rps"], "ratio": ours["median_rps"] / m["median_rps"],
                    "round_ratios": [round(r[MNEMEX] / r[BASELINE], 3) for r in per_round.values()
                                     if r.get(BASELINE) and MNEMEX in r]})
    theirs = next((s for s in streams if s["side"] == BASELINE), None)
    ours_stream = next((s for s in streams if s["side"] == MNEMEX), None)
    if theirs and ours_stream and theirs["median_chunks_per_s"]:
        per_round = {}
        for row in stream_rows:
            per_round.setdefault(row["round"], {})[row["side"]] = row["chunks_per_s"]
        out.append({"route": STREAM, "connections": f"{theirs['readers']} readers",
                    "baseline": theirs["median_chunks_per_s"], "mnemex": ours_stream["median_chunks_per_s"],
                    "ratio": ours_stream["median_chunks_per_s"] / theirs["median_chunks_per_s"],
                    "round_ratios": [round(r[MNEMEX] / r[BASELINE], 3) for r in per_round.values()
                                     if r.get(BASELINE) and MNEMEX in r]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ark", type=Path, default=None,
                        help="the Ark reference service's folder, built (default: $MNEMEX_ARK_REFERENCE, "
                             f"else {ARK_DEFAULT} if it exists)")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="another source checkout (e.g. a git worktree of an earlier commit) whose "
                             "server is measured beside this one's, interleaved")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of every server and connection count (default 3; 1 with --quick); "
                             "the tables give the medians")
    parser.add_argument("--connections", default="1,16,64", help="wrk connection counts (default 1,16,64)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 2 s wrk runs, one round, 5,000 chunks per stream")
    parser.add_argument("--duration", type=float, default=None, help="seconds per wrk run (default 8)")
    parser.add_argument("--memories", type=int, default=BAR_MEMORIES,
                        help="memories stored in each mnemex server for the search rows "
                             f"(default {BAR_MEMORIES:,})")
    parser.add_argument("--users", type=int, default=1,
                        help="scopes of --memories memories each that the searches spread over (default 1)")
    parser.add_argument("--routes", default=",".join(ROUTE_NAMES),
                        help=f"what to measure, of {','.join(ROUTE_NAMES)} (default all)")
    parser.add_argument("--chunks", type=int, default=None,
                        help="chunks pushed per stream (default 20,000; 5,000 with --quick)")
    parser.add_argument("--readers", type=int, default=STREAM_BAR_READERS,
                        help=f"readers of each pushed stream (default {STREAM_BAR_READERS})")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="seconds of wrk per server and route before its rounds, not recorded "
                             "(default 2; 0: none)")
    parser.add_argument("--embedder", default="hashing", help="config.embedder of every mnemex server "
                                                              "(default hashing, as the search bar says)")
    parser.add_argument("--bare-stack", choices=("uvicorn", "hypercorn-trio"), default="uvicorn",
                        help="the bare ASGI app's server (default uvicorn with uvloop and httptools)")
    parser.add_argument("--fsync", choices=("batch", "always", "never"), default="batch",
                        help="storage.fsync of every mnemex server (default batch, mnemex's default)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the JSON there instead of bench/results/")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/http.py needs wrk: apt-get install wrk")
    if args.baseline_tree is not None and not (args.baseline_tree / "mnemex" / "__init__.py").exists():
        sys.exit(f"--baseline-tree {args.baseline_tree}: no mnemex/__init__.py there")
    ark_path = args.ark
    if ark_path is None and os.environ.get("MNEMEX_ARK_REFERENCE"):
        ark_path = Path(os.environ["MNEMEX_ARK_REFERENCE"])
    if ark_path is None and ARK_DEFAULT.exists():
        ark_path = ARK_DEFAULT
    ark, ark_skipped = ark_package(ark_path)
    if ark is None:
        print(f"ark       skipped: {ark_skipped}", flush=True)
    duration = args.duration or (2.0 if args.quick else 8.0)
    rounds = args.rounds or (1 if args.quick else 3)
    chunks = args.chunks or (5_000 if args.quick else 20_000)
    connections = [int(c) for c in args.connections.split(",")]
    unknown = set(args.routes.split(",")) - set(ROUTE_NAMES)
    if unknown or args.users < 1:
        sys.exit(f"--routes: unknown {', '.join(sorted(unknown))}" if unknown else "--users must be >= 1")
    routes = {ROUTE_NAMES[name] for name in args.routes.split(",")}
    rows: list[dict[str, Any]] = []
    stream_rows: list[dict[str, Any]] = []
    warnings: list[str] = []

    def run(server: Server, route: str, url: str, script: str, *, conns: int, round_: int) -> None:
        row = {"route": route, "side": server.side, "connections": conns, "round": round_,
               **measured(server.process.pid, url, script, conns, duration)}
        rows.append(row)
        print(f"  round {round_} {server.side:9} {route:19} c={conns:<3} {row['rps']:>8,.0f} req/s"
              f"  p50 {fmt_ms(row['p50_ms']):>5} ms  p99 {fmt_ms(row['p99_ms']):>5} ms"
              f"  CPU {row.get('server_cpu_us', float('nan')):>6,.0f} us/req", flush=True)
        if row["non_2xx"] or row["socket_errors"]:
            warnings.append(f"{server.side} {route} c={conns} round {round_}: {row['non_2xx']:,.0f} non-2xx "
                            f"answers, {row['socket_errors']:,.0f} socket errors")
        wait_until_idle(server.process.pid)

    with tempfile.TemporaryDirectory() as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        servers = []
        if args.baseline_tree is not None:
            servers.append(start_mnemex(stack, BASELINE, args.baseline_tree.resolve(), tmp,
                                        embedder=args.embedder, chunks=chunks, fsync=args.fsync))
        servers.append(start_mnemex(stack, MNEMEX, ROOT, tmp, embedder=args.embedder, chunks=chunks,
                                    fsync=args.fsync))
        if ark is not None:
            servers.append(start_ark(stack, ark, tmp))
        servers.append(start_bare(stack, tmp, args.bare_stack))
        warnings += [w for w in map(probe, servers) if w]
        warnings += [w for w in map(store_read_session, servers) if w]
        for server in servers:
            if server.kind == MNEMEX and SEARCH in routes and (
                    warning := store_memories(server, args.memories, args.users)):
                warnings.append(warning)
            # what storing queued (indexing, journal flushes, snapshots) is not measured
            wait_until_idle(server.process.pid, limit_s=60)
        urls = {GET_MESSAGES: (f"/messages?session_id={READ_SESSION}", ""),
                SEARCH: ("", search_script(args.users)), POST_MESSAGES: ("", POST_MESSAGES_LUA)}
        for route in (r for r in ROUTES if r in routes):
            path, script = urls[route]
            for server in servers:
                if server.serves(route) and args.warmup > 0:
                    # not recorded: the first searches after storing cost mnemex about twice the CPU
                    # of later ones, and node compiles its hot paths as they run
                    wrk(server.base + path, script, max(connections), args.warmup)
                    wait_until_idle(server.process.pid)
            for round_ in range(1, rounds + 1):
                for conns in connections:
                    for server in servers:
                        if server.serves(route):
                            run(server, route, server.base + path, script, conns=conns, round_=round_)
        for round_ in range(1, rounds + 1 if STREAM in routes else 1):
            for server in servers:
                row = {"route": STREAM, "side": server.side, "round": round_,
                       **measured_stream(server, f"bench-{round_}", chunks=chunks, readers=args.readers)}
                stream_rows.append(row)
                print(f"  round {round_} {server.side:9} {STREAM:19} {args.readers} readers "
                      f"{row['chunks_per_s']:>8,.0f} chunks/s in {row['seconds']:.2f} s, "
                      f"lost {row['lost']:,}, reordered {row['reordered']:,}", flush=True)
                warnings += [f"{server.side} {STREAM} round {round_}: {p}" for p in stream_problems(row)]
                wait_until_idle(server.process.pid)
        for server in servers:
            if any(w.startswith((f"{server.side}:", f"{server.side} ")) for w in warnings):
                tail = server.log.read_text(errors="replace").splitlines()[-20:]
                print(f"\n{server.side} answered errors; the end of its log:", *tail, sep="\n  ")

    medians = summary(rows)
    streams = stream_summary(stream_rows)
    searched = f"{args.memories:,} memories" + (f" x {args.users:,} users" if args.users > 1 else "")
    print()
    print(table(["route", "server", "conns", "runs", "req/s (median)", "min-max", "p50 ms", "p99 ms",
                 "p99/p50", "CPU us/req", "non-2xx", "socket err"],
                [[m["route"] + (f" ({searched})" if m["route"] == SEARCH else ""), m["side"],
                  m["connections"], m["runs"], fmt_num(m["median_rps"]),
                  f"{m['rps_min']:,.0f}-{m['rps_max']:,.0f}",
                  fmt_ms(m["median_p50_ms"]), fmt_ms(m["median_p99_ms"]), fmt_ratio(m["p99_over_p50"]),
                  fmt_num(m["median_server_cpu_us"]), fmt_num(m["non_2xx"]), fmt_num(m["socket_errors"])]
                 for m in medians], left=2))
    print()
    print(table(["pushed stream", "readers", "chunks", "runs", "chunks/s (median)", "min-max", "seconds",
                 "CPU us/chunk", "lost", "duplicated", "reordered", "readers done"],
                [[s["side"], s["readers"], fmt_num(s["chunks"]), s["runs"], fmt_num(s["median_chunks_per_s"]),
                  f"{s['min']:,.0f}-{s['max']:,.0f}", f"{s['median_seconds']:.3f}",
                  fmt_num(s["median_server_cpu_us"], 1), fmt_num(s["lost"]), fmt_num(s["duplicated"]),
                  fmt_num(s["reordered"]), f"{s['readers_done']}/{s['readers'] * s['runs']}"]
                 for s in streams]))
    bars = bar_rows(medians, streams, memories=args.memories, users=args.users)
    print()
    verdicts = {True: "pass", False: "FAIL"}
    title = "bar (issue 23)" + ("" if (args.memories, args.users) == (BAR_MEMORIES, 1) else ", search: 17")
    print(table([title, "measured", ""],
                [[b["bar"], b["measured"], verdicts.get(b["met"], b["met"])] for b in bars], left=3))
    versus = []
    if args.baseline_tree is not None:
        versus = baseline_rows(rows, medians, streams, stream_rows)
        print()
        print(table(["mnemex beside the baseline tree", "conns", "baseline", "mnemex", "mnemex/baseline",
                     "per round"],
                    [[v["route"], v["connections"], fmt_num(v["baseline"]), fmt_num(v["mnemex"]),
                      fmt_ratio(v["ratio"]), " ".join(f"{r:.2f}" for r in v["round_ratios"])]
                     for v in versus]))
    if ark is None:
        print(f"\nark skipped: {ark_skipped}")
    for warning in warnings:
        print(f"WARNING: {warning}")
    report = {
        "benchmark": "http", "machine": machine(), "duration_s": duration, "rounds": rounds,
        "connections": connections, "warmup_s": args.warmup, "memories": args.memories,
        "users": args.users, "routes": sorted(routes), "embedder": args.embedder, "fsync": args.fsync,
        "stream": {"chunks": chunks, "readers": args.readers}, "bare_stack": args.bare_stack,
        "servers": {s.side: s.imported for s in servers}, "ark_skipped": ark_skipped or None,
        "baseline_tree": str(args.baseline_tree.resolve()) if args.baseline_tree else None,
        "medians": medians, "streams": streams, "bars": bars, "baseline": versus, "warnings": warnings,
        "rows": rows, "stream_rows": stream_rows}
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        path = args.out
    else:
        # a smoke or partial run leaves the last full run's http.json alone
        custom = args.rounds not in (None, 3) or any(
            getattr(args, key) != parser.get_default(key)
            for key in ("connections", "duration", "memories", "users", "routes", "chunks", "readers",
                        "embedder", "bare_stack", "warmup", "fsync"))
        path = write_results("http-quick" if args.quick else "http-custom" if custom else "http", report)
    print(f"\nwrote {path}")
    if warnings:
        sys.exit(1)


if __name__ == "__main__":
    main()
