"""The server cannot be misused: forged origins and hosts, wrong content types,
slow or oversized clients, hostile JSON, overload and a bad command line are all
refused with a JSON 4xx/5xx (or a closed connection), never a 500 or a hang.

Timeout tests use raw trio sockets (an HTTP client would not send half a request)
and real time, kept short: each timeout is configured to half a second."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from waiting import eventually

import mnemex
from mnemex.config import ServerConfig
from mnemex.server import ServerSettings

EVIL = "https://evil.example"
APP = "https://app.example"
MESSAGE = {"role": "user", "content": "hello"}


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")


def port_of(http: httpx.AsyncClient) -> int:
    port = http.base_url.port
    assert port is not None
    return port


def assert_json_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert isinstance(body.get("error"), str) and body["error"], body
    return body


async def stored_messages(http: httpx.AsyncClient, session_id: str = "s") -> int:
    r = await http.get("/messages", params={"session_id": session_id})
    assert r.status_code == 200, r.text
    return int(r.json()["total"])


async def stored_memories(http: httpx.AsyncClient, word: str) -> int:
    r = await http.post("/memory/search", json={"query": word, "user_id": "u", "app_name": "a",
                                                "mode": "keyword", "top_k": 100})
    assert r.status_code == 200, r.text
    return len(r.json()["results"])


# -- raw connections --------------------------------------------------------------------------
async def until_closed(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection (a reset is a close too)."""
    received = bytearray()
    while True:
        try:
            data = await stream.receive_some()
        except trio.BrokenResourceError:
            return bytes(received)
        if not data:
            return bytes(received)
        received += data


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, separator, body = raw.partition(b"\r\n\r\n")
    assert separator, f"not a whole HTTP response: {raw[:300]!r}"
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


async def read_response(stream: trio.SocketStream) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length, leaving the connection open."""
    received = bytearray()
    while b"\r\n\r\n" not in received:
        data = await stream.receive_some()
        assert data, f"connection closed before a whole response: {bytes(received)!r}"
        received += data
    status, headers, body = parse_response(bytes(received))
    assert "content-length" in headers, headers
    while len(body) < int(headers["content-length"]):
        data = await stream.receive_some()
        assert data, "connection closed inside a response body"
        body += data
    return status, headers, body


def request_head(port: int, method: str, path: str, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
             *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# -- origin -----------------------------------------------------------------------------------
async def test_a_forged_origin_is_refused_and_stores_nothing(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        evil = {"Origin": EVIL}
        r = await http.post("/messages", json={"session_id": "s", "messages": [MESSAGE]}, headers=evil)
        assert_json_error(r, 403)
        assert_json_error(await http.get("/messages", params={"session_id": "s"}, headers=evil), 403)
        assert "access-control-allow-origin" not in r.headers
        assert await stored_messages(http) == 0


async def test_no_origin_or_the_servers_own_origin_is_accepted(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        own = {"Origin": f"http://127.0.0.1:{port_of(http)}"}
        r = await http.post("/messages", json={"session_id": "s", "messages": [MESSAGE]}, headers=own)
        assert r.is_success, r.text
        r = await http.post("/messages", json={"session_id": "s", "messages": [MESSAGE]})
        assert r.is_success, r.text
        assert (await http.get("/messages", params={"session_id": "s"}, headers=own)).is_success
        assert await stored_messages(http) == 2


async def test_with_a_token_only_the_configured_cors_origins_are_served(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), token="s3cret", cors_origins=(APP,)) as http:
        auth = {"Authorization": "Bearer s3cret"}
        preflight = await http.options("/messages", headers={
            "Origin": APP, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert preflight.status_code in (200, 204), preflight.text
        assert preflight.headers.get("access-control-allow-origin") == APP
        assert "POST" in preflight.headers.get("access-control-allow-methods", "").upper()
        allowed_headers = preflight.headers.get("access-control-allow-headers", "").lower()
        assert "authorization" in allowed_headers and "content-type" in allowed_headers

        r = await http.post("/messages", json={"session_id": "s", "messages": [MESSAGE]},
                            headers={"Origin": APP, **auth})
        assert r.is_success, r.text
        assert r.headers.get("access-control-allow-origin") == APP
        got = await http.get("/messages", params={"session_id": "s"}, headers={"Origin": APP, **auth})
        assert got.is_success and got.headers.get("access-control-allow-origin") == APP
        # an allowed origin does not stand in for the token
        assert_json_error(await http.get("/messages", params={"session_id": "s"}, headers={"Origin": APP}),
                          401)

        evil_preflight = await http.options("/messages", headers={
            "Origin": EVIL, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert_json_error(evil_preflight, 403)
        assert "access-control-allow-origin" not in evil_preflight.headers
        evil = await http.post("/messages", json={"session_id": "s", "messages": [MESSAGE]},
                               headers={"Origin": EVIL, **auth})
        assert_json_error(evil, 403)
        assert "access-control-allow-origin" not in evil.headers
        r = await http.get("/messages", params={"session_id": "s"}, headers=auth)
        assert r.json()["total"] == 1


# -- host (DNS rebinding) ---------------------------------------------------------------------
@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "localhost.evil.example:{port}",
                                  "127.0.0.1.evil.example:{port}"])
async def test_a_host_that_is_not_loopback_is_refused(tmp_path: Path, host: str, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        header = {"Host": host.format(port=port_of(http))}
        assert_json_error(await http.get("/messages", params={"session_id": "s"}, headers=header), 403)
        r = await http.post("/messages", json={"session_id": "s", "messages": [MESSAGE]}, headers=header)
        assert_json_error(r, 403)
        assert await stored_messages(http) == 0
        # a health probe addresses a pod by its IP: /health answers OK to any Host, and only that
        health = await http.get("/health", headers=header)
        assert health.status_code == 200 and health.text == "OK"


async def test_loopback_host_names_are_accepted(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        port = port_of(http)
        for host in (f"localhost:{port}", "localhost", f"127.0.0.1:{port}", f"[::1]:{port}"):
            r = await http.get("/messages", params={"session_id": "s"}, headers={"Host": host})
            assert r.is_success, (host, r.status_code, r.text)


async def test_allowed_hosts_adds_names_and_refuses_the_rest(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), allowed_hosts=("mnemex.internal",)) as http:
        port = port_of(http)
        for host in ("mnemex.internal", f"mnemex.internal:{port}", f"localhost:{port}"):
            r = await http.get("/messages", params={"session_id": "s"}, headers={"Host": host})
            assert r.is_success, (host, r.status_code, r.text)
        r = await http.get("/messages", params={"session_id": "s"}, headers={"Host": f"evil.example:{port}"})
        assert_json_error(r, 403)


# -- content type -----------------------------------------------------------------------------
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
async def test_a_json_route_refuses_a_body_of_another_content_type(tmp_path: Path, content_type: str,
                                                                   server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        body = json.dumps({"session_id": "s", "messages": [MESSAGE]})
        r = await http.post("/messages", content=body, headers={"Content-Type": content_type})
        assert_json_error(r, 415)
        memory = json.dumps({"content": "smuggled fact", "user_id": "u", "app_name": "a"})
        assert_json_error(await http.post("/memory", content=memory, headers={"Content-Type": content_type}),
                          415)
        assert await stored_messages(http) == 0
        assert await stored_memories(http, "smuggled") == 0
        # the same body as JSON (with a charset parameter) is taken
        r = await http.post("/messages", content=body,
                            headers={"Content-Type": "application/json; charset=utf-8"})
        assert r.is_success, r.text


async def test_a_json_route_refuses_a_body_without_a_content_type_and_takes_json_types(tmp_path: Path,
                                                                                     server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        body = json.dumps({"session_id": "s", "messages": [MESSAGE]}).encode()
        request = http.build_request("POST", "/messages", content=body)
        request.headers.pop("Content-Type", None)
        r = await http.send(request)
        assert_json_error(r, 415)
        assert "missing" in r.json()["error"]
        for content_type in ("text/plain", "application/json", "text/plain", "Application/Vnd.Api+JSON"):
            r = await http.post("/messages", content=body, headers={"Content-Type": content_type})
            assert r.status_code == (415 if content_type == "text/plain" else 200), (content_type, r.text)
        assert await stored_messages(http) == 2


# -- the token --------------------------------------------------------------------------------
@pytest.mark.parametrize("build", [
    lambda: mnemex.Config(server=ServerConfig(token="")),
    lambda: ServerSettings(token=""),
    lambda: mnemex.load_config({"server": {"token": ""}}),
], ids=["Config", "ServerSettings", "load_config"])
def test_an_empty_token_is_refused(build: Any) -> None:
    with pytest.raises(mnemex.InvalidInput, match="token"):
        build()


# -- timeouts ---------------------------------------------------------------------------------
async def test_a_client_sending_half_its_headers_is_disconnected(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), keep_alive_timeout=0.5) as http:
        stream = await trio.open_tcp_stream("127.0.0.1", port_of(http))
        async with stream:
            await stream.send_all(f"POST /messages HTTP/1.1\r\nHost: 127.0.0.1:{port_of(http)}\r\n"
                                  f"Content-Type: appl".encode())
            sent = trio.current_time()
            with trio.fail_after(5):
                received = await until_closed(stream)
            assert trio.current_time() - sent >= 0.25  # not at once: after keep_alive_timeout
            assert received == b"" or received.startswith(b"HTTP/1.1 408"), received[:200]


async def test_a_body_that_stops_arriving_gets_408_and_the_connection_closed(tmp_path: Path,
                                                                            server: Any) -> None:
    settings = {"body_timeout": 0.5, "idle_read_timeout": 60.0, "keep_alive_timeout": 60.0}
    async with server(cfg(tmp_path), **settings) as http:
        port = port_of(http)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request_head(port, "POST", "/messages", Content_Type="application/json",
                                               Content_Length="1000") + b'{"session_')
            with trio.fail_after(5):  # body_timeout, not keep_alive_timeout nor idle_read_timeout
                received = await until_closed(stream)
        status, headers, body = parse_response(received)
        assert status == 408, received[:300]
        assert headers.get("connection", "").lower() == "close", headers
        assert json.loads(body)["error"]
        assert await stored_messages(http) == 0


async def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), keep_alive_timeout=0.5) as http:
        port = port_of(http)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request_head(port, "GET", "/health"))
            with trio.fail_after(5):
                status, headers, _ = await read_response(stream)
            assert status == 200 and headers.get("connection", "").lower() != "close", headers
            answered = trio.current_time()
            with trio.fail_after(5):
                assert await until_closed(stream) == b""
            assert trio.current_time() - answered >= 0.25


async def test_a_connection_in_use_outlives_the_keep_alive_timeout(tmp_path: Path, server: Any) -> None:
    # a request every ~0.1 s for over two keep-alive timeouts of 1 s: the connection is never
    # idle that long, so it stays open; once idle, it closes after the timeout
    async with server(cfg(tmp_path), keep_alive_timeout=1.0) as http:
        port = port_of(http)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            began = trio.current_time()
            for _ in range(25):
                await stream.send_all(request_head(port, "GET", "/health"))
                with trio.fail_after(5):
                    status, _, body = await read_response(stream)
                assert (status, body) == (200, b"OK")
                await trio.sleep(0.1)
            assert trio.current_time() - began >= 2.5
            answered = trio.current_time()
            with trio.fail_after(10):
                assert await until_closed(stream) == b""
            assert trio.current_time() - answered >= 0.5


async def test_a_push_stream_that_falls_silent_is_closed(tmp_path: Path, server: Any) -> None:
    settings = {"idle_read_timeout": 0.5, "body_timeout": 60.0, "keep_alive_timeout": 60.0}
    async with server(cfg(tmp_path), **settings) as http:
        port = port_of(http)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            line = b'{"delta": 1}\n'
            head = request_head(port, "POST", "/stream/q1", Content_Type="application/x-ndjson",
                                Transfer_Encoding="chunked")
            await stream.send_all(head + f"{len(line):x}\r\n".encode() + line + b"\r\n")
            sent = trio.current_time()
            with trio.fail_after(5):
                received = await until_closed(stream)
            assert trio.current_time() - sent >= 0.25
            assert received == b"" or received.startswith(b"HTTP/1.1 408"), received[:200]


# -- 413 --------------------------------------------------------------------------------------
def body_of_size(size: int) -> bytes:
    head, tail = b'{"session_id": "s", "messages": [{"role": "user", "content": "', b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


async def test_413_closes_a_raw_keep_alive_connection(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), max_body_bytes=1024) as http:
        port = port_of(http)
        body = body_of_size(5000)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request_head(port, "POST", "/messages", Content_Type="application/json",
                                               Content_Length=str(len(body))) + body)
            with trio.fail_after(5):
                received = await until_closed(stream)  # Connection: close, and closed
        status, headers, answer = parse_response(received)
        assert status == 413, received[:300]
        assert headers.get("connection", "").lower() == "close", headers
        assert headers.get("content-type", "").startswith("application/json")
        assert "1,024" in json.loads(answer)["error"] or "1024" in json.loads(answer)["error"]
        assert await stored_messages(http) == 0


async def test_after_a_413_the_clients_next_request_works(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), max_body_bytes=1024) as http:
        r = await http.post("/messages", content=body_of_size(5000),
                            headers={"Content-Type": "application/json"})
        assert_json_error(r, 413)
        assert r.headers.get("connection", "").lower() == "close"
        r = await http.post("/messages", json={"session_id": "s", "messages": [MESSAGE]})
        assert r.is_success, r.text
        assert await stored_messages(http) == 1


# -- hostile JSON -----------------------------------------------------------------------------
DEEP = 10_000
DEEP_ARRAY = "[" * DEEP + "]" * DEEP
DEEP_OBJECT = '{"a": ' * DEEP + "1" + "}" * DEEP


@pytest.mark.parametrize(("path", "body"), [
    ("/messages", DEEP_ARRAY),
    ("/messages", '{"session_id": "s", "messages": [{"role": "user", "content": "x", "deep": '
                  + DEEP_ARRAY + "}]}"),
    ("/messages", '{"session_id": "s", "messages": [{"role": "user", "content": ' + DEEP_OBJECT + "}]}"),
    ("/memory", DEEP_OBJECT),
    ("/memory", '{"content": "deep fact", "user_id": "u", "app_name": "a", "metadata": {"d": '
                + DEEP_ARRAY + "}}"),
    ("/memory/batch", '{"memories": ' + DEEP_ARRAY + "}"),
], ids=["messages-array", "messages-field", "messages-object", "memory-object", "memory-metadata",
        "batch-array"])
async def test_deeply_nested_json_is_400_not_500(tmp_path: Path, path: str, body: str, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert_json_error(r, 400)
        assert (await http.get("/health")).status_code == 200
        assert await stored_messages(http) == 0
        assert await stored_memories(http, "deep") == 0


@pytest.mark.parametrize(("path", "body"), [
    ("/messages", '{"session_id": "s", "messages": [{"role": "user", "content": "x", "n": 1e999}]}'),
    ("/messages", '{"session_id": "s", "messages": [{"role": "user", "content": "x", "n": -1e999}]}'),
    ("/memory", '{"content": "huge fact", "user_id": "u", "app_name": "a", "importance": 1e999}'),
    ("/memory", '{"content": "huge fact", "user_id": "u", "app_name": "a", "timestamp": 1e999}'),
    ("/memory", '{"content": "huge fact", "user_id": "u", "app_name": "a", "metadata": {"n": 1e999}}'),
], ids=["message-field", "message-negative", "importance", "timestamp", "metadata"])
async def test_a_number_out_of_range_is_400(tmp_path: Path, path: str, body: str, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert_json_error(r, 400)
        assert await stored_messages(http) == 0
        assert await stored_memories(http, "huge") == 0


@pytest.mark.parametrize("timestamp", ["0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", 1e13, -5])
async def test_a_timestamp_outside_1970_to_9999_is_400_naming_it(tmp_path: Path, timestamp: Any,
                                                                  server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/memory", json={"content": "dated fact", "user_id": "u", "app_name": "a",
                                             "timestamp": timestamp})
        body = assert_json_error(r, 400)
        assert body.get("field") == "timestamp", body
        assert await stored_memories(http, "dated") == 0
        for good in ("2024-05-01T12:00:00Z", 1.7e9):
            r = await http.post("/memory", json={"content": "dated fact", "user_id": "u", "app_name": "a",
                                                 "timestamp": good})
            assert r.is_success, (good, r.text)


# -- overload ---------------------------------------------------------------------------------
async def test_past_max_concurrent_requests_the_server_answers_503_then_recovers(
        tmp_path: Path, server: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mnemex.server")
    async with server(cfg(tmp_path), max_concurrent_requests=2) as http:
        release = trio.Event()

        async def hold_reader(task_status: trio.TaskStatus[None]) -> None:
            async with http.stream("GET", "/stream/nobody", params={"wait-for-query": "10s"}) as r:
                assert r.status_code == 200
                task_status.started()
                await release.wait()

        with trio.fail_after(8):  # well inside wait-for-query: the readers are still waiting
            async with trio.open_nursery() as nursery:
                await nursery.start(hold_reader)
                await nursery.start(hold_reader)
                r = await http.get("/messages", params={"session_id": "s"})
                assert_json_error(r, 503)
                assert r.headers.get("retry-after", "").isdigit(), r.headers
                release.set()
        with trio.fail_after(5):
            await trio.testing.wait_all_tasks_blocked()  # the server sees both readers go
        for _ in range(3):
            assert (await http.get("/messages", params={"session_id": "s"})).status_code == 200
    warnings = [rec for rec in caplog.records
                if rec.name == "mnemex.server" and rec.levelno == logging.WARNING]
    assert warnings and not any(rec.exc_info for rec in warnings)


async def test_past_max_connections_a_new_connection_is_closed_then_served_again(
        tmp_path: Path, server: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mnemex.server")
    async with server(cfg(tmp_path), max_connections=2, keep_alive_timeout=0.5) as http:
        port = port_of(http)
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        for stream in held:  # each busy: a reader waiting for a stream that has not started
            await stream.send_all(request_head(port, "GET", "/stream/later?wait-for-query=10s"))
            assert (await stream.receive_some(4096)).startswith(b"HTTP/1.1 200")
        extra = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(5):
            try:
                await extra.send_all(request_head(port, "GET", "/health"))
                assert await extra.receive_some(4096) == b""  # closed, not answered
            except trio.BrokenResourceError:
                pass  # closed before the request went out
        await extra.aclose()
        for stream in held:
            await stream.aclose()

        async def served() -> bool:  # once the server has let the two go
            try:
                return (await http.get("/health")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(served, what="a connection to be served again")
    warnings = [rec for rec in caplog.records if rec.name == "mnemex.server"
                and rec.levelno == logging.WARNING and "max_connections" in rec.getMessage()]
    assert warnings and not any(rec.exc_info for rec in warnings)


# -- the command line -------------------------------------------------------------------------
def run_serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("MNEMEX_")}
    return subprocess.run([sys.executable, "-m", "mnemex.cli", "serve", "--data-dir", str(tmp_path / "data"),
                           *args], capture_output=True, text=True, timeout=20, cwd=tmp_path, env=env,
                          check=False)


def assert_one_line_exit_2(run: subprocess.CompletedProcess[str], needle: str) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert needle in lines[0], lines[0]
    assert run.returncode == 2, (run.returncode, run.stderr)


def test_serve_on_a_busy_port_exits_2_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run = run_serve(tmp_path, "--port", str(port))
    assert_one_line_exit_2(run, str(port))


@pytest.mark.parametrize(("args", "needle"), [
    (("--port", "70000"), "70000"),
    (("--port", "-1"), "-1"),
    (("--host", "999.1.1.1", "--port", "0"), "999.1.1.1"),
    (("--token", "", "--port", "0"), "token"),
], ids=["port-70000", "port-negative", "host", "empty-token"])
def test_serve_with_a_bad_setting_exits_2_with_one_line(tmp_path: Path, args: tuple[str, ...],
                                                        needle: str) -> None:
    assert_one_line_exit_2(run_serve(tmp_path, *args), needle)


# -- health -----------------------------------------------------------------------------------
async def test_health_without_the_token_shows_no_filesystem_path(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), token="s3cret") as http:
        r = await http.get("/health", headers={"Accept": "application/json"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        assert isinstance(r.json(), dict)
        plain = await http.get("/health")
        assert plain.status_code == 200 and plain.text.strip() == "OK"
        assert plain.headers["content-type"].startswith("text/plain")
        for text in (r.text, plain.text):
            assert str(tmp_path) not in text and str(tmp_path.resolve()) not in text, text
        authorized = await http.get("/health", headers={"Accept": "application/json",
                                                        "Authorization": "Bearer s3cret"})
        assert authorized.status_code == 200
