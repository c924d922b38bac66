"""collector_paused: overlapping pauses in several threads make one pause."""

from __future__ import annotations

import gc
import threading

import pytest

from mnemex._gcpause import collector_paused


def test_overlapping_pauses_resume_the_collector_once_the_last_ends() -> None:
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    with collector_paused():
        assert not gc.isenabled()
        thread.start()
        assert inside.wait(5)
    assert not gc.isenabled()  # the other thread is still rebuilding
    release.set()
    thread.join(5)
    assert gc.isenabled()


def test_a_collector_the_host_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_resumes_after_an_error() -> None:
    with pytest.raises(KeyError), collector_paused():
        {}["missing"]
    assert gc.isenabled()
