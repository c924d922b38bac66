"""schemathesis fuzzes every documented operation of a real `mnemex serve`
(bounded examples) and must find no 5xx."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from waiting import wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_fuzzing_the_openapi_document_finds_no_server_error(tmp_path: Path) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    if st is None:
        pytest.fail("schemathesis (st) is not installed: pip install -e '.[test]'")
    port = _free_port()
    log = (tmp_path / "server.log").open("wb")  # a file, not a pipe: a full pipe would block the server
    server = subprocess.Popen([sys.executable, "-m", "mnemex.cli", "serve", "--port", str(port),
                               "--data-dir", str(tmp_path / "data")],
                              stdout=subprocess.DEVNULL, stderr=log)
    try:
        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(answers, what="the server to answer /health", timeout=30)
        # server-sent event streams are tested on their own (they wait by design)
        run = subprocess.run(
            [st, "run", f"http://127.0.0.1:{port}/openapi.json", "--max-examples", "15",
             "--checks", "not_a_server_error", "--exclude-path-regex", "/stream", "--seed", "1"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
        assert " passed" in run.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        log.close()
