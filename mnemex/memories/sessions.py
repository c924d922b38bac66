"""A finished session as memories: the text of each event, cut to the content
limit at whitespace, with ids taken in order from one reserved block; and which of
them only echo what the user said (``session_echoes``).

Shared by the scope ref (``add_session``) and the scope actor (a session an
agent archives, actor to actor), so both store a session the same way.

Who said what is kept: each memory's ``author`` is the event's, its
``metadata["role"]`` the speaker's role (``user``, ``assistant``, ``tool``,
``system``: the event's ``role``, else read from its author), its ``kind``
``message``.

**Echoes.** Assistants restate what the user said ("Great, so you're a nurse at
St. Mary's hospital!"). Stored as they are, the restatement competes with the
user's own words, and wins ties in keyword search (it is newer). An assistant or
tool memory is an *echo* of one of the last ``ECHO_LOOKBACK`` statements of the
user before it in the session when, comparing their full-text terms (stop words left out,
accents folded):

* at least ``ECHO_SHARE`` of its distinct terms were the user's, and at least
  ``ECHO_MIN_SHARED`` of them;
* it adds no specifics of its own: no number and no name (a capitalised word
  inside a sentence) the user did not say, since those are what an answer or a
  correction adds ("The Eiffel Tower is in Paris, not Berlin");
* the user's memory is a statement, not a question (a reply to a question is an
  answer, however many of its words it repeats).

Measured on ``tests/memories/echo_pairs.py`` (30 echoes, 43 genuine replies of
which 8 repeat the user's words and add or correct one thing; written for this):
the English and German echoes share 0.60 to 1.00 of their terms with the user's
statement, the French one 0.40 and the Japanese one 0.32 (character pairs); of
the genuine replies that pass the other two rules the highest shares 0.29.
``ECHO_SHARE`` 0.35 is the middle of 0.29 and 0.40: 29 of the 30 echoes merged,
none of the 43 genuine replies (0.30 merges all 30 with no margin; 0.45 loses the
French one; 0.70 merges 20). Without the specifics rule the genuine replies reach
0.75 (a correction). Cosine similarity of the vectors was measured too and not
used: with the default model genuine replies reach 0.92 (a correction) against
echoes from 0.76, and a threshold would hold for one model only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mnemex._checks import check_id
from mnemex._ids import id_at
from mnemex.index import ENGLISH_STOP_WORDS, Tokenizer, words
from mnemex.memories.protocol import Event, NewMemory, Session

__all__ = [
    "ECHO_LOOKBACK",
    "ECHO_MIN_SHARED",
    "ECHO_SHARE",
    "chunk_text",
    "event_role",
    "event_text",
    "session_echoes",
    "session_memories",
]

ECHO_SHARE: Final = 0.35
"""Least share of an echo's distinct full-text terms that the user said."""
ECHO_MIN_SHARED: Final = 2
"""Fewest full-text terms an echo shares with the user's statement."""
ECHO_LOOKBACK: Final = 8
"""Statements of the user before a reply (nearest first) that it may echo."""


def event_text(content: Any) -> str | None:
    """The text of an event's content: a string, a list of parts (``{"text": ...}``
    or strings) or an object with ``parts`` or ``text``; None when it has none."""
    if content is None:
        return None
    if isinstance(content, str):
        return content if content.strip() else None
    if isinstance(content, Mapping):
        if isinstance(content.get("text"), str):
            return event_text(content["text"])
        return event_text(content.get("parts", content.get("content")))
    if isinstance(content, list | tuple):
        pieces = [event_text(part) for part in content]
        text = "\n".join(piece for piece in pieces if piece)
        return text or None
    return None


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def chunk_text(text: str, limit: int) -> list[str]:
    """``text`` cut at whitespace into pieces of at most ``limit`` UTF-8 bytes (a
    single word longer than that is cut between characters)."""
    if _size(text) <= limit:
        return [text]
    out: list[str] = []
    current: list[str] = []
    size = 0
    for word in text.split():
        encoded = _size(word)
        rest = word
        while encoded > limit:
            cut = limit
            while _size(rest[:cut]) > limit:
                cut -= 1
            if current:
                out.append(" ".join(current))
                current, size = [], 0
            out.append(rest[:cut])
            rest = rest[cut:]
            encoded = _size(rest)
        if not rest:
            continue
        if current and size + 1 + encoded > limit:
            out.append(" ".join(current))
            current, size = [], 0
        size += encoded + (1 if current else 0)
        current.append(rest)
    if current:
        out.append(" ".join(current))
    return [piece for piece in out if piece.strip()]


_AUTHOR_ROLES: Final = {"user": "user", "human": "user", "assistant": "assistant", "model": "assistant",
                         "ai": "assistant", "tool": "tool", "function": "tool", "system": "system"}


def event_role(event: Event, user_id: str, what: str = "role") -> str:
    """The role of an event's speaker: its ``role`` when given; else ``user`` for
    the author ``user`` (ADK's) or the session's user id, the role an author named
    like one says (``assistant``, ``model``, ``tool``, ``system``...), and
    ``assistant`` for any other author (an agent, by its name)."""
    if event.role is not None:
        role = check_id(event.role, what, 64)
        assert role is not None
        return role
    author = event.author
    if author == user_id:
        return "user"
    return _AUTHOR_ROLES.get(author.casefold(), "assistant") if isinstance(author, str) else "assistant"


def session_memories(session: Session, first_id: str, limit: int) -> list[NewMemory]:
    """One memory per piece of each event's text (events without text are skipped),
    ids ``first_id`` onwards, of kind ``message``; each keeps its author,
    timestamp (seconds, 0 for none), the session id, and in its metadata the
    event's id (``event_id``, when it has one) and the speaker's ``role``
    (``event_role``)."""
    memories: list[NewMemory] = []
    for index, event in enumerate(session.events):
        text = event_text(event.content)
        if text is None:
            continue
        role = event_role(event, session.user_id, f"events[{index}].role")
        metadata = {"event_id": event.id, "role": role} if event.id else {"role": role}
        timestamp = float(event.timestamp) if event.timestamp else None
        for piece in chunk_text(text, limit):
            memories.append(NewMemory(id=id_at(first_id, len(memories)), content=piece,
                                      author=event.author or None, timestamp=timestamp,
                                      session_id=session.id, metadata=metadata, source="session",
                                      kind="message"))
    return memories


# -- echoes -----------------------------------------------------------------------------------------
_TERMS: Final = Tokenizer(fold_accents=True)
_QUESTION_MARKS: Final = ("?", "\uff1f", "\u061f")  # ? and the full-width and Arabic ones
_WORD: Final = re.compile(r"[^\W_][\w'\u2019-]*")
_SENTENCE_ENDS: Final = frozenset(".!?:;\"'(\u2014\u2013-\u201c\u00ab\uff1f\uff01\u3002")


def _role(memory: NewMemory) -> str | None:
    role = memory.metadata.get("role") if isinstance(memory.metadata, Mapping) else None
    return role if isinstance(role, str) else None


def _is_question(text: str) -> bool:
    return text.rstrip().endswith(_QUESTION_MARKS)


def _adds_specifics(reply: str, said: set[str]) -> bool:
    """Whether ``reply`` holds a number or a name (a capitalised word inside a
    sentence) whose words are not all among ``said`` (the user's words)."""
    for match in _WORD.finditer(reply):
        word = match.group()
        if not any(char.isdigit() for char in word):
            if not word[0].isupper() or word == "I" or word.startswith(("I'", "I\u2019")):
                continue
            before = reply[:match.start()].rstrip()
            if not before or before[-1] in _SENTENCE_ENDS:
                continue  # a capital that starts a sentence names nothing
        found = words(word, fold_accents=True)
        if any(w not in said for w in found) and not all(w in ENGLISH_STOP_WORDS for w in found):
            return True
    return False


def session_echoes(memories: Sequence[NewMemory]) -> dict[str, str]:
    """Which of a session's memories (as ``session_memories`` makes them, in order)
    are echoes of a user's statement (see the module doc): echo id -> the id of the
    user's memory it restates (the best match; the nearest on a tie). Pure and
    deterministic; the result is journaled with the memories, so replay never
    decides again."""
    echoes: dict[str, str] = {}
    statements: list[tuple[str, set[str], set[str]]] = []  # the user's: id, terms, words; nearest last
    for memory in memories:
        role = _role(memory)
        if role == "user":
            if not _is_question(memory.content):
                statements.append((memory.id, set(_TERMS.tokens(memory.content)),
                                   set(words(memory.content, fold_accents=True))))
                del statements[:-ECHO_LOOKBACK]
            continue
        if role not in ("assistant", "tool") or not statements:
            continue
        terms = set(_TERMS.tokens(memory.content))
        if len(terms) < ECHO_MIN_SHARED:
            continue
        best: tuple[float, str] | None = None
        for statement_id, said_terms, said_words in reversed(statements):
            shared = len(terms & said_terms)
            share = shared / len(terms)
            if shared < ECHO_MIN_SHARED or share < ECHO_SHARE or (best is not None and share <= best[0]):
                continue
            if not _adds_specifics(memory.content, said_words):
                best = (share, statement_id)
        if best is not None:
            echoes[memory.id] = best[1]
    return echoes
