"""The ``scope`` actor kind: ScopeMemory behaviours, their codec, and the model they
embed with.

A kind made by ``scope_kind`` can rebuild scopes from disk on its own (replay needs no
model: the vectors are in the journal). A runtime serving it gives it the runtime's
embedding batcher (``served_by``), so the sessions a scope embeds in its jobs and the
texts refs embed go through one batcher.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from mnemex.config import Config
from mnemex.effects import Behaviour, Beside, Image, Key
from mnemex.errors import InvalidInput
from mnemex.index import GraphBuilder, RowFiles
from mnemex.kernel import ActorKind
from mnemex.memories.behaviour import (
    READ_AHEAD_MAX,
    EmbedTexts,
    ScopeMemory,
    ScopeSettings,
    is_scope_write,
    scope_codec,
)
from mnemex.memories.extraction import RunExtraction, Timer
from mnemex.memories.protocol import NewMemory, Remember, Search
from mnemex.memories.ranking import CosineScale
from mnemex.models.hashing import Embedder
from mnemex.persistence.recordfiles import RecordFiles

__all__ = ["SCOPE_KIND", "ScopeKind", "cosine_scale_of", "scope_kind"]

SCOPE_KIND: Final = "scope"


def _search_beside(behaviour: Behaviour, command: Any) -> Beside | None:
    """The scope kind's ``read_beside``: its searches (``ScopeMemory.search_beside``)."""
    return behaviour.search_beside(command) if isinstance(behaviour, ScopeMemory) else None


def _is_search(command: Any) -> bool:
    """The scope kind's ``inline_read``: searches (``_searches_inline`` says when)."""
    return type(command) is Search


def _searches_inline(behaviour: Behaviour, command: Any) -> bool:
    """The scope kind's ``inline_when``: ``ScopeMemory.searches_inline``."""
    return isinstance(behaviour, ScopeMemory) and behaviour.searches_inline(command)


def _read_ahead(behaviour: Behaviour, commands: Sequence[Any]) -> None:
    """The scope kind's ``read_ahead``: ``ScopeMemory.read_ahead``."""
    if isinstance(behaviour, ScopeMemory):
        behaviour.read_ahead(commands)


def _replay(behaviour: Behaviour, commands: Iterable[Any]) -> None:
    if not isinstance(behaviour, ScopeMemory):
        raise TypeError(f"the scope kind replays into a ScopeMemory, not {type(behaviour).__name__}")
    behaviour.replay(commands)


@dataclass(frozen=True, slots=True)
class ScopeKind(ActorKind):
    """The ``scope`` actor kind, with the embedder its scopes and refs embed with."""

    embedder: Embedder | None = None
    settings: ScopeSettings = dataclasses.field(default_factory=ScopeSettings)

    def warm(self) -> None:
        """Build what every scope of these settings shares in this process (the
        stemmer and its term table, the category classifier, the vocabulary the name
        finder reads, the modules they import) by storing a few sentences in a scope
        that is thrown away: a runtime does it as it opens, so the first write of the
        first scope does not pay for it (about 0.1-0.2 s). Once per process and
        settings; deterministic, no I/O but reading the package's own data."""
        settings = self.settings
        marker = (settings.fulltext_stem, settings.fold_accents, settings.category_threshold,
                  settings.entity_detection)
        if marker in _WARMED:
            return
        name, dim = settings.embedder_name, settings.embedder_dim
        vector = None
        if name is not None and dim > 0:  # the vector index's first insert imports what it uses
            vector = np.eye(1, dim, dtype="<f4").tobytes()
        scope = ScopeMemory(("mnemex", "warm-up"), settings)
        memories = [NewMemory(id=f"warm-{i}", content=text, vector=vector)
                    for i, text in enumerate(_WARM_TEXTS)]
        step = max(1, settings.max_memories_per_command)  # (a config may allow fewer in a command)
        for start in range(0, len(memories), step):
            scope.handle(Remember(memories=memories[start:start + step],
                                  embedder=name if vector is not None else None,
                                  dim=dim if vector is not None else 0, now=0.0, classify=True))
        _WARMED.add(marker)

    def served_by(self, embed: EmbedTexts, extract: RunExtraction | None = None,
                  timer: Timer | None = None, graph_builder: GraphBuilder | None = None,
                  row_files: RowFiles | None = None, *,
                  record_files: RecordFiles | None = None) -> ScopeKind:
        """This kind with ``embed`` as what its scopes' jobs embed with (the runtime's
        batcher), ``extract`` what runs their extraction jobs, ``timer`` what
        their extraction timers sleep with, ``graph_builder`` where their HNSW
        graphs are built (None: in the jobs' threads), ``row_files`` where large
        scopes keep their vector rows and ``record_files`` their records (None: in
        memory)."""
        settings = dataclasses.replace(self.settings, embed=embed, extract=extract, timer=timer,
                                       graph_builder=graph_builder, row_files=row_files,
                                       record_files=record_files)
        return _build(self.name, self.embedder, settings)


_WARMED: set[tuple[object, ...]] = set()
_WARM_TEXTS: Final = (
    "Caroline: I went to the Black Tower with Luna yesterday, and we talked about NASA's plans.",
    "Melanie: Working on my painting classes this week; the kids loved the museum trip!",
    # the tokenizer's expressions for text beyond ASCII, within the BMP and beyond it
    # (about 20 ms each to compile)
    "Zoë: the café in München \u2013 and 東京 next spring.",
    "Zoë: a yoga class 🧘 at the café.",
)


def _build(name: str, embedder: Embedder | None, settings: ScopeSettings) -> ScopeKind:
    def create(key: Key) -> ScopeMemory:
        return ScopeMemory(key, settings)

    def restore(key: Key, image: Image) -> ScopeMemory:
        return ScopeMemory.restore(key, image, settings)

    return ScopeKind(name=name, create=create, restore=restore, encode=scope_codec.encode,
                     decode=scope_codec.decode, is_journaled=is_scope_write, replay=_replay,
                     inline_read=_is_search, inline_when=_searches_inline, read_beside=_search_beside,
                     read_ahead=_read_ahead, read_ahead_max=READ_AHEAD_MAX,
                     embedder=embedder, settings=settings)


def cosine_scale_of(embedder: object) -> CosineScale:
    """How ``embedder``'s cosines read: its ``cosine_scale`` (floor, ceiling, crowded),
    or all-MiniLM-L6-v2's when it declares none."""
    scale = getattr(embedder, "cosine_scale", None)
    if isinstance(scale, tuple) and len(scale) == 3 and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in scale):
        return CosineScale(*(float(x) for x in scale))
    return CosineScale()


def scope_kind(config: Config | None = None, embedder: Embedder | None = None, *,
               name: str = SCOPE_KIND) -> ScopeKind:
    """The ``scope`` actor kind: ScopeMemory behaviours set up from ``config``, embedding
    with ``embedder`` (default: the one ``config.models.embedder`` names). Pass
    ``open_runtime(config, kinds=[scope_kind(config, my_embedder)])`` to use your own;
    it takes the place of the built-in one."""
    cfg = config if config is not None else Config()
    if embedder is None:
        from mnemex.models.embedders import embedder_from_config

        embedder = embedder_from_config(cfg)
    if not isinstance(getattr(embedder, "name", None), str) or not isinstance(
            getattr(embedder, "dim", None), int):
        raise InvalidInput(f"{embedder!r} is not an Embedder (name: str, dim: int, embed(texts))",
                           field="embedder")
    settings = ScopeSettings.from_config(cfg, embedder_name=embedder.name, embedder_dim=embedder.dim,
                                         embedder_cosines=cosine_scale_of(embedder))
    return _build(name, embedder, settings)
