"""inspect_actor, verify_actor and read_history: read-only looks at an actor folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemex.errors import InvalidInput
from mnemex.persistence import FileStore, Level, inspect_actor, read_history, verify_actor

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
    assert info.findings == []
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
    [finding] = info.findings
    assert (finding.level, finding.path, finding.line) == (Level.NOTE, journal, 5)
    assert "line 5: torn tail (no newline at its end)" in finding.message
    assert verify_actor(store.path) == info.findings
    assert replayed(tmp_path, None) == (30, [31, 32, 33, 34])
    assert journal.read_bytes() == torn  # nothing here writes


def damage(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


def cut(path: Path, count: int) -> None:
    path.write_bytes(path.read_bytes()[:-count])


ERROR, WARNING = Level.ERROR, Level.WARNING
HARMS = {
    "snapshot body": (lambda p: damage(p / "snapshot-30.jsonl", b'{"r":7}', b'{"r":8}'),
                      [(ERROR, "snapshot-30.jsonl", None, "body checksum")]),
    "snapshot line": (lambda p: damage(p / "snapshot-30.jsonl", b'{"r":7}', b'{"r"7}'),
                      [(ERROR, "snapshot-30.jsonl", 8, "line 8 no longer parses as JSON")]),
    "snapshot count": (lambda p: damage(p / "snapshot-20.jsonl", b'"count":20', b'"count":21'),
                       [(ERROR, "snapshot-20.jsonl", 1, "the header line (line 1) is what changed")]),
    "snapshot cut": (lambda p: cut(p / "snapshot-30.jsonl", 3),
                     [(ERROR, "snapshot-30.jsonl", 31, "line 31 is cut short")]),
    "journal line": (lambda p: damage(p / "journal.jsonl", b'{"n":32}', b'{"n":99}'),
                     [(ERROR, "journal.jsonl", 2, "journal.jsonl: line 2: damaged (checksum mismatch)")]),
    "journal gap": (lambda p: damage(p / "journal.jsonl", b"\n", b"\n\n"),
                    [(ERROR, "journal.jsonl", 2, "line 2: damaged (unwritten space (a torn write)) "
                                                 "but valid lines (line 3, seq 32) follow it")]),
    "archive seq": (lambda p: damage(p / "journal-21-30.jsonl", b'"seq":25', b'"seq":52'),
                    [(ERROR, "journal-21-30.jsonl", 5, "journal-21-30.jsonl: line 5: damaged (checksum"),
                     (ERROR, "chat.alice", None, "commands 25 to 30 are missing")]),
    "archive cut": (lambda p: cut(p / "journal-21-30.jsonl", 3),
                    [(ERROR, "journal-21-30.jsonl", 10, "an archive segment is written whole"),
                     (ERROR, "journal-21-30.jsonl", None, "holds seqs 21 to 29, not what its name says"),
                     (ERROR, "chat.alice", None, "command 30 is missing")]),
    "archive gone": (lambda p: (p / "journal-21-30.jsonl").unlink(),
                     [(ERROR, "chat.alice", None, "commands 21 to 30 are missing")]),
    "sidecar": (lambda p: (p / "snapshot-30.index.bin").write_bytes(b"bolb"),
                [(WARNING, "snapshot-30.index.bin", None, "sidecar checksum")]),
    "sidecar cut": (lambda p: cut(p / "snapshot-20.index.bin", 1),
                    [(WARNING, "snapshot-20.index.bin", None, "is 3 bytes; the header says 4 (truncated)")]),
    "sidecar gone": (lambda p: (p / "snapshot-30.index.bin").unlink(),
                     [(WARNING, "snapshot-30.index.bin", None, "sidecar missing")]),
    "manifest gone": (lambda p: (p / "key.json").unlink(), [(ERROR, "key.json", None, "key.json: missing")]),
}


@pytest.mark.parametrize(("harm", "expected"), HARMS.values(), ids=HARMS.keys())
def test_verify_finds_each_kind_of_damage(tmp_path: Path, harm: object,
                                          expected: list[tuple[Level, str, int | None, str]]) -> None:
    store = build(tmp_path, sidecars=True)
    assert verify_actor(store.path) == []
    harm(store.path)  # type: ignore[operator]
    findings = verify_actor(store.path)
    assert [(f.level, f.path.name, f.line) for f in findings] == [e[:3] for e in expected], findings
    for finding, (*_, fragment) in zip(findings, expected, strict=True):
        assert fragment in finding.message and str(finding.path) in finding.message


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
