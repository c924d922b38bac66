"""The HTTP service: the conversation API, the memory API and operations.

uvicorn serves it on uvloop with httptools; the runtime runs as a trio guest of
that event loop on the same thread, and each request crosses into it once
through the Bridge (``_bridge``). Handlers are Starlette endpoints on asyncio
(measured in bench/README.md, "HTTP front": Starlette's routing and request
objects cost about 11 us a request against a bare ASGI handler, a few per cent
of a journaled POST /messages, for routing, streaming responses and
disconnect handling we would otherwise write ourselves).
"""

from mnemex.server._app import build_app
from mnemex.server._schemas import ServerSettings
from mnemex.server._serve import Server, serve

__all__ = ["Server", "ServerSettings", "build_app", "serve"]
