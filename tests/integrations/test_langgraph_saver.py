"""MnemexSaver, LangGraph's checkpointer on mnemex: LangGraph's own conformance
suite (every base and extended capability), real graphs (sync and async, interrupts,
time travel), restarts, the journal holding every acknowledged put, and bad input.

LangGraph is asyncio: each async test runs its coroutine with ``asyncio.run`` (the
project's pytest runs trio; these never enter trio's mode)."""

from __future__ import annotations

import asyncio
import operator
import warnings
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")
conformance = pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import mnemex
from mnemex.integrations.langgraph import MnemexSaver
from mnemex.lowlevel import checkpoint_kind, replay_actor
from mnemex.persistence import find_actors


def on_disk(path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(path / "data"), embedder="hashing")


class State(TypedDict):
    items: Annotated[list[str], operator.add]
    count: int


def graph_builder() -> StateGraph[State]:
    def add(state: State) -> dict[str, Any]:
        return {"items": [f"step{state['count']}"], "count": state["count"] + 1}

    builder = StateGraph(State)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder


def test_langgraphs_conformance_suite_passes_every_base_and_extended_check(tmp_path: Path) -> None:
    with mnemex.Client(on_disk(tmp_path)) as client:

        @conformance.checkpointer_test(name="MnemexSaver")
        async def saver() -> Any:
            yield MnemexSaver(client)

        report = asyncio.run(conformance.validate(saver))
    capabilities = {c.value for c in BASE_CAPABILITIES | EXTENDED_CAPABILITIES}
    assert set(report.results) == capabilities
    failures = {name: result.failures for name, result in report.results.items() if not result.passed}
    assert failures == {}
    passed = {name: result.tests_passed for name, result in report.results.items()}
    assert sum(passed[c.value] for c in BASE_CAPABILITIES) == 58
    assert sum(passed[c.value] for c in EXTENDED_CAPABILITIES) == 23


def test_a_graph_keeps_its_state_per_thread_across_a_restart(tmp_path: Path) -> None:
    config = {"configurable": {"thread_id": "t1"}}
    with mnemex.Client(on_disk(tmp_path)) as client:
        graph = graph_builder().compile(checkpointer=MnemexSaver(client))
        graph.invoke({"items": ["start"], "count": 0}, config)
        graph.invoke({"items": ["again"], "count": 5}, config)
        graph.invoke({"items": ["other"], "count": 0}, {"configurable": {"thread_id": "t2"}})
    with mnemex.Client(on_disk(tmp_path)) as client:
        graph = graph_builder().compile(checkpointer=MnemexSaver(client))
        state = graph.get_state(config)
        assert state.values == {"items": ["start", "step0", "again", "step5"], "count": 6}
        history = list(graph.get_state_history(config))
        assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]
        # time travel: run again from the first run's end, on a fork
        first_end = next(h for h in history if h.metadata["step"] == 1)
        forked = graph.invoke({"items": ["fork"], "count": 1}, first_end.config)
        assert forked["items"] == ["start", "step0", "fork", "step1"]
        assert graph.get_state({"configurable": {"thread_id": "t2"}}).values["items"] == ["other", "step0"]


def test_an_interrupted_async_graph_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    def ask(state: State) -> dict[str, Any]:
        answer = interrupt("name?")
        return {"items": [f"hello {answer}"], "count": state["count"] + 1}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    config = {"configurable": {"thread_id": "chat"}}

    async def first(client: mnemex.Client) -> Any:
        graph = builder.compile(checkpointer=MnemexSaver(client))
        return await graph.ainvoke({"items": [], "count": 0}, config)

    async def second(client: mnemex.Client) -> Any:
        graph = builder.compile(checkpointer=MnemexSaver(client))
        return await graph.ainvoke(Command(resume="Ada"), config)

    with mnemex.Client(on_disk(tmp_path)) as client:
        paused = asyncio.run(first(client))
        assert paused["__interrupt__"][0].value == "name?"
    with mnemex.Client(on_disk(tmp_path)) as client:
        assert asyncio.run(second(client)) == {"items": ["hello Ada"], "count": 1}


def test_an_acknowledged_put_is_in_the_journal_before_any_snapshot(tmp_path: Path) -> None:
    config = {"configurable": {"thread_id": "t1"}}
    with mnemex.Client(on_disk(tmp_path)) as client:
        graph = graph_builder().compile(checkpointer=MnemexSaver(client))
        graph.invoke({"items": ["x"], "count": 0}, config)
        (location,) = [loc for loc in find_actors(tmp_path / "data") if loc.kind == "checkpoint"]
        assert not list(location.path.glob("snapshot-*"))
        rebuilt = replay_actor(location.path, checkpoint_kind(), ("t1",))
        assert len(rebuilt) == 3  # type: ignore[arg-type]  # input, loop, and the node's step


def test_a_checkpoint_stores_only_the_channels_it_changed(tmp_path: Path) -> None:
    with mnemex.Client(on_disk(tmp_path)) as client:
        saver = MnemexSaver(client)
        graph = graph_builder().compile(checkpointer=saver)
        for i in range(5):
            graph.invoke({"items": [], "count": i}, {"configurable": {"thread_id": "t"}})
        entries = client.checkpoints().list("t")
        assert len(entries) == 15
        newest = entries[0]
        assert {v.channel for v in newest.values} >= {"items", "count"}
        # 'items' changed only at the node steps (and inputs with items), not at every checkpoint
        versions = {e.checkpoint_id: {v.channel: v.version for v in e.values} for e in entries}
        assert len({vs.get("items") for vs in versions.values()}) < len(entries)


@pytest.mark.parametrize(("call", "field"), [
    (lambda s: s.get_tuple({}), "configurable"),
    (lambda s: s.get_tuple({"configurable": {"thread_id": ""}}), "thread_id"),
    (lambda s: s.put_writes({"configurable": {"thread_id": "t"}}, [("a", 1)], "task"), "checkpoint_id"),
    (lambda s: s.prune(["t"], strategy="oldest"), "strategy"),
    (lambda s: s.delete_for_runs("run-1"), "run_ids"),
])
def test_bad_input_is_refused_with_the_field_named(tmp_path: Path, call: Any, field: str) -> None:
    with mnemex.Client(on_disk(tmp_path)) as client:
        with pytest.raises(mnemex.InvalidInput) as caught:
            call(MnemexSaver(client))
        assert caught.value.field == field


def test_metadata_json_cannot_hold_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    with mnemex.Client(on_disk(tmp_path)) as client:
        saver = MnemexSaver(client)
        checkpoint = {"v": 1, "id": "1", "ts": "", "channel_values": {"a": 1}, "channel_versions": {"a": 1},
                      "versions_seen": {}, "updated_channels": None}
        with pytest.raises(mnemex.InvalidInput):
            saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint,  # type: ignore[arg-type]
                      {"step": 0, "bad": object()}, {"a": 1})  # type: ignore[typeddict-unknown-key]
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None


def test_the_saver_needs_a_client() -> None:
    with warnings.catch_warnings(), pytest.raises(mnemex.InvalidInput):
        MnemexSaver("mnemex-data")  # type: ignore[arg-type]


def test_a_saver_may_open_and_close_its_own_client(tmp_path: Path) -> None:
    config = {"configurable": {"thread_id": "t"}}
    with MnemexSaver.from_data_dir(tmp_path / "data") as saver:
        graph_builder().compile(checkpointer=saver).invoke({"items": ["a"], "count": 0}, config)
    with MnemexSaver.from_data_dir(on_disk(tmp_path)) as saver:
        assert saver.get_tuple(config).checkpoint["channel_values"]["count"] == 1  # type: ignore[union-attr]


def test_async_calls_take_no_worker_thread_and_a_cancelled_put_still_lands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    def no_threads(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the saver's async calls must not use a worker thread")

    monkeypatch.setattr(asyncio, "to_thread", no_threads)

    async def main(saver: MnemexSaver) -> None:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"a": 1}
        checkpoint["channel_versions"] = {"a": saver.get_next_version(None, None)}
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        put = asyncio.ensure_future(saver.aput(config, checkpoint, {"step": 0},  # type: ignore[typeddict-unknown-key]
                                               checkpoint["channel_versions"]))
        await asyncio.sleep(0)
        put.cancel()
        with pytest.raises(asyncio.CancelledError):
            await put
        got = await saver.aget_tuple(config)
        assert got is not None and got.checkpoint["id"] == checkpoint["id"]
        assert [t.checkpoint["id"] async for t in saver.alist(config)] == [checkpoint["id"]]

    with mnemex.Client(on_disk(tmp_path)) as client:
        asyncio.run(main(MnemexSaver(client)))
