"""``mnemex.Client(url=...)``: the blocking client over a server, from several threads
and several processes at once."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from remote_servers import config_at, served, url_of

import mnemex
import mnemex.lowlevel

_WORKER = """
import sys, mnemex
url, name = sys.argv[1], sys.argv[2]
with mnemex.Client(url=url) as client:
    agent = client.agent("bot")
    scope = client.scope(user_id="shared", app_name="app")
    for i in range(20):
        agent.append("s1", [{"role": "user", "content": f"{name} {i}"}])
        scope.remember(f"{name} said {i}")
print("ok")
"""


def test_the_blocking_client_makes_the_same_calls_remotely(tmp_path: Path) -> None:
    with served(config_at(tmp_path)) as server, mnemex.Client(url=url_of(server)) as client:
        scope = client.scope(user_id="alice", app_name="chat")
        mid = scope.remember("User writes Java", importance=0.7)
        assert scope.search("java", mode="keyword").hits[0].memory.id == mid
        assert scope.get(mid).importance == 0.7
        assert client.search("java", [("chat", "alice")]).hits[0].app_name == "chat"
        agent = client.agent("bot")
        agent.append("s1", [{"role": "user", "content": "hi"}])
        assert [m.message["content"] for m in agent.history("s1")] == ["hi"]
        assert client.scope_keys() == [("chat", "alice")]
        with agent.subscribe("s1", from_beginning=True) as stream:
            assert next(stream).kind == "message"
            assert next(stream).kind == "live"
        with pytest.raises(mnemex.NotFound):
            scope.get("m-nope")
        assert client.close() is None  # the server shut nothing down: no report


def test_a_client_needs_a_url_for_a_token_and_no_kinds(tmp_path: Path) -> None:
    with pytest.raises(mnemex.InvalidInput):
        mnemex.Client(token="x")
    with pytest.raises(mnemex.InvalidInput):
        mnemex.Client(url="http://127.0.0.1:9", kinds=[mnemex.lowlevel.scope_kind(mnemex.Config(
            embedder="hashing"))])
    with pytest.raises(mnemex.ActorClosed):
        mnemex.Client(url="http://127.0.0.1:9", start_timeout=5)


def test_threads_on_one_server_interleave_safely(tmp_path: Path) -> None:
    with served(config_at(tmp_path)) as server:
        clients = [mnemex.Client(url=url_of(server)) for _ in range(2)]
        errors: list[BaseException] = []

        def work(client: mnemex.Client, name: str) -> None:
            try:
                agent = client.agent("bot")
                scope = client.scope(user_id="shared", app_name="app")
                for i in range(25):
                    agent.append("s1", [{"role": "user", "content": f"{name} {i}"}])
                    scope.remember(f"{name} said {i}")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(clients[i % 2], f"t{i}")) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        history = clients[0].agent("bot").history("s1")
        assert [m.sequence for m in history] == list(range(1, 101))
        for i in range(4):  # each writer's messages in its own order
            mine = [m.message["content"] for m in history if m.message["content"].startswith(f"t{i} ")]
            assert mine == [f"t{i} {n}" for n in range(25)]
        assert clients[1].scope(user_id="shared", app_name="app").count() == 100
        for client in clients:
            client.close()


def test_two_worker_processes_share_one_server(tmp_path: Path) -> None:
    with served(config_at(tmp_path)) as server:
        url = url_of(server)
        workers = [subprocess.Popen([sys.executable, "-c", _WORKER, url, f"p{i}"], stdout=subprocess.PIPE,
                                    text=True) for i in range(2)]
        outputs = [worker.communicate(timeout=120)[0] for worker in workers]
        assert [worker.returncode for worker in workers] == [0, 0]
        assert outputs == ["ok\n", "ok\n"]
        with mnemex.Client(url=url) as client:
            history = client.agent("bot").history("s1")
            assert len(history) == 40
            assert [m.sequence for m in history] == list(range(1, 41))
            assert client.scope(user_id="shared", app_name="app").count() == 40
