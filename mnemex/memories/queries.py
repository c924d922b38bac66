"""What a search embeds for its query.

A scope's memories are mostly in the user's own words ("I'm a software developer at a
bank"), as a user says them in a conversation, while a model's recall tool asks about
"the user" ("what does the user do for work?"). A sentence embedding reads the person
as part of the meaning: with all-MiniLM-L6-v2 the right memory's cosine rises by 0.06
(median, bench/data/newcomer.json) when the query is worded as the user would say it,
and paraphrase recall@1 from 0.358 to 0.415. Memories worded as an extractor words them
("The user is lactose intolerant") match the query as asked. So a search embeds both
wordings and takes their mean: ``query_texts``. English only; pure.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["first_person", "query_texts"]

_FIRST_PERSON: Final = tuple((re.compile(pattern, re.IGNORECASE), replacement) for pattern, replacement in (
    (r"\b(?:the )?user['\u2019]s\b", "my"),
    (r"^\s*(?:the )?user\b(?=\s+\w+\s*\??\s*$)", "my"),         # "user occupation"
    (r"\b(?:does|do) the user\b", "do I"), (r"\bis the user\b", "am I"), (r"\bhas the user\b", "have I"),
    (r"\bwas the user\b", "was I"), (r"\bthe user is\b", "I am"), (r"\bthe user has\b", "I have"),
    (r"\bthe user was\b", "I was"), (r"\b(to|with|for|about|from|of|by|at) (?:the )?user\b", r"\1 me"),
    (r"\b(?:the )?user\b", "I"),
))


def first_person(query: str) -> str | None:
    """``query`` as the user would say it, when it speaks of "the user" (None when it
    does not): "what does the user do for work?" is "what do I do for work?",
    "user's profession" is "my profession"."""
    if "user" not in query.casefold():  # every pattern names the user: most queries skip them all
        return None
    out = query
    for pattern, replacement in _FIRST_PERSON:
        out = pattern.sub(replacement, out)
    return None if out == query else out


def query_texts(query: str) -> tuple[str, ...]:
    """The texts a search embeds for ``query``: the query, and its first-person
    wording when it has one; the query's vector is their mean, normalised."""
    said = first_person(query)
    return (query,) if said is None else (query, said)

