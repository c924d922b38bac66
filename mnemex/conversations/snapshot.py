"""The agent's snapshot codec: its sessions as record lines, and back.

Per session, in order: a session line (ids, times, its place in the activity order,
its summary), its entries (one ``MessageEntry`` each, the very bytes the session
keeps, so a snapshot re-encodes only what was appended since the last one), then its
turn lines. Entry lines are recognised by their first field, so the common line is
decoded once, straight into a MessageEntry.

A snapshot is taken in the actor's turn and written beside it (see
``encode_sessions``): the turn copies references, the writer's thread encodes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from mnemex.conversations.conversation import Conversation, Summary
from mnemex.conversations.items import recount_item_tokens
from mnemex.conversations.protocol import MessageEntry, Policy, TurnRecord
from mnemex.conversations.tokens import TokenCounter
from mnemex.conversations.validation import recount_tokens
from mnemex.errors import CorruptData

__all__ = ["SNAPSHOT_FORMAT", "CapturedSession", "RestoredSession", "adopt_encoded", "check_format",
           "decode_policy", "decode_sessions", "encode_sessions"]

SNAPSHOT_FORMAT: Final = 1


class _SessionLine(msgspec.Struct, tag="session", tag_field="type"):
    session_id: str
    generation: int
    created_at: float
    updated_at: float
    activity: int
    last_append: int
    completed: bool = False
    summary: Summary | None = None
    pops: int = 0
    state: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)


class _TurnLine(msgspec.Struct, tag="turn", tag_field="type"):
    t: TurnRecord


_encode = msgspec.json.Encoder().encode
_decode_line = msgspec.json.Decoder(_SessionLine | _TurnLine).decode
_decode_entry = msgspec.json.Decoder(MessageEntry).decode
# entry lines are MessageEntry objects, whose first field is always "sequence"
_ENTRY_PREFIX: Final = b'{"sequence":'


class CapturedSession:
    """One session as a snapshot took it in the actor's turn: what the writer's
    thread encodes (its session line, the lines encoded by earlier snapshots, the
    entries appended since, its turns), and, once it has, the new lines and their
    entries decoded from them, for the actor to adopt (``adopt_encoded``)."""

    __slots__ = ("adopted", "conv", "decoded", "encoded", "entries", "fresh", "head", "known", "lines", "old",
                 "pops", "turns")

    def __init__(self, conv: Conversation, head: _SessionLine, waiting: Sequence[bytes] = ()) -> None:
        self.conv = conv
        self.head = head
        self.lines = conv.lines  # the list itself: adoption checks nothing replaced it
        self.entries = conv.entries
        # ``waiting``: lines an earlier writer encoded that the conversation has not
        # adopted yet; they are adopted before this capture's, so they count as known
        self.known = known = len(conv.lines) + len(waiting)
        self.old = conv.lines[:]  # pop() cuts ``lines`` in place
        if waiting:
            self.old += waiting
        self.fresh = conv.entries[known:]  # frozen entries: safe to encode in another thread
        self.turns = conv.turns[:] if conv.turns else []
        self.pops = conv.pops
        self.encoded: list[bytes] = []
        self.decoded: list[MessageEntry] = []
        self.adopted = 0  # of ``encoded``, kept by the conversation so far


def encode_sessions(sessions: Iterable[Conversation], ranks: Mapping[str, int], next_sequence: int,
                    encoded: deque[CapturedSession] | None = None) -> Callable[[], Iterator[bytes]]:
    """The record lines of ``sessions`` as a callable that makes them; ``ranks`` is each
    one's place in the activity order, ``next_sequence`` the sequence the next
    appended message will get.

    Taking the snapshot here costs the actor's turn a copy of references: nothing is
    encoded. The callable (the writer's thread) encodes the session lines, the
    entries appended since the last snapshot and the turns; it reads only what was
    copied here (entries and turns are frozen). Each session's new lines, with
    their entries decoded from them (whose messages then share the lines' memory),
    are put on ``encoded`` for ``adopt_encoded``: so every entry is encoded once.
    Lines already on ``encoded`` and not adopted yet (a snapshot soon after another)
    are taken as encoded, not adopted here: adoption stays a bounded step a turn."""
    captured: list[CapturedSession] = []
    waiting: dict[int, list[bytes]] = {}
    if encoded:
        sessions = list(sessions)
        waiting = _waiting_lines(encoded, sessions)
    for conv in sessions:
        entries = conv.entries
        last_append = entries[conv.last_append].sequence if conv.last_append < len(entries) else next_sequence
        head = _SessionLine(conv.session_id, conv.generation, conv.created_at, conv.updated_at,
                            ranks.get(conv.session_id, 0), last_append, conv.completed, conv.summary,
                            conv.pops, dict(conv.state) if conv.state else {})
        captured.append(CapturedSession(conv, head, waiting.get(id(conv), ())))

    def records() -> Iterator[bytes]:
        # what is written is let go of here, not where the snapshot is dropped: the
        # entries an adoption replaced may be held by nothing else (freeing 100,000
        # of them in the actor's thread would stall it)
        for item in captured:
            yield _encode(item.head)
            yield from item.old
            item.old = []
            if item.fresh:
                lines: list[bytes] = []
                decoded: list[MessageEntry] = []
                for entry in item.fresh:  # a line at a time: the writer may cede the GIL between two
                    line = _encode(entry)
                    lines.append(line)
                    if encoded is not None:
                        decoded.append(_decode_entry(line))
                    yield line
                item.fresh = []
                if encoded is not None:
                    item.decoded = decoded
                    item.encoded = lines
                    encoded.append(item)
            for turn in item.turns:
                yield _encode(_TurnLine(turn))
            item.turns = []
        captured.clear()

    return records


def _adoptable(item: CapturedSession, sessions: Mapping[str, Conversation], lines: int) -> bool:
    """Whether ``item``'s lines still encode its conversation's next entries, the
    conversation holding ``lines`` adopted lines: nothing replaced or moved them."""
    conv = item.conv
    return (sessions.get(conv.session_id) is conv and conv.lines is item.lines
            and conv.entries is item.entries and conv.pops == item.pops and lines == item.known + item.adopted
            and len(conv.entries) >= item.known + len(item.encoded))


def _waiting_lines(encoded: Iterable[CapturedSession],
                   sessions: Iterable[Conversation]) -> dict[int, list[bytes]]:
    """Per conversation (by id), the lines on ``encoded`` that adoption will give it,
    in order: what it will hold past its own ``lines``. References only, no
    adoption: an earlier writer's lines wait for the bounded steps of later turns."""
    by_id = {conv.session_id: conv for conv in sessions}
    held: dict[int, int] = {}  # lines each conversation holds once the items before are adopted
    waiting: dict[int, list[bytes]] = {}
    for item in encoded:
        conv = item.conv
        lines = held.get(id(conv), len(conv.lines))
        if not _adoptable(item, by_id, lines):
            continue  # adoption drops it: its entries are encoded again
        rest = item.encoded[item.adopted:]
        waiting.setdefault(id(conv), []).extend(rest)
        held[id(conv)] = lines + len(rest)
    return waiting


def adopt_encoded(encoded: deque[CapturedSession], sessions: Mapping[str, Conversation],
                  budget: int | None = None) -> None:
    """In the actor: keep the lines a snapshot's writer encoded (``encode_sessions``)
    for the next snapshot, and the entries decoded from them in place of the ones
    they encode (equal, sharing the lines' memory). At most ``budget`` entries a
    call (each replaced entry is freed here): the rest at the next. A session
    changed meanwhile in a way that moves its entries (a pop, a rebuild, a new
    session of the same id) keeps what it has: its next snapshot encodes them."""
    left = budget
    while encoded:
        item = encoded[0]
        conv = item.conv
        at = item.known + item.adopted
        if not _adoptable(item, sessions, len(conv.lines)):
            encoded.popleft()
            continue
        count = len(item.encoded) - item.adopted
        if left is not None:
            count = min(count, left)
            left -= count
        start = item.adopted
        conv.lines.extend(item.encoded[start : start + count])
        conv.entries[at : at + count] = item.decoded[start : start + count]
        item.adopted += count
        if item.adopted == len(item.encoded):
            encoded.popleft()
        if left is not None and left <= 0:
            return


@dataclass(slots=True)
class RestoredSession:
    """One session read back: the conversation (without its summary, which the
    behaviour sets, knowing its token cost), its activity rank and summary."""

    conv: Conversation
    activity: int
    last_append: int
    summary: Summary | None


def decode_sessions(name: str, records: Iterable[bytes],
                    recount: TokenCounter | None) -> list[RestoredSession]:
    """The sessions of an agent's snapshot records. ``recount``: a counter to count
    every message's tokens again with (the snapshot was written under another)."""
    restored: list[RestoredSession] = []
    current: RestoredSession | None = None
    for number, line in enumerate(records):
        try:
            if line.startswith(_ENTRY_PREFIX):
                if current is None:
                    raise CorruptData(f"agent {name!r} snapshot record {number} comes before any session")
                entry = _decode_entry(line)
                if recount is not None:
                    recounted = recount_item_tokens if entry.item else recount_tokens
                    entry = recounted(entry, recount)
                else:
                    current.conv.lines.append(line)
                current.conv.add(entry)
                continue
            item = _decode_line(line)
        except msgspec.MsgspecError as exc:
            raise CorruptData(f"agent {name!r} snapshot record {number}: {exc}") from exc
        if isinstance(item, _SessionLine):
            conv = Conversation(item.session_id, item.generation, item.created_at)
            conv.updated_at, conv.completed, conv.pops = item.updated_at, item.completed, item.pops
            conv.state = {key: msgspec.Raw(bytes(value)) for key, value in item.state.items()}
            current = RestoredSession(conv, item.activity, item.last_append, item.summary)
            restored.append(current)
        elif current is None:
            raise CorruptData(f"agent {name!r} snapshot record {number} comes before any session")
        else:
            current.conv.turns.append(item.t)
    return restored


def check_format(name: str, extra: Mapping[str, Any]) -> None:
    """CorruptData when the snapshot was written by a newer mnemex."""
    if int(extra.get("format", SNAPSHOT_FORMAT)) > SNAPSHOT_FORMAT:
        raise CorruptData(f"agent {name!r} snapshot has format {extra.get('format')}; this mnemex "
                          f"reads format {SNAPSHOT_FORMAT} (upgrade mnemex)")


def decode_policy(value: Any) -> Policy | None:
    """A policy as ``msgspec.to_builtins`` wrote it (None stays None)."""
    try:
        policy: Policy | None = msgspec.convert(value, Policy | None)
        return policy
    except msgspec.ValidationError as exc:
        raise CorruptData(f"snapshot policy {value!r}: {exc}") from exc
