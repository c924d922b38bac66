"""The ``checkpoint`` actor kind: one ThreadCheckpoints behaviour per thread."""

from __future__ import annotations

from typing import Any, Final

from mnemex.checkpoints.behaviour import ThreadCheckpoints, is_checkpoint_write
from mnemex.checkpoints.protocol import (
    GetCheckpoint,
    ListCheckpoints,
    PutCheckpoint,
    PutWrites,
    checkpoint_codec,
)
from mnemex.effects import Image, Key
from mnemex.kernel import ActorKind

__all__ = ["CHECKPOINT_KIND", "checkpoint_kind"]

CHECKPOINT_KIND: Final = "checkpoint"


def checkpoint_kind(*, name: str = CHECKPOINT_KIND) -> ActorKind:
    """The ``checkpoint`` actor kind (its actors are keyed by thread id; on disk under
    ``checkpoints/``)."""

    def create(key: Key) -> ThreadCheckpoints:
        return ThreadCheckpoints(key)

    def restore(key: Key, image: Image) -> ThreadCheckpoints:
        return ThreadCheckpoints.restore(key, image)

    return ActorKind(name=name, create=create, restore=restore, encode=checkpoint_codec.encode,
                     decode=checkpoint_codec.decode, is_journaled=is_checkpoint_write,
                     inline_read=_only_reads, inline_write=_plain_writes)


def _only_reads(command: Any) -> bool:
    """Getting and listing checkpoints read the thread (no effects, no change)."""
    return type(command) is GetCheckpoint or type(command) is ListCheckpoints


def _plain_writes(command: Any) -> bool:
    """Storing a checkpoint or writes changes the thread and gives no effects."""
    return type(command) is PutCheckpoint or type(command) is PutWrites
