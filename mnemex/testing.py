"""Tools for testing actors: a deterministic simulation of the runtime's delivery
semantics, a small ``counter`` kind the kernel's own tests and benchmarks use, and
``FakeLLM``, an OpenAI-compatible server on 127.0.0.1 answering recorded responses
(for testing extraction, summaries or your own agent without a model), and
``text_pdf``, a PDF with text on its pages, for testing document ingestion.

``Simulation`` runs behaviours sans-io, exactly as the kernel would — per-sender
FIFO, journal of accepted commands through the kind's codec, reload from the
journal after a crash, snapshot + restore — but lets the caller (typically
hypothesis) choose which sender's next message is delivered next. So a later
actor can be property-tested under every interleaving without trio and without
timing luck::

    sim = Simulation([my_kind])
    sim.send("alice", "scope", ("app", "u1"), Remember(...))
    sim.send("bob", "scope", ("app", "u1"), Search(...))
    sim.run(hypothesis_chooser(data))          # data = st.data() drawn in the test
    sim.check_replay("scope", ("app", "u1"))   # journal replay == live state
"""

from __future__ import annotations

import inspect
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

import msgspec
import trio

from mnemex._protocol import Command, JsonCodec
from mnemex.effects import (
    Behaviour,
    Effect,
    Emit,
    Forward,
    Image,
    Job,
    JobResult,
    Key,
    SnapshotData,
    Step,
    Tell,
)
from mnemex.errors import ActorCrashed, InvalidInput
from mnemex.kernel import ActorKind
from mnemex.kernel._turn import take_turn
from mnemex.persistence.snapshot import sidecar_bytes

__all__ = [
    "Add",
    "Crash",
    "Delivered",
    "Done",
    "Entries",
    "Fail",
    "FakeLLM",
    "Get",
    "Simulation",
    "Slow",
    "SlowDone",
    "counter_kind",
    "hypothesis_chooser",
    "text_pdf",
]


# -- the counter kind ------------------------------------------------------------
class Add(Command, frozen=True, tag="counter.add"):
    """Add ``n``; ``sender`` and ``n`` are logged so tests can check order."""

    n: int = 1
    sender: str = ""


class Get(Command, frozen=True, tag="counter.get"):
    """Read the counter: replies (total, log length). Not journaled."""


class Done(Command, frozen=True, tag="counter.done"):
    """Read how many Slow jobs finished. Not journaled."""


class Entries(Command, frozen=True, tag="counter.entries"):
    """Read the whole log of (sender, n). Not journaled."""


class Fail(Command, frozen=True, tag="counter.fail"):
    """Rejected with InvalidInput; the state must not change."""

    message: str = "rejected on purpose"


class Crash(Command, frozen=True, tag="counter.crash"):
    """Mutates the state, then raises RuntimeError: a handler bug. The kernel must
    answer ActorCrashed and keep the last accepted state."""


class Slow(Command, frozen=True, tag="counter.slow"):
    """Starts a job beside the actor that sleeps ``seconds`` (in a thread) or, with
    ``gate`` set, waits for ``SLOW_GATES[gate]`` (a trio.Event, as a task)."""

    seconds: float = 0.0
    gate: str | None = None


class SlowDone(Command, frozen=True, tag="counter.slow_done"):
    """Delivered when a Slow job finished: adds ``n`` to ``done``."""

    label: str = ""


CounterCommand = Add | Get | Done | Entries | Fail | Crash | Slow | SlowDone
_counter_codec: JsonCodec[CounterCommand] = JsonCodec(CounterCommand, "counter command")
_record = msgspec.json.Encoder()
_decode_entry = msgspec.json.Decoder(tuple[str, int])

SLOW_GATES: dict[str, trio.Event] = {}


class Counter:
    """A tiny behaviour: a total and the log of (sender, n) it was built from."""

    def __init__(self, key: Key, log: list[tuple[str, int]] | None = None, done: int = 0) -> None:
        self.key = key
        self.log: list[tuple[str, int]] = log or []
        self.total = sum(n for _, n in self.log)
        self.done = done

    def handle(self, command: Any) -> Any:
        match command:
            case Add(n=n, sender=sender):
                self.log.append((sender, n))
                self.total += n
                return self.total
            case Get():
                return (self.total, len(self.log))
            case Done():
                return self.done
            case Entries():
                return list(self.log)
            case Fail(message=message):
                raise InvalidInput(message, field="message")
            case Crash():
                self.total += 1_000_000
                raise RuntimeError("counter crashed on purpose")
            case Slow(seconds=seconds, gate=gate):
                return Step("started", (Job(_slow_work(seconds, gate), _slow_done, name="counter.slow"),))
            case SlowDone():
                self.done += 1
                return self.done
            case _:
                raise TypeError(f"counter cannot handle {command!r}")

    def snapshot(self) -> SnapshotData:
        log = list(self.log)
        return SnapshotData(records=lambda: [_record.encode(entry) for entry in log],
                            extra={"total": self.total, "done": self.done})

    @classmethod
    def restore(cls, key: Key, image: Image) -> Counter:
        log = [_decode_entry.decode(line) for line in image.records]
        return cls(key, log, int(image.extra.get("done", 0)))


def _slow_work(seconds: float, gate: str | None) -> Callable[[], Any]:
    if gate is not None:
        event = SLOW_GATES.setdefault(gate, trio.Event())

        async def wait_gate() -> str:
            await event.wait()
            return gate

        return wait_gate

    def sleep() -> str:
        time.sleep(seconds)
        return f"slept {seconds}"

    return sleep


def _slow_done(result: JobResult) -> SlowDone:
    return SlowDone(label=str(result.value if result.error is None else result.error))


def counter_kind(name: str = "counter") -> ActorKind:
    """The ``counter`` kind: for tests, examples and the runtime benchmark."""
    return ActorKind(
        name=name,
        create=Counter,
        restore=Counter.restore,
        encode=_counter_codec.encode,
        decode=_counter_codec.decode,
        is_journaled=lambda command: not isinstance(command, Get | Done | Entries),
    )


# -- deterministic simulation ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Delivered:
    """One delivery: who sent what to whom, and the reply or the error."""

    ticket: int
    sender: str
    kind: str
    key: Key
    command: Any
    reply: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class _SimActor:
    behaviour: Behaviour
    journal: list[bytes] = field(default_factory=list)
    image: Image | None = None


class Simulation:
    """The kernel's delivery semantics without trio, in an order the caller picks."""

    def __init__(self, kinds: Iterable[ActorKind]) -> None:
        self.kinds = {kind.name: kind for kind in kinds}
        self.actors: dict[tuple[str, Key], _SimActor] = {}
        self._queues: dict[str, deque[tuple[int, str, Key, Any]]] = {}
        self._tickets = itertools.count()
        self.delivered: list[Delivered] = []
        self.emitted: list[tuple[str, Key, Emit]] = []
        """Every Emit effect, in order, with the kind and key that emitted it."""

    def send(self, sender: str, kind: str, key: Key, command: Any) -> int:
        """Queue ``command``; messages of one sender are delivered in send order."""
        if kind not in self.kinds:
            raise InvalidInput(f"no actor kind {kind!r} in this simulation")
        ticket = next(self._tickets)
        self._queues.setdefault(sender, deque()).append((ticket, kind, key, command))
        return ticket

    @property
    def pending(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    def _actor(self, kind: str, key: Key) -> _SimActor:
        actor = self.actors.get((kind, key))
        if actor is None:
            actor = self.actors[(kind, key)] = _SimActor(self.kinds[kind].create(key))
        return actor

    def step(self, choice: int) -> Delivered:
        """Deliver the next message of the ``choice``-th sender that has one."""
        senders = sorted(name for name, queue in self._queues.items() if queue)
        if not senders:
            raise IndexError("nothing to deliver")
        sender = senders[choice % len(senders)]
        ticket, kind_name, key, command = self._queues[sender].popleft()
        kind = self.kinds[kind_name]
        actor = self._actor(kind_name, key)
        turn = take_turn(kind, actor.behaviour, command)
        if turn.refused:
            result = Delivered(ticket, sender, kind_name, key, command, error=turn.reply)
        elif turn.crash is not None:
            crashed = ActorCrashed(f"{kind_name} {key!r} crashed: {turn.crash!r}")
            crashed.__cause__ = turn.crash
            actor.behaviour = self._rebuild(kind, key, actor)
            result = Delivered(ticket, sender, kind_name, key, command, error=crashed)
        else:
            if turn.payload is not None:
                actor.journal.append(turn.payload)
            result = Delivered(ticket, sender, kind_name, key, command, reply=turn.reply)
            self._perform(kind_name, key, turn.effects)
        self.delivered.append(result)
        return result

    def _perform(self, kind: str, key: Key, effects: tuple[Effect, ...]) -> None:
        """Perform effects. A Forward is delivered like a Tell and a Job's result like
        any other: the simulation records replies per delivery, not per caller."""
        me = f"{kind}:{'/'.join(key)}"
        for effect in effects:
            if isinstance(effect, Emit):
                self.emitted.append((kind, key, effect))
            elif isinstance(effect, Tell | Forward):
                self.send(me, effect.kind, effect.key, effect.command)
            else:
                try:
                    work = effect.work
                    value = trio.run(work) if _is_coroutine_function(work) else work()
                    result = JobResult(value=value)
                except Exception as exc:
                    result = JobResult(error=exc)
                self.send(f"job:{me}:{effect.name}", kind, key, effect.deliver(result))

    def run(self, choose: Callable[[int], int], *, limit: int = 100_000) -> list[Delivered]:
        """Deliver until nothing is pending; ``choose(n)`` picks among n senders."""
        out: list[Delivered] = []
        while self.pending and len(out) < limit:
            senders = sum(1 for queue in self._queues.values() if queue)
            out.append(self.step(choose(senders)))
        return out

    def _rebuild(self, kind: ActorKind, key: Key, actor: _SimActor) -> Behaviour:
        behaviour = kind.create(key) if actor.image is None else kind.restore(key, actor.image)
        kind.replay(behaviour, (kind.decode(payload) for payload in actor.journal))
        return behaviour

    def snapshot(self, kind: str, key: Key) -> None:
        """Snapshot the actor and cut its journal, as the kernel does."""
        actor = self._actor(kind, key)
        data = actor.behaviour.snapshot()
        records = list(data.records() if callable(data.records) else data.records)
        sidecars = data.sidecars() if callable(data.sidecars) else (data.sidecars or {})
        blobs = {name: sidecar_bytes(blob) for name, blob in sidecars.items()}
        actor.image = Image(records, dict(data.extra), blobs)
        if data.done is not None:
            data.done()
        actor.journal.clear()

    def restart(self, kind: str, key: Key) -> None:
        """Drop the live behaviour and rebuild it from snapshot + journal."""
        actor = self._actor(kind, key)
        actor.behaviour = self._rebuild(self.kinds[kind], key, actor)

    def state_lines(self, kind: str, key: Key) -> tuple[list[bytes], dict[str, Any]]:
        data = self._actor(kind, key).behaviour.snapshot()
        records = list(data.records() if callable(data.records) else data.records)
        return records, dict(data.extra)

    def check_replay(self, kind: str, key: Key) -> None:
        """Assert that snapshot + journal replay gives the live state, line for line."""
        actor = self._actor(kind, key)
        rebuilt = self._rebuild(self.kinds[kind], key, actor)
        live = self.state_lines(kind, key)
        data = rebuilt.snapshot()
        again = (list(data.records() if callable(data.records) else data.records), dict(data.extra))
        if live != again:
            raise AssertionError(f"{kind} {key!r}: replay differs from live state:\n{live}\n{again}")


def _is_coroutine_function(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn)


def hypothesis_chooser(data: Any) -> Callable[[int], int]:
    """A ``choose`` for Simulation.run that lets hypothesis pick (and shrink) the
    delivery order; ``data`` is the object drawn from ``st.data()``."""
    from hypothesis import strategies as st

    def choose(n: int) -> int:
        return int(data.draw(st.integers(0, max(n - 1, 0)), label="deliver"))

    return choose


# -- a fake OpenAI-compatible endpoint -----------------------------------------------
Match = str | Callable[[dict[str, Any]], bool]
"""What a recorded answer answers: a substring of the request's last user message,
or a test of the whole request body (its decoded JSON)."""

_MAX_FAKE_BODY: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Recorded:
    match: Match
    content: str
    usage: Mapping[str, int] | None
    finish_reason: str


class FakeLLM:
    """An OpenAI-compatible chat completions server for tests: real HTTP on
    127.0.0.1 (an ephemeral port, loopback only), answering from recorded responses,
    so an agent, an extractor or a summarizer can be tested without a model::

        with FakeLLM() as llm:
            llm.add("I live in Berlin", {"facts": [{"content": "The user lives in Berlin."}]})
            client = openai.OpenAI(base_url=llm.base_url, api_key="x")  # http://127.0.0.1:PORT/v1
            ...  # your agent, or mnemex's extractor, calls the model
            assert llm.calls == 1 and "Berlin" in str(llm.requests[0]["messages"])

    ``POST /v1/chat/completions`` (also ``/chat/completions``) answers, in this order
    of precedence: a refused ``response_format`` (``refuse_schema``), a queued
    failure (``fail``), a queued malformed answer (``malformed``), the first recorded
    answer whose match fits (``add``), else ``default`` (``{"facts": []}``: nothing to
    extract). ``slow`` delays every answer. ``GET /v1/models`` lists ``model``.
    ``requests`` holds the bodies received (``headers`` their headers), ``calls``
    counts them. The server stops
    when the ``with`` block ends (or on ``close``)."""

    def __init__(self, *, model: str = "fake-llm", default: str | Any = '{"facts": []}') -> None:
        self.model = model
        self.default = _as_content(default)
        self._recorded: list[_Recorded] = []
        self._failures: deque[tuple[int, bytes]] = deque()
        self._malformed: deque[str] = deque()
        self._refused: set[str] = set()
        self._delay = 0.0
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: _FakeServer | None = None
        self._thread: threading.Thread | None = None

    # -- what it answers -------------------------------------------------------------
    def add(self, match: Match, content: str | Any, *, usage: Mapping[str, int] | None = None,
            finish_reason: str = "stop") -> None:
        """Answer ``content`` (a string as it is, anything else JSON-encoded) to every
        request ``match`` fits, with ``usage`` (estimated from the lengths when None)
        and ``finish_reason``. Earlier recordings win over later ones."""
        if isinstance(match, str) and not match:
            raise InvalidInput("FakeLLM.add: an empty match fits every request; set default instead")
        with self._lock:
            self._recorded.append(_Recorded(match, _as_content(content), usage, finish_reason))

    def slow(self, seconds: float) -> None:
        """Wait ``seconds`` before every answer from now on (0: answer at once)."""
        if not seconds >= 0:
            raise InvalidInput(f"FakeLLM.slow takes seconds >= 0, got {seconds!r}")
        self._delay = float(seconds)

    def fail(self, status: int, times: int = 1, *, body: str | None = None) -> None:
        """Answer the next ``times`` requests with HTTP ``status`` (and ``body``, an
        OpenAI-style error object by default)."""
        if not 400 <= status <= 599:
            raise InvalidInput(f"FakeLLM.fail takes an error status (400 to 599), got {status!r}")
        payload = body.encode() if body is not None else msgspec.json.encode(
            {"error": {"message": f"fake failure {status}", "type": "server_error" if status >= 500
                       else "invalid_request_error"}})
        with self._lock:
            self._failures.extend([(status, payload)] * times)

    def malformed(self, text: str, times: int = 1) -> None:
        """Answer the next ``times`` requests with ``text`` as the model's content (a
        well-formed chat completion whose content is not what was asked)."""
        with self._lock:
            self._malformed.extend([text] * times)

    def refuse_schema(self, *, json_object: bool = False) -> None:
        """Answer 400 to every request asking for ``response_format`` ``json_schema``
        (and ``json_object`` too when ``json_object``), as servers without structured
        output do."""
        with self._lock:
            self._refused.add("json_schema")
            if json_object:
                self._refused.add("json_object")

    @classmethod
    def from_recording(cls, path: str | os.PathLike[str], **options: Any) -> FakeLLM:
        """A FakeLLM answering what a JSONL file recorded, one answer a line:
        ``{"match": "substring of the last user message", "content": "..." or {...},
        "usage": {...}, "finish_reason": "stop"}``; a line without ``match`` sets the
        default answer. Blank lines are skipped."""
        fake = cls(**options)
        with open(path, "rb") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    entry = _decode_recorded.decode(line)
                except msgspec.DecodeError as exc:
                    raise InvalidInput(f"{os.fspath(path)}:{number}: not a recorded answer ({exc})") from exc
                if entry.match is None:
                    fake.default = _as_content(entry.content)
                else:
                    fake.add(entry.match, entry.content, usage=entry.usage, finish_reason=entry.finish_reason)
        return fake

    # -- what it saw --------------------------------------------------------------------
    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat completion requests received, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The HTTP headers of those requests (names in lower case), in order."""
        with self._lock:
            return list(self._headers)

    @property
    def calls(self) -> int:
        """How many chat completion requests were received."""
        with self._lock:
            return len(self._requests)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the API root to give a client."""
        if self._server is None:
            raise RuntimeError("FakeLLM is not running; use it as a context manager (with FakeLLM() as llm)")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # -- running ------------------------------------------------------------------------
    def start(self) -> FakeLLM:
        """Start serving (``with`` does it); returns self."""
        if self._server is not None:
            raise RuntimeError("FakeLLM is already running")
        self._closing.clear()
        server = _FakeServer(("127.0.0.1", 0), _FakeHandler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True,
                                        name="mnemex-fake-llm")
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; answers still waiting (``slow``) are given up."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._closing.set()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.base_url if self._server is not None else "not running"
        return f"FakeLLM({where}, {len(self._recorded)} recorded, {self.calls} calls)"

    def _answer(self, request: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
        """(status, body) for one request; records it."""
        with self._lock:
            self._requests.append(request)
            self._headers.append(headers)
            wanted = request.get("response_format")
            kind = wanted.get("type") if isinstance(wanted, dict) else None
            if kind in self._refused:
                return 400, msgspec.json.encode({"error": {
                    "message": f"response_format of type {kind} is not supported by this model",
                    "type": "invalid_request_error", "param": "response_format"}})
            if self._failures:
                return self._failures.popleft()
            if self._malformed:
                return 200, msgspec.json.encode(self._completion(
                    request, _Recorded("", self._malformed.popleft(), None, "stop")))
            candidates = list(self._recorded)
        said = _last_user_text(request)  # a match may be the test's own code: never run it under the lock
        recorded = next((r for r in candidates if _fits(r.match, said, request)),
                        _Recorded("", self.default, None, "stop"))
        return 200, msgspec.json.encode(self._completion(request, recorded))

    def _completion(self, request: dict[str, Any], recorded: _Recorded) -> dict[str, Any]:
        """The chat completion answering ``request`` with ``recorded`` (no lock needed)."""
        if recorded.usage is not None:
            usage = dict(recorded.usage)
        else:  # about four characters a token, as tokenizers go for English
            prompt = sum(len(_text_of(m.get("content"))) for m in request.get("messages") or ()
                         if isinstance(m, dict)) // 4 + 1
            completion = len(recorded.content) // 4 + 1
            usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}
        return {"id": f"chatcmpl-fake-{id(request):x}", "object": "chat.completion",
                "created": int(time.time()),
                "model": request.get("model") or self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": recorded.content},
                             "finish_reason": recorded.finish_reason}],
                "usage": usage}


class _RecordedLine(msgspec.Struct):
    content: Any
    match: str | None = None
    usage: dict[str, int] | None = None
    finish_reason: str = "stop"


_decode_recorded: Final = msgspec.json.Decoder(_RecordedLine)


def _fits(match: Match, said: str, request: dict[str, Any]) -> bool:
    return match in said if isinstance(match, str) else bool(match(request))


def _as_content(content: Any) -> str:
    return content if isinstance(content, str) else msgspec.json.encode(content).decode()


def _text_of(content: Any) -> str:
    """The text of a chat message's content: a string, or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _last_user_text(request: dict[str, Any]) -> str:
    messages = request.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many clients at once (socketserver's default backlog is 5)
    fake: FakeLLM


class _FakeHandler(BaseHTTPRequestHandler):
    server: _FakeServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test's output is not the place for an access log."""

    def do_GET(self) -> None:
        if self.path.split("?")[0].rstrip("/") in ("/v1/models", "/models"):
            fake = self.server.fake
            self._reply(200, msgspec.json.encode({"object": "list", "data": [
                {"id": fake.model, "object": "model", "owned_by": "mnemex-testing"}]}))
        else:
            self._reply(404, b'{"error": {"message": "no such route"}}')

    def do_POST(self) -> None:
        fake = self.server.fake
        if self.path.split("?")[0].rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._reply(404, b'{"error": {"message": "no such route"}}')
            return
        try:
            length = int(self.headers.get("content-length", ""))
        except ValueError:
            self._reply(411, b'{"error": {"message": "content-length required"}}')
            return
        if not 0 <= length <= _MAX_FAKE_BODY:
            self._reply(413, b'{"error": {"message": "request body too large"}}')
            return
        try:
            request = msgspec.json.decode(self.rfile.read(length))
        except msgspec.DecodeError:
            self._reply(400, b'{"error": {"message": "the body is not JSON"}}')
            return
        if not isinstance(request, dict):
            self._reply(400, b'{"error": {"message": "the body is not a JSON object"}}')
            return
        status, body = fake._answer(request, {name.lower(): value for name, value in self.headers.items()})
        if fake._delay and fake._closing.wait(fake._delay):
            return  # closing: the client gets no answer, as from a server going away
        self._reply(status, body)

    def _reply(self, status: int, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (a timeout under test): nobody is left to answer


# -- documents ----------------------------------------------------------------------------------
def _pdf_string(text: str) -> bytes:
    try:
        data = text.encode("cp1252")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"text_pdf writes Windows-1252 text only: {text[exc.start:exc.end]!r} is not",
                           field="pages") from None
    return b"(" + data.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def text_pdf(pages: Iterable[Iterable[str]], *, title: str | None = None, font_size: int = 11) -> bytes:
    """A PDF whose pages hold ``pages``, each a list of lines (Windows-1252 text),
    set in Helvetica from the top of a US-letter page, with ``title`` in its
    metadata: what document ingestion is tested and measured on. Written here, byte
    by byte (PDF 1.4, one content stream per page, a cross-reference table), so
    tests need no PDF library beyond the reader under test. Keep to about 50 lines
    of 90 characters a page for the text to stay on it."""
    objects: list[bytes] = [b"", b""]  # the catalog and the page tree, written last
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids: list[int] = []
    leading = round(font_size * 1.3)
    for lines in pages:
        ops = [b"BT /F1 %d Tf %d TL 72 756 Td" % (font_size, leading)]
        ops += [_pdf_string(line) + b" Tj T*" for line in lines]
        ops.append(b"ET")
        stream = b"\n".join(ops)
        objects.append(b"<< /Length %d >>\nstream\n%b\nendstream" % (len(stream), stream))
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (len(objects),))
        kids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%b] /Count %d >>" % (b" ".join(b"%d 0 R" % kid for kid in kids),
                                                              len(kids))
    trailer = b"<< /Size %d /Root 1 0 R" % (len(objects) + (2 if title else 1))
    if title:
        objects.append(b"<< /Title %b >>" % _pdf_string(title))
        trailer += b" /Info %d 0 R" % len(objects)
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%b\nendobj\n" % (number, body)
    start = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % start
    return bytes(out)
