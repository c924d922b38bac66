"""The conversation API through a real server on localhost, with httpx."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from waiting import eventually

import mnemex

TOOL_CALL = {"role": "assistant", "content": None,
             "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"))


async def test_post_then_get_returns_messages_verbatim_in_order(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        messages = [{"role": "user", "content": "hi", "name": "john"}, TOOL_CALL,
                    {"role": "tool", "tool_call_id": "t1", "content": "42"}]
        r = await http.post("/messages", json={"session_id": "s1", "query_id": "q1", "messages": messages})
        assert r.status_code == 200, r.text
        r = await http.get("/messages", params={"session_id": "s1"})
        body = r.json()
        assert [m["message"] for m in body["messages"]] == messages
        assert [m["sequence"] for m in body["messages"]] == [1, 2, 3]
        assert body["total"] == 3 and body["messages"][0]["timestamp"].endswith("Z")
        assert all(m["query_id"] == "q1" and m["session_id"] == "s1" for m in body["messages"])


async def test_get_without_limit_returns_the_whole_history(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        for i in range(3):
            batch = [{"role": "user", "content": f"m{i}-{j}"} for j in range(40)]
            assert (await http.post("/messages", json={"session_id": "long", "messages": batch})).status_code == 200
        everything = (await http.get("/messages", params={"session_id": "long"})).json()
        assert len(everything["messages"]) == 120 == everything["total"]
        page = (await http.get("/messages", params={"session_id": "long", "limit": 50, "offset": 100})).json()
        assert [m["message"]["content"] for m in page["messages"]] == [f"m2-{j}" for j in range(20, 40)]
        assert page["limit"] == 50 and page["offset"] == 100


async def test_empty_messages_store_nothing_and_unknown_session_is_empty(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": "s", "messages": []})
        assert r.status_code == 200
        r = await http.get("/messages", params={"session_id": "nobody"})
        assert r.status_code == 200 and r.json()["messages"] == []


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"", 400, "empty"),
        (b'{"session_id": "s", "messages": [{"content": "no role"}]}', 400, "role"),
        (b'{"session_id": "s", "messages": [{"role": ""}]}', 400, "role"),
        (b'{"session_id": "s", "messages": [null]}', 400, "messages"),
        (b'{"session_id": "s", "messages": [{}]}', 400, "role"),
        (b'{"session_id": 5, "messages": []}', 400, "session_id"),
        (b'{"session_id": "s", "messages": [], "extra": 1}', 400, "extra"),
        (b'{"messages": []}', 400, "session_id"),
    ],
)
async def test_bad_bodies_get_a_4xx_json_error_and_store_nothing(tmp_path: Path, body: bytes, status: int,
                                                                 needle: str, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
        assert needle in r.json()["error"]
        assert (await http.get("/messages")).json()["total"] == 0


async def test_body_over_the_limit_is_413(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), max_body_bytes=1000) as http:
        r = await http.post("/messages", json={"session_id": "s",
                                               "messages": [{"role": "user", "content": "x" * 2000}]})
        assert r.status_code == 413 and "limit" in r.json()["error"]


async def test_sessions_status_complete_and_delete(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        for sid in ("a", "b"):
            await http.post("/messages", json={"session_id": sid, "query_id": "q",
                                               "messages": [{"role": "user", "content": sid}]})
        assert set((await http.get("/sessions")).json()["sessions"]) == {"a", "b"}
        status = (await http.get("/memory-status")).json()
        assert status["total_sessions"] == 2 and status["total_messages"] == 2
        assert status["sessions"]["a"] == {"message_count": 1, "query_count": 1, "completed": False}
        r = await http.post("/session/a/complete", json={})
        assert r.json() == {"status": "completed", "session": "a"}
        assert (await http.delete("/messages", params={"session_id": "a"})).status_code == 200
        assert (await http.get("/sessions")).json()["sessions"] == ["b"]
        assert (await http.delete("/messages")).status_code == 400  # everything needs all=true
        assert (await http.get("/sessions")).json()["sessions"] == ["b"]
        await http.delete("/messages", params={"all": "true"})
        assert (await http.get("/sessions")).json()["sessions"] == []


async def test_agent_prefixed_routes_reach_other_agents(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await http.post("/agents/bot/messages", json={"session_id": "s", "messages": [{"role": "user",
                                                                                      "content": "x"}]})
        assert (await http.get("/agents/bot/sessions")).json()["sessions"] == ["s"]
        assert (await http.get("/sessions")).json()["sessions"] == []


async def test_token_is_required_but_health_stays_open(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), token="s3cret") as http:
        assert (await http.get("/sessions")).status_code == 401
        bad = await http.get("/sessions", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and "token" in bad.json()["error"]
        ok = await http.get("/sessions", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert (await http.get("/health")).status_code == 200


async def test_metrics_count_every_request_per_route_and_status(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        stored = {"session_id": "s", "messages": [{"role": "user", "content": "x"}]}
        for _ in range(3):
            await http.post("/messages", json=stored)
        await http.post("/messages", json={"session_id": "s", "messages": [{}]})
        await http.post("/agents/other/messages", json=stored)
        metrics = (await http.get("/metrics")).text
        assert 'mnemex_http_requests_total{method="POST",route="/messages",status="200"} 3.0' in metrics
        assert 'mnemex_http_requests_total{method="POST",route="/messages",status="400"} 1.0' in metrics
        assert ('mnemex_http_requests_total{method="POST",route="/agents/{agent}/messages",status="200"} 1.0'
                in metrics)
        assert 'mnemex_http_request_seconds_count{method="POST",route="/messages"} 4.0' in metrics


async def test_access_log_is_one_json_line_per_request_only_when_enabled(
        tmp_path: Path, server: Any, caplog: pytest.LogCaptureFixture) -> None:
    body = {"session_id": "s", "messages": [{"role": "user", "content": "x"}]}
    with caplog.at_level(logging.INFO, logger="mnemex.access"):
        async with server(cfg(tmp_path)) as http:
            await http.post("/messages", json=body)
        assert not [r for r in caplog.records if r.name == "mnemex.access"]
        async with server(cfg(tmp_path), access_log=True) as http:
            await http.post("/agents/a1/messages", json=body)
            await http.get("/memory/m1")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "mnemex.access"]
    assert [(line["method"], line["path"], line["route"], line["status"]) for line in lines] == [
        ("POST", "/agents/a1/messages", "/agents/{agent}/messages", 200),
        ("GET", "/memory/m1", "/memory/{memory_id}", 400)]
    assert all(line["client"] == "127.0.0.1" and line["ms"] >= 0 for line in lines)


async def test_health_metrics_and_openapi(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await http.post("/messages", json={"session_id": "s", "messages": [{"role": "user", "content": "x"}]})
        assert (await http.get("/health")).text == "OK"
        health = (await http.get("/health", headers={"Accept": "application/json"})).json()
        assert health["status"] == "ok" and health["actors"]["live"] >= 1
        assert "data_dir" not in health  # no paths to a request without the token
        metrics = (await http.get("/metrics")).text
        assert 'mnemex_http_requests_total{method="POST",route="/messages",status="200"} 1.0' in metrics
        assert "mnemex_live_actors" in metrics and "mnemex_journal_pending_acks" in metrics
        doc = (await http.get("/openapi.json")).json()
        assert doc["openapi"].startswith("3.") and "/messages" in doc["paths"]
        assert "PostMessages" in doc["components"]["schemas"]
        assert (await http.get("/nope")).status_code == 404
        assert (await http.put("/messages")).status_code == 405


async def test_restart_on_the_same_data_dir_reads_everything_back(tmp_path: Path, server: Any) -> None:
    config = cfg(tmp_path)
    async with server(config) as http:
        for i in range(30):
            await http.post("/messages", json={"session_id": f"s{i % 3}",
                                               "messages": [{"role": "user", "content": str(i)}]})
    async with server(config) as http:
        body = (await http.get("/messages")).json()
        assert body["total"] == 30
        assert sorted(int(m["message"]["content"]) for m in body["messages"]) == list(range(30))


async def _sse_streams(http: httpx.AsyncClient, count: int) -> bool:
    """Whether the server has ``count`` server-sent event streams open (its gauge)."""
    metrics = (await http.get("/metrics")).text
    return f"mnemex_sse_streams {count:.1f}" in metrics.splitlines()


def _async(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def checked() -> bool:
        return check()
    return checked


async def _sse_lines(http: httpx.AsyncClient, url: str, out: list[str], ready: trio.Event | None = None) -> None:
    async with http.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        if ready is not None:
            ready.set()
        async with aclosing(response.aiter_lines()) as lines:
            async for line in lines:
                if line.startswith("data: "):
                    out.append(line[6:])  # read to the end: the server closes after [DONE]


async def test_sse_replays_history_goes_live_and_ends_on_completion(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await http.post("/messages", json={"session_id": "s", "messages": [{"role": "user", "content": "old"}]})
        lines: list[str] = []
        ready = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_sse_lines, http, "/stream/s?from-beginning=true&markers=true", lines, ready)
            await ready.wait()
            await eventually(_async(lambda: "[LIVE_MODE]" in lines), what="the stream to go live")
            await http.post("/messages", json={"session_id": "s",
                                               "messages": [{"role": "assistant", "content": "new"}]})
            await http.post("/session/s/complete", json={})
        import json

        chunks = [json.loads(line) for line in lines if line.startswith("{")]
        assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["old", "new", None]
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert all(c["id"] == "s" and c["object"] == "chat.completion.chunk"
                   and c["model"] == "mnemex" for c in chunks)
        assert lines.index("[LIVE_MODE]") == 1
        assert lines[-2:] == ["[STREAM_END]", "[DONE]"]


async def test_sse_unknown_session_waits_then_ends_cleanly_or_follows_the_session(tmp_path: Path,
                                                                                  server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.get("/stream/ghost", params={"wait-for-query": "50ms"})
        assert r.status_code == 200
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert json.loads(events[0])["error"]["code"] == "timeout" and events[1:] == ["[DONE]"]
        lines: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_sse_lines, http, "/stream/later?wait-for-session=true&timeout=5s", lines)
            await eventually(lambda: _sse_streams(http, 1), what="the reader to wait for the session")
            await http.post("/messages", json={"session_id": "later",
                                               "messages": [{"role": "user", "content": "hello"}]})
            await http.post("/session/later/complete", json={})
        assert any("hello" in line for line in lines) and lines[-1] == "[DONE]"
        r = await http.get("/stream/x", params={"timeout": "soon"})
        assert r.status_code == 400 and "duration" in r.json()["error"]


# httpx's nested stream generators are left unfinished when the client walks away
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_sse_client_disconnect_frees_the_subscription(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await http.post("/messages", json={"session_id": "s", "messages": [{"role": "user", "content": "x"}]})
        with trio.move_on_after(0.3):
            await _sse_lines(http, "/stream/s", [])
        await eventually(lambda: _sse_streams(http, 0), what="the stream to be freed")


async def test_overload_answers_503_with_retry_after(tmp_path: Path, server: Any) -> None:
    config = mnemex.Config(data_dir=str(tmp_path / "d"), mailbox_size=1, overload="fail")
    async with server(config) as http:
        statuses: list[int] = []

        async def post(i: int) -> None:
            r = await http.post("/messages", json={"session_id": "s",
                                                   "messages": [{"role": "user", "content": str(i)}]})
            statuses.append(r.status_code)
            if r.status_code == 503:
                assert r.headers["retry-after"] == "1" and "full" in r.json()["error"]

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(post, i)
        assert set(statuses) <= {200, 503} and 200 in statuses




@pytest.mark.parametrize("params", [{"limit": "0"}, {"limit": "abc"}, {"offset": "-1"},
                                    {"limit": "1777003014452854680190976"}, {"offset": str(2**40)}])
async def test_bad_paging_parameters_are_400_not_a_crash(tmp_path: Path, params: dict[str, str],
                                                         server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.get("/messages", params=params)
        assert r.status_code == 400, r.text
        assert (await http.get("/health", headers={"Accept": "application/json"})).json()["actors"]["crashes"] == 0


async def test_pushed_ndjson_chunks_reach_sse_readers_verbatim(tmp_path: Path, server: Any) -> None:
    chunks = [{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
              for word in ("Hel", "lo")]
    async with server(cfg(tmp_path)) as http:
        lines: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_sse_lines, http, "/stream/query-1?wait-for-query=5s&markers=true", lines)
            await eventually(_async(lambda: "[LIVE_MODE]" in lines), what="the reader to wait")
            body = b"".join(json.dumps(c).encode() + b"\n" for c in chunks)
            r = await http.post("/stream/query-1", content=body, headers={"content-type": "application/x-ndjson"})
            assert r.status_code == 200 and r.json()["chunks_received"] == 2
            r = await http.post("/stream/query-1/complete", json={})
            assert r.status_code in (200, 202)
        assert [json.loads(line) for line in lines if line.startswith("{")] == chunks
        assert lines[-2:] == ["[STREAM_END]", "[DONE]"]
        bad = await http.post("/stream/query-2", content=b"[1, 2]\n",
                              headers={"content-type": "application/x-ndjson"})
        assert bad.status_code == 400
