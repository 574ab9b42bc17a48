"""How a big local run comes up, headless: `atomdeck up --wait` of (N/2)P(N/2)D TP8 + router on the synthetic
local cluster of scale_console.py (ATOMDECK_SIM_SPEED=20), then from the run's events.jsonl: when the launch
had started every process, when it served, and each process stage's first / median / last time; and from
/proc/stat the machine's CPU over the come-up (busy and idle core-seconds). Then `atomdeck down`.
Printed, not saved; benchmarks do not assert.

    bench/isolated .venv/bin/python bench/comeup_timeline.py 128
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_console import cluster_yaml, recipe_yaml


def cpu_ticks() -> tuple[int, int]:
    """(busy, idle) clock ticks of all CPUs since boot."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(f) - f[3] - f[4], f[3] + f[4]


def main(n: int) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    with tempfile.TemporaryDirectory(prefix="comeup-") as d:
        tmp = Path(d)
        env = {**os.environ, "XDG_STATE_HOME": str(tmp / "state"), "ATOMDECK_SIM_SPEED": "20"}
        (tmp / "scale.yaml").write_text(cluster_yaml(n))
        (tmp / "recipe.yaml").write_text(recipe_yaml(n))
        ad = [sys.executable, "-m", "atomdeck.core.cli.main"]
        b0, i0 = cpu_ticks()
        t0 = time.monotonic()
        up = subprocess.run([*ad, "up", str(tmp / "recipe.yaml"), "--cluster", str(tmp / "scale.yaml"), "--wait",
                             "--timeout", "300"], capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
        b1, i1 = cpu_ticks()
        try:
            rd = sorted((tmp / "state" / "atomdeck" / "runs").iterdir())[-1]
            events = [json.loads(line) for line in (rd / "events.jsonl").read_text().splitlines()]
            print(f"up exited {up.returncode} after {wall:.1f} s; machine CPU meanwhile: busy {(b1 - b0) / hz:.1f}, "
                  f"idle {(i1 - i0) / hz:.1f} core-seconds")
            first = events[0]["t"]
            stages: dict[str, list[float]] = collections.defaultdict(list)
            for e in events:
                t = e["t"] - first
                if e.get("kind") == "run":
                    print(f"{t:7.2f} s  run {e.get('value')}: {str(e.get('detail'))[:90]}")
                elif e.get("kind") == "proc.stage":
                    stages[str(e.get("value"))].append(t)
            for stage, ts in stages.items():
                ts.sort()
                print(f"  {stage:<20} n={len(ts):<4} first {ts[0]:6.1f}  median {ts[len(ts) // 2]:6.1f}  "
                      f"last {ts[-1]:6.1f} s")
        finally:
            for m in json.loads(subprocess.run([*ad, "runs", "--json"], capture_output=True, text=True,
                                               env=env).stdout or '{"runs": []}')["runs"]:
                subprocess.run([*ad, "down", m["id"]], capture_output=True, env=env, timeout=300)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 128)
