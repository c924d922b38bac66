"""What extraction works on and what it gives back: plain data shared by the
extractors (rules, LLM), the parser, the extraction cursor and the scope's
consolidation.

An extractor gets an ``ExtractionRequest``: the new messages of one session (each
with its position in the session, so a fact can name the messages it came from),
a little preceding context, the existing memories most related to them numbered
from 1 (``offered``), when the messages were observed and the category catalog.
It returns an ``ExtractionResult``: facts, each optionally related to one offered
memory by its number (``duplicate``, ``updates`` or ``extends``), the extractor's
name and the tokens it used. "Nothing to extract" is an empty list of facts; a
failure is an ``ExtractionError`` (never an empty list), so the two stay apart.

Memory blocks mnemex itself puts into a prompt are fenced by ``INJECTED_OPEN`` /
``INJECTED_CLOSE``; ``strip_injected`` removes them before anything is extracted,
so a recalled memory is never stored again as a new fact.
"""

from __future__ import annotations

import re
from typing import Final, Literal, Protocol, runtime_checkable

import msgspec

__all__ = [
    "INJECTED_CLOSE",
    "INJECTED_OPEN",
    "KINDS",
    "ExtractedFact",
    "ExtractionRequest",
    "ExtractionResult",
    "Extractor",
    "OfferedMemory",
    "Relation",
    "SourceMessage",
    "Usage",
    "strip_injected",
]

KINDS: Final = ("fact", "preference", "event", "plan", "relationship", "document_chunk", "lore",
                "message", "note")
"""The kinds of memory mnemex names; an extractor may use others (kept as given)."""

Relation = Literal["duplicate", "updates", "extends"]

INJECTED_OPEN: Final = "<mnemex-memory>"
INJECTED_CLOSE: Final = "</mnemex-memory>"
_INJECTED: Final = re.compile(re.escape(INJECTED_OPEN) + r".*?(?:" + re.escape(INJECTED_CLOSE) + r"|\Z)",
                              re.DOTALL)


def strip_injected(text: str) -> str:
    """``text`` without the memory blocks mnemex injected (an unclosed block runs to
    the end of the text)."""
    if INJECTED_OPEN not in text:
        return text
    return _INJECTED.sub(" ", text).strip()


class SourceMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """One message of a session as extraction sees it. ``position``: its index in the
    session (0-based, never reused); ``role``: user, assistant, system or tool;
    ``speaker``: who said it, when known (a name); ``time``: when it was said,
    seconds since the epoch (0: unknown)."""

    position: int
    role: str
    text: str
    speaker: str | None = None
    time: float = 0.0


class OfferedMemory(msgspec.Struct, frozen=True, omit_defaults=True):
    """An existing memory shown to the extractor under a small ``number`` (from 1)."""

    number: int
    id: str
    content: str
    time: float = 0.0


class ExtractionRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What one extraction job works on (see the module doc)."""

    session_id: str
    messages: list[SourceMessage]
    context: list[SourceMessage] = msgspec.field(default_factory=list)
    offered: list[OfferedMemory] = msgspec.field(default_factory=list)
    observed_at: float = 0.0
    categories: dict[str, str] = msgspec.field(default_factory=dict)
    user_id: str = ""
    app_name: str = ""


class ExtractedFact(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One fact an extractor found.

    ``content``: the fact as a short self-contained sentence ("The user lives in
    Berlin"). ``categories`` with ``confidences`` (0..1, same length, may be empty);
    ``importance`` 0..1; ``entities``: the people, places and things it names (with
    their types in ``entity_types``, when the extractor gave them);
    ``relation`` to the offered memory numbered ``target``; ``attributed_to``: whom
    the fact is about or who stated it ("user", a name); ``valid_at``: when it became
    true, seconds since the epoch, when stated; ``messages``: positions of the
    messages it came from; ``actor_id``: the actor (an NPC, an agent) the fact is
    linked to, when the extractor knows one; ``entity_relations``: how the entities
    it names relate, as (source, type, target) by their names in ``entities``
    (``("Gandros", "owes", "the party")``: the fact states the relation)."""

    content: str
    kind: str = "fact"
    categories: tuple[str, ...] = ()
    confidences: tuple[float, ...] = ()
    importance: float = 0.5
    entities: tuple[str, ...] = ()
    relation: Relation | None = None
    target: int | None = None
    attributed_to: str | None = None
    valid_at: float | None = None
    messages: tuple[int, ...] = ()
    actor_id: str | None = None
    entity_types: dict[str, str] = msgspec.field(default_factory=dict)
    """The type the extractor gave an entity (person, place, organisation, event,
    object, pet, other), by its name in ``entities``."""
    entity_relations: tuple[tuple[str, str, str], ...] = ()


class Usage(msgspec.Struct, frozen=True, omit_defaults=True):
    """Tokens an extraction used, as the endpoint reported them, over ``calls`` calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    calls: int = 0


class ExtractionResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What an extractor returns: ``facts`` (empty: nothing to extract), the
    ``extractor`` that made them (``rules`` or ``llm:<model>:<prompt version>``) and
    its ``usage``."""

    facts: list[ExtractedFact]
    extractor: str
    usage: Usage = Usage()


@runtime_checkable
class Extractor(Protocol):
    """Turns messages into facts. Called beside the actor, in a worker thread: it may
    block on I/O. Raises ``mnemex.ExtractionError`` when it cannot answer."""

    @property
    def name(self) -> str: ...

    def extract(self, request: ExtractionRequest) -> ExtractionResult: ...
