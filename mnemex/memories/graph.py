"""The entity graph's commands, as a scope handles them (``knowledge.graph`` holds
the graph itself).

A part of ``ScopeMemory`` kept apart, as ``memories.documents`` is: the handlers
run inside the scope's ``handle`` and read its records. Declarations, merges and
unmerges are journaled writes (they change what the graph resolves; a
declaration also what the gazetteer finds in every memory, so the mentions are
indexed again); the reads build ``EntityInfo`` from the active memories that
mention an entity.

Resolution by embeddings (``knowledge.resolution``): names the graph has no vector
for are embedded by a Job beside the actor (``name_jobs``, with the scope's
embedder, a batch at a time, one job in flight), which comes back as the journaled
``ResolveNames``: the vectors, and the threshold they are judged by, so a replay
decides the same merges without the model.
"""

from __future__ import annotations

import binascii
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from mnemex._checks import check_int
from mnemex._time import check_seconds
from mnemex.effects import Job, JobResult, Step
from mnemex.errors import InvalidInput, NotFound
from mnemex.knowledge.graph import Declared, EntityGraph, Merge
from mnemex.knowledge.resolution import decode_rows, default_similarity, encode_rows
from mnemex.memories.protocol import (
    AliasRecord,
    DeclareEntity,
    EntityChanged,
    EntityDetail,
    EntityInfo,
    EntityLink,
    EntityPage,
    GetEntity,
    GetRelated,
    GraphStats,
    ListEntities,
    MemoryRecord,
    MergeEntities,
    NewFact,
    RelatedEntities,
    ResolveNames,
    TypedRelation,
    UnmergeEntity,
)

if TYPE_CHECKING:
    from mnemex.memories.behaviour import ScopeMemory

__all__ = ["MAX_ALIASES", "NameEmbedFailed", "declare_entity", "entity_detail", "graph_stats",
           "list_entities", "merge_entities", "name_embed_failed", "name_jobs", "names_due", "note_relations",
           "reindex_graph", "related_entities", "resolve_names", "unmerge_entity"]

log = logging.getLogger("mnemex.memories")

MAX_ALIASES: Final = 64
MAX_NAME_CHARS: Final = 200
RELATION_MEMORIES: Final = 5
"""How many of the memories that state a relation an EntityLink names (the newest)."""

_TYPE = re.compile(r"^[A-Za-z][\w\-]{0,63}$")

NAME_BATCH: Final = 256
"""Names one embedding job takes at most."""
NAME_RETRY: Final = 60.0
"""Seconds (of the scope's clock) after which a name job that never came back (lost
in a restart) or failed is planned again."""


# -- validation ------------------------------------------------------------------------------------
def _name(graph: EntityGraph, value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{what} must be a non-empty string, got {value!r}", field=what)
    if len(value) > MAX_NAME_CHARS:
        raise InvalidInput(f"{what} is {len(value)} characters; an entity name has at most "
                           f"{MAX_NAME_CHARS}", field=what)
    if len(graph.key(value)) < 2:
        raise InvalidInput(f"{what} {value!r} has no word to match (an article or a letter alone is no "
                           f"name)", field=what)
    return value.strip()


def _known(scope: ScopeMemory, name: Any, what: str = "name") -> str:
    graph = scope.graph
    entity = graph.resolve(_name(graph, name, what))
    if entity is None:
        raise NotFound(f"no entity named {name!r} in scope {scope.name}")
    return entity


# -- reading -------------------------------------------------------------------------------------
def _active(scope: ScopeMemory, docs: Iterable[int]) -> list[MemoryRecord]:
    size = len(scope.docs)
    return [record for record in scope.records_at([doc for doc in docs if doc < size])
            if record is not None and record.active]


def info_of(scope: ScopeMemory, entity: str, records: list[MemoryRecord] | None = None) -> EntityInfo:
    graph = scope.graph
    if records is None:
        records = _active(scope, graph.docs_of(entity))
    times = [record.timestamp for record in records]
    keys = set(graph.keys_of(entity))
    merged = tuple(AliasRecord(name=m.name, into=m.into, how=m.how, score=m.score, at=m.at)
                   for key, m in graph.merges.items() if key in keys)
    return EntityInfo(name=graph.display_name(entity), type=graph.type_of(entity),
                      aliases=tuple(graph.aliases(entity)), mentions=len(records),
                      sessions=len({r.session_id for r in records if r.session_id is not None}),
                      first_seen=min(times) if times else None, last_seen=max(times) if times else None,
                      declared=entity in graph.declared, merged=merged)


def _newest(records: list[MemoryRecord]) -> list[MemoryRecord]:
    return sorted(records, key=lambda record: (record.timestamp, record.id), reverse=True)


def _link(scope: ScopeMemory, of: str, other: str, weight: int, docs: list[int], *, hops: int = 1,
          via: str | None = None) -> EntityLink:
    stating = _newest(_active(scope, docs))[:RELATION_MEMORIES]
    graph = scope.graph
    typed = []
    for source, kind, target, memory_id in graph.relations_between(of, other):
        record = scope.record(memory_id)
        if record is not None and record.active:
            typed.append(TypedRelation(source=graph.display_name(source), type=kind,
                                       target=graph.display_name(target), memory=memory_id))
    return EntityLink(entity=info_of(scope, other), weight=weight,
                      memories=tuple(record.id for record in stating), hops=hops, via=via,
                      relations=tuple(typed))


def note_relations(scope: ScopeMemory, fact: NewFact) -> None:
    """The typed relations a committed fact states, kept by the memory that holds it
    now: the fact's own, or the one it was found equal to (a duplicate reinforces
    an existing memory)."""
    if not fact.entity_relations:
        return
    memory_id = fact.id
    if memory_id not in scope.doc_of:
        doc = scope.by_content.get(fact.content)  # (a live doc: a forget lets its content go first)
        if doc is not None:
            memory_id = scope.memory_id_at(doc)
        elif fact.target is not None:
            memory_id = fact.target
    scope.graph.note_relations(memory_id, fact.entity_relations)


def list_entities(scope: ScopeMemory, cmd: ListEntities) -> EntityPage:
    limit = check_int(cmd.limit, "limit", 0, 10_000)
    offset = check_int(cmd.offset, "offset", 0)
    if cmd.entity_type is not None and not isinstance(cmd.entity_type, str):
        raise InvalidInput(f"type must be a string, got {cmd.entity_type!r}", field="type")
    if cmd.name is not None and not isinstance(cmd.name, str):
        raise InvalidInput(f"name must be a string, got {cmd.name!r}", field="name")
    graph = scope.graph
    wanted = cmd.name.casefold() if cmd.name else None
    rows: list[tuple[int, str, list[MemoryRecord]]] = []
    for entity in graph.entities():
        if cmd.entity_type is not None and graph.type_of(entity) != cmd.entity_type:
            continue
        if wanted is not None and not any(wanted in name.casefold() for name in
                                          (graph.display_name(entity), *graph.aliases(entity))):
            continue
        records = _active(scope, graph.docs_of(entity))
        if records or entity in graph.declared:
            rows.append((len(records), entity, records))
    rows.sort(key=lambda row: (-row[0], graph.display_name(row[1]).casefold(), row[1]))
    page = rows[offset:offset + limit]
    return EntityPage(entities=[info_of(scope, entity, records) for _, entity, records in page],
                      total=len(rows), limit=limit, offset=offset)


def entity_detail(scope: ScopeMemory, cmd: GetEntity) -> EntityDetail:
    memories = check_int(cmd.memories, "memories", 0, 1000)
    neighbours = check_int(cmd.neighbours, "neighbours", 0, 1000)
    entity = _known(scope, cmd.name)
    records = _active(scope, scope.graph.docs_of(entity))
    near = scope.graph.neighbours(entity, limit=neighbours) if neighbours else []
    links = [_link(scope, entity, other, weight, docs) for other, weight, docs in near]
    return EntityDetail(entity=info_of(scope, entity, records), memories=_newest(records)[:memories],
                        neighbours=links)


def related_entities(scope: ScopeMemory, cmd: GetRelated) -> RelatedEntities:
    depth = check_int(cmd.depth, "depth", 1, 2)
    limit = check_int(cmd.limit, "limit", 1, 1000)
    entity = _known(scope, cmd.name)
    graph = scope.graph
    related = []
    for other, hops, via, _weight in graph.related(entity, depth, limit=limit)[:limit]:
        docs = sorted(graph.docs_of(other) & graph.docs_of(via))
        related.append(_link(scope, via, other, len(docs), docs, hops=hops, via=graph.display_name(via)))
    return RelatedEntities(entity=info_of(scope, entity), related=related)


def graph_stats(scope: ScopeMemory) -> GraphStats:
    graph = scope.graph
    return GraphStats(entities=len(graph), mentions=graph.mentions, relations=graph.relations(),
                      declared=len(graph.declared), merges=len(graph.merges),
                      embedded_names=len(graph.vectors),
                      embedding_merges=sum(m.how == "embedding" for m in graph.merges.values()),
                      names_pending=len(graph.unembedded(1 << 30)) if _embeds_names(scope) else 0)


# -- writing (journaled) ---------------------------------------------------------------------------
def _reindex(scope: ScopeMemory) -> None:
    """Find every memory's mentions again (the gazetteer changed); in a replay, once
    at its end (``reindex_graph``)."""
    if scope.replaying:
        scope.graph_stale = True
        return
    reindex_graph(scope)


def reindex_graph(scope: ScopeMemory) -> None:
    scope.graph_stale = False
    scope.snapshot_wanted = True  # (a load would find them all again)
    # (the docs' int objects doc_of holds: an int a doc more would cost 28 bytes a memory)
    docs = sorted(scope.doc_of.values())
    held = zip(docs, scope.records_at(docs), strict=True)
    scope.graph.rebuild((doc, record.content, record.author, record.entities)
                        for doc, record in held if record is not None)


def declare_entity(scope: ScopeMemory, cmd: DeclareEntity) -> EntityChanged:
    now = check_seconds(cmd.now, "now")
    graph = scope.graph
    name = _name(graph, cmd.name, "name")
    kind = cmd.entity_type
    if not isinstance(kind, str) or not _TYPE.match(kind):
        raise InvalidInput(f"type must be a word (letters, digits, _ or -, at most 64), got {kind!r}",
                           field="type")
    if not isinstance(cmd.aliases, list | tuple):
        raise InvalidInput("aliases must be a list of names", field="aliases")
    if len(cmd.aliases) > MAX_ALIASES:
        raise InvalidInput(f"{len(cmd.aliases)} aliases; an entity has at most {MAX_ALIASES}",
                           field="aliases")
    key = graph.key(name)
    aliases = tuple(dict.fromkeys(alias for alias in (_name(graph, a, "aliases") for a in cmd.aliases)
                                  if graph.key(alias) != key))
    for alias in aliases:
        other = graph.declared.get(graph.key(alias))
        if other is not None:
            raise InvalidInput(f"alias {alias!r} is the declared entity {other.name!r}: merge the two "
                               f"instead", field="aliases")
    scope.clock = max(scope.clock, now)
    graph.declare(Declared(name, kind, aliases, now))
    _reindex(scope)
    return EntityChanged(entities=[info_of(scope, key)])


def merge_entities(scope: ScopeMemory, cmd: MergeEntities) -> Any:
    now = check_seconds(cmd.now, "now")
    graph = scope.graph
    if not isinstance(cmd.names, list | tuple) or not cmd.names:
        raise InvalidInput("names must be a non-empty list of entity names", field="names")
    if len(cmd.names) > MAX_ALIASES:
        raise InvalidInput(f"{len(cmd.names)} names in one merge; at most {MAX_ALIASES}", field="names")
    target = _known(scope, cmd.into, "into")
    into = cmd.into.strip()
    names = [_name(graph, name, "names") for name in cmd.names]
    for name in names:
        if graph.resolve(name) is None:
            raise NotFound(f"no entity named {name!r} in scope {scope.name}")
        if graph.key(name) in graph.declared and graph.key(name) != target:
            raise InvalidInput(f"{name!r} is a declared entity; it cannot become an alias of {into!r} "
                               f"(declare it again as an alias of {into!r})", field="names")
    todo = [name for name in names if graph.resolve(name) != target]
    if not todo:
        return Step(EntityChanged(entities=[info_of(scope, target)]), unchanged=True)
    scope.clock = max(scope.clock, now)
    for name in todo:
        graph.merge(Merge(name, into, now))
    entity = graph.resolve(into)
    assert entity is not None
    return EntityChanged(entities=[info_of(scope, entity)])


def unmerge_entity(scope: ScopeMemory, cmd: UnmergeEntity) -> EntityChanged:
    now = check_seconds(cmd.now, "now")
    graph = scope.graph
    name = _name(graph, cmd.name, "name")
    before = graph.resolve(name)
    if before is None:
        raise NotFound(f"no entity named {name!r} in scope {scope.name}")
    undone = graph.unmerge(name)
    if undone is None:
        key = graph.key(name)
        into = sorted(merge.name for merge in graph.merges.values() if graph.key(merge.into) == key)
        hint = f"; it is what {', '.join(map(repr, into))} merged into: unmerge those" if into else ""
        raise InvalidInput(f"{name!r} is no merged name nor a declared alias (names that differ only in "
                           f"spacing, a letter or an acronym's initials are one entity by their spelling)"
                           f"{hint}", field="name")
    scope.clock = max(scope.clock, now)
    if isinstance(undone, Declared):
        _reindex(scope)
    touched = dict.fromkeys(entity for entity in (graph.resolve(name), graph.resolve(
        undone.into if isinstance(undone, Merge) else undone.name)) if entity is not None)
    return EntityChanged(entities=[info_of(scope, entity) for entity in touched])


# -- resolution by embeddings ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NameEmbedFailed:
    """Embedding entity names failed beside the actor (not journaled: the names are
    embedded again later)."""

    error: str
    now: float


def _threshold(scope: ScopeMemory) -> float | None:
    settings = scope.settings
    if settings.entity_similarity is not None:
        return settings.entity_similarity
    return default_similarity(settings.embedder_name)


def _embeds_names(scope: ScopeMemory) -> bool:
    """Whether the scope resolves names by their vectors: on, with a model, whose
    threshold is known, and the model of the vectors it holds already."""
    settings = scope.settings
    return settings.entity_embeddings and settings.embed is not None and settings.embedder_name is not None \
        and scope.graph.vectors.embedder in (None, settings.embedder_name) and _threshold(scope) is not None


def names_due(scope: ScopeMemory, now: float) -> bool:
    """Whether ``name_jobs`` plans a job at ``now``: the scope resolves names by their
    vectors, none is in flight, and some names have no vector yet (when not, it
    changes nothing)."""
    if scope.replaying or not scope.settings.entity_embeddings or not scope.graph.unembedded(1):
        return False
    since = scope.names_since
    if since is not None and now - since < NAME_RETRY:
        return False
    return _embeds_names(scope)  # not: no model, none measured, or names of another model: spelling only


def name_jobs(scope: ScopeMemory, now: float) -> tuple[Job, ...]:
    """A Job embedding the names that have no vector yet, when the scope resolves
    names by their vectors, none is in flight and there are some (never in a
    replay: the journal has the results)."""
    if not names_due(scope, now):
        return ()
    settings = scope.settings
    keys = scope.graph.unembedded(NAME_BATCH)
    embed, embedder, dim, threshold = settings.embed, settings.embedder_name, settings.embedder_dim, \
        _threshold(scope)
    assert embed is not None and embedder is not None and threshold is not None
    scope.names_since = now

    async def work() -> str:
        return encode_rows(await embed(keys))

    def deliver(result: JobResult) -> ResolveNames | NameEmbedFailed:
        if result.error is not None:
            return NameEmbedFailed(f"{type(result.error).__name__}: {result.error}", now)
        return ResolveNames(keys=keys, vectors=result.value, embedder=embedder, dim=dim, threshold=threshold,
                            now=now)

    return (Job(work, deliver, name=f"scope.resolve-names {scope.app_name}/{scope.user_id}"),)


def name_embed_failed(scope: ScopeMemory, cmd: NameEmbedFailed) -> None:
    log.warning("scope %s: embedding entity names failed (%s); they resolve by spelling until a retry",
                scope.name, cmd.error)
    scope.names_since = cmd.now  # retried NAME_RETRY later


def resolve_names(scope: ScopeMemory, cmd: ResolveNames) -> Any:
    """Keep the names' vectors and record the merges they decide."""
    now = check_seconds(cmd.now, "now")
    if not isinstance(cmd.keys, list | tuple) or not all(isinstance(k, str) and k for k in cmd.keys):
        raise InvalidInput("keys must be a list of name keys", field="keys")
    if not isinstance(cmd.embedder, str) or not cmd.embedder:
        raise InvalidInput("the names' vectors need their embedder's name", field="embedder")
    dim = check_int(cmd.dim, "dim", 1, 65_536)
    threshold = cmd.threshold
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.5 <= threshold <= 1.0:
        raise InvalidInput(f"threshold must be a number in 0.5..1, got {threshold!r}", field="threshold")
    graph = scope.graph
    held = (graph.vectors.embedder, graph.vectors.dim)
    if held[0] is not None and (cmd.embedder, dim) != held:
        raise InvalidInput(f"scope {scope.name} holds name vectors of {graph.vectors.embedder!r} (dim "
                           f"{graph.vectors.dim}), not of {cmd.embedder!r} (dim {dim})", field="embedder")
    try:
        rows = decode_rows(cmd.vectors, len(cmd.keys), dim)
    except (ValueError, binascii.Error) as exc:
        raise InvalidInput(f"vectors: {exc}", field="vectors") from exc
    if scope.graph_stale:  # declarations replayed before: the mentions they find, first
        reindex_graph(scope)
    scope.names_since = None
    scope.clock = max(scope.clock, now)
    made = graph.place_vectors(list(cmd.keys), rows, cmd.embedder, float(threshold), now)
    touched = dict.fromkeys(entity for entity in (graph.resolve(m.into) for m in made) if entity is not None)
    return EntityChanged(entities=[info_of(scope, entity) for entity in touched])
