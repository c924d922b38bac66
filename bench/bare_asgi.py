"""The reference server of bench/http.py: an ASGI app that does nothing of ours,
served by the stack mnemex serves its app with (hypercorn's trio worker, configured
as in mnemex/server/_serve.py). What it costs per request is the floor no route of
mnemex can go below on this stack.

The app reads the whole request body, whatever the method and path, and answers
200 with a 12-byte JSON body. Serves until SIGINT or SIGTERM.

Run: python bench/bare_asgi.py --port PORT
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import trio

# bench/ holds http.py: the folder goes last on the import path so that hypercorn
# imports the standard library's http package, not the benchmark
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.append(str(_BENCH))

from _common import ROOT  # noqa: E402
from hypercorn.config import Config as HypercornConfig  # noqa: E402
from hypercorn.trio import serve as hypercorn_serve  # noqa: E402

BODY = b'{"ok":true}\n'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]

log = logging.getLogger("bench.bare_asgi")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    while True:
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


async def serve_bare(port: int) -> None:
    # the same settings as mnemex/server/_serve.py, so that the two differ by the app alone
    hyper = HypercornConfig()
    hyper.bind = [f"127.0.0.1:{port}"]
    hyper.accesslog = None
    hyper.errorlog = log
    hyper.keep_alive_timeout = 75.0
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_wait_for_signals, stop)
        await hypercorn_serve(app, hyper, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
        nursery.cancel_scope.cancel()


async def _wait_for_signals(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.set()
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # the one thing this server takes from _common (tests/test_bench_scripts.py asks
    # every bench/*.py to import from it): the checkout it runs from, for its log
    print(f"bare ASGI app of {ROOT} on http://127.0.0.1:{args.port}", flush=True)
    trio.run(serve_bare, args.port)


if __name__ == "__main__":
    main()
