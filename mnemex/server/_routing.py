"""Routing: the path and method of a request to its endpoint, in one lookup.

Starlette's router tries every route's pattern in turn and wraps the app in two
exception middlewares; for mnemex's 40-odd routes that was about a fifth of the
server's time per request (measured in ``mnemex/server/__init__.py``'s docstring).
Here a path without parameters is one dict lookup, and the few templates
(``/memory/{memory_id}``) are tried only for paths no fixed route has. Every
endpoint answers its own errors, so nothing needs wrapping.

As in the reference service (Express), one trailing slash is ignored
(``/messages/`` is ``/messages``); a HEAD is answered by the GET endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from mnemex.server._http import json_response

__all__ = ["Route", "Router"]

_PARAM: Final = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Route:
    """One path template and method, and its endpoint (an ASGI app)."""

    path: str
    method: str
    endpoint: ASGIApp

    @property
    def methods(self) -> frozenset[str]:
        return frozenset({self.method})


class Router:
    """An ASGI app dispatching to ``routes``; JSON 404 and 405 for the rest."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = list(routes)
        self._fixed: dict[str, dict[str, ASGIApp]] = {}
        templates: dict[str, dict[str, ASGIApp]] = {}
        for route in self.routes:
            table = templates if _PARAM.search(route.path) else self._fixed
            methods = table.setdefault(route.path, {})
            if route.method in methods:
                raise ValueError(f"{route.method} {route.path} is routed twice")
            methods[route.method] = route.endpoint
        self._templates = [(re.compile(_PARAM.sub(r"(?P<\1>[^/]+)", path)), methods)
                           for path, methods in templates.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if len(path) > 1 and path[-1] == "/":
            path = path[:-1]
        methods = self._fixed.get(path)
        if methods is None:
            for pattern, candidate in self._templates:
                match = pattern.fullmatch(path)
                if match is not None:
                    methods = candidate
                    scope["path_params"] = match.groupdict()
                    break
            else:
                # the reference service's words, exactly
                await json_response({"error": "Not found"}, 404)(scope, receive, send)
                return
        method: str = scope["method"]
        endpoint = methods.get(method) or (methods.get("GET") if method == "HEAD" else None)
        if endpoint is None:
            allowed = ", ".join(sorted(methods))
            await json_response({"error": f"{method} is not allowed on {scope['path']}; it takes {allowed}"},
                                405, {"Allow": allowed})(scope, receive, send)
            return
        await endpoint(scope, receive, send)
