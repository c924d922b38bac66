"""A real PostgreSQL server for the tests of the database journal: Debian's
package (``apt-get install postgresql``: /usr/lib/postgresql/<version>/bin),
initdb into a fresh folder, listening on 127.0.0.1 on a free port and on a unix
socket in that folder, stopped (and the folder removed) at the end.

PostgreSQL refuses to run as root: when the tests run as root (CI), the server
runs as the ``postgres`` user the package creates (else ``nobody``), through
``setpriv``. ``start_server`` returns the reason instead of a server where none
can be started, and the tests skip saying it; they never mock the database.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class PostgresServer:
    folder: Path
    port: int
    bin_dir: Path
    run_as: list[str]

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=mnemex dbname=postgres"

    def stop(self) -> None:
        subprocess.run([*self.run_as, str(self.bin_dir / "pg_ctl"), "-D", str(self.folder / "data"),
                        "-m", "immediate", "-w", "stop"], capture_output=True, check=False, timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server() -> PostgresServer | str:
    """A running server, or why none could be started."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        return ("no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on PATH; "
                "install Debian's postgresql package")
    folder = Path(tempfile.mkdtemp(prefix="mnemex-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        user = next((name for name in ("postgres", "nobody") if _has_user(name)), None)
        if setpriv is None or user is None:
            shutil.rmtree(folder, ignore_errors=True)
            return ("running as root, and PostgreSQL refuses to run as root: no setpriv or no unprivileged "
                    "user (postgres, nobody) to run it as")
        entry = pwd.getpwnam(user)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        run_as = [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
    port = _free_port()
    data = folder / "data"
    steps = [
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "mnemex", "--auth=trust", "-E", "UTF8", "--no-sync"],
        [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w", "-t", "60",
         "-o", f"-h 127.0.0.1 -p {port} -k {folder} -c max_connections=200", "start"],
    ]
    for step in steps:
        run = subprocess.run([*run_as, *step], capture_output=True, text=True, check=False, timeout=120)
        if run.returncode != 0:
            log = (folder / "server.log").read_text() if (folder / "server.log").exists() else ""
            shutil.rmtree(folder, ignore_errors=True)
            return (f"could not start PostgreSQL ({Path(step[0]).name} exited {run.returncode}): "
                    f"{(run.stderr or run.stdout).strip()[-500:]} {log[-500:]}")
    return PostgresServer(folder, port, bin_dir, run_as)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
