"""Opening a data directory: created, proven writable, locked against a second user."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnemex.errors import DataDirLocked, StorageError
from mnemex.persistence import ActorLocation, DataDir, FileStore

HOLD_LOCK = """
import sys
from mnemex.persistence import DataDir
data_dir = DataDir(sys.argv[1])
print("locked", flush=True)
sys.stdin.readline()
data_dir.close()
"""

TRY_LOCK = """
import sys
from mnemex.errors import DataDirLocked
from mnemex.persistence import DataDir
try:
    DataDir(sys.argv[1])
except DataDirLocked as exc:
    print(exc)
    sys.exit(3)
"""

FILE_SIZE_LIMIT_ZERO = """
import resource, signal, sys
from mnemex.errors import StorageError
from mnemex.persistence import DataDir
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    DataDir(sys.argv[1])
except StorageError as exc:
    print(exc)
    sys.exit(3)
"""


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_opening_creates_the_folder_and_records_the_pid(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "data"
    with DataDir(path) as data_dir:
        assert data_dir.is_open
        assert (path / "LOCK").read_text().strip() == str(os.getpid())
        assert sorted(p.name for p in path.iterdir()) == ["LOCK"]  # the probe is gone
    assert not data_dir.is_open


def test_a_second_data_dir_on_the_same_path_is_refused(tmp_path: Path) -> None:
    first = DataDir(str(tmp_path))
    with pytest.raises(DataDirLocked, match=rf"{tmp_path}.*in use by process {os.getpid()}"):
        DataDir(tmp_path)
    first.close()
    first.close()  # idempotent
    DataDir(tmp_path).close()  # free again


def test_a_data_dir_held_by_another_process_is_refused_naming_its_pid(tmp_path: Path) -> None:
    with subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DataDirLocked, match=f"in use by process {holder.pid}"):
            DataDir(tmp_path)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0
    DataDir(tmp_path).close()


def test_another_process_cannot_open_a_data_dir_held_here(tmp_path: Path) -> None:
    with DataDir(tmp_path):
        result = run_python(TRY_LOCK, str(tmp_path))
    assert result.returncode == 3, result.stderr
    assert f"in use by process {os.getpid()}" in result.stdout


def test_a_path_under_a_file_fails_at_open(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(StorageError, match=rf"{tmp_path}/file/data.*Not a directory"):
        DataDir(tmp_path / "file" / "data")
    with pytest.raises(StorageError, match="not a directory"):
        DataDir(tmp_path / "file")


def test_a_read_only_folder_fails_at_open(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions; the refusing-disk variants cover this case")
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    try:
        with pytest.raises(StorageError, match=rf"{folder} is not writable: Permission denied"):
            DataDir(folder)
    finally:
        folder.chmod(0o700)


def test_a_disk_that_refuses_writes_fails_at_open_even_for_root(tmp_path: Path) -> None:
    # A file size limit of 0 makes every write fail (EFBIG), whoever the user is.
    result = run_python(FILE_SIZE_LIMIT_ZERO, str(tmp_path))
    assert result.returncode == 3, result.stderr
    assert f"data directory {tmp_path} is not writable: File too large (EFBIG)" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_failing_fsync_at_open_is_a_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StorageError, match="No space left on device"):
        DataDir(tmp_path)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_stores_and_the_actors_found(tmp_path: Path) -> None:
    long_key = ("app", "u" * 500)
    with DataDir(tmp_path) as data_dir:
        stores = [data_dir.store("agent", ("assistant",)), data_dir.store("scope", ("chat", "Alice")),
                  data_dir.store("scope", long_key, keep=3)]
        assert isinstance(stores[0], FileStore) and stores[2].keep == 3
        assert list(data_dir.actors()) == []  # nothing written yet
        for store in stores:
            store.append([(1, 0, b"{}")])
            store.close()
        (stores[1].path.parent / "stray-file").write_text("x")
        (tmp_path / "notes.txt").write_text("x")
        found = set(data_dir.actors())
        assert found == {ActorLocation(store.kind, store.key, store.path) for store in stores}
        (stores[1].path / "key.json").unlink()  # a readable name is enough without the manifest
        assert ActorLocation("scope", ("chat", "Alice"), stores[1].path) in set(data_dir.actors())
    with pytest.raises(StorageError, match="closed"):
        data_dir.store("agent", ("assistant",))
