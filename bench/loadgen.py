"""The load generator's own capacity, and a sweep's wall time on the demo.

1. Capacity: a demo 1P1D with simulator delays off (ATOMSIM_SPEED=0: token time 0), concurrency 64,
   through the real router. Two workloads: long outputs (streamed tokens/s) and short ones (requests/s).
   The client is one asyncio process (one core); its CPU seconds are measured with getrusage, so
   "per client core" = figure / client CPU share. The simulator's processes share the same 2 cores,
   so the achieved figure is a floor of what the client can do; tokens per client CPU-second is its
   ceiling. Goal: >= 20,000 streamed tokens/s and >= 500 requests/s at concurrency 64.
2. Sweep: `atomdeck bench`'s 4 steps (1, 4, 16, 64) x 64 requests on the demo at its shipped pace.
   Goal: under 60 s. The router's port is captured on the wire meanwhile (bench/wire.py, root): the server's own
   time (at least one request in its hands) against the client's wall time, per step and in all (issue 40.6:
   the client adds <= 5 %).

    .venv/bin/python bench/loadgen.py [capacity|sweep]
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from atomdeck.core.measure.bench import bench, target_of
from atomdeck.core.measure.workload import Workload
from common import BENCH, load, save


async def _serving(recipe: str, speed: str | None):
    from atomdeck.core.design.workspace import load_workspace
    from atomdeck.core.run.run import Run

    if speed is None:
        os.environ.pop("ATOMDECK_SIM_SPEED", None)
    else:
        os.environ["ATOMDECK_SIM_SPEED"] = speed
    ws = load_workspace(recipe, "local")
    ws.inventory = ws.cluster.static_inventory()
    run = await Run.launch(ws, ws.assess())
    state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=120)
    if state.status != "serving":
        await run.teardown(grace=2)
        raise SystemExit(f"the demo did not come up: {state.diagnosis}")
    return run


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def capacity() -> dict:
    run = await _serving("demo-agg", "0")  # no KV hop: the most the simulator can serve
    out: dict = {}
    try:
        target = target_of(run)
        await bench(target, Workload(isl=32, osl=64, concurrencies=[64], num_prompts=128, warmup=0))  # warm-up
        for name, isl, osl, n in (("tokens", 32, 1024, 256), ("requests", 32, 8, 3000)):
            w = Workload(isl=isl, osl=osl, concurrencies=[64], num_prompts=n, warmup=0)
            mark: dict = {}
            cpu0, t0 = _cpu(), time.perf_counter()
            # the step's own CPU and time: stop the clocks when the step ends, before the records are saved
            rep = await bench(target, w, on_step=lambda i, s, mark=mark: mark.update(cpu=_cpu(), t=time.perf_counter()))
            wall, cpu = mark["t"] - t0, mark["cpu"] - cpu0
            r = rep.results[0]
            share = cpu / wall
            out[name] = {"isl": isl, "osl": osl, "num_prompts": n, "completed": r["completed"],
                         "failed": r["failed"], "short": r["short"],
                         "output_throughput": round(r["output_throughput"], 1),
                         "request_throughput": round(r["request_throughput"], 1),
                         "client_cpu_share": round(share, 3),
                         "tokens_per_client_cpu_s": round(r["total_output_tokens"] / cpu, 1) if cpu else None,
                         "requests_per_client_cpu_s": round(r["completed"] / cpu, 1) if cpu else None}
            print(name, out[name], file=sys.stderr)
    finally:
        await run.teardown(grace=2)
    return out


def _busy(spans: list[tuple[float, float]]) -> float:
    """Seconds in which at least one of the spans is open (their union)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def server_time(wire: list[dict], warmup: int, per_step: int, steps: int, client: dict) -> dict:
    """The server's own time of a sweep from the wire (bench/wire.py): its requests in arrival order are the
    warm-up's, then `per_step` per step. Server busy = the time at least one request was in the server's hands
    (request in -> its response's last byte out); the client's time = the same span on the client's clock
    (bench() called -> returned, and each step's part of it)."""
    reqs = sorted(wire, key=lambda w: w["t_post"])
    end = [w["t_end"] or w["t_done"] or w["t_last"] or w["t_post"] for w in reqs]
    spans = list(zip([w["t_post"] for w in reqs], end))
    out: dict = {"requests_on_wire": len(reqs), "expected": warmup + per_step * steps}
    out["server_busy_s"] = round(_busy(spans), 3)
    out["client_wall_s"] = round(client["end"] - client["start"], 3)
    out["client_over_server_pct"] = round(100 * (out["client_wall_s"] / out["server_busy_s"] - 1), 1)
    bounds = [client["start"], *client["steps"]]
    out["steps"] = []
    prev_end = max((b for _, b in spans[:warmup]), default=client["start"])  # the warm-up's last response
    for k in range(steps):
        s = spans[warmup + k * per_step: warmup + (k + 1) * per_step]
        if not s:
            break
        busy = _busy(s)
        # the client's time for step k: from the previous step's end (or the warm-up's start) to this step's end
        cw = bounds[k + 1] - bounds[k]
        gaps = [s[i + 1][0] - s[i][1] for i in range(len(s) - 1)]
        step = {"server_busy_s": round(busy, 3), "server_span_s": round(max(b for _, b in s) - min(a for a, _ in s), 3),
                "client_s": round(cw, 3), "client_over_server_pct": round(100 * (cw / busy - 1), 1),
                "before_first_request_s": round(s[0][0] - prev_end, 3)}
        if k == 0 and gaps:  # concurrency 1: the client's time between one response's end and the next request
            step["gap_between_requests_ms"] = {"median": round(statistics.median(gaps) * 1e3, 2),
                                               "max": round(max(gaps) * 1e3, 2), "sum_s": round(sum(gaps), 3)}
        out["steps"].append(step)
        prev_end = max(b for _, b in s)
    out["after_last_response_s"] = round(client["end"] - max(b for _, b in spans), 3) if spans else None
    out["warmup_and_before_s"] = round(spans[warmup][0] - client["start"], 3) if len(spans) > warmup else None
    return out


async def sweep(isl: int = 128, osl: int = 16, wire: bool = True) -> dict:
    run = await _serving("demo-1p1d", None)
    cap, path = None, Path(tempfile.mkdtemp(prefix="atomdeck-loadgen-")) / "wire.jsonl"
    concs = [1, 4, 16, 64]
    try:
        if wire:
            port = run.plan.router.url.rsplit(":", 1)[1]
            cap = subprocess.Popen([sys.executable, str(BENCH / "wire.py"), port, str(path)], stdout=subprocess.PIPE,
                                   text=True)
            assert cap.stdout is not None and cap.stdout.readline().strip() == "ready"
        w = Workload(isl=isl, osl=osl, concurrencies=concs, num_prompts=64)
        client: dict = {"steps": []}
        t0, client["start"] = time.perf_counter(), time.time()
        rep = await bench(target_of(run), w, on_step=lambda i, s: client["steps"].append(time.time()))
        wall = time.perf_counter() - t0
        client["end"] = time.time()
    finally:
        if cap is not None:
            await asyncio.sleep(0.3)
            cap.terminate()
            cap_cpu = cap.communicate(timeout=10)[0].strip()
        await run.teardown(grace=2)
    steps = [{k: round(r[k], 2) if isinstance(r[k], float) else r[k]
              for k in ("max_concurrency", "completed", "failed", "duration", "output_throughput",
                        "median_ttft_ms", "median_tpot_ms", "valid")} for r in rep.results]
    res = {"isl": isl, "osl": osl, "wall_s": round(wall, 2), "steps": steps, "goal_under_60s": wall < 60}
    if cap is not None:
        recs = [json.loads(x) for x in path.read_text().splitlines()]
        res["server"] = server_time(recs, w.warmup, w.num_prompts, len(concs), client) | {"capture": cap_cpu}
    print(json.dumps(res, indent=1), file=sys.stderr)
    return res


if __name__ == "__main__":
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    which = sys.argv[1:] or ["capacity", "sweep"]
    results = {k: v for k, v in load().get("loadgen", {}).items() if k != "machine"}  # keep the other part
    if "capacity" in which:
        results["capacity"] = asyncio.run(capacity())
    if "sweep" in which:
        if os.geteuid() != 0:
            print("not root: no capture of the router's port (bench/wire.py), so no server time", file=sys.stderr)
        results["sweep"] = asyncio.run(sweep(wire=os.geteuid() == 0))
    save("loadgen", results)
