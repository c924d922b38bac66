"""What a read-only check of an actor folder found.

Each problem is one :class:`Finding` naming its file (and line, where a line
can be told) in a sentence, with a :class:`Level` that says what it means for
the data. ``mnemex inspect`` and ``mnemex replay --verify`` print them and
take their exit status from the worst one.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Finding", "Level", "worst_level"]


class Level(enum.Enum):
    """How bad a finding is, mildest first."""

    NOTE = "note"
    """A torn journal tail: the unterminated last write a crash leaves. It was
    never acknowledged, so nothing is lost; the next load cuts it."""
    WARNING = "warning"
    """A snapshot sidecar missing or damaged: the snapshot loads without it and
    rebuilds what it held from its JSONL lines. Nothing is lost, but the bytes
    on disk changed (or a file was removed), which a healthy disk does not do."""
    ERROR = "error"
    """Corruption: a journal, archive or snapshot changed after it was written,
    or the files do not join up. The actor may refuse to load (CorruptData) or
    has lost a snapshot it could fall back to; it needs repair."""


_SEVERITY = {level: rank for rank, level in enumerate(Level)}


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem in an actor folder."""

    level: Level
    path: Path
    """The file it is in (a journal, archive segment, snapshot, sidecar or key.json),
    or the actor folder for problems between files (commands missing)."""
    line: int | None
    """1-based line of ``path`` it is on, when one line can be told."""
    message: str
    """The whole sentence, naming the file (and line): what :class:`CorruptData`
    says when the runtime meets the same problem."""

    def __str__(self) -> str:
        return self.message

    def as_dict(self) -> dict[str, object]:
        """The finding as JSON-ready fields: level, file, line, message."""
        return {"level": self.level.value, "file": str(self.path), "line": self.line, "message": self.message}


def worst_level(findings: Iterable[Finding]) -> Level | None:
    """The most severe level among ``findings``; None if there are none."""
    return max((finding.level for finding in findings), key=_SEVERITY.__getitem__, default=None)
