"""Keeping the leases of the virtual shards a runtime serves.

A host that runs a runtime over part of a cluster (a shard process) gives it an
``Ownership`` and runs a ``LeaseKeeper`` beside it: the keeper takes the lease of
every virtual shard assigned to it, renews each well before it lapses, and
reacts when one is lost (another owner took it after a stall longer than the
lease): the live actors of that shard are dropped without a snapshot, since
their state may be stale and their files are the new owner's now. A shard that
another owner holds is retried until its lease lapses (a failover) or the
assignment changes. ``give_up`` hands shards over cleanly: their actors are
snapshotted (or left a short journal: ``config.storage.snapshot_min_growth``), then
the leases released, so the next owner starts at once from their files instead of
waiting for the lease to run out.

Lease calls are blocking (a shared volume, a database): they run in worker
threads, at most ``concurrency`` at once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import trio

from mnemex.errors import MnemexError, NotOwner
from mnemex.kernel._kernel import Runtime
from mnemex.persistence import Lease, Leases, Ownership
from mnemex.persistence.shards import check_vshard

__all__ = ["LeaseKeeper"]

log = logging.getLogger("mnemex.runtime")


class LeaseKeeper:
    """Takes, renews and gives up the leases of the virtual shards assigned to
    ``runtime`` (whose ``ownership`` must be set). ``ttl`` is each lease's length;
    leases are renewed every ``ttl / 3`` and a shard held by another owner is
    tried again every ``retry`` seconds."""

    def __init__(self, runtime: Runtime, leases: Leases, *, ttl: float = 15.0, retry: float = 1.0,
                 concurrency: int = 8) -> None:
        if runtime.ownership is None:
            raise MnemexError("LeaseKeeper needs a runtime opened with an ownership "
                              "(open_actor_runtime(..., ownership=Ownership(name)))")
        if not (ttl > 0 and retry > 0 and math.isfinite(ttl) and math.isfinite(retry)):
            raise MnemexError(f"ttl and retry must be positive seconds, got {ttl!r} and {retry!r}")
        self.runtime = runtime
        self.ownership: Ownership = runtime.ownership
        self.leases = leases
        self.ttl = ttl
        self.retry = retry
        self._limiter = trio.CapacityLimiter(concurrency)
        self._wanted: set[int] = set()
        self._held: dict[int, Lease] = {}
        self._next: dict[int, float] = {}  # vshard -> when to try it next (trio time)
        self._wake = trio.Event()
        self.lost = 0
        """Leases lost to another owner so far."""
        self.attempts = 0
        """Lease calls (takes, renewals, retries) finished so far."""

    @property
    def held(self) -> list[int]:
        """The virtual shards whose lease this keeper holds now."""
        return sorted(self._held)

    def assign(self, vshards: Iterable[int]) -> None:
        """Serve ``vshards`` too: their leases are taken as soon as they are free.
        InvalidInput, nothing assigned, for a number that is no virtual shard."""
        vshards = [check_vshard(vshard) for vshard in vshards]
        for vshard in vshards:
            if vshard not in self._wanted:
                self._wanted.add(vshard)
                self._next[vshard] = -math.inf
        self._wake.set()

    async def give_up(self, vshards: Iterable[int]) -> None:
        """Stop serving ``vshards``: refuse new requests, snapshot their live actors,
        release their leases (so another owner may take them at once)."""
        given = [v for v in set(vshards) if v in self._wanted]
        for vshard in given:
            self._wanted.discard(vshard)
            self._next.pop(vshard, None)
            self.ownership.drain(vshard)  # a request arriving now is refused, not served here again
        await self.runtime.passivate_vshards(given)
        for vshard in given:
            self.ownership.revoke(vshard)
            lease = self._held.pop(vshard, None)
            if lease is not None:
                try:
                    await trio.to_thread.run_sync(self.leases.release, lease, limiter=self._limiter)
                except MnemexError as exc:  # it lapses by itself
                    log.warning("virtual shard %d: releasing its lease failed (%s); it lapses in %.0f s",
                                vshard, exc, self.ttl)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the leases until cancelled. ``started()`` once every assigned shard
        was tried once (those held by others are retried)."""
        await self._round()
        task_status.started()
        while True:
            due = min(self._next.values(), default=math.inf)
            with trio.move_on_at(due):
                await self._wake.wait()
            self._wake = trio.Event()
            await self._round()

    async def _round(self) -> None:
        now = trio.current_time()
        due = [vshard for vshard, at in self._next.items() if at <= now]
        many = getattr(self.leases, "acquire_many", None)
        if many is not None and len(due) > 1:
            # many in one call (thousands every ttl/3 would not keep up one by one: a
            # database takes them in one transaction, files renew them in one thread);
            # those it leaves out are taken one by one below
            asked = self.ownership.now()
            try:
                got = await trio.to_thread.run_sync(many, due, self.ownership.owner, self.ttl,
                                                    limiter=self._limiter)
            except MnemexError as exc:  # the database failed: keep what we have, retry soon
                log.warning("%d leases not renewed (%s); retrying in %.1f s", len(due), exc, self.retry)
                for vshard in due:
                    self._schedule(vshard, self.retry)
                self.attempts += len(due)
                return
            for vshard, outcome in got.items():
                await self._settle(vshard, asked, outcome)
                self.attempts += 1
            due = [vshard for vshard in due if vshard not in got]
        async with trio.open_nursery() as nursery:
            for vshard in due:
                nursery.start_soon(self._keep, vshard)

    async def _keep(self, vshard: int) -> None:
        try:
            await self._take(vshard)
        finally:
            self.attempts += 1

    async def _take(self, vshard: int) -> None:
        asked = self.ownership.now()
        try:
            lease = await trio.to_thread.run_sync(self.leases.acquire, vshard, self.ownership.owner, self.ttl,
                                                  limiter=self._limiter)
        except NotOwner as exc:
            await self._settle(vshard, asked, exc)
            return
        except MnemexError as exc:  # the volume or database failed: keep what we have, retry soon
            log.warning("virtual shard %d: lease not renewed (%s); retrying in %.1f s",
                        vshard, exc, self.retry)
            self._schedule(vshard, self.retry)
            return
        await self._settle(vshard, asked, lease)

    async def _settle(self, vshard: int, asked: float, outcome: Lease | NotOwner) -> None:
        """Act on the lease of ``vshard`` taken (asked for at ``asked``), or on who holds it."""
        if isinstance(outcome, NotOwner):
            await self._lose(vshard, outcome)
            self._schedule(vshard, self.retry)
            return
        lease = outcome
        if vshard not in self._wanted:  # given up meanwhile
            await trio.to_thread.run_sync(self.leases.release, lease, limiter=self._limiter)
            return
        before = self._held.get(vshard)
        # Our lease lapsed and was taken again: one epoch up is our own taking (each
        # taking raises it by exactly one), more means another owner's came between,
        # whose writes our live actors have not seen
        if before is not None and lease.epoch not in (before.epoch, before.epoch + 1):
            await self._lose(vshard, NotOwner(f"virtual shard {vshard} changed hands while our lease "
                                              f"had lapsed", vshard=vshard, epoch=lease.epoch))
        self._held[vshard] = lease
        self.ownership.grant(lease, asked, self.ttl)
        self._schedule(vshard, self.ttl / 3)

    async def _lose(self, vshard: int, error: NotOwner) -> None:
        """Forget ``vshard`` and drop its live actors (their state may be stale)."""
        if self._held.pop(vshard, None) is None:
            return
        self.lost += 1
        self.ownership.revoke(vshard)
        dropped = await self.runtime.drop_vshards([vshard], error)
        log.error("virtual shard %d: lease lost (%s); %d live actors dropped without a snapshot",
                  vshard, error, dropped)

    def _schedule(self, vshard: int, after: float) -> None:
        if vshard in self._wanted:
            self._next[vshard] = trio.current_time() + after
