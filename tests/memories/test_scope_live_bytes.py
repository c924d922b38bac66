"""A scope's estimate for the memory budget counts what its full-text index keeps
between searches (the frequent terms' contributions), and lets it go with a write."""

from __future__ import annotations

import pytest

import mnemex
from mnemex.index import bm25 as bm25_module
from mnemex.memories import behaviour
from mnemex.memories.kind import scope_kind
from mnemex.memories.protocol import NewMemory, Remember, Search
from mnemex.models.hashing import HashingEmbedder

TEXTS = [f"Caroline went {['hiking', 'to the beach', 'camping'][i % 3]} with friend {i % 7} on day {i}"
         for i in range(60)]


def test_live_bytes_counts_the_kept_term_contributions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "TERM_SCORES_MIN_DF", 8)
    kind = scope_kind(mnemex.Config(data_dir=None, embedder="hashing"), HashingEmbedder())
    scope = kind.create(("a", "u"))
    assert isinstance(scope, behaviour.ScopeMemory)
    scope.handle(Remember(memories=[NewMemory(id=f"m{i:02d}", content=text) for i, text in enumerate(TEXTS)],
                          now=1_000.0))
    before = scope.live_bytes()
    scope.handle(Search(query="Caroline went hiking", mode="fulltext", now=1_001.0))
    kept = scope.bm25.kept_bytes
    assert kept > 0 and scope.live_bytes() == before + kept
    scope.handle(Remember(memories=[NewMemory(id="m99", content="a day at the lake")], now=1_002.0))
    assert scope.bm25.kept_bytes == 0


def test_live_bytes_counts_each_name_the_memories_mention() -> None:
    kind = scope_kind(mnemex.Config(data_dir=None, embedder="hashing"), HashingEmbedder())
    plain, named = kind.create(("a", "u")), kind.create(("a", "v"))
    assert isinstance(plain, behaviour.ScopeMemory) and isinstance(named, behaviour.ScopeMemory)
    plain.handle(Remember(memories=[NewMemory(id="m1", content="bees by the river")], now=1_000.0))
    named.handle(Remember(memories=[NewMemory(id="m1", content="Ana keeps bees in Lisbon")], now=1_000.0))
    assert (plain.graph.names, named.graph.names) == (0, 2)
    assert (named.live_bytes() - named.content_bytes
            == plain.live_bytes() - plain.content_bytes + 2 * behaviour.NAME_BYTES)
