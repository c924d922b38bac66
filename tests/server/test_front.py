"""What the HTTP front adds to uvicorn, through raw connections: a head over
64 KiB is refused, a second request's head that stops half-way is cut off,
pipelined requests are answered in order, a JSON answer written whole at once
is the answer uvicorn would send, and routing answers as the reference service
does (one trailing slash ignored; 405 with Allow)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio
from test_guards import parse_response, until_closed  # the raw-connection helpers of the platform's guard tests
from waiting import wait_until

import mnemex


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")


def post(port: int, path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def test_a_head_over_64_kib_is_refused_with_431_and_closed(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        port = http.base_url.port
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
            filler = b"".join(f"X-Filler-{i}: {'y' * 1000}\r\n".encode() for i in range(80))
            try:
                await stream.send_all(head + filler)
            except trio.BrokenResourceError:
                pass  # refused while still sending
            with trio.fail_after(5):
                received = await until_closed(stream)
        assert received.startswith(b"HTTP/1.1 431"), received[:200]
        assert (await http.get("/health")).status_code == 200


async def test_a_second_head_that_stops_half_way_is_cut_off(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), keep_alive_timeout=0.5) as http:
        port = http.base_url.port
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            first = b""
            with trio.fail_after(5):
                while not first.endswith(b"OK"):
                    first += await stream.receive_some()
            await stream.send_all(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Half: ".encode())
            with trio.fail_after(5):
                assert await until_closed(stream) == b""


async def test_pipelined_requests_are_answered_in_order(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        port = http.base_url.port
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            requests = b"".join(post(port, "/messages", {"session_id": "p", "messages": [
                {"role": "user", "content": f"message {i}"}]}) for i in range(5))
            await stream.send_all(requests)
            received = b""
            with trio.fail_after(5):
                while received.count(b'"status":"success"') < 5:
                    received += await stream.receive_some()
        r = await http.get("/messages", params={"session_id": "p"})
        assert [m["message"]["content"] for m in r.json()["messages"]] == [f"message {i}" for i in range(5)]


async def _exchange(port: int, request: bytes, answers: int) -> bytes:
    """What the server sends for ``request`` on a new connection, once it holds
    ``answers`` responses (or the server closed the connection)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        received = b""
        with trio.fail_after(5):
            while received.count(b"HTTP/1.1 ") < answers or not received.endswith((b"}", b"\r\n\r\n")):
                data = await stream.receive_some()
                if not data:
                    break
                received += data
        return received


async def test_a_json_answer_written_at_once_is_the_answer_uvicorn_sends(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        port = http.base_url.port
        body = post(port, "/messages", {"session_id": "w", "messages": [{"role": "user", "content": "hi"}]})
        raw = await _exchange(port, body, 1)
        status, headers, payload = parse_response(raw)
        assert status == 200
        assert set(headers) == {"date", "content-length", "content-type"}
        assert headers["content-type"] == "application/json"
        assert int(headers["content-length"]) == len(payload)
        assert json.loads(payload) == {"status": "success", "session_id": "w", "conversation_id": "w",
                                       "stored": 1, "first_sequence": 1}
        # a client that asks to close: the answer says so, and the connection ends after it
        closing = body.replace(b"Content-Type:", b"Connection: close\r\nContent-Type:", 1)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(closing)
            with trio.fail_after(5):
                raw = await until_closed(stream)
        status, headers, payload = parse_response(raw)
        assert (status, headers["connection"]) == (200, "close")
        assert json.loads(payload)["first_sequence"] == 2
        # HEAD: the GET route's head (its content-length) and no body, the connection kept
        head = f"HEAD /messages?session_id=w HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        get = f"GET /messages?session_id=w HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        raw = await _exchange(port, head + get, 2)
        first, _, second = raw.partition(b"\r\n\r\n")
        status, headers, payload = parse_response(second)
        assert first.startswith(b"HTTP/1.1 200") and b"content-length: %d" % len(payload) in first
        assert status == 200 and json.loads(payload)["total"] == 2


async def test_an_answer_with_headers_of_its_own_goes_the_asgi_way(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), token="s3cret") as http:
        r = await http.get("/sessions")
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json() == {"error": "missing or wrong bearer token"}


async def test_one_trailing_slash_is_ignored_and_a_wrong_method_is_405_with_allow(tmp_path: Path,
                                                                                server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        message = {"role": "user", "content": "x"}
        r = await http.post("/messages/", json={"session_id": "s", "messages": [message]})
        assert r.status_code == 200, r.text
        assert (await http.get("/messages/", params={"session_id": "s"})).json()["total"] == 1
        r = await http.put("/messages", json={})
        assert r.status_code == 405
        assert set(r.headers["allow"].split(", ")) == {"DELETE", "GET", "POST"}
        assert "PUT" in r.json()["error"]
        assert (await http.get("/messages//")).status_code == 404


def test_under_a_low_open_file_limit_connections_are_capped_not_failed(tmp_path: Path) -> None:
    """With 200 files allowed and half kept for journals, the server serves fewer
    connections at once (and says so) instead of failing accept() with EMFILE."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    limited = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200)); "
               "from mnemex.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {name: value for name, value in os.environ.items() if not name.startswith("MNEMEX_")}
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-c", limited, "serve", "--port", str(port),
                                   "--data-dir", str(tmp_path / "data")],
                                  stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: _answers(port), what="the server to answer")
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(250)]  # > the 200 files
        try:
            for conn in held[-10:]:  # past the cap: answered or closed at once, never left hanging
                assert _answered_or_closed(conn, port)
        finally:
            for conn in held:
                conn.close()
        wait_until(lambda: _answers(port), what="the server to answer again")
    finally:
        server.terminate()
        server.wait(timeout=20)
    text = log.read_text()
    assert "serving at most" in text, text
    assert "Too many open files" not in text, text
    assert server.returncode == 0, text


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                         f"Connection: close\r\n\r\n".encode())
            return conn.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def _answered_or_closed(conn: socket.socket, port: int) -> bool:
    conn.settimeout(5)
    try:
        conn.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        data = conn.recv(64)
    except TimeoutError:
        return False  # neither answered nor closed: the server could not accept it
    except OSError:
        return True  # reset: closed
    return data == b"" or data.startswith(b"HTTP/1.1 200")
