"""Prometheus metrics, on a registry of the app's own (several servers in one
process, as in tests, do not collide).

The runtime's gauges are one series each for a single process; for a cluster
(``mnemex serve --ray``) one per shard, labelled ``shard``, beside
``mnemex_shard_up``: a shard that did not answer has ``mnemex_shard_up 0`` and no
other series (its counts are unknown, not zero)."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mnemex.server._served import Gauges, ShardGauges

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)

_GAUGES = (("live", "mnemex_live_actors", "Actors loaded in memory"),
           ("mailbox_depth", "mnemex_mailbox_depth", "Messages waiting in all mailboxes"),
           ("spawns", "mnemex_actor_spawns", "Actors loaded since start"),
           ("passivations", "mnemex_actor_passivations", "Actors unloaded since start"),
           ("live_bytes", "mnemex_live_actor_bytes",
            "The live actors' estimated bytes (kernel.max_live_bytes)"),
           ("budget_passivations", "mnemex_budget_passivations",
            "Actors unloaded to keep within kernel.max_live_bytes"),
           ("crashes", "mnemex_actor_crashes", "Handler crashes and failed loads since start"),
           ("pending_acks", "mnemex_journal_pending_acks", "Replies waiting for their fsync"))


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, *, clustered: bool = False) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.clustered = clustered
        self.requests = Counter("mnemex_http_requests", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=r)
        self.latency = Histogram("mnemex_http_request_seconds", "HTTP request latency by route",
                                 ["method", "route"], registry=r, buckets=_LATENCY_BUCKETS)
        self._bounds = (*(float(bound) for bound in _LATENCY_BUCKETS), float("inf"))
        self.streams = Gauge("mnemex_sse_streams", "Open server-sent event streams", registry=r)
        labels = ["shard"] if clustered else []
        self.gauges = {field: Gauge(name, text, labels, registry=r) for field, name, text in _GAUGES}
        self.fsync = Gauge("mnemex_fsync_seconds", "Recent fsync latency", [*labels, "quantile"], registry=r)
        self.up = (Gauge("mnemex_shard_up", "1 when the shard answered the last scrape, else 0", ["shard"],
                         registry=r) if clustered else None)
        # per (method, route, status): the labelled children of requests and latency, and
        # what was observed since the last scrape (requests, seconds, per bucket), counted
        # in plain numbers and added to the children when scraped (a Counter's and a
        # Histogram's own updates take a lock each, every request). The routes are the
        # app's own templates, so this stays small.
        self._children: dict[tuple[str, str, int], tuple[Any, Any, _Observed]] = {}
        self._shown: set[str] = set()
        """The processes whose gauges have series now."""

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        children = self._children.get((method, route, status))
        if children is None:  # once per (method, route, status): label lookups take a lock
            children = self._children[(method, route, status)] = (
                self.requests.labels(method, route, str(status)), self.latency.labels(method, route),
                _Observed(len(self._bounds)))
        observed = children[2]
        observed.count += 1
        observed.seconds += seconds
        observed.buckets[bisect_left(self._bounds, seconds)] += 1  # the first bound >= seconds

    def render(self, gauges: Gauges) -> bytes:
        self._add_observed()
        for process in gauges.processes:
            self._set(process)
        return generate_latest(self.registry)

    def _add_observed(self) -> None:
        """Add what was observed since the last scrape to the requests' and latency's
        children: the same figures as observing each request in them."""
        for requests, latency, observed in self._children.values():
            if not observed.count:
                continue
            requests.inc(observed.count)
            latency._sum.inc(observed.seconds)
            for index, count in enumerate(observed.buckets):
                if count:
                    latency._buckets[index].inc(count)
                    observed.buckets[index] = 0
            observed.count = 0
            observed.seconds = 0.0

    def _set(self, process: ShardGauges) -> None:
        labels: tuple[str, ...] = (process.name,) if self.clustered else ()
        if self.up is not None:
            self.up.labels(process.name).set(1 if process.up else 0)
        if not process.up:  # unknown, not zero: its series go until it answers again
            if process.name in self._shown:
                self._shown.discard(process.name)
                for gauge in self.gauges.values():
                    gauge.remove(*labels)
                for quantile in ("p50", "p99"):
                    self.fsync.remove(*labels, quantile)
            return
        self._shown.add(process.name)
        for field, gauge in self.gauges.items():
            value = getattr(process, field)
            (gauge.labels(*labels) if labels else gauge).set(value)
        self.fsync.labels(*labels, "p50").set(process.fsync_p50_ms / 1000)
        self.fsync.labels(*labels, "p99").set(process.fsync_p99_ms / 1000)


class _Observed:
    """Requests of one (method, route, status) since the last scrape."""

    __slots__ = ("buckets", "count", "seconds")

    def __init__(self, buckets: int) -> None:
        self.count = 0
        self.seconds = 0.0
        self.buckets = [0] * buckets
