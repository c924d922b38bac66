"""Request ids (``mnemex.ray.requests``): a write retried with its id is applied
once, and the table of applied ids survives the journal, snapshots and restarts.
Sans-io against the kind, then through a real runtime on real files. No Ray."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.conversations.protocol import Appended, AppendMessages, GetHistory
from mnemex.kernel._turn import take_turn
from mnemex.lowlevel import ActorKind, Forward, Image, Job, JobResult, SnapshotData, Step, agent_kind
from mnemex.memories.protocol import NewMemory, Remember, Remembered
from mnemex.ray.requests import Deduplicating, Repeated, Requested, deduplicating, request_kinds

KEY = ("bot",)


def _append(text: str) -> AppendMessages:
    message = msgspec.json.encode({"role": "user", "content": text})
    return AppendMessages(session_id="s1", messages=[msgspec.Raw(message)], timestamp=1_700_000_000.0)


def _history(behaviour: Any) -> list[str]:
    entries = behaviour.handle(GetHistory(session_id="s1", now=1_700_000_001.0))
    return [msgspec.json.decode(entry.message)["content"] for entry in entries]


def _reply(out: Any) -> Any:
    return out.reply if type(out).__name__ == "Step" else out


def _journal(kind: Any, commands: list[Any]) -> list[Any]:
    """What replay reads back: each command through the kind's codec."""
    return [kind.decode(kind.encode(command)) for command in commands]


def test_a_repeated_request_id_is_answered_with_the_first_reply_and_applied_once() -> None:
    kind = deduplicating(agent_kind(), limit=8)
    behaviour = kind.create(KEY)
    first = _reply(behaviour.handle(Requested("r1", _append("hello"))))
    again = behaviour.handle(Requested("r1", _append("hello")))
    assert isinstance(first, Appended) and first.message_count == 1
    assert type(again).__name__ == "Step" and again.unchanged  # nothing journaled for the repeat
    assert isinstance(again.reply, Repeated)
    assert msgspec.json.decode(again.reply.reply, type=Appended) == first
    behaviour.handle(Requested("r2", _append("world")))
    assert _history(behaviour) == ["hello", "world"]


def test_the_journal_line_carries_the_id_and_plain_lines_read_as_before() -> None:
    plain, kind = agent_kind(), deduplicating(agent_kind())
    line = kind.encode(Requested("r1", _append("hello")))
    assert line.startswith(b'{"type":"mnemex.request","id":"r1","cmd":{')
    assert kind.decode(line) == Requested("r1", _append("hello"))
    old = plain.encode(_append("old"))  # a line of a runtime without request ids
    assert kind.decode(old) == _append("old")
    assert kind.is_journaled(Requested("r1", _append("x"))) and not kind.is_journaled(
        Requested("r1", GetHistory(session_id="s1")))


def test_replaying_the_journal_rebuilds_the_table_and_skips_a_line_written_ahead_of_a_repeat() -> None:
    kind = deduplicating(agent_kind(), limit=8)
    # r1 twice: the repeat's line was written ahead, then the process was killed before
    # the handler cut it; replay must not apply it again
    journal = _journal(kind, [_append("old"), Requested("r1", _append("a")), Requested("r1", _append("a")),
                              Requested("r2", _append("b"))])
    behaviour = kind.create(KEY)
    kind.replay(behaviour, journal)
    assert _history(behaviour) == ["old", "a", "b"]
    repeat = behaviour.handle(Requested("r1", _append("a")))
    assert isinstance(repeat.reply, Repeated)
    assert msgspec.json.decode(repeat.reply.reply, type=Appended).first_sequence == 2


def test_replay_keeps_only_the_last_ids_and_never_applies_an_older_repeat_twice() -> None:
    kind = deduplicating(agent_kind(), limit=2)
    commands = [Requested(f"r{i}", _append(f"m{i}")) for i in range(5)]
    journal = _journal(kind, [*commands[:3], commands[1], *commands[3:]])  # r1 repeated early
    behaviour = kind.create(KEY)
    kind.replay(behaviour, journal)
    assert _history(behaviour) == [f"m{i}" for i in range(5)]
    assert isinstance(behaviour, Deduplicating) and list(behaviour.recent) == ["r3", "r4"]


def test_a_repeat_written_ahead_in_the_tail_of_an_original_in_the_head_is_not_applied() -> None:
    kind = deduplicating(agent_kind(), limit=3)
    # r0 applied early (replayed in the batched head), its repeat's line written ahead
    # while the table held r0, and left by a kill, among the last requests: replay must
    # not apply it again
    commands = [Requested(f"r{i}", _append(f"m{i}")) for i in range(4)]
    journal = _journal(kind, [commands[0], commands[1], commands[0], *commands[2:]])
    behaviour = kind.create(KEY)
    kind.replay(behaviour, journal)
    assert _history(behaviour) == [f"m{i}" for i in range(4)]
    assert isinstance(behaviour, Deduplicating) and list(behaviour.recent) == ["r1", "r2", "r3"]


def test_a_retry_older_than_the_table_replays_as_it_was_applied_live() -> None:
    kind = deduplicating(agent_kind(), limit=2)
    # r0 came again once the table no longer held it: live applied it again (its line
    # kept), and so must replay, or the replayed actor would differ from the live one
    commands = [Requested(f"r{i}", _append(f"m{i}")) for i in range(3)]
    live = kind.create(KEY)
    journal = []
    for command in [*commands, commands[0]]:
        live.handle(command)
        journal.append(command)
    replayed = kind.create(KEY)
    kind.replay(replayed, _journal(kind, journal))
    assert _history(replayed) == _history(live) == ["m0", "m1", "m2", "m0"]
    assert isinstance(replayed, Deduplicating) and isinstance(live, Deduplicating)
    assert list(replayed.recent.items()) == list(live.recent.items())


def test_the_table_survives_a_snapshot() -> None:
    kind = deduplicating(agent_kind(), limit=8)
    behaviour = kind.create(KEY)
    first = _reply(behaviour.handle(Requested("r1", _append("hello"))))
    data = behaviour.snapshot()
    records = list(data.records() if callable(data.records) else data.records)
    sidecars = data.sidecars() if callable(data.sidecars) else (data.sidecars or {})
    restored = kind.restore(KEY, Image(records, dict(data.extra), dict(sidecars)))  # type: ignore[arg-type]
    assert _history(restored) == ["hello"]
    repeat = restored.handle(Requested("r1", _append("hello")))
    assert msgspec.json.decode(repeat.reply.reply, type=Appended) == first


def test_an_invalid_request_id_is_refused_before_anything_is_written() -> None:
    kind = deduplicating(agent_kind())
    with pytest.raises(mnemex.InvalidInput, match="request id"):
        kind.encode(Requested("", _append("x")))
    with pytest.raises(mnemex.InvalidInput, match="request id"):
        kind.encode(Requested("é" * 3, _append("x")))


async def test_a_runtime_answers_a_repeat_after_a_restart_on_real_files(tmp_path: Path) -> None:
    config = mnemex.Config(data_dir=str(tmp_path))
    memory = NewMemory(id="01HZZZZZZZZZZZZZZZZZZZZZZZ", content="User writes Java")
    remember = Remember(memories=[memory], now=time.time())
    async with mnemex.open_runtime(config, kinds=request_kinds(config)) as rt:
        first = await rt.kernel.ask("scope", ("chat", "alice"), Requested("w1", remember))
        await rt.kernel.ask("agent", KEY, Requested("a1", _append("hello")))
    async with mnemex.open_runtime(config, kinds=request_kinds(config)) as rt:
        again = await rt.kernel.ask("scope", ("chat", "alice"), Requested("w1", remember))
        assert isinstance(first, Remembered) and isinstance(again, Repeated)
        assert msgspec.json.decode(again.reply, type=Remembered) == first
        assert await rt.scope(user_id="alice", app_name="chat").count() == 1
        repeat = await rt.kernel.ask("agent", KEY, Requested("a1", _append("hello")))
        assert isinstance(repeat, Repeated)
        assert [m.message["content"] for m in await rt.agent("bot").history("s1")] == ["hello"]


async def test_a_scope_snapshotted_as_it_closes_keeps_the_table(tmp_path: Path) -> None:
    # a scope's closing snapshot is its final_snapshot (its indexes lent): the wrapper's
    # own, which adds the table, not the scope's it forwards attributes to
    config = mnemex.Config(data_dir=str(tmp_path), snapshot_min_growth=0.0)  # (a snapshot at every close)
    memory = NewMemory(id="01HZZZZZZZZZZZZZZZZZZZZZZZ", content="User writes Java")
    remember = Remember(memories=[memory], now=time.time())
    async with mnemex.open_runtime(config, kinds=request_kinds(config)) as rt:
        first = await rt.kernel.ask("scope", ("chat", "alice"), Requested("w1", remember))
        await rt.passivate("scope", ("chat", "alice"))  # the journal cut at the snapshot
    async with mnemex.open_runtime(config, kinds=request_kinds(config)) as rt:
        again = await rt.kernel.ask("scope", ("chat", "alice"), Requested("w1", remember))
        assert isinstance(first, Remembered) and isinstance(again, Repeated)
        assert await rt.scope(user_id="alice", app_name="chat").count() == 1


def test_importing_mnemex_ray_does_not_need_ray() -> None:
    import subprocess
    import sys

    code = "import sys, mnemex.ray; assert 'ray' not in sys.modules, 'mnemex.ray imported ray'"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[2])}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=False,
                         env=env)
    assert run.returncode == 0, run.stderr[-2000:]


# -- the table after replay is the live one ---------------------------------------------------------
class _Add(msgspec.Struct, frozen=True, tag="ledger.add"):
    n: int


class _AddForwarded(msgspec.Struct, frozen=True, tag="ledger.add_forwarded"):
    """Applied here, answered by the actor it is forwarded to."""

    n: int


class _AddByJob(msgspec.Struct, frozen=True, tag="ledger.add_by_job"):
    """Applied here, answered by a job."""

    n: int


class _AddNothing(msgspec.Struct, frozen=True, tag="ledger.add_nothing"):
    """A write that changes nothing (its line is cut)."""


class _Total(msgspec.Struct, frozen=True, tag="ledger.total"):
    """A read."""


_Ledger = _Add | _AddForwarded | _AddByJob | _AddNothing | _Total


class _LedgerBehaviour:
    def __init__(self, total: int = 0) -> None:
        self.total = total

    def handle(self, command: Any) -> Any:
        match command:
            case _Add(n=n):
                self.total += n
                return self.total
            case _AddForwarded(n=n):
                self.total += n
                return Step(None, (Forward("ledger", ("other",), _Total()),))
            case _AddByJob(n=n):
                self.total += n
                return Step(None, (Job(lambda: n, lambda result: _Add(0), answers=True),))
            case _AddNothing():
                return Step(None, unchanged=True)
            case _Total():
                return self.total
            case _:
                raise TypeError(f"not a ledger command: {command!r}")

    def snapshot(self) -> SnapshotData:
        return SnapshotData([msgspec.json.encode(self.total)])


_decode_ledger = msgspec.json.Decoder(_Ledger).decode


def _ledger_kind(limit: int) -> Any:
    return deduplicating(ActorKind(
        name="ledger", create=lambda key: _LedgerBehaviour(),
        restore=lambda key, image: _LedgerBehaviour(msgspec.json.decode(image.records[0])),
        encode=msgspec.json.encode, decode=_decode_ledger,
        is_journaled=lambda command: not isinstance(command, _Total)), limit)


def _run_live_then_replay(limit: int, commands: list[Any]) -> tuple[Any, Any]:
    """Each command through the live actor as the kernel takes a turn (its line kept
    when journaled and accepted, a job's delivered command journaled after it), then
    the journal replayed into a fresh actor."""
    kind = _ledger_kind(limit)
    live = kind.create(("me",))
    journal: list[bytes] = []
    for command in commands:
        turn = take_turn(kind, live, command)
        if turn.payload is not None:
            journal.append(turn.payload)
        for effect in turn.effects:
            if type(effect) is Job:
                delivered = take_turn(kind, live, effect.deliver(JobResult(effect.work())))
                assert delivered.payload is not None
                journal.append(delivered.payload)
    replayed = kind.create(("me",))
    kind.replay(replayed, [kind.decode(line) for line in journal])
    return live, replayed


def _assert_same(live: Any, replayed: Any) -> None:
    assert list(replayed.recent.items()) == list(live.recent.items())
    assert replayed.inner.total == live.inner.total


def test_the_replayed_table_equals_the_live_one_with_effect_answered_requests_among_more_than_the_limit() \
        -> None:
    # 600 requests since the last snapshot, every third answered by a Forward or a job,
    # reads and writes that change nothing among them
    makers = [_Add, _AddForwarded, _Add, _AddByJob, _Add, _AddForwarded]
    commands: list[Any] = []
    for i in range(600):
        commands.append(Requested(f"w{i}", makers[i % len(makers)](i)))
        if i % 7 == 0:
            commands.append(Requested(f"r{i}", _Total()))
            commands.append(Requested(f"n{i}", _AddNothing()))
    live, replayed = _run_live_then_replay(256, commands)
    assert len(live.recent) == 256
    _assert_same(live, replayed)
    # a retry of a write answered by a forward is refused, not applied again
    with pytest.raises(mnemex.MnemexError, match="applied already"):
        replayed.handle(Requested("w595", _AddForwarded(595)))
    assert isinstance(replayed.handle(Requested("w596", _Add(596))).reply, Repeated)


_OPS = st.sampled_from([_Add, _AddForwarded, _AddByJob, _AddNothing, _Total])


@settings(max_examples=40, deadline=None)
@given(limit=st.integers(1, 12),
       steps=st.lists(st.tuples(_OPS, st.integers(0, 40), st.booleans()), min_size=1, max_size=120))
def test_replay_rebuilds_the_live_table_whatever_the_requests_and_retries(
        limit: int, steps: list[tuple[Any, int, bool]]) -> None:
    commands: list[Any] = []
    sent: list[Requested] = []
    for op, pick, retry in steps:
        if retry and sent:  # a retry of an earlier request, the same command with its id
            commands.append(sent[pick % len(sent)])
            continue
        command = Requested(f"q{len(sent)}", op() if op in (_AddNothing, _Total) else op(pick))
        sent.append(command)
        commands.append(command)
    live = _ledger_kind(limit).create(("me",))
    kept: list[Any] = []
    for command in commands:  # what the live actor refuses (a retry of a forwarded write) never arrives
        try:
            live.handle(command)
        except mnemex.MnemexError:
            continue
        kept.append(command)
    live, replayed = _run_live_then_replay(limit, kept)
    _assert_same(live, replayed)


def test_a_read_sent_with_a_request_id_is_handled_as_a_read_and_records_nothing() -> None:
    kind = deduplicating(agent_kind(), limit=8)
    behaviour = kind.create(KEY)
    behaviour.handle(Requested("w1", _append("hello")))
    read = GetHistory(session_id="s1", now=1_700_000_001.0)
    for _ in range(2):  # the same id twice: a read is answered afresh each time
        entries = _reply(behaviour.handle(Requested("r1", read)))
        assert [msgspec.json.decode(entry.message)["content"] for entry in entries] == ["hello"]
    assert isinstance(behaviour, Deduplicating) and list(behaviour.recent) == ["w1"]
    assert kind.encode(Requested("w1", _append("x"))) and not kind.is_journaled(Requested("r1", read))
