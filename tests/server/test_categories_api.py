"""Categories, actors and parts of a scope over HTTP, through a real server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mnemex
from waiting import eventually


def config(data_dir: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(data_dir), embedder="hashing")


async def test_the_http_routes_of_categories_actors_and_parts(tmp_path: Path, server: Any) -> None:
    scope = {"user_id": "gm", "app_name": "campaign"}
    async with server(config(tmp_path)) as http:
        for body in ({"content": "Gandros the wizard owes the party a favour", "actor_id": "gandros",
                      "scope_kind": "campaign", "scope_id": "ash"},
                     {"content": "The wizard's tower burned in session one", "scope_kind": "session",
                      "scope_id": "s1"},
                     {"content": "The wizard of another campaign owes nothing", "scope_kind": "campaign",
                      "scope_id": "oak"},
                     {"content": "Roll a d20 when a wizard casts"}):
            assert (await http.post("/memory", json={**scope, **body})).status_code == 201
        found = (await http.post("/memory/search", json={
            **scope, "query": "wizard", "mode": "fulltext", "scopes": ["global", "campaign", "session"],
            "scope_ids": {"campaign": "ash", "session": "s1"}, "facets": "hits"})).json()
        assert sorted(hit["scope"] for hit in found["results"]) == ["campaign:ash", "global", "session:s1"]
        assert found["facets"]["favor_owed"] == 1
        refused = await http.post("/memory/search", json={**scope, "query": "wizard", "scopes": ["campaign"]})
        assert refused.status_code == 400 and "scope_ids" in refused.json()["error"]
        by_category = (await http.post("/memory/search", json={
            **scope, "query": "wizard", "mode": "fulltext",
            "filters": {"categories": ["favor_owed"], "min_category_confidence": 0.6}})).json()
        assert {hit["scope"] for hit in by_category["results"]} == {"campaign:ash", "campaign:oak"}
        catalog = (await http.get("/categories", params=scope)).json()
        assert catalog["version"] == 0 and any(c["name"] == "quests" for c in catalog["categories"])
        changed = await http.put("/categories", json={**scope, "categories": [
            {"name": "wizards", "description": "Wizards and mages", "keywords": ["wizard", "mage"]}]})
        assert changed.status_code == 200 and changed.json()["version"] == 1
        bad = await http.put("/categories", json={**scope, "categories": [{"name": "Bad Name"}]})
        assert bad.status_code == 400 and "lower-case" in bad.json()["error"]
        unknown = await http.put("/categories", json={**scope, "categorie": []})
        assert unknown.status_code == 400

        async def reclassified() -> bool:
            return not (await http.get("/categories", params=scope)).json()["reclassifying"]

        await eventually(reclassified, what="the re-classification")
        facets = (await http.post("/memory/facets", json={**scope, "min_confidence": 0.5})).json()
        assert facets["total"] == 4 and facets["counts"]["wizards"] >= 2
        actor = (await http.get("/actors/gandros/memories", params=scope)).json()
        assert actor["total"] == 1 and actor["memories"][0]["actor_id"] == "gandros"
        health = (await http.get("/health", headers={"accept": "application/json"})).json()
        assert health["categories"]["memories"] == 4 and health["categories"]["custom_catalogs"] == 1
        document = (await http.get("/openapi.json")).json()
        assert {"/categories", "/memory/facets", "/actors/{actor_id}/memories"} <= set(document["paths"])
        assert "put" in document["paths"]["/categories"]
