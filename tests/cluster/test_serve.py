"""``mnemex serve --ray``: the real command, in a process of its own, in front of the
local three-node Ray cluster (conftest.py), with three shards and 6 s leases. One
server for the module (starting shards costs seconds); each test uses keys of its
own. Streams are read by several readers at once and checked for order and
completeness; a shard is killed with SIGKILL and /health must say so, and a write
acknowledged over HTTP before the kill must be there after."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

import mnemex
import mnemex.ray
from mnemex.lowlevel import vshard_of
from mnemex.ray.placement import read_placement
from mnemex.ray.serving import serving
from mnemex.server import Server, ServerSettings

pytestmark = pytest.mark.slow

START_TIMEOUT = 120.0


class Front:
    """A ``mnemex serve --ray`` process and what it serves."""

    def __init__(self, process: subprocess.Popen[str], url: str, data_dir: Path, log: list[str]) -> None:
        self.process = process
        self.url = url
        self.data_dir = data_dir
        self.log = log

    def http(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)


def _read_log(stream: Any, lines: list[str], found: threading.Event) -> None:
    for line in stream:
        lines.append(line)
        if "mnemex serving on http://" in line:
            found.set()
    found.set()  # the process ended: the waiter reads why


@pytest.fixture(scope="module")
def front(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    base = tmp_path_factory.mktemp("serve-ray")
    data_dir = base / "shared"
    config = base / "mnemex.toml"
    config.write_text('embedder = "hashing"\nfsync = "always"\n')
    command = [sys.executable, "-m", "mnemex.cli", "serve", "--ray", ray_cluster.address,
               "--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir), "--config", str(config),
               "--shards", "3", "--lease-ttl", "6", "--stop-shards"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    found = threading.Event()
    logger = threading.Thread(target=_read_log, args=(process.stderr, lines, found), daemon=True)
    logger.start()
    try:
        found.wait(START_TIMEOUT)
        served = next((m for m in map(re.compile(r"serving on (http://\S+):(\d+)").search, lines) if m), None)
        assert served is not None, f"mnemex serve --ray did not start:\n{''.join(lines)[-4000:]}"
        yield Front(process, f"{served.group(1)}:{served.group(2)}", data_dir, lines)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        logger.join(10)
        assert process.stderr is not None
        process.stderr.close()
        # whatever the server left (it stops its shards on SIGTERM: --stop-shards)
        trio.run(lambda: mnemex.ray.stop_cluster(str(data_dir), timeout=10))
    assert process.returncode == 0, "".join(lines)[-4000:]


def test_remember_search_and_messages_round_trip_through_serve_ray(front: Front) -> None:
    with front.http() as http:
        for i, fact in enumerate(["User writes Java", "User lives in Oslo", "User has a cat named Tom"]):
            r = http.post("/memory", json={"user_id": f"u{i}", "app_name": "chat", "content": fact})
            assert r.status_code == 201, r.text
        r = http.post("/memory/search", json={"user_id": "u1", "app_name": "chat",
                                              "query": "where do they live?"})
        assert r.status_code == 200, r.text
        assert [hit["content"] for hit in r.json()["results"]] == ["User lives in Oslo"]
        scopes = [{"user_id": f"u{i}", "app_name": "chat"} for i in range(3)]
        r = http.post("/memory/search", json={"query": "Java cat", "top_k": 5, "scopes": scopes})
        assert r.status_code == 200, r.text
        assert {hit["user_id"] for hit in r.json()["results"]} == {"u0", "u2"}

        turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        r = http.post("/agents/round/messages", json={"session_id": "s1", "messages": turn})
        assert r.status_code == 200, r.text
        assert r.json()["stored"] == 2
        r = http.get("/agents/round/messages", params={"session_id": "s1"})
        assert [m["message"] for m in r.json()["messages"]] == turn
        assert http.get("/agents/round/sessions").json() == {"sessions": ["s1"]}
        # errors keep their statuses: a bad body is 400 naming the field, an unknown memory 404
        assert http.post("/memory", json={"user_id": "u0", "app_name": "chat"}).status_code == 400
        assert http.get("/memory/nope", params={"user_id": "u0", "app_name": "chat"}).status_code == 404


class Reader(threading.Thread):
    """Reads GET /stream/{name} (server-sent events) to its end, keeping every data
    line; ``leave_after`` chunks, it disconnects instead."""

    def __init__(self, front: Front, path: str, leave_after: int | None = None) -> None:
        super().__init__(daemon=True)
        self.front, self.path, self.leave_after = front, path, leave_after
        self.data: list[str] = []
        self.opened = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.front.http(timeout=60) as http, http.stream("GET", self.path) as response:
                assert response.status_code == 200, response.read()
                self.opened.set()
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.data.append(line[len("data: "):])
                        if self.leave_after is not None and len(self.data) >= self.leave_after:
                            return
        except BaseException as exc:
            self.error = exc
        finally:
            self.opened.set()


def test_a_pushed_stream_reaches_every_reader_in_order_and_whole(front: Front) -> None:
    chunks = [json.dumps({"object": "chat.completion.chunk",
                          "choices": [{"index": 0, "delta": {"content": f"c{i}"}}]}) for i in range(600)]
    readers = [Reader(front, "/stream/q-relay?from-beginning=true&markers=true") for _ in range(3)]
    leaver = Reader(front, "/stream/q-relay?from-beginning=true", leave_after=20)
    for reader in [*readers, leaver]:
        reader.start()
    for reader in [*readers, leaver]:
        assert reader.opened.wait(30)

    def body() -> Iterator[bytes]:  # the NDJSON in pieces that cut lines in two
        text = "".join(chunk + "\n" for chunk in chunks).encode()
        for start in range(0, len(text), 7_000):
            yield text[start:start + 7_000]

    with front.http() as http:
        r = http.post("/stream/q-relay", content=body(), headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 200, r.text
        assert r.json()["chunks_received"] == len(chunks)
        late = Reader(front, "/stream/q-relay?from-beginning=true")  # after the push, before the end
        late.start()
        assert late.opened.wait(30)
        assert http.post("/stream/q-relay/complete").json()["status"] == "completed"
        stats = http.get("/stream-statistics").json()
        assert stats["queries"]["q-relay"]["total_chunks"] == len(chunks)
    for reader in [*readers, leaver, late]:
        reader.join(60)
        assert not reader.is_alive() and reader.error is None, reader.error
    for reader in readers:  # the markers: LIVE_MODE once caught up, wherever that fell
        assert reader.data[-2:] == ["[STREAM_END]", "[DONE]"]
        assert [d for d in reader.data[:-2] if d != "[LIVE_MODE]"] == chunks, reader.data[:5]
        assert reader.data.count("[LIVE_MODE]") == 1
    assert late.data == [*chunks, "[DONE]"]
    assert leaver.data == chunks[:20]


def test_a_session_stream_relays_each_append_to_every_reader(front: Front) -> None:
    agent = "/agents/watched"
    with front.http() as http:
        assert http.post(f"{agent}/messages", json={"session_id": "live", "messages": [
            {"role": "user", "content": "m0"}]}).status_code == 200
        readers = [Reader(front, f"{agent}/stream/live?from-beginning=true") for _ in range(3)]
        for reader in readers:
            reader.start()
        for reader in readers:
            assert reader.opened.wait(30)
        time.sleep(0.5)  # the readers' subscriptions stand before the appends (else they read them stored)
        for i in range(1, 40):
            r = http.post(f"{agent}/messages", json={"session_id": "live", "messages": [
                {"role": "user", "content": f"m{i}"}]})
            assert r.status_code == 200, r.text
        assert http.post(f"{agent}/session/live/complete").status_code == 200
    for reader in readers:
        reader.join(60)
        assert not reader.is_alive() and reader.error is None, reader.error
        contents = [json.loads(d)["choices"][0]["delta"].get("content") for d in reader.data[:-1]]
        assert contents == [f"m{i}" for i in range(40)] + [None]  # then the stop chunk
        assert reader.data[-1] == "[DONE]"


def test_health_shows_a_killed_shard_and_a_write_acknowledged_over_http_survives(front: Front) -> None:
    agent = "survivor"
    with front.http() as http:
        health = http.get("/health", headers={"accept": "application/json"}).json()
        assert health["status"] == "ok", health
        assert [s["state"] for s in health["shards"]] == ["serving"] * 3
        r = http.post(f"/agents/{agent}/messages", json={"session_id": "s", "messages": [
            {"role": "user", "content": "acknowledged before the kill"}]})
        assert r.status_code == 200, r.text

        placement = read_placement(front.data_dir)
        assert placement is not None
        index = placement.owners[vshard_of("agent", (agent,))]
        # readers of streams kept by that shard: a session's, and a pushed stream not started yet
        doomed = next(name for name in (f"doomed-{i}" for i in range(10_000))
                      if placement.owners[vshard_of("stream", (name,))] == index)
        readers = [Reader(front, f"/agents/{agent}/stream/s"),
                   Reader(front, f"/stream/{doomed}?wait-for-query=60s")]
        for reader in readers:
            reader.start()
            assert reader.opened.wait(30)
        time.sleep(0.5)  # both are waiting on the shard
        os.kill(health["shards"][index]["pid"], signal.SIGKILL)

        r = http.get("/health", headers={"accept": "application/json"})
        assert r.status_code == 200
        shown = r.json()
        killed = shown["shards"][index]
        assert shown["status"] == "degraded", shown
        assert not killed["reachable"] or killed["held"] < killed["assigned"] or killed["state"] != "serving"
        metrics = http.get("/metrics").text
        up = re.search(rf'mnemex_shard_up{{shard="shard-{index}"}} ([01])\.0', metrics)
        assert up is not None, metrics
        if up.group(1) == "0":  # unknown, not zero: no other series of it
            assert f'mnemex_live_actors{{shard="shard-{index}"}}' not in metrics

        # the readers end with an error event, then [DONE]; not cut off, not left waiting
        for reader in readers:
            reader.join(30)
            assert not reader.is_alive() and reader.error is None, reader.error
            assert reader.data[-1] == "[DONE]"
            assert json.loads(reader.data[-2])["error"]["code"] == "ActorClosed", reader.data

        # the write was journaled before it was acknowledged: the restarted shard has it
        r = http.get(f"/agents/{agent}/messages", params={"session_id": "s"})
        assert r.status_code == 200, r.text
        assert [m["message"]["content"] for m in r.json()["messages"]] == ["acknowledged before the kill"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if http.get("/health", headers={"accept": "application/json"}).json()["status"] == "ok":
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the cluster did not serve every virtual shard again within 30 s")


# -- the platform contract (tests/server/test_platform_compat.py) through serve --ray -----------------
COMPAT_CASES = ("test_post_messages_answers_200_success",
                "test_sequence_is_1_based_in_insertion_order_across_sessions",
                "test_health_is_text_ok_or_json_on_request",
                "test_the_agent_prefix_keeps_agents_apart_from_the_default_ark")


@functools.cache
def _compat() -> Any:
    """The platform compatibility tests, run here against a cluster (not copied)."""
    path = Path(__file__).parents[1] / "server" / "test_platform_compat.py"
    spec = importlib.util.spec_from_file_location("mnemex_platform_compat", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def _cluster_server(config: mnemex.Config, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The compatibility tests' ``server`` fixture, serving a cluster of two shards on
    the test's Ray cluster (the hashing embedder: no model to load in each shard)."""
    config = config.replace(models=msgspec.structs.replace(config.models, embedder="hashing"))
    opener = serving(address=None, shards=2, stop_shards=True, ttl=6.0, margin=1.5)
    server = Server(config, ServerSettings(host="127.0.0.1", port=0, **settings), opener=opener)
    await trio.to_thread.run_sync(server.start)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as client:
            yield client
    finally:
        await trio.to_thread.run_sync(server.close)


@pytest.mark.parametrize("case", COMPAT_CASES)
async def test_the_platform_contract_holds_through_serve_ray(case: str, tmp_path: Path,
                                                             ray_cluster: Any) -> None:
    await getattr(_compat(), case)(tmp_path, _cluster_server)
