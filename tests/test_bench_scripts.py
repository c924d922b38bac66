"""Every benchmark goes through bench/_common.py for what the scripts share: it
imports from it and never defines one of its helpers again. bench/http.py's
stream client, wrk reader and the whole script (a smoke run, when wrk is here)
are checked too."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "_common.py")


def shared_helpers() -> set[str]:
    tree = ast.parse((BENCH / "_common.py").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)
            and not node.name.startswith("_")}


def problems(source: str, shared: set[str]) -> list[str]:
    tree = ast.parse(source)
    found = []
    if not any(isinstance(node, ast.ImportFrom) and node.module == "_common" for node in ast.walk(tree)):
        found.append("does not import from _common")
    found += [f"defines {node.name} again" for node in tree.body
              if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in shared]
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_a_bench_script_uses_the_shared_helpers(script: Path) -> None:
    assert problems(script.read_text(), shared_helpers()) == []


def test_the_check_finds_a_copied_helper_and_a_missing_import() -> None:
    shared = shared_helpers()
    assert {"percentile", "rss_bytes", "write_results", "machine"} <= shared
    copied = "import json\n\ndef percentile(values, q):\n    return sorted(values)[0]\n"
    assert problems(copied, shared) == ["does not import from _common", "defines percentile again"]


# -- bench/http.py ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bench_http() -> Iterator[ModuleType]:
    """bench/http.py as a module (its name would shadow the standard library's http)."""
    pytest.importorskip("httptools")
    saved = sys.path[:]
    spec = importlib.util.spec_from_file_location("bench_http", BENCH / "http.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_http"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path[:] = saved
        del sys.modules["bench_http"]


@pytest.mark.parametrize(("received", "lost", "duplicated", "reordered"), [
    ([0, 1, 2, 3], 0, 0, 0),
    ([0, 1, 3], 1, 0, 0),
    ([0, 1, 1, 2, 3], 0, 1, 0),
    ([0, 2, 1, 3], 0, 0, 1),
    ([3, 2, 1, 0], 0, 0, 3),
    ([], 4, 0, 0),
])
def test_http_stream_check_counts_lost_duplicated_and_late_chunks(
        bench_http: ModuleType, received: list[int], lost: int, duplicated: int, reordered: int) -> None:
    order = bench_http.check_order(received, 4)
    assert (order.received, order.lost, order.duplicated, order.reordered) == (
        len(received), lost, duplicated, reordered)


def test_http_reads_wrk_figures(bench_http: ModuleType) -> None:
    report = """Running 2s test @ http://127.0.0.1:8080
  1 threads and 16 connections
  Latency Distribution
     50%  340.00us
     75%  400.00us
     90%    1.20ms
     99%    2.50ms
  92000 requests in 2.00s, 10.00MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
  Non-2xx or 3xx responses: 7
Requests/sec:  46000.12
"""
    assert bench_http.wrk_figures(report) == {"rps": 46000.12, "p50_ms": 0.34, "p99_ms": 2.5, "non_2xx": 7.0,
                                              "socket_errors": 3.0, "requests": 92000.0}


def test_http_skips_the_ark_reference_with_a_reason_when_it_is_not_built(
        bench_http: ModuleType, tmp_path: Path) -> None:
    package, reason = bench_http.ark_package(tmp_path)
    assert package is None and "no dist/main.js" in reason
    (tmp_path / "ark-cluster-memory" / "dist").mkdir(parents=True)
    (tmp_path / "ark-cluster-memory" / "dist" / "main.js").write_text("")
    if shutil.which("node") is not None:  # the exported services/ folder holds the package one level down
        assert bench_http.ark_package(tmp_path) == (tmp_path / "ark-cluster-memory", "")
    assert bench_http.ark_package(None)[0] is None


@contextlib.contextmanager
def bare_server(stack: str) -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    process = subprocess.Popen(
        [sys.executable, str(BENCH / "bare_asgi.py"), "--port", str(port), "--stack", stack],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        assert b"bare ASGI app" in process.stdout.readline()
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.mark.parametrize("stack", ["uvicorn", "hypercorn-trio"])
def test_http_stream_client_gets_every_chunk_once_in_order_from_the_bare_relay(
        bench_http: ModuleType, stack: str) -> None:
    if stack == "uvicorn":
        pytest.importorskip("uvicorn")
        pytest.importorskip("uvloop")
    else:
        pytest.importorskip("hypercorn", reason="the stack before issue 23; pip install hypercorn to compare")
    with bare_server(stack) as port:
        row = asyncio.run(bench_http.relayed(port, "t", chunks=500, readers=3, limit_s=30))
    assert bench_http.stream_problems(row) == []
    assert (row["received"], row["readers_done"], row["chunks_per_s"] > 0) == (1500, 3, True)


@pytest.mark.slow
def test_http_smoke_run_measures_every_route_and_prints_the_bars(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        pytest.skip("bench/http.py needs wrk")
    pytest.importorskip("uvicorn")
    out = tmp_path / "http.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "http.py"), "--quick", "--connections", "1", "--duration", "1",
         "--warmup", "0", "--memories", "200", "--chunks", "200", "--readers", "2",
         "--out", str(out)],
        check=False, capture_output=True, text=True, timeout=300, cwd=BENCH.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    sides = {"mnemex", "bare ASGI"} | ({"ark"} if report["ark_skipped"] is None else set())
    routes = ("GET /messages", "POST /memory/search", "POST /messages")
    assert {(m["route"], m["side"]) for m in report["medians"]} == {
        (route, side) for route in routes for side in sides
        if (route, side) != ("POST /memory/search", "ark")}  # the reference service has no search
    assert {s["side"] for s in report["streams"]} == sides
    assert len(report["bars"]) == 5 and "bar (issue 23)" in done.stdout
    if report["ark_skipped"] is not None:
        assert "ark       skipped: " in done.stdout


def test_users_smoke_run_stores_each_users_memory_under_a_low_file_limit(tmp_path: Path) -> None:
    out = tmp_path / "users.json"
    done = subprocess.run([sys.executable, str(BENCH / "users.py"), "--users", "300", "--connections", "4",
                           "--limit", "256", "--out", str(out)],
                          check=False, capture_output=True, text=True, timeout=300, cwd=BENCH.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert (report["errors"], report["found_again_of_50"]) == ({}, 50)
    assert "bar (issue 17)" in done.stdout


def test_rules_extractor_run_reports_both_sets_and_meets_the_bars(tmp_path: Path) -> None:
    out = tmp_path / "rules_extractor.json"
    done = subprocess.run([sys.executable, str(BENCH / "rules_extractor.py"), "--out", str(out)],
                          check=False, capture_output=True, text=True, timeout=300, cwd=BENCH.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["sets"]) == {"development", "held-out"}
    bars = report["bars"]
    for figures in report["sets"].values():
        assert figures["precision"] >= bars["precision"] and figures["recall"] >= bars["recall"]
    assert "bars met" in done.stdout


def test_extraction_smoke_run_counts_one_call_per_job_and_none_during_replay(tmp_path: Path) -> None:
    out = tmp_path / "extraction.json"
    done = subprocess.run([sys.executable, str(BENCH / "extraction.py"), "--quick", "--out", str(out)],
                          check=False, capture_output=True, text=True, timeout=300, cwd=BENCH.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    jobs = report["jobs"]
    assert jobs["calls"] == jobs["jobs_committed"] == jobs["journal"]["lines"] == 8
    assert (jobs["replay_calls"], jobs["replay_identical"], jobs["journal"]["without_usage"]) == (0, True, 0)
    assert report["search"]["counts"]["records"] == 500 and report["search"]["counts"]["superseded"] > 0
    assert all(run["appends"] > 0 for runs in report["appends"]["runs"].values() for run in runs)
    assert len(report["bars"]) == 7 and "bars pass" in done.stdout


def test_entity_resolution_run_makes_no_wrong_merge_at_the_default_threshold() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "entity_resolution.py"), "--embedders", "hashing"],
                          check=False, capture_output=True, text=True, timeout=300, cwd=BENCH.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((BENCH / "results" / "entity_resolution.json").read_text())
    [figures] = report["embedders"].values()
    at = figures["untyped"]["sweep"][f"{figures['default']:.2f}"]
    assert at["precision"] == 1.0 and at["recall"] > figures["untyped"]["spelling"]["recall"]
    assert at["order_dependent"] == 0 and figures["held_out"]["default"]["wrong"] == 0
