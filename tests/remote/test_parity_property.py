"""Random sequences of calls, in-process and remote, side by side: every answer and
every error must be the same (hypothesis chooses the calls)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from remote_servers import config_at, served, url_of
from test_parity import hits, plain

import mnemex
from mnemex.remote import RemoteRuntime
from mnemex.server import Server

WORDS = ["tea", "java", "lisbon", "cello", "sister", "bees", "dark", "mode", "green", "user", "likes"]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
index = st.integers(0, 7)
OPS = st.one_of(
    st.tuples(st.just("remember"), text, st.floats(0, 1)),
    st.tuples(st.just("remember_many"), st.lists(text, max_size=4)),
    st.tuples(st.just("forget"), index),
    st.tuples(st.just("update"), index, text),
    st.tuples(st.just("get"), index),
    st.tuples(st.just("search"), text, st.sampled_from(["keyword", "fulltext", "vector", "hybrid"]),
              st.integers(1, 6)),
    st.tuples(st.just("count")),
    st.tuples(st.just("append"), st.sampled_from(["s1", "s2"]), text),
    st.tuples(st.just("pop"), st.sampled_from(["s1", "s2"])),
    st.tuples(st.just("history"), st.sampled_from(["s1", "s2"])),
    st.tuples(st.just("bad_remember"), st.sampled_from(["", "x" * 20_000])),
)
_runs = itertools.count()


async def play(rt: mnemex.MnemexRuntime | RemoteRuntime, run: int, ops: list[tuple[Any, ...]]) -> list[Any]:
    scope = rt.scope(user_id=f"u{run}", app_name="prop")
    agent = rt.agent(f"bot{run}")
    ids: list[str] = []
    out: list[Any] = []

    def pick(i: int) -> str:
        return ids[i % len(ids)] if ids else "m-none"

    for op in ops:
        try:
            match op:
                case ("remember", content, importance):
                    ids.append(await scope.remember(content, importance=importance))
                    out.append(ids.index(ids[-1]))  # a duplicate answers the first one's id
                case ("remember_many", contents):
                    got = await scope.remember_many(contents)
                    ids.extend(got)
                    out.append([ids.index(i) for i in got])
                case ("forget", i):
                    out.append(await scope.forget(pick(i)))
                case ("update", i, content):
                    out.append(plain(await scope.update(pick(i), content=content)))
                case ("get", i):
                    out.append(plain(await scope.get(pick(i))))
                case ("search", query, mode, top_k):
                    out.append(hits(await scope.search(query, top_k, mode)))
                case ("count",):
                    out.append(await scope.count())
                case ("append", session, content):
                    out.append(plain(await agent.append(session, [{"role": "user", "content": content}])))
                case ("pop", session):
                    out.append(plain(await agent.pop(session)))
                case ("history", session):
                    out.append(plain(await agent.history(session)))
                case ("bad_remember", content):
                    out.append(await scope.remember(content))
        except mnemex.MnemexError as exc:
            out.append((type(exc).__name__, getattr(exc, "field", None)))
    return out


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with served(config_at(tmp_path / "served")) as running:
        yield running


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, max_size=14))
def test_random_calls_answer_alike_in_process_and_remote(server: Server, tmp_path: Path,
                                                         ops: list[tuple[Any, ...]]) -> None:
    run = next(_runs)  # a fresh scope and agent per example, on both sides

    async def both() -> tuple[list[Any], list[Any]]:
        async with mnemex.open_runtime(config_at(tmp_path / "local")) as local, \
                mnemex.connect(url_of(server)) as remote:
            return await play(local, run, ops), await play(remote, run, ops)

    here, there = trio.run(both)
    assert there == here
