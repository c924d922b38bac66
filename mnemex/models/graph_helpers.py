"""HNSW graphs built in helper processes (a :class:`mnemex.index.GraphBuilder`).

usearch's ``Index.add`` takes the GIL back after every vector in its calling thread
(to check for signals). Beside a Python thread that never waits, an actor taking a
batch of writes, each such vector waits a switch interval (5 ms): a graph built in a
thread of the actor's own process hardly moves while ingest runs (bench/README.md,
"Why the graph lags behind ingest"). A helper process has an interpreter and a GIL
of its own, so its build goes on at full speed on another core.

A runtime owns one :class:`GraphHelpers` (``Config.memories.hnsw_helper``) and lets
it go as it closes. Helpers start on demand (``_graph_program.py``, run by path: numpy
and usearch only, ~40 MB besides the graph being built), do one job at a time, and
wait idle for the next one; an idle helper exits on its own after ``idle_exit``
seconds, and gets no job once idle for ``idle`` (well before). The vectors go through
the helper's stdin, the graphs through files in the system's temporary folder
(usearch's own format: the helper saves, this process loads). Whatever goes wrong
with a helper (it does not start, dies, answers an error) makes ``build`` answer
None: the scope builds that graph in a thread, the same graph.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from mnemex.index import BUILD_BLOCK, GraphParams, graph_calls_path, load_graph

log = logging.getLogger("mnemex.models")

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

IDLE: Final = 5.0
"""Seconds an idle helper is kept for the next job."""
IDLE_EXIT: Final = 10.0
"""Seconds without a job after which a helper exits on its own (its memory goes with
it, with no timer here; a job for a helper that just died goes to a thread)."""
KEPT: Final = 2
"""Idle helpers kept at most (builds run one per scope, a few at once)."""
PROGRAM: Final = str(Path(__file__).with_name("_graph_program.py"))


class _Failed(Exception):
    """A helper could not build the graph (why: the message)."""


class _Helper:
    """One helper process and when it last finished a job."""

    __slots__ = ("idle_since", "process")

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.idle_since = time.monotonic()

    def kill(self) -> None:
        """Stop it now (from any thread): the job it is doing fails at once."""
        with contextlib.suppress(OSError):
            self.process.kill()

    def close(self) -> None:
        """Let it go: its stdin closed (it exits), then reaped; killed if it lingers."""
        process = self.process
        with contextlib.suppress(OSError, ValueError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


class GraphHelpers:
    """A runtime's graph helper processes (see the module docstring); ``build`` may be
    called from several threads at once. ``unavailable`` says why no helper is used
    any more (one failed to start); ``peak_bytes`` is the most resident memory a
    helper reported; ``jobs`` and ``failures`` count the builds given and those that
    went to a thread instead."""

    def __init__(self, *, idle: float = IDLE, idle_exit: float = IDLE_EXIT,
                 python: str | None = None) -> None:
        self.idle, self.idle_exit = idle, idle_exit
        self.python = python if python is not None else sys.executable
        self._lock = threading.Lock()
        self._idle: list[_Helper] = []
        self._closed = False
        self.unavailable: str | None = None
        self.peak_bytes = 0
        self.jobs = 0
        self.failures = 0

    def build(self, params: GraphParams, count: int, blocks: Iterable[tuple[I64, F32]], *, base: Any,
              started: Callable[[Callable[[], None] | None], None]) -> Any:
        """See :class:`mnemex.index.GraphBuilder`."""
        try:
            helper = self._take()
        except _Failed:
            return None
        stopped = False

        def stop() -> None:
            nonlocal stopped
            stopped = True
            helper.kill()

        folder = tempfile.gettempdir()
        paths: list[str] = []
        try:
            out = _temp_path(folder, paths)
            base_path = None
            if base is not None:
                base_path = _temp_path(folder, paths)
                base.save(base_path)  # (read only: the live graph's searches go on)
            started(stop)
            self._send(helper, params, count, blocks, base_path=base_path, out=out)
            graph = load_graph(params, out)
        except BaseException as error:
            helper.kill()
            helper.close()
            if not isinstance(error, _Failed | OSError | RuntimeError | ValueError):
                raise
            with self._lock:
                self.failures += 1
            if not stopped:
                log.warning("a graph helper failed (%s); the graph of %d vectors is built in a thread",
                            error, count)
            return None
        finally:
            started(None)
            for path in paths:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        self._give_back(helper)
        return graph

    def _send(self, helper: _Helper, params: GraphParams, count: int, blocks: Iterable[tuple[I64, F32]], *,
              base_path: str | None, out: str) -> None:
        stdin, stdout = helper.process.stdin, helper.process.stdout
        assert stdin is not None and stdout is not None
        job = {"dim": params.dim, "m": params.m, "ef_construction": params.ef_construction,
               "quantization": params.quantization, "threads": params.num_threads, "count": count,
               "block": BUILD_BLOCK, "base": base_path, "out": out}
        with self._lock:
            self.jobs += 1
        try:
            stdin.write(json.dumps(job).encode() + b"\n")
            sent = 0
            for ids, rows in blocks:
                if len(ids) != min(BUILD_BLOCK, count - sent) or rows.shape != (len(ids), params.dim):
                    raise _Failed(f"a block of {len(ids)} rows after {sent} of {count}")
                stdin.write(np.ascontiguousarray(ids, dtype="<i8").data)
                stdin.write(np.ascontiguousarray(rows, dtype="<f4").data)
                sent += len(ids)
            if sent != count:
                raise _Failed(f"{sent} vectors given of {count}")
            stdin.flush()
            line = stdout.readline()
        except (OSError, ValueError) as error:  # (a broken pipe: the helper died)
            raise _Failed(f"the helper stopped: {error!r} (exit {helper.process.poll()})") from error
        try:
            answer = json.loads(line) if line else {"error": f"no answer (exit {helper.process.wait()})"}
        except ValueError:
            answer = {"error": f"an answer not understood: {line[:200]!r}"}
        if not isinstance(answer, dict) or answer.get("ok") is not True:
            raise _Failed(str(answer.get("error") if isinstance(answer, dict) else answer))
        with self._lock:
            self.peak_bytes = max(self.peak_bytes, int(answer.get("peak", 0)))

    def _take(self) -> _Helper:
        """An idle helper still alive, or a new one; _Failed when none starts."""
        stale: list[_Helper] = []
        taken = None
        now = time.monotonic()
        with self._lock:
            if self.unavailable is not None or self._closed:
                raise _Failed(self.unavailable or "closed")
            while self._idle:
                helper = self._idle.pop()
                if helper.process.poll() is None and now - helper.idle_since < self.idle:
                    taken = helper
                    break
                stale.append(helper)
        for helper in stale:
            helper.close()
        if taken is not None:
            return taken
        try:
            process = subprocess.Popen([self.python, "-P", PROGRAM, graph_calls_path(), str(self.idle_exit)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        except OSError as error:
            with self._lock:
                self.unavailable = f"no graph helper could start ({self.python}): {error!r}"
            log.warning("%s; graphs are built in threads", self.unavailable)
            raise _Failed(self.unavailable) from error
        return _Helper(process)

    def _give_back(self, helper: _Helper) -> None:
        helper.idle_since = now = time.monotonic()
        with self._lock:
            keep = not self._closed
            kept = [h for h in self._idle if now - h.idle_since < self.idle]
            gone = [h for h in self._idle if now - h.idle_since >= self.idle]
            if keep and len(kept) < KEPT:
                kept.append(helper)
            else:
                gone.append(helper)
            self._idle = kept
        for other in gone:
            other.close()

    def close(self) -> None:
        """Let every idle helper go, and any that finishes a job from now on (a
        runtime's close, once its builds are stopped)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for helper in idle:
            helper.close()


def _temp_path(folder: str, paths: list[str]) -> str:
    handle, path = tempfile.mkstemp(prefix="mnemex-graph-", suffix=".usearch", dir=folder)
    os.close(handle)
    paths.append(path)
    return path
