"""mnemex on a local three-node Ray cluster (see conftest.py): the faults a cluster
meets, with every acknowledged write checked afterwards. Leases are short (2 s)
so that failovers take seconds; each test opens its own mnemex cluster on a fresh
shared data directory (all nodes run on this machine: a tmp folder is shared)."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from waiting import wait_until

import mnemex
import mnemex.ray
from mnemex.config import AutoExtract
from mnemex.conversations.protocol import AppendMessages
from mnemex.lowlevel import FileLeases, vshard_of
from mnemex.memories.protocol import CountMemories, NewMemory, Remember
from mnemex.ray.placement import Placement, create_cluster

pytestmark = pytest.mark.slow

LEASES = {"ttl": 6.0, "margin": 1.5, "retry": 0.2}
AUTO_AGENT = "auto-bot"
"""Its sessions are extracted automatically (``knowledge.auto``), into ``AUTO_SCOPE``."""
_schemas = itertools.count()


def _apart(agent: str, shards: int = 3) -> tuple[str, str]:
    """A scope key placed (initially) on another shard than agent ``agent``."""
    owners = Placement.initial(shards).owners
    home = owners[vshard_of("agent", (agent,))]
    for i in range(1_000_000):
        key = ("app", f"{agent}-user-{i}")
        if owners[vshard_of("scope", key)] != home:
            return key
    raise AssertionError("unreachable")


AUTO_SCOPE = _apart(AUTO_AGENT)


@pytest.fixture(params=["files", "postgres"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Where the shards keep their journals: the shared data directory, or a real
    PostgreSQL the tests start (skipped, saying why, where none can be started)."""
    if request.param == "files":
        return {}
    server = request.getfixturevalue("postgres_server")
    return {"backend": "postgres", "postgres_dsn": server.dsn,
            "postgres_schema": f"c{os.getpid()}_{next(_schemas)}"}


def _config(path: Path, backend: dict[str, Any] | None = None) -> mnemex.Config:
    auto = (AutoExtract(agent=AUTO_AGENT, app_name=AUTO_SCOPE[0], user_id=AUTO_SCOPE[1], turns=2),)
    return mnemex.Config(data_dir=str(path), embedder="hashing", fsync="always", knowledge_auto=auto,
                         **(backend or {}))


@pytest.fixture
def client(ray_cluster: Any, tmp_path: Path, backend: dict[str, Any]) -> Iterator[mnemex.ray.Client]:
    """A cluster of three shards, with each backend (the fault tests run on both)."""
    with mnemex.ray.Client(_config(tmp_path / "shared", backend), shards=3, actor_options={"num_cpus": 1},
                           **LEASES) as opened:
        yield opened


@pytest.fixture
def files_client(ray_cluster: Any, tmp_path: Path) -> Iterator[mnemex.ray.Client]:
    """A cluster of three shards journaling in files (what does not depend on the backend)."""
    with mnemex.ray.Client(_config(tmp_path / "shared"), shards=3, actor_options={"num_cpus": 1},
                           **LEASES) as opened:
        yield opened


def _scope_in(vshard: int, app: str = "app") -> tuple[str, str]:
    """A scope key (app_name, user_id) whose actor lives in virtual shard ``vshard``."""
    for i in range(1_000_000):
        if vshard_of("scope", (app, f"user-{i}")) == vshard:
            return app, f"user-{i}"
    raise AssertionError("unreachable")


def _pid_of(client: mnemex.ray.Client, vshard: int) -> int:
    pids: list[int] = client.call(client.cluster.shard_pids)
    return pids[client.cluster.placement.owners[vshard]]


def _messages(client: mnemex.ray.Client, agent: str, session: str) -> list[str]:
    return [m.message["content"] for m in client.agent(agent).history(session)]


class Writer(threading.Thread):
    """Writes ``count`` numbered messages to one session, then as many memories to one
    scope, keeping what was acknowledged; a write that raised is recorded too."""

    def __init__(self, client: mnemex.ray.Client, agent: str, scope: tuple[str, str], count: int) -> None:
        super().__init__(daemon=True)
        self.client, self.agent, self.scope, self.count = client, agent, scope, count
        self.appended: list[str] = []
        self.remembered: list[str] = []
        self.errors: list[BaseException] = []
        self.progress = threading.Event()

    def run(self) -> None:
        agent = self.client.agent(self.agent)
        scope = self.client.scope(app_name=self.scope[0], user_id=self.scope[1])
        try:
            for i in range(self.count):
                agent.append("s1", [{"role": "user", "content": f"m{i}"}])
                self.appended.append(f"m{i}")
                self.remembered.append(scope.remember(f"fact number {i}"))
                if i == self.count // 4:
                    self.progress.set()
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self.progress.set()

    def check(self, client: mnemex.ray.Client) -> None:
        assert not self.errors, self.errors
        assert _messages(client, self.agent, "s1") == self.appended  # none lost, none twice
        scope = client.scope(app_name=self.scope[0], user_id=self.scope[1])
        assert scope.count() == len(self.remembered) == self.count
        for memory_id in self.remembered:
            scope.get(memory_id)


def test_acknowledged_writes_survive_killing_a_shard_process_mid_stream(client: mnemex.ray.Client) -> None:
    vshard = vshard_of("agent", ("killed",))
    writer = Writer(client, "killed", _scope_in(vshard), 60)
    before = _pid_of(client, vshard)
    writer.start()
    assert writer.progress.wait(60)
    os.kill(before, signal.SIGKILL)  # mid-stream: a write is in flight or about to be
    assert writer.is_alive()
    writer.join(120)
    assert not writer.is_alive()
    writer.check(client)
    assert _pid_of(client, vshard) != before  # Ray restarted it; it took the leases over
    assert client.cluster.host.retries > 0


def test_a_write_whose_reply_was_lost_is_applied_once_when_retried_after_the_shard_restarted(
        files_client: mnemex.ray.Client) -> None:
    import ray

    client = files_client
    vshard = vshard_of("agent", ("retried",))
    shard = client.cluster.host.shards[client.cluster.placement.owners[vshard]]
    append = AppendMessages(session_id="s1", messages=[msgspec.Raw(b'{"role":"user","content":"once"}')],
                            timestamp=time.time())
    body = msgspec.json.encode({"key": ["retried"], "command": append})
    ok, first = ray.get(shard.ask.remote("agent", body, "request-1"))
    settling = time.monotonic() + 30
    while not ok and time.monotonic() < settling:  # the shard may not serve the vshard yet (leases
        time.sleep(0.2)                            # of the tests before): the same request id
        ok, first = ray.get(shard.ask.remote("agent", body, "request-1"))
    assert ok, first
    os.kill(_pid_of(client, vshard), signal.SIGKILL)  # as if the reply had been lost with the process
    deadline = time.monotonic() + 60
    while True:  # what the client does: the same request id until the restarted shard serves
        try:
            ok, again = ray.get(shard.ask.remote("agent", body, "request-1"), timeout=30)
        except ray.exceptions.RayError:
            ok, again = False, b"{}"
        if ok or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ok and again == first  # the first reply, from the journal the restarted shard replayed
    assert _messages(client, "retried", "s1") == ["once"]


def test_a_shard_that_cannot_see_the_data_refuses_it_and_never_serves_it_empty(
        ray_cluster: Any, tmp_path: Path, backend: dict[str, Any]) -> None:
    import ray

    shared = tmp_path / "shared"
    info, _ = create_cluster(shared, 1)
    with mnemex.ray.Client(_config(shared, backend), shards=1, **LEASES) as opened:
        opened.scope(app_name="app", user_id="alice").remember("User writes Java")
    # a shard of the same cluster on a node whose data directory is not the shared one
    elsewhere = tmp_path / "not-mounted"
    actor = ray.remote(max_restarts=0)(mnemex.ray.Shard)
    blind = actor.options(name="blind", namespace="mnemex-tests").remote(
        0, str(elsewhere), info.cluster, _config(elsewhere, backend), **LEASES)
    try:
        vshard = vshard_of("scope", ("app", "alice"))
        assert ray.get(blind.assign.remote([vshard], 3.0)) == []
        body = msgspec.json.encode({"key": ["app", "alice"], "command": CountMemories()})
        ok, payload = ray.get(blind.ask.remote("scope", body, None))
        assert not ok
        error = msgspec.json.decode(payload)
        assert error["type"] == "NotOwner" and error["vshard"] == vshard
        assert "is the shared volume mounted" in error["error"]
        health = ray.get(blind.health.remote())
        assert health.state == "blind" and health.held == 0
        assert not (elsewhere / "shards").exists() or not any((elsewhere / "shards").iterdir())
    finally:
        ray.kill(blind, no_restart=True)


@contextlib.contextmanager
def _leases(backend: dict[str, Any], tmp_path: Path) -> Iterator[Any]:
    """The lease records the ``client`` fixture's shards keep (read only)."""
    if backend.get("backend") == "postgres":
        from mnemex.persistence.postgres import PostgresLeases

        leases: Any = PostgresLeases(backend["postgres_dsn"], schema=backend["postgres_schema"])
    else:
        leases = FileLeases(tmp_path / "shared")
    try:
        yield leases
    finally:
        leases.close()


def test_a_frozen_shard_is_fenced_when_its_lease_passes_and_its_late_commits_are_refused(
        client: mnemex.ray.Client, backend: dict[str, Any], tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        _a_frozen_shard_is_fenced(client, stack.enter_context(_leases(backend, tmp_path)))


def _a_frozen_shard_is_fenced(client: mnemex.ray.Client, leases: Any) -> None:
    import ray

    scope_key = ("app", "frozen")
    vshard = vshard_of("scope", scope_key)
    scope = client.scope(app_name=scope_key[0], user_id=scope_key[1])
    kept = scope.remember("written before the freeze")
    owner = client.cluster.placement.owners[vshard]
    frozen = client.cluster.host.shards[owner]
    pid = _pid_of(client, vshard)
    other = (owner + 1) % 3
    os.kill(pid, signal.SIGSTOP)
    try:
        frozen_lease = leases.holder(vshard)  # its last renewal: it renews no more
        assert frozen_lease is not None
        # a write already on its way to the frozen owner: it lands when the process resumes
        late_memory = NewMemory(id="01JZZZZZZZZZZZZZZZZZZZZZZZ", content="a late commit")
        late_body = {"key": list(scope_key), "command": Remember(memories=[late_memory], now=time.time())}
        late = frozen.ask.remote("scope", msgspec.json.encode(late_body), "late-1")
        held = client.rebalance(vshard, other, wait=20.0)  # the frozen one cannot give it up
        assert held == [vshard]
        # the new owner took it once the frozen one's lease had lapsed, not before (by
        # the lease records' clock: a new lease expires ttl after it was taken; a
        # bound on the time waited failed where a renewal came late at load)
        taken = leases.holder(vshard)
        assert taken is not None and taken.epoch > frozen_lease.epoch and taken.owner != frozen_lease.owner
        assert taken.expires - LEASES["ttl"] >= frozen_lease.expires - 0.05, (frozen_lease, taken)
        after = scope.remember("written by the new owner")
    finally:
        os.kill(pid, signal.SIGCONT)
    ok, payload = ray.get(late, timeout=60)
    assert not ok and msgspec.json.decode(payload)["type"] == "NotOwner"
    assert sorted(m.content for m in scope.memories().memories) == sorted(
        ["written before the freeze", "written by the new owner"])
    assert {kept, after} <= {m.id for m in scope.memories().memories}
    assert client.health()[owner] is not None  # it lives on
    # once awake it lets the lease go: its keeper's next round, after the refused commit
    wait_until(lambda: vshard not in ray.get(frozen.held.remote(), timeout=30),
               what="the frozen shard to let go of its vshard", timeout=30)


def test_rebalancing_a_vshard_under_write_load_loses_and_duplicates_nothing(
        client: mnemex.ray.Client) -> None:
    vshard = vshard_of("agent", ("moving",))
    writer = Writer(client, "moving", _scope_in(vshard), 400)
    writer.start()
    assert writer.progress.wait(60)
    first = client.cluster.placement.owners[vshard]
    for hop in range(4):
        to = (first + hop + 1) % 3
        assert client.rebalance(vshard, to, wait=20.0) == [vshard]
        assert writer.is_alive()  # every hop under load
    writer.join(120)
    assert not writer.is_alive()
    writer.check(client)


def test_node_loss_moves_its_shards_with_every_scope_intact(
        ray_cluster: Any, client: mnemex.ray.Client) -> None:
    scopes = [("app", f"user-{i}") for i in range(24)]
    ids = {key: client.scope(app_name=key[0], user_id=key[1]).remember(f"memory of {key[1]}")
           for key in scopes}
    health = client.health()
    worker_ids = {node.node_id: node for node in ray_cluster.workers}
    victims = [h for h in health if h is not None and h.node_id in worker_ids]
    assert victims, "no shard runs on a worker node"
    victim = victims[0]
    lost = [key for key in scopes
            if client.cluster.placement.owners[vshard_of("scope", key)] == int(victim.name.split("-")[1])]
    ray_cluster.remove_node(worker_ids[victim.node_id])
    ray_cluster.workers.remove(worker_ids[victim.node_id])
    started = time.monotonic()
    for key in lost or scopes[:1]:
        assert client.scope(app_name=key[0], user_id=key[1]).count() == 1
    failover = time.monotonic() - started
    for key in scopes:
        scope = client.scope(app_name=key[0], user_id=key[1])
        assert [m.id for m in scope.memories().memories] == [ids[key]]
    after = client.health()
    assert all(h is not None and h.state == "serving" for h in after)
    assert failover < 60, f"serving again took {failover:.1f} s"
    # the cluster the other tests share gets its third node back
    ray_cluster.workers.append(ray_cluster.add_node(node_ip_address="127.0.0.1", num_cpus=1,
                                                    object_store_memory=80 * 1024 * 1024))


def _until(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds:g} s"
        time.sleep(0.2)


def test_archive_extract_and_automatic_extraction_reach_a_scope_on_another_shard(
        files_client: mnemex.ray.Client) -> None:
    client = files_client
    placement = client.cluster.placement
    app, user = _apart("archivist")
    home = placement.owners[vshard_of("agent", ("archivist",))]
    assert placement.owners[vshard_of("scope", (app, user))] != home
    client.agent("archivist").append("s1", [
        {"role": "user", "content": "I live in Lisbon and I work as a nurse."},
        {"role": "assistant", "content": "Lisbon is lovely!"}])
    added = client.archive("archivist", "s1", user_id=user, app_name=app)  # forwarded to the scope's shard
    assert added.added == 2 and len(added.ids) == 2
    again = client.archive("archivist", "s1", user_id=user, app_name=app)
    assert again.added == 0 and again.ids == added.ids
    scope = client.scope(app_name=app, user_id=user)
    assert sorted(m.id for m in scope.memories().memories) == sorted(added.ids)
    # the scope's shard runs the job; the job reads the session on the agent's shard
    extracted = client.extract("archivist", "s1", user_id=user, app_name=app)
    assert extracted.status == "committed" and extracted.upto == 2 and len(extracted.added) == 2
    assert client.extract("archivist", "s1", user_id=user, app_name=app).status == "nothing_new"
    contents = {m.content for m in scope.memories().memories}
    assert {"The user lives in Lisbon.", "The user works as a nurse."} <= contents
    # automatic extraction: the agent's shard counts the appends and tells the scope's shard
    auto = client.scope(app_name=AUTO_SCOPE[0], user_id=AUTO_SCOPE[1])
    client.agent(AUTO_AGENT).append("s1", [{"role": "user", "content": "I live in Porto."}])
    client.agent(AUTO_AGENT).append("s1", [{"role": "user", "content": "I work as a pilot."}])
    _until(lambda: auto.count() >= 2, 60, "automatic extraction")
    assert {m.content for m in auto.memories().memories} == {"The user lives in Porto.",
                                                             "The user works as a pilot."}


class Archiver(threading.Thread):
    """Appends ``count`` sessions of two messages to agent ``agent`` and archives each
    into ``scope``, keeping what was acknowledged."""

    def __init__(self, client: mnemex.ray.Client, agent: str, scope: tuple[str, str], count: int,
                 hold_at: int | None = None) -> None:
        super().__init__(daemon=True)
        self.client, self.agent, self.scope, self.count = client, agent, scope, count
        self.ids: dict[str, list[str]] = {}
        self.errors: list[BaseException] = []
        self.done = 0
        self.hold_at = hold_at
        """Before this session, wait for ``go`` (having set ``held``): a test kills a shard there."""
        self.held = threading.Event()
        self.go = threading.Event()

    def run(self) -> None:
        agent = self.client.agent(self.agent)
        try:
            for i in range(self.count):
                if i == self.hold_at:
                    self.held.set()
                    self.go.wait(120)
                agent.append(f"s{i}", [{"role": "user", "content": f"I keep note number {i}."},
                                       {"role": "assistant", "content": f"Understood, filed in drawer {i}."}])
                added = self.client.archive(self.agent, f"s{i}", user_id=self.scope[1],
                                            app_name=self.scope[0])
                self.ids[f"s{i}"] = added.ids
                self.done = i + 1
        except BaseException as exc:
            self.errors.append(exc)


def test_archiving_while_the_scopes_and_then_the_agents_shard_is_killed_loses_and_duplicates_nothing(
        client: mnemex.ray.Client) -> None:
    agent = "mover"
    scope_key = _apart(agent)
    # both pids now: while a killed shard restarts, asking every shard its pid fails
    receiver = _pid_of(client, vshard_of("scope", scope_key))
    sender = _pid_of(client, vshard_of("agent", (agent,)))
    archiver = Archiver(client, agent, scope_key, 24, hold_at=12)
    archiver.start()
    _until(lambda: archiver.done >= 4 or not archiver.is_alive(), 60, "the first archives")
    os.kill(receiver, signal.SIGKILL)  # the Forwards' receiver
    _until(lambda: archiver.held.is_set() or not archiver.is_alive(), 90, "archiving after the first kill")
    # the archiver waits before its 13th session: the next call meets the killed sender
    # (without the hold it could be done before the kill, archives being quick)
    os.kill(sender, signal.SIGKILL)  # the Forwards' sender
    archiver.go.set()
    archiver.join(120)
    assert not archiver.is_alive() and not archiver.errors, archiver.errors
    assert client.cluster.host.retries > 0  # the second kill was met by the client
    scope = client.scope(app_name=scope_key[0], user_id=scope_key[1])
    stored = {m.id: m.content for m in scope.memories(limit=100).memories}
    assert len(stored) == 48  # every message of every session once: nothing lost, nothing twice
    for i in range(24):
        assert [stored[memory_id] for memory_id in archiver.ids[f"s{i}"]] == [
            f"I keep note number {i}.", f"Understood, filed in drawer {i}."]


def test_a_detached_cluster_outlives_its_driver_and_drivers_share_its_placement(
        ray_cluster: Any, tmp_path: Path) -> None:
    import trio

    shared = tmp_path / "shared"
    with mnemex.ray.Client(_config(shared), shards=2, detached=True, **LEASES) as first:
        memory_id = first.scope(app_name="app", user_id="alice").remember("User writes Java")
        pids = first.call(first.cluster.shard_pids)
    with mnemex.ray.Client(_config(shared), shards=2, detached=True, **LEASES) as second, \
            mnemex.ray.Client(_config(shared), shards=2, detached=True, **LEASES) as third:
        assert second.call(second.cluster.shard_pids) == pids  # the same shards, reached by name
        assert second.scope(app_name="app", user_id="alice").get(memory_id).content == "User writes Java"
        state = second.state(app_name="app", user_id="alice")  # key-value state crosses too
        state.update({"language": "java"})
        assert state.get() == {"language": "java"}
        # the second driver moves alice's virtual shard; the third learns it from the refusal
        vshard = vshard_of("scope", ("app", "alice"))
        to = 1 - second.cluster.placement.owners[vshard]
        assert second.rebalance(vshard, to) == [vshard]
        assert third.cluster.placement.owners[vshard] != to
        third.scope(app_name="app", user_id="alice").remember("User moved to Lisbon")
        assert third.cluster.placement.owners[vshard] == to and third.cluster.host.retries > 0
    assert trio.run(mnemex.ray.stop_cluster, str(shared)) == 2
    assert trio.run(mnemex.ray.stop_cluster, str(shared)) == 0  # none left running
    with pytest.raises(mnemex.InvalidInput, match="shards"):
        mnemex.ray.Client(_config(shared), shards=3, **LEASES)
