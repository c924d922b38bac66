"""The one time codec: what callers may pass as a time, and how mnemex writes one.

Inside mnemex a time is seconds since the epoch (UTC) as a float. At the edges a
caller may also pass a ``datetime`` (naive means UTC) or an ISO 8601 string
(``2026-11-21T10:00:00Z``); mnemex writes times as ISO 8601 with a ``Z``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Final

from mnemex.errors import InvalidInput

__all__ = ["check_seconds", "iso", "seconds"]

_LATEST: Final = 253_402_300_800.0  # 10000-01-01T00:00:00Z: times are years 1970 to 9999


def _in_range(value: float, what: str, given: Any) -> float:
    if not 0.0 <= value < _LATEST:
        raise InvalidInput(f"{what} {given!r} is outside the years 1970 to 9999", field=what)
    return value


def seconds(value: Any, what: str) -> float | None:
    """``value`` as seconds since the epoch (None stays None); InvalidInput naming
    ``what`` for anything else."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return _in_range((value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp(),
                         what, value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidInput(f"{what} {value!r} is not an ISO 8601 time", field=what) from exc
        return _in_range((parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).timestamp(),
                         what, value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{what} must be seconds since the epoch, a datetime or an ISO 8601 string, "
                           f"got {value!r}", field=what)
    return _in_range(float(value), what, value)


def iso(value: float) -> str:
    """Seconds since the epoch as ISO 8601 in UTC, with a ``Z``."""
    return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")


def check_seconds(value: Any, what: str) -> float:
    """A time inside a command: seconds since the epoch, a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidInput(f"{what} must be seconds since the epoch (a finite number >= 0), got {value!r}",
                           field=what)
    return _in_range(float(value), what, value)
