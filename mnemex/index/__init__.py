"""Search indexes of a memory scope: plain synchronous, deterministic code.

Documents are dense non-negative int ids chosen by the owner (the ScopeActor maps
its record ids to them). Every index has ``add``, ``remove``, ``update``,
``__len__`` and ``search(..., allowed=None)``, where ``allowed`` (a bool mask by
doc id, or a collection of ids) filters inside the search, before the cut to
top_k.

* :class:`KeywordIndex`: the classic word-overlap matching.
* :class:`BM25Index`: full-text BM25 with quoted phrases and a context field.
* :class:`PhraseMatcher`, :class:`EntityIndex`: registered phrases and entity
  names found in a text with Aho-Corasick.
* :class:`VectorIndex`: cosine similarity, exact while small, HNSW when large.
* fusion helpers: :func:`reciprocal_rank_fusion`, :func:`weighted_score_fusion`.
"""

from mnemex.index._graph import BUILD_BLOCK as BUILD_BLOCK
from mnemex.index._graph import BuiltGraph as BuiltGraph
from mnemex.index._graph import GraphBuilder as GraphBuilder
from mnemex.index._graph import GraphParams as GraphParams
from mnemex.index._graph import graph_calls_path as graph_calls_path
from mnemex.index._graph import graph_file_header as graph_file_header
from mnemex.index._graph import load_graph as load_graph
from mnemex.index._select import Allowed as Allowed
from mnemex.index.bm25 import BM25Index as BM25Index
from mnemex.index.fusion import normalize_scores as normalize_scores
from mnemex.index.fusion import reciprocal_rank_fusion as reciprocal_rank_fusion
from mnemex.index.fusion import weighted_score_fusion as weighted_score_fusion
from mnemex.index.keyword import KeywordIndex as KeywordIndex
from mnemex.index.phrases import EntityIndex as EntityIndex
from mnemex.index.phrases import PhraseMatcher as PhraseMatcher
from mnemex.index.phrases import normalize_phrase as normalize_phrase
from mnemex.index.tokenizer import ENGLISH_STOP_WORDS as ENGLISH_STOP_WORDS
from mnemex.index.tokenizer import ParsedQuery as ParsedQuery
from mnemex.index.tokenizer import Phrase as Phrase
from mnemex.index.tokenizer import Tokenizer as Tokenizer
from mnemex.index.tokenizer import words as words
from mnemex.index.vector import ExactScores as ExactScores
from mnemex.index.vector import GraphBuild as GraphBuild
from mnemex.index.vector import RowFile as RowFile
from mnemex.index.vector import RowFiles as RowFiles
from mnemex.index.vector import SidecarStatus as SidecarStatus
from mnemex.index.vector import VectorIndex as VectorIndex

__all__ = [
    "BUILD_BLOCK",
    "ENGLISH_STOP_WORDS",
    "Allowed",
    "BM25Index",
    "BuiltGraph",
    "EntityIndex",
    "ExactScores",
    "GraphBuild",
    "GraphBuilder",
    "GraphParams",
    "KeywordIndex",
    "ParsedQuery",
    "Phrase",
    "PhraseMatcher",
    "RowFile",
    "RowFiles",
    "SidecarStatus",
    "Tokenizer",
    "VectorIndex",
    "graph_calls_path",
    "graph_file_header",
    "load_graph",
    "normalize_phrase",
    "normalize_scores",
    "reciprocal_rank_fusion",
    "weighted_score_fusion",
    "words",
]
