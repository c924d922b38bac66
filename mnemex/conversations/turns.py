"""Turn records: what one model call added to a session, and the search over them.

A turn groups the messages of one append made with a ``Turn`` (the model's reply
and the tool results of one iteration): its token usage, the tools it called and a
plain text of it, kept short, which ``search_turns`` ranks by BM25.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from mnemex._checks import check_int
from mnemex.conversations.protocol import MessageEntry, Turn, TurnHit, TurnRecord
from mnemex.conversations.validation import CheckedMessage
from mnemex.errors import InvalidInput
from mnemex.index import BM25Index, Tokenizer

__all__ = ["TURN_TEXT_CHARS", "TurnIndex", "check_turn", "turn_record"]

TURN_TEXT_CHARS: Final = 8000
"""The longest text a turn record keeps (the start of it)."""


def check_turn(turn: Any) -> None:
    """InvalidInput unless ``turn`` is a Turn with counts >= 0 and tool names as strings."""
    if not isinstance(turn, Turn):
        raise InvalidInput(f"turn must be a mnemex.Turn, got {type(turn).__name__}", field="turn")
    for name in ("iteration", "input_tokens", "output_tokens"):
        value = getattr(turn, name)
        if value is not None:
            check_int(value, f"turn.{name}", 0)
    if turn.tool_calls is not None and not all(isinstance(n, str) for n in turn.tool_calls):
        raise InvalidInput("turn.tool_calls must be a list of tool names", field="turn.tool_calls")


def turn_record(session_id: str, turn: Turn, checked: Sequence[CheckedMessage], new: Sequence[MessageEntry],
                *, iteration: int, message_count: int, query_id: str | None, timestamp: float) -> TurnRecord:
    """The record of one turn: ``checked`` are its messages as checked, ``new`` as
    stored. The tools it called are ``turn.tool_calls`` if given, else those its
    messages call; its text is theirs, each call as "called <name>"."""
    names = turn.tool_calls
    if names is None:
        names = [name for item in checked for name in item.call_names]
    lines: list[str] = []
    for item in checked:
        if item.text:
            lines.append(item.text)
        lines.extend(f"called {name.replace('_', ' ')}" for name in item.call_names)
    text = "\n".join(lines)[:TURN_TEXT_CHARS]
    return TurnRecord(
        session_id=session_id,
        iteration=turn.iteration if turn.iteration is not None else iteration,
        message_count=message_count,
        timestamp=timestamp,
        first_sequence=new[0].sequence,
        last_sequence=new[-1].sequence,
        query_id=query_id,
        input_tokens=turn.input_tokens,
        output_tokens=turn.output_tokens,
        tool_calls=list(names),
        metadata=dict(turn.metadata),
        text=text,
    )


class TurnIndex:
    """The agent's turns, searchable with the index package's BM25 (k1 1.2, b 0.75);
    built on demand and extended on append. Equal scores rank the newer turn first."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.docs: list[tuple[str, int, TurnRecord]] = []
        self.bm25 = BM25Index(k1=1.2, b=0.75, tokenizer=tokenizer, context_weight=0.0)

    def add(self, turn: TurnRecord, position: int) -> None:
        self.bm25.add(len(self.docs), turn.text + " " + " ".join(turn.tool_calls))
        self.docs.append((turn.session_id, position, turn))

    def search(self, query: str, top_k: int, accept: Callable[[str], bool]) -> list[TurnHit]:
        allowed = [doc for doc, (session_id, _, _) in enumerate(self.docs) if accept(session_id)]
        if not allowed:
            return []
        found = self.bm25.search(query, len(allowed), allowed=allowed)
        ranked = sorted(found, key=lambda pair: (-pair[1], -pair[0]))
        return [TurnHit(round(score, 6), self.docs[doc][2]) for doc, score in ranked[:top_k] if score > 0]
