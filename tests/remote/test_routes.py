"""The /v1 routes as anybody could call them: only whitelisted commands reach an
actor, vectors of another model never do, and the guards of every route apply."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from remote_servers import config_at, running, url_of

import mnemex
from mnemex.conversations import protocol as agents
from mnemex.memories import protocol as scopes
from mnemex.memories.extraction import GetCursors
from mnemex.remote import wire

# what the runtime sends its own actors: never from outside
INTERNAL = [
    (scopes.ApplyExtraction, "scope", ["a", "u"]),
    (scopes.ExtractionFailed, "scope", ["a", "u"]),
    (scopes.StoreSession, "scope", ["a", "u"]),
    (agents.ApplySummary, "agent", ["bot"]),
    (agents.SummaryFailed, "agent", ["bot"]),
    (agents.FindExpired, "agent", ["bot"]),
]


def tag_of(cls: type[Any]) -> str:
    info: Any = msgspec.inspect.type_info(cls)
    return str(info.tag)


def test_no_internal_command_is_in_the_whitelist() -> None:
    for cls, _, _ in INTERNAL:
        assert cls not in wire.ASK
    assert agents.WatchSession not in wire.ASK  # it streams, on its own route


def test_every_command_a_ref_sends_crosses_the_wire_or_is_in_process_only() -> None:
    root = Path(mnemex.__file__).parent
    sent: set[str] = set()
    for path in [*root.glob("*/ref.py"), *root.glob("memories/*.py"), root / "runtime.py"]:
        sent |= set(re.findall(r"ask\(\s*([A-Z]\w*)\(", path.read_text()))
    crossing = {row.__name__ for row in wire.ASK}
    assert sent - crossing == set(wire.IN_PROCESS_ONLY)
    assert "Remember" in sent and "UpdateState" in sent  # the scan found the refs' commands


def test_every_whitelisted_command_decodes_only_for_its_own_kind() -> None:
    schemas = {kind: json.dumps(msgspec.json.schema(wire.ask_request_type(kind))) for kind in wire.KEYS}
    for cls, row in wire.ASK.items():
        tag = f'"{tag_of(row.wire)}"'
        assert [kind for kind, schema in schemas.items() if tag in schema] == [row.kind], cls


@pytest.mark.parametrize(("cls", "kind", "key"), INTERNAL, ids=[c.__name__ for c, _, _ in INTERNAL])
async def test_an_internal_command_is_refused_and_changes_nothing(tmp_path: Path, cls: type[Any], kind: str,
                                                                  key: list[str]) -> None:
    async with running(config_at(tmp_path)) as server, httpx.AsyncClient(base_url=url_of(server)) as http:
        tag = tag_of(cls)
        answer = await http.post(f"/v1/actors/{kind}/ask", json={"key": key, "command": {"type": tag}})
        assert answer.status_code == 400, answer.text
        assert tag in answer.json()["error"]
        assert answer.json()["type"] == "InvalidInput"
        # nothing was spawned for it: the scope has no memories, the agent no session
        assert server.runtime is not None
        assert (kind, tuple(key)) not in server.runtime.live_keys()


async def test_vectors_of_another_model_never_enter_a_scope(tmp_path: Path) -> None:
    async with running(config_at(tmp_path)) as server, httpx.AsyncClient(base_url=url_of(server)) as http:
        memory = {"id": "m-1", "content": "x", "vector": "AAAAAAAAAAA="}
        command = {"type": "scope.remember", "memories": [memory], "embedder": "other", "dim": 2, "now": 1.0}
        answer = await http.post("/v1/actors/scope/ask", json={"key": ["a", "u"], "command": command})
        assert answer.status_code == 400
        assert answer.json()["field"] == "command.embedder"
        async with mnemex.connect(url_of(server)) as rt:
            scope = rt.scope(user_id="u", app_name="a")
            assert await scope.count() == 0
            await scope.remember("User likes tea")  # the scope still takes the server's model
            assert (await scope.search("tea", mode="vector")).hits


async def test_bad_requests_are_4xx(tmp_path: Path) -> None:
    async with running(config_at(tmp_path), max_body_bytes=10_000) as server, \
            httpx.AsyncClient(base_url=url_of(server)) as http:
        get = {"type": "scope.get", "id": "m-1"}
        cases = [
            ("/v1/actors/widget/ask", {"key": ["x"], "command": get}, 404),
            ("/v1/actors/scope/ask", {"key": ["only-one"], "command": get}, 400),
            ("/v1/actors/scope/ask", {"key": ["a", "u"], "command": get, "extra": 1}, 400),
            ("/v1/actors/scope/ask", {"key": ["a", "u"], "command": {"type": "agent.sessions"}}, 400),
            ("/v1/actors/agent/ask", {"key": ["bot"], "command": get}, 400),
            ("/v1/actors/scope/ask", {"key": ["a", "u"], "command": get, "timeout": -1}, 400),
            ("/v1/actors/scope/ask", {"key": ["a", "u"], "command": get}, 404),  # well formed: no such memory
            ("/v1/actors/scope/stream", {"key": ["a", "u"], "command": get}, 404),
            ("/v1/actors/agent/stream", {"key": ["bot"], "command": get}, 400),
        ]
        for path, body, status in cases:
            answer = await http.post(path, json=body)
            assert answer.status_code == status, (path, body, answer.text)
            assert "error" in answer.json()
        big = {"key": ["a", "u"], "command": {"type": "scope.get", "id": "x" * 20_000}}
        assert (await http.post("/v1/actors/scope/ask", json=big)).status_code == 413
        text = await http.post("/v1/actors/scope/ask", content=b"{}", headers={"content-type": "text/plain"})
        assert text.status_code == 415
        forged = await http.post("/v1/actors/scope/ask", json={"key": ["a", "u"], "command": get},
                                 headers={"origin": "http://evil.example"})
        assert forged.status_code == 403


async def test_a_token_is_needed_and_checked(tmp_path: Path) -> None:
    async with running(config_at(tmp_path), token="s3cret") as server:
        url = url_of(server)
        with pytest.raises(mnemex.InvalidInput, match="token"):
            async with mnemex.connect(url):
                pass
        with pytest.raises(mnemex.InvalidInput, match="token"):
            async with mnemex.connect(url, token="wrong"):
                pass
        async with mnemex.connect(url, token="s3cret") as rt:
            await rt.scope(user_id="u", app_name="a").remember("User likes tea")
            assert await rt.scope_keys() == [("a", "u")]


async def test_a_client_of_another_embedder_is_refused_at_connect(tmp_path: Path) -> None:
    async with running(config_at(tmp_path)) as server:
        with pytest.raises(mnemex.InvalidInput, match="never mixed") as info:
            async with mnemex.connect(url_of(server), config=mnemex.Config(embedder="hashing",
                                                                           embedder_dim=64)):
                pass
        assert info.value.field == "models.embedder"
        async with mnemex.connect(url_of(server), config=mnemex.Config(embedder="hashing")) as rt:
            assert rt.embedder.dim == rt.info.embedder.dim  # type: ignore[union-attr]


async def test_connecting_to_nothing_or_a_bad_url_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(mnemex.InvalidInput):
        async with mnemex.connect("127.0.0.1:9"):
            pass
    with pytest.raises(mnemex.ActorClosed, match="unreachable"):
        async with mnemex.connect("http://127.0.0.1:9", timeout=2):
            pass


async def test_the_server_limits_apply_on_the_client(tmp_path: Path) -> None:
    async with running(config_at(tmp_path, max_content_bytes=100, max_top_k=5)) as server, \
            mnemex.connect(url_of(server)) as rt:
        assert rt.config.memories.max_content_bytes == 100
        with pytest.raises(mnemex.TooLarge):
            await rt.scope(user_id="u", app_name="a").remember("x" * 101)
        with pytest.raises(mnemex.InvalidInput) as info:
            await rt.scope(user_id="u", app_name="a").search("x", 6)
        assert info.value.field == "top_k"


async def test_in_process_only_calls_say_so(tmp_path: Path) -> None:
    async with running(config_at(tmp_path)) as server, mnemex.connect(url_of(server)) as rt:
        with pytest.raises(mnemex.InvalidInput, match="in-process only"):
            rt.extract_automatically("bot", app_name="a", user_id="u")
        with pytest.raises(mnemex.InvalidInput, match="cannot be sent to a remote"):
            await rt.scope(user_id="u", app_name="a").extract_from("s1", [{"role": "user", "content": "hi"}])
        with pytest.raises(mnemex.InvalidInput, match="in-process only"):
            rt.stats()
        with pytest.raises(mnemex.UnknownActorKind):
            rt.ref("widget", "x")
        with pytest.raises(mnemex.InvalidInput, match="cannot be sent"):
            await rt.ask("scope", ("a", "u"), scopes.ExtractionFailed(session_id="s", first=0, upto=1,
                                                                      reason="error"))


async def test_raw_commands_cross_with_their_typed_replies(tmp_path: Path) -> None:
    async with running(config_at(tmp_path)) as server, mnemex.connect(url_of(server)) as rt:
        await rt.scope(user_id="u", app_name="a").remember("User likes tea")
        assert await rt.ask("scope", ("a", "u"), scopes.CountMemories()) == 1
        assert await rt.ask("scope", ("a", "u"), GetCursors()) == []
        page = await rt.ref("scope", ("a", "u")).ask(scopes.ListMemories(limit=1))
        assert isinstance(page, scopes.MemoryPage) and page.memories[0].content == "User likes tea"
        with pytest.raises(mnemex.InvalidInput, match="not of agent"):
            await rt.ask("agent", "bot", scopes.CountMemories())


async def test_the_routes_are_in_the_openapi_document(tmp_path: Path) -> None:
    async with running(config_at(tmp_path)) as server, httpx.AsyncClient(base_url=url_of(server)) as http:
        paths = (await http.get("/openapi.json")).json()["paths"]
    for path in ("/v1/runtime", "/v1/scopes", "/v1/actors/{kind}/ask", "/v1/actors/{kind}/stream"):
        assert path in paths
