"""A session's key-value state, kept by its agent with its messages (sans-io): empty
sessions made with a state, state changed alone or in the same step as an append,
reads of a session's newest entries, headers by id prefix, journal replay and
snapshots, and old snapshots without state."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from agent_support import Driver, make, user
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import mnemex
from mnemex.conversations.protocol import (
    AppendItems,
    CreateSession,
    DeleteSession,
    GetSession,
    ListSessionHeaders,
    ListSessions,
    SessionCreated,
    SessionHeader,
    SessionRead,
    UpdateSessionState,
)
from mnemex.effects import Image, Step

raw = msgspec.json.encode


def values(mapping: dict[str, Any]) -> dict[str, msgspec.Raw]:
    return {key: msgspec.Raw(raw(value)) for key, value in mapping.items()}


def item(n: int) -> msgspec.Raw:
    return msgspec.Raw(raw({"type": "note", "n": n}))


def test_a_session_is_created_empty_with_its_state_and_only_once() -> None:
    driver = Driver(make())
    made = driver.send(CreateSession(session_id="s", state=values({"cart": ["book"], "n": 1}),
                                     timestamp=driver.tick()))
    assert isinstance(made, SessionCreated) and made.created
    assert made.header.values() == {"cart": ["book"], "n": 1} and made.header.message_count == 0
    out = driver.memory.handle(CreateSession(session_id="s", state=values({"cart": []}),
                                             timestamp=driver.tick()))
    assert isinstance(out, Step) and out.unchanged  # an existing session is left as it was: not journaled
    assert not out.reply.created and out.reply.header.values() == {"cart": ["book"], "n": 1}
    assert [info.session_id for info in driver.send(ListSessions(now=driver.tick(0)))] == ["s"]


def test_state_changes_keep_nulls_remove_keys_and_journal_only_changes() -> None:
    driver = Driver(make())
    driver.send(CreateSession(session_id="s", state=values({"flag": True, "old": 1}),
                              timestamp=driver.tick()))
    header = driver.send(UpdateSessionState(session_id="s", set=values({"flag": None, "new": {"a": [1]}}),
                                            remove=["old"], timestamp=driver.tick()))
    assert isinstance(header, SessionHeader)
    assert header.values() == {"flag": None, "new": {"a": [1]}}
    out = driver.memory.handle(UpdateSessionState(session_id="s", set=values({"flag": None}),
                                                  timestamp=driver.tick()))
    assert isinstance(out, Step) and out.unchanged  # the same value again changes nothing: not journaled


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"set": {"": msgspec.Raw(b"1")}}, mnemex.InvalidInput, "non-empty"),
    ({"set": {"a\nb": msgspec.Raw(b"1")}}, mnemex.InvalidInput, "control character"),
    ({"set": {"a": msgspec.Raw(b"1")}, "remove": ["a"]}, mnemex.InvalidInput, "both set and removed"),
    ({"set": {"big": msgspec.Raw(b'"' + b"x" * 2000 + b'"')}}, mnemex.TooLarge, "the limit is 1,000"),
])
def test_a_bad_state_change_is_refused_and_changes_nothing(change: dict[str, Any], error: type[Exception],
                                                           match: str) -> None:
    driver = Driver(make(max_message_bytes=1000))
    driver.send(CreateSession(session_id="s", state=values({"keep": 1}), timestamp=driver.tick()))
    with pytest.raises(error, match=match):
        driver.send(UpdateSessionState(session_id="s", timestamp=driver.tick(), **change))
    if "remove" not in change:  # the same change with an append: neither is stored
        with pytest.raises(error, match=match):
            driver.send(AppendItems(session_id="s", items=[item(1)], state=change["set"],
                                    timestamp=driver.tick()))
    read = driver.send(GetSession(session_id="s"))
    assert read.header.values() == {"keep": 1} and read.entries == []


def test_an_append_changes_the_state_in_the_same_step_and_can_require_the_session() -> None:
    driver = Driver(make())
    with pytest.raises(mnemex.NotFound, match="no session 'gone'"):
        driver.send(AppendItems(session_id="gone", items=[item(1)], state=values({"k": 1}), existing=True,
                                timestamp=driver.tick()))
    assert driver.send(GetSession(session_id="gone")) is None
    driver.send(AppendItems(session_id="s", items=[item(1)], state=values({"k": 1}), timestamp=driver.tick()))
    driver.send(AppendItems(session_id="s", items=[item(2)], state=values({"k": 2, "j": "x"}), existing=True,
                            timestamp=driver.tick()))
    read = driver.send(GetSession(session_id="s"))
    assert read.header.values() == {"k": 2, "j": "x"} and read.header.message_count == 2
    with pytest.raises(mnemex.NotFound):
        driver.send(UpdateSessionState(session_id="gone", set=values({"k": 1}), timestamp=driver.tick()))


def test_reading_a_session_takes_the_newest_entries_then_those_stamped_from_a_time_on() -> None:
    driver = Driver(make())
    for n, at in enumerate([10.0, 20.0, 30.0, 40.0, 50.0]):
        driver.send(AppendItems(session_id="s", items=[item(n)], timestamp=at))

    def stamps(**read: Any) -> list[float]:
        reply = driver.send(GetSession(session_id="s", **read))
        assert isinstance(reply, SessionRead)
        return [entry.timestamp for entry in reply.entries]

    assert stamps() == [10.0, 20.0, 30.0, 40.0, 50.0]
    assert stamps(last=0) == [] and stamps(last=2) == [40.0, 50.0] and stamps(last=99) == stamps()
    assert stamps(after=30.0) == [30.0, 40.0, 50.0] and stamps(after=51.0) == []
    assert stamps(after=40.0, last=3) == [40.0, 50.0] and stamps(after=0.0, last=2) == [40.0, 50.0]
    header = driver.send(GetSession(session_id="s")).header
    assert header.last_entry_at == 50.0 and header.message_count == 5


def test_headers_list_the_sessions_by_id_prefix_with_their_state() -> None:
    driver = Driver(make())
    for session_id in ("alice/1", "alice/2", "bob/1"):
        driver.send(CreateSession(session_id=session_id, state=values({"id": session_id}),
                                  timestamp=driver.tick()))
    by_prefix = {h.session_id: h.values() for h in driver.send(ListSessionHeaders(prefix="alice/"))}
    assert by_prefix == {"alice/1": {"id": "alice/1"}, "alice/2": {"id": "alice/2"}}
    assert len(driver.send(ListSessionHeaders())) == 3
    driver.send(DeleteSession(session_id="alice/1", timestamp=driver.tick()))
    assert [h.session_id for h in driver.send(ListSessionHeaders(prefix="alice/"))] == ["alice/2"]


def test_state_survives_journal_replay_and_snapshots() -> None:
    driver = Driver(make())
    driver.send(CreateSession(session_id="s", state=values({"a": 1}), timestamp=driver.tick()))
    driver.send(AppendItems(session_id="s", items=[item(1)], state=values({"b": [2]}),
                            timestamp=driver.tick()))
    driver.restart()  # from the journal alone
    assert driver.send(GetSession(session_id="s")).header.values() == {"a": 1, "b": [2]}
    driver.snapshot()
    driver.send(UpdateSessionState(session_id="s", set=values({"c": None}), remove=["a"],
                                   timestamp=driver.tick()))
    driver.restart()  # snapshot, then the journal after it
    read = driver.send(GetSession(session_id="s"))
    assert read.header.values() == {"b": [2], "c": None} and len(read.entries) == 1


def test_a_snapshot_written_before_session_state_restores_with_empty_states() -> None:
    driver = Driver(make())
    driver.append("s", user("hi"))
    driver.snapshot()
    assert driver.image is not None
    old_lines = []
    for line in driver.image.records:
        decoded = msgspec.json.decode(line)
        if isinstance(decoded, dict) and decoded.get("type") == "session":
            decoded.pop("state")
        old_lines.append(raw(decoded))
    driver.image = Image(old_lines, driver.image.extra, {})
    driver.restart()
    read = driver.send(GetSession(session_id="s"))
    assert read.header.values() == {} and read.header.message_count == 1


class SessionStates(RuleBasedStateMachine):
    """Sessions' states against a dict of dicts, across restarts and snapshots."""

    def __init__(self) -> None:
        super().__init__()
        self.driver = Driver(make())
        self.model: dict[str, dict[str, Any]] = {}

    sessions = st.sampled_from(["a", "b", "c"])
    keys = st.sampled_from(["x", "y", "z"])
    value = st.none() | st.integers(-3, 3) | st.lists(st.booleans(), max_size=2)

    @rule(session=sessions, state=st.dictionaries(keys, value, max_size=2))
    def create(self, session: str, state: dict[str, Any]) -> None:
        made = self.driver.send(CreateSession(session_id=session, state=values(state),
                                              timestamp=self.driver.tick()))
        assert made.created == (session not in self.model)
        self.model.setdefault(session, dict(state))

    @rule(session=sessions, change=st.dictionaries(keys, value, max_size=2), existing=st.booleans())
    def append(self, session: str, change: dict[str, Any], existing: bool) -> None:
        command = AppendItems(session_id=session, items=[item(1)], state=values(change), existing=existing,
                              timestamp=self.driver.tick())
        if existing and session not in self.model:
            with pytest.raises(mnemex.NotFound):
                self.driver.send(command)
            return
        self.driver.send(command)
        self.model.setdefault(session, {}).update(change)

    @rule(session=sessions, change=st.dictionaries(keys, value, max_size=2), remove=st.sets(keys, max_size=2))
    def update(self, session: str, change: dict[str, Any], remove: set[str]) -> None:
        remove -= set(change)
        command = UpdateSessionState(session_id=session, set=values(change), remove=sorted(remove),
                                     timestamp=self.driver.tick())
        if session not in self.model:
            with pytest.raises(mnemex.NotFound):
                self.driver.send(command)
            return
        self.driver.send(command)
        state = self.model[session]
        for key in remove:
            state.pop(key, None)
        state.update(change)

    @rule(session=sessions)
    def delete(self, session: str) -> None:
        self.driver.send(DeleteSession(session_id=session, timestamp=self.driver.tick()))
        self.model.pop(session, None)

    @rule()
    def snapshot(self) -> None:
        self.driver.snapshot()

    @rule()
    def restart(self) -> None:
        self.driver.restart()

    @invariant()
    def states_match_the_model(self) -> None:
        headers = self.driver.send(ListSessionHeaders())
        assert {h.session_id: h.values() for h in headers} == self.model


TestSessionStates = SessionStates.TestCase
TestSessionStates.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


async def test_the_agent_ref_keeps_session_state_on_disk_across_a_restart(tmp_path: Any) -> None:
    config = mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")
    async with mnemex.open_runtime(config) as rt:
        agent = rt.agent("bot")
        made = await agent.create_session("u/1", {"cart": ["book"], "when": None})
        assert made.created and not (await agent.create_session("u/1", {"cart": []})).created
        await agent.append_items("u/1", [{"type": "note", "n": 1}], state={"cart": ["book", "pen"]},
                                 existing=True, timestamp=50.0)
        header = await agent.update_state("u/1", {"paid": True}, remove="when")
        assert header.values() == {"cart": ["book", "pen"], "paid": True} and header.last_entry_at == 50.0
        await agent.create_session("v/1")
        with pytest.raises(mnemex.NotFound):
            await agent.update_state("nobody", {"x": 1})
    async with mnemex.open_runtime(config) as rt:
        agent = rt.agent("bot")
        read = await agent.read_session("u/1", last=1)
        assert read is not None and read.header.values() == {"cart": ["book", "pen"], "paid": True}
        assert [entry.stored().message for entry in read.entries] == [{"type": "note", "n": 1}]
        assert [h.session_id for h in await agent.session_headers("u/")] == ["u/1"]
        assert await agent.read_session("nobody") is None
