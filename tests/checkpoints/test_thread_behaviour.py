"""ThreadCheckpoints, sans-io: what a put stores (values once per version), writes
(first one kept, special ones replaced), deletes that leave no orphan value, refused
commands that change nothing, snapshots that restore the same state, and a stateful
comparison against a plain-dict model of LangGraph's InMemorySaver."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mnemex.checkpoints.behaviour import ThreadCheckpoints, is_checkpoint_write
from mnemex.checkpoints.protocol import (
    Blob,
    ChannelValue,
    CheckpointEntry,
    CopyInto,
    DeleteRuns,
    DeleteThread,
    ExportThread,
    GetCheckpoint,
    ListCheckpoints,
    PruneThread,
    PutCheckpoint,
    PutWrites,
    WriteValue,
    checkpoint_codec,
)
from mnemex.effects import Image, Step
from mnemex.errors import InvalidInput


def blob(text: str) -> Blob:
    return Blob("json", text.encode())


def put(checkpoint_id: str, versions: dict[str, Any], values: dict[str, str | None], *, ns: str = "",
        parent: str | None = None, run: str | None = None) -> PutCheckpoint:
    return PutCheckpoint(ns=ns, checkpoint_id=checkpoint_id, parent_id=parent, checkpoint=blob(checkpoint_id),
                         metadata={"step": 0, **({"run_id": run} if run else {})}, versions=versions,
                         values=[ChannelValue(ch, versions[ch], None if v is None else blob(v))
                                 for ch, v in values.items()])


def reply_of(result: Any) -> Any:
    return result.reply if isinstance(result, Step) else result


def restored(thread: ThreadCheckpoints) -> ThreadCheckpoints:
    data = thread.snapshot()
    lines = list(data.records() if callable(data.records) else data.records)
    return ThreadCheckpoints.restore(thread.key, Image(lines, dict(data.extra), {}))


def test_a_value_is_stored_once_per_version_however_many_checkpoints_point_at_it() -> None:
    thread = ThreadCheckpoints(("t",))
    thread.handle(put("1", {"a": 1, "b": 1}, {"a": "A1", "b": "B1"}))
    thread.handle(put("2", {"a": 2, "b": 1}, {"a": "A2"}, parent="1"))
    thread.handle(put("3", {"a": 3, "b": 1}, {"a": "A3"}, parent="2"))
    assert len(thread._values) == 4
    entry = reply_of(thread.handle(GetCheckpoint()))
    assert isinstance(entry, CheckpointEntry)
    assert entry.checkpoint_id == "3" and entry.parent_id == "2"
    assert {v.channel: v.value for v in entry.values} == {"a": blob("A3"), "b": blob("B1")}


def test_an_empty_channel_value_is_not_returned() -> None:
    thread = ThreadCheckpoints(("t",))
    thread.handle(put("1", {"a": 1}, {"a": None}))
    assert reply_of(thread.handle(GetCheckpoint(checkpoint_id="1"))).values == []


def test_a_repeated_write_keeps_the_first_but_a_special_write_replaces() -> None:
    thread = ThreadCheckpoints(("t",))
    thread.handle(put("1", {}, {}))
    thread.handle(PutWrites(checkpoint_id="1", task_id="t1", writes=[WriteValue(0, "a", blob("first")),
                                                                     WriteValue(-1, "__error__", blob("e1"))]))
    again = thread.handle(PutWrites(checkpoint_id="1", task_id="t1", writes=[WriteValue(0, "a", blob("second"))]))
    assert isinstance(again, Step) and again.unchanged
    thread.handle(PutWrites(checkpoint_id="1", task_id="t1", writes=[WriteValue(-1, "__error__", blob("e2"))]))
    writes = reply_of(thread.handle(GetCheckpoint())).writes
    assert [(w.idx, w.value) for w in writes] == [(-1, blob("e2")), (0, blob("first"))]


def test_deleting_runs_drops_their_checkpoints_writes_and_the_values_only_they_used() -> None:
    thread = ThreadCheckpoints(("t",))
    thread.handle(put("1", {"a": 1}, {"a": "A1"}, run="r1"))
    thread.handle(put("2", {"a": 2}, {"a": "A2"}, run="r2", parent="1"))
    thread.handle(PutWrites(checkpoint_id="2", task_id="x", writes=[WriteValue(0, "a", blob("w"))]))
    assert reply_of(thread.handle(DeleteRuns(run_ids=["r2"]))).count == 1
    entry = reply_of(thread.handle(GetCheckpoint()))
    assert entry.checkpoint_id == "1" and entry.writes == []
    assert set(thread._values) == {("", "a", 1)}
    assert not thread._writes


def test_prune_keeps_the_newest_of_each_namespace() -> None:
    thread = ThreadCheckpoints(("t",))
    for i in range(3):
        thread.handle(put(str(i), {"a": i}, {"a": f"A{i}"}))
        thread.handle(put(str(i), {"a": i}, {"a": f"C{i}"}, ns="child"))
    assert reply_of(thread.handle(PruneThread())).count == 4
    page = reply_of(thread.handle(ListCheckpoints()))
    assert [(e.ns, e.checkpoint_id) for e in page.entries] == [("", "2"), ("child", "2")]
    assert len(thread._values) == 2


@pytest.mark.parametrize("command", [
    PutCheckpoint(checkpoint_id="", checkpoint=blob("x")),
    PutCheckpoint(checkpoint_id="1", checkpoint=blob("x"), values=[ChannelValue("a", True, blob("v"))]),
    PutCheckpoint(checkpoint_id="1", checkpoint=blob("x"), versions={"a\n": 1}),
    PutWrites(checkpoint_id="1", task_id="", writes=[]),
    ListCheckpoints(limit=-1),
    PruneThread(strategy="newest"),  # type: ignore[arg-type]
    DeleteRuns(run_ids=[""]),
])
def test_a_refused_command_changes_nothing(command: Any) -> None:
    thread = ThreadCheckpoints(("t",))
    thread.handle(put("1", {"a": 1}, {"a": "A1"}))
    before = checkpoint_codec.encode(reply_of(thread.handle(ExportThread())))
    with pytest.raises(InvalidInput):
        thread.handle(command)
    assert checkpoint_codec.encode(reply_of(thread.handle(ExportThread()))) == before


def test_reads_are_not_journaled_and_writes_are() -> None:
    assert not is_checkpoint_write(GetCheckpoint())
    assert not is_checkpoint_write(ListCheckpoints())
    assert not is_checkpoint_write(ExportThread())
    assert is_checkpoint_write(put("1", {}, {}))
    assert is_checkpoint_write(DeleteThread())


def test_a_command_survives_its_journal_encoding() -> None:
    command = put("1", {"a": 1, "b": "0002.5", "c": 1.5}, {"a": "A", "b": None, "c": "\x00bytes"})
    assert checkpoint_codec.decode(checkpoint_codec.encode(command)) == command


def test_copy_into_another_thread_carries_everything() -> None:
    source = ThreadCheckpoints(("s",))
    source.handle(put("1", {"a": 1}, {"a": "A1"}))
    source.handle(put("2", {"a": 2}, {"a": "A2"}, parent="1", ns="n"))
    source.handle(PutWrites(checkpoint_id="1", task_id="x", task_path="p", writes=[WriteValue(0, "a", blob("w"))]))
    target = ThreadCheckpoints(("d",))
    target.handle(CopyInto(content=reply_of(source.handle(ExportThread()))))
    assert reply_of(target.handle(ExportThread())) == reply_of(source.handle(ExportThread()))
    entry = reply_of(target.handle(GetCheckpoint(checkpoint_id="1")))
    assert entry.thread_id == "d" and entry.writes[0].task_path == "p"


class ThreadMachine(RuleBasedStateMachine):
    """ThreadCheckpoints against a dict model; after every step the behaviour, its
    snapshot restored, and the model agree on every checkpoint's entry."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = ThreadCheckpoints(("t",))
        # model: (ns, id) -> (parent, run, {channel: value or None}); writes: (ns, id) -> {(task, idx): value}
        self.checkpoints: dict[tuple[str, str], tuple[str | None, str, dict[str, str | None]]] = {}
        self.writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str]]] = {}
        self.versions: dict[tuple[str, str], dict[str, str]] = {}
        self.counter = 0

    @rule(ns=st.sampled_from(["", "sub"]), run=st.sampled_from(["r1", "r2"]),
          changed=st.dictionaries(st.sampled_from("abc"), st.one_of(st.none(), st.text("xyz", max_size=3)),
                                  max_size=3))
    def put(self, ns: str, run: str, changed: dict[str, str | None]) -> None:
        self.counter += 1
        checkpoint_id = f"{self.counter:04}"
        ids = sorted(i for n, i in self.checkpoints if n == ns)
        parent = ids[-1] if ids else None
        values = dict(self.checkpoints[(ns, parent)][2]) if parent else {}
        values.update(changed)
        versions = {ch: f"{checkpoint_id}.{ch}" if ch in changed else self._version_of(ns, parent, ch)
                    for ch in values}
        self.thread.handle(PutCheckpoint(
            ns=ns, checkpoint_id=checkpoint_id, parent_id=parent, checkpoint=blob(checkpoint_id),
            metadata={"run_id": run}, versions=versions,
            values=[ChannelValue(ch, versions[ch], None if v is None else blob(v)) for ch, v in changed.items()]))
        self.checkpoints[(ns, checkpoint_id)] = (parent, run, values)
        self.versions[(ns, checkpoint_id)] = versions

    def _version_of(self, ns: str, checkpoint_id: str | None, channel: str) -> str:
        assert checkpoint_id is not None
        return self.versions[(ns, checkpoint_id)][channel]

    @precondition(lambda self: bool(self.checkpoints))
    @rule(data=st.data(), task=st.sampled_from(["t1", "t2"]), idx=st.sampled_from([0, 1, -1]),
          value=st.text("pq", max_size=2))
    def write(self, data: st.DataObject, task: str, idx: int, value: str) -> None:
        ns, checkpoint_id = data.draw(st.sampled_from(sorted(self.checkpoints)))
        self.thread.handle(PutWrites(ns=ns, checkpoint_id=checkpoint_id, task_id=task,
                                     writes=[WriteValue(idx, "ch", blob(value))]))
        pending = self.writes.setdefault((ns, checkpoint_id), {})
        if idx < 0 or (task, idx) not in pending:
            pending[(task, idx)] = ("ch", value)

    @rule(run=st.sampled_from(["r1", "r2"]))
    def delete_run(self, run: str) -> None:
        self.thread.handle(DeleteRuns(run_ids=[run]))
        for key in [k for k, v in self.checkpoints.items() if v[1] == run]:
            del self.checkpoints[key]
            self.writes.pop(key, None)

    @rule()
    def prune(self) -> None:
        self.thread.handle(PruneThread())
        newest = {ns: max(i for n, i in self.checkpoints if n == ns) for ns, _ in self.checkpoints}
        for key in [k for k in self.checkpoints if k[1] != newest[k[0]]]:
            del self.checkpoints[key]
            self.writes.pop(key, None)

    @rule()
    def restart(self) -> None:
        self.thread = restored(self.thread)

    @invariant()
    def agrees_with_the_model(self) -> None:
        page = reply_of(self.thread.handle(ListCheckpoints()))
        seen = {(e.ns, e.checkpoint_id): e for e in page.entries}
        assert set(seen) == set(self.checkpoints)
        for key, (parent, run, values) in self.checkpoints.items():
            entry = seen[key]
            assert entry.parent_id == parent and entry.metadata == {"run_id": run}
            assert {v.channel: v.value for v in entry.values} == {
                ch: blob(v) for ch, v in values.items() if v is not None}
            assert {(w.task_id, w.idx): (w.channel, w.value.data.decode()) for w in entry.writes} == \
                self.writes.get(key, {})
        for ns in {ns for ns, _ in self.checkpoints}:
            newest = reply_of(self.thread.handle(GetCheckpoint(ns=ns)))
            assert newest.checkpoint_id == max(i for n, i in self.checkpoints if n == ns)
        referenced = {(ns, ch, v) for (ns, i), vs in self.versions.items() if (ns, i) in self.checkpoints
                      for ch, v in vs.items()}
        assert set(self.thread._values) <= referenced


TestThreadMachine = ThreadMachine.TestCase


def test_snapshot_lines_are_json_with_the_bytes_in_base64() -> None:
    thread = ThreadCheckpoints(("t",))
    thread.handle(put("1", {"a": 1}, {"a": "A" * 30}))
    data = thread.snapshot()
    lines = list(data.records() if callable(data.records) else data.records)
    decoded = [msgspec.json.decode(line) for line in lines]
    assert decoded[0]["type"] == "checkpoints.value"
    assert decoded[0]["value"] == ["json", base64.b64encode(b"A" * 30).decode()]
