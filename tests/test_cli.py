"""`mnemex inspect` and `mnemex replay` on real data directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from waiting import next_millisecond

import mnemex
from mnemex.cli import main
from mnemex.kernel._replay import parse_moment, replay_actor
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


def test_inspect_lists_actors_with_counts_and_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    path = next(tmp_path.glob("counters/*"))
    past = replay_actor(path, counter_kind(), ("alice",), until_ms=parse_moment(str(middle)))
    now = replay_actor(path, counter_kind(), ("alice",))
    assert past.snapshot().extra["total"] == 3  # type: ignore[attr-defined]
    assert now.snapshot().extra["total"] == 10  # type: ignore[attr-defined]


def test_replay_reports_corruption_with_file_and_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"alice": [1, 2, 3, 4]})
    write(tmp_path, {"alice": [5, 6, 7, 8]})
    # the second shutdown snapshot moved seqs 5-8 into an archive segment, kept for history
    [segment] = tmp_path.glob("counters/alice/journal-*.jsonl")
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
