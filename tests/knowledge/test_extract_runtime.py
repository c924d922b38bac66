"""Extraction through a real runtime: an agent's session into a scope, through a
fake OpenAI-compatible server over HTTP; replay after a restart needs no call;
failures are retried, dead-lettered and retried by hand; what mnemex injected is
never extracted; hosts that keep their own history; automatic extraction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from waiting import eventually

import mnemex
from mnemex.testing import FakeLLM

pytestmark = pytest.mark.trio

LISBON = json.dumps({"facts": [{"content": "The user lives in Lisbon.", "entities": ["Lisbon"],
                                "attributed_to": "user", "importance": 0.7, "messages": [0]}]})


def config(tmp_path: Path, llm: FakeLLM, **more: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing", llm_base_url=llm.base_url,
                         llm_model="fake-llm",
                         llm_timeout=5.0, llm_retries=0, **more)


@pytest.fixture
def llm() -> Any:
    with FakeLLM() as server:
        yield server


async def test_extract_stores_the_facts_once_and_replay_needs_no_call(tmp_path: Path, llm: FakeLLM) -> None:
    llm.add("Lisbon", LISBON, usage={"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150})
    async with mnemex.open_runtime(config(tmp_path, llm)) as rt:
        agent = rt.agent("assistant")
        await agent.append("s1", [{"role": "user", "content": "Hi, I live in Lisbon."},
                                  {"role": "assistant", "content": "Lisbon is lovely!"}])
        done = await rt.extract("assistant", "s1", user_id="ana", app_name="chat")
        assert done.status == "committed" and (done.first, done.upto) == (0, 2) and len(done.added) == 1
        assert done.extractor == "llm:fake-llm:x3" and done.usage.total_tokens == 150 and done.usage.calls == 1
        again = await rt.extract("assistant", "s1", user_id="ana", app_name="chat")
        assert again.status == "nothing_new"
        assert llm.calls == 1
        scope = rt.scope(user_id="ana", app_name="chat")
        [memory] = (await scope.memories()).memories
        assert memory.content == "The user lives in Lisbon." and memory.extractor == "llm:fake-llm:x3"
        assert memory.sources[0].session_id == "s1" and memory.entities == ("Lisbon",)
    settings = config(tmp_path, llm)
    llm.close()  # nothing may call it from here on
    async with mnemex.open_runtime(settings) as rt:
        scope = rt.scope(user_id="ana", app_name="chat")
        [memory] = (await scope.memories()).memories
        assert memory.content == "The user lives in Lisbon."
        [status] = await scope.extraction_status()
        assert status.done == 2 and status.committed == 1


async def test_moving_supersedes_through_the_model(tmp_path: Path, llm: FakeLLM) -> None:
    # the first recorded answer whose match is in the request wins: the later message first
    llm.add("Berlin", json.dumps({"facts": [{"content": "The user moved to Berlin.", "entities": ["Berlin"],
                                             "attributed_to": "user", "relation": "updates", "target": 1}]}))
    llm.add("I live in Lisbon", LISBON)
    async with mnemex.open_runtime(config(tmp_path, llm)) as rt:
        agent = rt.agent("assistant")
        await agent.append("s1", [{"role": "user", "content": "I live in Lisbon."}])
        await rt.extract("assistant", "s1", user_id="ana", app_name="chat")
        await agent.append("s1", [{"role": "user", "content": "Big news: I moved to Berlin in May."}])
        moved = await rt.extract("assistant", "s1", user_id="ana", app_name="chat")
        assert len(moved.superseded) == 1 and len(moved.added) == 1
        # the model was shown the Lisbon memory, numbered
        assert "[1] The user lives in Lisbon." in json.dumps(llm.requests[-1])
        scope = rt.scope(user_id="ana", app_name="chat")
        hits = await scope.search("where does the user live?", mode="fulltext")
        assert [hit.memory.content for hit in hits.hits] == ["The user moved to Berlin."]
        history = await scope.history(moved.added[0])
        assert [record.content for record in history.related] == ["The user lives in Lisbon."]


async def test_what_mnemex_injected_is_never_sent_for_extraction(tmp_path: Path, llm: FakeLLM) -> None:
    async with mnemex.open_runtime(config(tmp_path, llm)) as rt:
        scope = rt.scope(user_id="ana", app_name="chat")
        await scope.remember("The user is allergic to peanuts.")
        recalled = await scope.recall("peanuts")
        assert recalled.startswith("<mnemex-memory>")
        agent = rt.agent("assistant")
        await agent.append("s1", [{"role": "system", "content": "You are helpful. " + recalled},
                                  {"role": "user", "content": recalled + "\nWhat can I cook tonight?"}])
        done = await rt.extract("assistant", "s1", user_id="ana", app_name="chat")
        assert done.added == []
        sent = json.dumps(llm.requests)
        assert "allergic" not in sent.split("[1]")[0]  # only ever as an offered memory, never as a message
        assert "What can I cook tonight?" in sent


async def test_failures_are_dead_lettered_and_retried_by_hand(tmp_path: Path, llm: FakeLLM) -> None:
    llm.fail(500, times=1)
    async with mnemex.open_runtime(config(tmp_path, llm, knowledge_max_attempts=1)) as rt:
        await rt.agent("assistant").append("s1", [{"role": "user", "content": "I live in Lisbon."}])
        with pytest.raises(mnemex.ExtractionError) as caught:
            await rt.extract("assistant", "s1", user_id="ana", app_name="chat")
        assert caught.value.reason == "http"
        scope = rt.scope(user_id="ana", app_name="chat")
        [status] = await scope.extraction_status()
        assert [(d.first, d.upto) for d in status.dead_letters] == [(0, 1)] and status.done == 1
        llm.add("Lisbon", LISBON)
        retried = await rt.retry_extraction("assistant", "s1", 0, user_id="ana", app_name="chat")
        assert retried.status == "committed" and len(retried.added) == 1
        [status] = await scope.extraction_status()
        assert status.dead_letters == []


async def test_a_host_with_its_own_history_extracts_only_what_is_new(tmp_path: Path, llm: FakeLLM) -> None:
    llm.add("Lisbon", LISBON)
    history = [{"role": "user", "content": "I live in Lisbon."}, {"role": "assistant", "content": "Nice."}]
    async with mnemex.open_runtime(config(tmp_path, llm)) as rt:
        scope = rt.scope(user_id="ana", app_name="chat")
        first = await scope.extract_from("conv-1", history)
        assert first.status == "committed" and len(first.added) == 1
        history.append({"role": "user", "content": "Thanks!"})
        second = await scope.extract_from("conv-1", history)
        assert (second.first, second.upto) == (2, 3) and llm.calls == 2
        with pytest.raises(mnemex.InvalidInput):
            await scope.extract_from("conv-1", [{"content": "no role"}])


async def test_automatic_extraction_runs_beside_the_appends(tmp_path: Path, llm: FakeLLM) -> None:
    llm.add("Lisbon", LISBON)
    async with mnemex.open_runtime(config(tmp_path, llm, knowledge_turns=2)) as rt:
        rt.extract_automatically("assistant", app_name="chat", user_id="ana")
        agent = rt.agent("assistant")
        await agent.append("s1", [{"role": "user", "content": "I live in Lisbon."}])
        scope = rt.scope(user_id="ana", app_name="chat")
        assert await scope.extraction_status() == []  # one message: the buffer waits, the scope untold
        await agent.append("s1", [{"role": "assistant", "content": "Lovely city."}])

        async def stored() -> bool:
            return await scope.count() == 1

        await eventually(stored, what="the automatic job's fact")
        [status] = await scope.extraction_status()
        assert status.done == 2


async def test_an_idle_session_is_extracted_without_a_full_buffer(tmp_path: Path, llm: FakeLLM) -> None:
    llm.add("Lisbon", LISBON)
    async with mnemex.open_runtime(config(tmp_path, llm, knowledge_turns=10, knowledge_idle=0.5)) as rt:
        rt.extract_automatically("assistant", app_name="chat", user_id="ana", session_id="s1")
        await rt.agent("assistant").append("s1", [{"role": "user", "content": "I live in Lisbon."}])
        scope = rt.scope(user_id="ana", app_name="chat")

        async def stored() -> bool:
            return await scope.count() == 1

        await eventually(stored, what="the idle session's fact")


async def test_the_rules_extract_without_an_endpoint(tmp_path: Path) -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=None, embedder="hashing")) as rt:
        await rt.agent("a").append("s1", [{"role": "user", "content": "Please remember that I'm vegetarian."}])
        done = await rt.extract("a", "s1", user_id="u", app_name="app")
        assert done.extractor == "rules" and done.status == "committed" and done.added
        [memory] = (await rt.scope(user_id="u", app_name="app").memories()).memories
        assert "vegetarian" in memory.content and memory.importance >= 0.9


async def test_bad_arguments_name_the_field(tmp_path: Path, llm: FakeLLM) -> None:
    async with mnemex.open_runtime(config(tmp_path, llm)) as rt:
        with pytest.raises(mnemex.InvalidInput):
            await rt.extract("assistant", "", user_id="u", app_name="a")
        with pytest.raises(mnemex.InvalidInput) as caught:
            rt.extract_automatically("assistant", app_name="", user_id="u")
        assert caught.value.field == "app_name"
        with pytest.raises(mnemex.InvalidInput) as caught:
            await rt.scope(user_id="u", app_name="a").extract_from("s", None)
        assert caught.value.field == "messages"


async def test_agents_that_forget_pruned_messages_are_not_extracted_from(tmp_path: Path) -> None:
    cfg = mnemex.Config(data_dir=None, embedder="hashing", agent_retain="pruned")
    async with mnemex.open_runtime(cfg) as rt:
        with pytest.raises(mnemex.InvalidInput) as caught:
            await rt.extract("a", "s1", user_id="u", app_name="app")
        assert caught.value.field == "conversations.retain"
        with pytest.raises(mnemex.InvalidInput):
            rt.extract_automatically("a", app_name="app", user_id="u")
        # a host keeping its own history still can
        done = await rt.scope(user_id="u", app_name="app").extract_from(
            "s1", [{"role": "user", "content": "Remember that my sister is Ana."}])
        assert done.status == "committed"


async def test_a_malformed_answer_is_retried_once_and_its_usage_is_kept(tmp_path: Path, llm: FakeLLM) -> None:
    llm.malformed("Sure! Here you go: facts, facts.", times=2)
    async with mnemex.open_runtime(config(tmp_path, llm, knowledge_max_attempts=1)) as rt:
        await rt.agent("assistant").append("s1", [{"role": "user", "content": "I live in Lisbon."}])
        with pytest.raises(mnemex.ExtractionError) as caught:
            await rt.extract("assistant", "s1", user_id="ana", app_name="chat")
        assert caught.value.reason == "malformed" and llm.calls == 2
        [status] = await rt.scope(user_id="ana", app_name="chat").extraction_status()
        assert status.failures == 1 and len(status.dead_letters) == 1


async def test_an_agent_may_have_a_buffer_of_its_own(tmp_path: Path, llm: FakeLLM) -> None:
    llm.add("Lisbon", LISBON)
    async with mnemex.open_runtime(config(tmp_path, llm, knowledge_turns=50)) as rt:
        rt.extract_automatically("assistant", app_name="chat", user_id="ana", turns=1)
        await rt.agent("assistant").append("s1", [{"role": "user", "content": "I live in Lisbon."}])
        scope = rt.scope(user_id="ana", app_name="chat")

        async def stored() -> bool:
            return await scope.count() == 1

        await eventually(stored, what="the fact of a one-message buffer")
        with pytest.raises(mnemex.InvalidInput) as caught:
            rt.extract_automatically("assistant", app_name="chat", user_id="ana", turns=0)
        assert caught.value.field == "turns"


FAVOUR = {"facts": [
    {"content": "Gandros owes the party a favour for rescuing him from the Black Tower.", "kind": "relationship",
     "categories": [], "confidences": [], "importance": 0.8,
     "entities": [{"name": "Gandros", "type": "person"}, {"name": "the party", "type": "organisation"}],
     "relations": [{"source": "Gandros", "type": "owes favour to", "target": "the party"},
                   {"source": "Gandros", "type": "rescued_from", "target": "Black Tower"},
                   {"source": "Gandros", "type": "owes", "target": "gandros"}],
     "relation": None, "target": None, "attributed_to": "Gandros", "actor_id": "Gandros", "valid_at": None,
     "messages": [0]}]}


async def test_the_llm_names_the_actor_and_types_the_relations_kept_across_a_restart(
        tmp_path: Path, llm: FakeLLM) -> None:
    """Prompt x3: the extractor is asked for the fact's actor and for typed relations
    between its entities; the memory is linked to the actor, the relation's ends are
    entities of the graph and the link between them says what the relation is, by
    which memory, also after a restart (the journal, then a snapshot)."""
    llm.add("owes us a favour", FAVOUR)
    async with mnemex.open_runtime(config(tmp_path, llm)) as rt:
        agent = rt.agent("gm")
        await agent.append("s1", [{"role": "user", "content": "Gandros owes us a favour since we got him "
                                                              "out of the Black Tower."}])
        done = await rt.extract("gm", "s1", user_id="gm", app_name="campaign")
        [memory_id] = done.added
        request = llm.requests[0]
        assert '"actor_id"' in request["messages"][0]["content"] and "relations" in request["messages"][0]["content"]
        scope = rt.scope(user_id="gm", app_name="campaign")
        [memory] = (await scope.actor_memories("Gandros")).memories
        assert memory.id == memory_id and memory.actor_id == "Gandros"
        assert set(memory.entities) == {"Gandros", "the party", "Black Tower"}  # the relation's ends too
        detail = await scope.entity("Gandros")
        links = {link.entity.name: link.relations for link in detail.neighbours}
        assert links["the party"] == (mnemex.TypedRelation(source="Gandros", type="owes_favour_to",
                                                           target="the party", memory=memory_id),)
        assert [r.type for r in links["Black Tower"]] == ["rescued_from"]
        related = await scope.related("the party")
        assert {link.entity.name: [r.type for r in link.relations] for link in related.related} == {
            "Gandros": ["owes_favour_to"], "Black Tower": []}  # named together, no relation typed
    settings = config(tmp_path, llm)
    llm.close()  # nothing may call it from here on
    for _ in range(2):  # from the journal, then (after the passivation) from a snapshot
        async with mnemex.open_runtime(settings) as rt:
            scope = rt.scope(user_id="gm", app_name="campaign")
            assert await scope.entity("Gandros") == detail
            await rt.passivate("scope", ("campaign", "gm"))
