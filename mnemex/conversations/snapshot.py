"""The agent's snapshot codec: its sessions as record lines, and back.

Per session, in order: a session line (ids, times, its place in the activity order,
its summary), its entries (one ``MessageEntry`` each, the very bytes the session
keeps, so a snapshot re-encodes only what was appended since the last one), then its
turn lines. Entry lines are recognised by their first field, so the common line is
decoded once, straight into a MessageEntry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from mnemex.conversations.conversation import Conversation, Summary
from mnemex.conversations.items import recount_item_tokens
from mnemex.conversations.protocol import MessageEntry, Policy, TurnRecord
from mnemex.conversations.tokens import TokenCounter
from mnemex.conversations.validation import recount_tokens
from mnemex.errors import CorruptData

__all__ = ["SNAPSHOT_FORMAT", "RestoredSession", "check_format", "decode_policy", "decode_sessions",
           "encode_sessions"]

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


def encode_sessions(sessions: Iterable[Conversation], ranks: Mapping[str, int],
                    next_sequence: int) -> list[bytes]:
    """The record lines of ``sessions``; ``ranks`` is each one's place in the activity
    order, ``next_sequence`` the sequence the next appended message will get."""
    records: list[bytes] = []
    for conv in sessions:
        entries, lines = conv.entries, conv.lines
        for index in range(len(lines), len(entries)):
            line = _encode(entries[index])
            entries[index] = _decode_entry(line)  # its message now shares the line's memory
            lines.append(line)
        last_append = entries[conv.last_append].sequence if conv.last_append < len(conv) else next_sequence
        records.append(_encode(_SessionLine(conv.session_id, conv.generation, conv.created_at,
                                            conv.updated_at, ranks.get(conv.session_id, 0), last_append,
                                            conv.completed, conv.summary, conv.pops, conv.state)))
        records += lines
        records += [_encode(_TurnLine(turn)) for turn in conv.turns]
    return records


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
