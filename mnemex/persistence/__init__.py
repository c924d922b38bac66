"""Storage of actors on disk: write-ahead journal, snapshots, safe folder names.

Plain blocking code (no trio): the runtime calls it from worker threads. The
layout of a data directory::

    data_dir/
      LOCK                              flocked while a runtime uses data_dir (shared by a cluster's shards)
      shards/<vvv>/                     one folder per virtual shard (3 hex digits, see shards.py)
        lease.json, lease.lock          its lease and fencing epoch, when shared (see leases.py)
        agents/<encoded key>/           one folder per actor (kind "agent")
          key.json                      {"kind": "agent", "key": ["assistant"]}
          journal.jsonl                 commands after the newest snapshot
          snapshot-<seq>.jsonl          header line + one line per record
          snapshot-<seq>.<name>.bin     optional binary sidecars of a snapshot
          journal-<first>-<last>.jsonl  archived commands, for fallback and history
        scopes/<encoded key>/ ...

``postgres.py`` (the ``mnemex[postgres]`` extra, imported only where used) keeps the
journals as rows of a PostgreSQL database instead, leases and epochs in its tables,
and snapshots in a folder laid out as above.
"""

from mnemex.persistence.datadir import ActorLocation as ActorLocation
from mnemex.persistence.datadir import DataDir as DataDir
from mnemex.persistence.datadir import find_actors as find_actors
from mnemex.persistence.findings import Finding as Finding
from mnemex.persistence.findings import Level as Level
from mnemex.persistence.findings import worst_level as worst_level
from mnemex.persistence.inspect import ActorInfo as ActorInfo
from mnemex.persistence.inspect import inspect_actor as inspect_actor
from mnemex.persistence.inspect import read_history as read_history
from mnemex.persistence.inspect import verify_actor as verify_actor
from mnemex.persistence.journal import JournalEntry as JournalEntry
from mnemex.persistence.layout import actor_dir as actor_dir
from mnemex.persistence.layout import check_key as check_key
from mnemex.persistence.layout import decode_key as decode_key
from mnemex.persistence.layout import encode_key as encode_key
from mnemex.persistence.leases import FileLeases as FileLeases
from mnemex.persistence.leases import Lease as Lease
from mnemex.persistence.leases import Leases as Leases
from mnemex.persistence.leases import Ownership as Ownership
from mnemex.persistence.recordfiles import RecordFiles as RecordFiles
from mnemex.persistence.rowfiles import RowFiles as RowFiles
from mnemex.persistence.shards import VSHARDS as VSHARDS
from mnemex.persistence.shards import split_vshards as split_vshards
from mnemex.persistence.shards import vshard_of as vshard_of
from mnemex.persistence.snapshot import SnapshotHeader as SnapshotHeader
from mnemex.persistence.storage import MemoryStorage as MemoryStorage
from mnemex.persistence.storage import Storage as Storage
from mnemex.persistence.storage import open_storage as open_storage
from mnemex.persistence.store import ActorStore as ActorStore
from mnemex.persistence.store import FileStore as FileStore
from mnemex.persistence.store import MemoryStore as MemoryStore
from mnemex.persistence.store import Recovered as Recovered

__all__ = [
    "ActorInfo",
    "ActorLocation",
    "VSHARDS",
    "ActorStore",
    "DataDir",
    "FileLeases",
    "FileStore",
    "Finding",
    "JournalEntry",
    "Lease",
    "Leases",
    "Level",
    "MemoryStorage",
    "MemoryStore",
    "Ownership",
    "Recovered",
    "SnapshotHeader",
    "Storage",
    "actor_dir",
    "decode_key",
    "encode_key",
    "find_actors",
    "inspect_actor",
    "open_storage",
    "read_history",
    "split_vshards",
    "verify_actor",
    "vshard_of",
    "worst_level",
]
