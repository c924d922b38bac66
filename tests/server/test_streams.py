"""Streams through a real server on localhost (the issue 15 contract).

Chunks pushed as NDJSON to ``POST /stream/{query}`` reach every reader of
``GET /stream/{query}`` as server-sent events, each ``data:`` line the pushed JSON
object, nothing added, then exactly one ``data: [DONE]`` once the stream is
completed; a wait for a stream that never starts ends cleanly with a timeout
error event; the older session stream turns stored messages into
``chat.completion.chunk`` events; and the openai SDK's own SSE machinery decodes
what mnemex sends.

Readers and the pusher are ordered by what the server has observably done (a
reader's first ``: ping`` says it waits; a chunk a reader received was retained),
never by sleeping.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
import trio
from openai.types.chat import ChatCompletionChunk
from waiting import eventually

import mnemex

# a reader that waits gets a ": ping" comment this often: the tests' sign that it waits
HEARTBEAT = 0.1
DONE = "[DONE]"


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"))


def completion_chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` as the OpenAI API streams it."""
    return {"id": "chatcmpl-AbC123", "object": "chat.completion.chunk", "created": 1_732_000_000,
            "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_0ba0d124f1",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


TEXT_PARTS = ["Hel", "lo, wörld ✓ ", 'a "quoted" word,\nthen a tab\tand 1.5e3']
TOOL_CALL_DELTA = {"index": 0, "id": "call_Xq1", "type": "function",
                   "function": {"name": "lookup_weather", "arguments": '{"city": "Zürich"}'}}
CHUNKS = [
    completion_chunk({"role": "assistant", "content": "", "refusal": None}),
    *(completion_chunk({"content": part}) for part in TEXT_PARTS),
    completion_chunk({"tool_calls": [TOOL_CALL_DELTA]}),
    completion_chunk({}, "tool_calls"),
]


def ndjson_line(chunk: Mapping[str, Any]) -> bytes:
    return json.dumps(chunk, ensure_ascii=False).encode() + b"\n"


async def push(http: httpx.AsyncClient, query: str, chunks: Sequence[Mapping[str, Any]], *,
               gates: Mapping[int, trio.Event] | None = None) -> httpx.Response:
    """``POST /stream/{query}``: one chunked request body, a line per chunk, sent as an
    agent platform streams a completion. Before sending chunk ``i`` it waits for
    ``gates[i]``, so a test can place a reader in the middle of the push."""
    gates = gates or {}

    async def body() -> AsyncIterator[bytes]:
        for index, chunk in enumerate(chunks):
            if index in gates:
                await gates[index].wait()
            yield ndjson_line(chunk)

    return await http.post(f"/stream/{query}", content=body(),
                           headers={"content-type": "application/x-ndjson"})


def named(body: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The fields of ``body`` the contract names (the server may add others)."""
    return {name: body.get(name) for name in names}


def assert_fields(response: httpx.Response, expected: Mapping[str, Any]) -> None:
    body = response.json()
    assert named(body, expected) == expected, body


def assert_pushed(response: httpx.Response, query: str, count: int) -> None:
    assert response.status_code == 200, response.text
    assert_fields(response, {"status": "stream_processed", "query": query, "chunks_received": count})


async def complete(http: httpx.AsyncClient, query: str) -> None:
    r = await http.post(f"/stream/{query}/complete", json={})
    assert r.status_code == 200, r.text
    assert_fields(r, {"status": "completed", "query": query})


class StreamReader:
    """One ``GET /stream/{query}`` read to its end, parsed as the SSE specification
    says (lines end at LF, ``:`` starts a comment). ``data`` holds every ``data:``
    line's payload in order: JSON objects decoded, anything else (``[DONE]``,
    ``[LIVE_MODE]``...) as text; ``pings`` counts comment lines."""

    def __init__(self, http: httpx.AsyncClient, query: str, **params: str) -> None:
        self.http = http
        self.query = query
        self.params = params
        self.data: list[Any] = []
        self.pings = 0
        self.status: int | None = None
        self.content_type = ""
        self.ended = False
        self._progress = trio.Event()

    async def read(self, *, leave_after: int | None = None) -> None:
        """Read until the server ends the response (an unclean end raises), or, with
        ``leave_after``, leave once that many data lines arrived: the read is cancelled,
        as by a client's own timeout, and the connection closed mid-stream."""
        try:
            with trio.CancelScope() as leave:
                async with self.http.stream("GET", f"/stream/{self.query}", params=self.params) as r:
                    self.status = r.status_code
                    self.content_type = r.headers.get("content-type", "")
                    self._moved()
                    pending = b""
                    async with aclosing(r.aiter_bytes()) as parts:  # type: ignore[type-var]
                        async for part in parts:
                            pending += part
                            *lines, pending = pending.split(b"\n")
                            for line in lines:
                                self._line(line.removesuffix(b"\r").decode())
                            if leave_after is not None and len(self.data) >= leave_after:
                                leave.cancel()
                    assert pending == b"", f"the stream ended inside a line: {pending!r}"
        finally:
            self.ended = True
            self._moved()

    def _line(self, line: str) -> None:
        if line.startswith(":"):
            self.pings += 1
        elif line.startswith("data:"):
            payload = line.removeprefix("data:").removeprefix(" ")
            self.data.append(json.loads(payload) if payload.startswith("{") else payload)
        else:
            return
        self._moved()

    def _moved(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    async def until(self, check: Callable[[StreamReader], bool], *, timeout: float = 5.0) -> None:
        """Return once ``check(self)`` holds; fail, saying what arrived, if the stream
        ends first or after ``timeout`` seconds."""
        with trio.move_on_after(timeout):
            while not check(self):
                if self.ended:
                    raise AssertionError(f"GET /stream/{self.query} ended before the awaited point; "
                                         f"it sent {self.data}")
                await self._progress.wait()
            return
        raise AssertionError(f"waited {timeout:g} s on GET /stream/{self.query}; it sent {self.data}")

    async def until_waiting(self) -> None:
        """Return once the server told this reader, with a ``: ping``, that it waits."""
        await self.until(lambda reader: reader.pings >= 1)

    def assert_event_stream(self) -> None:
        assert self.status == 200
        assert self.content_type.startswith("text/event-stream")


def wait_for_query(**more: str) -> dict[str, str]:
    """Reader parameters: wait up to 10 s for the query (the tests' fail_after ends sooner)."""
    return {"wait-for-query": "10s", **more}


async def test_readers_before_during_and_after_a_push_each_get_every_chunk_then_one_done(
        tmp_path: Path, server: Any) -> None:
    query = "query-weather-1"
    midway = 2
    async with server(cfg(tmp_path), stream_heartbeat=HEARTBEAT) as http:
        before = StreamReader(http, query, **wait_for_query())
        during = StreamReader(http, query, **wait_for_query(**{"from-beginning": "true"}))
        resume = trio.Event()
        pushed: list[httpx.Response] = []

        async def push_then_complete() -> None:
            pushed.append(await push(http, query, CHUNKS, gates={midway: resume}))
            await complete(http, query)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(before.read)
                await before.until_waiting()  # on a query nothing has written to yet
                nursery.start_soon(push_then_complete)
                # a chunk a reader got was retained: the late reader must have it replayed
                await before.until(lambda r: len(r.data) >= midway)
                nursery.start_soon(during.read)
                await during.until(lambda r: len(r.data) >= midway)
                resume.set()  # the rest reaches ``during`` live
            after = StreamReader(http, query, **{"from-beginning": "true"})
            await after.read()

        assert_pushed(pushed[0], query, len(CHUNKS))
        for reader in (before, during, after):
            reader.assert_event_stream()
            assert reader.data == [*CHUNKS, DONE]


@pytest.mark.parametrize("params", [{"wait-for-query": "1s"}, {"wait-for-session": "true", "timeout": "1s"}],
                         ids=["wait-for-query", "wait-for-session"])
async def test_a_wait_for_a_stream_that_never_starts_ends_cleanly_with_a_timeout_event_then_done(
        tmp_path: Path, server: Any, params: dict[str, str]) -> None:
    async with server(cfg(tmp_path)) as http:
        reader = StreamReader(http, "never", **params)
        started = trio.current_time()
        with trio.fail_after(5):
            await reader.read()  # a broken connection (no terminating chunk) would raise here
        waited = trio.current_time() - started
        reader.assert_event_stream()
        assert len(reader.data) == 2 and reader.data[1] == DONE, reader.data
        error = reader.data[0]["error"]
        assert error == {"message": error["message"], "type": "timeout_error", "code": "timeout"}
        assert isinstance(error["message"], str) and error["message"]
        assert waited >= 0.9, f"the 1 s wait ended after {waited:.3f} s"
        # the server is unharmed: the same client's next request works
        assert (await http.get("/stream-statistics")).status_code == 200


@pytest.mark.parametrize("body", [{"json": {}}, {}], ids=["empty-object", "empty-body"])
async def test_completing_a_pushed_stream_then_again_says_already_completed(
        tmp_path: Path, server: Any, body: dict[str, Any]) -> None:
    with trio.fail_after(5):
        async with server(cfg(tmp_path)) as http:
            assert_pushed(await push(http, "q", CHUNKS[:2]), "q", 2)
            first = await http.post("/stream/q/complete", **body)
            assert first.status_code == 200, first.text
            assert_fields(first, {"status": "completed", "query": "q"})
            again = await http.post("/stream/q/complete", **body)
            assert again.status_code == 200, again.text
            assert_fields(again, {"status": "already_completed", "query": "q"})
            reader = StreamReader(http, "q", **{"from-beginning": "true"})
            await reader.read()
            assert reader.data == [*CHUNKS[:2], DONE]


async def test_completing_a_stream_nobody_pushed_to_nor_reads_is_404(tmp_path: Path, server: Any) -> None:
    with trio.fail_after(5):
        async with server(cfg(tmp_path)) as http:
            r = await http.post("/stream/nobody-here/complete", json={})
            assert r.status_code == 404, r.text
            assert r.headers["content-type"].startswith("application/json")
            assert isinstance(r.json()["error"], str) and r.json()["error"]


async def test_completing_a_stream_a_reader_waits_on_ends_that_reader_with_done(
        tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), stream_heartbeat=HEARTBEAT) as http:
        reader = StreamReader(http, "no-output", **wait_for_query())
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader.read)
                await reader.until_waiting()
                await complete(http, "no-output")
        reader.assert_event_stream()
        assert reader.data == [DONE]


async def test_concurrent_readers_all_see_every_chunk_and_one_leaving_midway_disturbs_nothing(
        tmp_path: Path, server: Any) -> None:
    chunks = [completion_chunk({"role": "assistant", "content": ""}),
              *(completion_chunk({"content": f"word{i} "}) for i in range(300)),
              completion_chunk({}, "stop")]
    query = "query-many-readers"
    async with server(cfg(tmp_path), stream_heartbeat=HEARTBEAT) as http:
        readers = [StreamReader(http, query, **wait_for_query()) for _ in range(3)]
        leaver = StreamReader(http, query, **wait_for_query())
        left = trio.Event()
        pushed: list[httpx.Response] = []

        async def leave() -> None:
            await leaver.read(leave_after=5)
            left.set()

        async def push_then_complete() -> None:
            pushed.append(await push(http, query, chunks, gates={10: left}))
            await complete(http, query)

        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                for reader in readers:
                    nursery.start_soon(reader.read)
                nursery.start_soon(leave)
                for reader in [*readers, leaver]:
                    await reader.until_waiting()
                # chunks from the 11th on are pushed once the leaver has gone: they are relayed while
                # the server still holds its subscription, or finds its connection closed
                nursery.start_soon(push_then_complete)
            late = StreamReader(http, query, **{"from-beginning": "true"})
            await late.read()

        assert_pushed(pushed[0], query, len(chunks))
        assert len(leaver.data) >= 5 and leaver.data == chunks[:len(leaver.data)]
        for reader in [*readers, late]:
            assert reader.data == [*chunks, DONE]


@pytest.mark.parametrize("markers", [True, False], ids=["markers", "no-markers"])
async def test_live_mode_and_stream_end_markers_appear_only_when_asked(tmp_path: Path, server: Any,
                                                                      markers: bool) -> None:
    query = "query-markers"
    midway = 3
    params = {"from-beginning": "true", **({"markers": "true"} if markers else {})}
    async with server(cfg(tmp_path)) as http:
        reader = StreamReader(http, query, **wait_for_query(**params))
        resume = trio.Event()
        pushed: list[httpx.Response] = []

        async def push_then_complete() -> None:
            pushed.append(await push(http, query, CHUNKS, gates={midway: resume}))
            await complete(http, query)

        async def retained() -> bool:
            stats = (await http.get("/stream-statistics")).json()
            return bool(stats["queries"].get(query, {}).get("total_chunks") == midway)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(push_then_complete)
                await eventually(retained, what=f"the first {midway} chunks of {query} retained")
                nursery.start_soon(reader.read)
                await reader.until(lambda r: len(r.data) >= midway + int(markers))  # replayed (+ [LIVE_MODE])
                resume.set()

        assert_pushed(pushed[0], query, len(CHUNKS))
        if markers:
            assert reader.data == [*CHUNKS[:midway], "[LIVE_MODE]", *CHUNKS[midway:], "[STREAM_END]", DONE]
        else:
            assert reader.data == [*CHUNKS, DONE]


async def test_a_stored_sessions_stream_sends_each_message_as_a_chunk_then_stop_then_done(
        tmp_path: Path, server: Any) -> None:
    session = "session-older-spec"
    stored = [{"role": "user", "content": "Weather in Zürich?"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "call_1", "type": "function",
                   "function": {"name": "lookup_weather", "arguments": '{"city": "Zürich"}'}}]},
              {"role": "tool", "tool_call_id": "call_1", "content": "12 °C, light rain"}]
    appended = {"role": "assistant", "content": "It is 12 °C with light rain."}
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": session, "messages": stored})
        assert r.is_success, r.text
        reader = StreamReader(http, session, **{"from-beginning": "true"})
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader.read)
                await reader.until(lambda r: len(r.data) >= len(stored))
                r = await http.post("/messages", json={"session_id": session, "messages": [appended]})
                assert r.is_success, r.text
                await reader.until(lambda r: len(r.data) >= len(stored) + 1)  # a live append
                r = await http.post(f"/session/{session}/complete")
                assert r.is_success, r.text

        reader.assert_event_stream()
        *chunks, done = reader.data
        assert done == DONE and DONE not in chunks
        assert len(chunks) == len(stored) + 2, chunks
        for chunk in chunks:
            assert chunk["object"] == "chat.completion.chunk", chunk
            assert {"id", "created", "model", "choices"} <= chunk.keys(), chunk
            assert len(chunk["choices"]) == 1 and chunk["choices"][0]["index"] == 0, chunk
        for message, chunk in zip([*stored, appended], chunks, strict=False):
            choice = chunk["choices"][0]
            # a chunk's tool calls carry their index, as OpenAI's chunk schema has them
            expected = {**message, "tool_calls": [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]} \
                if "tool_calls" in message else message
            assert choice["delta"] == expected
            assert choice.get("finish_reason") is None
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


STATISTICS = ("total_chunks", "completed", "has_done_marker", "chunk_types")


async def test_statistics_count_each_stream_and_delete_purges_them_all(tmp_path: Path, server: Any) -> None:
    with trio.fail_after(10):
        async with server(cfg(tmp_path)) as http:
            assert_pushed(await push(http, "done-query", CHUNKS), "done-query", len(CHUNKS))
            await complete(http, "done-query")
            assert_pushed(await push(http, "open-query", CHUNKS[:2]), "open-query", 2)

            stats = (await http.get("/stream-statistics")).json()
            assert stats["total_queries"] == 2 and stats["queries"].keys() == {"done-query", "open-query"}
            # chunk types as the reference counts them: non-empty content, else tool_calls, else
            # finish_reason, else other (the opening role chunk's content is empty)
            assert named(stats["queries"]["done-query"], STATISTICS) == {
                "total_chunks": len(CHUNKS), "completed": True, "has_done_marker": True,
                "chunk_types": {"content": 3, "tool_calls": 1, "finish_reason": 1, "other": 1}}
            assert named(stats["queries"]["open-query"], STATISTICS) == {
                "total_chunks": 2, "completed": False, "has_done_marker": False,
                "chunk_types": {"content": 1, "tool_calls": 0, "finish_reason": 0, "other": 1}}

            r = await http.delete("/stream")
            assert r.status_code == 200, r.text
            assert_fields(r, {"status": "success", "message": "Stream data purged"})
            assert (await http.get("/stream-statistics")).json() == {"total_queries": 0, "queries": {}}
            # purged: nothing was pushed to it any more, and nobody reads it
            assert (await http.post("/stream/done-query/complete", json={})).status_code == 404


class Gateway(httpx2.AsyncHTTPTransport):
    """What an OpenAI-compatible gateway does for a streamed completion: the SDK's
    ``POST /v1/chat/completions`` answered with mnemex's ``GET /stream/{query}``,
    relayed as it arrives. ``body`` keeps every byte relayed."""

    def __init__(self, mnemex_url: str, query: str, **params: str) -> None:
        super().__init__()
        self.mnemex_url = mnemex_url
        self.query = query
        self.params = params
        self.body = bytearray()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        assert request.method == "POST" and request.url.path == "/v1/chat/completions"
        assert json.loads(request.content)["stream"] is True
        relayed = httpx2.Request("GET", f"{self.mnemex_url}/stream/{self.query}", params=self.params,
                                 headers={"accept": "text/event-stream"})
        response = await super().handle_async_request(relayed)
        return httpx2.Response(response.status_code, headers=response.headers,
                               stream=_Recorded(response.stream, self.body), extensions=response.extensions)


class _Recorded(httpx2.AsyncByteStream):
    """The relayed body, copied into ``sink`` as it passes. One iterator: the SDK
    iterates the body twice (decoding, then, after [DONE], draining the rest), and the
    drain must go on from where decoding stopped."""

    def __init__(self, inner: Any, sink: bytearray) -> None:
        self.inner = inner
        self.parts = aiter(inner)
        self.sink = sink

    def __aiter__(self) -> _Recorded:
        return self

    async def __anext__(self) -> bytes:
        part: bytes = await anext(self.parts)
        self.sink += part
        return part

    async def aclose(self) -> None:
        await self.inner.aclose()


async def stream_completion(gateway: Gateway, base_url: str) -> list[ChatCompletionChunk]:
    """``client.chat.completions.create(stream=True)`` through ``gateway``: every chunk
    the openai SDK yields."""
    async with httpx2.AsyncClient(transport=gateway, timeout=10) as http_client, \
            openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x", http_client=http_client,
                               max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather in Zürich?"}], stream=True)
        return [chunk async for chunk in stream]


# The SDK leaves its own async generators (httpx2's aiter_bytes, its SSE decoder) unclosed
# when it stops at [DONE]; under trio their collection warns. Only those are ignored.
SDK_GENERATORS_UNCLOSED = "ignore:Async generator '(httpx2|httpcore2|openai)[.]:ResourceWarning"


@pytest.mark.filterwarnings(SDK_GENERATORS_UNCLOSED)
async def test_the_openai_sdk_decodes_every_pushed_chunk_and_stops_at_done(tmp_path: Path,
                                                                           server: Any) -> None:
    query = "query-sdk"
    async with server(cfg(tmp_path)) as http:
        base_url = str(http.base_url).rstrip("/")
        gateway = Gateway(base_url, query, **wait_for_query(**{"from-beginning": "true"}))
        received: list[ChatCompletionChunk] = []
        pushed: list[httpx.Response] = []

        async def read() -> None:
            received.extend(await stream_completion(gateway, base_url))

        async def push_then_complete() -> None:
            pushed.append(await push(http, query, CHUNKS))
            await complete(http, query)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                # in whichever order the two get there: the reader replays from the beginning
                nursery.start_soon(read)
                nursery.start_soon(push_then_complete)

    assert_pushed(pushed[0], query, len(CHUNKS))
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in received)
    assert [chunk.to_dict() for chunk in received] == CHUNKS
    deltas = [chunk.choices[0].delta for chunk in received]
    assert "".join(delta.content or "" for delta in deltas) == "".join(TEXT_PARTS)
    calls = [call for delta in deltas for call in delta.tool_calls or []]
    assert len(calls) == 1 and calls[0].id == "call_Xq1" and calls[0].function is not None
    assert (calls[0].function.name, calls[0].function.arguments) == ("lookup_weather", '{"city": "Zürich"}')
    assert [chunk.choices[0].finish_reason for chunk in received][-1] == "tool_calls"
    # the SDK stopped at [DONE], the stream's last event, not at a closed connection
    assert bytes(gateway.body).endswith(b"data: [DONE]\n\n") and bytes(gateway.body).count(b"[DONE]") == 1


async def test_the_openai_sdk_raises_the_timeout_event_as_an_api_error(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        base_url = str(http.base_url).rstrip("/")
        gateway = Gateway(base_url, "never", **{"wait-for-query": "1s"})
        with trio.fail_after(5), pytest.raises(openai.APIError) as raised:
            await stream_completion(gateway, base_url)
    assert raised.value.body == {"message": raised.value.message, "type": "timeout_error", "code": "timeout"}
