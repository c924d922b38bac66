"""``read_body`` on the server's own stack (uvicorn, httptools, asyncio): the body
that came with its head is taken without arming a timer, and every other read,
a second one of the same request included, is bounded by ``body_timeout``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import uvicorn
from starlette.requests import Request

from mnemex.server._http import HttpError, _has_whole_body, read_body


async def _serve_once(app: Any, body: bytes) -> httpx.Response:
    """Serve ``app`` with uvicorn on 127.0.0.1 for one POST of ``body``."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, loop="asyncio", http="httptools", lifespan="off",
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
        seen["whole_before"] = _has_whole_body(receive)
        seen["first"] = await read_body(request, 1000, 5.0)
        seen["whole_after"] = _has_whole_body(receive)
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
    assert seen["whole_before"] is True  # the usual body: taken at once, no timer
    assert seen["whole_after"] is False
    assert answer.status_code == 408
    assert 0.1 <= seen["waited"] < 4  # body_timeout's, not the test's guard's


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
