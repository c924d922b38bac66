"""The entity graph through a real server: GET /entities, /entities/{name},
/entities/{name}/related, POST /entities (declare), POST /entities/{name}/aliases
(merge), DELETE /entities/{name}/aliases/{alias} (unmerge), hits saying which
signal found them, and /health's graph statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

import mnemex

SCOPE = {"user_id": "gm", "app_name": "campaign"}
NOTES = ["The party rescued Gandros from the Black Tower.",
         "Gandros owes the party a debt for the rescue.",
         "Aria met the Grey Pilgrim in Saltmere.",
         "The Grey Pilgrim is Gandros in disguise, Aria suspects."]


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")


async def test_entities_routes_declare_read_merge_and_unmerge(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        declared = await http.post("/entities", json={**SCOPE, "name": "Gandros", "type": "npc",
                                                      "aliases": ["the wizard"]})
        assert declared.status_code == 200, declared.text
        assert declared.json()["entities"][0] == {"name": "Gandros", "type": "npc", "aliases": ["the wizard"],
                                                  "declared": True}
        stored = await http.post("/memory/batch", json={"memories": [{**SCOPE, "content": n} for n in NOTES]})
        assert stored.status_code == 201, stored.text
        listed = (await http.get("/entities", params={**SCOPE, "type": "npc"})).json()
        assert [(e["name"], e["mentions"]) for e in listed["entities"]] == [("Gandros", 3)]
        everything = (await http.get("/entities", params={**SCOPE, "limit": 2})).json()
        assert everything["total"] == 5 and len(everything["entities"]) == 2
        one = (await http.get("/entities/the wizard", params={**SCOPE, "memories": 1})).json()
        assert one["entity"]["name"] == "Gandros" and len(one["memories"]) == 1
        assert {n["entity"]["name"] for n in one["neighbours"]} == {"Black Tower", "Grey Pilgrim", "Aria"}
        related = (await http.get("/entities/Black Tower/related", params={**SCOPE, "depth": 2})).json()
        assert (related["related"][0]["entity"]["name"], related["related"][0]["hops"]) == ("Gandros", 1)
        assert {r["entity"]["name"] for r in related["related"] if r["hops"] == 2} == {"Grey Pilgrim", "Aria"}

        merged = await http.post("/entities/Gandros/aliases", json={**SCOPE, "names": ["Grey Pilgrim"]})
        assert merged.status_code == 200, merged.text
        assert merged.json()["entities"][0]["mentions"] == 4
        assert (await http.get("/entities/grey pilgrim", params=SCOPE)).json()["entity"]["name"] == "Gandros"
        found = (await http.post("/memory/search", json={**SCOPE, "query": "what does the wizard owe",
                                                         "mode": "hybrid"})).json()
        by_content = {hit["content"]: hit["found_by"] for hit in found["results"]}
        assert "graph" in by_content[NOTES[1]] and "graph" in by_content[NOTES[3]]
        unmerged = await http.delete("/entities/Gandros/aliases/Grey Pilgrim", params=SCOPE)
        assert unmerged.status_code == 200, unmerged.text
        alone = (await http.get("/entities/grey pilgrim", params=SCOPE)).json()
        assert alone["entity"]["name"] == "Grey Pilgrim"

        health = await http.get("/health", headers={"Accept": "application/json"})
        graph = health.json()["graph"]
        assert (graph["scopes"], graph["entities"], graph["declared"], graph["merges"]) == (1, 5, 1, 0)
        assert graph["mentions"] >= 7 and graph["relations"] >= 4


async def test_bad_entity_requests_get_clear_4xx_answers(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await http.post("/memory", json={**SCOPE, "content": "Gandros lives in the Black Tower."})
        missing = await http.get("/entities/Sauron", params=SCOPE)
        assert missing.status_code == 404 and "Sauron" in missing.json()["error"]
        no_scope = await http.get("/entities")
        assert no_scope.status_code == 400
        bad_depth = await http.get("/entities/Gandros/related", params={**SCOPE, "depth": 3})
        assert bad_depth.status_code == 400 and "depth" in bad_depth.text
        bad_type = await http.post("/entities", json={**SCOPE, "name": "Aria", "type": "two words"})
        assert bad_type.status_code == 400 and "type" in bad_type.text
        typo = await http.post("/entities", json={**SCOPE, "name": "Aria", "kind": "npc"})
        assert typo.status_code in (400, 422) and "kind" in typo.text
        unknown = await http.post("/entities/Gandros/aliases", json={**SCOPE, "names": ["Nobody"]})
        assert unknown.status_code == 404
        not_alias = await http.delete("/entities/Gandros/aliases/Black Tower", params=SCOPE)
        assert not_alias.status_code == 404 and "no alias" in not_alias.text


async def test_a_merge_decided_by_embeddings_shows_how_over_http(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        stored = await http.post("/memory/batch", json={"memories": [
            {**SCOPE, "content": "We camped below the Tower of Gandros."},
            {**SCOPE, "content": "Gandros Tower was dark at midnight."}]})
        assert stored.status_code == 201, stored.text
        for _ in range(500):  # the names' embedding job, beside the scope
            health = (await http.get("/health", headers={"Accept": "application/json"})).json()
            if health["graph"]["names_pending"] == 0 and health["graph"]["embedding_merges"]:
                break
            await trio.sleep(0.01)
        assert health["graph"]["embedding_merges"] == 1
        tower = (await http.get("/entities/tower of gandros", params=SCOPE)).json()["entity"]
        assert tower["mentions"] == 2
        [record] = tower["merged"]
        assert record["how"] == "embedding" and record["score"] >= 0.8
        assert {record["name"], record["into"]} == {"tower of gandros", "gandros tower"}
