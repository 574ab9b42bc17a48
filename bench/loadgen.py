"""The load generator's own capacity, and a sweep's wall time on the demo.

1. Capacity: a demo 1P1D with simulator delays off (ATOMSIM_SPEED=0: token time 0), concurrency 64,
   through the real router. Two workloads: long outputs (streamed tokens/s) and short ones (requests/s).
   The client is one asyncio process (one core); its CPU seconds are measured with getrusage, so
   "per client core" = figure / client CPU share. The simulator's processes share the same 2 cores,
   so the achieved figure is a floor of what the client can do; tokens per client CPU-second is its
   ceiling. Goal: >= 20,000 streamed tokens/s and >= 500 requests/s at concurrency 64.
2. Sweep: `atomdeck bench`'s 4 steps (1, 4, 16, 64) x 64 requests on the demo at its shipped pace.
   Goal: under 60 s.

    .venv/bin/python bench/loadgen.py [capacity|sweep]
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import tempfile
import time

from atomdeck.core.measure.bench import bench, target_of
from atomdeck.core.measure.workload import Workload
from common import load, save


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


async def sweep(isl: int = 128, osl: int = 16) -> dict:
    run = await _serving("demo-1p1d", None)
    try:
        w = Workload(isl=isl, osl=osl, concurrencies=[1, 4, 16, 64], num_prompts=64)
        t0 = time.perf_counter()
        rep = await bench(target_of(run), w)
        wall = time.perf_counter() - t0
    finally:
        await run.teardown(grace=2)
    steps = [{k: round(r[k], 2) if isinstance(r[k], float) else r[k]
              for k in ("max_concurrency", "completed", "failed", "duration", "output_throughput",
                        "median_ttft_ms", "median_tpot_ms")} for r in rep.results]
    res = {"isl": isl, "osl": osl, "wall_s": round(wall, 2), "steps": steps, "goal_under_60s": wall < 60}
    print(res, file=sys.stderr)
    return res


if __name__ == "__main__":
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    which = sys.argv[1:] or ["capacity", "sweep"]
    results = {k: v for k, v in load().get("loadgen", {}).items() if k != "machine"}  # keep the other part
    if "capacity" in which:
        results["capacity"] = asyncio.run(capacity())
    if "sweep" in which:
        results["sweep"] = asyncio.run(sweep())
    save("loadgen", results)
