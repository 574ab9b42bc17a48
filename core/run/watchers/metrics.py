"""Live metrics: each worker's GET /metrics (ATOM's atom:* names; older ATOM answers 404 and is asked
again only every NO_METRICS_RETRY_S) and the router's --prometheus-port (AToMesh's mesh_* names), each
endpoint on one kept-alive connection. Of the Prometheus text only the lines of the names used are read
(`parse_wanted`: a line is passed over by its first characters before anything else; prometheus_client's
full parser, `parse`, gives the same samples for them and was ~8 % of the watcher's samples at 32 nodes).
Rates are derived per endpoint from two scrapes. A worker's answer is also a health pass
(`ServingHealth.answered`): its health checks wait while its scrapes answer.

Stalls: requests in flight and no output for STALL_S is `stalled`. From the engine's own counters
(atom:requests_running/waiting > 0 while atom:generation_tokens and atom:requests_finished stay flat)
where /metrics exists; otherwise from the router (mesh_worker_requests_active > 0 for the worker while
no upstream response completes).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING

from ...remote.probes import HttpClient
from ..events import LIVE, TERMINAL, Event
from .base import RunHost

if TYPE_CHECKING:
    from .base import WatcherGroup as Watchers  # (the package imports this module)

EVERY_S = 2.0  # between scrapes of one endpoint
# at most this many scrapes a second over all endpoints: a bigger run's endpoints are each scraped less often
# (64P64D + router: every 3.2 s, not 2). On loopback or a LAN each scrape's send and answer is a syscall
# round trip that wakes the worker; at 129 endpoints every 2 s they were a third of the watcher's CPU.
MAX_SCRAPES_S = 40.0
TIMEOUT_S = 1.5
STALL_S = 8.0
NO_METRICS_RETRY_S = 60.0
HISTORY = 40  # rates kept per endpoint for the console's sparklines (a reattached console gets them too)

ATOM = {"requests_running", "requests_waiting", "requests_finished", "prompt_tokens", "generation_tokens",
        "preemptions", "kv_cache_usage_ratio", "kv_cache_blocks_used", "kv_cache_blocks_total",
        "requests_parked_kv_load"}  # (ATOM head's atom/entrypoints/openai/metrics.py: a gauge, summed over ranks)
ATOM_NAMES = frozenset("atom:" + n for n in ATOM)
ROUTER_NAMES = frozenset({"mesh_router_requests", "mesh_router_request_errors", "mesh_router_upstream_responses",
                          "mesh_worker_requests_active", "mesh_worker_health"})
RATES = {"prompt_tokens": "prompt_tok_s", "generation_tokens": "gen_tok_s", "requests_finished": "req_s",
         "router_requests": "req_s", "router_errors": "errors_s"}


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name without a counter's _total, labels, value) for every sample."""
    from prometheus_client.parser import text_string_to_metric_families  # only once something serves

    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name[:-6] if s.name.endswith("_total") else s.name
            out.append((name, dict(s.labels), float(s.value)))
    return out


def parse_wanted(text: str, names: frozenset[str]) -> list[tuple[str, dict[str, str], float]]:
    """What `parse` gives for the samples named in `names` (without a counter's _total), reading nothing
    else: comments and other metrics are passed over by their first characters. ValueError when a line of a
    wanted name is malformed."""
    starts = tuple(names)
    out = []
    for line in text.splitlines():
        if not line.startswith(starts):
            continue
        brace = line.find("{")
        labelled = brace >= 0 and " " not in line[:brace]
        name, rest = (line[:brace], "") if labelled else line.partition(" ")[::2]
        if name.endswith("_total"):
            name = name[:-6]
        if name not in names:
            continue
        labels: dict[str, str] = {}
        if labelled:
            labels, end = _labels(line, brace + 1)
            rest = line[end:]
        value = rest.split(None, 1)
        if not value:
            raise ValueError(f"no value: {line[:200]!r}")
        out.append((name, labels, float(value[0])))
    return out


_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


def _labels(line: str, i: int) -> tuple[dict[str, str], int]:
    """`k="v",...}` from line[i:], with the text format's escapes; and where the value starts."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while i < n and line[i] in " ,":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        eq = line.find("=", i)
        if eq < 0 or line[eq + 1:eq + 2] != '"':
            raise ValueError(f"bad labels: {line[:200]!r}")
        key, i, parts = line[i:eq].strip(), eq + 2, []
        while True:
            q = line.find('"', i)
            if q < 0:
                raise ValueError(f"unterminated label value: {line[:200]!r}")
            b = line.find("\\", i, q)
            if b < 0:
                parts.append(line[i:q])
                i = q + 1
                break
            esc = line[b + 1:b + 2]
            parts += [line[i:b], _ESCAPES.get(esc, "\\" + esc)]
            i = b + 2
        labels[key] = "".join(parts)


def atom_values(samples: list[tuple[str, dict, float]]) -> dict[str, float]:
    vals: dict[str, float] = {}
    for name, _, v in samples:
        if name.startswith("atom:") and name[5:] in ATOM:
            vals[name[5:]] = vals.get(name[5:], 0.0) + v  # summed over ranks/labels
    return vals


def router_values(samples: list[tuple[str, dict, float]]) -> tuple[dict, dict[str, dict[str, float]]]:
    """The router's own totals, and per worker URL its active requests and health."""
    vals: dict = {"router_requests": 0.0, "router_errors": 0.0, "errors_by_type": {}, "responses_by_status": {}}
    workers: dict[str, dict[str, float]] = {}
    for name, labels, v in samples:
        if name == "mesh_router_requests":
            vals["router_requests"] += v
        elif name == "mesh_router_request_errors":
            vals["router_errors"] += v
            t = labels.get("error_type", "?")
            vals["errors_by_type"][t] = vals["errors_by_type"].get(t, 0.0) + v
        elif name == "mesh_router_upstream_responses":
            code = labels.get("status_code", "?")
            vals["responses_by_status"][code] = vals["responses_by_status"].get(code, 0.0) + v
        elif name in ("mesh_worker_requests_active", "mesh_worker_health") and "worker" in labels:
            key = "active" if name == "mesh_worker_requests_active" else "healthy"
            workers.setdefault(labels["worker"].rstrip("/"), {})[key] = v
    vals["upstream_responses"] = sum(vals["responses_by_status"].values())
    return vals, workers


async def _nothing() -> dict[str, dict[str, float]]:
    return {}


class MetricsWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group
        self.prev: dict[str, tuple[float, dict]] = {}
        self.no_metrics: dict[str, float] = {}  # endpoint -> when it answered 404
        self.moved_at: dict[str, float] = {}  # endpoint -> last time its output counters moved
        self.router_moved_at = 0.0
        self.requests: dict[str, int] = {}
        self.history: dict[str, dict[str, deque]] = {}
        self.http = HttpClient()  # one connection per endpoint, closed when the watch ends

    async def watch(self) -> None:
        try:
            while self.run.state.status not in LIVE:
                await asyncio.sleep(0.5)
            while True:
                t0 = time.monotonic()
                await self.scrape_all()
                await asyncio.sleep(max(0.1, self.period() - (time.monotonic() - t0)))
        finally:
            await self.http.aclose()

    def period(self) -> float:
        """Seconds between two scrapes of an endpoint: EVERY_S, longer past MAX_SCRAPES_S endpoints a second."""
        return max(EVERY_S, len(self.run.state.procs) / MAX_SCRAPES_S)

    async def scrape_all(self) -> None:
        run = self.run
        workers = [n for n, p in run.state.procs.items() if p.role != "router" and p.stage not in TERMINAL
                   and p.stage != "unresponsive"]
        router = run.state.procs.get("router")
        routed = router is not None and router.stage not in TERMINAL and router.stage != "unresponsive"
        results = await asyncio.gather(self.scrape_router() if routed else _nothing(),
                                       *(self.scrape_worker(n) for n in workers), return_exceptions=True)
        by_url: dict[str, dict[str, float]] = results[0] if isinstance(results[0], dict) else {}
        now = time.time()
        for name in workers:
            self.stall_check(name, by_url, now)

    async def get(self, name: str, node: str, host: str, port: int) -> str | None:
        if now_missing := self.no_metrics.get(name):
            if time.time() - now_missing < NO_METRICS_RETRY_S:
                return None
        self.requests[name] = self.requests.get(name, 0) + 1
        r = await self.http.get(host, port, "/metrics", TIMEOUT_S, self.run.launcher.probe_runner(node))
        if r.status and name != "router":  # a worker's /metrics is served where its /health is: it answers
            self.group.health.answered(name)  # (the router's is on a port of its own: not taken for it)
        if r.status == 404:
            self.no_metrics[name] = time.time()  # an older ATOM: degrade quietly to what the router gives
            return None
        self.no_metrics.pop(name, None)
        return r.body.decode("utf-8", "replace") if r.ok else None

    def derive(self, name: str, vals: dict, now: float) -> dict:
        out = dict(vals)
        prev = self.prev.get(name)
        if prev is not None and now > prev[0]:
            dt = now - prev[0]
            for key, rate in RATES.items():
                if key in vals and key in prev[1]:
                    out[rate] = max(0.0, (vals[key] - prev[1][key]) / dt)
        self.prev[name] = (now, vals)
        hist = self.history.setdefault(name, {})
        for rate in set(RATES.values()) | {"active"}:
            if rate in out:
                hist.setdefault(rate, deque(maxlen=HISTORY)).append(round(out[rate], 3))
        out["history"] = {k: list(v) for k, v in hist.items()}
        return out

    async def scrape_worker(self, name: str) -> None:
        ep = self.run.plan.endpoint(name)
        text = await self.get(name, ep.node, ep.host, ep.http_port)
        if text is None:
            return
        try:
            vals = atom_values(parse_wanted(text, ATOM_NAMES))
        except ValueError:
            return
        now = time.time()
        prev = self.prev.get(name)
        if prev is None or any(vals.get(k) != prev[1].get(k) for k in ("generation_tokens", "requests_finished")):
            self.moved_at[name] = now
        parked = self.group.pairs.parked(name, vals.get("requests_parked_kv_load"), now) \
            if ep.role == "decode" else {}
        self.run.emit(Event("metrics", name, "atom", data={**self.derive(name, vals, now), **parked, "t": now,
                                                            "source": "atom"}))

    async def scrape_router(self) -> dict[str, dict[str, float]]:
        r = self.run.plan.router
        text = await self.get("router", r.node, r.host, r.prometheus_port)
        if text is None:
            return {}
        try:
            vals, workers = router_values(parse_wanted(text, ROUTER_NAMES))
        except ValueError:
            return {}
        now = time.time()
        prev = self.prev.get("router")
        if prev is None or vals["upstream_responses"] != prev[1].get("upstream_responses"):
            self.router_moved_at = now
        data = self.derive("router", vals, now)
        data["workers"] = workers
        self.run.emit(Event("metrics", "router", "mesh", data={**data, "t": now, "source": "mesh"}))
        for wname in self.run.state.procs:  # workers without /metrics: what the router knows of them
            if wname == "router" or wname not in self.no_metrics:
                continue
            w = workers.get(self.run.plan.endpoint(wname).url, {})
            self.run.emit(Event("metrics", wname, "router", data={**self.derive(wname, dict(w), now), "t": now,
                                                                   "source": "router"}))
        return workers

    def stall_check(self, name: str, by_url: dict, now: float) -> None:
        run = self.run
        p = run.state.procs.get(name)
        if p is None or p.stage in TERMINAL or p.stage == "unresponsive":
            return
        latest = run.state.metrics.get(name, {})
        if latest.get("source") == "atom":
            busy = latest.get("requests_running", 0) + latest.get("requests_waiting", 0) > 0
            flat_for = now - self.moved_at.get(name, now)
            how = (f"{latest.get('requests_running', 0):.0f} running, {latest.get('requests_waiting', 0):.0f} "
                   f"waiting, atom:generation_tokens flat for {flat_for:.0f}s")
        else:
            active = by_url.get(run.plan.endpoint(name).url, {}).get("active", 0)
            busy = active > 0
            flat_for = now - (self.router_moved_at or now)
            how = (f"router: {active:.0f} request(s) active on it, no response completed for {flat_for:.0f}s "
                   f"(no /metrics on the worker)")
        if busy and flat_for >= STALL_S:
            if p.stage != "stalled":
                run.emit(Event("proc.health", name, "stalled", f"requests in flight, no output: {how}"))
                self.group.settle()
        elif p.stage == "stalled" and (not busy or flat_for < STALL_S):
            run.emit(Event("proc.health", name, "ok", "output again" if busy else "no request waits any more"))
            self.group.settle()

    async def scrape_once(self, gap: float = 1.0) -> None:
        """Two scrapes `gap` apart, for rates (for `atomdeck status`)."""
        try:
            await self.scrape_all()
            await asyncio.sleep(gap)
            await self.scrape_all()
        finally:
            await self.http.aclose()
