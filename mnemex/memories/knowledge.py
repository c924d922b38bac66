"""The knowledge side of a scope: an extraction job's facts consolidated into its
memories (``apply_facts``), and the history of a memory (``history_of``).

``knowledge.consolidate.plan`` decides what each fact does (reinforce, merge,
supersede, link, add); this module checks the facts, applies the plan to the
scope's records and indexes and says what changed. It runs inside the scope's
handler for a journaled ``ApplyExtraction``, after every check: a fact that
fails its field checks is dropped (the reply says why) rather than failing the
job, so the same facts are dropped again on replay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from mnemex.errors import InvalidInput
from mnemex.knowledge.consolidate import Existing, Fact, plan
from mnemex.memories.documents import document_of, document_source
from mnemex.memories.fields import MAX_CHANGES, MAX_SOURCES, record_of
from mnemex.memories.protocol import (
    ApplyExtraction,
    Change,
    GetHistory,
    MemoryHistory,
    MemoryRecord,
    NewFact,
    NewMemory,
    SourceRef,
)
from mnemex.memories.snapshot import decode_vector

if TYPE_CHECKING:
    from mnemex.memories.behaviour import ScopeMemory

__all__ = ["Applied", "apply_facts", "check_facts", "history_of", "with_change"]


@dataclass(slots=True)
class Applied:
    """What applying a job's facts changed, by memory id."""

    added: list[str] = field(default_factory=list)
    reinforced: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    linked: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _capped(items: tuple[object, ...], limit: int) -> tuple[object, ...]:
    if len(items) <= limit:
        return items
    return items[:1] + items[len(items) - limit + 1:]


def with_change(record: MemoryRecord, change: Change, **changes: object) -> MemoryRecord:
    """``record`` with ``change`` appended to its history (the first and the latest
    ``MAX_CHANGES`` kept) and ``changes`` made."""
    history = _capped((*record.history, change), MAX_CHANGES)
    return msgspec.structs.replace(record, history=history, **changes)


def check_facts(scope: ScopeMemory, cmd: ApplyExtraction,
                now: float) -> tuple[list[tuple[NewFact, MemoryRecord]], list[str]]:
    """Each fact as the record it would add, checked by the fields' rules; the facts
    that fail are left out, with why."""
    settings = scope.settings
    if not isinstance(cmd.facts, list | tuple):
        raise InvalidInput("facts must be a list", field="facts")
    if len(cmd.facts) > settings.max_memories_per_command:
        raise InvalidInput(f"{len(cmd.facts):,} facts in one job; the limit is "
                           f"{settings.max_memories_per_command:,} "
                           f"(config.memories.max_memories_per_command)", field="facts")
    kept: list[tuple[NewFact, MemoryRecord]] = []
    dropped: list[str] = []
    vectors: list[bytes] = []
    for index, fact in enumerate(cmd.facts):
        if not isinstance(fact, NewFact):
            raise InvalidInput(f"facts[{index}] must be a NewFact, got {type(fact).__name__}", field="facts")
        if fact.vector is not None:
            vectors.append(fact.vector)
        confidences = tuple(float(c) for c in fact.confidences[:len(fact.categories)]
                            if isinstance(c, int | float) and math.isfinite(c))
        first = fact.first if fact.first is not None else cmd.first
        last = fact.last if fact.last is not None else cmd.upto - 1
        source = document_source(cmd.session_id, first, last) if document_of(cmd.session_id) is not None \
            else SourceRef(session_id=cmd.session_id, first=first, last=last)
        observed = fact.observed_at if fact.observed_at is not None else now
        try:
            record = record_of(NewMemory(
                id=fact.id, content=fact.content, importance=fact.importance, timestamp=observed,
                session_id=cmd.session_id, categories=fact.categories, entities=fact.entities,
                kind=fact.kind, attributed_to=fact.attributed_to, valid_at=fact.valid_at,
                actor_id=fact.actor_id, source="extraction"), now, settings.max_content_bytes,
                settings.max_metadata_bytes)
        except InvalidInput as exc:
            dropped.append(f"facts[{index}] ({fact.content[:60]!r}): {exc}")
            continue
        if len(confidences) != len(record.categories):
            confidences = ()
        # the extractor's categories where confident enough, else the offline classifier's
        if cmd.classify is True:
            record = scope.categories.classify_new(
                record, confidences=tuple(min(1.0, max(0.0, c)) for c in confidences), by=cmd.extractor)
        else:  # journaled before categories existed: as it was then
            record = msgspec.structs.replace(
                record, category_confidences=tuple(min(1.0, max(0.0, c)) for c in confidences))
        record = msgspec.structs.replace(
            record, sources=(source,), extractor=cmd.extractor,
            history=(Change(at=now, op="created", by=cmd.extractor, source=source),))
        kept.append((fact, record))
    if vectors:
        scope.check_vectors_of(cmd.embedder, cmd.dim, vectors, "the extraction")
    return kept, dropped


class _View:
    """The scope as consolidation reads it."""

    def __init__(self, scope: ScopeMemory, facts: Sequence[tuple[NewFact, MemoryRecord]],
                 dim: int) -> None:
        self.scope = scope
        self.facts = facts
        self.dim = dim

    def by_text(self, normalized: str) -> str | None:
        doc = self.scope.texts().get(normalized)
        return None if doc is None else self.scope.memory_id_at(doc)

    def get(self, memory_id: str) -> Existing | None:
        record = self.scope.record(memory_id)
        if record is None:
            return None
        return Existing(record.id, record.content, record.status, record.superseded_by or record.merged_into,
                        record.entities, record.attributed_to)

    def similarity(self, fact: int, memory_id: str) -> float | None:
        vector = self.facts[fact][0].vector
        index = self.scope.vectors
        doc = self.scope.doc_of.get(memory_id)
        if vector is None or index is None or doc is None or doc not in index:
            return None
        return float(np.dot(decode_vector(vector, self.dim), index.vector(doc)))


def apply_facts(scope: ScopeMemory, cmd: ApplyExtraction, facts: Sequence[tuple[NewFact, MemoryRecord]],
                applied: Applied) -> None:
    """Consolidate checked ``facts`` into ``scope`` (see knowledge.consolidate)."""
    offered = frozenset(memory_id for memory_id in cmd.offered if isinstance(memory_id, str))
    plain = [Fact(record.content, fact.relation, fact.target, record.entities, record.attributed_to)
             for fact, record in facts]
    operations = plan(plain, _View(scope, facts, cmd.dim), offered)
    by = cmd.extractor
    placed: list[tuple[MemoryRecord, bytes | None]] = []
    new_ids: dict[int, str] = {}
    for op in operations:
        fact, record = facts[op.fact]
        source = record.sources[0] if record.sources else None
        if op.kind == "reinforce":
            target = new_ids.get(int(op.target[1:])) if op.target and op.target.startswith("#") else op.target
            if target is None:
                continue
            _reinforce(scope, target, record, source=source, by=by, now=cmd.now, reactivate=op.reactivate,
                       applied=applied)
            continue
        if op.kind == "merge":
            assert op.target is not None
            record = with_change(record, Change(at=cmd.now, op="merged", by=by, other=op.target,
                                                 source=source), status="merged", merged_into=op.target)
            scope.change_record(op.target, partial(_absorbed, wording=record, by=by, now=cmd.now,
                                                   op="absorbed"))
            applied.merged.append(record.id)
        elif op.kind == "supersede":
            assert op.target is not None
            ended = record.valid_at if record.valid_at is not None else record.timestamp
            record = with_change(record, Change(at=cmd.now, op="supersedes", by=by, other=op.target,
                                                 source=source))
            scope.change_record(op.target, partial(_superseded, by_id=record.id, ended=ended, source=source,
                                                   by=by, now=cmd.now))
            applied.superseded.append(op.target)
            applied.added.append(record.id)
        else:
            links = (*op.links, *op.conflicts)
            if links:
                changes = [Change(at=cmd.now, op="linked", by=by, other=other,
                                  note="conflicts" if other in op.conflicts else fact.relation or "extends")
                           for other in links]
                record = msgspec.structs.replace(record, links=tuple(links),
                                                 history=(*record.history, *changes))
                for other in links:
                    scope.change_record(other, partial(_linked, other=record.id))
                applied.linked.extend(links)
            applied.added.append(record.id)
        new_ids[op.fact] = record.id
        placed.append((record, fact.vector))
    scope.place_records(placed, cmd.embedder, cmd.dim)


def _absorbed(old: MemoryRecord, *, wording: MemoryRecord, by: str, now: float, op: str) -> MemoryRecord:
    """``old`` stated again (``op`` reinforced) or absorbing a merged wording."""
    source = wording.sources[0] if wording.sources else None
    return with_change(old, Change(at=now, op=op, by=by, other=wording.id if op == "absorbed" else None,
                                    source=source),
                        reinforced=old.reinforced + 1, importance=max(old.importance, wording.importance),
                        sources=_capped((*old.sources, *wording.sources), MAX_SOURCES))


def _superseded(old: MemoryRecord, *, by_id: str, ended: float, source: SourceRef | None, by: str,
                now: float) -> MemoryRecord:
    began = old.valid_at if old.valid_at is not None else old.timestamp
    return with_change(old, Change(at=now, op="superseded", by=by, other=by_id, source=source),
                        status="superseded", superseded_by=by_id, invalid_at=max(ended, began))


def _reactivated(old: MemoryRecord, *, since: float, source: SourceRef | None, by: str,
                 now: float) -> MemoryRecord:
    return with_change(old, Change(at=now, op="reactivated", by=by, source=source), status="active",
                        superseded_by=None, invalid_at=None, valid_at=since)


def _linked(old: MemoryRecord, *, other: str) -> MemoryRecord:
    return old if other in old.links else msgspec.structs.replace(old, links=(*old.links, other))


def _reinforce(scope: ScopeMemory, target: str, record: MemoryRecord, *, source: SourceRef | None, by: str,
               now: float, reactivate: bool, applied: Applied) -> None:
    current = scope.record(target)
    if current is None:
        return
    if reactivate and current.superseded_by is not None:
        # stated again after it was superseded: current again; what replaced it ends now
        since = record.valid_at if record.valid_at is not None else record.timestamp
        head = scope.record(current.superseded_by)
        if head is not None and head.status == "active":
            scope.change_record(head.id, partial(_superseded, by_id=target, ended=since, source=source,
                                                 by=by, now=now))
            applied.superseded.append(head.id)
        scope.change_record(target, partial(_reactivated, since=since, source=source, by=by, now=now))
    scope.change_record(target, partial(_absorbed, wording=record, by=by, now=now, op="reinforced"))
    applied.reinforced.append(target)


def history_of(scope: ScopeMemory, cmd: GetHistory) -> MemoryHistory:
    """The memory ``cmd.id`` with every memory on its chain and their changes."""
    from mnemex.errors import NotFound

    record = scope.record(cmd.id) if isinstance(cmd.id, str) else None
    if record is None:
        raise NotFound(f"no memory {cmd.id!r} in scope {scope.name}")
    seen: dict[str, MemoryRecord] = {record.id: record}
    todo = [record]
    while todo and len(seen) < 256:
        current = todo.pop()
        neighbours = [current.superseded_by, current.merged_into,
                      *(change.other for change in current.history
                        if change.op in ("supersedes", "absorbed", "superseded", "merged"))]
        for other in neighbours:
            if other is not None and other not in seen:
                found = scope.record(other)
                if found is not None:
                    seen[other] = found
                    todo.append(found)
    related = sorted((r for r in seen.values() if r.id != record.id), key=lambda r: (r.created_at, r.id))
    changes = sorted(((r.id, change) for r in seen.values() for change in r.history),
                     key=lambda pair: (pair[1].at, pair[0]))
    return MemoryHistory(memory=record, related=related, changes=changes)

