"""POST /memory/search of one scope takes the bridge's short way (``ScopeRef.search_command``
asked through ``Bridge.ask_batched``, no trio task) once queries are quick to embed,
and answers what the general way (``ScopeRef.search`` in a trio task) answers: the
same hits, the same refusals. A real server on localhost, with httpx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mnemex
from mnemex import ScopeRef

TEXTS = ["Caroline went hiking in the Alps last weekend", "Melanie painted a sunrise over the lake",
         "Caroline went to a support group yesterday", "Nate plays Counter-Strike with his team",
         "Le café de Zoë ferme à 18 h", "Melanie ran a charity race for mental health"]

SEARCHES: list[dict[str, Any]] = [
    {"query": "who went hiking?"},
    {"query": "charity race", "top_k": 3, "mode": "keyword", "min_score": None},
    {"query": "café", "mode": "fulltext", "filters": {"kind": "fact"}},
    {"query": "Caroline", "scopes": ["global", "campaign:ash"], "facets": "hits"},
    {"query": "Caroline", "scopes": ["global", "campaign"], "scope_ids": {"campaign": "ash"}},
    {"query": "nothing matches this", "mode": "keyword"},
]

REFUSED: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"query": "hiking", "top_k": 0},
     {"error": "top_k must be an integer in 1..1,000, got 0", "type": "InvalidInput", "field": "top_k"}),
    ({"query": "hiking", "mode": "semantic"},
     {"error": "mode is 'semantic'; use keyword, fulltext, vector, hybrid or DEFAULT", "type": "InvalidInput",
      "field": "mode"}),
]


def _scope(body: dict[str, Any]) -> dict[str, Any]:
    return {"user_id": "u", "app_name": "a", **body}


def _stable(answer: dict[str, Any]) -> Any:
    """What does not move between two searches (``recency`` and ``access`` do)."""
    return answer["mode"], answer.get("facets"), [
        (hit["id"], hit["content"], hit["user_id"], hit["app_name"], hit["scope"], hit["found_by"],
         hit["memory"]["content"], sorted(hit["scores"])) for hit in answer["results"]]


async def _stored(http: Any) -> None:
    memories = [{"content": text, "user_id": "u", "app_name": "a"} for text in TEXTS]
    memories.append({"content": "Caroline leads the campaign at Ash", "user_id": "u", "app_name": "a",
                     "scope_kind": "campaign", "scope_id": "ash"})
    stored = await http.post("/memory/batch", json={"memories": memories})
    assert stored.status_code == 201, stored.text
    for i in range(5):  # the embedder's rate measured: a query is then quick to embed in the loop
        assert (await http.post("/memory/search", json=_scope({"query": f"warm {i}"}))).status_code == 200


async def test_a_scopes_search_takes_the_short_way_and_finds_what_the_general_way_finds(
        tmp_path: Path, server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    async with server(mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")) as http:
        await _stored(http)
        general = []
        with monkeypatch.context() as patch:
            patch.setattr(ScopeRef, "search_command", lambda *args, **kwargs: None)  # the general way only
            for body in SEARCHES:
                answer = await http.post("/memory/search", json=_scope(body))
                assert answer.status_code == 200, (body, answer.text)
                general.append(answer.json())

        async def unreachable(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the search took the general way")

        monkeypatch.setattr(ScopeRef, "search", unreachable)  # (a 500 if it were called)
        for body, expected in zip(SEARCHES, general, strict=True):
            answer = await http.post("/memory/search", json=_scope(body))
            assert answer.status_code == 200, (body, answer.text)
            assert _stable(answer.json()) == _stable(expected), body
        assert any(hit["scope"] == "campaign:ash" for hit in general[3]["results"])
        assert general[3]["facets"] and general[5]["results"] == []


async def test_a_search_refused_on_the_short_way_is_answered_as_on_the_general_way(
        tmp_path: Path, server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    async with server(mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")) as http:
        await _stored(http)
        for body, expected in REFUSED:
            short = await http.post("/memory/search", json=_scope(body))
            with monkeypatch.context() as patch:
                patch.setattr(ScopeRef, "search_command", lambda *args, **kwargs: None)
                general = await http.post("/memory/search", json=_scope(body))
            assert (short.status_code, short.json()) == (400, expected)
            assert (general.status_code, general.json()) == (400, expected)
            assert short.content == general.content
