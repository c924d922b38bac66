"""The import rules of DESIGN.md, checked on the source, and the public face."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mnemex

ROOT = Path(mnemex.__file__).parent

# package -> modules it must never import
FORBIDDEN = {
    "actors": ("trio", "mnemex.runtime", "mnemex.server", "mnemex.persistence"),
    "index": ("trio", "mnemex.runtime", "mnemex.actors", "mnemex.persistence", "mnemex.server"),
    "persistence": ("trio", "mnemex.actors", "mnemex.server", "mnemex.runtime"),
    "runtime": ("mnemex.actors", "mnemex.index", "mnemex.server", "mnemex._assembly"),
}
BASE = ("messages.py", "config.py", "errors.py", "effects.py")
BASE_MAY_IMPORT = ("mnemex.errors",)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def violations(path: Path, banned: tuple[str, ...]) -> list[str]:
    return sorted(name for name in imported_modules(path)
                  if any(name == b or name.startswith(b + ".") for b in banned))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_the_import_rules(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        assert violations(path, FORBIDDEN[package]) == [], path


@pytest.mark.parametrize("module", BASE)
def test_base_modules_import_nothing_of_mnemex_but_errors(module: str) -> None:
    names = imported_modules(ROOT / module)
    mine = {name for name in names if name == "mnemex" or name.startswith("mnemex.")}
    assert mine <= set(BASE_MAY_IMPORT), (module, mine)


def test_public_names_are_pinned() -> None:
    assert sorted(mnemex.__all__) == sorted([
        "ActorClosed", "ActorCrashed", "ActorKind", "ActorRef", "Busy", "ChatMessage", "Client", "Command",
        "Config", "CorruptData", "DataDirLocked", "Image", "InvalidInput", "Job", "JobResult",
        "MemoryRecord", "MnemexError", "MnemexRuntime", "NotFound", "Reply", "RuntimeStats",
        "SnapshotData", "Step", "StorageError", "Tell", "Timeout", "TooLarge", "UnknownActorKind",
        "load_config", "open_runtime",
        # short-term memory
        "AgentRef", "AgentStats", "Appended", "ContextView", "EstimatedTokens", "ExtractiveSummarizer",
        "LLMSummarizer", "MaxMessages", "MessagePage", "NoPruning", "SessionInfo", "SessionStream",
        "StoredMessage", "StreamEvent", "Summarizer", "SummaryError", "SummaryRequest", "TokenBudget",
        "TokenCounter", "Turn", "TurnHit", "TurnRecord", "agent_kind", "context_for_model_call",
        "record_turn",
        # long-term memory
        "SEARCH_MEMORY_TOOL", "Embedder", "Event", "HashingEmbedder", "Hit", "MemoryEntry", "MemoryPage",
        "MemoryService", "ScopeRef", "ScopeStats", "SearchRequest", "SearchResponse", "SearchResult",
        "Session", "SessionAdded", "execute_memory_tool", "format_as_context", "scope_kind",
    ])
    for name in mnemex.__all__:
        assert getattr(mnemex, name) is not None


def test_every_error_is_a_mnemex_error() -> None:
    from mnemex import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), mnemex.MnemexError)
