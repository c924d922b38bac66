"""HTTP plumbing shared by the routes: JSON in and out with msgspec, errors as
``{"error": ...}`` with a status from one table, bounded request bodies,
Go-style durations, bearer-token checks."""

from __future__ import annotations

import hmac
import math
import re
from contextlib import aclosing
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mnemex import (
    ActorClosed,
    ActorCrashed,
    Busy,
    CorruptData,
    InvalidInput,
    MnemexError,
    ModelError,
    NotFound,
    StorageError,
    Timeout,
    TooLarge,
)

__all__ = [
    "HttpError",
    "check_token",
    "error_response",
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


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_encoder.encode(body), status_code=status, media_type="application/json",
                    headers=headers)


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
        headers = {"Retry-After": "1"} if status == 503 else None
        return json_response(body, status, headers)
    raise exc


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) past ``limit`` bytes without reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"request body is {int(declared):,} bytes; the limit is {limit:,} "
                             f"(server.max_body_bytes)")
    chunks: list[bytes] = []
    size = 0
    async with aclosing(request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise HttpError(413, f"request body is over the limit of {limit:,} bytes "
                                     f"(server.max_body_bytes)")
            chunks.append(chunk)
    return b"".join(chunks)


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


async def read_json(request: Request, type_: type[T], limit: int) -> T:
    """Decode the body as ``type_``: malformed JSON is 400, a body of the wrong
    shape (wrong type, missing or unknown field) is 422 naming the field."""
    body = await read_body(request, limit)
    if not body.strip():
        raise HttpError(400, "request body is empty; a JSON object is expected")
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        field = _field(exc)
        raise HttpError(422, f"invalid request body: {exc}", field=field) from exc
    except msgspec.DecodeError as exc:
        raise HttpError(400, f"request body is not valid JSON: {exc}") from exc


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
