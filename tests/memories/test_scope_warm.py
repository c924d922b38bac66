"""A runtime builds what its scopes share in the process (stemmer and term table,
category classifier, the name finder's vocabulary) as it opens, so that the first
write of the first scope does not pay for it (issue 17: scope start-up)."""

from __future__ import annotations

import pathlib

import pytest
import trio

import mnemex
from mnemex.index import tokenizer as tokenizer_module
from mnemex.knowledge import entities
from mnemex.memories import behaviour
from mnemex.memories import kind as kind_module
from mnemex.memories.kind import scope_kind


def test_warm_fills_the_shared_tables_once_and_touches_no_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kind_module, "_WARMED", set())
    monkeypatch.setattr(tokenizer_module, "_TERMS", {})
    behaviour._scope_tokenizer.cache_clear()  # (the scopes' tokenizer read the table it replaced)
    monkeypatch.setattr(entities, "_TOKENS", {})
    kind = scope_kind(mnemex.Config(embedder="hashing"))
    kind.warm()
    tables = list(tokenizer_module._TERMS.values())
    assert len(tables) == 1 and tables[0]["tower"] == "tower" and tables[0]["talked"] == "talk"
    assert "Black" in entities._TOKENS and "NASA's" in entities._TOKENS
    assert len(kind_module._WARMED) == 1

    def refuse(*args: object) -> None:
        raise AssertionError("warmed twice")

    monkeypatch.setattr(kind_module, "ScopeMemory", refuse)
    kind.warm()  # the same settings: nothing is built again
    other = scope_kind(mnemex.Config(embedder="hashing", fulltext_stem=False))
    with pytest.raises(AssertionError, match="warmed twice"):
        other.warm()  # other settings are warmed on their own


def test_open_runtime_warms_and_stores_nothing(tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kind_module, "_WARMED", set())

    async def main() -> None:
        async with mnemex.open_runtime(mnemex.Config(data_dir=str(tmp_path), embedder="hashing")) as rt:
            assert len(kind_module._WARMED) == 1
            assert rt.scope_keys() == []  # the warm-up scope is thrown away, never stored

    trio.run(main)
