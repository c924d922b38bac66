"""Config: every knob mnemex has, with defaults that work with no file.

A Config is a frozen msgspec Struct. It is checked when it is built (in code,
from TOML or from JSON), so a bad value fails at start-up with a message that
names the field, never on the first write an hour later.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from typing import Annotated, Any, Literal

import msgspec

from mnemex.errors import InvalidInput

__all__ = ["Config", "load_config"]

FsyncPolicy = Literal["always", "batch", "never"]
OverloadPolicy = Literal["wait", "fail"]
# constraints declared on the fields: checked the same way when a Config is built in Python
# (``_check_declared``) as when msgspec decodes one from TOML or JSON
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Runtime settings. Times are seconds, sizes are bytes unless named otherwise."""

    data_dir: str | None = "mnemex-data"
    """Where actors persist. ``None`` keeps everything in memory (tests, caches):
    nothing survives the process."""

    # -- mailboxes and asks ------------------------------------------------------
    mailbox_size: PositiveInt = 1024
    """Messages an actor's mailbox holds before senders wait (or fail, below)."""
    overload: OverloadPolicy = "wait"
    """``"wait"``: a full mailbox makes senders wait (backpressure).
    ``"fail"``: a full mailbox raises Busy at once."""
    ask_timeout: PositiveFloat = 30.0
    """Default seconds an ask waits for its answer before raising Timeout."""
    max_key_bytes: PositiveInt = 1024
    """Longest actor key (agent name, user id, app name) in UTF-8 bytes."""

    gc_freeze: bool = True
    """When the first runtime of a process opens, ``gc.freeze()`` the objects alive
    then (modules, start-up state), so Python's cyclic collector stops rescanning
    them; actors spawn and passivate faster. Objects frozen are never collected
    by the cycle collector (reference counting still frees them)."""

    # -- lifecycle ---------------------------------------------------------------
    idle_timeout: PositiveFloat = 300.0
    """Seconds without a message after which a live actor is snapshotted and unloaded."""
    max_live_actors: PositiveInt = 100_000
    """Live actors kept at once; past it the least recently used is passivated."""
    shutdown_timeout: PositiveFloat = 30.0
    """Seconds a clean shutdown may take to drain mailboxes and write snapshots."""
    restore_attempts: PositiveInt = 3
    """Tries at loading an actor before its asks fail with ActorCrashed."""
    restore_backoff: NonNegativeFloat = 0.05
    """Seconds before the first retry of a failed load; doubles each try."""
    restore_quarantine: NonNegativeFloat = 30.0
    """Seconds an actor that failed every load attempt answers ActorCrashed
    at once before another load is tried (so a broken actor never loops hot)."""

    # -- persistence -------------------------------------------------------------
    fsync: FsyncPolicy = "batch"
    """``always``: each actor fsyncs its journal before answering. ``batch`` (group
    commit, the default): one fsync round covers every line written by every actor
    since the previous round; callers are answered after it. ``never``: the OS
    flushes when it likes; a power loss loses the tail the OS had buffered (a
    process crash loses nothing)."""
    fsync_window: NonNegativeFloat = 0.0
    """Extra seconds each group-commit round waits to gather more lines. 0 commits
    at once when idle; under load lines gather while the previous round syncs."""
    fsync_method: Literal["auto", "syncfs", "fdatasync"] = "auto"
    """How a group-commit round makes journals durable. ``auto``/``syncfs``: one
    ``syncfs(2)`` for the data directory's filesystem (Linux; much cheaper than
    one fsync per journal, but it also flushes other files' writes on that
    filesystem: give mnemex its own volume). ``fdatasync``: one per journal, in
    ``fsync_threads`` threads. Elsewhere than Linux ``auto`` is ``fdatasync``."""
    fsync_threads: PositiveInt = 16
    """Worker threads a group-commit round fsyncs journals with (each actor has its
    own journal file; their fsyncs run in parallel)."""
    snapshot_every: PositiveInt = 10_000
    """Journaled commands after which an actor is snapshotted (at the earliest)..."""
    snapshot_growth: NonNegativeFloat = 0.5
    """...and only once the journal since the last snapshot has grown to this share
    of that snapshot's size, so large states are not rewritten every few commands
    (snapshot cost stays O(1) per command; replay stays under this share)."""
    snapshot_interval: PositiveFloat = 600.0
    """Seconds after which an actor with unsnapshotted commands is snapshotted."""
    snapshots_kept: PositiveInt = 2
    """Snapshots kept per actor (the newest ones)."""

    # -- content limits ----------------------------------------------------------
    max_content_bytes: PositiveInt = 10_240
    """Longest memory content in UTF-8 bytes."""
    max_message_bytes: PositiveInt = 1_048_576
    """Longest chat message (encoded) in bytes."""

    # -- short-term memory
    agent_policy: Literal["max_messages", "token_budget", "keep_all", "stateless", "none"] = "max_messages"
    """Default pruning policy of every agent (an agent or a session may set its own):
    ``max_messages`` (MaxMessages(agent_max_messages)), ``token_budget``
    (TokenBudget(agent_max_context_tokens, agent_trigger_ratio,
    agent_keep_recent_turns)), ``keep_all`` (KeepAll: every message) or ``stateless``
    (Stateless: only the messages of the latest append; ``none`` is the same, its
    older name)."""
    agent_max_messages: PositiveInt = 100
    """Messages a MaxMessages context keeps (system messages included)."""
    agent_max_context_tokens: PositiveInt = 8192
    """The model's context window for TokenBudget, in tokens."""
    agent_trigger_ratio: float = 0.8
    """Fraction of the window at which TokenBudget compresses, in (0, 1]."""
    agent_keep_recent_turns: PositiveInt = 5
    """User turns TokenBudget keeps verbatim when it compresses."""
    agent_retain: Literal["all", "pruned"] = "all"
    """``all``: history keeps every appended message; ``pruned``: messages that no
    context can show again (pruned or summarized) are forgotten."""
    agent_session_ttl: PositiveFloat | None = None
    """Seconds without an append after which a session expires; None: never."""
    agent_sweep_interval: PositiveFloat = 60.0
    """Seconds between sweeps that delete expired sessions of live agents."""
    agent_summarizer: Literal["extractive", "llm"] = "extractive"
    """What makes TokenBudget summaries: ``extractive`` (no model) or ``llm``."""
    agent_llm_base_url: str = "https://api.openai.com/v1"
    """OpenAI-compatible API root for the ``llm`` summarizer (``.../v1``)."""
    agent_llm_model: str = "gpt-4o-mini"
    """Model the ``llm`` summarizer asks."""
    agent_llm_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the ``llm`` summarizer's API key (read at each call)."""
    agent_llm_timeout: PositiveFloat = 30.0
    """Seconds one summary request may take."""
    agent_summary_retry: PositiveFloat = 5.0
    """Seconds before a failed summary is asked for again; doubles per failure, up
    to 300. Meanwhile the context is cut to the budget."""

    # -- long-term memory
    embedder: Literal["hashing", "minilm", "minilm-torch", "use-multilingual"] = "minilm"
    """What embeds memories and queries for vector and hybrid search (see
    mnemex.embedders): ``hashing`` (no model: signed feature hashing of words and
    word pieces; lexical, it finds shared words and spellings, not meaning),
    ``minilm`` (all-MiniLM-L6-v2 sentence embeddings, English, as an int8 ONNX model
    on onnxruntime; installed with mnemex, nothing downloaded), ``minilm-torch`` (the
    same model in float32 on PyTorch; the ``mnemex[minilm]`` extra) or
    ``use-multilingual`` (Universal Sentence Encoder multilingual v3, 16 languages;
    the ``mnemex[multilingual]`` extra). A scope keeps to the embedder it started
    with and refuses vectors of another."""
    embedder_dim: PositiveInt = 384
    """Dimensions of the ``hashing`` embedder (the models have their own: 384 for
    ``minilm`` and ``minilm-torch``, 512 for ``use-multilingual``)."""
    embed_batch_size: PositiveInt = 256
    """Most texts one embedding call takes; texts of concurrent callers are gathered
    into one call up to this many."""
    hnsw_threshold: PositiveInt = 20_000
    """Memories in a scope from which vector search uses an HNSW graph (built beside
    the actor) instead of an exact scan."""
    hnsw_m: PositiveInt = 16
    """HNSW links per node (memory grows by about 8 bytes per link)."""
    hnsw_ef_construction: PositiveInt = 100
    """HNSW build breadth: higher is better recall and slower ingest."""
    hnsw_ef_search: PositiveInt = 256
    """HNSW search breadth per 10 results: higher is better recall and slower search."""
    hnsw_tombstone_ratio: float = 0.2
    """Share of deleted nodes at which the HNSW graph is rebuilt, in (0, 1)."""
    hnsw_sidecar: bool = True
    """Write the HNSW graph beside each snapshot so a restart need not rebuild it."""
    hnsw_threads: PositiveInt = 2
    """Threads that build the HNSW graph and insert batches into it. More than 1 makes
    ingest faster on several cores, and the graph's exact shape depend on thread
    timing (search stays approximate either way; the graph is saved with snapshots)."""
    search_mode: Literal["keyword", "fulltext", "vector", "hybrid"] = "hybrid"
    """Mode of a search that names none."""
    vector_min_score: float | None = None
    """Least cosine similarity a ``vector`` search returns unless it gives min_score;
    None takes the embedder's own (``min_score``: 0.25 for the MiniLM and multilingual
    models, whose related texts score 0.2 to 0.6; 0.7 for ``hashing``)."""
    hybrid_min_score: float | None = None
    """Least score a ``hybrid`` search returns unless it gives min_score: hits below it
    are mostly noise (a stray vector neighbour sharing nothing with the query). None:
    the score of a memory found by its vector alone at ``vector_min_score`` (the
    vector weight's share of it), at most 0.1."""
    fusion: Literal["weighted", "rrf"] = "weighted"
    """How ``hybrid`` fuses full-text and vector: ``weighted`` sums the calibrated scores
    (comparable across scopes) by the weights below; ``rrf`` is reciprocal rank fusion."""
    fusion_fulltext_weight: NonNegativeFloat = 0.7
    """Weight of the full-text signal in hybrid fusion."""
    fusion_vector_weight: NonNegativeFloat = 0.3
    """Weight of the vector signal in hybrid fusion."""
    fusion_rrf_k: NonNegativeFloat = 60.0
    """The k of reciprocal rank fusion (``fusion = "rrf"``)."""
    fusion_candidates: PositiveInt = 30
    """Candidates each signal gives hybrid search (at least top_k)."""
    rank_importance_weight: NonNegativeFloat = 0.0
    """Share of a hybrid score given to a memory's importance (0..1)."""
    rank_recency_weight: NonNegativeFloat = 0.0
    """Share of a hybrid score given to recency (0.5 ** (age / recency_half_life))."""
    rank_access_weight: NonNegativeFloat = 0.0
    """Share of a hybrid score given to use: access_count / (access_count + 10)."""
    recency_half_life: PositiveFloat = 2_592_000.0
    """Seconds after which a memory's recency signal halves (default 30 days)."""
    entity_boost: NonNegativeFloat = 1.0
    """Full-text score added per entity of a memory that the query names (in units
    of the query's average term weight)."""
    bm25_k1: NonNegativeFloat = 1.5
    """BM25 term-frequency saturation."""
    bm25_b: float = 0.75
    """BM25 length normalisation, in 0..1."""
    fulltext_stem: bool = False
    """Stem words (Snowball English) for full-text search; needs ``snowballstemmer``."""
    context_window: int = 2
    """Memories of one session before and after a memory (by id, that is by time) whose
    text ranks it in full-text search as its *context*, kept apart from its content
    (an answer is often spread over neighbouring turns). 0 turns context off."""
    context_weight: NonNegativeFloat = 0.5
    """Weight of a memory's context against its own content in BM25 (BM25F)."""
    touch_interval: PositiveFloat = 1.0
    """Seconds between the batched writes of what searches returned (access counts)."""
    max_top_k: PositiveInt = 1000
    """Most results one search may ask for."""
    max_memories_per_command: PositiveInt = 10_000
    """Most memories one remember_many or add_session call stores."""
    max_metadata_bytes: PositiveInt = 16_384
    """Largest metadata object of one memory, JSON-encoded."""

    def __post_init__(self) -> None:
        _check_declared(self)
        if self.data_dir is not None and not self.data_dir.strip():
            raise _invalid("data_dir", "config.data_dir is empty; give a path or None for in-memory")
        # -- short-term memory
        ratio = self.agent_trigger_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
            raise _invalid("agent_trigger_ratio",
                           f"config.agent_trigger_ratio is {ratio!r}; it must be in (0, 1]")
        if self.agent_max_context_tokens < 16:
            raise _invalid("agent_max_context_tokens",
                           f"config.agent_max_context_tokens is {self.agent_max_context_tokens!r}; "
                           f"it must be >= 16")
        if not self.agent_llm_base_url.startswith(("http://", "https://")):
            raise _invalid("agent_llm_base_url",
                           f"config.agent_llm_base_url is {self.agent_llm_base_url!r}; it must be an "
                           f"http(s) URL such as https://api.openai.com/v1")
        # -- long-term memory
        if isinstance(self.context_window, bool) or not isinstance(self.context_window, int) or not (
                0 <= self.context_window <= 16):
            raise _invalid("context_window", f"config.context_window is {self.context_window!r}; it must be "
                           f"an int in 0..16")
        if self.embedder_dim < 8:
            raise _invalid("embedder_dim", f"config.embedder_dim is {self.embedder_dim}; it must be >= 8")
        if self.hnsw_m < 2:
            raise _invalid("hnsw_m", f"config.hnsw_m is {self.hnsw_m}; it must be >= 2")
        for name, low, high, span in (("hnsw_tombstone_ratio", 0.0, 1.0, "in (0, 1)"),
                                      ("bm25_b", 0.0, 1.0, "in 0..1"),
                                      *([("vector_min_score", -1.0, 1.0, "in -1..1")]
                                        if self.vector_min_score is not None else []),
                                      *([("hybrid_min_score", 0.0, 1.0, "in 0..1")]
                                        if self.hybrid_min_score is not None else [])):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and low <= value <= high) or (
                    name == "hnsw_tombstone_ratio" and value in (low, high)):
                raise _invalid(name, f"config.{name} is {value!r}; it must be {span}")
        if self.fusion_fulltext_weight + self.fusion_vector_weight <= 0:
            raise _invalid("fusion_vector_weight", "config.fusion_fulltext_weight and "
                           "config.fusion_vector_weight are both 0; hybrid search needs one above 0")
        shares = self.rank_importance_weight + self.rank_recency_weight + self.rank_access_weight
        if shares >= 1:
            raise _invalid("rank_importance_weight",
                           f"config.rank_importance_weight + rank_recency_weight + rank_access_weight is "
                           f"{shares:g}; it must stay below 1 (the rest is the relevance's share)")


def _invalid(name: str, message: str) -> InvalidInput:
    return InvalidInput(message, field=name)


def load_config(data: bytes | str | dict[str, Any], *, fmt: Literal["toml", "json"] = "toml") -> Config:
    """Build a Config from TOML or JSON text, or from a dict; unknown keys and wrong
    types raise InvalidInput naming the key."""
    try:
        if isinstance(data, dict):
            return msgspec.convert(data, Config)
        if fmt == "toml":
            return msgspec.toml.decode(data, type=Config)
        return msgspec.json.decode(data, type=Config)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"config: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"config is not valid {fmt}: {exc}") from exc


@functools.cache
def _declared(cls: type[msgspec.Struct]) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple((name, hints[name]) for name in cls.__struct_fields__)


def _describe(kind: Any) -> str:
    origin = typing.get_origin(kind)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(kind))
    if origin is Annotated:
        base, *metas = typing.get_args(kind)
        bounds = [f"{op} {getattr(meta, attr)}" for meta in metas
                  for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                  if getattr(meta, attr, None) is not None]
        return f"{_describe(base)} {' and '.join(bounds)}".strip()
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(kind))
    if kind is type(None):
        return "None"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(kind, str(kind))


def _fits(value: Any, kind: Any) -> bool:
    origin = typing.get_origin(kind)
    if origin is Literal:
        return any(value == option and type(value) is type(option) for option in typing.get_args(kind))
    if origin is Annotated:
        base, *metas = typing.get_args(kind)
        if not _fits(value, base):
            return False
        for meta in metas:
            for attr, ok in (("ge", value.__ge__), ("gt", value.__gt__), ("le", value.__le__),
                             ("lt", value.__lt__)):
                bound = getattr(meta, attr, None)
                if bound is not None and ok(bound) is not True:
                    return False
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind) if isinstance(kind, type) else True


def _check_declared(config: msgspec.Struct) -> None:
    """Every field against its declared type: Literal choices, number types and the
    bounds on ``Annotated`` fields. msgspec checks these when it decodes; a Struct
    built in Python is not checked by msgspec, so it is checked here, from the same
    declarations."""
    for name, kind in _declared(type(config)):
        value = getattr(config, name)
        if not _fits(value, kind):
            raise _invalid(name, f"config.{name} is {value!r}; it must be {_describe(kind)}")
