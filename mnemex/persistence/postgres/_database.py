"""The postgres journal's connections: a schema's tables, the connection every
write goes through, a few for reads, and the translation of psycopg's errors."""

from __future__ import annotations

import contextlib
import re
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
from psycopg import sql

from mnemex.errors import InvalidInput, StorageError

__all__ = ["Database", "Readers", "check_schema", "db_error", "is_connection_lost", "key_text", "lock_id"]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_schema(schema: object) -> str:
    """``schema`` if it is a plain lower-case SQL identifier, else InvalidInput."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidInput(f"postgres schema must be a lower-case identifier ([a-z_][a-z0-9_]*, at most 63 "
                           f"characters), got {schema!r}", field="schema")
    return schema


def lock_id(schema: str, what: str) -> int:
    """The advisory lock number of ``what`` in ``schema`` (a signed 64-bit int)."""
    return int.from_bytes(zlib.crc32(f"{schema}:{what}".encode()).to_bytes(4, "big") * 2, "big", signed=True)


def db_error(what: str, exc: psycopg.Error) -> StorageError:
    error = StorageError(f"{what}: {type(exc).__name__}: {str(exc).strip() or 'no message'}")
    error.__cause__ = exc
    return error


def is_connection_lost(conn: psycopg.Connection[Any] | None, exc: BaseException) -> bool:
    return conn is None or conn.closed or conn.broken or isinstance(exc, psycopg.OperationalError)


def key_text(key: tuple[str, ...]) -> str:
    return orjson.dumps(list(key)).decode()


class Database:
    """Connections to one schema: ``connect`` opens one, ``create_schema`` makes the tables."""

    def __init__(self, dsn: str, schema: str, connect_timeout: float) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise InvalidInput(f"postgres dsn must be a non-empty connection string, got {dsn!r} "
                               f"(config.storage.postgres_dsn)", field="dsn")
        self.dsn = dsn
        self.schema = check_schema(schema)
        self._timeout = max(1, round(connect_timeout))

    def table(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.dsn, autocommit=autocommit, connect_timeout=self._timeout,
                                   application_name="mnemex")
        except psycopg.Error as exc:
            raise db_error("cannot connect to the postgres database (config.storage.postgres_dsn)",
                            exc) from exc

    def create_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Create the schema and its tables if missing (concurrent openers take turns)."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(self.schema, "ddl"),))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (kind text NOT NULL, key text NOT NULL, seq bigint NOT NULL, "
                "ts bigint NOT NULL, checksum bigint NOT NULL, payload bytea NOT NULL, "
                "PRIMARY KEY (kind, key, seq))").format(self.table("journal")))
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (kind text NOT NULL, key text NOT NULL, seq bigint NOT NULL, "
                "folder text NOT NULL, ts bigint NOT NULL, created bigint NOT NULL, bytes bigint NOT NULL, "
                "vshard integer NOT NULL, PRIMARY KEY (kind, key, seq))").format(self.table("snapshots")))
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (vshard integer PRIMARY KEY, owner text NOT NULL, "
                "epoch bigint NOT NULL, expires double precision NOT NULL)").format(self.table("leases")))


class Readers:
    """A few connections for reads (recoveries run in many threads at once)."""

    def __init__(self, db: Database, size: int) -> None:
        self._db = db
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)
        self._closed = False

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection in REPEATABLE READ: one transaction per use, one consistent view."""
        with self._slots:
            with self._lock:
                if self._closed:
                    raise StorageError("the postgres storage is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._db.connect()
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            try:
                with conn.transaction():
                    yield conn
            finally:
                with self._lock:
                    if self._closed or conn.broken or conn.closed:
                        conn.close()
                    else:
                        self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
