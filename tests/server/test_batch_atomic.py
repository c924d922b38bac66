"""POST /memory/batch is all or nothing across scopes: hypothesis draws batches over
one to four scopes with some items broken in one way each; either every memory is
stored in its own scope, or the answer is a 4xx naming a broken item and no scope
holds anything from the batch.

One real server per test; hypothesis runs its examples in a worker thread with a
blocking httpx client, while the server keeps serving in the test's trio run. Each
example writes to scopes of its own, so examples cannot see each other's memories."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemex

MAX_CONTENT = 256
MARK = "batchmark"  # every stored content carries it: a keyword search for it finds the scope's memories
LAST_SECOND = int(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp())

# (field, value): one defect each; the 4xx must name memories[i].<field>
DEFECTS: list[tuple[str, Any]] = [
    ("content", ""),
    ("content", f"{MARK} " + "x" * MAX_CONTENT),
    ("importance", 2.0),
    ("colour", "red"),
    ("timestamp", "0001-01-01T00:00:00Z"),
    ("timestamp", 1e13),
    ("timestamp", -5),
    ("timestamp", "not a time"),
]

FIELD = re.compile(r"memories\[(\d+)\]\.(\w+)")


def cfg(tmp_path: Path) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data"), embedder="hashing", max_content_bytes=MAX_CONTENT)


valid_fields = st.fixed_dictionaries({}, optional={
    "importance": st.floats(0.0, 1.0),
    "timestamp": st.one_of(
        st.integers(0, LAST_SECOND),
        st.integers(0, LAST_SECOND).map(
            lambda s: datetime.fromtimestamp(s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))),
    "categories": st.lists(st.sampled_from(["work", "pets", "food"]), max_size=2, unique=True),
})


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[tuple[int, dict[str, Any]]], dict[int, str]]:
    """Items as (scope number, fields but content and scope), and the defective
    items' indexes with the field each one gets wrong."""
    scopes = draw(st.integers(1, 4))
    size = draw(st.integers(1, 8))
    items = [(draw(st.integers(0, scopes - 1)), draw(valid_fields)) for _ in range(size)]
    broken = draw(st.sets(st.integers(0, size - 1), max_size=min(size, 2)))  # shrinks to no defect
    defects: dict[int, str] = {}
    for index in sorted(broken):
        field, value = draw(st.sampled_from(DEFECTS))
        scope, fields = items[index]
        items[index] = (scope, {**fields, field: value})
        defects[index] = field
    return items, defects


def search_scope(client: httpx.Client, user_id: str) -> set[str]:
    r = client.post("/memory/search", json={"query": MARK, "user_id": user_id, "app_name": "batch",
                                            "mode": "keyword", "top_k": 100})
    assert r.status_code == 200, r.text
    return {hit["id"] for hit in r.json()["results"]}


def check_batches(base_url: str) -> None:
    examples = itertools.count()

    @settings(max_examples=40)
    @given(batch=batches())
    def batch_is_stored_whole_or_not_at_all(batch: tuple[list[tuple[int, dict[str, Any]]], dict[int, str]]
                                            ) -> None:
        items, defects = batch
        example = next(examples)
        users = [f"user{example}-{scope}" for scope, _ in items]
        memories = [{"content": f"{MARK} item {i}", "user_id": user, "app_name": "batch", **fields}
                    for i, (user, (_, fields)) in enumerate(zip(users, items, strict=True))]
        with httpx.Client(base_url=base_url, timeout=10) as client:
            r = client.post("/memory/batch", json={"memories": memories})
            if defects:
                assert 400 <= r.status_code < 500, (r.status_code, r.text)
                body = r.json()
                named = FIELD.fullmatch(body.get("field", ""))
                assert named is not None, body
                assert defects.get(int(named[1])) == named[2], (defects, body)
                for user in set(users):
                    assert search_scope(client, user) == set(), f"scope {user} kept part of a refused batch"
                return
            assert r.status_code == 201, r.text
            ids = r.json()["ids"]
            assert len(ids) == len(memories) == len(set(ids))
            for memory_id, memory in zip(ids, memories, strict=True):
                got = client.get(f"/memory/{memory_id}", params={"user_id": memory["user_id"],
                                                                 "app_name": "batch"})
                assert got.status_code == 200, got.text
                assert got.json()["content"] == memory["content"]
                if "importance" in memory:
                    assert got.json()["importance"] == memory["importance"]
            for user in set(users):  # each scope holds its own items, nothing of another's
                assert search_scope(client, user) == {i for i, m in zip(ids, memories, strict=True)
                                                      if m["user_id"] == user}

    batch_is_stored_whole_or_not_at_all()


async def test_a_batch_is_stored_whole_or_not_at_all(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path)) as http:
        await trio.to_thread.run_sync(check_batches, str(http.base_url))


async def test_a_batch_naming_more_scopes_than_max_batch_scopes_is_400(tmp_path: Path, server: Any) -> None:
    async with server(cfg(tmp_path), max_batch_scopes=3) as http:
        def batch(scopes: int) -> dict[str, Any]:
            return {"memories": [{"content": f"{MARK} {n}", "user_id": f"u{scopes}-{n}", "app_name": "batch"}
                                 for n in range(scopes)]}

        r = await http.post("/memory/batch", json=batch(4))
        assert r.status_code == 400, r.text
        assert "3" in r.json()["error"], r.json()  # says the limit
        for n in range(4):
            found = await http.post("/memory/search", json={"query": MARK, "user_id": f"u4-{n}",
                                                            "app_name": "batch", "mode": "keyword"})
            assert found.json()["results"] == []
        # the same scope twice counts once; three scopes are within the limit
        twice = [*batch(3)["memories"], *batch(3)["memories"]]
        r = await http.post("/memory/batch", json={"memories": twice})
        assert r.status_code == 201, r.text
