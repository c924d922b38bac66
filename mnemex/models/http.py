"""One JSON endpoint of a model served over HTTP (an OpenAI-compatible embeddings
route, a rerank route), called from worker threads beside the actors.

A :class:`JsonEndpoint` posts a JSON body and returns the answer's bytes. It keeps
one httpx client (and its connections) for its life, so that a query does not pay
a new TLS handshake. A timeout, a broken connection, a 429 or a 5xx is retried a
bounded number of times after a short backoff that doubles (a 429's Retry-After
is honoured, up to the cap); any other error status, or the last failure, raises
the caller's ModelError subclass naming the URL, the status and what the server
said.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mnemex.errors import InvalidInput, ModelError

if TYPE_CHECKING:
    import httpx

__all__ = ["JsonEndpoint"]

_BACKOFF_CAP: Final = 4.0
"""Longest wait between two attempts, in seconds."""

_sleep = time.sleep  # the backoff's wait (a test replaces it)


class JsonEndpoint:
    """``POST url`` with a JSON body, for a model server.

    The API key is read from the environment variable ``api_key_env`` at each call
    and sent as ``Authorization: Bearer``; unset or empty, none is sent (local
    servers). ``timeout`` bounds each phase of an attempt (connecting, sending,
    each read) in seconds; ``retries`` more attempts follow a retryable failure,
    ``backoff`` seconds after the first and doubling. Failures raise ``error``,
    its message starting with ``what`` and the URL. ``transport`` replaces
    httpx's (tests). Thread-safe."""

    def __init__(self, url: str, *, what: str, error: type[ModelError], api_key_env: str | None,
                 timeout: float, retries: int, backoff: float = 0.25,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(f"{what} URL must be http(s), got {url!r}", field="url")
        self.url = url
        self.what = what
        self.error = error
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = backoff
        self._transport = transport
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JsonEndpoint({self.url!r})"

    def close(self) -> None:
        """Close the connections kept open (a later call opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def post(self, payload: Mapping[str, Any]) -> bytes:
        """The body of the answer to ``payload`` (2xx), after the retries a
        retryable failure gets; raises ``self.error`` otherwise."""
        import httpx  # imported on first use: mnemex without a served model never loads it

        body = msgspec.json.encode(payload)
        headers = {"content-type": "application/json", "accept": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["authorization"] = f"Bearer {key}"
        client = self._connected()
        attempts = self.retries + 1
        for attempt in range(attempts):
            wait: float | None = None
            try:
                response = client.post(self.url, content=body, headers=headers)
            except httpx.TimeoutException as exc:
                failure = f"timed out after {self.timeout:g} s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                failure = f"could not be reached: {exc!r}"
            else:
                status = response.status_code
                if status < 400:
                    return response.content
                failure = f"answered {status}: {response.text[:300]!r}"
                if status != 429 and status < 500:
                    raise self.error(f"{self.what} {self.url} {failure}")
                after = response.headers.get("retry-after", "") if status == 429 else ""
                wait = float(after) if after.replace(".", "", 1).isdigit() else None  # seconds, not a date
            if attempt + 1 < attempts:
                _sleep(min(self.backoff * 2 ** attempt if wait is None else wait, _BACKOFF_CAP))
        counted = f"{attempts} attempt{'s' if attempts > 1 else ''}"
        raise self.error(f"{self.what} {self.url} {failure} ({counted})")

    def _connected(self) -> httpx.Client:
        import httpx

        with self._lock:
            if self._client is None:
                timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))
                self._client = httpx.Client(timeout=timeout, transport=self._transport)
            return self._client

