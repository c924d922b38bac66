"""Ownership of virtual shards: a lease per virtual shard, with a fencing epoch.

A process serves the actors of a virtual shard only while it holds the shard's
lease ``(owner, epoch, expires)``. Taking a shard from another owner (whose
lease has lapsed) raises the epoch by one; every write a store makes carries
the epoch it was granted, and the storage refuses it once the epoch on record
is newer. So a process that was frozen, partitioned or simply slow cannot write
after its successor took over, whatever it believes about time: time only
decides when a lease may be taken, the epoch decides who may write.

``FileLeases`` keeps the leases on the volume holding the data directory (one
``lease.json`` per virtual shard, and a ``lease.lock`` file holding the current
epoch): a store's write holds a shared ``flock`` on the lock file and checks the
epoch in it under that lock, a takeover holds it exclusively while it raises the
epoch (in the lock file first, then in ``lease.json``), so no write of the old
owner can land after the new owner read the shard. The volume must be coherent
for every process using it (one machine's disk, or a cluster filesystem such as
CephFS, GPFS or Lustre): an NFS client may hold written pages back from other
clients, which fencing by file cannot see; use the Postgres journal there.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import msgspec

from mnemex.errors import CorruptData, InvalidInput, NotOwner, StorageError
from mnemex.persistence._files import describe_os_error, write_atomic
from mnemex.persistence.shards import check_vshard, shard_dir, vshard_of

__all__ = ["FileLeases", "Lease", "Leases", "Ownership"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
LEASE_FILE = "lease.json"
LEASE_LOCK = "lease.lock"


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """Who owns virtual shard ``vshard``: ``owner`` until ``expires`` (wall-clock
    seconds since the epoch, renewed while it serves), writing with ``epoch``."""

    vshard: int
    owner: str
    epoch: int
    expires: float


_decode_lease = msgspec.json.Decoder(Lease).decode
_encode = msgspec.json.Encoder().encode


class Leases(Protocol):
    """Where the leases of virtual shards are kept (a shared volume, a database).
    One may also have ``acquire_many(vshards, owner, ttl) -> {vshard: Lease |
    NotOwner}``, ``acquire`` of many at once, which may leave some out (the
    ``LeaseKeeper`` then acquires those alone)."""

    def acquire(self, vshard: int, owner: str, ttl: float) -> Lease:
        """Take ``vshard`` for ``owner`` for ``ttl`` seconds, or renew ``owner``'s
        lease. Taking it from another owner, or after no one (its own lapsed lease
        too), raises the epoch by one, and nothing else raises it: an owner taking
        its lapsed lease back finds the epoch one up only if no one took it between.
        NotOwner (naming the holder) while another owner's lease has not lapsed;
        Timeout-free: waits only for writes in progress to finish."""
        ...

    def release(self, lease: Lease) -> None:
        """Let ``lease`` lapse now, if it is still the one on record (a clean stop:
        the next owner need not wait for it to expire)."""
        ...

    def holder(self, vshard: int) -> Lease | None:
        """The lease on record for ``vshard`` (lapsed or not), None if never taken."""
        ...


class Ownership:
    """The virtual shards one process owns and the epoch of each: the kernel asks
    it whether to serve a key, the storage which epoch a write carries.

    ``owner`` names the process (a shard actor's name), and no other process alive
    at the same time: a lease is renewed for whoever gives its owner's name, and a
    lapsed lease taken back one epoch up is taken to have had no holder between
    (``LeaseKeeper``); ``margin`` is the part of
    each lease, in seconds, that the holder gives up to clock drift: it stops
    serving a shard that long before its lease runs out unless renewed."""

    def __init__(self, owner: str, *, margin: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(owner, str) or not owner or not owner.isprintable():
            raise InvalidInput(f"owner must be a non-empty printable str, got {owner!r}", field="owner")
        self.owner = owner
        self._margin = margin
        self._clock = clock
        self._held: dict[int, tuple[int, float]] = {}  # vshard -> (epoch, serve until, on clock)
        self._draining: set[int] = set()  # being handed over: no new requests, writes still fenced in

    def grant(self, lease: Lease, asked_at: float, ttl: float) -> None:
        """Record ``lease``, just acquired or renewed for ``ttl`` seconds, as ours.
        ``asked_at`` is this clock's reading taken before asking for it: the lease
        counts from then (the store's wall clock may differ from ours)."""
        if lease.owner != self.owner:
            raise InvalidInput(f"lease of vshard {lease.vshard} belongs to {lease.owner!r}, "
                               f"not {self.owner!r}", field="lease")
        self._held[lease.vshard] = (lease.epoch, asked_at + ttl - self._margin)

    def now(self) -> float:
        """This ownership's clock (what ``grant``'s ``asked_at`` is read from)."""
        return self._clock()

    def revoke(self, vshard: int) -> None:
        """Forget ``vshard`` (its lease was lost or given back)."""
        self._held.pop(vshard, None)
        self._draining.discard(vshard)

    def drain(self, vshard: int) -> None:
        """Take no new requests for ``vshard`` (``check`` refuses it) while its actors
        finish and snapshot under the lease still held (``epoch`` still answers):
        the first step of handing it over."""
        self._draining.add(vshard)

    def serves(self, vshard: int) -> bool:
        """True if requests for ``vshard`` are taken now: held, not lapsed, not draining."""
        return vshard not in self._draining and self.epoch(vshard) is not None

    def epoch(self, vshard: int) -> int | None:
        """The epoch our writes to ``vshard`` carry, None if we do not own it now."""
        held = self._held.get(vshard)
        if held is None or self._clock() >= held[1]:
            return None
        return held[0]

    def vshards(self) -> list[int]:
        """The virtual shards we hold a lease on (lapsed ones included until revoked)."""
        return sorted(self._held)

    def check(self, kind: str, key: tuple[str, ...]) -> int:
        """The epoch of the virtual shard of ``kind``/``key``; NotOwner if not ours now."""
        vshard = vshard_of(kind, key)
        if not self.serves(vshard):
            lapsed = "is handing over" if vshard in self._draining else \
                "no longer holds a current lease on" if vshard in self._held else "does not own"
            raise NotOwner(f"{kind} {'/'.join(key)!r} lives in virtual shard {vshard}, which "
                           f"{self.owner!r} {lapsed}; "
                           f"send it to the shard's owner", vshard=vshard)
        return self._held[vshard][0]

    def __repr__(self) -> str:
        return f"Ownership({self.owner!r}, {len(self._held)} virtual shards)"


class _ShardLock:
    """This process's side of one virtual shard's lease lock: one descriptor, and how
    many of our threads hold its shared flock now (-1: our own takeover holds it)."""

    __slots__ = ("changed", "fd", "holders", "lease", "renewing")

    def __init__(self, fd: int, lease: Path) -> None:
        self.fd = fd
        self.lease = lease  # the shard's lease.json
        self.holders = 0
        self.changed = threading.Condition(threading.Lock())
        self.renewing = threading.Lock()  # one renewal at a time (they share lease.json.tmp)

    def epoch(self) -> int:
        """The epoch the lock file holds (0: none yet). Read under the flock."""
        text = os.pread(self.fd, _EPOCH_BYTES, 0)
        return int(text) if text.strip() else 0

    def set_epoch(self, epoch: int) -> None:
        """Write ``epoch`` in place, durably (under the exclusive flock)."""
        os.pwrite(self.fd, f"{epoch:0{_EPOCH_BYTES - 1}d}\n".encode(), 0)
        os.fsync(self.fd)


_EPOCH_BYTES = 21  # 20 digits and a newline, rewritten in place: one sector, never torn


class FileLeases:
    """Leases kept beside the data of each virtual shard on a shared volume (see
    the module docstring). One instance per process; thread-safe."""

    def __init__(self, data_dir: str | Path, *, wait: float = 30.0,
                 wall: Callable[[], float] = time.time) -> None:
        self.path = Path(data_dir)
        self._wait = wait
        self._wall = wall  # the clock leases expire by (a test's own)
        self._lock = threading.Lock()
        self._shards: dict[int, _ShardLock] = {}

    # -- the lease record --------------------------------------------------------

    def _shard(self, vshard: int) -> _ShardLock:
        with self._lock:
            shard = self._shards.get(vshard)
            if shard is None:
                folder = shard_dir(self.path, vshard)
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                    fd = os.open(folder / LEASE_LOCK, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
                except OSError as exc:
                    raise StorageError(f"cannot open the lease lock of virtual shard {vshard} in {folder}: "
                                       f"{describe_os_error(exc)}") from exc
                shard = self._shards[vshard] = _ShardLock(fd, folder / LEASE_FILE)
            return shard

    def holder(self, vshard: int) -> Lease | None:
        return self._holder_at(shard_dir(self.path, check_vshard(vshard)) / LEASE_FILE, vshard)

    def _holder_at(self, path: Path, vshard: int) -> Lease | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read the lease {path}: {describe_os_error(exc)}") from exc
        if not raw:  # a renewal the machine's crash did not let reach the disk: no holder
            return None
        try:
            lease = _decode_lease(raw)
        except msgspec.DecodeError as exc:
            raise CorruptData(f"lease {path} does not parse ({exc}); it is written whole or not at all, "
                              f"so something else wrote it") from exc
        if lease.vshard != vshard:
            raise CorruptData(f"lease {path} is for virtual shard {lease.vshard}, not {vshard}")
        return lease

    def acquire(self, vshard: int, owner: str, ttl: float) -> Lease:
        check_vshard(vshard)
        check_claim(owner, ttl)
        renewed = self._renew(vshard, owner, ttl)
        if renewed is not None:
            return renewed
        with self._exclusive(vshard):
            current = self.holder(vshard)
            now = self._wall()
            if current is not None and current.owner != owner and current.expires > now:
                raise NotOwner(f"virtual shard {vshard} is leased to {current.owner!r} "
                               f"(epoch {current.epoch}) for {current.expires - now:.1f} s more",
                               vshard=vshard, owner=current.owner, epoch=current.epoch)
            # A takeover (a plain renewal went the shared way above): the epoch is raised
            # in the lock file first, so the old owner's next write is refused.
            shard = self._shard(vshard)
            try:
                epoch = max(shard.epoch(), current.epoch if current is not None else 0) + 1
                shard.set_epoch(epoch)
            except (OSError, ValueError) as exc:
                raise StorageError(f"cannot read or write the epoch of virtual shard {vshard} in "
                                   f"{shard_dir(self.path, vshard) / LEASE_LOCK}: {exc}") from exc
            lease = Lease(vshard=vshard, owner=owner, epoch=epoch, expires=now + ttl)
            self._write(shard, lease, durable=True)
            return lease

    def acquire_many(self, vshards: Sequence[int], owner: str, ttl: float) -> dict[int, Lease | NotOwner]:
        """The renewals of ``acquire`` for many virtual shards in one call (a shard
        process renews thousands every few seconds, and a thread hop and a task each
        cost more than the renewal itself): the renewed lease of every one that
        ``owner`` holds now. Any other (held by another owner, to be taken after
        none or after a lapse, or whose files failed) is left out: ``acquire`` it
        alone, which decides it and says why."""
        for vshard in vshards:
            check_vshard(vshard)
        check_claim(owner, ttl)
        out: dict[int, Lease | NotOwner] = {}
        for vshard in vshards:
            try:
                # no wait for a lock (a takeover or a frozen writer may hold one for
                # seconds): such a shard waits alone, not every renewal after it
                lease = self._renew(vshard, owner, ttl, wait=0.0)
            except (StorageError, CorruptData):
                continue  # (waited for, or the same failure reported, on the way alone)
            if lease is not None:
                out[vshard] = lease
        return out

    def _renew(self, vshard: int, owner: str, ttl: float, *, wait: float | None = None) -> Lease | None:
        """Extend ``owner``'s current lease, holding the lease lock shared, beside this
        process's writes (a takeover needs the lock alone, so it cannot come in
        between): a renewal never waits for the writes, nor they for it. None when
        this is not a plain renewal (the exclusive path decides then). ``wait``: the
        seconds it may wait for the locks (None: the instance's ``wait``), else
        StorageError."""
        shard = self._shard(vshard)
        if not shard.renewing.acquire(timeout=-1 if wait is None else wait):
            raise StorageError(f"virtual shard {vshard}: another renewal of its lease is under way")
        try:
            return self._renewed(shard, vshard, owner, ttl, wait)
        finally:
            shard.renewing.release()

    def _renewed(self, shard: _ShardLock, vshard: int, owner: str, ttl: float,
                 wait: float | None) -> Lease | None:
        with self._shared(shard, vshard, wait):
            current = self._holder_at(shard.lease, vshard)
            now = self._wall()
            if current is None or current.owner != owner or current.expires <= now:
                return None
            try:
                if shard.epoch() != current.epoch:
                    return None
            except (OSError, ValueError) as exc:
                raise StorageError(f"cannot read the epoch of virtual shard {vshard}: {exc}") from exc
            lease = Lease(vshard=vshard, owner=owner, epoch=current.epoch, expires=now + ttl)
            # Not durable: the epoch fences, the expiry only says when the shard may be
            # taken; after a crash of the machine it reads as the lease before, or none
            # (taken then, under a higher epoch).
            self._write(shard, lease, durable=False)
            return lease

    def release(self, lease: Lease) -> None:
        with self._exclusive(lease.vshard):
            current = self.holder(lease.vshard)
            if current is not None and current.owner == lease.owner and current.epoch == lease.epoch:
                self._write(self._shard(lease.vshard),
                            Lease(vshard=lease.vshard, owner=lease.owner, epoch=lease.epoch, expires=0.0),
                            durable=True)

    def _write(self, shard: _ShardLock, lease: Lease, *, durable: bool) -> None:
        path = shard.lease
        try:
            write_atomic(path, (_encode(lease),), durable=durable)
        except OSError as exc:
            raise StorageError(f"cannot write the lease {path}: {describe_os_error(exc)}") from exc

    @contextlib.contextmanager
    def _exclusive(self, vshard: int) -> Iterator[None]:
        """Hold ``vshard``'s lease lock exclusively: no write of any owner is under way."""
        shard = self._shard(vshard)
        deadline = time.monotonic() + self._wait
        with shard.changed:  # our own writers share our descriptor's lock: they finish first
            while shard.holders != 0:
                if not shard.changed.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise StorageError(f"virtual shard {vshard}: writes of this process did not finish "
                                       f"within {self._wait} s")
            shard.holders = -1
        try:
            _flock(shard.fd, fcntl.LOCK_EX, deadline, f"virtual shard {vshard}'s lease lock in {self.path}")
            try:
                yield
            finally:
                fcntl.flock(shard.fd, fcntl.LOCK_UN)
        finally:
            with shard.changed:
                shard.holders = 0
                shard.changed.notify_all()

    # -- fencing ---------------------------------------------------------------

    def fence(self, vshard: int, epoch: Callable[[], int | None]) -> AbstractContextManager[None]:
        """A guard for every write to ``vshard``'s files: while it is held, the lease
        on record has epoch ``epoch()`` (the one this process was granted) and no
        takeover can complete; NotOwner when the epoch on record is another, or
        when ``epoch()`` says the process does not own the shard now."""
        return self._fenced(check_vshard(vshard), epoch)

    @contextlib.contextmanager
    def _fenced(self, vshard: int, epoch: Callable[[], int | None]) -> Iterator[None]:
        mine = epoch()
        if mine is None:
            raise NotOwner(f"virtual shard {vshard} is not owned by this process now (no current lease); "
                           f"nothing was written", vshard=vshard)
        shard = self._shard(vshard)
        with self._shared(shard, vshard):
            try:
                locked = shard.epoch()
            except (OSError, ValueError) as exc:
                raise StorageError(f"cannot read the epoch of virtual shard {vshard}: {exc}; "
                                   f"nothing was written") from exc
            if locked != mine:
                current = self.holder(vshard)
                raise NotOwner(f"virtual shard {vshard} was taken over (epoch {mine} is ours, {locked} is "
                               f"on record, owner {current.owner if current else 'unknown'!r}); nothing was "
                               f"written", vshard=vshard, owner=current.owner if current else None,
                               epoch=locked)
            yield

    @contextlib.contextmanager
    def _shared(self, shard: _ShardLock, vshard: int, wait: float | None = None) -> Iterator[None]:
        """Hold ``vshard``'s lease lock shared, with this process's other holders (the
        first takes the flock, the last lets go). Waits for this process's own
        exclusive hold (a takeover or a release), and another process's, ``wait``
        seconds at most (None: the instance's ``wait``)."""
        wait = self._wait if wait is None else wait
        deadline = time.monotonic() + wait
        with shard.changed:
            while shard.holders < 0:
                if not shard.changed.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise StorageError(f"virtual shard {vshard}: this process's takeover or release of "
                                       f"its lease did not finish within {wait} s; nothing was written")
            if shard.holders == 0:
                _flock(shard.fd, fcntl.LOCK_SH, deadline,
                       f"virtual shard {vshard}'s lease lock in {self.path}")
            shard.holders += 1
        try:
            yield
        finally:
            with shard.changed:
                shard.holders -= 1
                if shard.holders == 0:
                    fcntl.flock(shard.fd, fcntl.LOCK_UN)
                    shard.changed.notify_all()

    def close(self) -> None:
        with self._lock:
            shards, self._shards = self._shards, {}
        for shard in shards.values():
            os.close(shard.fd)


def check_claim(owner: str, ttl: float) -> None:
    """The owner and ttl of a lease asked for, as ``Leases`` takes them."""
    if not isinstance(owner, str) or not owner:
        raise InvalidInput(f"owner must be a non-empty str, got {owner!r}", field="owner")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not (ttl > 0 and math.isfinite(ttl)):
        raise InvalidInput(f"ttl must be a positive, finite number of seconds, got {ttl!r}", field="ttl")


def _flock(fd: int, how: int, deadline: float, what: str) -> None:
    """flock ``fd``, waiting until ``deadline`` (monotonic) at most."""
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise StorageError(f"{what} stayed locked by another process; is a previous owner frozen "
                                   f"while writing? It must resume or be killed") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        except OSError as exc:
            raise StorageError(f"cannot lock {what}: {describe_os_error(exc)}") from exc
