"""Memories as a model reads them: the text a memory contributes to a prompt, and
the block that recall puts before a model call."""

from __future__ import annotations

from collections.abc import Iterable

from mnemex.memories.protocol import Hit, MemoryRecord

__all__ = ["format_as_context", "memory_text"]


def memory_text(record: MemoryRecord) -> str:
    """What a memory contributes to a model's context: its content on one line."""
    return " ".join(record.content.split())


def format_as_context(hits: Iterable[Hit | MemoryRecord]) -> str:
    """Memories as a block for a model's prompt: ``[User Memory]`` then one ``- ``
    line per memory (its content on one line). Empty string when there are none."""
    lines = [f"- {memory_text(hit.memory if isinstance(hit, Hit) else hit)}" for hit in hits]
    return "\n".join(["[User Memory]", *lines]) if lines else ""
