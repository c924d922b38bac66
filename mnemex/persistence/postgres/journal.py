"""The postgres journal itself: the storage (group commit, fencing) and each
actor's store (rows buffered until a round, snapshots in a folder)."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg import sql

from mnemex.errors import CorruptData, DataDirLocked, InvalidInput, MnemexError, NotOwner, StorageError
from mnemex.persistence._files import describe_os_error, log, probe_writable
from mnemex.persistence.journal import JournalEntry, check_entry, entry_crc
from mnemex.persistence.layout import actor_dir, check_key, check_kind
from mnemex.persistence.leases import Ownership
from mnemex.persistence.postgres._database import (
    Database,
    Readers,
    db_error,
    is_connection_lost,
    key_text,
    lock_id,
)
from mnemex.persistence.postgres.leases import PostgresLeases
from mnemex.persistence.shards import vshard_of
from mnemex.persistence.snapshot import (
    Sidecar,
    SnapshotHeader,
    load_newest_snapshot,
    read_sidecars,
    sidecar_name,
    snapshot_storage_error,
    write_snapshot_stream,
)
from mnemex.persistence.store import ActorStore, Recovered, _check_keep, stitch_entries

__all__ = ["PostgresStorage", "PostgresStore"]

_Row = tuple[int, int, bytes]


class PostgresStorage:
    """Actors' journals in PostgreSQL, their snapshots under ``snapshots_dir`` (see
    the package docstring); implements the ``Storage`` protocol.

    ``dsn`` is a libpq connection string or URI (a password may come from
    ``PGPASSWORD`` or ``~/.pgpass``); ``schema`` names the schema holding the
    tables (several deployments may share one database). ``ownership``: the
    virtual shards this process may write, leased from ``self.leases`` (None:
    every shard, and no other process may open the schema meanwhile).
    ``readers`` bounds the connections used for recoveries at once. A transaction
    left open by a frozen process is ended by the server after ``lease_wait``/2
    seconds, so a takeover never waits longer than ``lease_wait``.

    Raises StorageError if the database cannot be reached or ``snapshots_dir``
    written, DataDirLocked if another process holds the schema in a way that
    excludes this one.
    """

    def __init__(self, dsn: str, *, snapshots_dir: str | Path, ownership: Ownership | None = None,
                 schema: str = "mnemex", readers: int = 4, lease_wait: float = 30.0,
                 connect_timeout: float = 10.0, flush_interval: float | None = 0.5) -> None:
        if type(readers) is not int or readers < 1:
            raise InvalidInput(f"readers must be a positive int, got {readers!r}", field="readers")
        if flush_interval is not None and not (isinstance(flush_interval, (int, float))
                                               and flush_interval > 0):
            raise InvalidInput(f"flush_interval must be a positive number of seconds or None, got "
                               f"{flush_interval!r}", field="flush_interval")
        self._db = Database(dsn, schema, connect_timeout)
        self.schema = self._db.schema
        self.snapshots_dir = Path(snapshots_dir)
        self.ownership = ownership
        """The virtual shards this process may write (None: all of them, alone)."""
        self._lease_wait = lease_wait
        self._probe_snapshots_dir()
        self._commit_lock = threading.Lock()  # one transaction on the writer at a time
        self._dirty_lock = threading.Lock()
        self._dirty: dict[int, PostgresStore] = {}  # stores holding buffered rows
        self._dirty_since = 0.0  # monotonic time the oldest of those rows was buffered
        self._writer: psycopg.Connection[Any] | None = None
        self._open = True
        self.commits = 0
        """Transactions that committed journal rows (for metrics and tests)."""
        self.leases: PostgresLeases | None = None
        """The leases of the virtual shards, when shared (None when exclusive)."""
        self._readers = Readers(self._db, readers)
        # the statements of every round, composed once
        self._insert_rows = sql.SQL(
            "INSERT INTO {} (kind, key, seq, ts, checksum, payload) SELECT * FROM "
            "unnest(%s::text[], %s::text[], %s::int8[], %s::int8[], %s::int8[], %s::bytea[])"
        ).format(self._db.table("journal"))
        self._lock_leases = sql.SQL("SELECT vshard, owner, epoch FROM {} WHERE vshard = ANY(%s) "
                                    "ORDER BY vshard FOR SHARE").format(self._db.table("leases"))
        try:
            with self._commit_lock:
                self._writer_conn()
            if ownership is not None:
                self.leases = PostgresLeases(dsn, schema=schema, wait=lease_wait,
                                             connect_timeout=connect_timeout)
        except BaseException:
            self.close()
            raise
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if flush_interval is not None:
            self._flusher = threading.Thread(target=self._flush_every, args=(flush_interval,),
                                             name="mnemex postgres flusher", daemon=True)
            self._flusher.start()

    def _flush_every(self, interval: float) -> None:
        """Commit rows nobody synced (``fsync = "never"``) once they are ``interval``
        seconds old (looked at every ``interval``: at most twice that), so that they
        do not wait for the next snapshot or close."""
        while not self._stop.wait(interval):
            with self._dirty_lock:
                stale = bool(self._dirty) and time.monotonic() - self._dirty_since >= interval
            if stale:
                try:
                    self.syncfs()
                except MnemexError as exc:
                    log.error("postgres journal: rows nobody synced could not be committed: %s", exc)

    def _probe_snapshots_dir(self) -> None:
        path = self.snapshots_dir
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe_writable(path)
        except OSError as exc:
            raise StorageError(f"snapshots directory {path} is not writable: {describe_os_error(exc)} "
                               f"(config.storage.data_dir; the postgres journal keeps snapshots there)"
                               ) from exc

    def _writer_conn(self) -> psycopg.Connection[Any]:
        """The connection every write goes through (call with _commit_lock held):
        opened, with the schema made and the schema's advisory lock taken, on first
        use and again after it was lost."""
        conn = self._writer
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if not self._open:
            raise StorageError("the postgres storage is closed")
        self._writer = None
        conn = self._db.connect()
        try:
            idle_ms = max(1000, round(self._lease_wait * 500))
            conn.execute(sql.SQL("SET idle_in_transaction_session_timeout = {}").format(
                sql.Literal(f"{idle_ms}ms")))
            conn.commit()
            self._db.create_schema(conn)
            shared = self.ownership is not None
            function = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
            row = conn.execute(sql.SQL("SELECT {}(%s)").format(sql.Identifier(function)),
                               (lock_id(self.schema, "storage"),)).fetchone()
            conn.commit()
        except psycopg.Error as exc:
            conn.close()
            raise db_error("cannot prepare the postgres journal", exc) from exc
        if row is None or not row[0]:
            conn.close()
            who = "a runtime that owns it alone" if shared else "another runtime (or a cluster's shards)"
            raise DataDirLocked(f"postgres schema {self.schema!r} is in use by {who}; stop it first or "
                                f"use another schema")
        self._writer = conn
        return conn

    def _lost_writer(self) -> None:
        conn, self._writer = self._writer, None
        if conn is not None:
            conn.close()

    # -- the Storage protocol ------------------------------------------------------

    def store(self, kind: str, key: tuple[str, ...], keep: int = 2) -> PostgresStore:
        if not self._open:
            raise StorageError("the postgres storage is closed")
        return PostgresStore(self, kind, key, keep=keep)

    def syncfs(self) -> bool:
        """Commit every row buffered by every store in one transaction (a group
        commit round). True: the kernel then asks each store (``synced_by_fs``)
        whether its rows were refused."""
        with self._commit_lock:
            self._round()
        return True

    def close(self) -> None:
        """Commit what is still buffered, then close every connection (idempotent)."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
            if self._flusher is not None:
                self._flusher.join()
        if self._open:
            try:
                self.syncfs()
            except MnemexError as exc:
                log.error("postgres journal: rows buffered at close could not be committed: %s", exc)
        with self._commit_lock:
            self._open = False
            self._lost_writer()
        self._readers.close()
        if self.leases is not None:
            self.leases.close()

    def actor_keys(self, kind: str) -> list[tuple[str, ...]]:
        """The key of every actor of ``kind`` with rows or a snapshot on record."""
        try:
            with self._readers.connection() as conn:
                rows = conn.execute(sql.SQL("SELECT DISTINCT key FROM {} WHERE kind = %s UNION "
                                            "SELECT DISTINCT key FROM {} WHERE kind = %s").format(
                    self._db.table("journal"), self._db.table("snapshots")), (kind, kind)).fetchall()
        except psycopg.Error as exc:
            raise db_error(f"cannot list the actors of kind {kind!r}", exc) from exc
        return sorted(tuple(orjson.loads(key)) for (key,) in rows)

    # -- commits -----------------------------------------------------------------

    def _mark_dirty(self, store: PostgresStore) -> None:
        with self._dirty_lock:
            if not self._dirty:
                self._dirty_since = time.monotonic()
            self._dirty[id(store)] = store

    def _has_rows_of(self, kind: str, key_text: str) -> bool:
        with self._dirty_lock:
            return any(store.kind == kind and store.key_text == key_text for store in self._dirty.values())

    def _sync_store(self, store: PostgresStore, mark: int) -> None:
        """Return once ``store``'s rows up to ``mark`` were committed or refused: a
        round started meanwhile by another thread may have taken them."""
        with self._commit_lock:
            if store._done_mark < mark:
                self._round()

    def _round(self) -> None:
        """One group-commit round (call with _commit_lock held): every buffered row
        of every store in one transaction; a store whose rows cannot be written
        learns why (its next sync raises it), the others commit."""
        with self._dirty_lock:
            stores, self._dirty = list(self._dirty.values()), {}
        batches = [(store, *store._take()) for store in stores]
        batches = [batch for batch in batches if batch[1]]
        if not batches:
            return
        refused: dict[int, MnemexError] = {}
        if self.ownership is not None:
            for store, _rows, _mark in batches:
                if self.ownership.epoch(store.vshard) is None:
                    refused[id(store)] = NotOwner(
                        f"virtual shard {store.vshard} is not owned by this process now (no current lease); "
                        f"nothing of {store.name} was written", vshard=store.vshard)
        try:
            refused |= self._commit([batch for batch in batches if id(batch[0]) not in refused])
        except StorageError as exc:
            # the whole round failed; whether its COMMIT landed may be unknown
            for store, rows, mark in batches:
                store._refused(mark, rows[0][0], refused.get(id(store), exc),
                               in_doubt=id(store) not in refused)
            return
        except psycopg.IntegrityError:
            doubt: set[int] = set()
            # one store's rows collide with rows on record: commit each store alone
            for batch in batches:
                if id(batch[0]) in refused:
                    continue
                try:
                    refused |= self._commit([batch])
                except StorageError as exc:
                    refused[id(batch[0])] = exc
                    doubt.add(id(batch[0]))
                except psycopg.Error as exc:
                    refused[id(batch[0])] = db_error(f"cannot commit the journal rows of {batch[0].name}",
                                                      exc)
        else:
            doubt = set()
        for store, rows, mark in batches:
            error = refused.get(id(store))
            if error is None:
                store._committed(mark, rows[-1][0])
            else:
                store._refused(mark, rows[0][0], error, in_doubt=id(store) in doubt)

    def _commit(self, batches: list[tuple[PostgresStore, list[_Row], int]]) -> dict[int, MnemexError]:
        """Write ``batches`` in one transaction after checking their leases; returns
        the stores refused (fenced out), whose rows are not written. StorageError
        if the transaction failed (in doubt when the connection was lost); an
        IntegrityError escapes (rows already on record) with nothing written."""
        if not batches:
            return {}
        conn = self._writer_conn()
        try:
            # Pipelined: without owners BEGIN, the INSERT and COMMIT take one round trip,
            # with owners the lease check one more (a worker thread waits for the GIL once
            # per round trip: a few ms each when the event loop is busy).
            with conn.pipeline() as pipeline, conn.transaction():
                refused = self._fence(conn, [store for store, _rows, _mark in batches], pipeline)
                kinds: list[str] = []
                keys: list[str] = []
                seqs: list[int] = []
                times: list[int] = []
                checksums: list[int] = []
                payloads: list[bytes] = []
                for store, rows, _mark in batches:
                    if id(store) in refused:
                        continue
                    kinds += [store.kind] * len(rows)
                    keys += [store.key_text] * len(rows)
                    for seq, ts, payload in rows:
                        seqs.append(seq)
                        times.append(ts)
                        checksums.append(entry_crc(seq, ts, payload))
                        payloads.append(payload)
                if seqs:
                    conn.execute(self._insert_rows, (kinds, keys, seqs, times, checksums, payloads))
        except psycopg.IntegrityError:
            raise
        except psycopg.Error as exc:
            lost = is_connection_lost(conn, exc)
            if lost:
                self._lost_writer()
            raise db_error("could not commit journal rows to postgres" + (
                " (the connection was lost: whether the commit landed is unknown, so the actors refuse "
                "writes until they are reloaded)" if lost else ""), exc) from exc
        if len(refused) < len(batches):
            self.commits += 1
        return refused

    def _fence(self, conn: psycopg.Connection[Any], stores: Sequence[PostgresStore],
               pipeline: psycopg.Pipeline | None = None) -> dict[int, MnemexError]:
        """Lock the lease row of every virtual shard of ``stores`` FOR SHARE (a
        takeover waits for this transaction) and return the stores whose shard's
        epoch on record is not the one this process holds."""
        if self.ownership is None:
            return {}
        mine = {store.vshard: self.ownership.epoch(store.vshard) for store in stores}
        cursor = conn.execute(self._lock_leases, (sorted(mine),))
        if pipeline is not None:
            # a Sync, not a mere flush: the server then counts the transaction as idle
            # until the rows follow, and ends it if this process froze meanwhile
            pipeline.sync()
        rows = cursor.fetchall()
        on_record = {int(vshard): (str(owner), int(epoch)) for vshard, owner, epoch in rows}
        refused: dict[int, MnemexError] = {}
        for store in stores:
            owner, epoch = on_record.get(store.vshard, (None, None))
            if epoch is None or epoch != mine[store.vshard]:
                refused[id(store)] = NotOwner(
                    f"virtual shard {store.vshard} was taken over (epoch {mine[store.vshard]} is ours, "
                    f"{epoch if epoch is not None else 'none'} is on record, owner {owner!r}); nothing of "
                    f"{store.name} was written", vshard=store.vshard, owner=owner, epoch=epoch)
        return refused

    @contextlib.contextmanager
    def _fenced_write(self, store: PostgresStore, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A transaction on the writer for one store's own change (a cut, a snapshot
        row), after its lease is checked; NotOwner (nothing done) if it is stale."""
        with self._commit_lock:
            conn = self._writer_conn()
            try:
                with conn.transaction():
                    refused = self._fence(conn, [store])
                    if refused:
                        raise refused[id(store)]
                    yield conn
            except psycopg.Error as exc:
                if is_connection_lost(conn, exc):
                    self._lost_writer()
                raise db_error(f"{store.name}: could not {what}", exc) from exc

    def __repr__(self) -> str:
        return f"PostgresStorage(schema={self.schema!r}, snapshots_dir={str(self.snapshots_dir)!r})"


class PostgresStore(ActorStore):
    """One actor's journal rows and snapshots (see the package docstring). Rows
    appended are buffered until a commit round; ``sync`` waits for one."""

    def __init__(self, storage: PostgresStorage, kind: str, key: tuple[str, ...], *, keep: int = 2) -> None:
        self.kind = check_kind(kind)
        self.key = check_key(key, printable=False)
        self.keep = _check_keep(keep)
        self.key_text = key_text(self.key)
        self.vshard = vshard_of(self.kind, self.key)
        self.path = actor_dir(storage.snapshots_dir, self.kind, self.key)
        self._storage = storage
        self._db = storage._db
        # _lock guards the buffer and what describes it: _rows, _mark, _done_mark,
        # _last_seq, _committed_seq, _broken, _cut_pending
        self._lock = threading.Lock()
        self._snapshot_lock = threading.Lock()  # one snapshot / recovery at a time
        self._rows: list[_Row] = []  # appended, not yet taken by a commit round
        self._mark = 0  # appends so far
        self._done_mark = 0  # appends a round has committed or refused
        self._last_seq: int | None = None
        self._committed_seq: int | None = None  # last seq known on record (None: unknown)
        self._broken: MnemexError | None = None
        self._cut_pending: int | None = None  # rows after it may be on record and must go

    @property
    def name(self) -> str:
        return f"{self.kind} {self.key_text}"

    def _where(self) -> str:
        return f"postgres journal {self._db.schema}: {self.name}"

    # -- the commit round's side -------------------------------------------------

    def _take(self) -> tuple[list[_Row], int]:
        with self._lock:
            rows, self._rows = self._rows, []
            return rows, self._mark

    def _committed(self, mark: int, last: int) -> None:
        with self._lock:
            self._done_mark = max(self._done_mark, mark)
            self._committed_seq = max(last, self._committed_seq or 0)

    def _refused(self, mark: int, first: int, error: MnemexError, *, in_doubt: bool) -> None:
        """The rows a round took, from seq ``first`` on, were not committed (or, in
        doubt, may have been: they are removed again before the actor reloads)."""
        with self._lock:
            self._done_mark = max(self._done_mark, mark)
            if self._broken is None:
                self._broken = error
            self._rows = []  # later rows follow the lost ones: they cannot be kept either
            if in_doubt:
                known = first - 1
                self._cut_pending = known if self._cut_pending is None else min(self._cut_pending, known)

    def _raise_if_broken(self) -> None:
        if self._broken is not None:
            raise self._broken

    # -- reading -------------------------------------------------------------------

    def exists(self) -> bool:
        with self._lock:
            if self._rows:
                return True
        try:
            with self._storage._readers.connection() as conn:
                row = conn.execute(sql.SQL(
                    "SELECT EXISTS (SELECT 1 FROM {} WHERE kind = %s AND key = %s) "
                    "OR EXISTS (SELECT 1 FROM {} WHERE kind = %s AND key = %s)").format(
                    self._db.table("journal"), self._db.table("snapshots")),
                    (self.kind, self.key_text, self.kind, self.key_text)).fetchone()
        except psycopg.Error as exc:
            raise db_error(f"{self._where()}: cannot read", exc) from exc
        return bool(row and row[0])

    def recover(self) -> Recovered:
        with self._snapshot_lock:
            if self._storage._has_rows_of(self.kind, self.key_text):
                # rows another store object of this actor buffered are on record first
                with contextlib.suppress(MnemexError):
                    self._storage.syncfs()
            with self._lock:
                pending = self._cut_pending
            if pending is not None:
                self._delete_after(pending)
            snapshots, rows = self._read()
            recovered = self._assemble(snapshots, rows)
            with self._lock:
                self._rows = []
                self._broken = None
                self._cut_pending = None
                self._last_seq = self._committed_seq = recovered.last_seq
                self._done_mark = self._mark
            return recovered

    def _read(self) -> tuple[list[tuple[int, str]], list[tuple[int, int, int, bytes]]]:
        """The recorded snapshots (seq, folder), newest first, and every journal row."""
        try:
            with self._storage._readers.connection() as conn:
                snapshots = conn.execute(sql.SQL(
                    "SELECT seq, folder FROM {} WHERE kind = %s AND key = %s ORDER BY seq DESC").format(
                    self._db.table("snapshots")), (self.kind, self.key_text)).fetchall()
                oldest = snapshots[-1][0] if snapshots else 0
                rows = conn.execute(sql.SQL(
                    "SELECT seq, ts, checksum, payload FROM {} WHERE kind = %s AND key = %s AND seq > %s "
                    "ORDER BY seq").format(self._db.table("journal")),
                    (self.kind, self.key_text, oldest)).fetchall()
        except psycopg.Error as exc:
            raise db_error(f"{self._where()}: cannot read the journal", exc) from exc
        return [(int(seq), str(folder)) for seq, folder in snapshots], rows

    def _assemble(self, snapshots: list[tuple[int, str]],
                  rows: list[tuple[int, int, int, bytes]]) -> Recovered:
        entries: list[JournalEntry] = []
        for seq, ts, checksum, payload in rows:
            data = bytes(payload)
            if entry_crc(seq, ts, data) != checksum:
                raise CorruptData(f"{self._where()}: journal row {seq} fails its checksum ({checksum} on "
                                  f"record); the command it holds was damaged after it was written")
            entries.append(JournalEntry(seq, ts, data))
        header: SnapshotHeader | None = None
        records: Sequence[bytes] = []
        sidecars: dict[str, bytes | memoryview] = {}
        folder: Path | None = None
        for seq, name in snapshots:
            candidate = self.path / name
            loaded = load_newest_snapshot(candidate, self.kind, self.key)
            if loaded is None or loaded[0].seq != seq:
                log.warning("%s: snapshot %d (%s) is missing or damaged; trying an older one",
                            self._where(), seq, candidate)
                continue
            found = read_sidecars(candidate, loaded[0])
            absent = [sidecar for sidecar in loaded[0].required if sidecar not in found]
            if absent:
                log.warning("%s: snapshot %d cannot be restored without its sidecar(s) %s; trying an "
                            "older one", self._where(), seq, ", ".join(absent))
                continue
            (header, records), sidecars, folder = loaded, found, candidate
            break
        after = header.seq if header is not None else 0
        where = f"{self._where()} ({f'snapshot {after}' if header is not None else 'no snapshot'})"
        if header is None and snapshots:
            where += ", every snapshot failed its checks"
        journal = stitch_entries(after, [entries], where)
        paths = {} if folder is None else {name: str(folder / sidecar_name(after, name)) for name in sidecars}
        recovered = Recovered(header, records, sidecars, journal, paths)
        known = max([seq for seq, _name in snapshots] + [entries[-1].seq if entries else 0])
        if recovered.last_seq < known:
            raise CorruptData(f"{self._where()}: the records show the actor reached seq {known}, but only "
                              f"seq {recovered.last_seq} can be recovered (a newer snapshot failed its "
                              f"checks and the rows it covered are not kept)")
        return recovered

    def disk_bytes(self) -> int:
        try:
            with self._storage._readers.connection() as conn:
                row = conn.execute(sql.SQL(
                    "SELECT (SELECT coalesce(sum(octet_length(payload) + 40), 0) FROM {} "
                    "WHERE kind = %s AND key = %s) + (SELECT coalesce(sum(bytes), 0) FROM {} "
                    "WHERE kind = %s AND key = %s)").format(
                    self._db.table("journal"), self._db.table("snapshots")),
                    (self.kind, self.key_text, self.kind, self.key_text)).fetchone()
        except psycopg.Error as exc:
            raise db_error(f"{self._where()}: cannot read", exc) from exc
        with self._lock:
            buffered = sum(len(payload) + 40 for _seq, _ts, payload in self._rows)
        return int(row[0] if row else 0) + buffered

    # -- writing -------------------------------------------------------------------

    def _check_owner(self) -> None:
        ownership = self._storage.ownership
        if ownership is not None and ownership.epoch(self.vshard) is None:
            raise NotOwner(f"virtual shard {self.vshard} is not owned by this process now (no current "
                           f"lease); nothing was written", vshard=self.vshard)

    def append(self, entries: Sequence[tuple[int, int, bytes]]) -> None:
        if not entries:
            return
        rows: list[_Row] = []
        with self._lock:
            self._raise_if_broken()
            previous = self._last_seq
            if previous is not None and entries[0][0] != previous + 1:
                raise InvalidInput(f"{self._where()}: appending seq {entries[0][0]} after seq {previous}; "
                                   f"journal seqs must be consecutive", field="seq")
            for seq, ts, payload in entries:
                previous = check_entry(seq, ts, payload, previous if rows else None)
                rows.append((seq, ts, payload))
            self._check_owner()
            self._rows.extend(rows)
            self._last_seq = previous
            self._mark += 1
        self._storage._mark_dirty(self)

    @property
    def needs_recovery(self) -> bool:
        return self._broken is not None

    def sync(self) -> None:
        with self._lock:
            self._raise_if_broken()
            mark = self._mark
        if self._done_mark < mark:
            self._storage._sync_store(self, mark)
        with self._lock:
            self._raise_if_broken()

    def synced_by_fs(self) -> None:
        """Called after a round (``PostgresStorage.syncfs``) covered this store: raises
        why its rows were refused, if they were."""
        with self._lock:
            self._raise_if_broken()

    def cut_after(self, seq: int) -> None:
        with self._lock:
            if self._last_seq is not None and seq >= self._last_seq:
                return
            rows = self._rows
            known = self._committed_seq
            if rows and rows[0][0] <= seq + 1 and known is not None and known <= seq:
                # every row after seq is still buffered here
                self._rows = [row for row in rows if row[0] <= seq]
                self._last_seq = seq
                return
        # rows after seq may be on record, or in a round committing now: wait for it
        with self._storage._commit_lock, self._lock:
            self._rows = [row for row in self._rows if row[0] <= seq]
            self._last_seq = seq
            known = self._committed_seq
            if self._cut_pending is None and known is not None and known <= seq:
                return  # the rows after seq were refused or never sent: none is on record
        self._delete_after(seq)

    def _delete_after(self, seq: int) -> None:
        try:
            with self._storage._fenced_write(self, f"cut the journal after seq {seq}") as conn:
                conn.execute(sql.SQL("DELETE FROM {} WHERE kind = %s AND key = %s AND seq > %s").format(
                    self._db.table("journal")), (self.kind, self.key_text, seq))
        except MnemexError as exc:
            with self._lock:
                if self._cut_pending is None or seq < self._cut_pending:
                    self._cut_pending = seq
                if self._broken is None:
                    self._broken = StorageError(f"{self._where()}: the journal rows after seq {seq} could "
                                                f"not be removed ({exc}); it refuses writes until the actor "
                                                f"is reloaded (recover() removes them)")
            raise
        with self._lock:
            if self._committed_seq is None or self._committed_seq > seq:
                self._committed_seq = seq
            if self._cut_pending is not None and self._cut_pending >= seq:
                self._cut_pending = None

    def write_snapshot(self, seq: int, ts: int, records: Iterable[bytes], *, created: int,
                       extra: Mapping[str, object] | None = None,
                       sidecars: Mapping[str, Sidecar] | None = None,
                       required: Iterable[str] = ()) -> int:
        with self._snapshot_lock:
            self._check_owner()
            with contextlib.suppress(MnemexError):  # the rows it covers on record first
                self.sync()
            newest = self._recorded()
            if newest and seq < newest[0][0]:
                raise InvalidInput(f"{self._where()}: snapshot seq {seq} is older than the newest snapshot "
                                   f"({newest[0][0]}); snapshots only move forward", field="seq")
            name = f"{seq}-{os.urandom(6).hex()}"
            folder = self.path / name
            try:
                folder.mkdir(parents=True)
                size = write_snapshot_stream(folder, records, kind=self.kind, key=self.key, seq=seq, ts=ts,
                                             created=created, extra=extra, sidecars=sidecars,
                                             required=required)
                total = sum(entry.stat().st_size for entry in folder.iterdir())
            except OSError as exc:
                shutil.rmtree(folder, ignore_errors=True)
                raise snapshot_storage_error(folder, seq, exc) from exc
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            try:
                kept = self._record_snapshot(seq, name, ts=ts, created=created, size=total, before=newest)
            except NotOwner:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            # Any other failure may have come after the COMMIT landed (a lost connection):
            # the folder stays, and the next snapshot removes it if no row names it.
            with self._lock:
                if self._last_seq is not None and seq > self._last_seq:
                    self._last_seq = seq
            self._remove_unrecorded(kept)
        return size

    def _recorded(self) -> list[tuple[int, str]]:
        """The snapshots on record, (seq, folder), newest first."""
        try:
            with self._storage._readers.connection() as conn:
                rows = conn.execute(sql.SQL("SELECT seq, folder FROM {} WHERE kind = %s AND key = %s "
                                            "ORDER BY seq DESC").format(self._db.table("snapshots")),
                                    (self.kind, self.key_text)).fetchall()
        except psycopg.Error as exc:
            raise db_error(f"{self._where()}: cannot read its snapshots", exc) from exc
        return [(int(seq), str(folder)) for seq, folder in rows]

    def _record_snapshot(self, seq: int, name: str, *, ts: int, created: int, size: int,
                         before: list[tuple[int, str]]) -> set[str]:
        """Record snapshot ``seq`` (written into folder ``name``) and drop what the
        newest ``keep`` snapshots no longer need, in one fenced transaction; returns
        the folders of the snapshots kept."""
        snapshots = self._db.table("snapshots")
        # the same seq again replaces the older write of it
        newest = [(seq, name), *[(s, n) for s, n in before if s != seq]]
        kept = newest[: self.keep]
        oldest = kept[-1][0]
        with self._storage._fenced_write(self, f"record snapshot {seq}") as conn:
            conn.execute(sql.SQL("DELETE FROM {} WHERE kind = %s AND key = %s AND (seq < %s OR seq = %s)")
                         .format(snapshots), (self.kind, self.key_text, oldest, seq))
            conn.execute(sql.SQL("INSERT INTO {} (kind, key, seq, folder, ts, created, bytes, vshard) "
                                 "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)").format(snapshots),
                         (self.kind, self.key_text, seq, name, ts, created, size, self.vshard))
            conn.execute(sql.SQL("DELETE FROM {} WHERE kind = %s AND key = %s AND seq <= %s").format(
                self._db.table("journal")), (self.kind, self.key_text, oldest))
        return {folder for _seq, folder in kept}

    def _remove_unrecorded(self, kept: set[str]) -> None:
        """Remove snapshot folders no kept record names: older snapshots, and
        leftovers of writes that were interrupted or refused."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return
        for name in names:
            if name not in kept and (self.path / name).is_dir():
                shutil.rmtree(self.path / name, ignore_errors=True)

    def close(self) -> None:
        """Commit the rows still buffered (a round for the whole storage). The store
        stays usable."""
        with self._lock:
            buffered = bool(self._rows) and self._broken is None
        if buffered:
            try:
                self.sync()
            except MnemexError as exc:
                log.error("%s: rows buffered at close could not be committed: %s", self._where(), exc)
