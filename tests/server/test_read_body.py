"""``read_body`` on the server's own stack (uvicorn, httptools, asyncio, and the
server's own protocol and request cycle): the body that came with its head is
taken at once, without a timer or a ``receive()``, and every other read, a
second one of the same request included, is bounded by ``body_timeout``; on
plain uvicorn (no shortcut) the body is read the bounded way."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import uvicorn
from starlette.requests import Request

from mnemex.server import ServerSettings
from mnemex.server._http import HttpError, read_body
from mnemex.server._serve import _protocol


async def _serve_once(app: Any, body: bytes, *, plain: bool = False) -> httpx.Response:
    """Serve ``app`` with uvicorn on 127.0.0.1 for one POST of ``body``: with the
    server's own protocol, or (``plain``) uvicorn's."""
    http: Any = "httptools" if plain else _protocol(ServerSettings(), 16)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, loop="asyncio", http=http, lifespan="off",
                            log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve())
    try:
        for _ in range(500):  # bounded: it starts within a few ms
            if server.started:
                break
            await asyncio.sleep(0.01)
        assert server.started
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(timeout=10) as http:
            return await http.post(f"http://127.0.0.1:{port}/", content=body,
                                   headers={"Content-Type": "application/json"})
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


def test_a_second_read_of_a_body_answers_408_within_the_timeout() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive, send)
        cycle = receive.__self__
        seen["first"] = await read_body(request, 1000, 5.0)
        seen["taken"] = not cycle.body and not cycle.message_event.is_set()  # by the shortcut
        seen["again"] = cycle.take_whole_body()
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            # the body was taken: receive() would now wait for the client to leave
            await asyncio.wait_for(read_body(request, 1000, 0.2), 5)
        except HttpError as exc:
            status = exc.status
        else:
            status = 200
        seen["waited"] = loop.time() - started
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    answer = asyncio.run(_serve_once(app, b'{"a": 1}'))
    assert seen["first"] == b'{"a": 1}'
    assert seen["taken"] is True
    assert seen["again"] is None  # taken once only
    assert answer.status_code == 408
    assert 0.1 <= seen["waited"] < 4  # body_timeout's, not the test's guard's


def test_on_plain_uvicorn_the_body_is_read_the_bounded_way() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["shortcut"] = hasattr(receive.__self__, "take_whole_body")
        seen["body"] = await read_body(Request(scope, receive, send), 1000, 5.0)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    answer = asyncio.run(_serve_once(app, b'{"a": 1}', plain=True))
    assert answer.status_code == 200
    assert seen == {"shortcut": False, "body": b'{"a": 1}'}


def test_a_body_over_the_limit_taken_at_once_is_413() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive, send)
        # no content-length header to refuse it early: the limit is checked on the body taken
        scope["headers"] = [(name, value) for name, value in scope["headers"] if name != b"content-length"]
        try:
            await read_body(request, 4, 5.0)
        except HttpError as exc:
            seen["status"], seen["message"] = exc.status, str(exc)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    asyncio.run(_serve_once(app, b'{"a": 1}'))
    assert seen == {"status": 413,
                    "message": "request body is over the limit of 4 bytes (server.max_body_bytes)"}


def test_a_body_read_in_parts_is_read_whole() -> None:
    seen: dict[str, Any] = {}
    body = b'{"content": "' + b"x" * 300_000 + b'"}'

    async def app(scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive, send)
        seen["body"] = await read_body(request, 1 << 20, 5.0)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    answer = asyncio.run(_serve_once(app, body))
    assert answer.status_code == 200
    assert seen["body"] == body
