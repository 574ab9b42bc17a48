"""Shared bits of the benchmarks: statistics, results files, the README table."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results" / "latest.json"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summary(values: list[float]) -> dict:
    return {"n": len(values), "median": statistics.median(values) if values else None,
            "p95": pct(values, 95) if values else None, "min": min(values) if values else None,
            "max": max(values) if values else None}


def machine() -> dict:
    return {"host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "when": time.strftime("%Y-%m-%d %H:%M:%S")}


def save(section: str, data: dict) -> None:
    RESULTS.parent.mkdir(exist_ok=True)
    try:
        all_results = json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        all_results = {}
    all_results[section] = {**data, "machine": machine()}
    RESULTS.write_text(json.dumps(all_results, indent=2, default=str) + "\n")


def load() -> dict:
    try:
        return json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        return {}
