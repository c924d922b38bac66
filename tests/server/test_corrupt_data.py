"""A damaged journal seen through HTTP: the scope it belongs to answers 500 naming
the file and line (its CorruptData, under ActorCrashed), nothing is cut, and every
other scope keeps serving."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import mnemex
from mnemex.persistence import actor_dir


async def test_a_flipped_byte_in_the_last_complete_journal_line_is_a_500_naming_file_and_line(
        tmp_path: Path, server: Any) -> None:
    live, image = tmp_path / "live", tmp_path / "image"
    async with mnemex.open_runtime(mnemex.Config(data_dir=str(live), embedder="hashing")) as runtime:
        for i in range(3):
            await runtime.scope(user_id="alice", app_name="chat").remember(f"memory {i} about java")
        # what a crash would leave now: three acknowledged writes journaled, no snapshot yet
        shutil.copytree(live, image, ignore=shutil.ignore_patterns("LOCK"))
    journal = actor_dir(image, "scope", ("chat", "alice")) / "journal.jsonl"
    data = bytearray(journal.read_bytes())
    data[data.rindex(b"\n", 0, len(data) - 1) + 100] ^= 0x01  # the last line's newline is still there
    journal.write_bytes(bytes(data))

    config = mnemex.Config(data_dir=str(image), embedder="hashing", restore_backoff=0.0)
    async with server(config) as http:
        search = {"query": "java", "user_id": "alice", "app_name": "chat"}
        for _attempt in range(2):  # the first load fails, then the scope is held back: both say why
            r = await http.post("/memory/search", json=search)
            assert r.status_code == 500, r.text
            assert f"{journal}: line 3: damaged (checksum mismatch) although complete" in r.json()["error"]
        other = await http.post("/memory/search", json={**search, "user_id": "bob"})
        assert other.status_code == 200, other.text
    assert journal.read_bytes() == bytes(data)  # reported, never cut
