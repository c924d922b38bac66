"""The periods of time a search query names, and how near a memory's time is to them.

"What did Maria donate in December 2023?", "Where was Tim on 16 November 2023?",
"what happened in 2022": a query that names a date asks about what happened
then, and a memory carries the time it was observed (``timestamp``). Hybrid search
raises the memories observed in or near a named period (see
``memories.ranking``); it never filters the others out.

Recognised, in English, case-insensitively:

* a day: ``13 October 2023``, ``13th of Oct, 2023``, ``October 13, 2023``,
  ``Oct 13th 2023``, ``2023-10-13``;
* a month: ``October 2023``, ``Oct. 2023``, ``2023-10``;
* a year: ``2023`` (a number from 1900 to 2099 standing alone).

A month without a year (``in June``) and relative times (``last week``) name no
period here: the first is ambiguous, the second would need the asker's clock.
Times are UTC, as every time inside mnemex. Pure and deterministic.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["DAY", "named_periods", "period_match"]

DAY: Final = 86_400.0

_MONTHS: Final = {name.lower(): number for number, name in enumerate(calendar.month_name) if name} | {
    name.lower(): number for number, name in enumerate(calendar.month_abbr) if name} | {"sept": 9}
_MONTH: Final = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY_OF: Final = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR: Final = r"((?:19|20)\d\d)"
_PATTERNS: Final = (  # most specific first; a span matched once is not read again
    ("ymd", re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b")),
    ("dmy", re.compile(rf"\b{_DAY_OF}\s+(?:of\s+)?({_MONTH})\.?,?\s+{_YEAR}\b", re.IGNORECASE)),
    ("mdy", re.compile(rf"\b({_MONTH})\.?\s+{_DAY_OF},?\s+{_YEAR}\b", re.IGNORECASE)),
    ("ym", re.compile(r"\b((?:19|20)\d\d)-(\d\d)\b(?!-)")),
    ("my", re.compile(rf"\b({_MONTH})\.?,?\s+{_YEAR}\b", re.IGNORECASE)),
    ("y", re.compile(rf"(?<![\d-]){_YEAR}(?![\d-])")),
)
_ANY_YEAR: Final = re.compile(r"(?:19|20)\d\d")
"""What each of _PATTERNS needs somewhere: four digits of a year (one search where
the patterns' month names would be tried at every word)."""


def named_periods(query: str) -> tuple[tuple[float, float], ...]:
    """The periods ``query`` names, as (start, end) seconds since the epoch, UTC, end
    excluded: a day is 24 hours, a month its calendar month, a year its calendar
    year. In the order they occur; () when it names none."""
    if _ANY_YEAR.search(query) is None:  # every form holds a year: most queries end here
        return ()
    found: list[tuple[int, float, float]] = []
    taken: list[tuple[int, int]] = []
    for form, pattern in _PATTERNS:
        for match in pattern.finditer(query):
            start, end = match.span()
            if any(start < right and left < end for left, right in taken):
                continue
            period = _period(form, match.groups())
            if period is not None:
                taken.append((start, end))
                found.append((start, *period))
    return tuple((start, end) for _, start, end in sorted(found))


def period_match(timestamps: npt.NDArray[np.float64], periods: tuple[tuple[float, float], ...],
                 slack: float) -> npt.NDArray[np.float64]:
    """How near each time is to the nearest of ``periods``: 1 inside one, falling
    linearly to 0 at ``slack`` seconds outside it (0 everywhere without periods)."""
    near = np.zeros(len(timestamps), dtype=np.float64)
    for start, end in periods:
        outside = np.maximum(0.0, np.maximum(start - timestamps, timestamps - end))
        near = np.maximum(near, np.clip(1.0 - outside / slack, 0.0, 1.0) if slack > 0 else outside == 0)
    return near


def _period(form: str, groups: tuple[str | None, ...]) -> tuple[float, float] | None:
    """The (start, end) of one matched date, None when it names no real date
    (31 February)."""
    if form == "y":
        year = int(groups[0] or 0)
        return _at(year, 1, 1), _at(year + 1, 1, 1)
    if form in ("ym", "my"):
        year, month = (int(groups[0] or 0), int(groups[1] or 0)) if form == "ym" else (
            int(groups[1] or 0), _MONTHS[(groups[0] or "").lower()])
        if not 1 <= month <= 12:
            return None
        return _at(year, month, 1), _at(year + month // 12, month % 12 + 1, 1)
    if form == "ymd":
        year, month, day = (int(g or 0) for g in groups)
    elif form == "dmy":
        day, month, year = int(groups[0] or 0), _MONTHS[(groups[1] or "").lower()], int(groups[2] or 0)
    else:
        month, day, year = _MONTHS[(groups[0] or "").lower()], int(groups[1] or 0), int(groups[2] or 0)
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return None
    start = _at(year, month, day)
    return start, start + DAY


def _at(year: int, month: int, day: int) -> float:
    return datetime(year, month, day, tzinfo=UTC).timestamp()
