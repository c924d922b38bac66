"""Speed beside each framework's own default backend (issue 21's bars), in one run:
ADK memory search (bench/integrations_adk.py) and LangGraph's store and
checkpointer (bench/integrations_langgraph.py), each with its own defaults. A
framework whose package is not installed is reported as skipped.

Run: python bench/integrations.py

Each part prints its table and writes its own JSON; this writes the bars of all of
them to bench/results/integrations.json and exits 1 when a bar is missed.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.append(str(_BENCH))

from _common import machine, table, write_results  # noqa: E402

PARTS = {"ADK": "integrations_adk", "LangGraph": "integrations_langgraph"}


def bars_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A part's bars: its ``bar`` (one) or ``bars`` (several), each {"text", "ok"}."""
    if "bars" in report:
        bars = report["bars"]
        return list(bars.values()) if isinstance(bars, dict) else list(bars)
    return [report["bar"]] if "bar" in report else []


def main() -> None:
    results: dict[str, Any] = {"machine": machine(), "parts": {}}
    rows: list[list[str]] = []
    for framework, module_name in PARTS.items():
        print(f"\n== {framework} ({module_name}.py)", flush=True)
        try:
            module = importlib.import_module(module_name)
            report = module.run(module.parser().parse_args([]))
        except ImportError as exc:
            print(f"skipped: {exc}")
            results["parts"][framework] = {"skipped": str(exc)}
            rows.append([framework, f"skipped ({exc.name or exc})", "-"])
            continue
        results["parts"][framework] = report
        rows += [[framework, bar["text"], "ok" if bar["ok"] else "MISSED"] for bar in bars_of(report)]
    print()
    print(table(["framework", "bar", "verdict"], rows))
    path = write_results("integrations", results)
    print(f"wrote {path}")
    if any(row[2] == "MISSED" for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
