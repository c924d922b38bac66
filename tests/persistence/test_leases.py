"""Leases and fencing on a shared volume: one owner per virtual shard, and a
process that lost its shard cannot write to it, even if it does not know yet."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from mnemex.errors import CorruptData, DataDirLocked, InvalidInput, NotOwner, StorageError
from mnemex.persistence import DataDir
from mnemex.persistence.leases import FileLeases, Lease, Ownership
from mnemex.persistence.shards import vshard_of

KEY = ("chat", "alice")
V = vshard_of("scope", KEY)


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def line(seq: int) -> tuple[int, int, bytes]:
    return (seq, 1_700_000_000_000 + seq, b'{"n":%d}' % seq)


def test_ownership_serves_until_the_lease_less_its_margin() -> None:
    clock = Clock()
    mine = Ownership("shard-1", margin=2.0, clock=clock)
    lease = Lease(vshard=V, owner="shard-1", epoch=3, expires=0.0)
    mine.grant(lease, asked_at=clock.now, ttl=10.0)
    assert mine.check("scope", KEY) == 3 and mine.vshards() == [V]
    clock.now += 7.9
    assert mine.epoch(V) == 3
    clock.now += 0.1  # 8 s: 10 s less the 2 s given to clock drift
    assert mine.epoch(V) is None
    with pytest.raises(NotOwner, match="no longer holds a current lease") as caught:
        mine.check("scope", KEY)
    assert caught.value.vshard == V
    mine.revoke(V)
    with pytest.raises(NotOwner, match="does not own"):
        mine.check("scope", KEY)
    with pytest.raises(InvalidInput, match="belongs to"):
        mine.grant(Lease(vshard=V, owner="shard-2", epoch=4, expires=0.0), asked_at=0.0, ttl=1.0)


def test_a_lease_is_taken_renewed_refused_and_taken_over(tmp_path: Path) -> None:
    wall = Clock()
    leases = FileLeases(tmp_path, wall=wall)
    assert leases.holder(V) is None
    first = leases.acquire(V, "a", ttl=10.0)
    assert (first.owner, first.epoch, first.expires) == ("a", 1, 1_010.0)
    wall.now += 5
    assert leases.acquire(V, "a", ttl=10.0).epoch == 1  # a renewal keeps the epoch
    with pytest.raises(NotOwner, match="leased to 'a'") as caught:
        leases.acquire(V, "b", ttl=10.0)
    assert (caught.value.owner, caught.value.epoch) == ("a", 1)
    wall.now += 10.5  # a's lease lapsed
    taken = leases.acquire(V, "b", ttl=10.0)
    assert (taken.owner, taken.epoch) == ("b", 2) and leases.holder(V) == taken
    leases.release(taken)
    assert leases.acquire(V, "a", ttl=10.0).epoch == 3  # released: no wait for expiry
    leases.release(first)  # not the lease on record any more: nothing happens
    assert leases.holder(V).owner == "a"  # type: ignore[union-attr]
    with pytest.raises(InvalidInput, match="ttl"):
        leases.acquire(V, "a", ttl=0)
    leases.close()


def test_acquire_many_renews_what_the_owner_holds_and_leaves_the_rest_to_acquire(tmp_path: Path) -> None:
    wall = Clock()
    leases = FileLeases(tmp_path, wall=wall)
    mine, theirs, lapsing, never = 10, 11, 12, 13
    for vshard in (mine, lapsing):
        leases.acquire(vshard, "a", ttl=10.0)
    leases.acquire(theirs, "b", ttl=10.0)
    wall.now += 5
    leases.acquire(lapsing, "a", ttl=1.0)  # renewed short: it lapses before the others
    wall.now += 2
    renewed = leases.acquire_many([mine, theirs, lapsing, never], "a", ttl=10.0)
    # only a plain renewal is made here: taking a shard (after another owner, a lapse or
    # no one) raises the epoch, durably, and is acquire's alone, as is saying who holds one
    assert renewed == {mine: Lease(vshard=mine, owner="a", epoch=1, expires=1_017.0)}
    assert leases.holder(mine) == renewed[mine]
    assert leases.holder(theirs).owner == "b" and leases.holder(never) is None  # type: ignore[union-attr]
    assert leases.acquire(lapsing, "a", ttl=10.0).epoch == 2
    with pytest.raises(NotOwner):
        leases.acquire(theirs, "a", ttl=10.0)
    # a shard whose lease file is damaged is left out too: acquire alone reports it
    (tmp_path / "shards" / f"{mine:03x}" / "lease.json").write_bytes(b"{not json")
    assert leases.acquire_many([mine, lapsing], "a", ttl=10.0) == {
        lapsing: Lease(vshard=lapsing, owner="a", epoch=2, expires=1_017.0)}
    with pytest.raises(CorruptData, match="does not parse"):
        leases.acquire(mine, "a", ttl=10.0)
    # a shard whose lease lock another process holds (a takeover, a frozen writer) is
    # left out at once: it would hold every renewal after it up for ``wait`` seconds
    (tmp_path / "shards" / f"{mine:03x}" / "lease.json").write_bytes(b"")  # (read as no holder: taken)
    leases.acquire(mine, "a", ttl=10.0)
    other = os.open(tmp_path / "shards" / f"{mine:03x}" / "lease.lock", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        started = time.monotonic()
        assert list(leases.acquire_many([mine, lapsing], "a", ttl=10.0)) == [lapsing]
        assert time.monotonic() - started < 1.0  # (the instance waits 30 s)
    finally:
        os.close(other)
    assert list(leases.acquire_many([mine, lapsing], "a", ttl=10.0)) == [mine, lapsing]
    for bad in ({"vshards": [4096]}, {"ttl": 0}, {"ttl": float("inf")}, {"owner": ""}):
        args: dict[str, Any] = {"vshards": [mine], "owner": "a", "ttl": 10.0} | bad
        with pytest.raises(InvalidInput):
            leases.acquire_many(**args)
    leases.close()


def _shared(path: Path, owner: str, wall: Clock) -> DataDir:
    data = DataDir(path, ownership=Ownership(owner), lease_wait=2.0)
    assert data.leases is not None
    data.leases._wall = wall
    return data


def _take(data: DataDir, ttl: float = 10.0) -> Lease:
    assert data.ownership is not None and data.leases is not None
    asked = data.ownership.now()
    lease = data.leases.acquire(V, data.ownership.owner, ttl)
    data.ownership.grant(lease, asked, ttl)
    return lease


def test_a_process_that_lost_its_shard_cannot_write_to_it(tmp_path: Path) -> None:
    wall = Clock()
    old, new = _shared(tmp_path, "old", wall), _shared(tmp_path, "new", wall)
    _take(old)
    store = old.store("scope", KEY)
    store.append([line(1), line(2)])
    store.sync()
    with pytest.raises(NotOwner, match="not owned by this process"):
        new.store("scope", KEY).append([line(1)])  # new never took the lease
    wall.now += 11
    _take(new)  # old still believes it owns the shard (its own clock has not run out)
    assert old.ownership is not None and old.ownership.epoch(V) == 1
    with pytest.raises(NotOwner, match="taken over") as caught:
        store.append([line(3)])
    assert (caught.value.owner, caught.value.epoch) == ("new", 2)
    with pytest.raises(NotOwner):
        store.write_snapshot(2, 0, [b"{}"], created=0)
    with pytest.raises(NotOwner):
        store.cut_after(1)
    taken = new.store("scope", KEY)
    recovered = taken.recover()
    assert [entry.seq for entry in recovered.journal] == [1, 2]
    taken.append([line(3)])
    taken.sync()
    old.close()
    new.close()


def test_shared_and_exclusive_runtimes_exclude_each_other(tmp_path: Path) -> None:
    with DataDir(tmp_path):
        with pytest.raises(DataDirLocked, match="owns it alone"):
            DataDir(tmp_path, ownership=Ownership("s1"))
    with DataDir(tmp_path, ownership=Ownership("s1")), DataDir(tmp_path, ownership=Ownership("s2")):
        with pytest.raises(DataDirLocked, match="shard processes of a cluster"):
            DataDir(tmp_path)


def test_a_shared_open_refuses_the_layout_before_virtual_shards(tmp_path: Path) -> None:
    (tmp_path / "scopes" / "chat.alice").mkdir(parents=True)
    with pytest.raises(StorageError, match="layout before virtual shards"):
        DataDir(tmp_path, ownership=Ownership("s1"))


WRITER = textwrap.dedent("""
    import sys, time
    from mnemex.errors import NotOwner
    from mnemex.persistence import DataDir
    from mnemex.persistence.leases import Ownership
    path, vshard = sys.argv[1], int(sys.argv[2])
    data = DataDir(path, ownership=Ownership("frozen", margin=0.0))
    asked = data.ownership.now()
    lease = data.leases.acquire(vshard, "frozen", 0.5)
    data.ownership.grant(lease, asked, 3600.0)  # it believes it owns the shard for an hour
    store = data.store("scope", ("chat", "alice"))
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
        time.sleep(0.2)  # outside the fenced write, where the test freezes it
""")


def test_a_frozen_owner_is_fenced_and_its_late_writes_refused(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(V)],
                              stdout=subprocess.PIPE, text=True, env=env)
    assert writer.stdout is not None
    try:
        acked = [writer.stdout.readline() for _ in range(5)]
        assert all(text.startswith("acked") for text in acked), acked
        writer.send_signal(signal.SIGSTOP)
        data = DataDir(tmp_path, ownership=Ownership("successor"))
        deadline = time.monotonic() + 10
        while True:  # its 0.5 s lease lapses while it is frozen, then the successor takes it
            try:
                _take(data)
                break
            except NotOwner:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        store = data.store("scope", KEY)
        seen = [entry.seq for entry in store.recover().journal]
        store.append([line(seen[-1] + 1)])
        store.sync()
        writer.send_signal(signal.SIGCONT)
        rest = writer.stdout.read().split("\n")
        refused = [text for text in rest if text.startswith("refused")]
        assert refused and refused[0].split()[2] == "2"  # the epoch on record is the successor's
        acked_seqs = [int(text.split()[1]) for text in acked + rest if text.startswith("acked")]
        assert set(acked_seqs) <= set(seen)  # every write it acknowledged survived the takeover
        assert [entry.seq for entry in store.recover().journal] == [*seen, seen[-1] + 1]
        data.close()
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()


def test_mnemex_shards_lists_actors_and_leases(tmp_path: Path) -> None:
    wall = Clock(time.time())
    owner = _shared(tmp_path, "shard-a", wall)
    _take(owner, ttl=600.0)
    owner.store("scope", KEY).append([line(1)])
    owner.close()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    out = subprocess.run([sys.executable, "-m", "mnemex.cli", "shards", str(tmp_path), "--json"],
                         capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    import json
    [row] = json.loads(out)
    assert (row["vshard"], row["actors"], row["owner"], row["epoch"]) == (V, 1, "shard-a", 1)
    assert 500 < row["expires_in_s"] <= 600 and row["damaged"] is None and row["bytes"] > 0
    text = subprocess.run([sys.executable, "-m", "mnemex.cli", "shards", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert f"{V:03x} ({V})" in text and "leases held now: shard-a: 1" in text
    (tmp_path / "shards" / f"{V:03x}" / "lease.json").write_text("{not json")
    damaged = subprocess.run([sys.executable, "-m", "mnemex.cli", "shards", str(tmp_path)],
                             capture_output=True, text=True, env=env, timeout=60)
    assert damaged.returncode == 1 and "does not parse" in damaged.stdout


def test_a_takeover_cut_short_after_raising_the_epoch_still_fences(tmp_path: Path) -> None:
    # The lock file's epoch is raised before lease.json is rewritten: a crash between the two
    # leaves the old owner refused, and the next takeover goes past both.
    wall = Clock()
    old = _shared(tmp_path, "old", wall)
    _take(old)
    store = old.store("scope", KEY)
    store.append([line(1)])
    lock = tmp_path / "shards" / f"{V:03x}" / "lease.lock"
    assert lock.read_text() == f"{1:020d}\n"
    lock.write_text(f"{7:020d}\n")  # what a taker that died before writing lease.json leaves
    with pytest.raises(NotOwner, match="7 is on record") as caught:
        store.append([line(2)])
    assert caught.value.epoch == 7
    wall.now += 11
    new = _shared(tmp_path, "new", wall)
    assert _take(new).epoch == 8
    new.store("scope", KEY).append([line(2)])
    old.close()
    new.close()


def test_an_empty_lease_file_reads_as_no_holder_and_the_epoch_still_grows(tmp_path: Path) -> None:
    # a renewal is not fsynced (the epoch fences, not the expiry): a crash of the machine may
    # leave lease.json empty; the shard is then free, and taken under a higher epoch
    wall = Clock()
    leases = FileLeases(tmp_path, wall=wall)
    assert leases.acquire(V, "a", ttl=10.0).epoch == 1
    assert leases.acquire(V, "a", ttl=10.0).epoch == 1  # a renewal
    (tmp_path / "shards" / f"{V:03x}" / "lease.json").write_bytes(b"")
    assert leases.holder(V) is None
    assert leases.acquire(V, "b", ttl=10.0).epoch == 2
    leases.close()


def test_a_draining_shard_takes_no_request_but_still_writes_under_its_lease() -> None:
    clock = Clock()
    mine = Ownership("a", clock=clock)
    mine.grant(Lease(vshard=V, owner="a", epoch=2, expires=0.0), asked_at=clock.now, ttl=30.0)
    assert mine.serves(V)
    mine.drain(V)  # give_up's first step: the final snapshots still need the epoch
    assert not mine.serves(V) and mine.epoch(V) == 2
    with pytest.raises(NotOwner, match="is handing over"):
        mine.check("scope", KEY)
    mine.revoke(V)
    assert mine.epoch(V) is None and not mine.serves(V)
    mine.grant(Lease(vshard=V, owner="a", epoch=3, expires=0.0), asked_at=clock.now, ttl=30.0)
    assert mine.serves(V)  # taken again later: no drain left over


def test_a_renewal_goes_beside_writes_and_a_takeover_waits_for_them(tmp_path: Path) -> None:
    import threading

    wall = Clock()
    mine, theirs = FileLeases(tmp_path, wall=wall, wait=5.0), FileLeases(tmp_path, wall=wall, wait=5.0)
    first = mine.acquire(V, "a", ttl=10.0)
    with mine.fence(V, lambda: first.epoch):  # a write in progress, in this very thread
        renewed = mine.acquire(V, "a", ttl=10.0)  # never waits for it (it used to, for the whole write)
        assert (renewed.epoch, renewed.expires) == (1, wall.now + 10.0)
    wall.now += 11  # a's lease lapsed
    order: list[str] = []
    inside = threading.Event()

    def write() -> None:
        with mine.fence(V, lambda: first.epoch):
            inside.set()
            time.sleep(0.2)
            order.append("write done")

    writer = threading.Thread(target=write)
    writer.start()
    inside.wait(5)
    taken = theirs.acquire(V, "b", ttl=10.0)  # waits for the write under way
    order.append("taken")
    writer.join()
    assert order == ["write done", "taken"] and taken.epoch == 2
    with pytest.raises(NotOwner, match="taken over"), mine.fence(V, lambda: first.epoch):
        pass
    mine.close()
    theirs.close()


def test_mnemex_shards_counts_actors_still_in_the_old_layout_apart(tmp_path: Path) -> None:
    data = tmp_path / "mnemex-data"
    (data / "scopes" / "chat.alice").mkdir(parents=True)
    (data / "scopes" / "chat.alice" / "journal.jsonl").write_bytes(b"")
    (data / "shards" / "001").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    out = subprocess.run([sys.executable, "-m", "mnemex.cli", "shards", str(data)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "1 actors are still in the layout before virtual shards" in out.stdout
