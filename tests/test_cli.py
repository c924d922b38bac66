"""`mnemex inspect` and `mnemex replay` on real data directories."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import trio
from checkout import python_env
from waiting import next_millisecond

import mnemex
from mnemex.cli import main
from mnemex.kernel._replay import parse_moment, replay_actor
from mnemex.persistence import actor_dir
from mnemex.testing import Add, counter_kind

KINDS = ["--kinds", "mnemex.testing:counter_kind"]


def write(data_dir: Path, plan: dict[str, list[int]], **config: object) -> None:
    async def run() -> None:
        cfg = mnemex.Config(data_dir=str(data_dir), **config)  # type: ignore[arg-type]
        async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
            for key, numbers in plan.items():
                for n in numbers:
                    await rt.ask("counter", key, Add(n))

    trio.run(run)


def test_inspect_lists_actors_with_counts_and_sizes(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"alice": [1, 2, 3], "../bob": [4]})
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    found = {tuple(a["key"]): a for a in json.loads(capsys.readouterr().out)}
    assert set(found) == {("alice",), ("../bob",)}
    assert found[("alice",)]["records"] == 3 and found[("alice",)]["bytes"] > 0
    assert main(["inspect", str(tmp_path)]) == 0
    assert "2 actors" in capsys.readouterr().out


def test_replay_rebuilds_state_and_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"alice": list(range(20))}, snapshot_every=7)
    assert main(["replay", str(tmp_path), *KINDS, "--verify", "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["records"] == 20 and report["extra"]["total"] == sum(range(20))
    assert report["findings"] == [] and report["error"] is None


def test_replay_until_reconstructs_a_past_state(tmp_path: Path) -> None:
    write(tmp_path, {"alice": [1, 2]})  # shutdown snapshots at seq 2, then at seq 4
    middle = next_millisecond()  # the lines before and after it differ in their stamps
    next_millisecond()
    write(tmp_path, {"alice": [3, 4]})
    path = next(tmp_path.glob("shards/*/counters/*"))
    past = replay_actor(path, counter_kind(), ("alice",), until_ms=parse_moment(str(middle)))
    now = replay_actor(path, counter_kind(), ("alice",))
    assert past.snapshot().extra["total"] == 3  # type: ignore[attr-defined]
    assert now.snapshot().extra["total"] == 10  # type: ignore[attr-defined]


def test_replay_reports_corruption_with_file_and_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"alice": [1, 2, 3, 4]})
    write(tmp_path, {"alice": [5, 6, 7, 8]})
    # the second shutdown snapshot moved seqs 5-8 into an archive segment, kept for history
    [segment] = tmp_path.glob("shards/*/counters/alice/journal-*.jsonl")
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"n":6', b'"n":9')
    segment.write_bytes(b"".join(lines))
    assert main(["replay", str(tmp_path), *KINDS, "--verify"]) == 1
    out = capsys.readouterr().out
    assert segment.name in out and "line 2" in out


def test_replay_of_a_missing_actor_or_dir_is_a_clear_error(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"alice": [1]})
    assert main(["replay", str(tmp_path), *KINDS, "--actor", "nobody"]) == 1
    assert "no actor 'nobody'" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "nope"), *KINDS]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_parse_moment_accepts_iso_and_epoch_seconds() -> None:
    assert parse_moment("1970-01-01T00:00:01Z") == 1000
    assert parse_moment("1.5") == 1500
    with pytest.raises(mnemex.InvalidInput, match="neither an ISO 8601 time nor epoch seconds"):
        parse_moment("yesterday")


# -- damage found by the command itself, run as an operator runs it ---------------------------------------

# A scope snapshotted at seq 3 (with its sidecars) by a clean shutdown, then three more memories
# journaled (lines 1-3 of journal.jsonl, seqs 4-6) by a process that dies without a snapshot.
WRITE_THEN_DIE = """
import os, sys, trio, mnemex
async def main(data_dir):
    config = mnemex.Config(data_dir=data_dir, embedder="hashing")
    async with mnemex.open_runtime(config) as rt:
        for i in range(3):
            await rt.scope(user_id="alice", app_name="chat").remember(f"memory {i} about java")
    async with mnemex.open_runtime(config) as rt:
        for i in range(3):
            await rt.scope(user_id="alice", app_name="chat").remember(f"later memory {i}")
        os._exit(0)
trio.run(main, sys.argv[1])
"""


@pytest.fixture(scope="module")
def crashed_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("crashed")
    done = subprocess.run([sys.executable, "-c", WRITE_THEN_DIE, str(data_dir)], env=python_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    folder = actor_dir(data_dir, "scope", ("chat", "alice"))
    assert len((folder / "journal.jsonl").read_bytes().splitlines()) == 3
    assert (folder / "snapshot-3.vectors2.bin").exists() and (folder / "snapshot-3.records2.bin").exists()
    return data_dir


def mnemex_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mnemex.cli", *args], env=python_env(), capture_output=True,
                          text=True, timeout=120, check=False)


def flip(path: Path, at: int, *, line: int | None = None) -> None:
    """Flip the lowest bit of byte ``at`` of the file, or of its (1-based) ``line``
    (which keeps its newline)."""
    data = bytearray(path.read_bytes())
    start = 0
    if line is not None:
        for _ in range(line - 1):
            start = data.index(b"\n", start) + 1
        assert b"\n" not in data[start : start + at + 1]
    data[start + at] ^= 0x01
    path.write_bytes(bytes(data))


def replace_once(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


def truncate(path: Path, count: int) -> None:
    path.write_bytes(path.read_bytes()[:-count])


class Case(NamedTuple):
    harm: Callable[[Path], None]
    """What is done to the actor folder."""
    status: int
    level: str
    """The first finding: its level, file, line and words of its message."""
    file: str
    line: int | None
    words: str
    records: int | None
    """What replay rebuilds: the memories (every acknowledged one), or None if the actor cannot load."""


CASES = {
    "journal last line flipped": Case(lambda f: flip(f / "journal.jsonl", 200, line=3), 1, "error",
                                      "journal.jsonl", 3, "line 3: damaged (checksum mismatch) although "
                                      "complete (it ends with its newline)", None),
    "journal middle line flipped": Case(lambda f: flip(f / "journal.jsonl", 200, line=2), 1, "error",
                                        "journal.jsonl", 2, "line 2: damaged (checksum mismatch) although "
                                        "complete", None),
    "journal torn tail": Case(lambda f: truncate(f / "journal.jsonl", 50), 0, "note", "journal.jsonl", 3,
                              "line 3: torn tail (no newline at its end)", 5),
    "snapshot line damaged": Case(lambda f: replace_once(f / "snapshot-3.jsonl", b'"m":', b'"m";'), 1,
                                  "error", "snapshot-3.jsonl", 2, "line 2 no longer parses as JSON", None),
    "sidecar damaged": Case(lambda f: flip(f / "snapshot-3.records2.bin", 100), 3, "warning",
                            "snapshot-3.records2.bin", None, "sidecar checksum", 6),
    "sidecar truncated": Case(lambda f: truncate(f / "snapshot-3.bm25.bin", 10), 3, "warning",
                              "snapshot-3.bm25.bin", None, "(truncated)", 6),
    # the vectors are in no line: without them the snapshot is unusable, and no older one is kept
    "required sidecar damaged": Case(lambda f: flip(f / "snapshot-3.vectors2.bin", 100), 1, "error",
                                     "snapshot-3.vectors2.bin", None, "required sidecar checksum", None),
    "required sidecar missing": Case(lambda f: (f / "snapshot-3.vectors2.bin").unlink(), 1, "error",
                                     "snapshot-3.vectors2.bin", None, "required sidecar missing", None),
    "sidecar missing": Case(lambda f: (f / "snapshot-3.bm25.bin").unlink(), 3, "warning",
                            "snapshot-3.bm25.bin", None, "sidecar missing", 6),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_inspect_and_replay_verify_name_each_damage_and_exit_by_the_worst(
        crashed_data_dir: Path, tmp_path: Path, case: Case) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(crashed_data_dir, data_dir)
    folder = actor_dir(data_dir, "scope", ("chat", "alice"))
    case.harm(folder)

    shown = mnemex_cli("inspect", str(data_dir))
    assert shown.returncode == case.status, shown.stdout + shown.stderr
    # each finding is printed on one line: its level, then the message naming the file (and line)
    printed = [text.split(None, 1) for text in shown.stdout.splitlines() if text.startswith("  ")]
    level, message = printed[0]
    assert level == case.level and message.startswith(f"{folder / case.file}: ") and case.words in message
    assert "no damage found" not in shown.stdout

    as_json = mnemex_cli("inspect", str(data_dir), "--json")
    assert as_json.returncode == case.status
    [actor] = json.loads(as_json.stdout)
    assert actor["findings"][0] == {"level": case.level, "file": str(folder / case.file), "line": case.line,
                                    "message": message}
    assert [[finding["level"], finding["message"]] for finding in actor["findings"]] == printed

    verified = mnemex_cli("replay", str(data_dir), "--verify", "--json")
    assert verified.returncode == case.status, verified.stdout + verified.stderr
    [report] = json.loads(verified.stdout)
    assert report["findings"] == actor["findings"]
    # what recovery makes of it: a torn tail is cut and a sidecar rebuilt with every acknowledged
    # write there; a damaged journal line stops the actor, naming the same file and line
    assert report["records"] == case.records
    if case.file == "journal.jsonl" and case.level == "error":
        assert f"CorruptData: {folder / case.file}: line {case.line}: damaged" in report["error"]
    shown_replay = mnemex_cli("replay", str(data_dir), "--verify")
    assert shown_replay.returncode == case.status and message in shown_replay.stdout


def test_a_healthy_data_dir_and_the_exit_statuses_are_documented(crashed_data_dir: Path) -> None:
    shown = mnemex_cli("inspect", str(crashed_data_dir))
    assert shown.returncode == 0, shown.stderr
    assert "no damage found" in shown.stdout and "findings:" not in shown.stdout
    verified = mnemex_cli("replay", str(crashed_data_dir), "--verify")
    assert verified.returncode == 0 and "verified" in verified.stdout
    for command in ([], ["inspect"], ["replay"]):
        usage = mnemex_cli(*command, "--help").stdout
        assert "exit status" in usage and "  3  only snapshot sidecars" in usage, usage


# -- export and import ----------------------------------------------------------------------------------
HASHING = 'embedder = "hashing"\n'


def remember(data_dir: Path, scopes: dict[tuple[str, str], list[str]]) -> None:
    async def run() -> None:
        async with mnemex.open_runtime(mnemex.Config(data_dir=str(data_dir), embedder="hashing")) as rt:
            for (app_name, user_id), contents in scopes.items():
                await rt.scope(user_id=user_id, app_name=app_name).remember_many(
                    [{"content": text, "entities": ["Rex"] if "Rex" in text else []} for text in contents])

    trio.run(run)


def records(data_dir: Path, **config: object) -> dict[tuple[str, str], list[mnemex.MemoryRecord]]:
    async def run() -> dict[tuple[str, str], list[mnemex.MemoryRecord]]:
        cfg = mnemex.Config(data_dir=str(data_dir), embedder="hashing", **config)  # type: ignore[arg-type]
        async with mnemex.open_runtime(cfg) as rt:
            return {(app, user): (await rt.scope(user_id=user, app_name=app).memories(
                limit=None, include_history=True)).memories for app, user in rt.scope_keys()}

    return trio.run(run)


SOURCE = {("chat", "alice"): ["Alice writes Java", "Alice's dog is called Rex"],
          ("chat", "bob"): ["Bob plays the guitar"], ("mail", "alice"): ["Alice lives in Lisbon"]}


def test_export_then_import_moves_every_memory_to_another_data_dir(tmp_path: Path) -> None:
    source, target, export = tmp_path / "source", tmp_path / "target", tmp_path / "export.jsonl"
    remember(source, SOURCE)
    config = tmp_path / "hashing.toml"
    config.write_text(HASHING)
    written = mnemex_cli("export", str(source), "--output", str(export), "--config", str(config))
    assert written.returncode == 0, written.stderr
    assert written.stdout.strip() == (f"exported 4 memories of 3 scopes with their vectors from {source} "
                                      f"to {export}")
    header, *lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert (header["format"], header["scopes"], header["memories"]) == ("mnemex-export/1", 3, 4)
    assert all(line["vector"] and line["dim"] == 384 for line in lines)
    assert not list(tmp_path.glob("*.partial"))

    first = mnemex_cli("import", str(target), str(export), "--config", str(config), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) | {"embedder": ""} == {
        "data_dir": str(target), "scopes": 3, "added": 4, "skipped": 0, "reembedded": 0, "embedder": ""}
    again = mnemex_cli("import", str(target), str(export), "--config", str(config))
    assert again.returncode == 0, again.stderr
    assert f"imported into {target}: 3 scopes, 0 memories added, 4 skipped (there already), 0 re-embedded" \
        in again.stdout
    assert records(target) == records(source)


def test_export_to_stdout_without_vectors_pipes_into_an_import_that_embeds_again(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    remember(source, SOURCE)
    config = tmp_path / "hashing64.toml"
    config.write_text(HASHING + "embedder_dim = 64\n")
    written = mnemex_cli("export", str(source), "--scope", "chat/alice", "--scope", "mail/alice", "--no-vectors",
                         "--config", str(config))
    assert written.returncode == 0, written.stderr
    assert "exported 3 memories of 2 scopes without vectors" in written.stderr
    assert all(json.loads(line).get("vector") is None for line in written.stdout.splitlines())
    read = subprocess.run([sys.executable, "-m", "mnemex.cli", "import", str(target), "-", "--config", str(config),
                           "--json"], input=written.stdout, env=python_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["reembedded"] == 3
    moved = records(target, embedder_dim=64)
    assert sorted(moved) == [("chat", "alice"), ("mail", "alice")]
    assert moved[("chat", "alice")] == records(source)[("chat", "alice")]


def test_export_refuses_a_data_dir_a_runtime_holds(tmp_path: Path) -> None:
    from mnemex.persistence.datadir import DataDir

    remember(tmp_path, SOURCE)
    held = DataDir(tmp_path)
    try:
        refused = mnemex_cli("export", str(tmp_path))
        written = mnemex_cli("import", str(tmp_path), "-")
    finally:
        held.close()
    for run in (refused, written):
        assert run.returncode == 1 and run.stdout == ""
        assert f"DataDirLocked: data directory {tmp_path} is in use by process" in run.stderr


def test_export_and_import_usage_and_failures_exit_as_documented(tmp_path: Path) -> None:
    remember(tmp_path / "source", SOURCE)
    config = tmp_path / "hashing.toml"
    config.write_text(HASHING)
    assert mnemex_cli("export").returncode == 2
    assert mnemex_cli("import", str(tmp_path)).returncode == 2
    bad_scope = mnemex_cli("export", str(tmp_path / "source"), "--scope", "chat")
    assert bad_scope.returncode == 2 and "is not APP/USER" in bad_scope.stderr
    unknown = mnemex_cli("export", str(tmp_path / "source"), "--scope", "chat/carol", "--config", str(config))
    assert unknown.returncode == 1 and "no scope chat/carol" in unknown.stderr and "chat/alice" in unknown.stderr
    missing = mnemex_cli("export", str(tmp_path / "nope"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr and not (tmp_path / "nope").exists()

    export = tmp_path / "export.jsonl"
    assert mnemex_cli("export", str(tmp_path / "source"), "-o", str(export), "--config", str(config)).returncode == 0
    lines = export.read_text().splitlines()
    broken = json.loads(lines[3])
    broken["memory"]["categories"] = "not a list"
    export.write_text("\n".join([*lines[:3], json.dumps(broken), *lines[4:]]) + "\n")
    failed = mnemex_cli("import", str(tmp_path / "target"), str(export), "--config", str(config))
    assert failed.returncode == 1 and failed.stdout == ""
    assert "InvalidInput: line 4: not a memory of an export" in failed.stderr
    assert records(tmp_path / "target") == {}
    absent = mnemex_cli("import", str(tmp_path / "target"), str(tmp_path / "absent.jsonl"))
    assert absent.returncode == 1 and "cannot read the export" in absent.stderr
