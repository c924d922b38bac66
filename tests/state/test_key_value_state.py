"""Key-value state per app and per (app, user): the ``state`` actor sans-io (values kept
verbatim, nulls stored, bad changes refused whole, unchanged writes not journaled,
snapshots), and through the runtime on real files (restarts, app and user state kept
apart, values read without replaying anything)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

import mnemex
from mnemex.effects import Image, Step
from mnemex.persistence import find_actors
from mnemex.state.behaviour import KeyValueState, StateSettings, is_state_write, state_codec
from mnemex.state.protocol import ClearState, GetState, StateValues, UpdateState


def raw(mapping: dict[str, Any]) -> dict[str, msgspec.Raw]:
    return {key: msgspec.Raw(msgspec.json.encode(value)) for key, value in mapping.items()}


def reply_of(out: Any) -> Any:
    return out.reply if isinstance(out, Step) else out


class Journaled:
    """A KeyValueState with its journal, rebuilt as the kernel rebuilds it."""

    def __init__(self, max_value_bytes: int = 1000) -> None:
        self.settings = StateSettings(max_value_bytes=max_value_bytes)
        self.state = KeyValueState(("app",), self.settings)
        self.journal: list[bytes] = []
        self.image: Image | None = None

    def send(self, command: Any) -> Any:
        out = self.state.handle(command)
        if is_state_write(command) and not (isinstance(out, Step) and out.unchanged):
            self.journal.append(state_codec.encode(command))
        return reply_of(out)

    def snapshot(self) -> None:
        data = self.state.snapshot()
        records = list(data.records() if callable(data.records) else data.records)
        self.image = Image(records, dict(msgspec.json.decode(msgspec.json.encode(dict(data.extra)))), {})
        self.journal.clear()

    def restart(self) -> None:
        state = (KeyValueState(("app",), self.settings) if self.image is None
                 else KeyValueState.restore(("app",), self.image, self.settings))
        for line in self.journal:
            state.handle(state_codec.decode(line))
        self.state = state

    def values(self) -> dict[str, Any]:
        reply = self.send(GetState())
        assert isinstance(reply, StateValues)
        return reply.decoded()


def test_values_come_back_as_written_nulls_included_and_keys_are_removed_by_name() -> None:
    kv = Journaled()
    kv.send(UpdateState(set=raw({"theme": "dark", "n": 1, "nested": {"a": [1, None]}}), timestamp=10.0))
    kv.send(UpdateState(set=raw({"theme": None}), remove=["n", "absent"], timestamp=11.0))
    assert kv.values() == {"theme": None, "nested": {"a": [1, None]}}
    some = kv.send(GetState(keys=["theme", "absent"]))
    assert some.decoded() == {"theme": None} and some.updated_at == 11.0


def test_writes_that_change_nothing_are_not_journaled() -> None:
    kv = Journaled()
    kv.send(UpdateState(set=raw({"a": 1}), timestamp=1.0))
    kv.send(UpdateState(set=raw({"a": 1}), remove=["b"], timestamp=2.0))
    kv.send(ClearState(timestamp=3.0))
    kv.send(ClearState(timestamp=4.0))
    assert [msgspec.json.decode(line)["type"] for line in kv.journal] == ["state.update", "state.clear"]


@pytest.mark.parametrize(("change", "error", "match"), [
    (UpdateState(set={"": msgspec.Raw(b"1")}), mnemex.InvalidInput, "non-empty"),
    (UpdateState(set={"a\x00": msgspec.Raw(b"1")}), mnemex.InvalidInput, "control character"),
    (UpdateState(set={"ok": msgspec.Raw(b"2"), "x": msgspec.Raw(b"[" + b"1," * 600 + b"1]")}),
     mnemex.TooLarge, "'x'.*the limit is 1,000"),
    (UpdateState(set={"a": msgspec.Raw(b"2")}, remove=["a"]), mnemex.InvalidInput, "both set and removed"),
    (UpdateState(set={"a": msgspec.Raw(b"2")}, timestamp=-1.0), mnemex.InvalidInput, "timestamp"),
    (GetState(keys="a"), mnemex.InvalidInput, "list of strings"),  # type: ignore[arg-type]
])
def test_a_bad_change_is_refused_whole(change: Any, error: type[Exception], match: str) -> None:
    kv = Journaled()
    kv.send(UpdateState(set=raw({"a": 1}), timestamp=1.0))
    with pytest.raises(error, match=match):
        kv.send(change)
    assert kv.values() == {"a": 1} and len(kv.journal) == 1


def test_state_is_rebuilt_from_the_journal_and_from_a_snapshot() -> None:
    kv = Journaled()
    kv.send(UpdateState(set=raw({"a": 1, "b": "two"}), timestamp=1.0))
    kv.restart()
    assert kv.values() == {"a": 1, "b": "two"}
    kv.snapshot()
    kv.send(UpdateState(set=raw({"c": [3]}), remove=["a"], timestamp=2.0))
    kv.restart()
    assert kv.values() == {"b": "two", "c": [3]}
    assert kv.send(GetState()).updated_at == 2.0


def on_disk(path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(path / "data"), embedder="hashing")


def test_app_and_user_state_persist_apart_across_restarts(tmp_path: Path) -> None:
    with mnemex.Client(on_disk(tmp_path)) as client:
        client.state(app_name="shop").update({"currency": "EUR"})
        client.state(app_name="shop", user_id="ada").update({"cart": ["book"], "vip": None})
        client.state(app_name="shop", user_id="bob").update({"cart": []})
        client.state(app_name="other", user_id="ada").update({"cart": ["pen"]})
        client.state(app_name="shop", user_id="bob").clear()
    with mnemex.Client(on_disk(tmp_path)) as client:  # journal replay
        assert client.state(app_name="shop").get() == {"currency": "EUR"}
        ada = client.state(app_name="shop", user_id="ada")
        assert ada.get() == {"cart": ["book"], "vip": None} and ada.get(["vip", "nope"]) == {"vip": None}
        assert client.state(app_name="shop", user_id="bob").get() == {}
        assert client.state(app_name="other", user_id="ada").get() == {"cart": ["pen"]}
        ada.update({"cart": ["book", "lamp"]}, remove=["vip"])
    with mnemex.Client(on_disk(tmp_path)) as client:  # the shutdown snapshot, then nothing after it
        assert client.state(app_name="shop", user_id="ada").get() == {"cart": ["book", "lamp"]}
    kinds = {(location.kind, location.key) for location in find_actors(tmp_path / "data")}
    assert ("state", ("shop",)) in kinds and ("state", ("shop", "ada")) in kinds


def test_a_state_ref_checks_its_names_and_values_at_the_edge() -> None:
    with mnemex.Client(mnemex.Config(data_dir=None, embedder="hashing")) as client:
        with pytest.raises(mnemex.InvalidInput, match="app_name"):
            client.state(app_name="")
        with pytest.raises(mnemex.InvalidInput, match="user_id"):
            client.state(app_name="a", user_id="")
        state = client.state(app_name="a")
        with pytest.raises(TypeError):
            state.update({"f": object()})
        with pytest.raises(mnemex.InvalidInput, match="keys must be strings"):
            state.update({1: "x"})  # type: ignore[dict-item]
        assert state.get() == {}
