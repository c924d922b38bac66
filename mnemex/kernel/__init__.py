"""The actor kernel on trio: mailboxes, ask/tell, journaling, supervision,
passivation, snapshots and the blocking bridge. Knows bytes, not memories.
(The effects behaviours return are plain data in ``mnemex.effects``.)"""

from mnemex.kernel._bridge import BlockingBridge, BlockingRef
from mnemex.kernel._elsewhere import Caller, Elsewhere, HandOver
from mnemex.kernel._kernel import (
    ActorRef,
    Runtime,
    RuntimeStats,
    ShutdownReport,
    Subscription,
    open_actor_runtime,
    rebuild_behaviour,
)
from mnemex.kernel._kind import ActorKind
from mnemex.kernel._leases import LeaseKeeper

__all__ = [
    "ActorKind",
    "ActorRef",
    "BlockingBridge",
    "BlockingRef",
    "Caller",
    "Elsewhere",
    "HandOver",
    "LeaseKeeper",
    "Runtime",
    "RuntimeStats",
    "ShutdownReport",
    "Subscription",
    "open_actor_runtime",
    "rebuild_behaviour",
]
