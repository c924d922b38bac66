"""Thousands of users in a process that may open 256 files: no write fails with
EMFILE, the shutdown snapshots every actor, and a restart finds every write."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkout import python_env

SCRIPT = Path(__file__).with_name("many_users.py")


def run(data_dir: Path, phase: str, scopes: int, agents: int, method: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(data_dir), phase, str(scopes), str(agents), method],
        capture_output=True, text=True, timeout=300, env=python_env(), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Too many open files" not in done.stderr and "EMFILE" not in done.stderr, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.slow
@pytest.mark.parametrize("method", ["auto", "fdatasync"])
def test_two_thousand_users_under_a_256_file_limit_lose_no_write(tmp_path: Path, method: str) -> None:
    scopes, agents = 1500, 500
    wrote = run(tmp_path, "write", scopes, agents, method)
    assert wrote["error_count"] == 0, wrote["errors"]
    assert wrote["max_open_files"] == 128  # half the limit
    assert 0 < wrote["most_journals_open"] <= wrote["max_open_files"]
    # every actor was closed by the shutdown, each with its final snapshot
    assert (wrote["closed"], wrote["snapshots"], wrote["ok"]) == (2000, 2000, True)

    read = run(tmp_path, "read", scopes, agents, method)
    assert read["error_count"] == 0, read["errors"]
    assert read["missing_count"] == 0, read["missing"]
    assert read["closed"] == 2000 and read["ok"]
