"""What stands in front of every route: the checks that keep a web page, a rebound
DNS name or a flood of requests from using the server.

A server without a token listens on loopback and trusts whoever reaches it; a
web page the user opens can reach it too. Browsers mark what a page sends: an
``Origin`` header (or ``Sec-Fetch-Site: cross-site``) on cross-origin requests,
and a ``Host`` header naming the attacker's own domain when a DNS name is rebound
to 127.0.0.1. So without a token, requests from other origins and for other host
names are refused. With a token, a page cannot forge the header; cross-origin
calls are allowed only from ``server.cors_origins`` (with CORS headers and
preflight answers).
"""

from __future__ import annotations

from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemex.config import ServerConfig
from mnemex.server._http import json_response

__all__ = ["LOOPBACK", "Guard", "host_name"]

LOOPBACK: Final = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})
_WILDCARD: Final = frozenset({"0.0.0.0", "::", ""})
_CORS_METHODS: Final = "GET, POST, PUT, DELETE, OPTIONS"


def host_name(host: str) -> str:
    """The name in a Host header, without its port; IPv6 brackets dropped."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    """ASGI middleware: Host and Origin checks, and CORS for configured origins. (The
    caps on connections and on requests in flight are the server's protocol's: it
    sees a client leave the moment it leaves.)"""

    def __init__(self, app: ASGIApp, settings: ServerConfig) -> None:
        self.app = app
        self.settings = settings
        self.open = settings.token is None
        hosts = set(LOOPBACK) | {h.lower() for h in settings.allowed_hosts}
        if settings.host not in _WILDCARD:
            hosts.add(host_name(settings.host))
        self.hosts = frozenset(hosts)
        self.origins = frozenset(settings.cors_origins)
        self._hosts_seen: dict[bytes | None, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_host = raw_origin = fetch_site = None
        for name, value in scope["headers"]:  # lower-case names, as ASGI servers give them
            if name == b"host":
                raw_host = value
            elif name == b"origin":
                raw_origin = value
            elif name == b"sec-fetch-site":
                fetch_site = value
        if raw_origin is None and fetch_site != b"cross-site" and (not self.open or self._known(raw_host)):
            await self.app(scope, receive, send)  # the common case: nothing to check further
            return
        headers = _headers(scope)
        host = headers.get("host", "")
        # /health answers any Host: a probe addresses the pod by its IP, and OK reveals nothing
        if self.open and not self._known(raw_host) and scope["path"] != "/health":
            await _refuse(scope, receive, send, f"Host {host!r} is not served here; a server without a token "
                                                f"answers loopback names and server.allowed_hosts")
            return
        origin = headers.get("origin")
        allowed_origin: str | None = None
        if origin is not None and origin != "null" and origin in self.origins:
            allowed_origin = origin
        elif origin is not None and origin != f"{scope.get('scheme', 'http')}://{host}":
            await _refuse(scope, receive, send, f"cross-origin request from {origin!r} refused; allow an "
                                                f"origin with server.cors_origins")
            return
        elif origin is None and headers.get("sec-fetch-site") == "cross-site":
            await _refuse(scope, receive, send, "cross-site request refused (Sec-Fetch-Site); allow an "
                                                "origin with server.cors_origins")
            return
        if allowed_origin is not None and scope["method"] == "OPTIONS":
            await _preflight(send, allowed_origin, headers)
            return
        if allowed_origin is None:
            await self.app(scope, receive, send)
        else:
            await self.app(scope, receive, _with_cors(send, allowed_origin))

    def _known(self, raw_host: bytes | None) -> bool:
        """Whether a Host header names this server (answers kept per header value)."""
        known = self._hosts_seen.get(raw_host)
        if known is None:
            if len(self._hosts_seen) >= 1024:
                self._hosts_seen.clear()
            host = raw_host.decode("latin-1") if raw_host is not None else ""
            known = self._hosts_seen[raw_host] = host_name(host) in self.hosts
        return known


def _headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}


async def _refuse(scope: Scope, receive: Receive, send: Send, message: str) -> None:
    """403 with ``message``; the body is not read: the connection closes after the answer."""
    await json_response({"error": message}, 403, {"Connection": "close"})(scope, receive, send)


async def _preflight(send: Send, origin: str, headers: dict[str, str]) -> None:
    requested = headers.get("access-control-request-headers", "")
    await send({"type": "http.response.start", "status": 204, "headers": [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", _CORS_METHODS.encode()),
        (b"access-control-allow-headers", (requested or "authorization, content-type").encode("latin-1")),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
    ]})
    await send({"type": "http.response.body", "body": b""})


def _with_cors(send: Send, origin: str) -> Send:
    async def sender(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()),
                                              (b"access-control-allow-origin", origin.encode("latin-1")),
                                              (b"vary", b"Origin")]}
        await send(message)
    return sender
