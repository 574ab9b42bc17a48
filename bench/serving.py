"""Issue 14's goals, measured on the local demo with the simulator (numbers, not asserts):

- a frozen endpoint (SIGSTOP of the decode's python) -> `unresponsive` shown
- requests in flight on a stalled decode (ATOMSIM_STALL_AFTER) -> `stalled`
- ready line -> ready-but-not-bound named (ATOMSIM_BIND_PORT)
- first write_request with no write-done (ATOMSIM_HANDSHAKE=refuse) -> the pair's failure is the run's headline
- health + metrics requests per endpoint per second while serving, and the watcher's CPU while idle-serving 2P1D

    bench/isolated .venv/bin/python bench/serving.py [trials]

Writes bench/results/serving.json. Run it in a private network namespace (ports 127.0.0.N).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
import time

from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.remote.probes import http_post
from atomdeck.core.run.run import Run
from common import RESULTS, machine, summary  # type: ignore[import-not-found]

os.environ.setdefault("ATOMDECK_SIM_SPEED", "20")


def ws_for(recipe: str = "demo-1p1d", **edits):
    ws = load_workspace(recipe, "local")
    ws.inventory = ws.cluster.static_inventory()
    for path, value in edits.items():
        ws.recipe = set_field(ws.recipe, path.replace("__", "."), value)
    return ws


def worker_python(run_id: str, name: str) -> int:
    mark = f"ATOMDECK_RUN={run_id}:{name}".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{d}/cmdline", "rb").read()
        except OSError:
            continue
        if mark in env and b"openai_server" in cmd:
            found.append(int(d))
    return max(found)


async def serving(ws) -> Run:
    run = await Run.launch(ws, ws.assess())
    s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
    if s.status != "serving":
        await run.teardown(grace=2)
        raise RuntimeError(f"not serving: {s.diagnosis}")
    return run


async def frozen() -> float:
    run = await serving(ws_for())
    try:
        await run.watch(timeout=1.5)  # health checks running
        pid = worker_python(run.id, "decode-0")
        t0 = time.time()
        os.kill(pid, signal.SIGSTOP)
        s = await run.watch(until=lambda s: s.procs["decode-0"].stage == "unresponsive", timeout=30)
        dt = s.procs["decode-0"].since - t0
        os.kill(pid, signal.SIGCONT)
        return dt
    finally:
        await run.teardown(grace=2)


async def stalled() -> float:
    # the stall must begin after the smoke request (a stall before "serving" fails the smoke instead)
    run = await serving(ws_for(decode__env={"ATOMSIM_STALL_AFTER": "3", "ATOMSIM_METRICS_REFRESH": "0"}))
    try:
        await asyncio.sleep(3.5)
        r = run.plan.router
        body = {"model": run.recipe.model.client_name, "prompt": "hello", "max_tokens": 8}
        t0 = time.time()
        tasks = [asyncio.create_task(http_post(r.host, r.port, "/v1/completions", body, 60)) for _ in range(2)]
        s = await run.watch(until=lambda s: s.procs["decode-0"].stage == "stalled", timeout=60)
        for t in tasks:
            t.cancel()
        return s.procs["decode-0"].since - t0
    finally:
        await run.teardown(grace=2)


async def not_bound() -> float:
    run = await Run.launch(ws := ws_for(decode__env={"ATOMSIM_BIND_PORT": "18999"}), ws.assess())
    try:
        s = await run.watch(until=lambda s: "bind:decode-0" in s.checks, timeout=60)
        ready_at = run.watchers.binding.ready_at.get("decode-0", (None,))[0] or s.checks["bind:decode-0"].since
        return s.checks["bind:decode-0"].since - ready_at
    finally:
        await run.teardown(grace=2)


async def blocked_pair() -> float:
    run = await Run.launch(ws := ws_for(prefill__env={"ATOMSIM_HANDSHAKE": "refuse"}), ws.assess())
    sent: dict[str, float] = {}
    run.line_listeners.append(lambda n, line: sent.setdefault("t", time.time())
                              if "write_request sent for req" in line or "Sending write_request" in line else None)
    try:
        s = await run.watch(until=lambda s: s.status == "failed", timeout=60)
        assert s.diagnosis.startswith("KV transfer"), s.diagnosis
        return s.since - sent["t"]
    finally:
        await run.teardown(grace=2)


async def idle_cost(seconds: float = 20.0) -> dict:
    run = await serving(ws_for("demo-2p1d"))
    try:
        await run.watch(timeout=3)
        h0 = dict(run.watchers.health.requests)
        m0 = dict(run.watchers.metrics.requests)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        await run.watch(timeout=seconds)
        dt = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        children = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        per = {}
        for name in run.state.procs:
            n = run.watchers.health.requests.get(name, 0) - h0.get(name, 0)
            n += run.watchers.metrics.requests.get(name, 0) - m0.get(name, 0)
            per[name] = round(n / dt, 2)
        return {"seconds": round(dt, 1), "requests_per_s": per, "watcher_cpu_pct": round(100 * cpu / dt, 1),
                "reaped_children_cpu_pct": round(100 * children / dt, 1)}
    finally:
        await run.teardown(grace=2)


def main(trials: int = 3) -> dict:
    out: dict = {"machine": machine()}
    for name, fn in (("frozen_to_unresponsive_s", frozen), ("inflight_stall_to_stalled_s", stalled),
                     ("ready_line_to_not_bound_named_s", not_bound), ("write_request_to_pair_headline_s", blocked_pair)):
        values = [asyncio.run(fn()) for _ in range(trials)]
        out[name] = {**summary(values), "values": [round(v, 3) for v in values]}
        print(name, out[name], flush=True)
    out["idle_serving_2p1d"] = asyncio.run(idle_cost())
    print("idle_serving_2p1d", out["idle_serving_2p1d"], flush=True)
    path = RESULTS.parent / "serving.json"
    path.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
