"""HTTP plumbing shared by the routes: JSON in and out with msgspec, errors as
``{"error": ...}`` with a status from one table, bounded request bodies,
Go-style durations, bearer-token checks."""

from __future__ import annotations

import asyncio
import hmac
import math
import re
from typing import Any, Final, TypeVar

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mnemex import (
    ActorClosed,
    ActorCrashed,
    Busy,
    CorruptData,
    InvalidInput,
    MnemexError,
    ModelError,
    NotFound,
    NotOwner,
    StorageError,
    Timeout,
    TooLarge,
)

__all__ = [
    "HttpError",
    "JsonResponse",
    "check_params",
    "check_token",
    "decode_json",
    "error_response",
    "header",
    "is_json_type",
    "json_response",
    "parse_duration",
    "read_json",
    "status_of",
]

T = TypeVar("T")

_encoder = msgspec.json.Encoder()

# the one table from error class to HTTP status; the first match in order wins
STATUS: tuple[tuple[type[MnemexError], int], ...] = (
    (TooLarge, 422),
    (InvalidInput, 400),
    (NotFound, 404),
    (Busy, 503),
    (NotOwner, 503),
    (ActorClosed, 503),
    (Timeout, 504),
    (ModelError, 503),
    (StorageError, 507),
    (CorruptData, 500),
    (ActorCrashed, 500),
    (MnemexError, 500),
)


class HttpError(Exception):
    """An error with its own status (body too large, bad JSON, unauthorized)."""

    def __init__(self, status: int, message: str, *, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.headers = headers or {}


def status_of(exc: MnemexError) -> int:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500  # pragma: no cover - MnemexError is last in the table


class JsonResponse(Response):
    """A JSON answer. A Starlette Response whose head is built in one step and sent
    as is: every request of the API ends in one of these. ``respond_now`` writes it
    whole through the server's shortcut when there is one (see ``respond_now``)."""

    media_type = "application/json"

    def __init__(self, body: bytes, status_code: int = 200, headers: dict[str, str] | None = None) -> None:
        self.body = body
        self.status_code = status_code
        self.background = None
        self._extra = headers or None
        self._raw_headers: list[tuple[bytes, bytes]] | None = None

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The header list, made when first asked for (the shortcut needs none)."""
        if self._raw_headers is None:
            self._raw_headers = [(b"content-length", str(len(self.body)).encode()),
                                 (b"content-type", b"application/json")]
            if self._extra:
                self._raw_headers += [(name.lower().encode("latin-1"), value.encode("latin-1"))
                                      for name, value in self._extra.items()]
        return self._raw_headers

    @raw_headers.setter
    def raw_headers(self, value: list[tuple[bytes, bytes]]) -> None:
        self._raw_headers = value

    def respond_now(self, send: Send) -> bool:
        """Write the whole answer at once, without ASGI messages, when ``send`` is the
        send of a request cycle of mnemex's server (``_serve._Cycle.respond_whole``);
        False, with nothing sent, when it must be sent the ASGI way (another server,
        a send wrapped by a middleware, headers of the caller's own)."""
        if self._extra is not None or self._raw_headers is not None:
            return False
        respond = getattr(getattr(send, "__self__", None), "respond_whole", None)
        if respond is None:
            return False
        body = self.body
        return bool(respond(self.status_code, _JSON_HEAD % len(body), body))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.respond_now(send):
            return
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body})


_JSON_HEAD: Final = b"content-length: %d\r\ncontent-type: application/json\r\n"


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JsonResponse(_encoder.encode(body), status, headers)


def error_response(exc: Exception) -> Response:
    if isinstance(exc, HttpError):
        body: dict[str, Any] = {"error": str(exc)}
        if exc.field:
            body["field"] = exc.field
        return json_response(body, exc.status, exc.headers)
    if isinstance(exc, MnemexError):
        status = status_of(exc)
        body = {"error": str(exc), "type": type(exc).__name__}
        field = getattr(exc, "field", None)
        if field:
            body["field"] = field
        if isinstance(exc, NotOwner):  # where to send it instead
            body.update(vshard=exc.vshard, owner=exc.owner, epoch=exc.epoch)
        headers = {"Retry-After": "1"} if status == 503 else None
        return json_response(body, status, headers)
    raise exc


class _BodyTooLarge(HttpError):
    def __init__(self, message: str) -> None:
        super().__init__(413, message, headers={"Connection": "close"})


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of the request header ``name`` (lower case), raw; None when
    absent. One pass over the list the server gave (cheaper than a Headers object
    for the one or two a route reads)."""
    for key, value in scope["headers"]:
        if key == name:
            value_: bytes = value
            return value_
    return None


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The request body, refusing past ``limit`` bytes (413) or when it takes longer
    than ``timeout`` seconds to arrive (408). Either refusal closes the connection
    after the answer (``Connection: close``): the rest of the body is not read."""
    declared = header(request.scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge(f"request body is {int(declared):,} bytes; the limit is {limit:,} "
                            f"(server.max_body_bytes)")
    receive = request.receive
    take = getattr(getattr(receive, "__self__", None), "take_whole_body", None)
    if take is not None:  # mnemex's server: the usual small body, read with its head, taken at once
        whole: bytes | None = take()
        if whole is not None:
            if len(whole) > limit:
                raise _BodyTooLarge(f"request body is over the limit of {limit:,} bytes "
                                    f"(server.max_body_bytes)")
            return whole
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                body, size = _body_of(await receive(), chunks, size, limit)
                if body is not None:
                    return body
    except TimeoutError:
        raise HttpError(408, f"request body did not arrive within {timeout:g} s (server.body_timeout)",
                        headers={"Connection": "close"}) from None


def _body_of(message: Any, chunks: list[bytes], size: int, limit: int) -> tuple[bytes | None, int]:
    """Take one ``http.request`` message into ``chunks``: (the whole body, size) when
    it was the last, else (None, the size so far)."""
    if message["type"] != "http.request":
        raise ClientDisconnect
    chunk: bytes = message.get("body", b"")
    if chunk:
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge(f"request body is over the limit of {limit:,} bytes (server.max_body_bytes)")
        chunks.append(chunk)
    if message.get("more_body", False):
        return None, size
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), size


_MISSING = re.compile(r"(?:missing required|contains unknown) field `([^`]*)`")
_PATH = re.compile(r"- at `\$\.?([^`]*)`")


def _field(exc: msgspec.ValidationError) -> str | None:
    text = str(exc)
    missing = _MISSING.search(text)
    path = _PATH.search(text)
    base = path.group(1) if path else ""
    if missing:
        return f"{base}.{missing.group(1)}" if base else missing.group(1)
    return base or None


def decode_json(body: bytes, type_: type[T]) -> T:
    """``body`` decoded as ``type_``; every refusal is a 400 naming what was wrong
    (malformed JSON, nesting too deep, a missing, unknown or mistyped field)."""
    if not body.strip():
        raise HttpError(400, "request body is empty; a JSON object is expected")
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        raise HttpError(400, f"invalid request body: {exc}", field=_field(exc)) from None
    except msgspec.DecodeError as exc:
        raise HttpError(400, f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HttpError(400, "request body is nested too deeply to be read; flatten it") from None


async def read_json(request: Request, type_: type[T], limit: int, timeout: float) -> T:
    """Read and decode the body as ``type_`` (see read_body, decode_json)."""
    return decode_json(await read_body(request, limit, timeout), type_)


def check_params(request: Request, allowed: frozenset[str]) -> None:
    """400 naming any query parameter the route does not take: a misspelled filter
    must never widen a read or a delete."""
    unknown = [name for name in request.query_params if name not in allowed]
    if unknown:
        takes = ", ".join(sorted(allowed)) if allowed else "no query parameters"
        raise HttpError(400, f"unknown query parameter {', '.join(repr(u) for u in unknown)}; "
                             f"this route takes {takes}", field=unknown[0])


_JSON_TYPES: Final = ("application/json", "application/x-ndjson", "application/jsonl",
                      "application/json-seq")


def is_json_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in _JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, name: str) -> float:
    """Seconds from a Go-style duration (``30s``, ``1m30s``, ``250ms``) or a bare
    number of seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pos, value = 0, 0.0
        for match in _DURATION.finditer(text):
            if match.start() != pos:
                break
            value += float(match.group(1)) * _UNIT[match.group(2)]
            pos = match.end()
        if pos != len(text) or not text:
            raise HttpError(400, f"{name}={text!r} is not a duration (use e.g. 30s, 1m, 500ms)",
                            field=name) from None
    if not math.isfinite(value) or value < 0:
        raise HttpError(400, f"{name}={text!r} must be a duration >= 0", field=name)
    return value


def check_token(request: Request, token: str | None) -> None:
    """Raise 401 unless ``Authorization: Bearer <token>`` matches (constant time)."""
    if token is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise HttpError(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
