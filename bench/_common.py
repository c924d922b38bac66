"""Helpers every benchmark shares: the LoCoMo dev set, percentiles, resident memory,
plain-text tables, the machine's description and the JSON written to bench/results/.
Each script imports them from here (``tests/test_bench_scripts.py`` checks that no
script defines one of them again).

The LoCoMo file is read from ../shared/data/locomo-dev.json at run time (its
licence allows evaluation only; it is never copied into the repository).
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import re
import resource
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOCOMO = ROOT.parent / "shared" / "data" / "locomo-dev.json"
RESULTS = Path(__file__).resolve().parent / "results"
RETRIEVAL_CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
SESSION_TIME = "%I:%M %p on %d %B, %Y"


# -- LoCoMo ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Turn:
    """One dialogue turn: ``key`` is ``"<sample_id>/<dia_id>"``, unique in the file."""

    sample_id: str
    dia_id: str
    session: str
    speaker: str
    text: str
    timestamp: float | None

    @property
    def key(self) -> str:
        return f"{self.sample_id}/{self.dia_id}"

    @property
    def memory(self) -> str:
        """The memory text of the turn, as every benchmark stores it."""
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True, slots=True)
class Question:
    """A question of categories 1-4 with its evidence as turn keys (normalised;
    ids that name no turn are dropped)."""

    sample_id: str
    text: str
    category: int
    evidence: frozenset[str]


def load_locomo(path: Path = LOCOMO) -> list[dict[str, Any]]:
    if not path.exists():
        raise SystemExit(f"LoCoMo dev set not found at {path} (it is read from ../shared/data/)")
    data: list[dict[str, Any]] = json.loads(path.read_text())
    return data


def locomo_turns(conversation: dict[str, Any]) -> list[Turn]:
    """The turns of one conversation in order, with their session's time."""
    body = conversation["conversation"]
    out = []
    for key, value in body.items():
        if not (key.startswith("session_") and isinstance(value, list)):
            continue
        when = body.get(f"{key}_date_time")
        stamp = datetime.strptime(when, SESSION_TIME).replace(tzinfo=UTC).timestamp() if when else None
        out.extend(Turn(conversation["sample_id"], turn["dia_id"], key, turn["speaker"], turn["text"], stamp)
                   for turn in value)
    return out


def evidence_ids(raw: Iterable[str]) -> set[str]:
    """Dialogue ids of an evidence list, normalised: ``"D:11:26"`` -> ``D11:26`` and
    ``"D8:6; D9:17"`` split in two; pieces that are no dialogue id are dropped."""
    out = set()
    for item in raw:
        for piece in re.split(r"[;,]\s*", item):
            match = re.fullmatch(r"D:?(\d+):(\d+)", piece.strip())
            if match:
                out.add(f"D{match.group(1)}:{match.group(2)}")
    return out


def locomo_questions(conversations: list[dict[str, Any]]) -> list[Question]:
    """Questions of categories 1-4 whose evidence names at least one known turn."""
    out = []
    for conversation in conversations:
        sample = conversation["sample_id"]
        known = {turn.dia_id for turn in locomo_turns(conversation)}
        for qa in conversation["qa"]:
            if qa.get("category") not in RETRIEVAL_CATEGORIES:
                continue
            evidence = evidence_ids(qa.get("evidence", [])) & known
            if evidence:
                out.append(Question(sample, qa["question"], int(qa["category"]),
                                    frozenset(f"{sample}/{dia}" for dia in evidence)))
    return out


def fts5_match(text: str) -> str:
    """An FTS5 MATCH expression for a question: its words minus the English stop
    words mnemex's full-text search drops, each quoted, OR-ed ("" when none)."""
    from mnemex.index import ENGLISH_STOP_WORDS, words

    terms = dict.fromkeys(w for w in words(text) if w not in ENGLISH_STOP_WORDS)
    return " OR ".join(f'"{term}"' for term in terms)


# -- numbers ------------------------------------------------------------------------------------
WORDS = ["memory", "agent", "context", "java", "lisbon", "budget", "flat", "office", "weather", "tool",
         "result", "summary", "token", "window", "session", "user", "assistant", "decision", "number",
         "plan", "march", "invoice", "flight", "tea", "cello", "sister", "garden", "train", "berlin"]


def texts(count: int, seed: int) -> list[str]:
    """``count`` short synthetic memories over ``WORDS`` (the same for the same seed)."""
    rng = random.Random(seed)
    return [f"The user {rng.choice(['likes', 'wrote', 'planned', 'booked', 'forgot'])} "
            + " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))) for _ in range(count)]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def latency_summary(samples_ms: Sequence[float]) -> dict[str, float | int]:
    return {"p50": percentile(samples_ms, 0.5), "p99": percentile(samples_ms, 0.99),
            "mean": sum(samples_ms) / len(samples_ms) if samples_ms else float("nan"),
            "n": len(samples_ms)}


def rss_bytes() -> int:
    """Resident memory of this process now."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return int(psutil.Process().memory_info().rss)


def peak_rss_bytes() -> int:
    """The most resident memory this process has had since it started its program.

    Read from VmHWM: getrusage's ru_maxrss would also count the parent's memory
    the child was forked with (Linux keeps the high-water mark across exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * 1024 if sys.platform != "darwin" else peak


class TreeRss:
    """The resident memory of this process and its children (mnemex's graph helper
    processes) summed, sampled every ``every`` seconds in a thread while running
    (``with TreeRss() as tree: ...``; then ``tree.peak``). A sample can miss a spike
    shorter than ``every``: the peak a caller reports is at least this process's
    own exact high-water mark (``peak_rss_bytes``)."""

    def __init__(self, every: float = 0.02) -> None:
        import threading

        self.every = every
        self.peak = 0
        self.children_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="tree-rss", daemon=True)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _resident(pid: int | str) -> int:
        try:
            with open(f"/proc/{pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return 0  # (a child that just exited)

    @staticmethod
    def _children() -> list[str]:
        pids: list[str] = []
        try:
            for task in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{task}/children") as f:
                    pids.extend(f.read().split())
        except OSError:
            pass
        return pids

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            children = sum(self._resident(pid) for pid in self._children())
            self.children_peak = max(self.children_peak, children)
            self.peak = max(self.peak, rss_bytes() + children)


# -- output -------------------------------------------------------------------------------------
def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, left: int = 1) -> str:
    """A plain-text table: the first ``left`` columns left-aligned, the rest right."""
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [cell.ljust(widths[i]) if i < left else cell.rjust(widths[i]) for i, cell in enumerate(row)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def fmt_num(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def fmt_ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def fmt_ratio(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f}x"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def machine() -> dict[str, Any]:
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "python": platform.python_version(),
            "machine": platform.machine(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "command": "python " + " ".join(shlex.quote(a) for a in [
                os.path.relpath(sys.argv[0], ROOT) if os.path.isabs(sys.argv[0]) else sys.argv[0],
                *sys.argv[1:]])}


def write_results(name: str, report: dict[str, Any]) -> Path:
    """Write ``report`` to bench/results/<name>.json (the folder is gitignored)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return path
