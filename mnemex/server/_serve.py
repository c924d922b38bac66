"""Serving: uvicorn (uvloop, httptools) in front, the runtime a trio guest behind.

``Server`` binds the listening socket first (a busy port or a bad address is an
InvalidInput naming it, before any data is opened), then, on one thread, runs a
uvloop event loop that hosts the runtime's trio run as a guest
(``trio.lowlevel.start_guest_run``) and serves the app with uvicorn. Until
SIGINT/SIGTERM (or ``stop()``); then, in the order it always had: stop
accepting, let requests in flight finish (``shutdown_grace``), then close the
runtime, which drains every mailbox and snapshots every actor.

uvicorn's own HTTP protocol is extended (``_Protocol``) with the limits an
exposed server needs and uvicorn leaves out: at most ``max_connections`` open
(past it a new connection is closed at once), at most ``max_concurrent_requests``
served at once (past it 503 with Retry-After; a request stops counting the
moment its client leaves, not when its handler notices), a request head must
arrive within ``keep_alive_timeout`` (slow or half-sent headers are cut off), a
head over 64 KiB is refused with 431, and a body that falls silent for
``idle_read_timeout`` closes its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import resource
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import outcome
import threadpoolctl
import trio
import uvicorn
import uvloop
from outcome import Outcome
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from mnemex import Config, InvalidInput, MnemexRuntime, open_runtime
from mnemex.server._app import build_app
from mnemex.server._bridge import Bridge
from mnemex.server._guard import LOOPBACK, host_name
from mnemex.server._http import json_response
from mnemex.server._schemas import ServerSettings
from mnemex.server._served import LocalOperations, Operations, RuntimeOpener, ServedRuntime

__all__ = ["Server", "bind", "open_local", "serve"]

log = logging.getLogger("mnemex.server")

_MAX_HEAD: Final = 64 * 1024
"""The most bytes a request line and its headers may take."""
_BACKLOG: Final = 2048
_MAX_FILES: Final = 1 << 20
"""The open-file limit the server raises its soft limit to, at most (Linux's default
``fs.nr_open``)."""
_RESERVED_FILES: Final = 64
"""Descriptors kept from connections besides the journals': the listening socket,
event loop, snapshot and recovery files, model files."""
_MIN_CONNECTIONS: Final = 16


def bind(settings: ServerSettings) -> socket.socket:
    """The listening socket of ``settings``; InvalidInput naming the host or port when
    it cannot be had."""
    where = f"{settings.host}:{settings.port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            settings.host, settings.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except socket.gaierror as exc:
        raise InvalidInput(f"cannot listen on {where}: host {settings.host!r} is not an address of this "
                           f"machine ({exc.strerror})", field="server.host") from None
    except OverflowError:
        raise InvalidInput(f"cannot listen on {where}: port {settings.port} is not a port (0 to 65535)",
                           field="server.port") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidInput(f"cannot listen on {where}: the port is in use (another server?); pick "
                               f"another with --port", field="server.port") from None
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise InvalidInput(f"cannot listen on {where}: {settings.host!r} is not an address of this "
                               f"machine", field="server.host") from None
        if exc.errno == errno.EACCES:
            raise InvalidInput(f"cannot listen on {where}: permission denied (ports below 1024 need "
                               f"privileges)", field="server.port") from None
        raise InvalidInput(f"cannot listen on {where}: {exc.strerror or exc}", field="server.host") from None
    sock.setblocking(False)
    return sock


def serve(config: Config, settings: ServerSettings | None = None, *,
          opener: RuntimeOpener | None = None) -> None:
    """Serve until SIGINT or SIGTERM: ``mnemex serve``. InvalidInput when the
    address cannot be listened on. ``opener``: see Server."""
    Server(config, settings, opener=opener).run()


@contextlib.asynccontextmanager
async def open_local(config: Config) -> AsyncIterator[tuple[ServedRuntime, Operations]]:
    """The runtime of ``mnemex serve``: ``open_runtime(config)`` in this process."""
    async with open_runtime(config) as runtime:
        yield runtime, LocalOperations(runtime)


class Server:
    """One HTTP server over one runtime. ``run()`` serves in the calling thread until
    a signal or ``stop()``; ``start()`` serves on a thread of its own (for a
    program or a test that goes on meanwhile) and ``close()`` stops it and waits.
    Either way the socket is bound at construction: ``port`` is known at once.
    ``opener(config)`` opens the runtime served, with its Operations (default: one in
    this process; ``mnemex.ray.serving`` gives a cluster's)."""

    def __init__(self, config: Config, settings: ServerSettings | None = None, *,
                 opener: RuntimeOpener | None = None) -> None:
        self.config = config
        self.opener: RuntimeOpener = opener if opener is not None else open_local
        self.settings = settings if settings is not None else config.server
        self._socket = bind(self.settings)
        self.port: int = self._socket.getsockname()[1]
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._uvicorn: _Uvicorn | None = None
        self._stop_requested = False
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self.runtime: ServedRuntime | None = None
        """The runtime being served (None before start and after the end)."""

    # -- running --------------------------------------------------------------------
    def run(self, *, handle_signals: bool = True) -> None:
        """Serve in this thread until ``stop()`` or (with ``handle_signals``) SIGINT or
        SIGTERM; then shut down in order and return. Errors opening the runtime
        (a locked data directory, a bad setting) are raised here."""
        _raise_file_limit()
        blas = (threadpoolctl.threadpool_limits(self.settings.blas_threads, user_api="blas")
                if self.settings.blas_threads is not None else contextlib.nullcontext())
        try:
            with blas, asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # BLAS as it was after
                runner.run(self._main(handle_signals))
        finally:
            self._socket.close()
            self._ready.set()

    def start(self) -> None:
        """Serve on a thread of this server's own; return once requests are answered
        (raises what stopped it from starting)."""
        def main() -> None:
            try:
                self.run(handle_signals=False)
            except BaseException as exc:  # for close() (or start(), if it never started)
                self._failure = exc

        self._thread = threading.Thread(target=main, name=f"mnemex-server-{self.port}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            failure, self._failure = self._failure, None
            raise failure

    def close(self) -> None:
        """Stop a server started with ``start()`` and wait until its runtime is closed
        (every actor snapshotted); raise what went wrong while it served, if anything."""
        self.stop()
        if self._thread is not None:
            self._thread.join()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def stop(self) -> None:
        """Begin the shutdown (from any thread): stop accepting, finish requests in
        flight, close the runtime."""
        self._stop_requested = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._request_exit)

    def _request_exit(self) -> None:
        if self._uvicorn is not None:
            if self._uvicorn.should_exit:  # asked twice (a second Ctrl-C): stop waiting for requests
                self._uvicorn.force_exit = True
            self._uvicorn.should_exit = True

    # -- the loop's side ------------------------------------------------------------
    async def _main(self, handle_signals: bool) -> None:
        loop = self._loop = asyncio.get_running_loop()
        guest = _Guest(self.config, self.opener, loop)
        with _exit_on_signals(self._request_exit) if handle_signals else contextlib.nullcontext():
            trio.lowlevel.start_guest_run(
                guest.main, run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=loop.call_soon, done_callback=guest.finished,
                host_uses_signal_set_wakeup_fd=True)
            operations: Operations | None = None
            try:
                bridge, runtime, operations = await guest.opened()
                self.runtime = runtime
                app = build_app(runtime, self.settings, bridge=bridge, operations=operations)
                connections = _connection_budget(self.settings.max_connections, operations.open_files())
                self._uvicorn = _Uvicorn(_uvicorn_config(app, self.settings, connections), guest)
                if self._stop_requested:
                    self._uvicorn.should_exit = True
                if self.settings.token is None and host_name(self.settings.host) not in LOOPBACK:
                    log.warning("listening on %s without a token: anyone who reaches it may read and delete "
                                "every memory; only Host names in server.allowed_hosts are answered",
                                self.settings.host)
                log.info("mnemex serving on http://%s:%d (%s)", self.settings.host, self.port,
                         operations.describe())
                await self._uvicorn.serve(sockets=[self._socket], ready=self._ready)
            finally:
                # uvicorn has stopped accepting and finished (or cut off) every request:
                # the runtime now drains its mailboxes and snapshots every actor
                self.runtime = None
                await guest.close()
        ok, message = operations.stopped() if operations is not None else (False, "the runtime never opened")
        log.log(logging.INFO if ok else logging.WARNING, "mnemex stopped; %s", message)


class _Guest:
    """The trio run hosted by the server's loop: it opens the runtime, offers a
    Bridge to it, and closes it when told."""

    def __init__(self, config: Config, opener: RuntimeOpener, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.opener = opener
        self.loop = loop
        self._opened: asyncio.Future[tuple[Bridge, ServedRuntime, Operations]] = loop.create_future()
        self._done: asyncio.Future[BaseException | None] = loop.create_future()
        self._reported = False
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    async def main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with self.opener(self.config) as (runtime, operations), trio.open_nursery() as calls:
            bridge = Bridge(calls, self.loop)
            if isinstance(runtime, MnemexRuntime):  # an in-process runtime's kernel: see Bridge.ask
                runtime.kernel.report_to_host(self.loop.call_soon_threadsafe)
            if not self._opened.done():
                self._opened.set_result((bridge, runtime, operations))
            await self._stop.wait()
            bridge.close()
            calls.cancel_scope.cancel()  # what uvicorn cut off past the grace period

    def finished(self, result: Outcome[None]) -> None:
        failure = result.error if isinstance(result, outcome.Error) else None
        if not self._done.done():
            self._done.set_result(failure)
        if not self._opened.done():  # the run ended before the runtime opened: say why there
            self._opened.set_exception(failure if failure is not None else RuntimeError(
                "the runtime's trio run ended before the runtime opened"))
            self._reported = True

    @property
    def ended(self) -> bool:
        """The trio run ended (by close(), or because the runtime failed)."""
        return self._done.done()

    async def opened(self) -> tuple[Bridge, ServedRuntime, Operations]:
        return await self._opened

    async def close(self) -> None:
        """End the trio run (closing the runtime) and wait for it; raise its failure
        (unless opened() raised it already)."""
        if not self._done.done() and self._token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._stop.set)
        failure = await asyncio.shield(self._done)
        if failure is not None and not self._reported:
            self._reported = True
            raise failure


@contextlib.contextmanager
def _exit_on_signals(exit_: Any) -> Iterator[None]:
    """SIGINT and SIGTERM begin the shutdown (and nothing else: uvicorn's own handling
    would raise the signal again once it has stopped, before the runtime is closed)."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def received(signum: signal.Signals) -> None:
        log.info("received %s: shutting down", signum.name)
        exit_()

    for signum in signals:
        loop.add_signal_handler(signum, received, signum)
    try:
        yield
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, told to leave signals to us, to report when it serves, and
    to stop when the runtime under it has ended."""

    def __init__(self, config: uvicorn.Config, guest: _Guest) -> None:
        super().__init__(config)
        self.guest = guest

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def serve(self, sockets: list[socket.socket] | None = None, *,
                    ready: threading.Event | None = None) -> None:
        self._ready_event = ready
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self._ready_event is not None:
            self._ready_event.set()

    async def on_tick(self, counter: int) -> bool:
        if self.guest.ended and not self.should_exit:
            log.error("the runtime stopped while serving; shutting the server down")
            self.should_exit = True
        return await super().on_tick(counter)


def _raise_file_limit() -> None:
    """Let the process open as many files as its hard limit allows (the soft limit is
    often 1,024 while the hard one is far higher): every connection and every open
    journal takes a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _MAX_FILES if hard == resource.RLIM_INFINITY else min(hard, _MAX_FILES)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:  # a container may refuse: serve within the soft limit
            log.info("could not raise the open-file limit from %d to %d: %s", soft, target, exc)


def _connection_budget(configured: int, journals: int | None) -> int:
    """``server.max_connections``, lowered (with a WARNING) to what the open-file limit
    leaves once the journals have theirs: past the limit accept() itself fails."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    budget = max(_MIN_CONNECTIONS, soft - (journals or 0) - _RESERVED_FILES)
    if budget >= configured:
        return configured
    log.warning("server.max_connections is %d, but this process may open %d files and the journals keep up "
                "to %d of them open: serving at most %d connections at once (raise the limit, ulimit -n, or "
                "lower storage.max_open_files)", configured, soft, journals or 0, budget)
    return budget


def _uvicorn_config(app: Any, settings: ServerSettings, max_connections: int) -> uvicorn.Config:
    config = uvicorn.Config(
        app, http=_protocol(settings, max_connections), ws="none", lifespan="off", interface="asgi3",
        log_config=None, access_log=False, proxy_headers=False, server_header=False, backlog=_BACKLOG,
        timeout_keep_alive=settings.keep_alive_timeout,  # type: ignore[arg-type]  # a float works
        timeout_graceful_shutdown=settings.shutdown_grace)  # type: ignore[arg-type]
    config.load()
    return config


def _protocol(settings: ServerSettings, max_connections: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with ``settings``' limits (see the module's docstring)."""
    warn = WarnEvery(10.0)
    max_connections_ = max_connections

    class Protocol(_Protocol):
        max_connections = max_connections_
        max_requests = settings.max_concurrent_requests
        head_timeout = settings.keep_alive_timeout
        idle_read_timeout = settings.idle_read_timeout
        warn_full = warn
        load = _Load()

    return Protocol


class WarnEvery:
    """A WARNING on ``mnemex.server`` at most every ``seconds``: a limit reached under
    load is said once, not once per refused request."""

    __slots__ = ("last", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.last = -math.inf

    def __call__(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self.last > self.seconds:
            self.last = now
            log.warning(message, *args)


class _Cork:
    """A connection's transport as a response cycle writes to it: what is written in
    one turn of the loop goes out in one write (uvicorn writes a response's head and
    body separately: two system calls and two packets for every small answer).
    A complete response is flushed at once (``_Protocol.on_response_complete``);
    a streamed one at the end of the loop's turn."""

    __slots__ = ("_loop", "_pending", "_scheduled", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes) -> None:
        self._pending.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def write_now(self, data: bytes) -> None:
        """Write what is pending and ``data`` now, in one write (a whole response)."""
        if self._pending:
            self._pending.append(data)
            data = b"".join(self._pending)
            self._pending.clear()
        if not self.transport.is_closing():
            self.transport.write(data)

    def flush(self) -> None:
        self._scheduled = False
        if self._pending:
            data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
            self._pending.clear()
            if not self.transport.is_closing():
                self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)


class _Cycle(RequestResponseCycle):
    """uvicorn's request cycle with two shortcuts the app takes when it finds them
    (``mnemex.server._http``): the whole body taken at once when it has arrived
    (``take_whole_body``), and a whole response written at once (``respond_whole``). Each does
    what ``receive`` and ``send`` would, without their awaits and ASGI messages;
    anything out of the ordinary (a client waiting for 100 Continue, paused writes,
    a response begun already, an access log) is left to them."""

    def take_whole_body(self) -> bytes | None:
        """The request's whole body when it has arrived and nothing was read yet (what
        one ``receive()`` would return now, without waiting), else None."""
        if (self.more_body or self.disconnected or self.response_complete or self.waiting_for_100_continue
                or not self.message_event.is_set()):
            return None
        self.flow.resume_reading()
        self.message_event.clear()
        body = bytes(self.body)
        self.body = bytearray()
        return body

    def respond_whole(self, status: int, head: bytes, body: bytes) -> bool:
        """Send a whole response: ``head`` holds its header lines (each ending in CRLF,
        a content-length of ``len(body)`` among them, valid names and values, no
        Connection header), and this adds the status line, the server's default
        headers and, when the connection is not kept alive, ``connection: close``.
        False, with nothing done, when ``send`` must do it."""
        if self.response_started or self.access_log or (self.flow.write_paused and not self.disconnected):
            return False
        if self.disconnected:
            return True  # as send: nobody to answer
        self.response_started = True
        self.waiting_for_100_continue = False
        self.chunked_encoding = False
        parts = [STATUS_LINE[status]]
        for name, value in self.default_headers:
            parts += (name, b": ", value, b"\r\n")
        parts.append(head)
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        if self.scope["method"] != "HEAD":
            parts.append(body)
        transport: Any = self.transport  # the connection's _Cork (see on_headers_complete)
        if type(transport) is _Cork:
            transport.write_now(b"".join(parts))
        else:
            transport.write(b"".join(parts))
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()
        return True


class _Load:
    """What the connections of one server share: the requests being served."""

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests = 0


async def _busy(scope: Any, receive: Any, send: Any) -> None:
    """The answer past ``max_concurrent_requests`` (the body is not read; the
    connection closes after it)."""
    await json_response({"error": "the server is serving its most requests at once "
                                  "(server.max_concurrent_requests); retry shortly"},
                        503, {"Retry-After": "1", "Connection": "close"})(scope, receive, send)


class _Protocol(HttpToolsProtocol):
    max_connections: int
    max_requests: int
    head_timeout: float
    idle_read_timeout: float
    warn_full: WarnEvery
    load: _Load

    _serving: Any = None
    """The request cycle of this connection counted in ``load``, until it ends."""
    _cork: _Cork | None = None
    _refused = False
    _head_timer: asyncio.TimerHandle | None = None
    _read_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0
    _in_head = True
    _last_read = 0.0
    _idle_timer: asyncio.TimerHandle | None = None
    _idle_since: float | None = None
    """When the connection's last response ended with nothing after it (None: data
    came since, or none ended yet)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.server_state.connections) >= self.max_connections:
            self._refused = True
            self.warn_full("%d connections open, the most allowed (server.max_connections); closing new ones "
                           "until some end", len(self.server_state.connections))
            transport.abort()
            return
        super().connection_made(transport)
        self._cork = _Cork(transport, self.loop)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._cancel_timers()
        self._served()
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if self.load.requests >= self.max_requests:
            self.warn_full("%d requests in flight, the most served at once (server.max_concurrent_requests); "
                           "answering 503 to new ones", self.load.requests)
            app = _busy
        else:
            self.load.requests += 1
            self._serving = cycle
        super()._start_asgi_task(cycle, app)

    def _served(self) -> None:
        if self._serving is not None:
            self._serving = None
            self.load.requests -= 1

    def data_received(self, data: bytes) -> None:
        self._idle_since = None
        if self._in_head:
            self._head_bytes += len(data)
        else:
            self._last_read = self.loop.time()
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._in_head:
            if self._head_bytes > _MAX_HEAD:
                self._refuse_head()
            elif self._head_timer is None and self._head_bytes:  # a head begun, not ended: time it
                self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)
        elif (self._read_timer is None and self.cycle is not None and self.cycle.more_body
              and not self.cycle.response_complete):
            self._last_read = self.loop.time()
            self._read_timer = self.loop.call_later(self.idle_read_timeout, self._read_timed_out)

    def on_headers_complete(self) -> None:
        """The request's head is in: uvicorn completes its scope and starts its cycle
        (or queues it behind the response under way); the cycle is then made a
        ``_Cycle`` writing through the connection's ``_Cork``. Its task has not run
        yet, so it only ever sees the cycle as a ``_Cycle`` (whose class adds methods,
        no state)."""
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None:
            cycle.__class__ = _Cycle
            if self._cork is not None:
                cycle.transport = self._cork  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        self._in_head = True  # what comes next is the next request's head
        self._head_bytes = 0
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """uvicorn's, but for the keep-alive timeout: the connection notes when it fell
        idle, and one timer of its own, armed once and then only when it fires,
        closes it ``keep_alive_timeout`` after that (uvicorn arms a timer at the end
        of every response and cancels it at the next request's first byte)."""
        if self._cork is not None:
            self._cork.flush()  # the head and the body of a response in one write
        self._served()
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self._idle_timer is None:
            self._idle_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_timed_out)

    def _idle_timed_out(self) -> None:
        """Close the connection if it has been idle for ``keep_alive_timeout``; if it
        fell idle since, look again when that much time has passed (while a request
        is under way, its response's end arms the timer again)."""
        self._idle_timer = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._idle_timer = self.loop.call_later(left, self._idle_timed_out)
        else:
            self.transport.close()

    # -- the limits -----------------------------------------------------------------
    def _await_head(self) -> None:
        """A new connection's first request head must arrive whole within
        ``head_timeout`` (later heads: from their first byte; an idle keep-alive
        connection is closed by the keep-alive timer, of the same length: see
        on_response_complete)."""
        self._in_head = True
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self.transport.close()

    def _read_timed_out(self) -> None:
        self._read_timer = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or cycle.response_complete or self.transport.is_closing():
            return
        silent = self.loop.time() - self._last_read
        if self.flow.read_paused or silent < self.idle_read_timeout:  # the app is behind, or data came
            self._read_timer = self.loop.call_later(max(self.idle_read_timeout - silent, 0.01),
                                                    self._read_timed_out)
            return
        log.info("a request body fell silent for %g s (server.idle_read_timeout): closing its connection",
                 self.idle_read_timeout)
        self.transport.close()

    def _refuse_head(self) -> None:
        body = b'{"error": "the request line and headers are over 65,536 bytes"}'
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                             b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode()
                             + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._read_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._read_timer = self._idle_timer = None
