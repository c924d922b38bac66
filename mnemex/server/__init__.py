"""The HTTP service: the conversation API, the memory API and operations,
served by hypercorn (trio worker) in the runtime's own trio run."""

from mnemex.server._app import build_app
from mnemex.server._schemas import ServerSettings
from mnemex.server._serve import serve

__all__ = ["ServerSettings", "build_app", "serve"]
