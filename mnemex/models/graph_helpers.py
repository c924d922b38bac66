"""HNSW graphs built in helper processes (a :class:`mnemex.index.GraphBuilder`).

usearch's ``Index.add`` takes the GIL back after every vector in its calling thread
(to check for signals). Beside a Python thread that never waits, an actor taking a
batch of writes, each such vector waits a switch interval (5 ms): a graph built in a
thread of the actor's own process hardly moves while ingest runs (bench/README.md,
"Why the graph lags behind ingest"). A helper process has an interpreter and a GIL
of its own, so its build goes on at full speed on another core.

A runtime owns one :class:`GraphHelpers` (``Config.memories.hnsw_helper``) and lets
it go as it closes. Helpers start on demand (``_graph_program.py``, run by path: numpy
and usearch only, ~40 MB besides the graph being built), at most one per core at
once (more builds wait for one), do one job at a time, and wait idle for the next
one; an idle helper exits on its own after ``idle_exit`` seconds, and gets no job
once idle for ``idle`` (well before). The vectors go through the helper's stdin, the
graphs through files in a folder of this process's own in the system's temporary
folder (usearch's format: a catch-up's live graph saved there for the helper, the
graph built saved there by the helper). The index loads the graph built when it
adopts it, once it has let go of the graph it replaces: the two are not in memory
at once in this process; the helper holds its own copy while it builds.

Whatever goes wrong with a helper (it does not start, dies, answers an error) makes
``build`` answer None: the scope builds that graph in a thread, the same graph. Two
helpers in a row that fail before their first answer (a Python without numpy or
usearch, a binary that is not Python) stop helpers being used for ``RETRY`` seconds,
said once in the log.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Final

import numpy as np
import numpy.typing as npt

from mnemex.index import BUILD_BLOCK, BuiltGraph, GraphParams, graph_calls_path, graph_file_header, load_graph

log = logging.getLogger("mnemex.models")

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

IDLE: Final = 2.0
"""Seconds an idle helper is kept for the next job (a scope's catch-ups follow each
other within a fraction of a second while it takes writes)."""
IDLE_EXIT: Final = 4.0
"""Seconds without a job after which a helper exits on its own (its memory, ~40 MB,
goes with it, with no timer here; a job for a helper that just died goes to a thread)."""
KEPT: Final = 2
"""Idle helpers kept at most."""
RETRY: Final = 300.0
"""Seconds helpers are not used after two in a row failed before their first answer."""
PROGRAM: Final = str(Path(__file__).with_name("_graph_program.py"))
_FOLDER_PREFIX: Final = "mnemex-graphs-"

_ALL: weakref.WeakSet[GraphHelpers] = weakref.WeakSet()
"""Every instance, for a forked child to let go of its parent's helpers' pipes."""


class _Failed(Exception):
    """A helper could not build the graph (why: the message)."""


class _Unused(Exception):
    """No helper is to be used now (closed, or helpers unavailable for a while)."""


class _Helper:
    """One helper process, when it last finished a job, and whether it ever answered."""

    __slots__ = ("idle_since", "process", "served")

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.idle_since = time.monotonic()
        self.served = False

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

    def drop_pipes(self) -> None:
        """In a forked child: close this process's copies of the pipes, nothing else."""
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError, ValueError):
                    pipe.close()


class _Job:
    """One build's state between the thread running it and a ``stop`` from another."""

    __slots__ = ("_lock", "done", "helper", "stopped")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = self.stopped = False
        self.helper: _Helper | None = None

    def stop(self) -> None:
        """Kill the helper at work on it (nothing once the job is over: the helper may
        be serving another job by then)."""
        with self._lock:
            if self.done:
                return
            self.stopped = True
            helper = self.helper
        if helper is not None:
            helper.kill()

    def attach(self, helper: _Helper) -> bool:
        """``helper`` takes the job; False when it was stopped already."""
        with self._lock:
            if self.stopped:
                return False
            self.helper = helper
            return True

    def finish(self) -> bool:
        """The job is over; whether it was stopped (its helper killed)."""
        with self._lock:
            self.done = True
            self.helper = None
            return self.stopped


class _GraphFile:
    """A graph a helper saved (a :class:`mnemex.index.BuiltGraph`): its file is removed
    once it is loaded or discarded, or when this is garbage (a build never adopted),
    by the process that made it only (a forked child's exit leaves it be). A file
    that does not load counts as a failed helper job (``failed``)."""

    __slots__ = ("__weakref__", "_remove", "failed", "params", "path")

    def __init__(self, params: GraphParams, path: str, failed: Callable[[BaseException], None]) -> None:
        self.params, self.path, self.failed = params, path, failed
        self._remove = weakref.finalize(self, _unlink, path, os.getpid())

    def loadable(self) -> bool:
        try:
            return graph_file_header(self.path) is not None
        except (OSError, RuntimeError, ValueError) as error:
            self.failed(error)
            self._remove()
            return False

    def load(self) -> Any:
        try:
            return load_graph(self.params, self.path)
        except (OSError, RuntimeError, ValueError) as error:
            self.failed(error)
            raise
        finally:
            self._remove()

    def discard(self) -> None:
        self._remove()


def _unlink(path: str, owner: int) -> None:
    if os.getpid() == owner:
        with contextlib.suppress(OSError):
            os.unlink(path)


class GraphHelpers:
    """A runtime's graph helper processes (see the module docstring); ``build`` may be
    called from several threads at once, and runs at most ``most`` helpers at once
    (default: one per core). ``unavailable`` says why helpers are not used (None:
    they are); ``peak_bytes`` is the most resident memory a helper reported; ``jobs``
    and ``failures`` count the jobs given to helpers and those that went to a thread
    instead."""

    def __init__(self, *, idle: float = IDLE, idle_exit: float = IDLE_EXIT, python: str | None = None,
                 most: int | None = None) -> None:
        self.idle, self.idle_exit = idle, idle_exit
        self.python = python if python is not None else sys.executable
        self.most = most if most is not None else max(1, _cores())
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(self.most)
        self._idle: list[_Helper] = []
        self._all: set[_Helper] = set()
        self._closed = False
        self._folder: str | None = None
        self._folder_lock: int | None = None
        self._early_failures = 0
        self._retry_at = 0.0
        self.unavailable: str | None = None
        self.peak_bytes = 0
        self.jobs = 0
        self.failures = 0
        _ALL.add(self)

    def build(self, params: GraphParams, count: int, blocks: Iterable[tuple[I64, F32]], *,
              base: Callable[[str], None] | None,
              started: Callable[[Callable[[], None] | None], None]) -> BuiltGraph | None:
        """See :class:`mnemex.index.GraphBuilder`."""
        job = _Job()
        started(job.stop)
        try:
            while not self._slots.acquire(timeout=0.05):  # (a helper per core at most)
                if job.stopped or self._closed:
                    return None
            try:
                return self._build(job, params, count, blocks, base)
            finally:
                self._slots.release()
        finally:
            job.finish()
            started(None)

    def _build(self, job: _Job, params: GraphParams, count: int, blocks: Iterable[tuple[I64, F32]],
               base: Callable[[str], None] | None) -> BuiltGraph | None:
        paths: list[str] = []
        helper = None
        if job.stopped or not self._usable():
            return None
        try:
            folder = self._temp_folder()
            out = _temp_path(folder, paths)
            base_path = None
            if base is not None:
                base_path = _temp_path(folder, paths)
                base(base_path)  # (before taking a helper: an idle one's time does not run out meanwhile)
            helper = self._take()
            if not job.attach(helper):
                self._give_back(helper)
                return None
            self._send(helper, params, count, blocks, base_path=base_path, out=out)
            paths.remove(out)
            built = _GraphFile(params, out, functools.partial(self._unloadable, count))
        except _Unused:
            return None
        except BaseException as error:
            if helper is None and not isinstance(error, _Failed | _Unused):
                # (this process's side: the folder, the live graph's file; no helper's fault)
                if not isinstance(error, OSError | RuntimeError | ValueError):
                    raise
                log.warning("a graph for a helper could not be prepared (%s); the graph of %d vectors is "
                            "built in a thread", error, count)
                return None
            if helper is not None:
                helper.kill()
                self._let_go(helper)
            if not isinstance(error, _Failed | OSError | RuntimeError | ValueError):
                raise
            if not job.stopped:
                self._failed(error, count, early=helper is None or not helper.served)
            return None
        finally:
            for path in paths:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        if job.finish():  # stopped as it finished: the helper may be killed already
            self._let_go(helper)
            built.discard()
            return None
        with self._lock:
            self._early_failures = 0
        self._give_back(helper)  # (after ``finish``: a late stop cannot kill it while it waits idle)
        return built

    def _unloadable(self, count: int, error: BaseException) -> None:
        """A graph a helper built did not load (its file gone or damaged): as a helper
        failing before its first answer, two in a row stop helpers for a while."""
        self._failed(error, count, early=True)

    def _usable(self) -> bool:
        with self._lock:
            return not self._closed and (self.unavailable is None or time.monotonic() >= self._retry_at)

    def _failed(self, error: BaseException, count: int, *, early: bool) -> None:
        with self._lock:
            self.failures += 1
            self._early_failures = self._early_failures + 1 if early else 0
            latched = self._early_failures >= 2 and self.unavailable is None
            if latched:
                self.unavailable = f"two graph helpers in a row failed before their first answer: {error}"
                self._retry_at = time.monotonic() + RETRY
        if latched:
            log.warning("%s; graphs are built in threads for %.0f s", self.unavailable, RETRY)
        elif self.unavailable is None:
            log.warning("a graph helper failed (%s); the graph of %d vectors is built in a thread",
                        error, count)

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
            with _pipe_errors_as_exceptions():
                _write_all(stdin, json.dumps(job).encode() + b"\n")
                sent = 0
                for ids, rows in blocks:
                    if len(ids) != min(BUILD_BLOCK, count - sent) or rows.shape != (len(ids), params.dim):
                        raise _Failed(f"a block of {len(ids)} rows after {sent} of {count}")
                    _write_all(stdin, np.ascontiguousarray(ids, dtype="<i8").data)
                    _write_all(stdin, np.ascontiguousarray(rows, dtype="<f4").data)
                    sent += len(ids)
                if sent != count:
                    raise _Failed(f"{sent} vectors given of {count}")
            line = stdout.readline()  # (unbuffered: a byte at a time, a short line)
        except (OSError, ValueError) as error:  # (a broken pipe: the helper died)
            raise _Failed(f"the helper stopped: {error!r} (exit {helper.process.poll()})") from error
        try:
            answer = json.loads(line) if line else {"error": f"no answer (exit {helper.process.wait()})"}
        except ValueError:
            answer = {"error": f"an answer not understood: {line[:200]!r}"}
        if not isinstance(answer, dict) or answer.get("ok") is not True:
            raise _Failed(str(answer.get("error") if isinstance(answer, dict) else answer))
        helper.served = True
        with self._lock:
            self.peak_bytes = max(self.peak_bytes, int(answer.get("peak", 0)))

    def _take(self) -> _Helper:
        """An idle helper still alive, or a new one; _Unused when none may be used now,
        _Failed when none starts."""
        stale: list[_Helper] = []
        taken = None
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise _Unused("closed")
            if self.unavailable is not None:
                if now < self._retry_at:
                    raise _Unused(self.unavailable)
                self.unavailable, self._early_failures = None, 1  # one more try: a failure latches again
            while self._idle:
                helper = self._idle.pop()
                if helper.process.poll() is None and now - helper.idle_since < self.idle:
                    taken = helper
                    break
                stale.append(helper)
        for helper in stale:
            self._let_go(helper)
        if taken is not None:
            return taken
        try:
            # unbuffered: nothing is left to flush when a dead helper's pipe is closed (which
            # would raise SIGPIPE outside _pipe_errors_as_exceptions), and no buffer's lock
            # is held by a build's thread when the process forks
            process = subprocess.Popen([self.python, "-P", PROGRAM, graph_calls_path(), str(self.idle_exit)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
                                       bufsize=0)
        except OSError as error:
            raise _Failed(f"no graph helper could start ({self.python}): {error!r}") from error
        helper = _Helper(process)
        with self._lock:
            self._all.add(helper)
        return helper

    def _give_back(self, helper: _Helper) -> None:
        helper.idle_since = now = time.monotonic()
        with self._lock:
            kept = [h for h in self._idle if now - h.idle_since < self.idle]
            gone = [h for h in self._idle if now - h.idle_since >= self.idle]
            if not self._closed and len(kept) < KEPT:
                kept.append(helper)
            else:
                gone.append(helper)
            self._idle = kept
        for other in gone:
            self._let_go(other)

    def _let_go(self, helper: _Helper) -> None:
        helper.close()
        with self._lock:
            self._all.discard(helper)

    def _temp_folder(self) -> str:
        """This instance's folder for graph files, made on first use (again if a /tmp
        cleaner removed it) and locked (an flock on the directory, held until ``close``
        or the process's end); the folders whose lock anyone can take are left over
        from a process killed mid-build, and are removed then (a lock, unlike a pid,
        tells a live process of another pid namespace sharing the folder from a dead
        one)."""
        with self._lock:
            if self._folder is not None and os.path.isdir(self._folder):
                return self._folder
            gone, self._folder = self._folder, None  # (removed by a /tmp cleaner: made again)
            if gone is not None and self._folder_lock is not None:
                os.close(self._folder_lock)
                self._folder_lock = None
        root = tempfile.gettempdir()
        for stale in Path(root).glob(f"{_FOLDER_PREFIX}*"):
            if _abandoned(stale):
                shutil.rmtree(stale, ignore_errors=True)
        # made under a name no sweep looks at, locked, then given its name: never seen unlocked
        making = tempfile.mkdtemp(prefix=f".{_FOLDER_PREFIX}", dir=root)
        held = _lock_folder(making)
        folder = os.path.join(root, os.path.basename(making)[1:])
        os.rename(making, folder)
        with self._lock:
            if self._folder is None:
                self._folder, self._folder_lock = folder, held
                return folder
            made = self._folder
        if held is not None:
            os.close(held)
        shutil.rmtree(folder, ignore_errors=True)
        return made

    def close(self) -> None:
        """Let every idle helper go, and any that finishes a job from now on, and
        remove the folder of graph files (a runtime's close, once its builds are
        stopped)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            folder, self._folder = self._folder, None
            held, self._folder_lock = self._folder_lock, None
        for helper in idle:
            self._let_go(helper)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if held is not None:
            os.close(held)

    def _forked(self) -> None:
        """In a child forked from this process: the parent's helpers are not the
        child's (their pipes would be shared), so it forgets them and starts afresh."""
        for helper in self._all:
            helper.drop_pipes()
        if self._folder_lock is not None:  # (the parent's descriptor keeps the folder locked)
            with contextlib.suppress(OSError):
                os.close(self._folder_lock)
        self._folder_lock = None
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(self.most)
        self._idle, self._all, self._folder = [], set(), None


def _forget_in_child() -> None:
    for helpers in list(_ALL):
        helpers._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _write_all(pipe: IO[bytes], data: bytes | memoryview) -> None:
    """All of ``data`` written to the unbuffered ``pipe`` (a write may take part of it)."""
    view = memoryview(data).cast("B")
    while view:
        written = pipe.write(view)
        if written is None:
            raise BlockingIOError("the helper's pipe is not blocking")
        view = view[written:]


@contextlib.contextmanager
def _pipe_errors_as_exceptions() -> Iterator[None]:
    """Writes to a helper that died raise BrokenPipeError, even where the host has set
    SIGPIPE back to its default action (which would end the whole process): the signal
    is blocked in this thread meanwhile, and one raised is taken before unblocking."""
    sigpipe = getattr(signal, "SIGPIPE", None)
    if sigpipe is None or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {sigpipe})
    try:
        yield
    finally:
        if sigpipe in signal.sigpending():
            signal.sigtimedwait({sigpipe}, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _cores() -> int:
    """The cores this process may run on (a container's share, where it is set so)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def _lock_folder(folder: str | Path, *, wait: bool = True) -> int | None:
    """An open descriptor of ``folder`` holding its lock; None where there are no
    flocks (such folders are never taken for abandoned), or, not ``wait``ing, when
    another holds it. The directory itself is locked: systemd-tmpfiles leaves a
    locked directory alone. OSError when it cannot be opened."""
    try:
        import fcntl
    except ImportError:
        return None
    handle = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException as error:
        os.close(handle)
        if wait or not isinstance(error, OSError):
            raise
        return None  # held: its process lives
    return handle


def _abandoned(folder: Path) -> bool:
    """Whether ``folder`` is a graph folder no live process holds."""
    try:
        handle = _lock_folder(folder, wait=False)
    except OSError:
        return False  # (not ours to judge)
    if handle is None:
        return False
    os.close(handle)  # (closing lets the lock go again)
    return True


def _temp_path(folder: str, paths: list[str]) -> str:
    handle, path = tempfile.mkstemp(prefix="graph-", suffix=".usearch", dir=folder)
    os.close(handle)
    paths.append(path)
    return path
