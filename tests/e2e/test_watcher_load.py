"""Issue 19, the watcher's own load at scale, checked by counting on the local demo with the simulator: a
worker whose metrics scrapes answer is not asked /health on top of them, and a frozen one is still found."""

from __future__ import annotations

import asyncio

from atomdeck.core.run.run import Run

from .conftest import workspace


def test_a_worker_whose_scrapes_answer_is_not_health_checked_on_top_of_them(runs):
    ws = workspace()

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=40)
        assert s.status == "serving", s.diagnosis
        w = run.watchers
        # from here, six scrapes of each worker (every 2 s); each answer stands in for a health check
        base_m = {n: w.metrics.requests.get(n, 0) for n in ("prefill-0", "decode-0")}
        base_h = {n: w.health.requests.get(n, 0) for n in ("prefill-0", "decode-0")}
        await run.watch(until=lambda s: all(w.metrics.requests.get(n, 0) - base_m[n] >= 6 for n in base_m),
                        timeout=60)
        return ({n: w.metrics.requests[n] - base_m[n] for n in base_m},
                {n: w.health.requests.get(n, 0) - base_h[n] for n in base_h},
                w.health.requests.get("router", 0), run.state)

    scrapes, checks, router_checks, s = asyncio.run(go())
    assert s.status == "serving"
    for name in scrapes:  # before: a check every second next to a scrape every 2 s (>= 10 checks here)
        assert checks[name] <= 2, (name, scrapes[name], checks[name])
    assert router_checks >= 5  # the router's /readiness is still asked (its metrics are on another port)


def test_every_pair_is_seen_registered_and_reachable_from_its_consumers_node(runs):
    """The pairs' periodic pass reads who registered once per pass now (not per pair): every pair of a 2P1D
    still moves from waiting to both_registered and on, as the events file records."""
    import json

    ws = workspace("demo-2p1d")

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status == "failed" or all(
            pr.stage in ("ports_reachable", "transferred") for pr in s.pairs.values()), timeout=60)
        return run, s

    run, s = asyncio.run(go())
    assert s.status != "failed", s.diagnosis
    assert len(s.pairs) == 2
    recorded = [json.loads(line) for line in run.rd.event_lines()]
    order = ("waiting", "both_registered", "ports_reachable", "transferred")
    seen = {}
    for key in s.pairs:
        got = [e["value"] for e in recorded if e["kind"] == "pair" and e["name"] == key]
        assert [order.index(v) for v in got] == sorted({order.index(v) for v in got}), (key, got)
        seen[key] = got
    # (a pair whose transfer was logged before the pass saw both registered goes straight to transferred)
    assert any("both_registered" in got for got in seen.values()), seen
