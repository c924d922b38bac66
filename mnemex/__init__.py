"""mnemex: memory for AI agents, embedded in the agent's own process.

This module is the whole user-facing API: open a runtime, talk to agents
(short-term memory) and scopes (long-term memory), and catch mnemex's errors.
What people extending mnemex need (actor kinds, embedders, summarizers, token
counters) is in ``mnemex.lowlevel``; the settings' sections are in
``mnemex.config``; the reply types of the less common calls (AgentStats,
Appended, SessionInfo, TurnHit, StreamEvent, SessionStream; ScopeStats,
MemoryPage, IngestProgress, DocumentInfo, CategoryCatalog, Facets) are in
``mnemex.conversations.protocol``/``ref`` and ``mnemex.memories.protocol``, for
annotations. Everything else is private and may change.
"""

from mnemex.client import Client as Client
from mnemex.config import DEFAULT as DEFAULT
from mnemex.config import Config as Config
from mnemex.config import load_config as load_config
from mnemex.conversations.protocol import ChatMessage as ChatMessage
from mnemex.conversations.protocol import ContextView as ContextView
from mnemex.conversations.protocol import KeepAll as KeepAll
from mnemex.conversations.protocol import MaxMessages as MaxMessages
from mnemex.conversations.protocol import MessagePage as MessagePage
from mnemex.conversations.protocol import Stateless as Stateless
from mnemex.conversations.protocol import StoredMessage as StoredMessage
from mnemex.conversations.protocol import TokenBudget as TokenBudget
from mnemex.conversations.protocol import Turn as Turn
from mnemex.conversations.protocol import TurnRecord as TurnRecord
from mnemex.conversations.ref import AgentRef as AgentRef
from mnemex.errors import ActorClosed as ActorClosed
from mnemex.errors import ActorCrashed as ActorCrashed
from mnemex.errors import Busy as Busy
from mnemex.errors import CorruptData as CorruptData
from mnemex.errors import DataDirLocked as DataDirLocked
from mnemex.errors import EmbedderError as EmbedderError
from mnemex.errors import ExtractionError as ExtractionError
from mnemex.errors import InvalidInput as InvalidInput
from mnemex.errors import MnemexError as MnemexError
from mnemex.errors import ModelError as ModelError
from mnemex.errors import NotFound as NotFound
from mnemex.errors import NotOwner as NotOwner
from mnemex.errors import StorageError as StorageError
from mnemex.errors import SummaryError as SummaryError
from mnemex.errors import Timeout as Timeout
from mnemex.errors import TooLarge as TooLarge
from mnemex.errors import UnknownActorKind as UnknownActorKind
from mnemex.knowledge.categories import Category as Category
from mnemex.memories.fields import MemoryFields as MemoryFields
from mnemex.memories.protocol import AliasRecord as AliasRecord
from mnemex.memories.protocol import DocumentStatus as DocumentStatus
from mnemex.memories.protocol import EntityChanged as EntityChanged
from mnemex.memories.protocol import EntityDetail as EntityDetail
from mnemex.memories.protocol import EntityInfo as EntityInfo
from mnemex.memories.protocol import EntityLink as EntityLink
from mnemex.memories.protocol import EntityPage as EntityPage
from mnemex.memories.protocol import Extracted as Extracted
from mnemex.memories.protocol import GraphStats as GraphStats
from mnemex.memories.protocol import Hit as Hit
from mnemex.memories.protocol import IngestReport as IngestReport
from mnemex.memories.protocol import MemoryHistory as MemoryHistory
from mnemex.memories.protocol import MemoryRecord as MemoryRecord
from mnemex.memories.protocol import RelatedEntities as RelatedEntities
from mnemex.memories.protocol import SearchResult as SearchResult
from mnemex.memories.protocol import SessionAdded as SessionAdded
from mnemex.memories.protocol import TypedRelation as TypedRelation
from mnemex.memories.ref import ScopeRef as ScopeRef
from mnemex.memories.tools import MEMORY_TOOLS as MEMORY_TOOLS
from mnemex.memories.tools import REMEMBER_TOOL as REMEMBER_TOOL
from mnemex.memories.tools import SEARCH_MEMORY_TOOL as SEARCH_MEMORY_TOOL
from mnemex.memories.tools import execute_memory_tool as execute_memory_tool
from mnemex.remote.runtime import connect as connect
from mnemex.runtime import MnemexRuntime as MnemexRuntime
from mnemex.runtime import open_runtime as open_runtime

__version__ = "0.1.0"

__all__ = [
    "Category",
    "ActorClosed",
    "ActorCrashed",
    "AgentRef",
    "Busy",
    "ChatMessage",
    "Client",
    "Config",
    "DEFAULT",
    "connect",
    "ContextView",
    "CorruptData",
    "DataDirLocked",
    "EmbedderError",
    "ExtractionError",
    "Hit",
    "InvalidInput",
    "KeepAll",
    "MaxMessages",
    "MemoryFields",
    "MemoryRecord",
    "MessagePage",
    "MnemexError",
    "MnemexRuntime",
    "ModelError",
    "NotFound",
    "NotOwner",
    "SEARCH_MEMORY_TOOL",
    "Extracted",
    "MemoryHistory",
    "EntityChanged",
    "EntityDetail",
    "EntityInfo",
    "AliasRecord",
    "EntityLink",
    "TypedRelation",
    "EntityPage",
    "GraphStats",
    "RelatedEntities",
    "IngestReport",
    "DocumentStatus",
    "REMEMBER_TOOL",
    "MEMORY_TOOLS",
    "ScopeRef",
    "SearchResult",
    "SessionAdded",
    "Stateless",
    "StorageError",
    "StoredMessage",
    "SummaryError",
    "Timeout",
    "TokenBudget",
    "TooLarge",
    "Turn",
    "TurnRecord",
    "UnknownActorKind",
    "execute_memory_tool",
    "load_config",
    "open_runtime",
]
