"""Every code example in the README runs as written, and every ``mnemex`` command
line it shows names a real subcommand and real flags."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
READMES = [ROOT / "README.md", ROOT / "bench" / "README.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[tuple[str, int, str]]:
    found = []
    for readme in READMES:
        text = readme.read_text()
        for match in FENCE.finditer(text):
            if match.group(1) == language:
                line = text.count("\n", 0, match.start()) + 1
                found.append((readme.name, line, match.group(2)))
    return found


PYTHON = blocks("python")


def test_the_readme_has_python_examples() -> None:
    assert len(PYTHON) >= 3


@pytest.mark.parametrize(("readme", "line", "code"), PYTHON, ids=[f"{r}:{n}" for r, n, _ in PYTHON])
def test_every_python_example_runs_as_written(tmp_path: Path, readme: str, line: int, code: str) -> None:
    # a fresh working directory: the examples' mnemex-data lands there; the hashing embedder keeps it quick
    # this checkout's mnemex first on the path (an editable install may point at another worktree)
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, check=False,
                         env={"PATH": "/usr/bin:/bin", "MNEMEX_TEST_README": "1", "HOME": str(tmp_path),
                              "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, f"{readme}:{line}: {code.splitlines()[0]!r} failed:\n{run.stderr[-3000:]}"


def command_lines() -> list[tuple[str, int, list[str]]]:
    found = []
    for readme, line, code in blocks("bash"):
        for offset, text in enumerate(code.splitlines()):
            for part in re.split(r"&&|;", text.split("#", 1)[0]):
                if part.strip().startswith("mnemex "):
                    found.append((readme, line + offset + 1, shlex.split(part.strip())))
    return found


COMMANDS = command_lines()


@pytest.mark.parametrize(("readme", "line", "words"), COMMANDS, ids=[f"{r}:{n}" for r, n, _ in COMMANDS])
def test_every_mnemex_command_in_the_readme_names_real_flags(readme: str, line: int, words: list[str]) -> None:
    from mnemex.cli import main

    assert len(words) > 1, f"{readme}:{line}: a bare `mnemex` runs nothing"
    command = words[1]
    run = subprocess.run([sys.executable, "-m", "mnemex.cli", command, "--help"], capture_output=True,
                         text=True, timeout=60, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, f"{readme}:{line}: `mnemex {command}` is not a subcommand: {run.stderr}"
    for word in words[2:]:
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            assert flag in run.stdout, f"{readme}:{line}: `mnemex {command}` has no flag {flag}"
    assert callable(main)
