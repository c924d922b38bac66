"""Leases of virtual shards as rows of the ``leases`` table, on the database
server's clock (see the package docstring)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

from mnemex.errors import NotOwner, StorageError
from mnemex.persistence.leases import Lease, check_claim
from mnemex.persistence.postgres._database import Database, db_error, is_connection_lost
from mnemex.persistence.shards import check_vshard

__all__ = ["PostgresLeases"]


class PostgresLeases:
    """The leases of virtual shards as rows of the ``leases`` table (see the module
    docstring). Times are the database server's clock. One instance per process;
    thread-safe. ``wait`` bounds how long an acquire waits for the commits in
    flight of the current owner (a frozen one is cut off by the server, see
    PostgresStorage)."""

    def __init__(self, dsn: str, *, schema: str = "mnemex", wait: float = 30.0,
                 connect_timeout: float = 10.0) -> None:
        self._db = Database(dsn, schema, connect_timeout)
        self._wait = wait
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        with self._connection() as conn:
            self._db.create_schema(conn)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = self._db.connect()
            try:
                yield self._conn
            except psycopg.Error as exc:
                if is_connection_lost(self._conn, exc):
                    self._conn.close()
                    self._conn = None
                raise

    def acquire(self, vshard: int, owner: str, ttl: float) -> Lease:
        check_vshard(vshard)
        check_claim(owner, ttl)
        table = self._db.table("leases")
        try:
            with self._connection() as conn, conn.transaction():
                conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(
                    sql.Literal(f"{max(1, round(self._wait * 1000))}ms")))
                conn.execute(sql.SQL("INSERT INTO {} (vshard, owner, epoch, expires) VALUES (%s, '', 0, 0) "
                                     "ON CONFLICT (vshard) DO NOTHING").format(table), (vshard,))
                # FOR UPDATE waits for every commit in flight that read this row FOR SHARE
                row = conn.execute(sql.SQL(
                    "SELECT owner, epoch, expires, extract(epoch FROM clock_timestamp())::float8 "
                    "FROM {} WHERE vshard = %s FOR UPDATE").format(table), (vshard,)).fetchone()
                assert row is not None
                current_owner, epoch, expires, now = str(row[0]), int(row[1]), float(row[2]), float(row[3])
                if current_owner and current_owner != owner and expires > now:
                    raise NotOwner(f"virtual shard {vshard} is leased to {current_owner!r} (epoch {epoch}) "
                                   f"for {expires - now:.1f} s more", vshard=vshard, owner=current_owner,
                                   epoch=epoch)
                if not (current_owner == owner and expires > now):
                    epoch += 1
                lease = Lease(vshard=vshard, owner=owner, epoch=epoch, expires=now + ttl)
                conn.execute(sql.SQL("UPDATE {} SET owner = %s, epoch = %s, expires = %s WHERE vshard = %s")
                             .format(table), (owner, epoch, lease.expires, vshard))
                return lease
        except psycopg.errors.LockNotAvailable as exc:
            raise StorageError(f"virtual shard {vshard}: the commits in flight of its owner did not finish "
                               f"within {self._wait} s; is a previous owner frozen while committing? The "
                               f"server ends its transaction after idle_in_transaction_session_timeout"
                               ) from exc
        except psycopg.Error as exc:
            raise db_error(f"cannot acquire the lease of virtual shard {vshard}", exc) from exc

    def acquire_many(self, vshards: Sequence[int], owner: str, ttl: float) -> dict[int, Lease | NotOwner]:
        """``acquire`` for many virtual shards in one transaction (a shard renews
        thousands every few seconds: one transaction each would not keep up): the
        lease, or the NotOwner naming its holder, of each. A shard whose row a commit
        in flight holds is left out (``SKIP LOCKED``): ``acquire`` it alone, which
        waits for that commit."""
        for vshard in vshards:
            check_vshard(vshard)
        check_claim(owner, ttl)
        table = self._db.table("leases")
        wanted = sorted(set(vshards))
        out: dict[int, Lease | NotOwner] = {}
        try:
            with self._connection() as conn, conn.transaction():
                conn.execute(sql.SQL("INSERT INTO {} (vshard, owner, epoch, expires) SELECT v, '', 0, 0 FROM "
                                     "unnest(%s::int4[]) AS v ON CONFLICT (vshard) DO NOTHING").format(table),
                             (wanted,))
                rows = conn.execute(sql.SQL(
                    "SELECT vshard, owner, epoch, expires, extract(epoch FROM clock_timestamp())::float8 "
                    "FROM {} WHERE vshard = ANY(%s::int4[]) ORDER BY vshard FOR UPDATE SKIP LOCKED"
                ).format(table), (wanted,)).fetchall()
                granted: list[Lease] = []
                for vshard, current, held_epoch, expires, now in rows:
                    if current and current != owner and expires > now:
                        out[vshard] = NotOwner(f"virtual shard {vshard} is leased to {current!r} (epoch "
                                               f"{held_epoch}) for {expires - now:.1f} s more", vshard=vshard,
                                               owner=current, epoch=held_epoch)
                        continue
                    epoch = held_epoch if current == owner and expires > now else held_epoch + 1
                    lease = out[vshard] = Lease(vshard=vshard, owner=owner, epoch=epoch, expires=now + ttl)
                    granted.append(lease)
                if granted:
                    conn.execute(sql.SQL(
                        "UPDATE {} AS t SET owner = %s, epoch = u.epoch, expires = u.expires FROM "
                        "unnest(%s::int4[], %s::int8[], %s::float8[]) AS u(vshard, epoch, expires) "
                        "WHERE t.vshard = u.vshard").format(table),
                        (owner, [g.vshard for g in granted], [g.epoch for g in granted],
                         [g.expires for g in granted]))
        except psycopg.Error as exc:
            raise db_error(f"cannot acquire the leases of {len(wanted)} virtual shards", exc) from exc
        return out

    def release(self, lease: Lease) -> None:
        try:
            with self._connection() as conn, conn.transaction():
                conn.execute(sql.SQL("UPDATE {} SET expires = 0 WHERE vshard = %s AND owner = %s "
                                     "AND epoch = %s").format(self._db.table("leases")),
                             (lease.vshard, lease.owner, lease.epoch))
        except psycopg.Error as exc:
            raise db_error(f"cannot release the lease of virtual shard {lease.vshard}", exc) from exc

    def holder(self, vshard: int) -> Lease | None:
        check_vshard(vshard)
        try:
            with self._connection() as conn, conn.transaction():
                row = conn.execute(sql.SQL("SELECT owner, epoch, expires FROM {} WHERE vshard = %s")
                                   .format(self._db.table("leases")), (vshard,)).fetchone()
        except psycopg.Error as exc:
            raise db_error(f"cannot read the lease of virtual shard {vshard}", exc) from exc
        if row is None or not row[0]:
            return None
        return Lease(vshard=vshard, owner=str(row[0]), epoch=int(row[1]), expires=float(row[2]))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
