"""The memory API through a real server on localhost, with httpx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mnemex


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"))


async def test_store_search_get_and_delete_within_a_scope(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/memory", json={"content": "Alice's dog is called Rex", "user_id": "alice",
                                             "app_name": "chat", "importance": 0.9, "categories": ["pets"],
                                             "metadata": {"source": "chat"}})
        assert r.status_code == 201, r.text
        memory_id = r.json()["id"]
        await http.post("/memory", json={"content": "Alice works at a bank", "user_id": "alice",
                                         "app_name": "chat"})
        found = (await http.post("/memory/search", json={"query": "dog Rex", "user_id": "alice",
                                                          "app_name": "chat", "top_k": 5})).json()
        assert found["results"][0]["id"] == memory_id
        top = found["results"][0]
        assert top["score"] > 0 and "bm25" in top["scores"] and top["memory"]["metadata"] == {"source": "chat"}
        got = await http.get(f"/memory/{memory_id}", params={"user_id": "alice", "app_name": "chat"})
        assert got.status_code == 200 and got.json()["importance"] == 0.9
        deleted = await http.delete(f"/memory/{memory_id}", params={"user_id": "alice", "app_name": "chat"})
        assert deleted.status_code == 200
        gone = await http.get(f"/memory/{memory_id}", params={"user_id": "alice", "app_name": "chat"})
        assert gone.status_code == 404


async def test_a_memory_id_is_only_reachable_within_its_own_scope(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        memory_id = (await http.post("/memory", json={"content": "secret of bob", "user_id": "bob",
                                                      "app_name": "chat"})).json()["id"]
        for params in ({"user_id": "alice", "app_name": "chat"}, {"user_id": "bob", "app_name": "other"}):
            assert (await http.get(f"/memory/{memory_id}", params=params)).status_code == 404
            assert (await http.delete(f"/memory/{memory_id}", params=params)).status_code == 404
        assert (await http.get(f"/memory/{memory_id}")).status_code == 400  # no scope given
        hits = (await http.post("/memory/search", json={"query": "secret", "user_id": "alice",
                                                         "app_name": "chat", "mode": "keyword"})).json()
        assert hits["results"] == []


async def test_multi_scope_search_and_batch(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/memory/batch", json={"memories": [
            {"content": "likes green tea", "user_id": "u1", "app_name": "a"},
            {"content": "likes black tea", "user_id": "u2", "app_name": "a"},
            {"content": "likes coffee", "user_id": "u1", "app_name": "a"}]})
        assert r.status_code == 201 and len(r.json()["ids"]) == 3
        body = {"query": "tea", "mode": "keyword",
                "scopes": [{"user_id": "u1", "app_name": "a"}, {"user_id": "u2", "app_name": "a"}]}
        results = (await http.post("/memory/search", json=body)).json()["results"]
        assert {(x["user_id"], x["content"]) for x in results} == {("u1", "likes green tea"),
                                                                    ("u2", "likes black tea")}


async def test_archive_moves_a_conversation_into_long_term_memory(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await http.post("/messages", json={"session_id": "s1", "messages": [
            {"role": "user", "content": "I moved to Lisbon last year"},
            {"role": "assistant", "content": "Lisbon is lovely"}]})
        r = await http.post("/sessions/s1/archive", json={"user_id": "u", "app_name": "a"})
        assert r.status_code == 200 and r.json()["added"] == 2
        again = await http.post("/sessions/s1/archive", json={"user_id": "u", "app_name": "a"})
        assert again.json()["added"] == 0  # archiving twice adds nothing twice
        hits = (await http.post("/memory/search", json={"query": "Lisbon", "user_id": "u", "app_name": "a",
                                                         "mode": "keyword"})).json()["results"]
        assert len(hits) == 2


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"content": "x", "user_id": "u"}, 400, "app_name"),
        ({"content": 5, "user_id": "u", "app_name": "a"}, 400, "content"),
        ({"content": "x", "user_id": "u", "app_name": "a", "colour": "red"}, 400, "colour"),
        ({"content": "x" * 20_000, "user_id": "u", "app_name": "a"}, 422, "content"),
        ({"content": "x", "user_id": "u", "app_name": "a", "importance": 7}, 400, "importance"),  # declared: 0..1
    ],
)
async def test_bad_memories_get_4xx_naming_the_field(tmp_path: Path, body: dict[str, Any], status: int,
                                                     field: str, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/memory", json=body)
        assert r.status_code == status, r.text
        assert r.json().get("field", "").endswith(field), r.json()


async def test_content_limit_error_names_the_limit(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        r = await http.post("/memory", json={"content": "é" * 6000, "user_id": "u", "app_name": "a"})
        assert r.status_code == 422 and "10,240" in r.json()["error"]


async def test_memories_survive_a_restart(tmp_path: Path, server: Any) -> None:
    config = cfg(tmp_path)
    async with server(config) as http:
        for i in range(20):
            await http.post("/memory", json={"content": f"fact number {i}", "user_id": "u", "app_name": "a"})
        before = (await http.post("/memory/search", json={"query": "fact number 7", "user_id": "u",
                                                           "app_name": "a"})).json()
    async with server(config) as http:
        after = (await http.post("/memory/search", json={"query": "fact number 7", "user_id": "u",
                                                          "app_name": "a"})).json()
    assert [x["id"] for x in after["results"]] == [x["id"] for x in before["results"]]


async def test_reads_and_deletes_of_what_was_never_written_leave_nothing_on_disk(tmp_path: Path,
                                                                                   server: Any) -> None:
    data = tmp_path / "data"
    async with server(cfg(tmp_path)) as http:
        scope = {"user_id": "nobody", "app_name": "chat"}
        assert (await http.delete("/memory/m1", params=scope)).status_code == 404
        assert (await http.get("/memory/m1", params=scope)).status_code == 404
        found = await http.post("/memory/search", json={"query": "anything", **scope})
        assert found.status_code == 200 and found.json()["results"] == []
        assert (await http.delete("/messages", params={"session_id": "none"})).json()["sessions"] == []
        assert (await http.get("/messages", params={"session_id": "none"})).json()["messages"] == []
    # the server has stopped: every actor it loaded was passivated, and none had anything to keep
    left = sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.name != "LOCK")
    assert left == []


async def test_extract_history_and_search_as_of_over_http(tmp_path: Path, server: Any) -> None:
    from mnemex.testing import FakeLLM

    with FakeLLM() as llm:
        llm.add("Berlin", '{"facts": [{"content": "The user moved to Berlin.", "entities": ["Berlin"], '
                          '"attributed_to": "user", "relation": "updates", "target": 1}]}')
        llm.add("Lisbon", '{"facts": [{"content": "The user lives in Lisbon.", "entities": ["Lisbon"], '
                          '"attributed_to": "user"}]}')
        config = mnemex.Config(data_dir=str(tmp_path / "data"), llm_base_url=llm.base_url, llm_model="fake")
        async with server(config) as http:
            await http.post("/messages", json={"session_id": "s1", "messages": [
                {"role": "user", "content": "I live in Lisbon"}]})
            r = await http.post("/sessions/s1/extract", json={"user_id": "u", "app_name": "a"})
            assert r.status_code == 200, r.text
            first = r.json()
            assert first["status"] == "committed" and len(first["added"]) == 1
            await http.post("/messages", json={"session_id": "s1", "messages": [
                {"role": "user", "content": "I moved to Berlin"}]})
            moved = (await http.post("/sessions/s1/extract", json={"user_id": "u", "app_name": "a"})).json()
            assert moved["superseded"] == first["added"]
            history = await http.get(f"/memory/{moved['added'][0]}/history",
                                     params={"user_id": "u", "app_name": "a"})
            assert history.status_code == 200
            assert [m["content"] for m in history.json()["related"]] == ["The user lives in Lisbon."]
            body = {"query": "where does the user live", "user_id": "u", "app_name": "a", "mode": "fulltext"}
            now = (await http.post("/memory/search", json=body)).json()["results"]
            assert [x["content"] for x in now] == ["The user moved to Berlin."]
            everything = (await http.post("/memory/search", json={**body, "include_history": True})).json()
            assert len(everything["results"]) == 2
            nothing_new = (await http.post("/sessions/s1/extract", json={"user_id": "u", "app_name": "a"})).json()
            assert nothing_new["status"] == "nothing_new"
            bad = await http.post("/sessions/s1/extract", json={"user_id": "u"})
            assert bad.status_code in (400, 422)
            spec = (await http.get("/openapi.json")).json()
            assert "/sessions/{session_id}/extract" in spec["paths"]
            assert "/memory/{memory_id}/history" in spec["paths"]


async def test_served_agents_extract_automatically_when_configured(tmp_path: Path, server: Any) -> None:
    from mnemex.config import AutoExtract
    from waiting import eventually

    auto = (AutoExtract(agent="ark", app_name="a", user_id="u"),)
    config = mnemex.Config(data_dir=str(tmp_path / "data"), knowledge_auto=auto, knowledge_turns=1)
    async with server(config) as http:
        r = await http.post("/messages", json={"session_id": "s1", "messages": [
            {"role": "user", "content": "Please remember that I'm allergic to peanuts."}]})
        assert r.status_code == 200

        async def extracted() -> bool:
            body = {"query": "peanuts", "user_id": "u", "app_name": "a", "mode": "keyword"}
            return bool((await http.post("/memory/search", json=body)).json()["results"])

        await eventually(extracted, what="the automatic extraction of the served agent's session")
