"""Plan scale: node selection + plan + commands + lint for 8, 64 and 256 nodes (goal <= 100 ms at
256, close to linear), and start-up: `atomdeck --help` and `atomdeck plan --json` wall time."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from atomdeck.core.config.catalog import load_catalog
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.paths import catalog_path
from atomdeck.core.config.recipe import parse_recipe
from atomdeck.core.design.commands import LaunchContext
from atomdeck.core.design.inventory import Node
from atomdeck.core.design.lint import assess
from common import ROOT, save


def plan_time(nodes: int, reps: int = 7) -> float:
    cluster = parse_cluster("name: big\nlauncher: slurm\ngpus_per_node: 8\n"
                            "exclude: [{node: n0007, reason: bad}]\n")
    inv = [Node(f"n{i:04d}", f"10.{i // 250}.{i % 250}.1", ("IDLE",) if i % 50 else ("IDLE", "DRAIN"), 8)
           for i in range(int(nodes * 1.1) + 2)]
    half = nodes // 2
    recipe = parse_recipe(f"name: big\nmodel: {{path: deepseek-ai/DeepSeek-V4-Pro}}\nprefill: {{workers: {half}}}\n"
                          f"decode: {{workers: {nodes - half}}}\nbenchmark: {{concurrencies: [64, 256]}}\n")
    cat = load_catalog(catalog_path())
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a = assess(recipe, cluster, inv, None, frozenset(), cat, LaunchContext(job_id="1"))
        times.append(time.perf_counter() - t0)
        assert a.plan is not None and len(a.processes) == nodes + 1, a.findings
    return statistics.median(times)


def cli_time(args: list[str], reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, cwd=ROOT, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> dict:
    plan = {n: plan_time(n) for n in (8, 64, 256)}
    return {
        "plan_lint_render_s": {str(k): round(v, 4) for k, v in plan.items()},
        "growth_64_to_256": round(plan[256] / plan[64], 2),
        "goal_256_le_100ms": plan[256] <= 0.1,
        "help_s": round(cli_time(["--help"]), 3),
        "plan_json_s": round(cli_time(["plan", "demo-2p1d", "--json"]), 3),
    }


if __name__ == "__main__":
    res = main()
    save("scale", res)
    import json

    print(json.dumps(res, indent=2))
