"""Issue 40.4/40.5: the layout search on the demo with the simulator sped up, two workloads, two winners. Runs
`atomdeck sweep demo-1p1d --layouts 1p1d,1p2d,2p1d` on the demo's first three nodes, once per workload (fresh), and
prints the wall time, each layout's best output tok/s per GPU and the recommendation.

    flock /tmp/atomdeck-demo.lock .venv/bin/python bench/layout_search.py
    tests/cluster/up.sh && flock /tmp/atomdeck-lab.lock .venv/bin/python bench/layout_search.py lab

`lab`: the same three layouts on three lab nodes through Slurm, in the one holding job the search asks for (each
layout a step set in it), the prefill-heavy workload; prints the wall time, the job and the winner.

Numbers, not asserts. Goals: each search <= 3 min; the prefill-heavy workload's winner has more prefill, the
decode-heavy one's more decode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

# (name, ISL, OSL, concurrency, prompts per step, ATOMDECK_SIM_SPEED): the speeds keep the streamed tokens a
# second within what the client, the router and the simulated servers carry on this 2-core machine (bench/README)
WORKLOADS = [("prefill-heavy", 8192, 1024, "16", 48, "5"), ("decode-heavy", 1024, 8192, "32", 32, "4")]


def search(name: str, isl: int, osl: int, conc: str, n: int, speed: str, *where: str) -> tuple[dict, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "sweep", "demo-1p1d", *where, "--layouts",
                        "1p1d,1p2d,2p1d", "--concurrency", conc, "--isl", str(isl), "--osl", str(osl),
                        "--num-prompts", str(n), "--fresh", "--json"],
                       capture_output=True, text=True, env={**os.environ, "ATOMDECK_SIM_SPEED": speed})
    if p.returncode not in (0, 1):
        raise SystemExit(f"{name} failed: {p.stderr[-2000:]}")
    out = json.loads(p.stdout)
    out["stderr_tail"] = p.stderr.strip().splitlines()[-3:]
    return out, time.monotonic() - t0


def per_gpu(out: dict) -> dict[str, float]:
    """Each layout's best valid output tok/s per GPU."""
    return {e["layout"]: max((r["output_throughput_per_gpu"] for r in e["results"] if r.get("valid")), default=0)
            for e in out["entries"]}


def lab() -> None:
    from atomdeck.core.run.run import Run

    name, isl, osl, conc, n, speed = WORKLOADS[0]
    out, wall = search(name, isl, osl, conc, n, speed, "--cluster", "lab", "--nodes",
                       "mia1-p01-g01,mia1-p01-g02,mia1-p01-g03")
    best = per_gpu(out)
    jobs = {Run.open(e["run"]).rd.meta().get("job_id") for e in out["entries"] if e.get("run")}
    pick = out["recommendation"]
    print({"where": "lab (Slurm)", "workload": f"{name} ISL {isl} OSL {osl} c={conc} x {n}", "sim_speed": speed,
           "wall_s": round(wall, 1), "statuses": {e["layout"]: e["status"] for e in out["entries"]},
           "jobs": sorted(j for j in jobs if j), "per_gpu": {k: round(v, 1) for k, v in best.items()},
           "winner": pick["layout"] if pick else None, "said": out["stderr_tail"],
           "load": round(os.getloadavg()[0], 1)}, flush=True)


def main() -> None:
    for name, isl, osl, conc, n, speed in WORKLOADS:
        out, wall = search(name, isl, osl, conc, n, speed, "--nodes", "demo-n01,demo-n02,demo-n03")
        best = per_gpu(out)
        pick = out["recommendation"]
        print({"workload": f"{name} ISL {isl} OSL {osl} c={conc} x {n}", "sim_speed": speed,
               "wall_s": round(wall, 1), "per_gpu": {k: round(v, 1) for k, v in best.items()},
               "winner": pick["layout"] if pick else None,
               "margin": round(sorted(best.values())[-1] / sorted(best.values())[-2], 2) if len(best) > 1 else None,
               "load": round(os.getloadavg()[0], 1)}, flush=True)


if __name__ == "__main__":
    lab() if sys.argv[1:] == ["lab"] else main()
