"""Documents through a real server: POST /documents as JSON with the content in
base64 (and as a form, with a token), GET /documents, DELETE /documents/{id}."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

import mnemex
from mnemex.testing import text_pdf

SCOPE = {"user_id": "gm", "app_name": "campaign"}
NOTES = b"# Session 12\n\nThe party met Gandros at the tower of Ash.\n\n## Loot\n\nA silver key and a map.\n"


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing")


async def test_a_document_posted_as_json_is_searchable_listed_and_forgotten(tmp_path: Path, server: Any) -> None:
    pytest.importorskip("pypdfium2", reason="pypdfium2 is not installed: pip install 'mnemex[documents]'")
    pdf = text_pdf([[f"Page {n}: the tower of Ash holds relic number {n}."] for n in (1, 2, 3)], title="Relics")
    async with server(cfg(tmp_path)) as http:
        posted = await http.post("/documents", json={**SCOPE, "content": base64.b64encode(pdf).decode(),
                                                     "metadata": {"campaign": "ash"}, "extract": False})
        assert posted.status_code == 201, posted.text
        report = posted.json()
        document = report["document"]
        assert (report["status"], document["media_type"], document["title"], document["pages"]) == (
            "ingested", "application/pdf", "Relics", 3)
        assert len(report["ids"]) == document["chunks"] and report["extraction"] == "off"
        found = (await http.post("/memory/search", json={**SCOPE, "query": "relic", "mode": "fulltext"})).json()
        assert found["results"][0]["memory"]["metadata"]["document_id"] == document["id"]
        again = await http.post("/documents", json={**SCOPE, "content": base64.b64encode(pdf).decode()})
        assert again.status_code == 200 and again.json()["status"] == "unchanged"
        listed = await http.get("/documents", params=SCOPE)
        assert [d["document"]["id"] for d in listed.json()["documents"]] == [document["id"]]
        gone = await http.delete(f"/documents/{document['id']}", params=SCOPE)
        assert gone.status_code == 200 and sorted(gone.json()["memories"]) == sorted(report["ids"])
        assert (await http.delete(f"/documents/{document['id']}", params=SCOPE)).status_code == 404
        assert (await http.get("/documents", params=SCOPE)).json() == {"documents": []}


async def test_bad_document_requests_get_clear_4xx_answers(tmp_path: Path, server: Any) -> None:
    content = base64.b64encode(NOTES).decode()
    async with server(cfg(tmp_path)) as http:
        wrong_type = await http.post("/documents", json={**SCOPE, "content": content,
                                                         "media_type": "application/msword"})
        assert wrong_type.status_code == 400
        assert wrong_type.json()["error"].startswith("media type 'application/msword' is not one mnemex reads")
        assert wrong_type.json()["field"] == "media_type"
        typo = await http.post("/documents", json={**SCOPE, "content": content, "titel": "x"})
        assert typo.status_code == 400 and "titel" in typo.json()["error"]
        not_base64 = await http.post("/documents", json={**SCOPE, "content": "***"})
        assert not_base64.status_code == 400 and not_base64.json()["field"] == "content"
        as_text = await http.post("/documents", content=NOTES, headers={"content-type": "text/markdown"})
        assert as_text.status_code == 415
        form = await http.post("/documents", data=SCOPE, files={"content": ("notes.md", NOTES, "text/markdown")})
        assert form.status_code == 415 and "only by a server with a token" in form.json()["error"]
        assert (await http.get("/documents")).status_code == 400  # no scope given
        assert (await http.get("/documents", params=SCOPE)).json() == {"documents": []}


async def test_a_server_with_a_token_takes_a_document_as_a_form(tmp_path: Path, server: Any) -> None:
    pytest.importorskip("python_multipart", reason="python-multipart is not installed: "
                                                   "pip install 'mnemex[documents]'")
    async with server(cfg(tmp_path), token="s3cret") as http:
        auth = {"authorization": "Bearer s3cret"}
        posted = await http.post("/documents", headers=auth, data={**SCOPE, "metadata": '{"session": 12}',
                                                                   "extract": "false"},
                                 files={"content": ("session-12.md", NOTES, "text/markdown")})
        assert posted.status_code == 201, posted.text
        document = posted.json()["document"]
        assert (document["media_type"], document["title"], document["metadata"]) == (
            "text/markdown", "Session 12", {"session": 12})
        twice = await http.post("/documents", headers=auth, data={**SCOPE, "title": "a", "extract": "maybe"},
                                files={"content": ("x.md", NOTES, "text/markdown")})
        assert twice.status_code == 400 and "extract='maybe' is not a boolean" in twice.json()["error"]
