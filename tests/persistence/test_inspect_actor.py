"""inspect_actor, verify_actor and read_history: read-only looks at an actor folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemex.errors import InvalidInput
from mnemex.persistence import FileStore, inspect_actor, read_history, verify_actor

KEY = ("chat", "alice")
T0 = 1_700_000_000_000


def ts(seq: int) -> int:
    return T0 + seq * 10


def build(tmp_path: Path, *, snapshots: tuple[int, ...] = (10, 20, 30), last: int = 35,
          sidecars: bool = False) -> FileStore:
    """An actor with commands 1..last, snapshotted at ``snapshots`` (keep=2)."""
    store = FileStore(tmp_path, "counter", KEY, keep=2)
    appended = 0
    for point in (*snapshots, last):
        store.append([(seq, ts(seq), b'{"n":%d}' % seq) for seq in range(appended + 1, point + 1)])
        appended = point
        if point in snapshots:
            store.write_snapshot(point, ts(point), [b'{"r":%d}' % n for n in range(1, point + 1)],
                                 created=T0 + 10**6, extra={"n": point},
                                 sidecars={"index": b"blob"} if sidecars else None)
    store.close()
    return store


def replayed(tmp_path: Path, until_ms: int | None) -> tuple[int | None, list[int]]:
    history = read_history(build_path(tmp_path), until_ms=until_ms)
    return (history.header.seq if history.header else None), [entry.seq for entry in history.journal]


def build_path(tmp_path: Path) -> Path:
    return FileStore(tmp_path, "counter", KEY).path


def test_inspect_summarises_a_healthy_actor(tmp_path: Path) -> None:
    store = build(tmp_path)
    info = inspect_actor(store.path)
    assert (info.kind, info.key, info.path) == ("counter", KEY, store.path)
    assert info.snapshots == [20, 30]
    assert (info.snapshot_seq, info.snapshot_count, info.snapshot_created, info.snapshot_ts) == (
        30, 30, T0 + 10**6, ts(30))
    assert (info.journal_first, info.journal_last, info.journal_lines) == (31, 35, 5)
    assert info.journal_problem is None
    assert info.archives == [(21, 30)]
    assert info.total_bytes == store.disk_bytes() > 0
    assert verify_actor(store.path) == []


def test_inspect_reports_a_torn_tail_without_cutting_it(tmp_path: Path) -> None:
    store = build(tmp_path)
    journal = store.path / "journal.jsonl"
    torn = journal.read_bytes()[:-4]
    journal.write_bytes(torn)
    info = inspect_actor(store.path)
    assert info.journal_last == 34
    assert info.journal_problem is not None and "torn tail from line 5" in info.journal_problem
    problems = verify_actor(store.path)
    assert len(problems) == 1 and "line 5: torn last line" in problems[0]
    assert replayed(tmp_path, None) == (30, [31, 32, 33, 34])
    assert journal.read_bytes() == torn  # nothing here writes


def damage(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


HARMS = {
    "snapshot body": (lambda p: damage(p / "snapshot-30.jsonl", b'{"r":7}', b'{"r":8}'),
                      ["snapshot-30.jsonl: body checksum"]),
    "snapshot count": (lambda p: damage(p / "snapshot-20.jsonl", b'"count":20', b'"count":21'),
                       ["snapshot-20.jsonl: body has"]),
    "journal line": (lambda p: damage(p / "journal.jsonl", b'{"n":32}', b'{"n":99}'),
                     ["journal.jsonl: line 2: checksum"]),
    "archive seq": (lambda p: damage(p / "journal-21-30.jsonl", b'"seq":25', b'"seq":52'),
                    ["journal-21-30.jsonl: line 5: checksum mismatch", "commands 25 to 30 are missing"]),
    "archive gone": (lambda p: (p / "journal-21-30.jsonl").unlink(), ["commands 21 to 30 are missing"]),
    "sidecar": (lambda p: (p / "snapshot-30.index.bin").write_bytes(b"bolb"),
                ["snapshot-30.index.bin: missing or damaged"]),
    "manifest gone": (lambda p: (p / "key.json").unlink(), ["key.json: missing"]),
}


@pytest.mark.parametrize(("harm", "expected"), HARMS.values(), ids=HARMS.keys())
def test_verify_finds_each_kind_of_damage(tmp_path: Path, harm: object, expected: list[str]) -> None:
    store = build(tmp_path, sidecars=True)
    assert verify_actor(store.path) == []
    harm(store.path)  # type: ignore[operator]
    problems = verify_actor(store.path)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected, strict=True):
        assert fragment in problem


@pytest.mark.parametrize(("until", "expected"), [
    (None, (30, [31, 32, 33, 34, 35])),
    (ts(35) + 5, (30, [31, 32, 33, 34, 35])),
    (ts(33), (30, [31, 32, 33])),
    (ts(30), (30, [])),
    (ts(30) - 1, (20, [21, 22, 23, 24, 25, 26, 27, 28, 29])),
    (ts(25), (20, [21, 22, 23, 24, 25])),
    (ts(20), (20, [])),
])
def test_read_history_replays_up_to_a_point_in_time(
        tmp_path: Path, until: int | None, expected: tuple[int, list[int]]) -> None:
    build(tmp_path)
    assert replayed(tmp_path, until) == expected


def test_read_history_says_how_far_back_it_can_go(tmp_path: Path) -> None:
    build(tmp_path)
    with pytest.raises(InvalidInput, match=rf"oldest point kept is {ts(20)} ms \(.*\), snapshot 20"):
        read_history(build_path(tmp_path), until_ms=ts(20) - 1)


def test_read_history_falls_back_when_a_snapshot_is_damaged(tmp_path: Path) -> None:
    store = build(tmp_path)
    damage(store.path / "snapshot-30.jsonl", b'{"r":7}', b'{"r":8}')
    history = read_history(store.path, until_ms=ts(33))
    assert history.header is not None and history.header.seq == 20
    assert [entry.seq for entry in history.journal] == list(range(21, 34))


def test_history_without_snapshots_starts_empty(tmp_path: Path) -> None:
    build(tmp_path, snapshots=(), last=5)
    assert replayed(tmp_path, ts(1) - 1) == (None, [])
    assert replayed(tmp_path, ts(3)) == (None, [1, 2, 3])


@pytest.mark.parametrize("call", [inspect_actor, verify_actor, read_history])
def test_a_missing_folder_is_invalid_input(tmp_path: Path, call: object) -> None:
    with pytest.raises(InvalidInput, match="not an actor folder"):
        call(tmp_path / "nope")  # type: ignore[operator]


def test_read_history_rejects_a_bad_time(tmp_path: Path) -> None:
    store = build(tmp_path, snapshots=(), last=1)
    with pytest.raises(InvalidInput, match="until_ms"):
        read_history(store.path, until_ms=-5)
