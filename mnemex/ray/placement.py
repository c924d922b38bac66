"""Where a cluster's virtual shards are placed, kept on the shared volume.

Two small files at the top of the cluster's data directory:

* ``mnemex-cluster.json`` ``{"cluster": <id>, "shards": <n>}``: written once, by
  the driver that created the cluster. A shard serves only when it reads its own
  cluster's id there: a node that does not mount the shared volume sees an empty
  folder (or another cluster's), and must refuse every key rather than serve an
  empty memory (``NotOwner``, never an answer from nothing).
* ``mnemex-placement.json`` ``{"version": <n>, "owners": [<shard index> x 4096]}``:
  which shard serves each virtual shard. The driver writes it (atomically) at
  creation and on every rebalance; a shard that starts (or restarts, after a crash
  or on another node) reads it and takes the leases of its virtual shards.

Plain files, no trio, no Ray.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Final

import msgspec

from mnemex import CorruptData, InvalidInput, StorageError
from mnemex.lowlevel import VSHARDS, split_vshards

__all__ = ["CLUSTER_FILE", "PLACEMENT_FILE", "ClusterInfo", "Placement", "create_cluster", "read_cluster",
           "read_placement", "write_placement"]

CLUSTER_FILE: Final = "mnemex-cluster.json"
PLACEMENT_FILE: Final = "mnemex-placement.json"


class ClusterInfo(msgspec.Struct, frozen=True):
    cluster: str
    shards: int


class Placement(msgspec.Struct, frozen=True):
    """``owners[v]``: the index of the shard serving virtual shard ``v``; ``version``
    grows by one with each change."""

    version: int
    owners: list[int]

    def vshards_of(self, shard: int) -> list[int]:
        return [v for v, owner in enumerate(self.owners) if owner == shard]

    def moved(self, vshard: int, shard: int) -> Placement:
        owners = list(self.owners)
        owners[vshard] = shard
        return Placement(self.version + 1, owners)

    @classmethod
    def initial(cls, shards: int) -> Placement:
        owners = [0] * VSHARDS
        for index, vshards in enumerate(split_vshards(shards)):
            for v in vshards:
                owners[v] = index
        return cls(1, owners)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc}") from exc


def _read(path: Path, type_: type[msgspec.Struct]) -> msgspec.Struct | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.MsgspecError as exc:
        raise CorruptData(f"{path} does not parse: {exc}") from exc


def read_cluster(data_dir: str | Path) -> ClusterInfo | None:
    """The cluster whose data ``data_dir`` holds; None if it holds none."""
    info = _read(Path(data_dir) / CLUSTER_FILE, ClusterInfo)
    assert info is None or isinstance(info, ClusterInfo)
    return info


def create_cluster(data_dir: str | Path, shards: int) -> tuple[ClusterInfo, Placement]:
    """The cluster of ``data_dir`` and its placement: made for ``shards`` shards if
    the folder holds none yet. A cluster made with another number of shards keeps
    its own (InvalidInput names both)."""
    path = Path(data_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the cluster's data directory {path}: {exc}") from exc
    info = read_cluster(path)
    if info is None:
        info = ClusterInfo(uuid.uuid4().hex[:12], shards)
        _write(path / PLACEMENT_FILE, msgspec.json.encode(Placement.initial(shards)))
        _write(path / CLUSTER_FILE, msgspec.json.encode(info))
    elif info.shards != shards:
        raise InvalidInput(f"the cluster in {path} runs {info.shards} shards, not {shards}", field="shards")
    placement = read_placement(path)
    if placement is None:
        placement = Placement.initial(info.shards)
        write_placement(path, placement)
    return info, placement


def read_placement(data_dir: str | Path) -> Placement | None:
    placement = _read(Path(data_dir) / PLACEMENT_FILE, Placement)
    assert placement is None or isinstance(placement, Placement)
    if placement is not None and len(placement.owners) != VSHARDS:
        raise CorruptData(f"{Path(data_dir) / PLACEMENT_FILE} places {len(placement.owners)} virtual shards, "
                          f"not {VSHARDS}")
    return placement


def write_placement(data_dir: str | Path, placement: Placement) -> None:
    _write(Path(data_dir) / PLACEMENT_FILE, msgspec.json.encode(placement))
