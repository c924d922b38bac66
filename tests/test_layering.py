"""The import rules of DESIGN.md ("Who may import whom"), checked on the sources,
and the two public faces (``mnemex`` and ``mnemex.lowlevel``) pinned."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mnemex
import mnemex.lowlevel

ROOT = Path(mnemex.__file__).parent

# what each package's modules may import of mnemex (besides the package itself)
PACKAGES: dict[str, tuple[str, ...]] = {
    "index": ("mnemex.errors", "mnemex._gcpause"),
    "persistence": ("mnemex.errors",),
    "kernel": ("mnemex.effects", "mnemex.errors", "mnemex.persistence", "mnemex.config", "mnemex._gcpause"),
    "models": ("mnemex.index", "mnemex.errors", "mnemex.config"),
    "server": ("mnemex", "mnemex.lowlevel", "mnemex.config", "mnemex.remote"),
    # the runtime protocol over HTTP: the refs of the behaviour packages over a remote host
    "remote": ("mnemex", "mnemex.errors", "mnemex.config", "mnemex.effects", "mnemex.kernel", "mnemex.persistence",
               "mnemex.conversations", "mnemex.memories", "mnemex.models", "mnemex._ids", "mnemex.state",
               "mnemex.checkpoints", "mnemex.knowledge"),
    "integrations": ("mnemex", "mnemex.lowlevel", "mnemex.config"),
    # a cluster's shards on Ray: the public API, and the wire of the remote clients (the refs
    # over another host, the whitelist of commands and their reply types); the HTTP server in
    # front of it (mnemex serve --ray) and the pushed streams its shards keep
    "ray": ("mnemex", "mnemex.lowlevel", "mnemex.config", "mnemex.remote", "mnemex.client", "mnemex.server"),
}
# behaviours, codecs and ranking: no trio, no kernel, no models, no server, no runtime
BEHAVIOUR_PACKAGES = ("conversations", "memories", "knowledge", "state", "checkpoints")
BEHAVIOUR_BANNED = ("trio", "mnemex.kernel", "mnemex.models", "mnemex.server", "mnemex.runtime",
                    "mnemex.lowlevel", "mnemex._host")
# only these modules of a behaviour package join it to the runtime
JOINING = ("ref.py", "kind.py")
NO_TRIO = ("index", "persistence")
# top-level modules: what of mnemex each may import (None: anything; it assembles the rest)
TOP: dict[str, tuple[str, ...] | None] = {
    "errors.py": (),
    "_gcpause.py": (),
    "_repeats.py": (),
    "effects.py": ("mnemex.errors",),
    "config.py": ("mnemex.errors",),
    "_protocol.py": ("mnemex.errors",),
    "_ids.py": ("mnemex.errors",),
    "_time.py": ("mnemex.errors",),
    "_checks.py": ("mnemex.errors",),
    "_llm.py": ("mnemex.errors",),
    "_host.py": ("mnemex.config", "mnemex.effects", "mnemex.kernel"),
    "runtime.py": None,
    "client.py": None,
    "lowlevel.py": None,
    "__init__.py": None,
    "testing.py": None,
    "cli.py": None,
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def mnemex_imports(path: Path) -> set[str]:
    return {name for name in imported_modules(path) if name == "mnemex" or name.startswith("mnemex.")}


def inside(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_every_package_and_top_level_module_has_a_rule() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(PACKAGES) | set(BEHAVIOUR_PACKAGES), "a new package needs its import rule here"
    modules = {p.name for p in ROOT.glob("*.py")}
    assert modules == set(TOP), "a new top-level module needs its import rule here"


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_package_imports_only_what_lies_below_it(package: str) -> None:
    allowed = (*PACKAGES[package], f"mnemex.{package}")
    for path in sorted((ROOT / package).rglob("*.py")):
        wrong = sorted(name for name in mnemex_imports(path)
                       if not inside(name, allowed) and not (name == "mnemex" and "mnemex" in allowed))
        if package in ("server", "integrations", "ray"):  # the public API only: `mnemex`, `mnemex.lowlevel`, `mnemex.config`
            # (and the server: `mnemex.remote`, the wire its remote clients speak)
            wrong = sorted(name for name in mnemex_imports(path)
                           if name not in PACKAGES[package] and not inside(name, (f"mnemex.{package}",)))
        assert wrong == [], f"{path.relative_to(ROOT)} imports {wrong}"
        if package in NO_TRIO:
            assert "trio" not in imported_modules(path), path


@pytest.mark.parametrize("package", BEHAVIOUR_PACKAGES)
def test_behaviours_never_import_trio_the_kernel_or_models(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        if path.name in JOINING:
            continue
        wrong = sorted(name for name in imported_modules(path) if inside(name, BEHAVIOUR_BANNED))
        assert wrong == [], f"{path.relative_to(ROOT)} imports {wrong}"


@pytest.mark.parametrize("module", sorted(name for name, rule in TOP.items() if rule is not None))
def test_top_level_module_imports_only_what_it_may(module: str) -> None:
    allowed = TOP[module]
    assert allowed is not None
    wrong = sorted(name for name in mnemex_imports(ROOT / module) if not inside(name, allowed))
    assert wrong == [], f"{module} imports {wrong}"


def test_a_broken_rule_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "behaviour.py"
    bad.write_text("import trio\nfrom mnemex.kernel import Runtime\n")
    assert sorted(n for n in imported_modules(bad) if inside(n, BEHAVIOUR_BANNED)) == ["mnemex.kernel", "trio"]


def test_the_public_face_is_pinned() -> None:
    assert sorted(mnemex.__all__) == sorted([
        # the runtime
        "open_runtime", "Client", "MnemexRuntime", "Config", "DEFAULT", "load_config", "connect",
        # short-term memory
        "AgentRef", "ChatMessage", "StoredMessage", "MessagePage", "ContextView", "Turn", "TurnRecord",
        "MaxMessages", "TokenBudget", "KeepAll", "Stateless", "SummaryError",
        # long-term memory
        "ScopeRef", "MemoryFields", "MemoryRecord", "Hit", "SearchResult", "SessionAdded",
        "SEARCH_MEMORY_TOOL", "REMEMBER_TOOL", "MEMORY_TOOLS", "execute_memory_tool",
        # knowledge
        "Extracted", "MemoryHistory", "EntityChanged", "EntityDetail", "EntityInfo", "AliasRecord", "EntityLink", "TypedRelation", "EntityPage",
        "GraphStats", "RelatedEntities", "IngestReport", "DocumentStatus", "Category",
        # errors
        "MnemexError", "InvalidInput", "UnknownActorKind", "TooLarge", "NotFound", "Busy", "Timeout",
        "ActorClosed", "ActorCrashed", "ModelError", "EmbedderError", "ExtractionError", "CorruptData", "StorageError",
        "DataDirLocked", "NotOwner",
    ])
    for name in mnemex.__all__:
        assert getattr(mnemex, name) is not None
    # the reply types of the less common calls are where they are defined, for annotations
    from mnemex.conversations.protocol import AgentStats, Appended, SessionInfo, StreamEvent, TurnHit
    from mnemex.conversations.ref import SessionStream
    from mnemex.memories.protocol import DocumentInfo, IngestProgress, MemoryPage, ScopeStats
    assert all(isinstance(t, type) for t in (AgentStats, Appended, SessionInfo, StreamEvent, TurnHit,
                                              SessionStream, MemoryPage, ScopeStats, IngestProgress,
                                              DocumentInfo))


def test_the_extension_face_is_pinned() -> None:
    assert sorted(mnemex.lowlevel.__all__) == sorted([
        "ActorKind", "ActorRef", "Behaviour", "Beside", "Command", "Effect", "Emit", "Forward", "Host", "Image",
        "Job", "JobResult", "JsonCodec", "Key", "Reply", "Runtime", "RuntimeStats", "ScopeKind", "ShutdownReport",
        "SnapshotData", "Step", "Subscription", "Tell", "agent_kind", "encode_snapshot", "open_actor_runtime",
        "rebuild_behaviour", "replay_actor", "replay_data_dir", "scope_kind",
        # what plugs into the built-in kinds
        "Embedder", "HashingEmbedder", "Summarizer", "ExtractiveSummarizer", "LLMSummarizer", "TokenCounter",
        # graph checkpoints (the checkpoint kind, what LangGraph's saver keeps)
        "Blob", "BlockingCheckpoints", "ChannelValue", "CheckpointEntry", "Checkpoints", "PendingWrite",
        "WriteValue", "checkpoint_kind",
        # virtual shards, their leases and folders
        "VSHARDS", "DataDir", "FileLeases", "Lease", "LeaseKeeper", "Leases", "Ownership", "actor_dir", "split_vshards",
        "vshard_of", "shared_storage",
        # a runtime on a background thread (the blocking Client's, a Ray shard's)
        "BlockingBridge",
        # a message for an actor another runtime holds, handed to the host (a Ray shard's)
        "HandOver",
    ])
    for name in mnemex.lowlevel.__all__:
        assert getattr(mnemex.lowlevel, name) is not None


def test_every_error_is_a_mnemex_error_and_drawn_in_the_tree() -> None:
    from mnemex import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), mnemex.MnemexError)
        assert name in (errors.__doc__ or ""), f"{name} is missing from the tree in errors.py's docstring"
