"""TurnLock, the lock a scope's HNSW graph is shared under: mutual exclusion, handed
in turns, with the condition threads wait on made by the first that has to wait."""

from __future__ import annotations

import threading
import time

from mnemex.memories.graphlock import TurnLock


def _until_waiting(lock: TurnLock, count: int) -> None:
    for _ in range(5000):  # bounded: 5 s at most
        if lock._waiting == count:
            return
        time.sleep(0.001)
    raise AssertionError(f"{count} thread(s) never waited for the lock")


def test_an_uncontended_lock_makes_no_condition() -> None:
    lock = TurnLock()
    for _ in range(3):
        with lock:
            pass
    assert lock._changed is None


def test_who_held_the_lock_last_lets_a_waiting_thread_go_first() -> None:
    lock = TurnLock()
    order: list[str] = []

    def other() -> None:
        with lock:
            order.append("other")

    lock.__enter__()
    order.append("first")
    thread = threading.Thread(target=other)
    thread.start()
    _until_waiting(lock, 1)  # the other thread waits: it made the condition
    assert lock._changed is not None
    lock.__exit__(None, None, None)
    with lock:  # asked again at once: the waiting thread's turn comes first
        order.append("first again")
    thread.join(5.0)
    assert not thread.is_alive()
    assert order == ["first", "other", "first again"]

