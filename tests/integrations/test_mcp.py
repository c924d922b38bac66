"""`mnemex mcp`: the MCP server driven by the MCP SDK's own client, in-process (JSON-RPC
over memory streams, and the SDK's direct dispatch), over streamable HTTP, and as a
stdio subprocess started the way Claude Desktop starts it."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import trio
from checkout import python_env
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import mnemex
from mnemex.cli import main
from mnemex.integrations.mcp import (
    GRAPH_TOOLS,
    MEMORY_TOOLS,
    McpSettings,
    build_server,
    check_http_binding,
    serve_http,
)

ALICE = McpSettings(user_id="alice", app_name="chat")


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[mnemex.MnemexRuntime]:
    config = mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")
    async with mnemex.open_runtime(config) as runtime:
        yield runtime


async def call(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """The tool's structured result; its text is the same JSON."""
    result = await client.call_tool(tool, arguments or {})
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    assert json.loads(text) == result.structured_content
    return result.structured_content


async def refused(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """The text of the tool error a call gets."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    assert result.structured_content is None
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_every_tool_is_listed_with_described_typed_parameters_and_an_output_schema(
        rt: mnemex.MnemexRuntime, mode: str) -> None:
    async with Client(build_server(rt, ALICE), mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert list(tools) == list(MEMORY_TOOLS)
        for tool in tools.values():
            assert tool.description and tool.annotations and tool.annotations.title
            schema = tool.input_schema
            assert schema["type"] == "object" and schema["additionalProperties"] is False
            assert set(schema["properties"]).isdisjoint({"user_id", "app_name", "agent"}), tool.name
            for name, prop in schema["properties"].items():
                assert prop.get("description"), f"{tool.name}.{name} has no description"
                assert "anyOf" not in prop, f"{tool.name}.{name}: an optional argument shows its type alone"
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tools["search_memory"].input_schema["required"] == ["query"]
        assert tools["search_memory"].input_schema["properties"]["mode"]["enum"] == [
            "fulltext", "hybrid", "keyword", "vector"]
        assert tools["search_memory"].annotations.read_only_hint is True  # type: ignore[union-attr]
        assert tools["forget"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert client.instructions and "search_memory" in client.instructions


async def test_what_is_remembered_is_found_by_search(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        stored = await call(client, "remember", {"content": "The user writes Java at work", "importance": 0.8,
                                                 "categories": ["work"], "metadata": {"source": "chat"}})
        assert stored["content"] == "The user writes Java at work"
        found = await call(client, "search_memory", {"query": "which language does the user write?"})
        [memory] = found["memories"]
        assert memory["id"] == stored["id"] and memory["score"] > 0
        assert memory["importance"] == 0.8 and memory["categories"] == ["work"]
        assert memory["metadata"] == {"source": "chat"}
        assert memory["created_at"].endswith("Z")
        again = await call(client, "remember", {"content": "The user writes Java at work"})
        assert again["id"] == stored["id"]  # the same sentence is stored once
    record = await rt.scope(user_id="alice", app_name="chat").get(stored["id"])
    assert record.source == "mcp"


async def test_search_memory_takes_top_k_mode_filters_and_history(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        for content, category in [("The user likes green tea", "food"),
                                  ("The user drinks black tea daily", "food"),
                                  ("The user plays tea-themed board games", "games")]:
            await call(client, "remember", {"content": content, "categories": [category]})
        assert len((await call(client, "search_memory", {"query": "tea", "top_k": 5}))["memories"]) == 3
        assert len((await call(client, "search_memory", {"query": "tea", "top_k": 1}))["memories"]) == 1
        games = await call(client, "search_memory", {"query": "tea", "filters": {"categories": ["games"]}})
        assert [m["content"] for m in games["memories"]] == ["The user plays tea-themed board games"]
        keyword = await call(client, "search_memory", {"query": "green tea", "mode": "keyword"})
        assert keyword["mode"] == "keyword"
        assert keyword["memories"][0]["content"] == "The user likes green tea"
        assert keyword["memories"][0]["score"] > keyword["memories"][1]["score"]
        assert (await call(client, "search_memory", {"query": "tea", "mode": None}))["mode"] == "hybrid"
        text = await refused(client, "search_memory", {"query": "tea", "mode": "psychic"})
        assert text.startswith("InvalidInput: search_memory:") and "mode" in text
        text = await refused(client, "search_memory", {"query": "tea", "filters": {"colour": "green"}})
        assert text.startswith("InvalidInput:") and "colour" in text
        history = await call(client, "search_memory", {"query": "tea", "include_history": True})
        assert len(history["memories"]) == 3


async def test_list_memories_pages_oldest_first_and_filters(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        ids = []
        for n in range(5):
            stored = await call(client, "remember", {"content": f"Fact number {n} about the user",
                                                     "importance": 0.2 if n % 2 else 0.9})
            ids.append(stored["id"])
        page = await call(client, "list_memories", {"limit": 2, "offset": 1})
        assert [m["id"] for m in page["memories"]] == ids[1:3] and page["total"] == 5 and page["offset"] == 1
        important = await call(client, "list_memories", {"filters": {"min_importance": 0.5}})
        assert [m["id"] for m in important["memories"]] == ids[0::2] and important["total"] == 3
        assert len((await call(client, "list_memories"))["memories"]) == 5


async def test_forget_deletes_for_good_and_says_when_there_was_nothing(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        memory_id = (await call(client, "remember", {"content": "The user's locker code is 1234"}))["id"]
        assert await call(client, "forget", {"memory_id": memory_id}) == {"id": memory_id, "forgotten": True}
        assert (await call(client, "search_memory", {"query": "locker code"}))["memories"] == []
        assert await call(client, "forget", {"memory_id": memory_id}) == {"id": memory_id, "forgotten": False}


async def test_memory_history_shows_how_a_memory_came_to_be(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        lyon = (await call(client, "remember", {"content": "The user lives in Lyon"}))["id"]
        said = [{"role": "user", "content": "I live in Lyon."}]
        assert (await call(client, "extract", {"session_id": "c", "messages": said}))["reinforced"] == [lyon]
        said.append({"role": "user", "content": "I moved, I live in Paris now."})
        moved = await call(client, "extract", {"session_id": "c", "messages": said})
        [paris] = moved["added"]
        assert paris["content"] == "The user lives in Paris." and moved["linked"] == [lyon]
        history = await call(client, "memory_history", {"memory_id": paris["id"]})
        assert history["memory"]["id"] == paris["id"]
        assert [(c["op"], c.get("by"), c.get("other"), c.get("note")) for c in history["changes"]] == [
            ("created", "rules", None, None), ("linked", "rules", lyon, "conflicts")]
        lyon_history = await call(client, "memory_history", {"memory_id": lyon})
        assert [c["op"] for c in lyon_history["changes"]] == ["reinforced"]
        text = await refused(client, "memory_history", {"memory_id": "no-such-id"})
        assert text.startswith("NotFound:") and "no-such-id" in text


async def test_append_context_and_extract_a_conversation_mnemex_keeps(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        turn = [{"role": "user", "content": "I'm John and I live in Paris."},
                {"role": "assistant", "content": "Nice to meet you, John!"}]
        appended = await call(client, "append", {"session_id": "s1", "messages": turn})
        assert appended == {"session_id": "s1", "first_sequence": 1, "count": 2, "message_count": 2}
        context = await call(client, "context", {"session_id": "s1"})
        assert context["messages"] == turn and context["stored"] == 2 and context["kept"] == 2
        assert (await call(client, "context", {"session_id": "unknown"}))["messages"] == []
        extracted = await call(client, "extract", {"session_id": "s1"})
        assert extracted["status"] == "committed" and extracted["extractor"] == "rules"
        assert {m["content"] for m in extracted["added"]} >= {"The user lives in Paris."}
        assert (await call(client, "extract", {"session_id": "s1"}))["status"] == "nothing_new"
        found = await call(client, "search_memory", {"query": "where does the user live?"})
        assert "The user lives in Paris." in [m["content"] for m in found["memories"]]
        text = await refused(client, "append", {"session_id": "s1", "messages": [{"role": "wizard",
                                                                                    "content": "hi"}]})
        assert text.startswith("InvalidInput:") and "wizard" in text
    assert len(await rt.agent("mcp").history("s1")) == 2  # the server's agent (--agent) keeps it


async def test_extract_reads_messages_the_client_keeps_only_once(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        history = [{"role": "user", "content": "My name is Maria. I love hiking."}]
        first = await call(client, "extract", {"session_id": "c1", "messages": history})
        assert first["status"] == "committed"
        assert "The user's name is Maria." in {m["content"] for m in first["added"]}
        history += [{"role": "assistant", "content": "Hi Maria!"},
                    {"role": "user", "content": "I live in Rome."}]
        second = await call(client, "extract", {"session_id": "c1", "messages": history})
        assert [m["content"] for m in second["added"]] == ["The user lives in Rome."]
    assert await rt.agent("mcp").history("c1") == []  # nothing was stored as a conversation


async def test_errors_are_tool_errors_carrying_mnemexs_message(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        text = await refused(client, "remember", {})
        assert text.startswith("InvalidInput: remember:") and "content" in text
        text = await refused(client, "remember", {"content": "x", "importance": 3})
        assert text.startswith("InvalidInput:") and "importance" in text
        text = await refused(client, "remember", {"content": "x", "colour": "red"})
        assert text.startswith("InvalidInput:") and "colour" in text
        text = await refused(client, "search_memory", {"query": "x", "top_k": 0})
        assert "top_k" in text
        text = await refused(client, "remember", {"content": "x" * 20_000})
        assert text.startswith("TooLarge: memory content is 20,000 bytes")
        assert await call(client, "search_memory", {"query": "x", "top_k": "2"})  # numbers as text pass
        with pytest.raises(MCPError, match="unknown tool 'recall'"):
            await client.call_tool("recall", {"query": "x"})


async def test_one_users_assistant_cannot_choose_another_scope(rt: mnemex.MnemexRuntime) -> None:
    await rt.scope(user_id="bob", app_name="chat").remember("Bob's bank PIN is 9876")
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        for tool, arguments in [("search_memory", {"query": "PIN", "user_id": "bob"}),
                                ("list_memories", {"app_name": "other"}),
                                ("context", {"session_id": "s1", "agent": "bobs-agent"})]:
            text = await refused(client, tool, arguments)
            assert "cannot be chosen per call" in text and "--allow-scope-args" in text
        assert (await call(client, "search_memory", {"query": "bank PIN"}))["memories"] == []


async def test_scope_arguments_choose_the_scope_when_allowed(rt: mnemex.MnemexRuntime) -> None:
    settings = McpSettings(user_id="alice", app_name="chat", allow_scope_args=True)
    async with Client(build_server(rt, settings), mode="legacy") as client:
        search = next(t for t in (await client.list_tools()).tools if t.name == "search_memory")
        assert {"user_id", "app_name"} <= set(search.input_schema["properties"])
        await call(client, "remember", {"content": "Bob plays the cello", "user_id": "bob"})
        await call(client, "remember", {"content": "Alice plays the violin"})
        bobs = await call(client, "list_memories", {"user_id": "bob"})
        assert [m["content"] for m in bobs["memories"]] == ["Bob plays the cello"]
        alices = await call(client, "list_memories")
        assert [m["content"] for m in alices["memories"]] == ["Alice plays the violin"]
        await call(client, "append", {"session_id": "s", "agent": "other",
                                      "messages": [{"role": "user", "content": "hi"}]})
    assert len(await rt.agent("other").history("s")) == 1
    assert await rt.agent("mcp").history("s") == []


async def test_without_a_default_scope_each_call_names_it(rt: mnemex.MnemexRuntime) -> None:
    with pytest.raises(mnemex.InvalidInput, match="needs a user_id and app_name"):
        McpSettings()
    with pytest.raises(mnemex.InvalidInput, match="app_name"):
        McpSettings(user_id="alice")
    async with Client(build_server(rt, McpSettings(allow_scope_args=True)), mode="legacy") as client:
        text = await refused(client, "search_memory", {"query": "x"})
        assert text == "InvalidInput: user_id is required: this server has no default user_id"
        await call(client, "remember", {"content": "Carol likes jazz", "user_id": "carol",
                                        "app_name": "radio"})
    assert (await rt.scope(user_id="carol", app_name="radio").count()) == 1


async def test_graph_tools_keep_the_reference_servers_knowledge_graph(rt: mnemex.MnemexRuntime) -> None:
    async with Client(build_server(rt, ALICE), mode="legacy") as client:
        assert set(GRAPH_TOOLS).isdisjoint(t.name for t in (await client.list_tools()).tools)
    settings = McpSettings(user_id="alice", app_name="chat", graph_tools=True)
    async with Client(build_server(rt, settings), mode="legacy") as client:
        assert [t.name for t in (await client.list_tools()).tools] == [*MEMORY_TOOLS, *GRAPH_TOOLS]
        created = await call(client, "create_entities", {"entities": [
            {"name": "John", "entityType": "person", "observations": ["Speaks Spanish", "Likes tea"]},
            {"name": "Acme", "entityType": "company", "observations": []},
            {"name": "Anna", "entityType": "person", "observations": ["Likes tea"]}]})
        assert [e["name"] for e in created["entities"]] == ["John", "Acme", "Anna"]
        again = await call(client, "create_entities", {"entities": [{"name": "John", "entityType": "robot"}]})
        assert again == {"entities": []}
        relations = [{"from": "John", "to": "Acme", "relationType": "works_at"},
                     {"from": "Anna", "to": "John", "relationType": "knows"}]
        assert await call(client, "create_relations", {"relations": relations}) == {"relations": relations}
        assert await call(client, "create_relations", {"relations": relations[:1]}) == {"relations": []}
        added = await call(client, "add_observations", {"observations": [
            {"entityName": "John", "contents": ["Likes tea", "Lives in Madrid"]}]})
        assert added == {"results": [{"entityName": "John", "addedObservations": ["Lives in Madrid"]}]}
        text = await refused(client, "add_observations", {"observations": [{"entityName": "Zed",
                                                                            "contents": ["x"]}]})
        assert text.startswith("NotFound: no entity named 'Zed'")
        graph = await call(client, "read_graph")
        assert graph["entities"] == [
            {"name": "John", "entityType": "person",
             "observations": ["Speaks Spanish", "Likes tea", "Lives in Madrid"]},
            {"name": "Acme", "entityType": "company", "observations": []},
            {"name": "Anna", "entityType": "person", "observations": ["Likes tea"]}]
        assert graph["relations"] == relations
        # two entities' equal observations are two memories, each naming its entity
        found = await call(client, "search_memory", {"query": "likes tea",
                                                     "filters": {"kind": "observation"}})
        assert sorted(m["entities"][0] for m in found["memories"]) == ["Anna", "John"]
        madrid = await call(client, "search_nodes", {"query": "madrid"})
        assert [e["name"] for e in madrid["entities"]] == ["John"] and madrid["relations"] == []
        opened = await call(client, "open_nodes", {"names": ["John", "Acme", "Nobody"]})
        assert [e["name"] for e in opened["entities"]] == ["John", "Acme"]
        assert opened["relations"] == relations[:1]
        await call(client, "delete_observations", {"deletions": [{"entityName": "John",
                                                                   "observations": ["Speaks Spanish"]}]})
        await call(client, "delete_relations", {"relations": relations[1:]})
        gone = await call(client, "delete_entities", {"entityNames": ["Acme"]})
        assert gone["success"] is True and gone["deleted"] == 2  # Acme and the relation to it
        graph = await call(client, "read_graph")
        assert graph["entities"] == [
            {"name": "John", "entityType": "person", "observations": ["Likes tea", "Lives in Madrid"]},
            {"name": "Anna", "entityType": "person", "observations": ["Likes tea"]}]
        assert graph["relations"] == []


async def test_streamable_http_serves_the_tools_on_localhost_only_to_local_pages(
        rt: mnemex.MnemexRuntime) -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(functools.partial(serve_http, rt, ALICE, port=0))
            assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
            async with Client(url) as client:
                stored = await call(client, "remember", {"content": "The user rides a red bicycle"})
                found = await call(client, "search_memory", {"query": "bicycle"})
                assert [m["id"] for m in found["memories"]] == [stored["id"]]
            async with httpx.AsyncClient() as http:
                forged = await http.post(url, content=b"{}", headers={
                    "Host": "attacker.example", "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream"})
                assert forged.status_code == 421
            nursery.cancel_scope.cancel()


async def test_streamable_http_with_a_token_refuses_requests_without_it(rt: mnemex.MnemexRuntime) -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(functools.partial(serve_http, rt, ALICE, port=0, token="s3cret"))
            async with httpx.AsyncClient() as http:
                for headers in ({}, {"Authorization": "Bearer wrong"}):
                    answer = await http.post(url, content=b"{}", headers=headers)
                    assert answer.status_code == 401 and "Bearer" in answer.json()["error"]
            async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}) as http2, \
                    Client(streamable_http_client(url, http_client=http2)) as client:
                await call(client, "remember", {"content": "The user keeps bees"})
            nursery.cancel_scope.cancel()


def test_serving_beyond_this_machine_needs_a_token() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]"):
        check_http_binding(host, None)
    check_http_binding("0.0.0.0", "s3cret")
    with pytest.raises(mnemex.InvalidInput, match="needs a token"):
        check_http_binding("0.0.0.0", None)


def test_the_mcp_command_names_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEMEX_DATA_DIR", raising=False)
    monkeypatch.delenv("MNEMEX_TOKEN", raising=False)
    assert main(["mcp", "--user-id", "u", "--app-name", "a"]) == 2
    assert "--data-dir" in capsys.readouterr().err
    assert main(["mcp", "--data-dir", str(tmp_path), "--user-id", "u"]) == 2
    assert "app_name (--user-id, --app-name)" in capsys.readouterr().err
    assert main(["mcp", "--data-dir", str(tmp_path), "--user-id", "u", "--app-name", "a", "--http",
                 "--host", "0.0.0.0"]) == 2
    assert "needs a token" in capsys.readouterr().err
    assert not (tmp_path / "LOCK").exists()  # refused before any runtime opened


async def test_mnemex_mcp_over_stdio_remembers_across_restarts(tmp_path: Path) -> None:
    config = tmp_path / "mnemex.toml"
    config.write_text('embedder = "hashing"\n')
    data_dir = tmp_path / "data"
    params = StdioServerParameters(
        command=sys.executable, env=python_env(), cwd=str(tmp_path),
        args=["-m", "mnemex.cli", "mcp", "--data-dir", str(data_dir), "--config", str(config),
              "--user-id", "alice", "--app-name", "desktop"])
    with trio.fail_after(90):
        async with Client(params) as client:
            assert client.server_info is not None and client.server_info.name == "mnemex"
            stored = await call(client, "remember", {"content": "The user is allergic to peanuts"})
            found = await call(client, "search_memory", {"query": "peanuts allergy"})
            assert [m["id"] for m in found["memories"]] == [stored["id"]]
        # the client closed stdin: the server drained, snapshotted and let go of the data directory
        assert list(data_dir.glob("shards/*/scopes/*/snapshot-*.jsonl"))
        async with Client(params) as client:
            found = await call(client, "search_memory", {"query": "what is the user allergic to?"})
            assert [m["id"] for m in found["memories"]] == [stored["id"]]


async def test_mnemex_mcp_over_http_serves_until_sigterm_then_snapshots(tmp_path: Path) -> None:
    config = tmp_path / "mnemex.toml"
    config.write_text('embedder = "hashing"\n')
    data_dir = tmp_path / "data"
    server = subprocess.Popen(
        [sys.executable, "-m", "mnemex.cli", "mcp", "--data-dir", str(data_dir), "--config", str(config),
         "--user-id", "alice", "--app-name", "desktop", "--http", "--port", "0"],
        env=python_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)

    def served_url() -> str:
        assert server.stderr is not None
        for line in server.stderr:
            if "serving MCP" in line:
                return line.rsplit(" ", 1)[1].strip()
        raise AssertionError(f"mnemex mcp --http ended ({server.wait()}) before serving")

    try:
        with trio.fail_after(90):
            url = await trio.to_thread.run_sync(served_url, abandon_on_cancel=True)
            assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
            async with Client(url) as client:
                await call(client, "remember", {"content": "The user collects vinyl records"})
            server.send_signal(signal.SIGTERM)
            assert await trio.to_thread.run_sync(server.wait, abandon_on_cancel=True) == 0
        assert list(data_dir.glob("shards/*/scopes/*/snapshot-*.jsonl"))
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
        if server.stderr is not None:
            server.stderr.close()


def test_mnemex_mcp_help_lists_its_flags() -> None:
    done = subprocess.run([sys.executable, "-m", "mnemex.cli", "mcp", "--help"], env=python_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    for flag in ("--data-dir", "--user-id", "--app-name", "--agent", "--allow-scope-args", "--graph-tools",
                 "--http", "--host", "--port", "--token"):
        assert flag in done.stdout
