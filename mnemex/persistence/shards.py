"""Virtual shards: every actor belongs to one of ``VSHARDS`` buckets, fixed by a
stable hash of its kind and key, and a bucket is what moves between processes.

``vshard_of`` is the same on every machine, Python version and run (BLAKE2b of
the JSON array ``[kind, *key]``, never Python's salted ``hash``), so a router
and a shard agree on where a key lives without asking each other. On disk every
actor folder sits under its virtual shard's folder (``shards/<vvv>/``, three
hex digits), so handing a virtual shard to another process moves one folder's
worth of ownership and nothing else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

from mnemex.errors import InvalidInput

__all__ = ["SHARDS_DIR", "VSHARDS", "check_vshard", "shard_dir", "shard_name", "split_vshards", "vshard_of"]

VSHARDS = 4096
"""Number of virtual shards. Fixed for good: changing it would move every key."""
SHARDS_DIR = "shards"
"""Folder of a data directory holding one folder per virtual shard."""


def vshard_of(kind: str, key: tuple[str, ...]) -> int:
    """The virtual shard of actor ``kind``/``key``: 0 <= v < VSHARDS."""
    digest = hashlib.blake2b(orjson.dumps([kind, *key]), digest_size=8).digest()
    return int.from_bytes(digest, "big") % VSHARDS


def check_vshard(vshard: object) -> int:
    """``vshard`` if it is a virtual shard number, else InvalidInput."""
    if type(vshard) is not int or not 0 <= vshard < VSHARDS:
        raise InvalidInput(f"virtual shard must be an int from 0 to {VSHARDS - 1}, got {vshard!r}",
                           field="vshard")
    return vshard


def shard_name(vshard: int) -> str:
    """The folder name of a virtual shard: three lower-case hex digits."""
    return f"{check_vshard(vshard):03x}"


def shard_dir(data_dir: Path, vshard: int) -> Path:
    """``data_dir/shards/<vvv>``: the folder holding every actor of ``vshard``."""
    return Path(data_dir) / SHARDS_DIR / shard_name(vshard)


def split_vshards(shards: int, vshards: Iterable[int] = range(VSHARDS)) -> list[list[int]]:
    """``vshards`` dealt into ``shards`` lists of near-equal size, in order (shard i
    gets a contiguous run), the initial placement of a cluster of ``shards`` processes."""
    if type(shards) is not int or not 1 <= shards <= VSHARDS:
        raise InvalidInput(f"shards must be an int from 1 to {VSHARDS}, got {shards!r}", field="shards")
    ordered = sorted({check_vshard(v) for v in vshards})
    size, extra = divmod(len(ordered), shards)
    out: list[list[int]] = []
    start = 0
    for i in range(shards):
        end = start + size + (1 if i < extra else 0)
        out.append(ordered[start:end])
        start = end
    return out


def iter_shard_dirs(data_dir: Path) -> Iterator[tuple[int, Path]]:
    """Every ``shards/<vvv>`` folder that exists under ``data_dir``, in order."""
    root = Path(data_dir) / SHARDS_DIR
    try:
        names = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    except FileNotFoundError:
        return
    for name in names:
        if len(name) == 3:
            try:
                vshard = int(name, 16)
            except ValueError:
                continue
            if 0 <= vshard < VSHARDS and name == shard_name(vshard):
                yield vshard, root / name
