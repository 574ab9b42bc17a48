"""Issue 40.4/40.5: the layout search on the demo with the simulator sped up, two workloads, two winners. Runs
`atomdeck sweep demo-1p1d --layouts 1p1d,1p2d,2p1d` on the demo's first three nodes, once per workload (fresh), and
prints the wall time, each layout's best output tok/s per GPU and the recommendation.

    flock /tmp/atomdeck-demo.lock .venv/bin/python bench/layout_search.py

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


def main() -> None:
    for name, isl, osl, conc, n, speed in WORKLOADS:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "sweep", "demo-1p1d", "--nodes",
                            "demo-n01,demo-n02,demo-n03", "--layouts", "1p1d,1p2d,2p1d", "--concurrency", conc,
                            "--isl", str(isl), "--osl", str(osl), "--num-prompts", str(n), "--fresh", "--json"],
                           capture_output=True, text=True, env={**os.environ, "ATOMDECK_SIM_SPEED": speed})
        wall = time.monotonic() - t0
        if p.returncode not in (0, 1):
            print(name, "failed:", p.stderr[-2000:])
            continue
        out = json.loads(p.stdout)
        best = {e["layout"]: max((r["output_throughput_per_gpu"] for r in e["results"] if r.get("valid")), default=0)
                for e in out["entries"]}
        pick = out["recommendation"]
        print({"workload": f"{name} ISL {isl} OSL {osl} c={conc} x {n}", "sim_speed": speed,
               "wall_s": round(wall, 1), "per_gpu": {k: round(v, 1) for k, v in best.items()},
               "winner": pick["layout"] if pick else None,
               "margin": round(sorted(best.values())[-1] / sorted(best.values())[-2], 2) if len(best) > 1 else None,
               "load": round(os.getloadavg()[0], 1)}, flush=True)


if __name__ == "__main__":
    main()
