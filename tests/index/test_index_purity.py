"""mnemex.index is plain synchronous deterministic code: no clocks, no random
sources, no I/O, no salted hash(), nothing of the runtime."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mnemex.index

SOURCES = sorted(Path(mnemex.index.__file__).parent.glob("*.py"))
BANNED_MODULES = {"time", "random", "uuid", "datetime", "secrets", "os", "threading", "asyncio", "trio",
                  "socket", "subprocess", "pickle", "mnemex.kernel", "mnemex.runtime",
                  "mnemex.conversations", "mnemex.memories", "mnemex.models", "mnemex.persistence",
                  "mnemex.server"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_index_module_imports_nothing_impure(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            assert not any(name == b or name.startswith(b + ".") for b in BANNED_MODULES), (path.name, name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"hash", "open", "print"}, (path.name, node.func.id, node.lineno)


def test_every_public_name_is_exported() -> None:
    for name in mnemex.index.__all__:
        assert getattr(mnemex.index, name) is not None
