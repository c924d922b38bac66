"""The postgres journal against a real server (tests/postgres_server.py): one
transaction per group-commit round, crashes, fencing by lease epochs in the
database, a frozen owner, and the runtime end to end. The ActorStore contract
itself runs in test_actor_store.py, parametrized over this store too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg (the mnemex[postgres] extra) is not installed")

import psycopg
import trio
from postgres_server import PostgresServer

import mnemex
from mnemex.errors import DataDirLocked, InvalidInput, NotOwner, StorageError
from mnemex.lowlevel import open_actor_runtime
from mnemex.persistence.leases import Ownership
from mnemex.persistence.postgres import PostgresStorage, PostgresStore
from mnemex.persistence.shards import vshard_of
from mnemex.testing import Add, Get, counter_kind

KEY = ("chat", "alice")
V = vshard_of("scope", KEY)
OTHER = next(("chat", f"u{n}") for n in range(100) if vshard_of("scope", ("chat", f"u{n}")) != V)
W = vshard_of("scope", OTHER)
ROOT = Path(__file__).parents[2]


def line(seq: int) -> tuple[int, int, bytes]:
    return seq, 1_700_000_000_000 + seq, b'{"n":%d}' % seq


def seqs(store: PostgresStore) -> list[int]:
    return [entry.seq for entry in store.recover().journal]


OpenStorage = Callable[..., PostgresStorage]


@pytest.fixture
def open_storage(postgres_server: PostgresServer, postgres_schema: str,
                 tmp_path: Path) -> Iterator[OpenStorage]:
    """Opens a PostgresStorage on this test's schema (closed at the end)."""
    opened: list[PostgresStorage] = []

    def open_(**kwargs: Any) -> PostgresStorage:
        kwargs.setdefault("schema", postgres_schema)
        storage = PostgresStorage(postgres_server.dsn, snapshots_dir=tmp_path / "snapshots", **kwargs)
        opened.append(storage)
        return storage

    yield open_
    for storage in opened:
        storage.close()


def take(storage: PostgresStorage, vshard: int, ttl: float, believed: float = 3600.0) -> None:
    """Lease ``vshard`` for ``ttl`` s on the database's clock, while the process
    believes it holds it for ``believed`` s (a clock that ran slow, a long pause)."""
    assert storage.ownership is not None and storage.leases is not None
    asked = storage.ownership.now()
    lease = storage.leases.acquire(vshard, storage.ownership.owner, ttl)
    storage.ownership.grant(lease, asked, believed)


def take_when_lapsed(storage: PostgresStorage, vshard: int, ttl: float = 60.0) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            take(storage, vshard, ttl, believed=ttl)
            return
        except NotOwner:
            assert time.monotonic() < deadline, "the previous lease never lapsed"
            time.sleep(0.05)


# -- group commit --------------------------------------------------------------------


def test_a_round_commits_the_rows_of_every_store_in_one_transaction(open_storage: OpenStorage) -> None:
    storage = open_storage(flush_interval=None)
    stores = [storage.store("scope", ("chat", f"u{n}")) for n in range(16)]
    for store in stores:
        store.recover()
    for store in stores:
        store.append([line(1), line(2)])
    assert storage.commits == 0  # appends only buffer
    assert storage.syncfs() is True
    assert storage.commits == 1
    for store in stores:
        store.synced_by_fs()
    # the kernel's path for a round of few actors: a sync per store; the first commits them all
    for store in stores[:3]:
        store.append([line(3)])
    stores[0].sync()
    stores[1].sync()
    stores[2].sync()
    assert storage.commits == 2
    storage.close()
    again = open_storage()
    assert [seqs(again.store("scope", ("chat", f"u{n}"))) for n in range(4)] == [[1, 2, 3]] * 3 + [[1, 2]]


def test_stores_appending_and_syncing_in_many_threads_lose_nothing(open_storage: OpenStorage) -> None:
    storage = open_storage()
    stores = [storage.store("scope", ("chat", f"u{n}")) for n in range(16)]
    for store in stores:
        store.recover()
    barrier = threading.Barrier(16)

    def writer(store: PostgresStore) -> None:
        barrier.wait()
        for seq in range(1, 21):
            store.append([line(seq)])
            store.sync()

    threads = [threading.Thread(target=writer, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(seqs(store) == list(range(1, 21)) for store in stores)


def test_a_second_exclusive_storage_on_the_schema_is_refused(open_storage: OpenStorage) -> None:
    open_storage()
    with pytest.raises(DataDirLocked, match="in use"):
        open_storage()
    with pytest.raises(DataDirLocked, match="owns it alone"):
        open_storage(ownership=Ownership("s1"))


def test_bad_arguments_are_invalid_input(postgres_server: PostgresServer, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="schema"):
        PostgresStorage(postgres_server.dsn, snapshots_dir=tmp_path, schema="Robert'); DROP")
    with pytest.raises(InvalidInput, match="dsn"):
        PostgresStorage(" ", snapshots_dir=tmp_path)
    with pytest.raises(StorageError, match="cannot connect"):
        PostgresStorage("host=127.0.0.1 port=1 user=x dbname=x", snapshots_dir=tmp_path, connect_timeout=2)


def test_a_row_damaged_in_the_database_is_corrupt_data(open_storage: OpenStorage,
                                                       postgres_server: PostgresServer) -> None:
    storage = open_storage()
    store = storage.store("scope", KEY)
    store.append([line(1), line(2)])
    store.sync()
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {storage.schema}.journal SET payload = %s WHERE seq = 2", (b'{"n":3}',))
    with pytest.raises(mnemex.CorruptData, match="row 2 fails its checksum"):
        storage.store("scope", KEY).recover()


def test_snapshots_prune_rows_and_files_and_fall_back(open_storage: OpenStorage) -> None:
    storage = open_storage()
    store = storage.store("scope", KEY, keep=2)
    store.append([line(seq) for seq in range(1, 11)])
    for seq in (4, 6, 8):
        store.write_snapshot(seq, seq, [b'{"upto":%d}' % seq], created=0, sidecars={"index": b"\x00" * seq})
    assert sorted(int(name.name.split("-")[0]) for name in store.path.iterdir()) == [6, 8]
    with storage._readers.connection() as conn:
        kept = conn.execute(f"SELECT min(seq) FROM {storage.schema}.journal").fetchone()
    assert kept == (7,)  # rows after the oldest snapshot kept
    newest = next(folder for folder in store.path.iterdir() if folder.name.startswith("8-"))
    (newest / "snapshot-8.jsonl").write_bytes(b"damaged")
    recovered = storage.store("scope", KEY).recover()
    assert recovered.header is not None and recovered.header.seq == 6
    assert [entry.seq for entry in recovered.journal] == [7, 8, 9, 10]
    assert recovered.sidecars == {"index": b"\x00" * 6}
    assert Path(recovered.sidecar_paths["index"]).read_bytes() == b"\x00" * 6


def test_rows_colliding_with_rows_on_record_fail_their_store_alone(open_storage: OpenStorage) -> None:
    storage = open_storage(flush_interval=None)
    first, second, other = (storage.store("scope", KEY), storage.store("scope", KEY),
                            storage.store("scope", OTHER))
    for store in (first, second, other):
        store.recover()
    first.append([line(1)])
    first.sync()
    second.append([line(1)])  # a second writer of the same actor, which the kernel never makes
    other.append([line(1)])
    storage.syncfs()
    with pytest.raises(StorageError, match="UniqueViolation"):
        second.synced_by_fs()
    other.synced_by_fs()
    assert seqs(storage.store("scope", OTHER)) == [1]
    assert storage.commits == 2


def _pause_commits_of(storage: PostgresStorage, monkeypatch: pytest.MonkeyPatch
                      ) -> tuple[threading.Event, threading.Event]:
    """Pause ``storage``'s next commit inside its transaction, after the lease check
    and before its rows are written: (paused, resume)."""
    fence = PostgresStorage._fence
    paused, resume = threading.Event(), threading.Event()

    def paused_fence(self: PostgresStorage, conn: Any, stores: Any, *rest: Any) -> Any:
        refused = fence(self, conn, stores, *rest)
        if self is storage and not paused.is_set():
            paused.set()
            assert resume.wait(30)
        return refused

    monkeypatch.setattr(PostgresStorage, "_fence", paused_fence)
    return paused, resume


def test_a_connection_lost_mid_commit_refuses_writes_until_the_actors_are_reloaded(
        open_storage: OpenStorage, monkeypatch: pytest.MonkeyPatch, postgres_server: PostgresServer) -> None:
    storage = open_storage(flush_interval=None)
    store, other = storage.store("scope", KEY), storage.store("scope", OTHER)
    for each in (store, other):
        each.recover()
        each.append([line(1)])
    storage.syncfs()
    paused, resume = _pause_commits_of(storage, monkeypatch)
    store.append([line(2)])
    other.append([line(2)])
    errors: list[BaseException] = []
    committer = threading.Thread(target=lambda: _catch(store.sync, errors))
    committer.start()
    assert paused.wait(20)
    assert storage._writer is not None
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (storage._writer.info.backend_pid,))
    resume.set()
    committer.join()
    assert len(errors) == 1 and isinstance(errors[0], StorageError)
    assert "whether the commit landed is unknown" in str(errors[0])
    for each in (store, other):  # both were in the round: neither says its row 2 is durable
        assert each.needs_recovery
        with pytest.raises(StorageError):
            each.append([line(3)])
    store.cut_after(1)  # what the kernel does: back to the last seq it knows durable
    assert [entry.seq for entry in other.recover().journal] == [1]  # recovery removes what may have landed
    assert seqs(store) == [1]
    store.append([line(2)])  # a new connection, its lock taken again
    store.sync()
    assert seqs(storage.store("scope", KEY)) == [1, 2]


# -- crashes -------------------------------------------------------------------------

CRASHER = textwrap.dedent("""
    import sys, time
    from mnemex.persistence.postgres import PostgresStorage
    dsn, snapshots, schema, hold = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    storage = PostgresStorage(dsn, snapshots_dir=snapshots, schema=schema)
    stores = [storage.store("scope", ("chat", f"u{n}")) for n in range(8)]
    for store in stores:
        store.recover()
    seq = 0
    while True:
        seq += 1
        for store in stores:
            store.append([(seq, 0, b'{"n":%d}' % seq)])
        if seq == hold:
            print("buffered", seq, flush=True)
            time.sleep(600)
        storage.syncfs()
        print("acked", seq, flush=True)
""")


def _crash_and_recover(server: PostgresServer, schema: str, tmp_path: Path, hold: int,
                       acked_before_kill: int) -> tuple[list[int], list[list[int]]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CRASHER, server.dsn, str(tmp_path), schema, str(hold)],
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    acked: list[int] = []
    try:
        while len(acked) < acked_before_kill:
            text = child.stdout.readline()
            assert text, "the writer died"
            if text.startswith("buffered"):
                break
            acked.append(int(text.split()[1]))
        child.kill()  # SIGKILL: no close, no last commit; its socket closes with it
        child.wait()
        rest = child.stdout.read().splitlines()
        acked += [int(text.split()[1]) for text in rest if text.startswith("acked")]
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    deadline = time.monotonic() + 10
    while True:  # the server notices the dead session and drops its lock
        try:
            storage = PostgresStorage(server.dsn, snapshots_dir=tmp_path, schema=schema)
            break
        except DataDirLocked:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    try:
        return acked, [seqs(storage.store("scope", ("chat", f"u{n}"))) for n in range(8)]
    finally:
        storage.close()


def test_rows_of_a_round_not_committed_when_the_process_dies_are_absent(
        postgres_server: PostgresServer, postgres_schema: str, tmp_path: Path) -> None:
    acked, found = _crash_and_recover(postgres_server, postgres_schema, tmp_path, hold=30,
                                      acked_before_kill=10_000)
    assert acked == list(range(1, 30))
    assert found == [list(range(1, 30))] * 8  # the buffered round 30 is gone from every store


def test_a_kill_mid_stream_keeps_every_acknowledged_round_and_no_partial_one(
        postgres_server: PostgresServer, postgres_schema: str, tmp_path: Path) -> None:
    acked, found = _crash_and_recover(postgres_server, postgres_schema, tmp_path, hold=-1,
                                      acked_before_kill=200)
    last = found[0][-1]
    assert found == [list(range(1, last + 1))] * 8  # a round is all or nothing, across stores
    assert last >= acked[-1]  # every acknowledged round is there (a later one may have landed too)


# -- fencing ---------------------------------------------------------------------------


def test_a_takeover_refuses_the_old_owners_commits_and_writes_nothing_of_them(
        open_storage: OpenStorage) -> None:
    old = open_storage(ownership=Ownership("old"))
    new = open_storage(ownership=Ownership("new"))
    take(old, V, ttl=0.3)
    take(old, W, ttl=600)
    store, other = old.store("scope", KEY), old.store("scope", OTHER)
    for each in (store, other):
        each.recover()
        each.append([line(1), line(2)])
    old.syncfs()
    with pytest.raises(NotOwner, match="not owned by this process"):
        new.store("scope", KEY).append([line(3)])  # new never took the lease
    take_when_lapsed(new, V)  # old still believes it owns V (its own clock has not run out)
    assert old.ownership is not None and old.ownership.epoch(V) == 1
    store.append([line(3)])
    other.append([line(3)])
    old.syncfs()  # one round: the rows of V are refused, those of W commit
    with pytest.raises(NotOwner, match="taken over") as caught:
        store.synced_by_fs()
    assert (caught.value.owner, caught.value.epoch, caught.value.vshard) == ("new", 2, V)
    other.synced_by_fs()
    assert store.needs_recovery
    with pytest.raises(NotOwner):
        store.append([line(4)])
    with pytest.raises(NotOwner):
        store.sync()
    with pytest.raises(NotOwner, match="taken over"):
        old.store("scope", KEY).write_snapshot(2, 0, [b"{}"], created=0)
    with pytest.raises(NotOwner, match="taken over"):
        old.store("scope", KEY).cut_after(1)
    taken = new.store("scope", KEY)
    assert seqs(taken) == [1, 2]  # nothing of the old owner's after the takeover, no snapshot
    assert not taken.path.exists() or not any(taken.path.iterdir())
    taken.append([line(3)])
    taken.sync()
    assert seqs(new.store("scope", KEY)) == [1, 2, 3]
    assert seqs(old.store("scope", OTHER)) == [1, 2, 3]


def test_a_takeover_waits_for_a_commit_in_flight(open_storage: OpenStorage, monkeypatch: pytest.MonkeyPatch,
                                                 postgres_server: PostgresServer) -> None:
    old = open_storage(ownership=Ownership("old"))
    new = open_storage(ownership=Ownership("new"))
    take(old, V, ttl=0.3)
    store = old.store("scope", KEY)
    store.recover()
    store.append([line(1)])
    store.sync()
    in_flight, resume = _pause_commits_of(old, monkeypatch)
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        while True:  # old's lease lapses on the database's clock...
            lapsed = conn.execute(f"SELECT expires < extract(epoch FROM clock_timestamp()) FROM "
                                  f"{old.schema}.leases WHERE vshard = %s", (V,)).fetchone()
            if lapsed and lapsed[0]:
                break
            time.sleep(0.05)
        store.append([line(2)])
        errors: list[BaseException] = []
        committer = threading.Thread(target=lambda: _catch(store.sync, errors))
        committer.start()  # ...but its commit already checked the epoch
        assert in_flight.wait(20)
        taker = threading.Thread(target=lambda: _catch(lambda: take(new, V, ttl=60), errors))
        taker.start()
        while True:  # the takeover waits on the lease row's lock
            waiting = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                   ).fetchone()
            if waiting and waiting[0] >= 1:
                break
            assert taker.is_alive()
            time.sleep(0.01)
        resume.set()
        committer.join()
        taker.join()
    assert errors == []
    assert new.ownership is not None and new.ownership.epoch(V) == 2
    assert seqs(new.store("scope", KEY)) == [1, 2]  # the commit in flight landed before the takeover
    store.append([line(3)])
    with pytest.raises(NotOwner):
        store.sync()
    assert seqs(new.store("scope", KEY)) == [1, 2]


def _catch(call: Callable[[], object], errors: list[BaseException]) -> None:
    try:
        call()
    except BaseException as exc:
        errors.append(exc)


def test_leases_renew_release_and_say_who_holds_them(open_storage: OpenStorage) -> None:
    storage = open_storage(ownership=Ownership("a"))
    leases = storage.leases
    assert leases is not None
    assert leases.holder(V) is None
    first = leases.acquire(V, "a", 60)
    assert (first.owner, first.epoch) == ("a", 1)
    renewed = leases.acquire(V, "a", 60)
    assert renewed.epoch == 1 and renewed.expires >= first.expires
    with pytest.raises(NotOwner, match="leased to 'a'") as caught:
        leases.acquire(V, "b", 60)
    assert (caught.value.owner, caught.value.epoch) == ("a", 1)
    leases.release(renewed)
    taken = leases.acquire(V, "b", 60)
    assert (taken.owner, taken.epoch) == ("b", 2)
    assert leases.holder(V) == taken
    with pytest.raises(InvalidInput):
        leases.acquire(V, "b", 0)
    with pytest.raises(InvalidInput):
        leases.acquire(4096, "b", 1)


def test_many_leases_are_taken_in_one_transaction_and_a_row_a_commit_holds_is_left_to_wait_for(
        open_storage: OpenStorage, postgres_server: PostgresServer) -> None:
    storage = open_storage(ownership=Ownership("a"))
    leases = storage.leases
    assert leases is not None
    taken = leases.acquire_many([1, 2, 3], "a", 60)
    held = {v: (lease.owner, lease.epoch) for v, lease in taken.items() if not isinstance(lease, NotOwner)}
    assert held == {1: ("a", 1), 2: ("a", 1), 3: ("a", 1)}
    renewed = leases.acquire_many([1, 2, 3], "a", 60)  # a renewal keeps the epoch
    assert [renewed[v].epoch for v in (1, 2, 3)] == [1, 1, 1]  # type: ignore[union-attr]
    theirs = leases.acquire_many([2, 4], "b", 60)
    refused, fresh = theirs[2], theirs[4]
    assert isinstance(refused, NotOwner) and (refused.owner, refused.epoch) == ("a", 1)
    assert not isinstance(fresh, NotOwner) and (fresh.owner, fresh.epoch) == ("b", 1)
    leases.release(taken[3])  # type: ignore[arg-type]
    # a commit in flight reads lease row 1 FOR SHARE: the batch leaves it out (a takeover
    # must wait for that commit: acquire does) and takes the rest
    with psycopg.connect(postgres_server.dsn) as conn, conn.transaction():
        conn.execute(f'SELECT 1 FROM "{storage.schema}".leases WHERE vshard = 1 FOR SHARE')
        left = leases.acquire_many([1, 3], "b", 60)
        assert list(left) == [3] and (left[3].owner, left[3].epoch) == ("b", 2)  # type: ignore[union-attr]
    assert leases.holder(1) is not None and leases.holder(1).owner == "a"  # type: ignore[union-attr]
    with pytest.raises(InvalidInput):
        leases.acquire_many([4096], "b", 1)


def test_an_owner_frozen_inside_its_commit_is_cut_off_by_the_server(
        open_storage: OpenStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    old = open_storage(ownership=Ownership("old"), lease_wait=2.0, flush_interval=None)
    new = open_storage(ownership=Ownership("new"), lease_wait=10.0)
    take(old, V, ttl=0.3)
    store = old.store("scope", KEY)
    store.recover()
    store.append([line(1)])
    store.sync()
    paused, resume = _pause_commits_of(old, monkeypatch)
    store.append([line(2)])
    errors: list[BaseException] = []
    committer = threading.Thread(target=lambda: _catch(store.sync, errors))
    committer.start()
    assert paused.wait(20)  # frozen inside its transaction, the lease row locked FOR SHARE
    started = time.monotonic()
    take_when_lapsed(new, V)  # waits until the server ends the idle transaction (after 1 s)
    assert time.monotonic() - started < 10
    resume.set()
    committer.join()
    assert len(errors) == 1 and isinstance(errors[0], StorageError)
    assert seqs(new.store("scope", KEY)) == [1]  # nothing of the frozen commit
    with pytest.raises(NotOwner):
        store.cut_after(1)


async def test_a_shard_runtime_whose_lease_was_taken_answers_not_owner_and_keeps_nothing(
        open_storage: OpenStorage) -> None:
    mine = Ownership("old")
    old = open_storage(ownership=mine, flush_interval=None)
    new = open_storage(ownership=Ownership("new"))
    vshard = vshard_of("counter", ("c1",))
    take(old, vshard, ttl=0.3)
    async with open_actor_runtime(mnemex.Config(data_dir=None), [counter_kind()], storage=old,
                                  ownership=mine) as rt:
        await rt.ask("counter", "c1", Add(1))
        await trio.to_thread.run_sync(take_when_lapsed, new, vshard)  # old still believes it owns it
        with pytest.raises(NotOwner, match="taken over"):
            await rt.ask("counter", "c1", Add(2))
        with pytest.raises(NotOwner):  # the actor reloaded at its durable state, and is refused again
            await rt.ask("counter", "c1", Add(3))
        assert (await rt.ask("counter", "c1", Get()))[0] == 1
    assert [entry.seq for entry in new.store("counter", ("c1",)).recover().journal] == [1]


FROZEN = textwrap.dedent("""
    import sys, time
    from mnemex.errors import NotOwner
    from mnemex.persistence.leases import Ownership
    from mnemex.persistence.postgres import PostgresStorage
    dsn, snapshots, schema = sys.argv[1], sys.argv[2], sys.argv[3]
    storage = PostgresStorage(dsn, snapshots_dir=snapshots, schema=schema,
                              ownership=Ownership("frozen", margin=0.0))
    asked = storage.ownership.now()
    lease = storage.leases.acquire(int(sys.argv[4]), "frozen", 0.5)
    storage.ownership.grant(lease, asked, 3600.0)  # it believes it owns the shard for an hour
    store = storage.store("scope", ("chat", "alice"))
    store.recover()
    seq = 0
    while True:
        seq += 1
        try:
            store.append([(seq, 0, b'{"n":%d}' % seq)])
            store.sync()
        except NotOwner as exc:
            print("refused", seq, exc.epoch, flush=True)
            break
        print("acked", seq, flush=True)
        time.sleep(0.2)  # outside the commit, where the test freezes it
""")


def test_a_frozen_owner_is_fenced_and_its_late_commits_refused(
        open_storage: OpenStorage, postgres_server: PostgresServer, postgres_schema: str,
        tmp_path: Path) -> None:
    successor = open_storage(ownership=Ownership("successor"))  # makes the tables first
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", FROZEN, postgres_server.dsn, str(tmp_path / "snapshots"),
                               postgres_schema, str(V)], stdout=subprocess.PIPE, text=True, env=env)
    assert writer.stdout is not None
    try:
        acked = [writer.stdout.readline() for _ in range(5)]
        assert all(text.startswith("acked") for text in acked), acked
        writer.send_signal(signal.SIGSTOP)
        take_when_lapsed(successor, V)  # its 0.5 s lease lapses while it is frozen
        store = successor.store("scope", KEY)
        seen = seqs(store)
        store.append([line(seen[-1] + 1)])
        store.sync()
        writer.send_signal(signal.SIGCONT)
        rest = writer.stdout.read().split("\n")
        refused = [text for text in rest if text.startswith("refused")]
        assert refused and refused[0].split()[2] == "2"  # the epoch on record is the successor's
        acked_seqs = [int(text.split()[1]) for text in acked + rest if text.startswith("acked")]
        assert set(acked_seqs) <= set(seen)  # every commit it acknowledged survived the takeover
        assert seqs(successor.store("scope", KEY)) == [*seen, seen[-1] + 1]
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()


# -- the runtime end to end ---------------------------------------------------------------


def _config(server: PostgresServer, schema: str, tmp_path: Path, **extra: Any) -> mnemex.Config:
    return mnemex.Config(embedder="hashing", backend="postgres", postgres_dsn=server.dsn,
                         postgres_schema=schema, data_dir=str(tmp_path / "snapshots"), **extra)


async def test_a_runtime_on_the_postgres_journal_keeps_scopes_and_agents_across_restarts(
        postgres_server: PostgresServer, postgres_schema: str, tmp_path: Path) -> None:
    config = _config(postgres_server, postgres_schema, tmp_path)
    async with mnemex.open_runtime(config) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        await scope.remember("Alice's dog is called Rex")
        agent = rt.agent("assistant")
        await agent.append("s1", [{"role": "user", "content": "I'm Alice"}])
    # each actor was snapshotted on the way out (a folder and a row); now on a storage passed in
    storage = PostgresStorage(postgres_server.dsn, snapshots_dir=tmp_path / "snapshots",
                              schema=postgres_schema)
    async with mnemex.open_runtime(config, storage=storage) as rt:
        hits = (await rt.scope(user_id="alice", app_name="chat").search("dog", top_k=3)).hits
        assert [hit.memory.content for hit in hits] == ["Alice's dog is called Rex"]
        await rt.scope(user_id="alice", app_name="chat").remember("Alice lives in Lyon")
        await rt.agent("assistant").append("s1", [{"role": "assistant", "content": "Hello Alice"}])
    async with mnemex.open_runtime(config) as rt:
        assert rt.scope_keys() == [("chat", "alice")]  # from the database, none loaded yet
        page = await rt.agent("assistant").messages(session_id="s1", limit=10, offset=0)
        assert [stored.message["content"] for stored in page.messages] == ["I'm Alice", "Hello Alice"]
        hits = (await rt.scope(user_id="alice", app_name="chat").search("Lyon", top_k=3)).hits
        assert [hit.memory.content for hit in hits] == ["Alice lives in Lyon"]


async def test_sixteen_concurrent_writers_commit_one_transaction_per_round(
        postgres_server: PostgresServer, postgres_schema: str, tmp_path: Path) -> None:
    storage = PostgresStorage(postgres_server.dsn, snapshots_dir=tmp_path / "snapshots",
                              schema=postgres_schema, flush_interval=None)
    async with mnemex.open_runtime(_config(postgres_server, postgres_schema, tmp_path),
                                   storage=storage) as rt:
        async def writer(n: int) -> None:
            scope = rt.scope(user_id=f"u{n}", app_name="chat")
            for i in range(10):
                await scope.remember(f"note {i} of user {n}")

        async with trio.open_nursery() as nursery:
            for n in range(16):
                nursery.start_soon(writer, n)
        rounds = rt._kernel.journal_health()["fsync_rounds"]
        # one COMMIT per group-commit round at most (none when an overlapping round took its rows)
        assert 0 < storage.commits <= rounds < 160  # and rounds gather many writes


def test_rows_nobody_syncs_are_committed_within_the_flush_interval(open_storage: OpenStorage) -> None:
    storage = open_storage(flush_interval=0.05)
    store = storage.store("scope", KEY)
    store.recover()
    store.append([line(1)])  # fsync = "never": the kernel never syncs
    deadline = time.monotonic() + 10
    while storage.commits == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with storage._readers.connection() as conn:
        assert conn.execute(f"SELECT seq FROM {storage.schema}.journal").fetchall() == [(1,)]
