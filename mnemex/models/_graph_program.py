"""The program of a graph helper process (see mnemex.models.graph_helpers).

Run by path, ``python -P _graph_program.py <the path of mnemex/index/_graph.py>
<idle seconds>``: it imports the standard library and numpy, and loads the graph
calls from the file it is given (numpy and usearch alone), not the rest of mnemex,
so it starts in a fraction of a second and costs ~40 MB besides the graph it builds.

The protocol, one job at a time over stdin and stdout: one JSON line (``dim``, ``m``,
``ef_construction``, ``quantization``, ``threads``, ``count``, ``block``, ``base``,
``out``), then the ``count`` vectors, a block at a time: ``block`` int64 ids, then
their float32 rows (the last block holds what remains). Each block is added as it
comes (to a fresh graph, or to the graph usearch saved at ``base``) by the graph
calls' ``add_block``, as a build in a thread adds it; then the graph is saved at
``out`` and one JSON line answers, ``{"ok": true, "peak": <peak resident bytes>}``,
or ``{"error": "<what>"}`` after which the helper exits. It exits when its stdin
closes, or when no job came for the idle seconds it was given.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import select
import signal
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import IO, Any

import numpy as np
import numpy.typing as npt


def _graph_calls(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("mnemex_graph_calls", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look themselves up there)
    spec.loader.exec_module(module)
    return module


_STALLED = 60.0  # seconds without input within a job after which the parent is taken for gone


def _read_exactly(source: io.RawIOBase, array: npt.NDArray[Any]) -> None:
    view = array.data.cast("B")
    got = 0
    while got < len(view):
        ready, _, _ = select.select([source], [], [], _STALLED)
        n = source.readinto(view[got:]) if ready else None
        if not n:
            raise EOFError(f"the input ended after {got} of {len(view)} bytes")
        got += n


def _jobs(source: io.RawIOBase, idle_exit: float) -> Iterator[dict[str, Any]]:
    while True:
        ready, _, _ = select.select([source], [], [], idle_exit)
        if not ready:
            return  # no job for long: the parent has forgotten this helper
        line = source.readline()  # (unbuffered: select sees every byte not read yet)
        if not line:
            return  # the parent let it go (or died)
        yield json.loads(line)


def _peak_bytes() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _do(calls: ModuleType, job: dict[str, Any], source: io.RawIOBase) -> None:
    params = calls.GraphParams(int(job["dim"]), int(job["m"]), int(job["ef_construction"]), 0,
                               int(job["threads"]), job["quantization"])
    if job["base"] is None:
        graph = calls.new_graph(params)
    else:
        graph = calls.load_graph(params, job["base"])
        with contextlib.suppress(OSError):
            os.unlink(job["base"])  # (read: it goes now, even if the parent dies before it removes it)
    count, block = int(job["count"]), int(job["block"])
    for start in range(0, count, block):
        size = min(block, count - start)
        ids = np.empty(size, dtype="<i8")
        rows = np.empty((size, params.dim), dtype="<f4")
        _read_exactly(source, ids)
        _read_exactly(source, rows)
        calls.add_block(graph, ids.astype(np.int64, copy=False), rows.astype(np.float32, copy=False), params)
    graph.save(job["out"])


def serve(graph_module: str, idle_exit: float) -> None:
    # answers go to the parent through a copy of stdout, and whatever a library prints
    # to stderr instead (on stdout it would break the protocol); an interrupt is the
    # parent's to handle (it closes our stdin, or kills us)
    answers = os.fdopen(os.dup(1), "wb", buffering=0)  # (a line is written whole: short, one write)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    calls = _graph_calls(graph_module)
    source = io.FileIO(sys.stdin.fileno(), "rb", closefd=False)  # (unbuffered: see _jobs)
    for job in _jobs(source, idle_exit):
        try:
            _do(calls, job, source)
        except Exception as error:  # (told to the parent, which builds in a thread instead)
            _answer(answers, {"error": f"{type(error).__name__}: {error}"})
            return
        if not _answer(answers, {"ok": True, "peak": _peak_bytes()}):
            return
        calls.release_freed_memory()  # (the job's graph is gone)


def _answer(answers: IO[bytes], answer: dict[str, Any]) -> bool:
    """``answer`` told to the parent; False when it is gone (killed, or it let us go)."""
    try:
        answers.write(json.dumps(answer).encode() + b"\n")
    except (BrokenPipeError, ValueError):
        return False
    return True


if __name__ == "__main__":
    serve(sys.argv[1], float(sys.argv[2]))
