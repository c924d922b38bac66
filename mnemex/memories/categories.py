"""The categories of a scope's memories, its actors' memories, and the parts of a
scope (global, campaign, session, actor): the scope's side of
:mod:`mnemex.knowledge.categories`.

* **Classified as stored.** Every memory gets categories with confidences in the
  command that stores it: a caller's own (``classified_by`` ``caller``, no
  confidences: they count as 1.0), an extractor's (the LLM's, or the rules
  extractor's) kept where at least ``knowledge.category_threshold``, else the
  offline classifier's over the scope's catalog; ``misc`` when nothing reaches
  the threshold. The classifier is pure and deterministic, so it runs in the
  handler and replay classifies as the first run did (its version is on each
  memory it classified).
* **The catalog** is the defaults until an app changes it (``SetCategories``,
  journaled). A change starts a **re-classification** beside the actor: a job
  classifies the next :data:`BATCH` memories (in id order) with the new catalog
  in a worker thread and comes back as the journaled ``ApplyClassification``;
  the next job starts when it is applied, until every memory is covered. Its
  progress (the catalog's version, the last id covered) is in the snapshot, so
  after a restart the next command that plans jobs resumes it. A caller's own
  categories are never changed; an extractor's are kept where the catalog
  still has them.
* **Facets**: memories per category, over hits or over what a filter lets
  through.
* **Actors**: an actor's memories are those whose ``actor_id`` it is and those
  in its own part of the scope (``scope_kind`` ``actor``). :func:`graph_docs` is
  where the entity graph adds the memories that mention the actor by any alias.

Nothing here reads a clock or does I/O; the handlers run inside the scope's
``handle`` (this module is a part of ``ScopeMemory`` kept apart, as
``memories.documents`` is).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec
import numpy as np

from mnemex._checks import check_int
from mnemex._time import check_seconds
from mnemex.effects import Job, JobResult, Step
from mnemex.errors import InvalidInput
from mnemex.index import Tokenizer
from mnemex.knowledge.categories import (
    CLASSIFIER,
    DEFAULT_CATEGORIES,
    DEFAULT_THRESHOLD,
    MISC,
    Category,
    Classifier,
    check_catalog,
    check_category_name,
    merged_catalog,
    shared_classifier,
)
from mnemex.memories.fields import check_memory_id
from mnemex.memories.filters import doc_array
from mnemex.memories.protocol import (
    ApplyClassification,
    CategoryCatalog,
    Classified,
    Facets,
    GetActorMemories,
    GetFacets,
    Hit,
    MemoryPage,
    MemoryRecord,
    SetCategories,
)

if TYPE_CHECKING:
    from mnemex.memories.behaviour import ScopeMemory

__all__ = [
    "BATCH",
    "CALLER",
    "ClassificationFailed",
    "ScopeCategories",
    "actor_memories",
    "apply_classification",
    "facets_of_hits",
    "facets_of_mask",
    "get_facets",
    "graph_docs",
    "set_categories",
]

BATCH: Final = 2000
"""Memories one re-classification job covers."""
CALLER: Final = "caller"
"""``classified_by`` of categories a caller gave."""
_STALE: Final = 120.0
"""Seconds after which a re-classification job planned but never delivered (lost)
is planned again."""


@dataclass(frozen=True, slots=True)
class ClassificationFailed:
    """A re-classification job failed beside the actor (never journaled): it is
    planned again by the next command."""

    version: int
    error: str


def _is_extracted(record: MemoryRecord) -> bool:
    """Whether an extractor chose the record's categories."""
    by = record.classified_by
    if by is None:  # stored before classification existed: an extractor's if it had categories
        return bool(record.categories) and record.extractor is not None
    return by not in (CALLER, CLASSIFIER) and not by.startswith("rules-classifier")


def _reclassified(record: MemoryRecord, classifier: Classifier,
                  catalog: frozenset[str]) -> tuple[tuple[str, ...], tuple[float, ...], str] | None:
    """The record's categories under a new catalog: None to leave them."""
    if record.classified_by == CALLER or (record.classified_by is None and record.categories
                                          and record.extractor is None):
        return None
    if _is_extracted(record):
        confidences = record.category_confidences
        kept = [(name, confidences[i] if i < len(confidences) else 1.0)
                for i, name in enumerate(record.categories) if name in catalog]
        kept = [(name, value) for name, value in kept if value >= classifier.threshold]
        if kept:
            return tuple(n for n, _ in kept), tuple(v for _, v in kept), str(record.classified_by or
                                                                           record.extractor)
    names, values = classifier.classify(record.content)
    return names, values, CLASSIFIER


class ScopeCategories:
    """A scope's catalog, its offline classifier and the re-classification's
    progress (see the module doc)."""

    __slots__ = ("_classifier", "_next", "_queue", "after", "catalog", "covered", "planned_at",
                 "reclassifying", "threshold", "tokenizer", "version")

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, tokenizer: Tokenizer | None = None) -> None:
        self.threshold = threshold
        self.tokenizer = tokenizer
        self.catalog: tuple[Category, ...] = DEFAULT_CATEGORIES
        self.version = 0
        self.reclassifying = False
        self.after: str | None = None     # the last id the re-classification covered
        self.covered = 0                  # memories it covered so far
        self.planned_at: float | None = None  # transient: a job in flight since then
        self._classifier: Classifier | None = None
        # transient: the ids still to cover, in order, from ``_next`` on (sorted once per run)
        self._queue: list[str] | None = None
        self._next = 0

    @property
    def classifier(self) -> Classifier:
        if self._classifier is None:
            self._classifier = shared_classifier(self.catalog, self.threshold, self.tokenizer)
        return self._classifier

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.classifier.names)

    def as_dict(self) -> dict[str, str]:
        """The catalog as the extraction prompt shows it: name -> description."""
        return {category.name: category.description for category in self.catalog}

    # -- classifying what is stored ------------------------------------------------------------
    def classify_new(self, record: MemoryRecord, *, confidences: Sequence[float] = (),
                     by: str | None = None, tokens: Sequence[str] | None = None) -> MemoryRecord:
        """``record`` with its categories: a caller's (``by`` None, categories given)
        kept as given; an extractor's (``by``) kept where confident enough; else the
        offline classifier's."""
        if record.categories and by is None:
            return msgspec.structs.replace(record, classified_by=CALLER, category_confidences=())
        if record.categories:
            pairs = [(name, float(value)) for name, value in zip(record.categories, confidences, strict=False)
                     if value >= self.threshold]
            if not confidences:
                pairs = [(name, 1.0) for name in record.categories]
            if pairs:
                return msgspec.structs.replace(record, categories=tuple(n for n, _ in pairs),
                                               category_confidences=tuple(v for _, v in pairs),
                                               classified_by=by)
        names, values = self.classifier.classify(record.content, tokens)
        return msgspec.structs.replace(record, categories=names, category_confidences=values,
                                       classified_by=CLASSIFIER)

    def updated(self, old: MemoryRecord, new: MemoryRecord, changes: Mapping[str, Any]) -> MemoryRecord:
        """A memory after an update: categories given are the caller's; a new content
        is classified again when the offline classifier chose the old one's."""
        if "categories" in changes:
            return msgspec.structs.replace(new, category_confidences=(), classified_by=CALLER)
        if "content" in changes and new.content != old.content and old.classified_by == CLASSIFIER:
            names, values = self.classifier.classify(new.content)
            return msgspec.structs.replace(new, categories=names, category_confidences=values,
                                           classified_by=CLASSIFIER)
        return new

    # -- the catalog -----------------------------------------------------------------------------
    def info(self, scope: ScopeMemory) -> CategoryCatalog:
        visible = scope.table.visible()
        counts = facets_of_mask(scope, visible)
        return CategoryCatalog(categories=list(self.catalog), version=self.version, counts=counts,
                               threshold=self.threshold, classifier=CLASSIFIER,
                               reclassifying=self.reclassifying, reclassified=self.covered,
                               total=len(scope.doc_of))

    # -- the re-classification ------------------------------------------------------------------
    def is_due(self, scope: ScopeMemory, now: float) -> bool:
        """Whether ``jobs`` may plan a job at ``now`` (when not, it changes nothing)."""
        if not self.reclassifying or scope.replaying:
            return False
        return self.planned_at is None or not now - self.planned_at < _STALE

    def jobs(self, scope: ScopeMemory, now: float) -> tuple[Job, ...]:
        """The next re-classification job, when one is due and none is in flight."""
        if not self.is_due(scope, now):
            return ()
        after = self.after
        queue = self._queue
        if queue is None:  # memories stored later were classified with this catalog already
            queue = self._queue = sorted(memory_id for memory_id in scope.doc_of
                                         if after is None or memory_id > after)
            self._next = 0
        while self._next < len(queue) and after is not None and queue[self._next] <= after:
            self._next += 1
        batch = [memory_id for memory_id in queue[self._next:self._next + BATCH] if memory_id in scope.doc_of]
        last = self._next + BATCH >= len(queue)
        records = [record for record in scope.records_at([scope.doc_of[memory_id] for memory_id in batch])
                   if record is not None]
        self.planned_at = now
        version, catalog, threshold, tokenizer = self.version, self.catalog, self.threshold, self.tokenizer

        def work() -> list[Classified]:
            classifier = Classifier(catalog, threshold, tokenizer)
            names = frozenset(classifier.names)
            out: list[Classified] = []
            for record in records:
                found = _reclassified(record, classifier, names)
                if found is not None and (found[0], found[1]) != (record.categories,
                                                                  record.category_confidences):
                    out.append(Classified(record.id, found[0], found[1], found[2]))
            return out

        upto = queue[min(len(queue), self._next + BATCH) - 1] if queue[self._next:] else (after or "")

        def deliver(result: JobResult) -> ApplyClassification | ClassificationFailed:
            if result.error is not None:
                return ClassificationFailed(version, f"{type(result.error).__name__}: {result.error}")
            return ApplyClassification(version=version, after=after, upto=upto, results=result.value,
                                       covered=len(records), last=last, now=now)

        return (Job(work, deliver, name=f"scope.reclassify {scope.app_name}/{scope.user_id}"),)

    def failed(self, failure: ClassificationFailed) -> None:
        if failure.version == self.version:
            self.planned_at = None

    # -- snapshots -------------------------------------------------------------------------------
    def to_extra(self) -> dict[str, Any] | None:
        if self.version == 0:
            return None
        return {"catalog": [msgspec.to_builtins(category) for category in self.catalog],
                "version": self.version, "reclassifying": self.reclassifying, "after": self.after,
                "covered": self.covered}

    def load_extra(self, data: Mapping[str, Any] | None) -> None:
        if not data:
            return
        self.catalog = tuple(msgspec.convert(item, Category) for item in data.get("catalog", ()))
        self.version = int(data.get("version", 0))
        self.reclassifying = bool(data.get("reclassifying", False))
        after = data.get("after")
        self.after = after if isinstance(after, str) else None
        self.covered = int(data.get("covered", 0))
        self._classifier = None
        self._queue = None


# -- handlers (inside ScopeMemory.handle) -------------------------------------------------------------
def set_categories(scope: ScopeMemory, cmd: SetCategories) -> Any:
    """Change the catalog and start re-classifying; a change that changes nothing is
    not journaled."""
    now = check_seconds(cmd.now, "now")
    given = check_catalog(cmd.categories)
    if not isinstance(cmd.remove, list | tuple):
        raise InvalidInput("remove must be a list of category names", field="remove")
    remove = [check_category_name(name, "remove") for name in cmd.remove]
    if not isinstance(cmd.replace, bool):
        raise InvalidInput(f"replace must be true or false, got {cmd.replace!r}", field="replace")
    state = scope.categories
    catalog = merged_catalog(state.catalog, given, remove, cmd.replace)
    if catalog == state.catalog and cmd.reclassify is not True:
        return Step(state.info(scope), unchanged=True)
    # valid: from here on the state changes
    scope.clock = max(scope.clock, now)
    state.catalog = catalog
    state._classifier = None
    state.version += 1
    state.reclassifying = True
    state.after = None
    state.covered = 0
    state.planned_at = None
    state._queue = None
    return Step(state.info(scope), state.jobs(scope, now))


def apply_classification(scope: ScopeMemory, cmd: ApplyClassification) -> Any:
    """A re-classification batch: the memories' new categories, the progress moved on,
    the next batch planned. A batch of an older catalog, or out of turn, changes
    nothing (and is not journaled)."""
    now = check_seconds(cmd.now, "now")
    state = scope.categories
    version = check_int(cmd.version, "version", 0)
    if version != state.version or not state.reclassifying or cmd.after != state.after:
        return Step(None, unchanged=True)
    if not isinstance(cmd.results, list | tuple):
        raise InvalidInput("results must be a list", field="results")
    checked: list[Classified] = []
    names = state.names | {MISC}
    for index, item in enumerate(cmd.results):
        if not isinstance(item, Classified) or len(item.categories) != len(item.confidences):
            raise InvalidInput(f"results[{index}] must be a Classified with one confidence per category",
                               field=f"results[{index}]")
        check_memory_id(item.id, f"results[{index}].id")
        for value in item.confidences:
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and 0.0 <= value <= 1.0):
                raise InvalidInput(f"results[{index}]: confidence {value!r} is not in 0..1",
                                   field=f"results[{index}]")
        if any(name not in names for name in item.categories):
            continue  # a name the catalog lost meanwhile: left as it was
        checked.append(item)
    # valid: from here on the state changes
    scope.clock = max(scope.clock, now)
    for item in checked:
        scope.change_record(item.id, lambda record, item=item: msgspec.structs.replace(  # type: ignore[misc]
            record, categories=tuple(item.categories), category_confidences=tuple(item.confidences),
            classified_by=item.classified_by))
    state.after = cmd.upto or state.after
    state.covered += max(0, int(cmd.covered))
    state.planned_at = None
    if cmd.last:
        state.reclassifying = False
        state._queue = None
    return Step(None, state.jobs(scope, now))


def facets_of_mask(scope: ScopeMemory, allowed: np.ndarray[Any, Any] | None,
                   min_confidence: float = 0.0) -> dict[str, int]:
    """Memories per category among ``allowed`` (None: every live memory), most first."""
    table = scope.table
    counts: dict[str, int] = {}
    for name in list(table.values_of("categories")):
        docs = table.category_docs(name, min_confidence)
        if not docs:
            continue
        if allowed is None:
            count = len(docs)
        else:
            ids = doc_array(docs)
            ids = ids[ids < len(allowed)]
            count = int(np.count_nonzero(allowed[ids]))
        if count:
            counts[name] = count
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def facets_of_hits(hits: Iterable[Hit]) -> dict[str, int]:
    """Hits per category, most first."""
    counts: dict[str, int] = {}
    for hit in hits:
        for name in hit.memory.categories:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def get_facets(scope: ScopeMemory, cmd: GetFacets) -> Facets:
    least = cmd.min_confidence
    if isinstance(least, bool) or not isinstance(least, int | float) or not 0.0 <= least <= 1.0:
        raise InvalidInput(f"min_confidence must be a number in 0..1, got {least!r}", field="min_confidence")
    allowed = scope.allowed_docs(cmd.filter, cmd.include_history, cmd.as_of)
    total = len(scope.doc_of) if allowed is None else int(np.count_nonzero(allowed))
    return Facets(counts=facets_of_mask(scope, allowed, float(least)), total=total)


# -- actors ------------------------------------------------------------------------------------------
def graph_docs(scope: ScopeMemory, actor_id: str) -> set[int]:
    """The docs of memories the entity graph links to actor ``actor_id`` (memories that
    mention its entity by any alias). The hook for the entity graph: a scope whose
    ``graph`` attribute has ``actor_docs(actor_id) -> Iterable[int]`` adds those docs to
    ``actor_memories``; without a graph, none."""
    graph = getattr(scope, "graph", None)
    docs = getattr(graph, "actor_docs", None)
    return set(docs(actor_id)) if callable(docs) else set()


def actor_memories(scope: ScopeMemory, cmd: GetActorMemories) -> MemoryPage:
    actor_id = check_memory_id(cmd.actor_id, "actor_id")
    limit = cmd.limit
    if limit is not None:
        check_int(limit, "limit", 0)
    offset = check_int(cmd.offset, "offset", 0)
    table = scope.table
    docs = set(table.values_of("actor_id").get(actor_id, ()))
    docs |= table.values_of("scope").get(f"actor:{actor_id}", set())
    docs |= graph_docs(scope, actor_id)
    visible = scope.allowed_docs(None, cmd.include_history, None)
    if visible is not None:
        docs = {doc for doc in docs if doc < len(visible) and visible[doc]}
    ids = sorted(map(scope.memory_id_at, docs))
    stop = None if limit is None else offset + limit
    page = [scope.docs_record(scope.doc_of[memory_id]) for memory_id in ids[offset:stop]]
    return MemoryPage(memories=page, total=len(ids), limit=limit, offset=offset)
