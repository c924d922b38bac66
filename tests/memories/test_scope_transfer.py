"""Moving memories between data directories: ``ImportMemories`` and ``GetVectors`` on
the behaviour (sans-io), the export format read line by line, and export / import
through real runtimes: a round trip keeps ids, statuses, history and search hits;
importing again adds nothing; another embedder re-embeds; a bad line stores nothing;
an import survives a kill."""

from __future__ import annotations

import io
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import trio
from checkout import python_env
from scope_support import EMBEDDER, KEY, Driver, restored

import mnemex
from mnemex.effects import Step
from mnemex.errors import InvalidInput, TooLarge
from mnemex.memories.behaviour import ScopeMemory, scope_codec
from mnemex.memories.fields import check_record
from mnemex.memories.protocol import (
    ApplyExtraction,
    Change,
    Forget,
    GetVectors,
    Imported,
    ImportMemories,
    ListMemories,
    MemoryRecord,
    NewFact,
    Remember,
    Search,
    SourceRef,
)
from mnemex.memories.ref import ScopeRef
from mnemex.memories.snapshot import encode_vector
from mnemex.memories.transfer import (
    EXPORT_FORMAT,
    ExportedMemory,
    ExportHeader,
    encode_line,
    read_export,
)
from mnemex.models.hashing import HashingEmbedder
from mnemex.persistence import actor_dir


def vector(content: str, embedder: HashingEmbedder = EMBEDDER) -> bytes:
    return encode_vector(embedder.embed([content])[0])


def record(memory_id: str, content: str, **fields: Any) -> MemoryRecord:
    fields.setdefault("timestamp", 500.0)
    fields.setdefault("created_at", 600.0)
    return MemoryRecord(id=memory_id, content=content, **fields)


SUPERSEDED = record("r1", "The user lives in Lisbon.", entities=("Lisbon",), status="superseded",
                    superseded_by="r2", invalid_at=900.0, extractor="llm:test:v1", reinforced=2,
                    sources=(SourceRef(session_id="s1", first=0, last=3),),
                    history=(Change(at=600.0, op="created", by="llm:test:v1"),
                             Change(at=900.0, op="superseded", by="llm:test:v1", other="r2")))
CURRENT = record("r2", "The user moved to Berlin.", entities=("Berlin",), categories=("home", "travel"),
                 category_confidences=(0.9, 0.4), links=("r3",), access_count=4, last_accessed_at=950.0,
                 history=(Change(at=900.0, op="supersedes", by="llm:test:v1", other="r1"),))
MERGED = record("r3", "The user has moved to Berlin.", status="merged", merged_into="r2", session_id="s1",
                metadata={"n": 1, "tags": ["a"]})


def import_command(records: list[MemoryRecord], vectors: list[bytes | None] | None = None,
                   embedder: HashingEmbedder = EMBEDDER, now: float = 1_000.0) -> ImportMemories:
    if vectors is None:
        vectors = [vector(r.content, embedder) for r in records]
    return ImportMemories(records=records, vectors=vectors, embedder=embedder.name, dim=embedder.dim, now=now)


def reply_of(out: Any) -> Any:
    return out.reply if isinstance(out, Step) else out


def everything(memory: ScopeMemory) -> list[MemoryRecord]:
    return list(memory.handle(ListMemories(limit=None, include_history=True)).memories)


# -- the behaviour -------------------------------------------------------------------------------------
def test_import_stores_each_record_as_given_with_its_vector() -> None:
    driver = Driver()
    reply = reply_of(driver.memory.handle(import_command([SUPERSEDED, CURRENT, MERGED])))
    assert reply == Imported(ids_added=["r1", "r2", "r3"], skipped=0)
    assert everything(driver.memory) == [SUPERSEDED, CURRENT, MERGED]
    assert [hit.memory.id for hit in driver.search("Berlin", mode="fulltext").hits] == ["r2"]  # active only
    assert driver.search("user moved Berlin", mode="vector").hits[0].memory.id == "r2"
    assert driver.memory.embedder == EMBEDDER.name and len(driver.memory.vectors or ()) == 3


def test_importing_again_skips_by_id_and_by_content_and_journals_nothing() -> None:
    driver = Driver()
    [taken] = driver.remember("The user moved to Berlin.")  # CURRENT's content, another id
    out = driver.memory.handle(import_command([SUPERSEDED, CURRENT, MERGED]))
    assert reply_of(out) == Imported(ids_added=["r1", "r3"], skipped=1)
    again = driver.memory.handle(import_command([SUPERSEDED, MERGED, MERGED]))
    assert isinstance(again, Step) and again.unchanged and again.reply == Imported(ids_added=[], skipped=3)
    same_content = msgspec.structs.replace(SUPERSEDED, id="other")
    same_id = msgspec.structs.replace(MERGED, id="r1")
    twice = reply_of(Driver().memory.handle(import_command([SUPERSEDED, same_content, same_id])))
    assert twice == Imported(ids_added=["r1"], skipped=2)  # within one command too
    assert driver.memory.record(taken) is not None and driver.memory.record("r2") is None


@pytest.mark.parametrize(("bad", "field"), [
    (msgspec.structs.replace(CURRENT, content="  "), "records[1].content"),
    (msgspec.structs.replace(CURRENT, status="superseded"), "records[1].superseded_by"),
    (msgspec.structs.replace(CURRENT, category_confidences=(0.9,)), "records[1].category_confidences"),
    (msgspec.structs.replace(CURRENT, category_confidences=(0.9, 1.5)), "records[1].category_confidences[1]"),
    (msgspec.structs.replace(CURRENT, access_count=-1), "records[1].access_count"),
    (msgspec.structs.replace(CURRENT, created_at=-5.0), "records[1].created_at"),
    (msgspec.structs.replace(CURRENT, links=("ok", "")), "records[1].links[1]"),
    (msgspec.structs.replace(CURRENT, history=(Change(at=1.0, op=""),)), "records[1].history[0].op"),
    (msgspec.structs.replace(CURRENT, sources=(SourceRef(first=-1),)), "records[1].sources[0].first"),
    (msgspec.structs.replace(CURRENT, entities=("!!",)), "records[1].entities"),
    (msgspec.structs.replace(CURRENT, kind="not a kind"), "records[1].kind"),
    (msgspec.structs.replace(CURRENT, history=(Change(at=1.0, op="created"),) * 65), "records[1].history"),
])
def test_a_bad_record_refuses_the_whole_import_naming_it(bad: MemoryRecord, field: str) -> None:
    memory = Driver().memory
    with pytest.raises(InvalidInput) as refused:
        memory.handle(import_command([SUPERSEDED, bad, MERGED]))
    assert refused.value.field == field
    assert len(memory) == 0 and memory.clock == 0.0


def test_content_past_the_limit_is_too_large() -> None:
    memory = Driver(max_content_bytes=64).memory
    with pytest.raises(TooLarge, match=r"the limit is 64 \(config.memories.max_content_bytes\)") as refused:
        memory.handle(import_command([SUPERSEDED, record("big", "x" * 65)]))
    assert refused.value.field == "records[1].content" and len(memory) == 0


def test_vectors_of_another_embedder_are_refused_unless_left_out() -> None:
    driver = Driver()
    driver.remember("something to fix the scope's embedder")
    other = HashingEmbedder(dim=16)
    with pytest.raises(InvalidInput, match=r"never mixed.*vector \(None\)") as refused:
        driver.memory.handle(import_command([SUPERSEDED, CURRENT], embedder=other))
    assert refused.value.field == "embedder" and len(driver.memory) == 1
    with pytest.raises(InvalidInput) as short:
        driver.memory.handle(import_command([SUPERSEDED, CURRENT], [vector("x"), b"\0" * 12]))
    assert short.value.field == "vectors[1]"
    with pytest.raises(InvalidInput, match="1 vectors for 2 records"):
        driver.memory.handle(import_command([SUPERSEDED, CURRENT], [None]))
    reply = reply_of(driver.memory.handle(import_command([SUPERSEDED, CURRENT], [None, None],
                                                         embedder=other)))
    assert reply.ids_added == ["r1", "r2"] and driver.memory.embedder == EMBEDDER.name
    assert driver.memory.vectors is not None and len(driver.memory.vectors) == 1


def test_too_many_records_in_one_command_is_too_large() -> None:
    memory = Driver(max_memories_per_command=2).memory
    with pytest.raises(TooLarge, match="3 records in one import; the limit is 2"):
        memory.handle(import_command([SUPERSEDED, CURRENT, MERGED]))


def test_get_vectors_answers_the_stored_vectors_of_known_ids() -> None:
    driver = Driver()
    driver.memory.handle(import_command([SUPERSEDED, CURRENT], [vector(SUPERSEDED.content), None]))
    found = driver.memory.handle(GetVectors(ids=["r1", "r2", "nope", "r1"]))
    assert list(found.vectors) == ["r1"] and (found.embedder, found.dim) == (EMBEDDER.name, EMBEDDER.dim)
    assert np.allclose(np.frombuffer(found.vectors["r1"], "<f4"), EMBEDDER.embed([SUPERSEDED.content])[0])
    assert Driver().memory.handle(GetVectors(ids=["r1"])).vectors == {}


def test_replay_of_a_journal_with_imports_gives_the_same_state_and_hits() -> None:
    driver = Driver()
    journal: list[Any] = []

    def send(command: Any) -> None:
        out = driver.memory.handle(command)
        if not (isinstance(out, Step) and out.unchanged):
            journal.append(scope_codec.decode(scope_codec.encode(command)))

    send(Remember(memories=[driver.new("Alice writes Java"), driver.new("Alice has a dog named Rex")],
                  embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=driver.tick()))
    send(import_command([SUPERSEDED, CURRENT, MERGED], now=driver.tick()))
    send(import_command([SUPERSEDED], now=driver.tick()))  # nothing new: not journaled
    send(Forget(ids=["r3"], now=driver.tick()))
    assert len(journal) == 3
    replayed = ScopeMemory(KEY, driver.memory.settings)
    replayed.replay(journal)
    assert everything(replayed) == everything(driver.memory)
    again = Driver(replayed)
    again.now = driver.now
    for query in ("Berlin", "Java dog", "where does the user live"):
        for mode in ("fulltext", "vector", "hybrid"):
            assert again.search(query, mode) == driver.search(query, mode)
    assert everything(restored(replayed)) == everything(driver.memory)


# -- the format ----------------------------------------------------------------------------------------
def export_text(*memories: ExportedMemory, header: ExportHeader | None = None) -> list[str]:
    scopes = {(m.app_name, m.user_id) for m in memories}
    header = header or ExportHeader(exported_at=1.0, scopes=len(scopes), memories=len(memories))
    return [encode_line(header), *(encode_line(m) for m in memories)]


def exported(memory: MemoryRecord, user_id: str = "alice", with_vector: bool = True) -> ExportedMemory:
    if not with_vector:
        return ExportedMemory(app_name="chat", user_id=user_id, memory=memory)
    return ExportedMemory(app_name="chat", user_id=user_id, memory=memory, embedder=EMBEDDER.name,
                          dim=EMBEDDER.dim, vector=vector(memory.content))


def test_lines_round_trip_through_json() -> None:
    items = [exported(SUPERSEDED), exported(CURRENT, "bob", with_vector=False), exported(MERGED)]
    lines = export_text(*items)
    first = json.loads(lines[0])
    assert first["format"] == EXPORT_FORMAT and (first["scopes"], first["memories"]) == (2, 3)
    line = json.loads(lines[2])
    assert list(line) == ["format", "app_name", "user_id", "memory", "embedder", "dim", "vector"]
    assert line["vector"] is None and line["memory"]["id"] == "r2"
    read = read_export(["", *lines, "\n"], 10_240, 16_384)
    assert [(number, item) for number, item in read.memories] == [(3, items[0]), (4, items[1]), (5, items[2])]


def bad_memory_line(**changes: Any) -> str:
    line = json.loads(encode_line(exported(CURRENT)))
    line.update(changes)
    return json.dumps(line)


# what is wrong -> (the lines, from a good export's; the field named; words of the message)
BAD_LINES: dict[str, tuple[Callable[[list[str]], list[str]], str, str]] = {
    "empty": (lambda good: [], "line 1", "the export is empty"),
    "no header": (lambda good: [good[1]], "line 1", "not the header of an export"),
    "not json": (lambda good: [good[0], "{not json"], "line 2", "not a memory of an export"),
    "empty content": (lambda good: [*good, bad_memory_line(memory={"id": "x", "content": ""})],
                      "line 4.memory.content", "line 4: memory content is empty"),
    "newer line": (lambda good: [good[0], bad_memory_line(format="mnemex-export/9")], "line 2.format",
                   "this mnemex reads 'mnemex-export/1'"),
    "newer header": (lambda good: [good[0].replace("/1", "/2"), good[1]], "line 1.format",
                     "'mnemex-export/2'"),
    "wrong dim": (lambda good: [good[0], bad_memory_line(dim=7)], "line 2.vector",
                  "must be 7 float32 values"),
    "no embedder": (lambda good: [good[0], bad_memory_line(embedder=None)], "line 2.embedder",
                    "embedder must be"),
    "no user": (lambda good: [good[0], bad_memory_line(user_id="")], "line 2.user_id", "user_id must be"),
    "cut short": (lambda good: good[:2], "line 3",
                  "the header says 2 memories of 1 scopes follow, but the file holds 1 of 1: it was cut"),
}


@pytest.mark.parametrize(("lines", "field", "words"), BAD_LINES.values(), ids=BAD_LINES.keys())
def test_a_bad_line_is_named(lines: Callable[[list[str]], list[str]], field: str, words: str) -> None:
    good = export_text(exported(SUPERSEDED), exported(CURRENT))
    with pytest.raises(InvalidInput, match=re.escape(words)) as refused:
        read_export(lines(good), 10_240, 16_384)
    assert refused.value.field == field


def test_check_record_keeps_a_good_record_as_it_is() -> None:
    for good in (SUPERSEDED, CURRENT, MERGED):
        assert check_record(good, 10_240, 16_384) == good
    assert check_record(msgspec.structs.replace(CURRENT, categories=("a", "a"), category_confidences=()),
                        10_240, 16_384).categories == ("a",)


# -- through runtimes ------------------------------------------------------------------------------------
def config(path: Path | None, **overrides: Any) -> mnemex.Config:
    overrides.setdefault("embedder", "hashing")
    return mnemex.Config(data_dir=str(path) if path is not None else None, **overrides)


QUERIES = ["where does the user live", "Java bank", "dog Rex", "Berlin", "hiking Alps", "tea"]


async def fill(rt: mnemex.MnemexRuntime, app_name: str = "chat", user_id: str = "alice") -> ScopeRef:
    """A scope with a bit of everything: fields, sessions, superseded, merged and linked
    memories with their history, an update, a forget, access counts."""
    scope = rt.scope(user_id=user_id, app_name=app_name)
    ids = await scope.remember_many([
        {"content": "Alice writes Java at a bank", "entities": ["Alice", "Java"], "categories": ["work"],
         "importance": 0.8, "session_id": "s0", "metadata": {"team": "payments", "since": 2019}},
        {"content": "Alice's dog is called Rex", "entities": ["Rex"], "categories": ["pets"],
         "session_id": "s0", "author": "user"},
        {"content": "Alice likes hiking in the Alps", "kind": "preference", "valid_at": 1000.0},
        {"content": "Alice drinks green tea", "timestamp": "2026-01-02T03:04:05Z"},
        {"content": "a memory to forget"},
    ])
    embedder = scope.embedder

    async def apply(first: int, *facts: NewFact, offered: tuple[str, ...] = ()) -> None:
        with_vectors = [msgspec.structs.replace(fact, vector=vector(fact.content, embedder))
                        for fact in facts]
        await scope.ref.ask(ApplyExtraction(session_id="s1", first=first, upto=first + 1, facts=with_vectors,
                                            offered=list(offered), extractor="llm:test:v1",
                                            embedder=embedder.name, dim=embedder.dim, now=time.time()))

    await apply(0, NewFact(id="F1", content="The user lives in Lisbon.", entities=("Lisbon",),
                           attributed_to="user", categories=("home",), confidences=(0.9,)))
    await apply(1, NewFact(id="F2", content="The user moved to Berlin.", entities=("Berlin",),
                           attributed_to="user", relation="updates", target="F1"), offered=("F1",))
    await apply(2, NewFact(id="F3", content="The user has moved to Berlin.", relation="duplicate",
                           target="F2"), offered=("F2",))
    await apply(3, NewFact(id="F4", content="The user rents a flat in Berlin.", relation="extends",
                           target="F2"), offered=("F2",))
    await scope.update(ids[3], importance=0.9, categories=["drinks"])
    await scope.forget(ids[4])
    await scope.search("dog", mode="keyword")
    await rt.flush_touches()
    return scope


async def state(scope: ScopeRef) -> tuple[list[MemoryRecord], dict[str, Any], dict[str, Any]]:
    """Every record, a history, and the hits of every query and mode (ids and scores, ties in
    id order), searched with raw commands: ``scope.search`` would count accesses."""
    records = (await scope.memories(limit=None, include_history=True)).memories
    history = msgspec.to_builtins(await scope.history("F2"))
    hits: dict[str, Any] = {}
    embedder = scope.embedder
    for query in QUERIES:
        for mode in ("keyword", "fulltext", "vector", "hybrid"):
            command = Search(query=query, vector=vector(query, embedder), embedder=embedder.name,
                             dim=embedder.dim, top_k=20, mode=mode, min_score=-1.0,  # type: ignore[arg-type]
                             now=time.time())
            result = await scope.ref.ask(command)
            hits[f"{mode} {query}"] = sorted((-round(hit.score, 4), hit.memory.id) for hit in result.hits)
    return records, history, hits


async def test_a_round_trip_keeps_ids_statuses_history_and_search_hits(tmp_path: Path) -> None:
    out = io.StringIO()
    async with mnemex.open_runtime(config(tmp_path / "a")) as rt:
        before = await state(await fill(rt))
        await fill(rt, user_id="bob")
        header = await rt.export_data(out)
    assert (header.scopes, header.memories) == (2, 16)
    records = before[0]
    assert {r.status for r in records} == {"active", "superseded", "merged"} and any(r.links for r in records)
    async with mnemex.open_runtime(config(tmp_path / "b")) as rt:
        report = await rt.import_data(io.StringIO(out.getvalue()))
        assert (report.scopes, report.added, report.skipped, report.reembedded) == (2, 16, 0, 0)
        scope = rt.scope(user_id="alice", app_name="chat")
        assert await state(scope) == before
        assert rt.scope_keys() == [("chat", "alice"), ("chat", "bob")]
        again = await rt.import_data(out.getvalue().splitlines())
        assert (again.added, again.skipped, again.reembedded) == (0, 16, 0)
        assert await state(scope) == before
    async with mnemex.open_runtime(config(tmp_path / "b")) as rt:  # and from disk
        assert await state(rt.scope(user_id="alice", app_name="chat")) == before


async def test_a_scope_exports_and_imports_itself_elsewhere() -> None:
    async with mnemex.open_runtime(config(None)) as rt:
        source = await fill(rt)
        items = [item async for item in source.export(include_vectors=False)]
        assert all(item.vector is None for item in items) and len(items) == 8
        copy = rt.scope(user_id="carol", app_name="mail")
        report = await copy.import_records(items)
        assert (report.added, report.reembedded) == (8, 8)
        assert (await copy.memories(limit=None, include_history=True)).memories == \
            (await source.memories(limit=None, include_history=True)).memories
        with pytest.raises(InvalidInput) as refused:
            await copy.import_records([items[0], msgspec.structs.replace(
                items[1], memory=msgspec.structs.replace(items[1].memory, importance=2.0))])
        assert refused.value.field == "memories[1].memory.importance"


async def test_another_embedder_embeds_again_and_search_works(tmp_path: Path) -> None:
    out = io.StringIO()
    async with mnemex.open_runtime(config(tmp_path / "a")) as rt:
        await fill(rt)
        await rt.export_data(out)
    async with mnemex.open_runtime(config(tmp_path / "b", embedder_dim=64)) as rt:
        report = await rt.import_data(out.getvalue().splitlines())
        assert (report.added, report.reembedded) == (8, 8)
        scope = rt.scope(user_id="alice", app_name="chat")
        stats = await scope.stats()
        assert (stats.embedder, stats.dim) == (scope.embedder.name, 64)
        hits = (await scope.search("user moved to Berlin", mode="vector")).hits
        assert hits and hits[0].memory.id == "F2"


async def test_a_bad_line_stores_nothing_and_is_named(tmp_path: Path) -> None:
    out = io.StringIO()
    async with mnemex.open_runtime(config(None)) as rt:
        await fill(rt)
        await fill(rt, user_id="bob")
        await rt.export_data(out)
    lines = out.getvalue().splitlines()
    broken = json.loads(lines[12])
    broken["memory"]["importance"] = -1
    lines[12] = json.dumps(broken)
    async with mnemex.open_runtime(config(tmp_path)) as rt:
        with pytest.raises(InvalidInput, match=r"line 13: importance must be a number in 0\.\.1") as refused:
            await rt.import_data(lines)
        assert refused.value.field == "line 13.memory.importance"
        with pytest.raises(InvalidInput, match="cut short"):
            await rt.import_data(lines[:5])
        assert rt.scope_keys() == []
        assert await rt.scope(user_id="alice", app_name="chat").count(include_history=True) == 0


IMPORT_THEN_DIE = """
import os, sys, trio, mnemex
async def main(data_dir, export):
    async with mnemex.open_runtime(mnemex.Config(data_dir=data_dir, embedder="hashing")) as rt:
        with open(export) as lines:
            report = await rt.import_data(lines)
        print(report.added, flush=True)
        os._exit(0)  # no shutdown: no snapshot, only the journal
trio.run(main, sys.argv[1], sys.argv[2])
"""


async def test_an_import_is_journaled_and_replayed_after_a_kill(tmp_path: Path) -> None:
    export = tmp_path / "export.jsonl"
    async with mnemex.open_runtime(config(tmp_path / "a")) as rt:
        before = await state(await fill(rt))
        with export.open("w") as out:
            await rt.export_data(out)
    done = await trio.run_process([sys.executable, "-c", IMPORT_THEN_DIE, str(tmp_path / "b"), str(export)],
                                  env=python_env(), capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["8"]
    folder = actor_dir(tmp_path / "b", "scope", ("chat", "alice"))
    assert not list(folder.glob("snapshot-*"))
    assert b'"scope.import"' in (folder / "journal.jsonl").read_bytes()
    async with mnemex.open_runtime(config(tmp_path / "b")) as rt:
        assert await state(rt.scope(user_id="alice", app_name="chat")) == before


def test_the_blocking_client_exports_and_imports(tmp_path: Path) -> None:
    out = io.StringIO()
    with mnemex.Client(config(None)) as client:
        scope = client.scope(user_id="alice", app_name="chat")
        scope.remember_many(["Alice writes Java", "Alice has a dog"])
        assert len(scope.export()) == 2
        header = client.export_data(out)
        assert header.memories == 2 and client.scope_keys() == [("chat", "alice")]
    with mnemex.Client(config(tmp_path)) as client:
        assert client.import_data(out.getvalue().splitlines()).added == 2
        copy = client.scope(user_id="bob", app_name="chat")
        assert copy.import_records(client.scope(user_id="alice", app_name="chat").export()).added == 2
