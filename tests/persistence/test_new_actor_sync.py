"""The first sync of a new actor: its journal, manifest and new folders are made
durable together (each once), and any one of them failing fails the sync."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mnemex.errors import StorageError
from mnemex.persistence import FileStore
from mnemex.persistence.openfiles import OpenFiles

T0 = 1_700_000_000_000


def entry(seq: int) -> tuple[int, int, bytes]:
    return seq, T0 + seq, b'{"t":"counter.add","n":%d}' % seq


def synced_paths(monkeypatch: pytest.MonkeyPatch, fail: str | None = None,
                 meet: threading.Barrier | None = None) -> list[tuple[str, int]]:
    """Record each fsync and fdatasync as (the path synced, the thread that did it);
    the one of a path ending in ``fail`` raises OSError. With ``meet``, the first
    syncs wait there for each other (BrokenBarrierError unless they run together)."""
    seen: list[tuple[str, int]] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    lock = threading.Lock()
    calls = [0]

    def record(real: object, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        with lock:
            seen.append((path, threading.get_ident()))
            calls[0] += 1
            waits = meet is not None and calls[0] <= meet.parties
        if waits:
            assert meet is not None
            meet.wait()
        if fail is not None and path.endswith(fail):
            raise OSError(5, "Input/output error")
        real(fd)  # type: ignore[operator]

    monkeypatch.setattr(os, "fsync", lambda fd: record(real_fsync, fd))
    monkeypatch.setattr(os, "fdatasync", lambda fd: record(real_fdatasync, fd))
    return seen


def test_a_new_actor_syncs_its_journal_manifest_and_folders_once_each_together(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", ("a",), files=OpenFiles(4))
    store.append([entry(1)])
    seen = synced_paths(monkeypatch, meet=threading.Barrier(3, timeout=30))
    store.sync()
    paths = [path for path, _ in seen]
    expected = {str(store.path / "journal.jsonl"), str(store.path / "key.json"), str(store.path),
                *(str(folder) for folder in store.path.parents if folder.is_relative_to(tmp_path)
                  and folder != tmp_path)}
    assert set(paths) <= expected | {str(tmp_path)}
    assert {str(store.path / "journal.jsonl"), str(store.path / "key.json"), str(store.path)} <= set(paths)
    assert len(paths) == len(set(paths))  # each once (the actor's folder was listed twice)
    # (side by side: the first three met at the barrier; the journal's in the caller's thread)
    assert (str(store.path / "journal.jsonl"), threading.get_ident()) in seen
    seen.clear()
    store.append([entry(2)])
    store.sync()  # an old actor: its journal alone, in the caller's thread
    assert seen == [(str(store.path / "journal.jsonl"), threading.get_ident())]
    store.close()


@pytest.mark.parametrize("fail", ["key.json", "journal.jsonl"])
def test_a_new_actor_whose_entry_fails_to_sync_refuses_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             fail: str) -> None:
    store = FileStore(tmp_path, "counter", ("a",), files=OpenFiles(4))
    store.append([entry(1)])
    seen = synced_paths(monkeypatch, fail=fail)
    with pytest.raises(StorageError, match="could not fsync") as raised:
        store.sync()
    named = str(raised.value).removeprefix("could not fsync ").split(":")[0]
    assert named.startswith(f"journal {store.path / 'journal.jsonl'}" if fail == "journal.jsonl"
                            else str(store.path / fail))  # the file that failed, by name
    assert len(seen) >= 3  # the others were synced all the same
    assert store.needs_recovery
    with pytest.raises(StorageError):
        store.append([entry(2)])
    store.close()


def test_a_process_out_of_threads_syncs_every_entry_in_the_callers_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, "counter", ("a",), files=OpenFiles(4))
    store.append([entry(1)])
    seen = synced_paths(monkeypatch)

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    store.sync()
    assert {str(store.path / "journal.jsonl"), str(store.path / "key.json"), str(store.path)} <= \
        {path for path, _ in seen}
    assert {thread for _, thread in seen} == {threading.get_ident()}
    assert not store.needs_recovery
    store.append([entry(2)])
    store.close()
