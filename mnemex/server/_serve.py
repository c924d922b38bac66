"""Serving: hypercorn's trio worker runs the app inside the runtime's trio run.

``serve`` opens the runtime, serves until SIGINT/SIGTERM (or ``shutdown``),
then stops accepting, lets in-flight requests finish (``shutdown_grace``) and
closes the runtime, which drains every mailbox and snapshots every actor.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from mnemex import Config, open_runtime
from mnemex.server._app import build_app
from mnemex.server._schemas import ServerSettings

__all__ = ["serve"]

log = logging.getLogger("mnemex.server")


async def serve(config: Config, settings: ServerSettings | None = None, *, shutdown: trio.Event | None = None,
                handle_signals: bool = True,
                task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the runtime and the HTTP server until ``shutdown`` is set or a signal
    arrives. ``task_status.started(port)`` reports the bound port (0 picks one).
    ``settings`` default to ``config.server``."""
    settings = settings if settings is not None else config.server
    stop = shutdown if shutdown is not None else trio.Event()
    async with open_runtime(config) as runtime:
        app = build_app(runtime, settings)
        hyper = HypercornConfig()
        hyper.bind = [f"{settings.host}:{settings.port}"]
        hyper.graceful_timeout = settings.shutdown_grace
        hyper.accesslog = None
        hyper.errorlog = log
        hyper.keep_alive_timeout = 75.0
        async with trio.open_nursery() as nursery:
            if handle_signals:
                nursery.start_soon(_wait_for_signals, stop)
            binds: Any = await nursery.start(
                lambda task_status: hypercorn_serve(app, hyper, shutdown_trigger=stop.wait,  # type: ignore[arg-type]
                                                    task_status=task_status))
            port = _port_of(binds, settings.port)
            log.info("mnemex serving on http://%s:%d (data in %s)", settings.host, port,
                     config.storage.data_dir)
            task_status.started(port)
            await stop.wait()
            # hypercorn finishes in-flight requests, then returns; the runtime then closes
        log.info("mnemex stopped; every actor snapshotted")


def _port_of(binds: Any, fallback: int) -> int:
    for bind in binds or ():
        text = str(bind)
        tail = text.rsplit(":", 1)[-1]
        if tail.isdigit():
            return int(tail)
    return fallback


async def _wait_for_signals(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            stop.set()
            return
