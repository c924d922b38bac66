"""The conversation API as the Ark platform speaks it (its controller, its gateway and
the jest suites of its reference memory service), over a real server on localhost.

What is pinned here is the wire contract of issue 15 (/work/notes/contract15.md):
verbatim messages, 200 {"status": "success"} answers, ``conversation_id`` as a
synonym, the reference's validation messages, 10 MB bodies, 1-based sequences in
insertion order, purges that need an explicit flag, unknown query parameters
refused, ``/health`` as text, ``/context``, and an OpenAPI document that lists
every served route.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import mnemex
from mnemex.server import build_app

MiB = 1024 * 1024

TOOL_CALL = {"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": -3}"}

# every message shape the controller is known to send; each must come back exactly as posted
SHAPES: dict[str, list[dict[str, Any]]] = {
    "plain_text": [{"role": "user", "content": "héllo 🌍\n\"quoted\" \\ back"}],
    "content_parts": [{"role": "user", "content": [
        {"type": "text", "text": "what is in this image?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}}]}],
    "tool_call_then_result": [TOOL_CALL, TOOL_RESULT],
    "empty_assistant": [{"role": "assistant"}],
    "refusal_only": [{"role": "assistant", "refusal": "I can't"}],
    "unknown_fields_kept": [{"role": "user", "content": "hi", "name": "john",
                             "x_trace": {"span": [1, 2.5, None]}, "audio": None}],
}

WHOLE_TURN = [{"role": "system", "content": "You are a weather bot."},
              {"role": "user", "content": "Weather in Oslo?"},
              TOOL_CALL, TOOL_RESULT,
              {"role": "assistant", "content": "It is -3 °C in Oslo."}]


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"))


async def page(http: httpx.AsyncClient, path: str = "/messages", **params: Any) -> dict[str, Any]:
    r = await http.get(path, params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def post(http: httpx.AsyncClient, session_id: str, *contents: str, path: str = "/messages") -> None:
    r = await http.post(path, json={"session_id": session_id,
                                    "messages": [{"role": "user", "content": c} for c in contents]})
    assert r.is_success, r.text


async def assert_nothing_stored(http: httpx.AsyncClient) -> None:
    everything = await page(http)
    assert everything["total"] == 0 and everything["messages"] == []


# -- messages round trip verbatim ---------------------------------------------------------


@pytest.mark.parametrize("messages", list(SHAPES.values()), ids=list(SHAPES))
async def test_every_message_shape_comes_back_verbatim(tmp_path: Path, server: Any,
                                                       messages: list[dict[str, Any]]) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": "s", "query_id": "q", "messages": messages})
        assert r.is_success, r.text
        body = await page(http, session_id="s")
        assert [record["message"] for record in body["messages"]] == messages


async def test_a_whole_turn_in_one_post_is_stored_in_order_with_its_query(tmp_path: Path,
                                                                          server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": "s", "query_id": "q1", "messages": WHOLE_TURN})
        assert r.is_success, r.text
        body = await page(http, session_id="s")
        assert [record["message"] for record in body["messages"]] == WHOLE_TURN
        assert [record["sequence"] for record in body["messages"]] == [1, 2, 3, 4, 5]
        assert all(record["session_id"] == "s" and record["query_id"] == "q1" for record in body["messages"])
        assert body["total"] == 5


# -- POST /messages answers and conversation_id ------------------------------------------------


async def test_post_messages_answers_200_success(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": "s", "query_id": "q",
                                               "messages": [{"role": "user", "content": "a"},
                                                            {"role": "assistant", "content": "b"}]})
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "success", "session_id": "s", "conversation_id": "s", "stored": 2,
                            "first_sequence": 1}


async def test_conversation_id_is_session_id_in_bodies_and_query_strings(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        first = [{"role": "user", "content": "via conversation_id"}]
        r = await http.post("/messages", json={"conversation_id": "c1", "messages": first})
        assert r.status_code == 200, r.text
        assert r.json()["session_id"] == "c1" and r.json()["conversation_id"] == "c1"
        r = await http.post("/messages", json={"session_id": "c1", "conversation_id": "c1",
                                               "messages": [{"role": "user", "content": "both, equal"}]})
        assert r.status_code == 200, r.text
        await post(http, "other", "keep me")
        by_session = await page(http, session_id="c1")
        by_conversation = await page(http, conversation_id="c1")
        assert by_conversation == by_session
        assert [m["message"]["content"] for m in by_conversation["messages"]] == ["via conversation_id",
                                                                                 "both, equal"]
        r = await http.delete("/messages", params={"conversation_id": "c1"})
        assert r.status_code == 200, r.text
        assert r.json()["sessions"] == ["c1"]
        left = await page(http)
        assert [m["session_id"] for m in left["messages"]] == ["other"]


async def test_session_id_and_a_different_conversation_id_are_refused(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await post(http, "a", "a1")
        await post(http, "b", "b1")
        r = await http.post("/messages", json={"session_id": "a", "conversation_id": "b",
                                               "messages": [{"role": "user", "content": "which one?"}]})
        assert r.status_code == 400, r.text
        assert "conversation_id" in r.json()["error"]
        r = await http.get("/messages", params={"session_id": "a", "conversation_id": "b"})
        assert r.status_code == 400, r.text
        r = await http.delete("/messages", params={"session_id": "a", "conversation_id": "b"})
        assert r.status_code == 400, r.text
        everything = await page(http)
        assert [m["message"]["content"] for m in everything["messages"]] == ["a1", "b1"]


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, {"error": "session_id is required", "field": "session_id"}),
        ({"messages": [{"role": "user", "content": "x"}]},
         {"error": "session_id is required", "field": "session_id"}),
        ({"session_id": "s", "messages": "not-an-array"},
         {"error": "messages array is required", "field": "messages"}),
        ({"session_id": "s", "messages": {"role": "user", "content": "x"}},
         {"error": "messages array is required", "field": "messages"}),
        ({"session_id": "s", "messages": None}, {"error": "messages array is required", "field": "messages"}),
        ({"session_id": "s"}, {"error": "messages array is required", "field": "messages"}),
        ({"conversation_id": "s"}, {"error": "messages array is required", "field": "messages"}),
    ],
    ids=["empty", "no_id", "messages_string", "messages_object", "messages_null", "no_messages",
         "conversation_id_no_messages"],
)
async def test_the_reference_validation_errors_and_nothing_stored(tmp_path: Path, server: Any,
                                                                  body: dict[str, Any],
                                                                  expected: dict[str, str]) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json=body)
        assert r.status_code == 400, r.text
        assert r.json() == expected
        await assert_nothing_stored(http)


async def test_an_unknown_body_field_is_400_naming_it_and_nothing_stored(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": "s", "sesion_name": "typo",
                                               "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 400, r.text
        assert "sesion_name" in r.json()["error"] and r.json()["field"] == "sesion_name"
        await assert_nothing_stored(http)


# -- body size -------------------------------------------------------------------------------


async def test_a_9_mb_tool_result_is_accepted_with_the_default_limits(tmp_path: Path, server: Any) -> None:
    result = {"role": "tool", "tool_call_id": "call_1", "content": "0123456789abcdef" * (9_000_000 // 16)}
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": "big", "messages": [TOOL_CALL, result]})
        assert r.status_code == 200, r.text[:500]
        body = await page(http, session_id="big")
        assert [record["message"] for record in body["messages"]] == [TOOL_CALL, result]


# the server answers before httpx has written the whole body; httpx then leaves its body
# generator unfinished (a client-side artefact, as in test_conversation_api's disconnect test)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_body_over_10_mib_is_413_and_the_next_request_works(tmp_path: Path, server: Any) -> None:
    huge = {"role": "tool", "tool_call_id": "call_1", "content": "x" * (10 * MiB + 1)}
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": "big", "messages": [huge]})
        assert r.status_code == 413, r.text[:500]
        assert r.json()["error"]
        assert r.headers.get("connection", "").lower() == "close"
        await assert_nothing_stored(http)


# -- sequence ----------------------------------------------------------------------------------


async def test_sequence_is_1_based_in_insertion_order_across_sessions(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await post(http, "s1", "one")
        await post(http, "s2", "two")
        await post(http, "s1", "three")
        body = await page(http)
        assert [(m["sequence"], m["session_id"], m["message"]["content"]) for m in body["messages"]] == [
            (1, "s1", "one"), (2, "s2", "two"), (3, "s1", "three")]
        s1 = await page(http, session_id="s1")
        assert [m["sequence"] for m in s1["messages"]] == [1, 3]


async def test_after_deleting_everything_the_next_message_gets_sequence_1(tmp_path: Path,
                                                                           server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await post(http, "s1", "a", "b")
        await post(http, "s2", "c")
        r = await http.delete("/messages", params={"all": "true"})
        assert r.status_code == 200, r.text
        purged = r.json()
        assert purged["status"] == "success" and purged["message"] == "Memory purged"
        assert sorted(purged["sessions"]) == ["s1", "s2"] and purged["messages"] == 3
        await assert_nothing_stored(http)
        r = await http.post("/messages", json={"session_id": "s3",
                                               "messages": [{"role": "user", "content": "d"}]})
        assert r.status_code == 200, r.text
        assert r.json()["first_sequence"] == 1
        assert [m["sequence"] for m in (await page(http))["messages"]] == [1]


# -- purges ------------------------------------------------------------------------------------


async def test_delete_one_session_purges_only_it(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await post(http, "x", "x1", "x2")
        await post(http, "y", "y1")
        r = await http.delete("/messages", params={"session_id": "x"})
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "success", "message": "Memory purged", "sessions": ["x"]}
        left = await page(http)
        assert [(m["session_id"], m["message"]["content"]) for m in left["messages"]] == [("y", "y1")]


async def test_bare_delete_is_400_naming_all_and_deletes_nothing(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await post(http, "x", "x1")
        r = await http.delete("/messages")
        assert r.status_code == 400, r.text
        assert re.search(r"\ball\b", r.json()["error"]), r.json()
        assert (await page(http))["total"] == 1


async def test_a_misspelt_delete_filter_is_400_and_deletes_nothing(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await post(http, "a", "a1")
        await post(http, "b", "b1")
        r = await http.delete("/messages", params={"sessionid": "a"})
        assert r.status_code == 400, r.text
        assert "sessionid" in r.json()["error"] and r.json()["field"] == "sessionid"
        assert (await page(http))["total"] == 2


async def test_allow_bare_purge_makes_a_bare_delete_purge_everything(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), allow_bare_purge=True) as http:
        await post(http, "a", "a1")
        await post(http, "b", "b1")
        r = await http.delete("/messages")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "success" and r.json()["message"] == "Memory purged"
        await assert_nothing_stored(http)


# -- unknown query parameters -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "params", "name"),
    [
        ("/messages", {"session_id": "s", "sessionid": "s"}, "sessionid"),
        ("/messages", {"limt": "5"}, "limt"),
        ("/agents/bot/messages", {"bogus": "1"}, "bogus"),
        ("/stream/x", {"from-beginning": "true", "bogus": "1"}, "bogus"),
        ("/memory/m1", {"user_id": "u", "app_name": "a", "bogus": "1"}, "bogus"),
        ("/health", {"x": "1"}, "x"),
    ],
    ids=["messages_typo", "messages_limit_typo", "agent_messages", "stream", "memory", "health"],
)
async def test_an_unknown_query_parameter_is_400_naming_it(tmp_path: Path, server: Any, path: str,
                                                           params: dict[str, str], name: str) -> None:
    async with server(cfg(tmp_path)) as http:
        # a stream reader may wait for its id; the refusal must come before any waiting
        r = await http.get(path, params=params, timeout=3)
        assert r.status_code == 400, r.text
        assert name in r.json()["error"] and r.json()["field"] == name


# -- reads --------------------------------------------------------------------------------------


async def test_get_messages_without_limit_returns_all_250(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        for turn in range(5):
            await post(http, "long", *(f"{turn}-{i}" for i in range(50)))
        body = await page(http, session_id="long")
        assert body["total"] == 250
        assert [m["message"]["content"] for m in body["messages"]] == [
            f"{turn}-{i}" for turn in range(5) for i in range(50)]
        assert [m["sequence"] for m in body["messages"]] == list(range(1, 251))


async def test_an_unknown_route_is_404_not_found(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        for method, path in [("GET", "/nope"), ("POST", "/nope"), ("GET", "/agents/bot/nope"),
                             ("GET", "/messages/extra/segments")]:
            r = await http.request(method, path)
            assert r.status_code == 404, (method, path, r.text)
            assert r.json() == {"error": "Not found"}, (method, path)


async def test_health_is_text_ok_or_json_on_request(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.get("/health")
        assert r.status_code == 200
        assert r.text == "OK"
        assert r.headers["content-type"].startswith("text/plain")
        r = await http.get("/health", headers={"Accept": "application/json"})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/json")
        assert "status" in r.json()
        assert str(tmp_path) not in r.text  # no filesystem paths without the token


async def test_context_returns_the_messages_for_the_next_model_call(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/messages", json={"session_id": "s", "messages": WHOLE_TURN})
        assert r.is_success, r.text
        for path, params in [("/context", {"session_id": "s"}), ("/agents/ark/sessions/s/context", {})]:
            r = await http.get(path, params=params)
            assert r.status_code == 200, (path, r.text)
            assert r.json()["session_id"] == "s" and r.json()["messages"] == WHOLE_TURN, path


async def test_the_agent_prefix_keeps_agents_apart_from_the_default_ark(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await post(http, "s", "to ark")
        await post(http, "s", "to bot", path="/agents/bot/messages")

        async def contents(path: str, **params: Any) -> list[str]:
            return [m["message"]["content"] for m in (await page(http, path, **params))["messages"]]

        assert await contents("/messages", session_id="s") == ["to ark"]
        assert await contents("/agents/ark/messages", session_id="s") == ["to ark"]
        assert await contents("/agents/bot/messages", session_id="s") == ["to bot"]
        assert [m["sequence"] for m in (await page(http, "/agents/bot/messages"))["messages"]] == [1]
        for path, params, expected in [("/context", {"session_id": "s"}, "to ark"),
                                       ("/agents/ark/sessions/s/context", {}, "to ark"),
                                       ("/agents/bot/sessions/s/context", {}, "to bot")]:
            r = await http.get(path, params=params)
            assert r.status_code == 200, (path, r.text)
            assert [m["content"] for m in r.json()["messages"]] == [expected], path
        r = await http.delete("/agents/bot/messages", params={"session_id": "s"})
        assert r.status_code == 200, r.text
        assert await contents("/messages", session_id="s") == ["to ark"]


# -- the OpenAPI document -------------------------------------------------------------------------

_METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}


def _served_routes(routes: Any, prefix: str = "") -> set[tuple[str, str]]:
    """(path template, lower-case method) for every route of a Starlette app,
    mounts included; HEAD (implied by GET) left out."""
    served: set[tuple[str, str]] = set()
    for route in routes:
        path = prefix + route.path
        if getattr(route, "routes", None):  # a Mount
            served |= _served_routes(route.routes, path)
            continue
        template = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", path)  # {id:path} -> {id}
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD":
                served.add((template, method.lower()))
    return served


def _schema_refs(doc: dict[str, Any], where: str, holder: dict[str, Any]) -> list[str]:
    """Problems with one request body or response: it must have content, and each
    media type's schema must be a $ref to a schema under components."""
    schemas = doc.get("components", {}).get("schemas", {})
    if "$ref" in holder:  # a shared #/components/requestBodies/... or responses/...
        kind, _, name = holder["$ref"].removeprefix("#/components/").partition("/")
        holder = doc.get("components", {}).get(kind, {}).get(name, {})
    content = holder.get("content")
    if not content:
        return [f"{where}: no content schema"]
    problems = []
    for media, spec in content.items():
        if not media.startswith("application/json"):
            continue  # an event stream, the metrics' text: their bodies are not JSON documents
        if where.startswith("GET /openapi.json"):
            continue  # the document itself
        ref = spec.get("schema", {}).get("$ref", "")
        if not ref.startswith("#/components/schemas/") or ref.rsplit("/", 1)[1] not in schemas:
            problems.append(f"{where} {media}: schema {spec.get('schema')!r} is not a component reference")
    return problems


async def test_openapi_documents_every_served_route_with_component_schemas(tmp_path: Path,
                                                                            server: Any) -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path / "routes"))) as runtime:
        served = _served_routes(build_app(runtime).routes)
    async with server(cfg(tmp_path)) as http:
        r = await http.get("/openapi.json")
        assert r.status_code == 200, r.text
        doc = r.json()
    documented = {(path, method) for path, operations in doc["paths"].items()
                  for method in operations if method in _METHODS}
    assert sorted(served - documented) == [], "served but not documented"
    assert sorted(documented - served) == [], "documented but not served"
    problems: list[str] = []
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            if method not in _METHODS:
                continue
            if "requestBody" in operation:
                problems += _schema_refs(doc, f"{method.upper()} {path} request", operation["requestBody"])
            for status, response in operation.get("responses", {}).items():
                problems += _schema_refs(doc, f"{method.upper()} {path} {status}", response)
    assert problems == []
    assert "200" in doc["paths"]["/messages"]["post"]["responses"]
    assert "201" not in doc["paths"]["/messages"]["post"]["responses"]
