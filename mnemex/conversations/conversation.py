"""One session's messages, indexed so a context view costs O(log n + view).

A Conversation keeps its entries in insertion order beside prefix sums of the
tokens of its non-system messages and the positions of its system and user
messages. Any "suffix that fits a budget" is then a bisection, and a view is
built by slicing, whatever the length of the history.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from mnemex.conversations.protocol import MessageEntry, Policy, TurnRecord

__all__ = ["SUMMARY_CLOSE", "SUMMARY_OPEN", "SYSTEM_ROLES", "TOOL_ROLES", "Conversation", "Summary",
           "summary_pair"]

SYSTEM_ROLES: Final = frozenset({"system", "developer"})
"""Roles kept by every pruning policy, wherever they stand."""
TOOL_ROLES: Final = frozenset({"tool", "function"})
"""Roles that answer an earlier assistant message: a context never starts with one."""

SUMMARY_OPEN: Final = "[Previous Conversation Summary]"
SUMMARY_CLOSE: Final = "[End of Summary]"

_encode = msgspec.json.Encoder()
_POSITION: Final = struct.Struct("=q")
"""An entry's position in a query's bucket (``Conversation.by_query``): native, as
``memoryview.cast("q")`` reads it back."""


class Summary(msgspec.Struct, frozen=True):
    """A summary standing for a session's non-system messages with a sequence below
    ``through``; ``covered`` is how many they are."""

    version: int
    through: int
    text: str
    covered: int = 0


def summary_pair(summary: Summary, items: bool = False) -> tuple[msgspec.Raw, msgspec.Raw]:
    """The two messages that inject a summary: an assistant call of the
    ``memory_compress`` tool, and the tool's answer framing the summary. With
    ``items``, as OpenAI Responses items (``function_call`` and its output), for a
    session stored as items."""
    call_id = f"memory_compress_{summary.version}"
    framed = f"{SUMMARY_OPEN}\n{summary.text}\n{SUMMARY_CLOSE}"
    call: dict[str, Any]
    result: dict[str, Any]
    if items:
        call = {"type": "function_call", "call_id": call_id, "name": "memory_compress", "arguments": "{}"}
        result = {"type": "function_call_output", "call_id": call_id, "output": framed}
    else:
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "memory_compress", "arguments": "{}"}}],
        }
        result = {"role": "tool", "tool_call_id": call_id, "content": framed}
    return msgspec.Raw(_encode.encode(call)), msgspec.Raw(_encode.encode(result))


class Conversation:
    """A session: its entries and the indexes pruning needs. Owned by one AgentMemory.

    ``generation`` is the sequence the session was created at, so a result computed
    for an earlier session of the same id is recognised and dropped; ``pops`` counts
    the messages taken back (``pop``), so a summary asked for before one is dropped
    too. ``items``: how many entries were stored as Responses items (a summary is
    then injected as items).
    """

    __slots__ = (
        "by_query",
        "cache",
        "calls",
        "completed",
        "created_at",
        "cum",
        "entries",
        "failures",
        "generation",
        "items",
        "last_append",
        "lines",
        "pair",
        "pair_tokens",
        "pending_since",
        "policy",
        "pops",
        "prune_logged",
        "retry_after",
        "session_id",
        "size",
        "state",
        "summary",
        "sys_cum",
        "sys_idx",
        "turns",
        "updated_at",
        "user_idx",
    )

    def __init__(self, session_id: str, generation: int, created_at: float) -> None:
        self.session_id = session_id
        self.generation = generation
        self.created_at = created_at
        self.updated_at = created_at
        self.completed = False
        self.policy: Policy | None = None
        self.entries: list[MessageEntry] = []
        self.size = 0  # bytes of the messages' JSON held in entries
        self.lines: list[bytes] = []  # encoded entries[:len(lines)], kept for snapshots
        self.cum: list[int] = [0]  # cum[i]: tokens of the non-system entries before i
        self.sys_idx: list[int] = []
        self.sys_cum: list[int] = [0]  # sys_cum[j]: tokens of the first j system entries
        self.user_idx: list[int] = []
        self.calls: set[str] = set()
        # the positions of each query id's entries, packed (see query_positions): a list a
        # query would be tracked by the cyclic GC, whose full collections then walked
        # one object per query of the whole history (0.7 s at 300,000 queries)
        self.by_query: dict[str | None, bytearray] = {}
        self.last_append = 0
        self.summary: Summary | None = None
        self.pair: tuple[msgspec.Raw, msgspec.Raw] | None = None
        self.pair_tokens = 0
        self.turns: list[TurnRecord] = []
        self.state: dict[str, msgspec.Raw] = {}  # the session's key-value state (JSON values)
        self.items = 0
        self.pops = 0
        self.cache: tuple[object, object] | None = None
        # summary jobs: transient, never persisted (a pending one is asked for again)
        self.pending_since: float | None = None
        self.failures = 0
        self.retry_after = 0.0
        self.prune_logged = False

    # -- growing --------------------------------------------------------------------
    def add(self, entry: MessageEntry) -> None:
        index = len(self.entries)
        self.entries.append(entry)
        self.size += len(entry.message)
        cum = self.cum
        if entry.role in SYSTEM_ROLES:
            self.sys_idx.append(index)
            self.sys_cum.append(self.sys_cum[-1] + entry.tokens)
            cum.append(cum[-1])
        else:
            cum.append(cum[-1] + entry.tokens)
            if entry.role == "user":
                self.user_idx.append(index)
        if entry.tool_call_ids:
            self.calls.update(entry.tool_call_ids)
        bucket = self.by_query.get(entry.query_id)
        if bucket is None:
            self.by_query[entry.query_id] = bytearray(_POSITION.pack(index))
        else:
            bucket += _POSITION.pack(index)
        if entry.item:
            self.items += 1
            if self.items == 1:
                self._reshape_pair()

    def pop(self) -> MessageEntry:
        """Take the newest entry off (the session must have one): every index is
        unwound by one step, O(1). A summary or turn record that stood for it is the
        caller's to adjust."""
        entry = self.entries.pop()
        self.size -= len(entry.message)
        index = len(self.entries)
        if len(self.lines) > index:
            del self.lines[index:]
        self.cum.pop()
        if entry.role in SYSTEM_ROLES:
            self.sys_idx.pop()
            self.sys_cum.pop()
        elif entry.role == "user":
            self.user_idx.pop()
        self.calls.difference_update(entry.tool_call_ids)
        bucket = self.by_query[entry.query_id]
        del bucket[-_POSITION.size:]
        if not bucket:
            del self.by_query[entry.query_id]
        if entry.item:
            self.items -= 1
            if not self.items:
                self._reshape_pair()
        if self.last_append >= index and index:
            # the latest append is gone: the newest unit stands for it, or, when none
            # is left, the start (its system messages are shown: a non-empty session
            # never gives an empty context)
            unit = self.last_unit_start(0)
            self.last_append = unit if unit < index else 0
        self.pops += 1
        self.cache = None
        return entry

    def reindex(self, entries: list[MessageEntry]) -> None:
        """Rebuild every index over ``entries`` (after old entries were dropped)."""
        calls = self.calls
        self.entries, self.lines, self.cum, self.sys_idx, self.sys_cum = [], [], [0], [], [0]
        self.user_idx, self.by_query, self.items, self.size = [], {}, 0, 0
        for entry in entries:
            self.add(entry)
        self.calls = calls  # a tool result may still answer a call that was dropped
        if not self.items:
            self._reshape_pair()
        self.cache = None

    def _reshape_pair(self) -> None:
        """The summary pair in the session's shape: items once it holds an item."""
        if self.summary is not None:
            self.pair = summary_pair(self.summary, items=self.items > 0)
            self.cache = None

    def set_summary(self, summary: Summary | None, tokens: int) -> None:
        self.summary = summary
        self.pair = summary_pair(summary, items=self.items > 0) if summary is not None else None
        self.pair_tokens = tokens if summary is not None else 0
        self.cache = None

    # -- reading --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    @property
    def tokens(self) -> int:
        """Tokens of every stored message."""
        return self.cum[-1] + self.sys_cum[-1]

    def query_positions(self, query_id: str | None) -> Sequence[int]:
        """The positions of the entries of ``query_id``, in order (empty when none)."""
        bucket = self.by_query.get(query_id)
        return memoryview(bytes(bucket)).cast("q") if bucket else ()

    @property
    def query_count(self) -> int:
        return len(self.by_query) - (1 if None in self.by_query else 0)

    def index_of(self, sequence: int) -> int:
        """Index of the first entry whose sequence is >= ``sequence``."""
        entries = self.entries
        if not entries or entries[-1].sequence < sequence:
            return len(entries)
        return bisect.bisect_left(entries, sequence, key=_sequence_of)

    def summary_index(self) -> int:
        """Index of the first entry the summary does not stand for (0 without one)."""
        return 0 if self.summary is None else self.index_of(self.summary.through)

    def system_tokens(self, lo: int, hi: int) -> int:
        """Tokens of the system entries with an index in [lo, hi)."""
        idx = self.sys_idx
        a = bisect.bisect_left(idx, lo) if lo else 0
        b = bisect.bisect_left(idx, hi) if hi < len(self.entries) else len(idx)
        return self.sys_cum[b] - self.sys_cum[a]

    def systems_before(self, lo: int, hi: int) -> list[int]:
        """Indexes of the system entries in [lo, hi)."""
        idx = self.sys_idx
        return idx[bisect.bisect_left(idx, lo):bisect.bisect_left(idx, hi)]

    def is_chain_start(self, index: int) -> bool:
        """Whether a context may start at ``index``: not a tool result, not a system
        message (those are kept anyway, and may sit inside a tool chain), not an item
        that joins the one before it (see ``mnemex.conversations.items``)."""
        entry = self.entries[index]
        role = entry.role
        return role not in TOOL_ROLES and role not in SYSTEM_ROLES and not entry.joined

    def last_unit_start(self, lo: int) -> int:
        """Start of the newest unit at or after ``lo``: the latest message that is not a
        tool result or system message (an assistant tool call with its results, or one
        message). ``len(self)`` when there is none."""
        for index in range(len(self.entries) - 1, lo - 1, -1):
            if self.is_chain_start(index):
                return index
        return len(self.entries)


def _sequence_of(entry: MessageEntry) -> int:
    return entry.sequence
