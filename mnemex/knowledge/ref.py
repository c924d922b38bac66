"""Extraction as the runtime runs it: the job pipeline beside the scope actors,
and the calls users make (``extract``, ``extract_from``, dead letters, history).

A job (``KnowledgeServices.run``) reads its messages (and a few before them, as
context) through the reader its trigger brought, leaves out system and tool
messages and the memory blocks mnemex injected, offers the extractor the memories
most related to what was said (numbered from 1), asks the extractor in a worker
thread (one model call per job for the LLM extractor), embeds the facts and
hands them back with their ids and targets resolved. What it returns is journaled
by the scope (``ApplyExtraction`` / ``ExtractionFailed``); replay reads the
journal, never this.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec
import trio

from mnemex._ids import IdClock, id_at
from mnemex.config import Config
from mnemex.conversations.tokens import content_text
from mnemex.errors import ExtractionError, InvalidInput, MnemexError
from mnemex.knowledge.facts import (
    ExtractedFact,
    ExtractionRequest,
    Extractor,
    OfferedMemory,
    SourceMessage,
    Usage,
    strip_injected,
)
from mnemex.memories.extraction import (
    CursorInfo,
    ExtractionFailure,
    ExtractionJob,
    ExtractionOutcome,
    ExtractSession,
    GetCursors,
    ReadMessages,
    RetryDeadLetter,
)
from mnemex.memories.protocol import Extracted, JobUsage, NewFact, Search
from mnemex.memories.snapshot import encode_vector

__all__ = ["AgentReader", "KnowledgeServices", "agent_reader", "default_extractor", "list_reader",
           "merge_extracted"]

log = logging.getLogger("mnemex.knowledge")

EXTRACTABLE: Final = frozenset({"user", "assistant", "document"})
"""Roles whose messages are extracted from (system and tool messages never are)."""
SOURCES: Final = frozenset({"user", "document"})
"""Roles whose words can be facts: what the user said, and the chunks of a document
the user gave (role ``document``, whose ``speaker`` is its title; the rules
extractor reads only the user's first-person statements, so it finds nothing in a
document: an LLM extractor does). The assistant's messages are context."""


def _message_of(position: int, message: Any, time_: float = 0.0) -> SourceMessage:
    if not isinstance(message, Mapping):
        raise InvalidInput(f"message {position} must be an object with role and content, got "
                           f"{type(message).__name__}", field=f"messages[{position}]")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidInput(f"message {position} has no role", field=f"messages[{position}].role")
    text, _ = content_text(message.get("content"))
    speaker = message.get("name")
    when = message.get("timestamp", time_)
    return SourceMessage(position=position, role=role, text=text,
                         speaker=speaker if isinstance(speaker, str) and speaker else None,
                         time=float(when) if isinstance(when, int | float) and math.isfinite(when) else time_)


def list_reader(messages: Sequence[Any]) -> ReadMessages:
    """A reader over a host's own list of chat messages (dicts with role and
    content, or objects msgspec can turn into them): position i is ``messages[i]``."""
    checked = [_message_of(i, m if isinstance(m, Mapping) else msgspec.to_builtins(m))
               for i, m in enumerate(messages)]

    async def read(first: int, upto: int) -> Sequence[SourceMessage]:
        return checked[first:upto]

    return read


def provider_reader(provider: Callable[[int, int], Any]) -> ReadMessages:
    """A reader over a host's callable ``provider(first, upto)`` giving the chat
    messages of positions [first, upto) (sync, run in a worker thread, or async)."""

    async def read(first: int, upto: int) -> Sequence[SourceMessage]:
        if inspect.iscoroutinefunction(provider):
            given = await provider(first, upto)
        else:
            given = await trio.to_thread.run_sync(provider, first, upto)
        return [_message_of(first + i, m if isinstance(m, Mapping) else msgspec.to_builtins(m))
                for i, m in enumerate(given)]

    return read


class AgentReader:
    """``ReadMessages`` over one session of an agent (see ``agent_reader``). ``agent``
    names the agent, ``(kind, name)``, when known: a host that sends the command
    carrying this reader to another process (a cluster's shard) makes the same
    reader there from it."""

    __slots__ = ("agent", "entries", "session_id")

    def __init__(self, entries: Callable[..., Awaitable[Any]], session_id: str,
                 agent: tuple[str, str] | None = None) -> None:
        self.entries = entries
        self.session_id = session_id
        self.agent = agent

    async def __call__(self, first: int, upto: int) -> Sequence[SourceMessage]:
        page = await self.entries(self.session_id, None, upto - first, first)
        out = []
        for i, entry in enumerate(page.entries):
            if entry.item and not entry.role:
                continue
            message = msgspec.json.decode(entry.message)
            out.append(_message_of(first + i, message, entry.timestamp))
        return out


def agent_reader(entries: Callable[..., Awaitable[Any]], session_id: str,
                 agent: tuple[str, str] | None = None) -> ReadMessages:
    """A reader over one session of an agent (``AgentRef.entries``): position i is the
    session's i-th stored message. Items stored without a role (OpenAI Responses
    ``function_call``, ``function_call_output``, ``reasoning``...) say nothing to
    extract from: they are skipped, their positions left out. ``agent``: the agent's
    ``(kind, name)`` (see ``AgentReader``)."""
    return AgentReader(entries, session_id, agent)


def default_extractor(config: Config) -> Extractor:
    """The extractor ``config`` asks for: the LLM of ``config.llm`` (the environment's
    MNEMEX_LLM_* over it) when it names an endpoint, else the rules."""
    from mnemex.knowledge.llm import extractor_from_config
    from mnemex.knowledge.rules import RulesExtractor

    llm = extractor_from_config(config.llm)
    return llm if llm is not None else RulesExtractor()


def merge_extracted(replies: Sequence[Extracted]) -> Extracted:
    """Several consecutive jobs' replies as one."""
    if len(replies) == 1:
        return replies[0]
    last = replies[-1]
    usage = JobUsage(*(sum(getattr(r.usage, name) for r in replies)
                       for name in ("prompt_tokens", "completion_tokens", "total_tokens", "calls")))
    return msgspec.structs.replace(
        last, first=replies[0].first,
        added=[i for r in replies for i in r.added], reinforced=[i for r in replies for i in r.reinforced],
        merged=[i for r in replies for i in r.merged], superseded=[i for r in replies for i in r.superseded],
        linked=[i for r in replies for i in r.linked], dropped=[i for r in replies for i in r.dropped],
        usage=usage)


class KnowledgeServices:
    """What the extraction jobs of one runtime share: the extractor, how many
    messages of context and related memories a job gives it, and (bound when the
    runtime opens) the way to search a scope and to embed."""

    def __init__(self, extractor: Extractor, ids: IdClock, *, context_messages: int = 4, offered: int = 8,
                 max_jobs: int = 8) -> None:
        self.extractor = extractor
        self._ids = ids
        # extractors block a thread for a model call: their own threads, not trio's shared pool
        self._threads = trio.CapacityLimiter(max_jobs)
        # (app_name, user_id, session_id) -> jobs of it running now (automatic extraction waits for them)
        self.running: dict[tuple[str, str, str], int] = {}
        self.context_messages = context_messages
        self.offered = offered
        self._search: Callable[[str, str, Search], Awaitable[Any]] | None = None
        self._embed: Callable[[Sequence[str]], Awaitable[Any]] | None = None
        self._embed_queries: Callable[[Sequence[str]], Awaitable[Any]] | None = None
        self._embedder: tuple[str, int] | None = None

    def bind(self, search: Callable[[str, str, Search], Awaitable[Any]],
             embed: Callable[[Sequence[str]], Awaitable[Any]] | None,
             embedder: tuple[str, int] | None,
             embed_queries: Callable[[Sequence[str]], Awaitable[Any]] | None = None) -> None:
        """How jobs search a scope and embed facts (``embed``) and the related-memory
        query (``embed_queries``, default ``embed``), and the embedder's (name, dim)."""
        self._search, self._embed, self._embedder = search, embed, embedder
        self._embed_queries = embed_queries or embed

    def close(self) -> None:
        """Release what the extractor holds (an LLM client's connections)."""
        close = getattr(self.extractor, "close", None)
        if callable(close):
            close()

    async def timer(self, seconds: float) -> float:
        """Sleep ``seconds``, then the time (the scopes' extraction timers)."""
        await trio.sleep(max(0.0, seconds))
        return time.time()

    async def run(self, job: ExtractionJob) -> ExtractionOutcome | ExtractionFailure:
        """One extraction job (see the module doc). Failures the extractor or the
        reader report come back as an ExtractionFailure, journaled and retried.
        ``running`` holds its (app_name, user_id, session_id) meanwhile."""
        key = (job.app_name, job.user_id, job.session_id)
        self.running[key] = self.running.get(key, 0) + 1
        try:
            return await self._run(job)
        except ExtractionError as exc:
            used = exc.usage if isinstance(exc.usage, Usage) else Usage()
            return ExtractionFailure(exc.reason, str(exc), time.time(), JobUsage(
                used.prompt_tokens, used.completion_tokens, used.total_tokens, used.calls))
        except MnemexError as exc:
            return ExtractionFailure("error", f"{type(exc).__name__}: {exc}", time.time())
        finally:
            left = self.running.pop(key) - 1
            if left:
                self.running[key] = left

    async def _run(self, job: ExtractionJob) -> ExtractionOutcome:
        extractor = self.extractor
        start = max(0, job.first - self.context_messages)
        messages = list(await job.read(start, job.upto))
        new: list[SourceMessage] = []
        context: list[SourceMessage] = []
        for message in messages:
            if message.role not in EXTRACTABLE:
                continue
            text = strip_injected(message.text).strip()
            if not text:
                continue
            cleaned = msgspec.structs.replace(message, text=text) if text != message.text else message
            (new if message.position >= job.first else context).append(cleaned)
        if not any(message.role in SOURCES for message in new):
            return ExtractionOutcome([], [], extractor.name, time.time())
        observed = max((m.time for m in new), default=0.0) or time.time()
        offered = await self._related(job, new)
        request = ExtractionRequest(session_id=job.session_id, messages=new, context=context, offered=offered,
                                    observed_at=observed, user_id=job.user_id, app_name=job.app_name,
                                    categories=dict(job.categories))
        result = await trio.to_thread.run_sync(extractor.extract, request, abandon_on_cancel=True,
                                               limiter=self._threads)
        facts = list(result.facts)
        vectors: list[bytes | None] = [None] * len(facts)
        embedder = self._embedder
        if facts and self._embed is not None and embedder is not None:
            matrix = await self._embed([fact.content for fact in facts])
            vectors = [encode_vector(row) for row in matrix]
        by_number = {memory.number: memory.id for memory in offered}
        times = {m.position: m.time for m in new}
        first_id = self._ids.reserve(time.time(), max(1, len(facts)))
        stored = [self._new_fact(id_at(first_id, i), fact, vectors[i], by_number=by_number, times=times,
                                 observed=observed, job=job)
                  for i, fact in enumerate(facts)]
        reported = result.usage
        usage = JobUsage(reported.prompt_tokens, reported.completion_tokens, reported.total_tokens,
                         reported.calls)
        named = embedder if embedder is not None and facts else (None, 0)
        return ExtractionOutcome(stored, [memory.id for memory in offered], result.extractor, time.time(),
                                 usage, named[0], named[1])

    @staticmethod
    def _new_fact(memory_id: str, fact: ExtractedFact, vector: bytes | None, *, by_number: Mapping[int, str],
                  times: Mapping[int, float], observed: float, job: ExtractionJob) -> NewFact:
        positions = [p for p in fact.messages if job.first <= p < job.upto]
        when = max((times.get(p, 0.0) for p in positions), default=0.0) or observed
        target = by_number.get(fact.target) if fact.target is not None else None
        return NewFact(id=memory_id, content=fact.content, vector=vector, kind=fact.kind,
                       categories=fact.categories, confidences=fact.confidences, importance=fact.importance,
                       entities=fact.entities, entity_types=dict(fact.entity_types),
                       relation=fact.relation if target is not None else None,
                       target=target, attributed_to=fact.attributed_to, valid_at=fact.valid_at,
                       observed_at=when, first=min(positions) if positions else None,
                       last=max(positions) if positions else None, actor_id=fact.actor_id,
                       entity_relations=fact.entity_relations)

    async def _related(self, job: ExtractionJob, new: Sequence[SourceMessage]) -> list[OfferedMemory]:
        """The scope's memories closest to what the user said, numbered from 1."""
        search = self._search
        if search is None or self.offered <= 0:
            return []
        query = " ".join(m.text for m in new if m.role in SOURCES)[:2000]
        vector = None
        embedder = self._embedder
        if self._embed_queries is not None and embedder is not None:
            vector = encode_vector((await self._embed_queries([query]))[0])
        named = embedder if vector is not None and embedder is not None else (None, 0)
        command = Search(query=query, vector=vector, embedder=named[0], dim=named[1], top_k=self.offered,
                         mode="hybrid" if vector is not None else "fulltext", min_score=-1.0, now=time.time())
        result = await search(job.app_name, job.user_id, command)
        return [OfferedMemory(number=i + 1, id=hit.memory.id, content=hit.memory.content,
                              time=hit.memory.timestamp) for i, hit in enumerate(result.hits)]


async def extract_session(ask: Callable[[Any], Awaitable[Any]], session_id: str, read: ReadMessages,
                          known: int, *,
                          mode: Literal["now", "if_needed"] = "now", tokens: int = 0) -> Extracted:
    """Ask a scope to extract session ``session_id`` (``ask`` carries a command to it).
    ``now``: job after job until every message below ``known`` is covered (each
    job's reply merged); ``if_needed``: only when the buffer is full, at once."""
    replies: list[Extracted] = []
    while True:
        reply: Extracted = await ask(ExtractSession(session_id=session_id, read=read, known=known,
                                                    now=time.time(), tokens=tokens,
                                                    mode=mode))
        tokens = 0
        if reply.status in ("failed", "dead_letter", "expired"):
            done = f" (after {len(replies)} job(s) committed)" if replies else ""
            raise ExtractionError(f"extracting session {session_id!r} failed{done}: {reply.error}; "
                                  f"it is retried (see the scope's extraction status)",
                                  reason=(reply.error or "error").split(":", 1)[0])
        if reply.status != "committed":
            return merge_extracted(replies) if replies else reply
        replies.append(reply)
        if mode != "now" or reply.upto >= known:
            return merge_extracted(replies)


async def retry_dead_letter(ask: Callable[[Any], Awaitable[Any]], session_id: str, first: int,
                            read: ReadMessages) -> Extracted:
    reply: Extracted = await ask(RetryDeadLetter(session_id=session_id, first=first, read=read,
                                                 now=time.time()))
    return reply


async def cursors(ask: Callable[[Any], Awaitable[Any]], session_id: str | None = None) -> list[CursorInfo]:
    reply: list[CursorInfo] = await ask(GetCursors(session_id=session_id))
    return reply
