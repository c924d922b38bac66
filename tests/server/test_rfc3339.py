"""GET /messages formats each message's timestamp with a fast path of its own; it
must print exactly what datetime prints, rounding included."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import example, given
from hypothesis import strategies as st

from mnemex.server._app import _rfc3339


@given(st.floats(min_value=0, max_value=253402300799.0, allow_nan=False))
@example(0.0)
@example(1_700_000_000.9999995)  # rounds up into the next second
@example(1_700_000_000.0000005)
@example(253402300799.0)  # 9999-12-31T23:59:59
def test_the_fast_timestamp_is_what_datetime_prints(seconds: float) -> None:
    expected = datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="microseconds")
    assert _rfc3339(seconds) == expected.replace("+00:00", "Z")
