"""Memories as a model reads them: the text a memory contributes to a prompt, and
the block that recall puts before a model call."""

from __future__ import annotations

from collections.abc import Iterable

from mnemex.knowledge.facts import INJECTED_CLOSE, INJECTED_OPEN
from mnemex.memories.protocol import Hit, MemoryRecord

__all__ = ["fenced", "format_as_context", "memory_text"]


def memory_text(record: MemoryRecord) -> str:
    """What a memory contributes to a model's context: its content on one line."""
    return " ".join(record.content.split())


def format_as_context(hits: Iterable[Hit | MemoryRecord]) -> str:
    """Memories as a block for a model's prompt: ``[User Memory]`` then one ``- ``
    line per memory (its content on one line), fenced by ``<mnemex-memory>`` tags so
    that extraction never takes what mnemex injected for a new fact. Empty string
    when there are none."""
    lines = [f"- {memory_text(hit.memory if isinstance(hit, Hit) else hit)}" for hit in hits]
    return fenced("\n".join(["[User Memory]", *lines])) if lines else ""


def fenced(block: str) -> str:
    """``block`` marked as injected by mnemex (see knowledge.facts.strip_injected)."""
    return f"{INJECTED_OPEN}\n{block}\n{INJECTED_CLOSE}"
