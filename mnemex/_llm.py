"""LLMClient: the one client mnemex has for OpenAI-compatible chat completions
(OpenAI, vLLM, Ollama, llama.cpp's server...), used by the LLM summarizer and the
LLM fact extractor.

It is synchronous and meant for worker threads beside the actors: each call opens
an httpx client (imported on first use, so mnemex without an LLM never loads it),
posts to ``{base_url}/chat/completions`` and closes it. Failures are retried a
bounded number of times with a short exponential backoff, and whatever still fails
raises ``LLMCallError`` with a ``reason`` and a message naming the URL and what
happened.

Structured output is asked for the strongest way the server takes: a JSON Schema
(``response_format: json_schema``), else plain JSON mode (``json_object``), else
nothing (the prompt alone asks for JSON). A server that refuses a mode is not asked
that way again by the same client.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import msgspec

from mnemex.errors import InvalidInput, ModelError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "Completion",
    "LLMCallError",
    "LLMClient",
    "LLMSettings",
    "ResponseFormat",
    "TokenUsage",
    "client_from_config",
]

ResponseFormat = Literal["json_schema", "json_object", "none"]
_MODES: Final[tuple[ResponseFormat, ...]] = ("json_schema", "json_object", "none")

CallFailure = Literal["timeout", "unreachable", "http", "malformed"]

_MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""Largest answer read; a chat completion is a few KiB, so more is a broken server."""
_BACKOFF_CAP: Final = 4.0
"""Longest wait between two attempts, in seconds (also for a 429's Retry-After)."""
# what a server says when it does not take a response_format (OpenAI, vLLM, llama.cpp, Ollama...)
_REFUSAL_WORDS: Final = ("response_format", "json_schema", "json_object", "structured output",
                         "not supported")

_sleep = time.sleep  # the backoff's wait (a test replaces it)

ENV_BASE_URL: Final = "MNEMEX_LLM_BASE_URL"
ENV_MODEL: Final = "MNEMEX_LLM_MODEL"
ENV_API_KEY: Final = "MNEMEX_LLM_API_KEY"


class LLMCallError(ModelError):
    """Raised when a chat completion could not be had. ``reason``: ``timeout`` (every
    attempt ran out of time), ``unreachable`` (no connection, or it broke), ``http``
    (an error status, after the retries a 5xx or 429 gets) or ``malformed`` (an answer
    that is not a chat completion with ``choices[0].message.content``). ``url`` is the
    endpoint, ``status`` the last HTTP status (None without one), ``detail`` what
    happened, as the message says it after the URL."""

    def __init__(self, url: str, detail: str, *, reason: CallFailure, status: int | None = None) -> None:
        super().__init__(f"LLM endpoint {url} {detail}")
        self.url = url
        self.detail = detail
        self.reason: CallFailure = reason
        self.status = status


class TokenUsage(msgspec.Struct, frozen=True, omit_defaults=True):
    """Tokens one chat completion used, as the server reported them (0: not reported)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """One answer: its ``text`` (``choices[0].message.content``, as given), why it
    ended (``finish_reason``: ``stop``, ``length``... or None when not said), the
    ``usage`` reported, the ``model`` that answered (the one asked when the server
    does not say) and the ``response_format`` the request carried."""

    text: str
    finish_reason: str | None
    usage: TokenUsage
    model: str
    response_format: ResponseFormat


class _Message(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _Message | None = None
    finish_reason: str | None = None


class _Answer(msgspec.Struct):
    choices: list[_Choice] = msgspec.field(default_factory=list)
    usage: dict[str, Any] | None = None
    model: str | None = None


_decode_answer: Final = msgspec.json.Decoder(_Answer)


class _Retryable(Exception):
    """One attempt failed in a way the next attempt may not (internal)."""

    def __init__(self, detail: str, reason: CallFailure, status: int | None = None,
                 wait: float | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.reason: CallFailure = reason
        self.status = status
        self.wait = wait


class LLMClient:
    """A client of one OpenAI-compatible chat completions endpoint.

    ``base_url`` is the API root as OpenAI clients take it (``https://api.openai.com/v1``,
    ``http://127.0.0.1:11434/v1``); requests go to ``{base_url}/chat/completions``.
    The API key is read from the environment variable ``api_key_env`` at each call;
    when it is unset or empty no ``authorization`` header is sent (local servers).
    ``timeout`` bounds each attempt in seconds (connecting, sending and reading the
    whole answer); ``retries`` more attempts follow a timeout, a connection error or
    a 5xx/429 answer, after ``backoff`` seconds doubling per attempt (at most 4 s; a
    429's Retry-After is honoured up to that). ``headers`` go with every request;
    ``temperature`` is sent as given; ``transport`` replaces httpx's (tests).

    Thread-safe: one client may serve many worker threads at once.
    """

    def __init__(self, *, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 60.0, retries: int = 2, headers: Mapping[str, str] | None = None,
                 temperature: float = 0.0, backoff: float = 0.25,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise InvalidInput(f"LLM base_url must be an http(s) URL, got {base_url!r}", field="base_url")
        if not model.strip():
            raise InvalidInput("LLM model is empty; name the model the endpoint serves", field="model")
        if not timeout > 0:
            raise InvalidInput(f"LLM timeout must be > 0 seconds, got {timeout!r}", field="timeout")
        if retries < 0:
            raise InvalidInput(f"LLM retries must be >= 0, got {retries!r}", field="retries")
        if not backoff >= 0:
            raise InvalidInput(f"LLM backoff must be >= 0 seconds, got {backoff!r}", field="backoff")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.retries = retries
        self.headers = dict(headers or {})
        self.temperature = temperature
        self.backoff = backoff
        self._transport = transport
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None
        self._first_mode = 0  # index into _MODES: the strongest response_format not refused yet

    def __repr__(self) -> str:
        return f"LLMClient(url={self.url!r}, model={self.model!r})"

    @property
    def response_format(self) -> ResponseFormat:
        """The response_format a call with a JSON Schema starts with: ``json_schema``
        until the server refused it, then what it took instead."""
        return _MODES[self._first_mode]

    def complete(self, messages: Sequence[Mapping[str, Any]], *, json_schema: Mapping[str, Any] | None = None,
                 max_tokens: int | None = None, schema_name: str = "answer") -> Completion:
        """One chat completion of ``messages`` (OpenAI chat messages). With
        ``json_schema``, structured output is asked for (see the module doc) under
        ``schema_name``; ``max_tokens`` caps the answer. Raises LLMCallError."""
        modes = _MODES[self._first_mode:] if json_schema is not None else ("none",)
        headers = self._request_headers()
        client = self._client()  # one for every call: its connections and TLS context are reused
        for mode in modes:
            payload = self._payload(messages, mode, json_schema, schema_name, max_tokens)
            status, body = self._post(client, payload, headers)
            if status < 400:
                return self._completion(body, mode)
            text = body[:2000].decode("utf-8", "replace")
            if mode != "none" and status in (400, 422) and _is_refusal(text):
                self._refused(mode)
                continue
            raise LLMCallError(self.url, f"answered {status}: {text[:200]!r}", reason="http",
                               status=status)
        raise AssertionError("unreachable: the last mode sends no response_format")  # pragma: no cover

    def _client(self) -> httpx.Client:
        """The httpx client every call of this LLMClient shares (made on first use;
        httpx's connection pool is thread-safe)."""
        import httpx

        with self._lock:
            if self._http is None:
                timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))
                self._http = httpx.Client(timeout=timeout, transport=self._transport)
            return self._http

    def close(self) -> None:
        """Close the shared connections (a later call opens new ones)."""
        with self._lock:
            http, self._http = self._http, None
        if http is not None:
            http.close()

    # -- one request, retried ------------------------------------------------------------
    def _post(self, client: httpx.Client, payload: dict[str, Any],
              headers: dict[str, str]) -> tuple[int, bytes]:
        """(status, body) of the first attempt that is not retryable; raises
        LLMCallError when every attempt was."""
        attempts = self.retries + 1
        failure: _Retryable | None = None
        for attempt in range(attempts):
            if failure is not None:
                wait = self.backoff * 2 ** (attempt - 1) if failure.wait is None else failure.wait
                _sleep(min(wait, _BACKOFF_CAP))
            try:
                return self._attempt(client, payload, headers)
            except _Retryable as exc:
                failure = exc
        assert failure is not None
        counted = f" ({attempts} attempt{'s' if attempts > 1 else ''})"
        raise LLMCallError(self.url, failure.detail + counted, reason=failure.reason, status=failure.status)

    def _attempt(self, client: httpx.Client, payload: dict[str, Any],
                 headers: dict[str, str]) -> tuple[int, bytes]:
        import httpx

        deadline = time.monotonic() + self.timeout
        try:
            with client.stream("POST", self.url, json=payload, headers=headers) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:  # a server trickling bytes still has one bound
                        raise _Retryable(f"timed out after {self.timeout:g} s (reading the answer)",
                                         "timeout")
                    if len(body) > _MAX_BODY_BYTES:
                        raise LLMCallError(self.url, f"answered more than {_MAX_BODY_BYTES:,} bytes; "
                                           "a chat completion is far smaller", reason="malformed",
                                           status=response.status_code)
                status = response.status_code
                retry_after = response.headers.get("retry-after")
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timed out after {self.timeout:g} s ({type(exc).__name__})", "timeout") from exc
        except httpx.TransportError as exc:
            raise _Retryable(f"could not be reached, request failed: {exc!r}", "unreachable") from exc
        if status >= 500 or status == 429:
            text = bytes(body[:200]).decode("utf-8", "replace")
            raise _Retryable(f"answered {status}: {text!r}", "http", status,
                             _seconds(retry_after) if status == 429 else None)
        return status, bytes(body)

    # -- what is sent and what comes back ------------------------------------------------
    def _request_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json", **self.headers}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["authorization"] = f"Bearer {key}"
        return headers

    def _payload(self, messages: Sequence[Mapping[str, Any]], mode: ResponseFormat,
                 schema: Mapping[str, Any] | None, schema_name: str,
                 max_tokens: int | None) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages],
                                   "temperature": self.temperature}
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if mode == "json_schema":
            payload["response_format"] = {"type": "json_schema", "json_schema": {
                "name": schema_name, "schema": dict(schema or {}), "strict": False}}
        elif mode == "json_object":
            payload["response_format"] = {"type": "json_object"}
        return payload

    def _completion(self, body: bytes, mode: ResponseFormat) -> Completion:
        try:
            answer = _decode_answer.decode(body)
        except msgspec.DecodeError as exc:
            raise LLMCallError(self.url, f"gave an answer without choices[0].message.content (it is not "
                               f"a chat completion: {exc}): {body[:200].decode('utf-8', 'replace')!r}",
                               reason="malformed") from exc
        choice = answer.choices[0] if answer.choices else None
        if choice is None or choice.message is None or choice.message.content is None:
            raise LLMCallError(self.url, f"gave an answer without choices[0].message.content: "
                               f"{body[:200].decode('utf-8', 'replace')!r}", reason="malformed")
        return Completion(text=choice.message.content, finish_reason=choice.finish_reason,
                          usage=_usage(answer.usage), model=answer.model or self.model, response_format=mode)

    def _refused(self, mode: ResponseFormat) -> None:
        with self._lock:
            self._first_mode = max(self._first_mode, _MODES.index(mode) + 1)


def _is_refusal(body: str) -> bool:
    lowered = body.lower()
    return any(word in lowered for word in _REFUSAL_WORDS)


def _seconds(value: str | None) -> float | None:
    """A Retry-After given in seconds (an HTTP date is not worth honouring here)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


def _usage(reported: Mapping[str, Any] | None) -> TokenUsage:
    counts: dict[str, int] = {}
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = (reported or {}).get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 2**53:
            counts[name] = int(value)
    if "total_tokens" not in counts and counts:
        counts["total_tokens"] = counts.get("prompt_tokens", 0) + counts.get("completion_tokens", 0)
    return TokenUsage(**counts)


# -- built from configuration ---------------------------------------------------------------
class LLMSettings(Protocol):
    """What ``client_from_config`` reads (``mnemex.config.LLMConfig`` has it)."""

    @property
    def base_url(self) -> str | None: ...
    @property
    def model(self) -> str: ...
    @property
    def api_key_env(self) -> str: ...
    @property
    def timeout(self) -> float: ...
    @property
    def retries(self) -> int: ...
    @property
    def temperature(self) -> float: ...


def client_from_config(settings: LLMSettings, *, headers: Mapping[str, str] | None = None,
                       transport: httpx.BaseTransport | None = None) -> LLMClient | None:
    """The client ``settings`` (the ``llm`` config section) describe, with the
    environment over them: ``MNEMEX_LLM_BASE_URL`` and ``MNEMEX_LLM_MODEL`` replace
    ``base_url`` and ``model``; when ``MNEMEX_LLM_API_KEY`` is set, the key is read
    from it (at each call) instead of from ``api_key_env``. None when no base URL is
    given either way: there is no endpoint to call."""
    base_url = os.environ.get(ENV_BASE_URL) or settings.base_url
    if not base_url:
        return None
    if not base_url.startswith(("http://", "https://")):
        where = ENV_BASE_URL if os.environ.get(ENV_BASE_URL) else "config.llm.base_url"
        raise InvalidInput(f"{where} must be an http(s) URL, got {base_url!r}", field="llm.base_url")
    return LLMClient(base_url=base_url, model=os.environ.get(ENV_MODEL) or settings.model,
                     api_key_env=ENV_API_KEY if os.environ.get(ENV_API_KEY) else settings.api_key_env,
                     timeout=settings.timeout, retries=settings.retries, temperature=settings.temperature,
                     headers=headers, transport=transport)
