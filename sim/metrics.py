"""Prometheus text for the simulated programs, rendered with ``prometheus_client``.

- ATOM (``GET /metrics`` on the server port, newer ATOM only): the ``atom:*`` names of
  atom/entrypoints/openai/metrics.py at ROCm/ATOM ffdf3bb5. Like ATOM, the values are a snapshot
  of the engines refreshed every few seconds (``ATOMSIM_METRICS_REFRESH``, default 5 s as ATOM's
  ``_METRICS_REFRESH_INTERVAL_SECONDS``); counters carry ``_total`` as ``prometheus_client``
  renders them.
- AToMesh (its own listener on ``--prometheus-port``): the ``mesh_*`` names and label keys of
  atom/mesh/src/observability/metrics (schema.rs, recorder.rs) at the router pin 087b82d9.

See sim/README.md for the switches.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "AtomMetrics", "MeshMetrics", "atom_metrics_enabled"]

# (name, kind, help, snapshot key)
ATOM_SERIES: list[tuple[str, str, str, str]] = [
    ("atom:requests_running", "gauge", "Number of requests currently running across data-parallel ranks.",
     "requests_running"),
    ("atom:requests_waiting", "gauge", "Number of requests waiting across data-parallel ranks.", "requests_waiting"),
    ("atom:requests_parked_kv_load", "gauge", "Number of requests parked for an external KV load.",
     "requests_parked_kv_load"),
    ("atom:requests_partial_prefill", "gauge", "Number of requests currently in chunked prefill.",
     "requests_partial_prefill"),
    ("atom:kv_cache_blocks_used", "gauge", "Number of allocated KV-cache blocks.", "kv_blocks_used"),
    ("atom:kv_cache_blocks_free", "gauge", "Number of free KV-cache blocks.", "kv_blocks_free"),
    ("atom:kv_cache_blocks_total", "gauge", "Total number of KV-cache blocks.", "kv_blocks_total"),
    ("atom:kv_cache_usage_ratio", "gauge", "Fraction of KV-cache blocks currently allocated.",
     "kv_cache_usage_ratio"),
    ("atom:requests_finished", "counter", "Number of requests completed by the scheduler.", "requests_finished"),
    ("atom:prompt_tokens", "counter", "Number of prompt tokens in completed requests.", "prompt_tokens"),
    ("atom:generation_tokens", "counter", "Number of generated tokens in completed requests.", "generation_tokens"),
    ("atom:preemptions", "counter", "Number of scheduler preemptions.", "preemptions"),
    ("atom:prefix_cache_requests", "counter", "Number of prefill requests observed by prefix-cache accounting.",
     "prefix_cache_requests"),
    ("atom:prefix_cache_hit_ratio", "gauge", "Admitted prefix-cache token hit ratio.", "prefix_cache_hit_ratio"),
]


def atom_metrics_enabled(switch: bool | None) -> bool:
    """``ATOMSIM_METRICS`` as the fault settings read it (``switch``; ``False`` acts as an ATOM without
    /metrics: 404). Unset, it follows ``ATOMSIM_ATOM_REV``: the router pin's ATOM has no /metrics route."""
    if switch is not None:
        return switch
    return os.environ.get("ATOMSIM_ATOM_REV", "").strip().lower() != "pin"


class AtomMetrics:
    """The worker's ``/metrics``: a periodically refreshed snapshot of the engines."""

    def __init__(self, snapshot: Callable[[], dict]):
        self._source = snapshot
        self.interval = _float_env("ATOMSIM_METRICS_REFRESH", 5.0)
        self._snapshot: dict = {}
        self._refreshed = 0.0
        self._errors = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def refresh(self) -> None:
        try:
            self._snapshot = dict(self._source())
            self._refreshed = time.time()
        except Exception:
            self._errors += 1

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        if not self._snapshot or time.time() - self._refreshed >= self.interval:
            self.refresh()
        snap = self._snapshot
        yield _gauge("atom:metrics_snapshot_available",
                     "Whether a runtime metrics snapshot has been collected successfully.", float(bool(snap)))
        yield _counter("atom:metrics_refresh_errors", "Number of failed runtime metrics refreshes.", self._errors)
        yield _gauge("atom:metrics_last_refresh_timestamp_seconds",
                     "Unix timestamp of the last successful runtime metrics refresh.", self._refreshed)
        for name, kind, doc, key in ATOM_SERIES:
            value = float(snap.get(key, 0))
            yield _gauge(name, doc, value) if kind == "gauge" else _counter(name, doc, value)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    metric = GaugeMetricFamily(name, doc)
    metric.add_metric([], value)
    return metric


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    metric = CounterMetricFamily(name, doc)
    metric.add_metric([], value)
    return metric


def _float_env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class MeshMetrics:
    """AToMesh's ``mesh_*`` series, updated by the router as requests pass."""

    def __init__(self, buckets: tuple[float, ...] | list[float] = ()) -> None:
        buckets = tuple(sorted(buckets)) or DURATION_BUCKETS
        r = self.registry = CollectorRegistry(auto_describe=True)
        opts = {"registry": r}
        self.http_requests = Counter("mesh_http_requests_total", "HTTP requests", ["method", "path"], **opts)
        self.http_duration = Histogram("mesh_http_request_duration_seconds", "HTTP request duration",
                                       ["method", "path"], buckets=buckets, **opts)
        self.http_responses = Counter("mesh_http_responses_total", "HTTP responses", ["status_code"], **opts)
        self.http_connections = Gauge("mesh_http_connections_active", "Open HTTP connections", **opts)
        route = ["router_type", "backend_type", "connection_mode", "model", "endpoint"]
        self.router_requests = Counter("mesh_router_requests_total", "Routed requests", route + ["streaming"], **opts)
        self.router_duration = Histogram("mesh_router_request_duration_seconds", "Routed request duration", route,
                                         buckets=buckets, **opts)
        self.router_errors = Counter("mesh_router_request_errors_total", "Routed request errors",
                                     route + ["error_type"], **opts)
        self.upstream = Counter("mesh_router_upstream_responses_total", "Upstream responses",
                                ["router_type", "status_code", "error_code"], **opts)
        self.pool_size = Gauge("mesh_worker_pool_size", "Workers by type",
                               ["worker_type", "connection_mode", "model"], **opts)
        self.worker_active = Gauge("mesh_worker_requests_active", "Requests in flight per worker", ["worker"], **opts)
        self.worker_health = Gauge("mesh_worker_health", "1 healthy, 0 unhealthy", ["worker"], **opts)
        self.health_checks = Counter("mesh_worker_health_checks_total", "Health checks", ["worker", "result"], **opts)
        self.worker_errors = Counter("mesh_worker_errors_total", "Worker errors", ["worker", "error_type"], **opts)
        self.worker_retries = Counter("mesh_worker_retries_total", "Retries", ["worker", "endpoint"], **opts)
        self.cb_state = Gauge("mesh_worker_cb_state", "Circuit breaker: 0 closed, 1 open, 2 half-open", ["worker"],
                              **opts)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def disable_created_series() -> None:
    """The Rust exporter has no ``*_created`` series; neither do we."""
    try:
        from prometheus_client import disable_created_metrics
        disable_created_metrics()
    except ImportError:
        pass
