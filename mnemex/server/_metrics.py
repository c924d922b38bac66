"""Prometheus metrics, on a registry of the app's own (several servers in one
process, as in tests, do not collide)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from mnemex import MnemexRuntime

__all__ = ["Metrics"]


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mnemex_http_requests", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=r)
        self.latency = Histogram("mnemex_http_request_seconds", "HTTP request latency by route",
                                 ["method", "route"], registry=r,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self.streams = Gauge("mnemex_sse_streams", "Open server-sent event streams", registry=r)
        self.live = Gauge("mnemex_live_actors", "Actors loaded in memory", registry=r)
        self.depth = Gauge("mnemex_mailbox_depth", "Messages waiting in all mailboxes", registry=r)
        self.spawns = Gauge("mnemex_actor_spawns", "Actors loaded since start", registry=r)
        self.passivations = Gauge("mnemex_actor_passivations", "Actors unloaded since start", registry=r)
        self.live_bytes = Gauge("mnemex_live_actor_bytes",
                                "The live actors' estimated bytes (kernel.max_live_bytes)", registry=r)
        self.budget_passivations = Gauge("mnemex_budget_passivations",
                                         "Actors unloaded to keep within kernel.max_live_bytes", registry=r)
        self.crashes = Gauge("mnemex_actor_crashes", "Handler crashes and failed loads since start",
                             registry=r)
        self.pending = Gauge("mnemex_journal_pending_acks", "Replies waiting for their fsync", registry=r)
        self.fsync = Gauge("mnemex_fsync_seconds", "Recent fsync latency", ["quantile"], registry=r)
        # the labelled children of requests and latency, by (method, route, status); the routes
        # are the app's own templates, so this stays small
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:  # once per (method, route, status): label lookups take a lock
            children = self._children[key] = (self.requests.labels(method, route, str(status)),
                                               self.latency.labels(method, route))
        children[0].inc()
        children[1].observe(seconds)

    def render(self, runtime: MnemexRuntime) -> bytes:
        stats = runtime.stats()
        self.live.set(stats.live)
        self.depth.set(stats.mailbox_depth)
        self.spawns.set(stats.spawns)
        self.passivations.set(stats.passivations)
        self.crashes.set(stats.crashes)
        self.live_bytes.set(stats.live_bytes)
        self.budget_passivations.set(stats.budget_passivations)
        journal = runtime.journal_health()
        self.pending.set(journal["pending_acks"])
        for quantile in ("p50", "p99"):
            self.fsync.labels(quantile).set(journal[f"fsync_{quantile}_ms"] / 1000)
        return generate_latest(self.registry)
