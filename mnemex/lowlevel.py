"""The extension API: what people writing actor kinds (or hosting mnemex's
behaviours elsewhere) need, kept out of ``mnemex`` so that stays the small face
users learn from one file (as ``trio.lowlevel`` beside ``trio``).

An actor kind is a sans-io behaviour (``handle(command)`` returning a reply or a
``Step(reply, effects)``, ``snapshot()``, ``restore()``) plus a codec for its
commands; register it with ``open_runtime(config, kinds=[...])`` and reach its
actors with ``rt.ref(kind, key)``.
"""

from mnemex._host import Host
from mnemex._protocol import Command, JsonCodec, Reply
from mnemex.checkpoints.kind import checkpoint_kind
from mnemex.checkpoints.protocol import Blob, ChannelValue, CheckpointEntry, PendingWrite, WriteValue
from mnemex.checkpoints.ref import Checkpoints
from mnemex.client import BlockingCheckpoints
from mnemex.conversations.kind import agent_kind
from mnemex.conversations.summaries import ExtractiveSummarizer, LLMSummarizer, Summarizer
from mnemex.conversations.tokens import TokenCounter
from mnemex.effects import (
    Behaviour,
    Beside,
    Effect,
    Emit,
    Forward,
    Image,
    Job,
    JobResult,
    Key,
    SnapshotData,
    Step,
    Tell,
)
from mnemex.kernel import (
    ActorKind,
    ActorRef,
    BlockingBridge,
    HandOver,
    LeaseKeeper,
    Runtime,
    RuntimeStats,
    ShutdownReport,
    Subscription,
    open_actor_runtime,
    rebuild_behaviour,
)
from mnemex.kernel._replay import replay_actor, replay_data_dir
from mnemex.memories.kind import ScopeKind, scope_kind
from mnemex.models.hashing import Embedder, HashingEmbedder
from mnemex.persistence import (
    VSHARDS,
    DataDir,
    FileLeases,
    Lease,
    Leases,
    Ownership,
    actor_dir,
    split_vshards,
    vshard_of,
)
from mnemex.persistence.snapshot import encode_snapshot
from mnemex.runtime import shared_storage

__all__ = [
    # virtual shards and their ownership (a runtime serving part of a cluster)
    "VSHARDS",
    "DataDir",
    "FileLeases",
    "Lease",
    "LeaseKeeper",
    "Leases",
    # a runtime on a background thread, for hosts that are not trio (a Ray shard)
    "BlockingBridge",
    # a message for an actor another runtime holds, handed to the host (Runtime.elsewhere)
    "HandOver",
    "Ownership",
    "actor_dir",
    "shared_storage",
    "split_vshards",
    "vshard_of",
    "Blob",
    "BlockingCheckpoints",
    "ChannelValue",
    "CheckpointEntry",
    "Checkpoints",
    "PendingWrite",
    "WriteValue",
    "checkpoint_kind",
    "TokenCounter",
    "Summarizer",
    "LLMSummarizer",
    "HashingEmbedder",
    "ExtractiveSummarizer",
    "Embedder",
    "ActorKind",
    "ActorRef",
    "Behaviour",
    "Beside",
    "Command",
    "Effect",
    "Emit",
    "Forward",
    "Host",
    "Image",
    "Job",
    "JobResult",
    "JsonCodec",
    "Key",
    "Reply",
    "Runtime",
    "RuntimeStats",
    "ScopeKind",
    "ShutdownReport",
    "SnapshotData",
    "Step",
    "Subscription",
    "Tell",
    "agent_kind",
    "encode_snapshot",
    "open_actor_runtime",
    "rebuild_behaviour",
    "replay_actor",
    "replay_data_dir",
    "scope_kind",
]
