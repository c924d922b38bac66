"""Actor behaviours (sans-io): short-term memory (AgentMemory), its pruning
policies, summarizers and token counting. No trio, no runtime, no I/O in handlers."""

from mnemex.actors.agent import AgentMemory as AgentMemory
from mnemex.actors.agent import AgentSettings as AgentSettings
from mnemex.actors.pruning import MaxMessages as MaxMessages
from mnemex.actors.pruning import NoPruning as NoPruning
from mnemex.actors.pruning import TokenBudget as TokenBudget
from mnemex.actors.summarize import ExtractiveSummarizer as ExtractiveSummarizer
from mnemex.actors.summarize import LLMSummarizer as LLMSummarizer
from mnemex.actors.summarize import Summarizer as Summarizer
from mnemex.actors.summarize import SummaryError as SummaryError
from mnemex.actors.summarize import SummaryRequest as SummaryRequest
from mnemex.actors.tokens import EstimatedTokens as EstimatedTokens
from mnemex.actors.tokens import TokenCounter as TokenCounter

__all__ = [
    "AgentMemory",
    "AgentSettings",
    "EstimatedTokens",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "MaxMessages",
    "NoPruning",
    "Summarizer",
    "SummaryError",
    "SummaryRequest",
    "TokenBudget",
    "TokenCounter",
]
