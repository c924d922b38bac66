"""Every benchmark goes through bench/_common.py for what the scripts share: it
imports from it and never defines one of its helpers again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "_common.py")


def shared_helpers() -> set[str]:
    tree = ast.parse((BENCH / "_common.py").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)
            and not node.name.startswith("_")}


def problems(source: str, shared: set[str]) -> list[str]:
    tree = ast.parse(source)
    found = []
    if not any(isinstance(node, ast.ImportFrom) and node.module == "_common" for node in ast.walk(tree)):
        found.append("does not import from _common")
    found += [f"defines {node.name} again" for node in tree.body
              if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in shared]
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_a_bench_script_uses_the_shared_helpers(script: Path) -> None:
    assert problems(script.read_text(), shared_helpers()) == []


def test_the_check_finds_a_copied_helper_and_a_missing_import() -> None:
    shared = shared_helpers()
    assert {"percentile", "rss_bytes", "write_results", "machine"} <= shared
    copied = "import json\n\ndef percentile(values, q):\n    return sorted(values)[0]\n"
    assert problems(copied, shared) == ["does not import from _common", "defines percentile again"]
