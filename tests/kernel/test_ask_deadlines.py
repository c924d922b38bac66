"""AskDeadlines: an ask not answered within its limit fails with what ``overdue``
makes, counted from the clock the caller read (``now``) or from the run's clock;
an answered one never does (trio's MockClock: no real time passes)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from mnemex.kernel._deadlines import AskDeadlines


class _Waiter:
    def __init__(self) -> None:
        self.done = False
        self.value: Any = None

    def resolve(self, value: Any) -> None:
        self.done = True
        self.value = value


def _overdue(limit: float, kind: str, key: tuple[str, ...], command: Any) -> BaseException:
    return TimeoutError(f"{kind} {key} {command} after {limit}")


def _run(body: Any) -> None:
    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_deadline_counts_from_the_clock_the_caller_read() -> None:
    async def main() -> None:
        deadlines = AskDeadlines(_overdue)
        early, late = _Waiter(), _Waiter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deadlines.run)
            start = trio.current_time()
            await trio.sleep(4)
            deadlines.add(early, 10.0, "agent", ("a",), "x", now=start)  # read 4 s ago: due at start + 10
            deadlines.add(late, 10.0, "agent", ("b",), "y")  # the run's clock now: due at start + 14
            await trio.sleep_until(start + 10.5)
            assert isinstance(early.value, TimeoutError) and not late.done
            await trio.sleep_until(start + 14.5)
            assert str(late.value) == "agent ('b',) y after 10.0"
            nursery.cancel_scope.cancel()

    _run(main)


def test_an_answered_ask_is_never_failed() -> None:
    async def main() -> None:
        deadlines = AskDeadlines(_overdue)
        waiter = _Waiter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deadlines.run)
            deadlines.add(waiter, 5.0, "agent", ("a",), "x", now=trio.current_time())
            waiter.resolve("answered")
            await trio.sleep(20)
            assert waiter.value == "answered"
            nursery.cancel_scope.cancel()

    _run(main)
