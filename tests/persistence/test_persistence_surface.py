"""The persistence package's public names, and what it must never import."""

from __future__ import annotations

import ast
from pathlib import Path

import mnemex.persistence

FORBIDDEN = ("trio", "mnemex.kernel", "mnemex.runtime", "mnemex.conversations", "mnemex.memories",
             "mnemex.models", "mnemex.server", "mnemex.index")


def test_public_names_are_pinned() -> None:
    assert sorted(mnemex.persistence.__all__) == sorted([
        "ActorInfo", "ActorLocation", "ActorStore", "DataDir", "FileStore", "Finding", "JournalEntry",
        "Level", "MemoryStorage", "MemoryStore", "Recovered", "SnapshotHeader", "Storage", "actor_dir",
        "decode_key", "encode_key", "find_actors", "inspect_actor", "open_storage", "read_history",
        "verify_actor", "worst_level",
        "VSHARDS", "FileLeases", "Lease", "Leases", "Ownership", "split_vshards", "vshard_of",
    ])
    for name in mnemex.persistence.__all__:
        assert getattr(mnemex.persistence, name) is not None


def test_persistence_is_plain_blocking_code_without_trio_or_the_runtime() -> None:
    for source in Path(mnemex.persistence.__file__).parent.rglob("*.py"):
        tree = ast.parse(source.read_text(), str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                assert not any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN), (
                    f"{source.name} imports {module}")
