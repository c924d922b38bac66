"""A finished session as memories: the text of each event, cut to the content
limit at whitespace, with ids taken in order from one reserved block.

Shared by the scope ref (``add_session``) and the scope actor (a session an
agent archives, actor to actor), so both store a session the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mnemex._ids import id_at
from mnemex.memories.protocol import NewMemory, Session

__all__ = ["chunk_text", "event_text", "session_memories"]

def event_text(content: Any) -> str | None:
    """The text of an event's content: a string, a list of parts (``{"text": ...}``
    or strings) or an object with ``parts`` or ``text``; None when it has none."""
    if content is None:
        return None
    if isinstance(content, str):
        return content if content.strip() else None
    if isinstance(content, Mapping):
        if isinstance(content.get("text"), str):
            return event_text(content["text"])
        return event_text(content.get("parts", content.get("content")))
    if isinstance(content, list | tuple):
        pieces = [event_text(part) for part in content]
        text = "\n".join(piece for piece in pieces if piece)
        return text or None
    return None


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def chunk_text(text: str, limit: int) -> list[str]:
    """``text`` cut at whitespace into pieces of at most ``limit`` UTF-8 bytes (a
    single word longer than that is cut between characters)."""
    if _size(text) <= limit:
        return [text]
    out: list[str] = []
    current: list[str] = []
    size = 0
    for word in text.split():
        encoded = _size(word)
        rest = word
        while encoded > limit:
            cut = limit
            while _size(rest[:cut]) > limit:
                cut -= 1
            if current:
                out.append(" ".join(current))
                current, size = [], 0
            out.append(rest[:cut])
            rest = rest[cut:]
            encoded = _size(rest)
        if not rest:
            continue
        if current and size + 1 + encoded > limit:
            out.append(" ".join(current))
            current, size = [], 0
        size += encoded + (1 if current else 0)
        current.append(rest)
    if current:
        out.append(" ".join(current))
    return [piece for piece in out if piece.strip()]


def session_memories(session: Session, first_id: str, limit: int) -> list[NewMemory]:
    """One memory per piece of each event's text (events without text are skipped),
    ids ``first_id`` onwards; each keeps its author, timestamp (seconds, 0 for
    none), the session id and the event's id (``metadata["event_id"]``)."""
    memories: list[NewMemory] = []
    for event in session.events:
        text = event_text(event.content)
        if text is None:
            continue
        metadata = {"event_id": event.id} if event.id else {}
        timestamp = float(event.timestamp) if event.timestamp else None
        for piece in chunk_text(text, limit):
            memories.append(NewMemory(id=id_at(first_id, len(memories)), content=piece,
                                      author=event.author or None, timestamp=timestamp,
                                      session_id=session.id, metadata=metadata, source="session"))
    return memories
