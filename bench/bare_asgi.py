"""The reference server of bench/http.py: an ASGI app that does nothing of ours,
served by the stack ``mnemex serve`` serves its app with: uvicorn with uvloop and
httptools, access log and lifespan off (issue 23). What it costs per request is
the floor no route of mnemex can go below on that stack. ``--stack hypercorn-trio``
serves it on the stack before issue 23 instead (hypercorn's trio worker).

Every request but a pushed stream's has its whole body read and is answered 200
with a 12-byte JSON body. The pushed-stream routes are the least a relay can do,
so that bench/http.py's stream client can be measured against a server that is
not the bottleneck: ``POST /stream/{id}`` (an NDJSON body; each line is kept and
wakes the readers), ``POST /stream/{id}/complete`` and ``GET /stream/{id}``
(server-sent events: every line kept so far, then each new one, one ``data:``
event each, then ``data: [DONE]``; query parameters are ignored, a reader always
starts from the beginning and waits as long as it takes). Streams are never
dropped. Serves until SIGINT or SIGTERM.

Run: python bench/bare_asgi.py --port PORT [--stack uvicorn|hypercorn-trio]
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio

# bench/ holds http.py: the folder goes last on the import path so that the servers
# import the standard library's http package, not the benchmark
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.append(str(_BENCH))

from _common import ROOT  # noqa: E402

BODY = b'{"ok":true}\n'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
STACKS = ("uvicorn", "hypercorn-trio")

log = logging.getLogger("bench.bare_asgi")


@dataclass(eq=False)
class Relay:
    """One pushed stream: the lines so far, whether it is complete, and an event
    set (and replaced) on every change, which its readers wait on."""

    lines: list[bytes] = field(default_factory=list)
    is_complete: bool = False
    changed: anyio.Event = field(default_factory=anyio.Event)

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


_relays: dict[str, Relay] = {}


def relay(name: str) -> Relay:
    found = _relays.get(name)
    if found is None:
        found = _relays[name] = Relay()
    return found


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":  # hypercorn sends it; uvicorn runs with lifespan off
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    parts = scope["path"].split("/")
    if len(parts) >= 3 and parts[1] == "stream":
        if scope["method"] == "GET" and len(parts) == 3:
            await read_stream(relay(parts[2]), send)
            return
        if scope["method"] == "POST" and len(parts) == 3:
            await push_stream(relay(parts[2]), receive, send)
            return
        if scope["method"] == "POST" and len(parts) == 4 and parts[3] == "complete":
            found = relay(parts[2])
            found.is_complete = True
            found.wake()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


async def push_stream(stream: Relay, receive: Any, send: Any) -> None:
    pending = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        pending += message.get("body", b"")
        if b"\n" in pending:
            *lines, pending = pending.split(b"\n")
            stream.lines += [line for line in lines if line.strip()]
            stream.wake()
        if not message.get("more_body", False):
            break
    if pending.strip():
        stream.lines.append(pending.strip())
        stream.wake()
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


async def read_stream(stream: Relay, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    sent = 0
    while True:
        changed = stream.changed
        if sent < len(stream.lines):
            # every line that came since the last send goes out in one body message
            lines = stream.lines[sent:]
            sent += len(lines)
            await send({"type": "http.response.body", "more_body": True,
                        "body": b"".join(b"data: " + line + b"\n\n" for line in lines)})
        elif stream.is_complete:
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        else:
            await changed.wait()


def serve_uvicorn(port: int) -> None:
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                            lifespan="off", access_log=False, log_level="warning")
    announce(port, "uvicorn", "uvloop", "httptools")
    uvicorn.Server(config).run()  # returns on SIGINT or SIGTERM


def serve_hypercorn_trio(port: int) -> None:
    import trio
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve as hypercorn_serve

    hyper = HypercornConfig()
    hyper.bind = [f"127.0.0.1:{port}"]
    hyper.accesslog = None
    hyper.errorlog = log
    hyper.keep_alive_timeout = 75.0

    async def wait_for_signals(stop: trio.Event) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                stop.set()
                return

    async def serve() -> None:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_signals, stop)
            await hypercorn_serve(app, hyper, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
            nursery.cancel_scope.cancel()

    announce(port, "hypercorn", "trio")
    trio.run(serve)


def announce(port: int, *packages: str) -> None:
    """The line bench/http.py reads back from the log: where the app runs, on what."""
    stack = ", ".join(f"{name} {version(name)}" for name in packages)
    print(f"bare ASGI app of {ROOT} on {stack} at http://127.0.0.1:{port}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stack", choices=STACKS, default="uvicorn",
                        help="uvicorn with uvloop and httptools (default; what mnemex serve runs on since "
                             "issue 23) or hypercorn's trio worker (before it; pip install hypercorn)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.stack == "uvicorn":
        serve_uvicorn(args.port)
    else:
        serve_hypercorn_trio(args.port)


if __name__ == "__main__":
    main()
