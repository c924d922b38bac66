"""What crosses between the processes of one runtime (a cluster's shards): a
command as its kind encodes it, and an extraction reading an agent's session as
the agent's name, read where it lands through that process's way to the agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mnemex
from mnemex.knowledge.ref import agent_reader, list_reader
from mnemex.memories.extraction import ExtractSession
from mnemex.memories.protocol import Session, StoreSession
from mnemex.memories.sessions import Event
from mnemex.remote import crossing

pytestmark = pytest.mark.trio


async def test_a_command_crosses_as_its_kind_encodes_it(tmp_path: Path) -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=None, embedder="hashing")) as rt:
        kind = rt.kinds["scope"]
        store = StoreSession(session=Session(id="s1", app_name="app", user_id="u", events=[
            Event(author="user", content="I live in Lisbon.", timestamp=1.0, id="e1", role="user")]),
            first_id="01HZZZZZZZZZZZZZZZZZZZZZZZ", now=2.0)
        payload = crossing.encode_crossing(store, kind.encode)

        async def no_agent(kind: str, name: str, command: Any) -> Any:
            raise AssertionError("a plain command reads no agent")

        assert crossing.decode_crossing(payload, kind.decode, no_agent) == store


async def test_an_extraction_crosses_as_its_agent_and_reads_it_where_it_lands() -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=None, embedder="hashing")) as rt:
        agent = rt.agent("bot")
        await agent.append("s1", [{"role": "user", "content": "I live in Lisbon."},
                                  {"role": "assistant", "content": "Lovely."}])
        sent = ExtractSession(session_id="s1", read=agent_reader(agent.entries, "s1", ("agent", "bot")),
                              known=2, now=3.0, tokens=7, mode="flush", upto=2)
        payload = crossing.encode_crossing(sent, rt.kinds["scope"].encode)
        assert payload.startswith(b'{"type":"mnemex.extract_agent_session"')
        asked: list[tuple[str, str]] = []

        async def ask_agent(kind: str, name: str, command: Any) -> Any:
            asked.append((kind, name))
            return await rt.ask(kind, (name,), command)

        landed = crossing.decode_crossing(payload, rt.kinds["scope"].decode, ask_agent)
        assert isinstance(landed, ExtractSession)
        assert (landed.session_id, landed.known, landed.now, landed.tokens, landed.mode, landed.upto) == (
            "s1", 2, 3.0, 7, "flush", 2)
        read = await landed.read(0, 2)
        assert [(m.position, m.role, m.text) for m in read] == [(0, "user", "I live in Lisbon."),
                                                               (1, "assistant", "Lovely.")]
        assert asked == [("agent", "bot")]
        # a reader of the caller's own messages stays where it is
        own = ExtractSession(session_id="s1", read=list_reader([{"role": "user", "content": "hi"}]), known=1,
                             now=3.0)
        with pytest.raises(mnemex.InvalidInput, match="cannot be sent to another process"):
            crossing.encode_crossing(own, rt.kinds["scope"].encode)
