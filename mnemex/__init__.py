"""mnemex: memory for AI agents, embedded in the agent's own process.

Every public name is re-exported here; everything else is private.
"""

from mnemex._agents import AgentRef as AgentRef
from mnemex._agents import SessionStream as SessionStream
from mnemex._agents import agent_kind as agent_kind
from mnemex._agents import context_for_model_call as context_for_model_call
from mnemex._agents import record_turn as record_turn
from mnemex._assembly import Client as Client
from mnemex._assembly import MnemexRuntime as MnemexRuntime
from mnemex._assembly import open_runtime as open_runtime

# -- long-term memory
from mnemex._scopes import SEARCH_MEMORY_TOOL as SEARCH_MEMORY_TOOL
from mnemex._scopes import MemoryService as MemoryService
from mnemex._scopes import ScopeRef as ScopeRef
from mnemex._scopes import execute_memory_tool as execute_memory_tool
from mnemex._scopes import format_as_context as format_as_context
from mnemex._scopes import scope_kind as scope_kind
from mnemex.actors.summarize import ExtractiveSummarizer as ExtractiveSummarizer
from mnemex.actors.summarize import LLMSummarizer as LLMSummarizer
from mnemex.actors.summarize import Summarizer as Summarizer
from mnemex.actors.summarize import SummaryError as SummaryError
from mnemex.actors.summarize import SummaryRequest as SummaryRequest
from mnemex.actors.tokens import EstimatedTokens as EstimatedTokens
from mnemex.actors.tokens import TokenCounter as TokenCounter
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
from mnemex.index import Embedder as Embedder
from mnemex.index import HashingEmbedder as HashingEmbedder
from mnemex.messages import AgentStats as AgentStats
from mnemex.messages import Appended as Appended
from mnemex.messages import ChatMessage as ChatMessage
from mnemex.messages import Command as Command
from mnemex.messages import ContextView as ContextView
from mnemex.messages import Event as Event
from mnemex.messages import Hit as Hit
from mnemex.messages import MaxMessages as MaxMessages
from mnemex.messages import MemoryEntry as MemoryEntry
from mnemex.messages import MemoryPage as MemoryPage
from mnemex.messages import MemoryRecord as MemoryRecord
from mnemex.messages import MessagePage as MessagePage
from mnemex.messages import NoPruning as NoPruning
from mnemex.messages import Reply as Reply
from mnemex.messages import ScopeStats as ScopeStats
from mnemex.messages import SearchRequest as SearchRequest
from mnemex.messages import SearchResponse as SearchResponse
from mnemex.messages import SearchResult as SearchResult
from mnemex.messages import Session as Session
from mnemex.messages import SessionAdded as SessionAdded
from mnemex.messages import SessionInfo as SessionInfo
from mnemex.messages import StoredMessage as StoredMessage
from mnemex.messages import StreamEvent as StreamEvent
from mnemex.messages import TokenBudget as TokenBudget
from mnemex.messages import Turn as Turn
from mnemex.messages import TurnHit as TurnHit
from mnemex.messages import TurnRecord as TurnRecord
from mnemex.runtime import ActorKind as ActorKind
from mnemex.runtime import ActorRef as ActorRef
from mnemex.runtime import Forward as Forward
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
    "AgentRef",
    "AgentStats",
    "Appended",
    "Busy",
    "ChatMessage",
    "Client",
    "Command",
    "Config",
    "ContextView",
    "CorruptData",
    "DataDirLocked",
    "EstimatedTokens",
    "ExtractiveSummarizer",
    "Image",
    "InvalidInput",
    "Job",
    "JobResult",
    "LLMSummarizer",
    "MaxMessages",
    "MemoryRecord",
    "MessagePage",
    "MnemexError",
    "MnemexRuntime",
    "NoPruning",
    "NotFound",
    "Reply",
    "RuntimeStats",
    "SessionInfo",
    "SessionStream",
    "SnapshotData",
    "Step",
    "StorageError",
    "StoredMessage",
    "StreamEvent",
    "Summarizer",
    "SummaryError",
    "SummaryRequest",
    "Tell",
    "Timeout",
    "TokenBudget",
    "TokenCounter",
    "TooLarge",
    "Turn",
    "TurnHit",
    "TurnRecord",
    "UnknownActorKind",
    "agent_kind",
    "context_for_model_call",
    "load_config",
    "open_runtime",
    "record_turn",
]

__all__ += [  # long-term memory
    "SEARCH_MEMORY_TOOL",
    "Embedder",
    "Event",
    "HashingEmbedder",
    "Hit",
    "MemoryEntry",
    "MemoryPage",
    "MemoryService",
    "ScopeRef",
    "ScopeStats",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "Session",
    "SessionAdded",
    "execute_memory_tool",
    "format_as_context",
    "scope_kind",
]
