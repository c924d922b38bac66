"""A database journal: every actor's journal as rows of a PostgreSQL table, its
snapshots and sidecars as files in a folder every process can reach.

Tables, in the schema ``schema`` (created on first open)::

    journal    (kind, key, seq, ts, checksum, payload)   primary key (kind, key, seq)
    snapshots  (kind, key, seq, folder, ts, created, bytes, vshard)
    leases     (vshard, owner, epoch, expires)           one row per virtual shard ever leased

``key`` is the JSON array of the key's parts; ``checksum`` is the journal line's
crc (``entry_crc``: seq, ts and payload), checked on every recovery.

Group commit: ``append`` only buffers rows in the process. A commit round takes
the rows every store buffered since the previous round and writes them in one
transaction (one ``INSERT``, one ``COMMIT``, pipelined): ``syncfs()`` runs a round for the
whole storage, and so does a store's ``sync()`` (a store synced while a round
that holds its rows is committing waits for that round instead of starting
another), so whichever way the kernel's committer asks, one COMMIT covers the
round. Rows a round could not commit are never reported durable: their store
refuses writes until it is recovered.

Snapshots are written with the snapshot writer of snapshot.py into a folder of
their own, ``snapshots_dir/shards/<vvv>/<kind>s/<encoded key>/<seq>-<token>/``
(a fresh token per write, so a writer that lost its lease can never overwrite a
snapshot its successor recorded), then recorded by a row of ``snapshots`` in a
fenced transaction, which also drops the journal rows and snapshots older than
the newest ``keep`` ones need. Recovery reads the newest recorded snapshot that
passes its checks and the journal rows after it; files no row names are
leftovers of interrupted or fenced-out writes and are removed.

Ownership: without ``ownership`` the storage is one process's alone, like a
locked data directory (a session advisory lock on the schema; a second one
raises DataDirLocked). With it, processes share the schema (the advisory lock
taken shared) and each writes only the virtual shards it leased from
``PostgresLeases``: every transaction that writes rows first reads the lease row
of each virtual shard it touches ``FOR SHARE`` and compares the epoch with the
one this process was granted. A takeover updates the lease row, so it waits for
commits in flight, and every commit after it sees the new epoch: the old
owner's rows are refused with NotOwner and nothing of theirs is written.
Lease times are the database server's clock (``clock_timestamp()``), the one
clock every process agrees on; the caller's clock only decides, through
``Ownership``, when it stops serving a lease it could not renew.
"""

from mnemex.persistence.postgres.journal import PostgresStorage as PostgresStorage
from mnemex.persistence.postgres.journal import PostgresStore as PostgresStore
from mnemex.persistence.postgres.leases import PostgresLeases as PostgresLeases

__all__ = ["PostgresLeases", "PostgresStorage", "PostgresStore"]
