"""Storage faults seen through the runtime: a full disk, a corrupt journal, a
data directory that cannot be written or is already in use."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import trio

import mnemex
from mnemex.persistence import actor_dir
from mnemex.testing import Add, Get, counter_kind


async def test_disk_full_fails_the_write_keeps_the_state_and_recovers(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path))
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        ref = rt.ref("counter", "c")
        assert await ref.ask(Add(1)) == 1
        real_write = os.write

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", full)
        with pytest.raises(mnemex.StorageError, match="No space left"):
            await ref.ask(Add(10))
        monkeypatch.setattr(os, "write", real_write)
        # the refused command left no trace in memory or on disk
        assert await ref.ask(Get()) == (1, 1)
        assert await ref.ask(Add(2)) == 3
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert await rt.ask("counter", "c", Get()) == (3, 2)


async def test_corrupt_journal_line_stops_only_that_actor_with_file_and_line(tmp_path: Path) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path), restore_backoff=0.0)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        for n in range(5):
            await rt.ask("counter", "bad", Add(n))
            await rt.ask("counter", "good", Add(n))
    # write a journal of five commands with no snapshot, then damage line 2 of it
    folder = actor_dir(tmp_path, "counter", ("bad",))
    for snapshot in folder.glob("snapshot-*"):
        snapshot.unlink()
    for segment in folder.glob("journal-*"):
        segment.unlink()
    lines = [_line(i + 1, b'{"type":"counter.add","n":%d}' % i) for i in range(5)]
    lines[1] = lines[1].replace(b'"n":1', b'"n":7')  # the checksum no longer matches
    (folder / "journal.jsonl").write_bytes(b"".join(lines))
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        with pytest.raises(mnemex.ActorCrashed, match=r"journal\.jsonl: line 2") as info:
            await rt.ask("counter", "bad", Get())
        assert isinstance(info.value.__cause__, mnemex.CorruptData)
        assert await rt.ask("counter", "good", Get()) == (10, 5)  # the rest keeps serving
        assert await rt.ask("counter", "other", Add(1)) == 1


async def test_a_flipped_byte_in_the_last_complete_line_is_reported_not_cut(tmp_path: Path) -> None:
    # the last command was acknowledged; its line is whole (newline and all) but one byte changed
    # on disk: the actor refuses to load, naming the file and line, and the line stays for repair
    cfg = mnemex.Config(data_dir=str(tmp_path), restore_backoff=0.0)
    folder = actor_dir(tmp_path, "counter", ("c",))
    folder.mkdir(parents=True)
    lines = [_line(i + 1, b'{"type":"counter.add","n":%d}' % (i + 1)) for i in range(3)]
    lines[2] = lines[2].replace(b'"n":3', b'"n":2')
    (folder / "journal.jsonl").write_bytes(b"".join(lines))
    (folder / "key.json").write_text('{"kind": "counter", "key": ["c"]}')
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        with pytest.raises(mnemex.ActorCrashed, match=r"journal\.jsonl: line 3: damaged") as info:
            await rt.ask("counter", "c", Get())
        assert isinstance(info.value.__cause__, mnemex.CorruptData)
        assert "although complete" in str(info.value.__cause__)
    assert (folder / "journal.jsonl").read_bytes() == b"".join(lines)  # nothing was cut


def _line(seq: int, payload: bytes) -> bytes:
    from mnemex.persistence.journal import encode_entries

    return encode_entries([(seq, 1, payload)])


async def test_data_dir_that_cannot_be_created_fails_at_open(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(mnemex.StorageError, match="file"):
        async with mnemex.open_runtime(mnemex.Config(data_dir=str(blocker / "data")), kinds=[counter_kind()]):
            pass


async def test_second_runtime_on_one_data_dir_is_refused(tmp_path: Path) -> None:
    cfg = mnemex.Config(data_dir=str(tmp_path))
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]):
        with pytest.raises(mnemex.DataDirLocked, match=str(tmp_path)):
            async with mnemex.open_runtime(cfg, kinds=[counter_kind()]):
                pass


async def test_fsync_policies_all_survive_a_clean_restart(tmp_path: Path) -> None:
    for policy, method in (("always", "auto"), ("batch", "auto"), ("batch", "fdatasync"), ("batch", "syncfs"),
                           ("never", "auto")):
        cfg = mnemex.Config(data_dir=str(tmp_path / f"{policy}-{method}"), fsync=policy,  # type: ignore[arg-type]
                            fsync_method=method)  # type: ignore[arg-type]
        async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
            async with trio.open_nursery() as nursery:
                for a in range(10):
                    for n in range(20):
                        nursery.start_soon(rt.ask, "counter", f"a{a}", Add(1))
        async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
            for a in range(10):
                assert await rt.ask("counter", f"a{a}", Get()) == (20, 20), (policy, method)
