"""Consolidation: what a batch of extracted facts does to the memories a scope
already holds. Deterministic and pure: the scope actor asks ``plan`` and applies
the operations it returns, inside one journaled command, so replay makes the
same decisions without a model.

For each fact, in order (the first rule that applies wins):

1. **Reinforce**: the scope (or an earlier fact of the batch) holds the same text
   (compared case- and space-insensitively). A superseded memory stated again is
   reactivated: the user said it anew, so it is current again.
2. **Merge**: the extractor calls it a ``duplicate`` of an offered memory and the
   two are close: cosine similarity of their vectors at least ``merge_similarity``
   when both have one, else word overlap at least ``merge_overlap``. The new
   wording is kept, marked merged into the old memory, which is reinforced.
   A duplicate that is not close is added, linked to the memory it was said to
   repeat.
3. **Supersede**: an ``updates`` of an offered memory that shares an entity with
   the fact (or is about the same person: the same ``attributed_to``) ends that
   memory (superseded, with the time it stopped being true) and adds the fact.
   Without a shared entity nothing is ended: the fact is added, linked to the
   memory as a conflict, to be resolved later.
4. **Link**: an ``extends`` adds the fact, linked to the memory it extends.
5. **Add** anything else.

Targets are the offered memories only: a number the extractor was not shown is
dropped with its relation. A target that has since been superseded or merged is
followed to the memory that replaced it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from mnemex.index import words

__all__ = [
    "Existing",
    "Known",
    "Operation",
    "normalized_text",
    "plan",
]

_MAX_HOPS: Final = 16

OpKind = Literal["add", "reinforce", "merge", "supersede"]


def normalized_text(text: str) -> str:
    """``text`` as duplicates compare: its words (the keyword index's tokens:
    normalised, case-folded, scripts without spaces in character pairs) joined by
    single spaces."""
    return " ".join(words(text))


@dataclass(frozen=True, slots=True)
class Existing:
    """What consolidation needs to know of a stored memory."""

    id: str
    content: str
    status: str = "active"
    successor: str | None = None      # superseded_by or merged_into
    entities: tuple[str, ...] = ()
    attributed_to: str | None = None


class Known(Protocol):
    """The scope as the planner sees it (read-only)."""

    def by_text(self, normalized: str) -> str | None:
        """The id of a memory whose normalized text is ``normalized``."""

    def get(self, memory_id: str) -> Existing | None: ...

    def similarity(self, fact: int, memory_id: str) -> float | None:
        """Cosine similarity of fact ``fact``'s vector and the memory's (None: one
        of them has none)."""


@dataclass(frozen=True, slots=True)
class Fact:
    """The parts of an extracted fact consolidation reads (``target``: a memory id
    already resolved from the offered numbers, or None)."""

    content: str
    relation: str | None = None
    target: str | None = None
    entities: tuple[str, ...] = ()
    attributed_to: str | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    """What to do with fact ``fact``: ``kind`` add (``links``: memories it extends,
    ``conflicts``: memories it contradicts without a shared entity), reinforce
    ``target`` (``reactivate``: it was superseded; ``target`` of an earlier fact of
    the batch is ``"#<index>"``), merge into ``target``, or supersede ``target``."""

    fact: int
    kind: OpKind
    target: str | None = None
    links: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    reactivate: bool = False


def _current(known: Known, memory_id: str) -> Existing | None:
    """The memory, or the active one that replaced it."""
    seen = 0
    found = known.get(memory_id)
    while found is not None and found.status != "active" and found.successor is not None and seen < _MAX_HOPS:
        found = known.get(found.successor)
        seen += 1
    return found if found is not None and found.status == "active" else None


def _overlap(a: str, b: str) -> float:
    left, right = set(words(a)), set(words(b))
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


def _shares_subject(fact: Fact, memory: Existing) -> bool:
    mine = {e.casefold() for e in fact.entities}
    if mine & {e.casefold() for e in memory.entities}:
        return True
    return fact.attributed_to is not None and memory.attributed_to is not None and \
        fact.attributed_to.casefold() == memory.attributed_to.casefold()


def plan(facts: Sequence[Fact], known: Known, offered: frozenset[str], *,
         merge_similarity: float = 0.85, merge_overlap: float = 0.6) -> list[Operation]:
    """The operations for ``facts`` (see the module doc), one per fact, in order.
    ``offered``: the ids shown to the extractor, the only valid targets."""
    operations: list[Operation] = []
    batch: dict[str, int] = {}
    for index, fact in enumerate(facts):
        text = normalized_text(fact.content)
        same = known.by_text(text)
        if same is not None:
            found = known.get(same)
            if found is not None and found.status == "merged":  # a wording of another memory
                head = _current(known, same)
                same, found = (head.id, head) if head is not None else (same, found)
            reactivate = found is not None and found.status == "superseded"
            operations.append(Operation(index, "reinforce", same, reactivate=reactivate))
            continue
        if text in batch:
            operations.append(Operation(index, "reinforce", f"#{batch[text]}"))
            continue
        batch[text] = index
        target = _current(known, fact.target) if fact.target is not None and fact.target in offered else None
        if target is None or fact.relation is None:
            operations.append(Operation(index, "add"))
        elif fact.relation == "duplicate":
            similarity = known.similarity(index, target.id)
            close = similarity >= merge_similarity if similarity is not None else \
                _overlap(fact.content, target.content) >= merge_overlap
            operations.append(Operation(index, "merge", target.id) if close
                              else Operation(index, "add", links=(target.id,)))
        elif fact.relation == "updates":
            operations.append(Operation(index, "supersede", target.id) if _shares_subject(fact, target)
                              else Operation(index, "add", conflicts=(target.id,)))
        elif fact.relation == "extends":
            operations.append(Operation(index, "add", links=(target.id,)))
        else:
            operations.append(Operation(index, "add"))
    return operations
