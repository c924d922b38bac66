"""Serving: hypercorn's trio worker runs the app inside the runtime's trio run.

``serve`` binds the listening socket first (a busy port or a bad address is an
InvalidInput naming it, before any data is opened), opens the runtime, serves
until SIGINT/SIGTERM (or ``shutdown``), then stops accepting, lets in-flight
requests finish (``shutdown_grace``) and closes the runtime, which drains every
mailbox and snapshots every actor.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
from functools import partial

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState
from hypercorn.utils import wrap_app

from mnemex import Config, InvalidInput, open_runtime
from mnemex.server._app import build_app
from mnemex.server._guard import WarnEvery, host_name
from mnemex.server._schemas import ServerSettings

__all__ = ["serve"]

log = logging.getLogger("mnemex.server")

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _hypercorn_config(settings: ServerSettings) -> HypercornConfig:
    hyper = HypercornConfig()
    host = settings.host
    hyper.bind = [f"[{host}]:{settings.port}" if ":" in host else f"{host}:{settings.port}"]
    hyper.graceful_timeout = settings.shutdown_grace
    hyper.accesslog = None
    hyper.errorlog = log
    # idle keep-alive connections, and connections still sending their headers, close after this
    hyper.keep_alive_timeout = settings.keep_alive_timeout
    # silence in the middle of a request (a pushed stream too) closes the connection
    hyper.read_timeout = int(max(1, round(settings.idle_read_timeout)))
    hyper.h11_max_incomplete_size = 64 * 1024  # request line and headers
    return hyper


def bind(settings: ServerSettings) -> tuple[HypercornConfig, Sockets]:
    """The listening socket of ``settings``; InvalidInput naming the host or port when
    it cannot be had."""
    hyper = _hypercorn_config(settings)
    where = f"{settings.host}:{settings.port}"
    try:
        sockets = hyper.create_sockets()
    except socket.gaierror as exc:
        raise InvalidInput(f"cannot listen on {where}: host {settings.host!r} is not an address of this "
                           f"machine ({exc.strerror})", field="server.host") from None
    except OverflowError:
        raise InvalidInput(f"cannot listen on {where}: port {settings.port} is not a port (0 to 65535)",
                           field="server.port") from None
    except OSError as exc:
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
    for sock in sockets.insecure_sockets:
        sock.listen(hyper.backlog)
    return hyper, sockets


async def serve(config: Config, settings: ServerSettings | None = None, *, shutdown: trio.Event | None = None,
                handle_signals: bool = True,
                task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the runtime and the HTTP server until ``shutdown`` is set or a signal
    arrives. ``task_status.started(port)`` reports the bound port (0 picks one).
    ``settings`` default to ``config.server``. InvalidInput when the address cannot
    be listened on."""
    settings = settings if settings is not None else config.server
    stop = shutdown if shutdown is not None else trio.Event()
    hyper, sockets = bind(settings)
    try:
        port = sockets.insecure_sockets[0].getsockname()[1]
        if settings.token is None and host_name(settings.host) not in _LOOPBACK:
            log.warning("listening on %s without a token: anyone who reaches it may read and delete every "
                        "memory; only Host names in server.allowed_hosts are answered", settings.host)
        async with open_runtime(config) as runtime:
            app = wrap_app(build_app(runtime, settings), hyper.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]
            async with trio.open_nursery() as nursery:
                if handle_signals:
                    nursery.start_soon(_wait_for_signals, stop)
                await nursery.start(_Connections(app, hyper, settings).serve, sockets, stop)
                log.info("mnemex serving on http://%s:%d (data in %s)", settings.host, port,
                         config.storage.data_dir)
                task_status.started(port)
                await stop.wait()
                # hypercorn finishes in-flight requests, then returns; the runtime then closes
            report = runtime.shutdown_report
            if report is not None and report.ok:
                log.info("mnemex stopped; every actor snapshotted")
            else:  # the runtime logged which snapshots failed, at ERROR
                log.warning("mnemex stopped; NOT every actor was snapshotted (see the error above)")
    finally:
        for sock in sockets.insecure_sockets:
            sock.close()


class _Connections:
    """Accepts connections and hands each to hypercorn's connection handler, at most
    ``max_connections`` at once: past it a new connection is closed at once. Until
    ``stop``; then no more are accepted, idle ones close, and requests in flight
    have ``shutdown_grace`` seconds to finish (hypercorn's own shutdown, kept)."""

    def __init__(self, app: AppWrapper, hyper: HypercornConfig, settings: ServerSettings) -> None:
        self.app = app
        self.hyper = hyper
        self.settings = settings
        self.context = WorkerContext(None)
        self.open = 0
        self._warn = WarnEvery(10.0)

    async def _handle(self, stream: trio.SocketStream) -> None:
        if self.open >= self.settings.max_connections:
            self._warn("%d connections open, the most allowed (server.max_connections); closing new ones "
                       "until some end", self.open)
            await stream.aclose()
            return
        self.open += 1
        try:
            await TCPServer(self.app, self.hyper, self.context, ConnectionState({}), stream)  # type: ignore[arg-type]
        finally:
            self.open -= 1

    async def serve(self, sockets: Sockets, stop: trio.Event,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                     for sock in sockets.insecure_sockets]
        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as acceptor:
                await acceptor.start(partial(trio.serve_listeners, self._handle, listeners,
                                             handler_nursery=connections))
                task_status.started()
                await stop.wait()
                acceptor.cancel_scope.cancel()
            await self.context.terminated.set()  # idle connections close; busy ones after their answer
            connections.cancel_scope.deadline = trio.current_time() + self.settings.shutdown_grace


async def _wait_for_signals(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            stop.set()
            return
