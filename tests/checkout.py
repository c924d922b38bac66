"""Child Python processes that run this checkout's mnemex.

A script run as ``python path/to/script.py`` puts its own folder first on
``sys.path``, not the current one, so it imports whatever mnemex is installed: in
a second worktree, an editable install points at the first. Tests that start
such a child pass it ``python_env()``."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The checkout holding these tests (and the mnemex they test)."""


def python_env() -> dict[str, str]:
    """This process's environment with the checkout first on PYTHONPATH."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
