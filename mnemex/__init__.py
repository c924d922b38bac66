"""mnemex: memory for AI agents, embedded in the agent's own process.

Every public name is re-exported here; everything else is private.
"""

from mnemex._assembly import Client as Client
from mnemex._assembly import MnemexRuntime as MnemexRuntime
from mnemex._assembly import open_runtime as open_runtime
from mnemex.config import Config as Config
from mnemex.config import load_config as load_config
from mnemex.errors import ActorClosed as ActorClosed
from mnemex.errors import ActorCrashed as ActorCrashed
from mnemex.errors import Busy as Busy
from mnemex.errors import CorruptData as CorruptData
from mnemex.errors import DataDirLocked as DataDirLocked
from mnemex.errors import InvalidInput as InvalidInput
from mnemex.errors import MnemexError as MnemexError
from mnemex.errors import NotFound as NotFound
from mnemex.errors import StorageError as StorageError
from mnemex.errors import Timeout as Timeout
from mnemex.errors import TooLarge as TooLarge
from mnemex.errors import UnknownActorKind as UnknownActorKind
from mnemex.messages import ChatMessage as ChatMessage
from mnemex.messages import Command as Command
from mnemex.messages import MemoryRecord as MemoryRecord
from mnemex.messages import Reply as Reply
from mnemex.runtime import ActorKind as ActorKind
from mnemex.runtime import ActorRef as ActorRef
from mnemex.runtime import Image as Image
from mnemex.runtime import Job as Job
from mnemex.runtime import JobResult as JobResult
from mnemex.runtime import RuntimeStats as RuntimeStats
from mnemex.runtime import SnapshotData as SnapshotData
from mnemex.runtime import Step as Step
from mnemex.runtime import Tell as Tell

__version__ = "0.1.0"

__all__ = [
    "ActorClosed",
    "ActorCrashed",
    "ActorKind",
    "ActorRef",
    "Busy",
    "ChatMessage",
    "Client",
    "Command",
    "Config",
    "CorruptData",
    "DataDirLocked",
    "Image",
    "InvalidInput",
    "Job",
    "JobResult",
    "MemoryRecord",
    "MnemexError",
    "MnemexRuntime",
    "NotFound",
    "Reply",
    "RuntimeStats",
    "SnapshotData",
    "Step",
    "StorageError",
    "Tell",
    "Timeout",
    "TooLarge",
    "UnknownActorKind",
    "load_config",
    "open_runtime",
]
