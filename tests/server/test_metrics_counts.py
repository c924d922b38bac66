"""The request counters and latency histogram are counted in plain numbers and
added to the Prometheus metrics when scraped: /metrics shows exactly what observing
each request in them shows."""

from __future__ import annotations

import random

import prometheus_client.metrics
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from mnemex.server._metrics import _LATENCY_BUCKETS, Metrics
from mnemex.server._served import Gauges


def reference() -> tuple[CollectorRegistry, Counter, Histogram]:
    """The two metrics as they were observed before: one update each per request."""
    registry = CollectorRegistry()
    requests = Counter("mnemex_http_requests", "HTTP requests by route and status",
                       ["method", "route", "status"], registry=registry)
    latency = Histogram("mnemex_http_request_seconds", "HTTP request latency by route", ["method", "route"],
                        registry=registry, buckets=_LATENCY_BUCKETS)
    return registry, requests, latency


def http_lines(text: bytes) -> list[bytes]:
    return [line for line in text.splitlines() if b"mnemex_http_request" in line]


def test_scrapes_show_what_observing_each_request_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    # the _created series: the same moment in both
    monkeypatch.setattr(prometheus_client.metrics.time, "time", lambda: 1_700_000_000.0)
    metrics = Metrics()
    registry, requests, latency = reference()
    rng = random.Random(5)
    keys = [("POST", "/messages", 200), ("POST", "/messages", 400), ("GET", "/messages", 200),
            ("POST", "/memory/search", 200)]
    # seconds on and around every bucket's bound (a bound is in its own bucket), and others
    bounds = [float(b) for b in _LATENCY_BUCKETS]
    values = [*bounds, *(b + 2**-20 for b in bounds), *(b - 2**-20 for b in bounds), 0.0, 7.0]
    empty = Gauges(processes=())
    for scrape in range(4):
        for _ in range(250):
            method, route, status = rng.choice(keys)
            seconds = rng.choice(values) if rng.random() < 0.5 else rng.randrange(1 << 22) * 2**-20
            metrics.observe(method, route, status, seconds)
            requests.labels(method, route, str(status)).inc()
            latency.labels(method, route).observe(seconds)
        if scrape == 2:
            continue  # two batches added up at one scrape
        ours, theirs = http_lines(metrics.render(empty)), http_lines(generate_latest(registry))
        assert [line for line in ours if b"_sum{" not in line] == [
            line for line in theirs if b"_sum{" not in line]
        assert any(b"_bucket" in line for line in ours) and any(b"_created" in line for line in ours)
        # the sums: equal up to the order the floats were added in
        sums = [(a.rpartition(b" ")[0], float(a.rpartition(b" ")[2]), b.rpartition(b" ")[0],
                 float(b.rpartition(b" ")[2])) for a, b in zip(ours, theirs, strict=True) if b"_sum{" in a]
        assert len(sums) == 3
        for name, value, other_name, other in sums:
            assert name == other_name and value == pytest.approx(other, rel=1e-12)
