"""The actor kernel on trio: mailboxes, ask/tell, journaling, supervision,
passivation, snapshots and the blocking bridge. Knows bytes, not memories."""

from mnemex.effects import (
    Behaviour,
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
from mnemex.kernel._bridge import BlockingBridge, BlockingRef
from mnemex.kernel._kernel import (
    ActorRef,
    Runtime,
    RuntimeStats,
    Subscription,
    open_actor_runtime,
    rebuild_behaviour,
)
from mnemex.kernel._kind import ActorKind

__all__ = [
    "ActorKind",
    "ActorRef",
    "Behaviour",
    "BlockingBridge",
    "BlockingRef",
    "Effect",
    "Emit",
    "Forward",
    "Image",
    "Job",
    "JobResult",
    "Key",
    "Runtime",
    "RuntimeStats",
    "SnapshotData",
    "Step",
    "Subscription",
    "Tell",
    "open_actor_runtime",
    "rebuild_behaviour",
]
