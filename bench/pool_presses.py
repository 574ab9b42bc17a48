"""Key presses of several `scale_console.py` runs pooled, per phase: the files `PRESSES_OUT=FILE` wrote, grouped
by build. Prints, saves nothing.

    .venv/bin/python bench/pool_presses.py new: /tmp/ab/new-*.json old: /tmp/ab/old-*.json

Each group: per phase the pooled p50 / p95 / p99 / max (ms) and the count, each run's own p95, and "starting +
coming up" together (a change that moves work from one phase to the other shows there as what it is). With
`--slow=MS`, every press slower than that with its seconds from the launch key and its phase."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from common import pct

PHASES = ("starting", "coming up", "serving", "serving apart")


def load(path: str) -> tuple[float | None, list[tuple[float, float, str]]]:
    d = json.loads(Path(path).read_text())
    return d.get("t_launch"), [(sent, shown, phase) for sent, shown, phase in d["presses"]]


def report(name: str, files: list[str], slow_ms: float | None = None) -> list[str]:
    out = [f"{name}: {len(files)} runs"]
    runs = [load(f) for f in files]
    for phase in (*PHASES, "starting + coming up"):
        want = ("starting", "coming up") if phase == "starting + coming up" else (phase,)
        per = [[1000 * (shown - sent) for sent, shown, ph in presses if ph in want] for _, presses in runs]
        pooled = [x for run in per for x in run]
        if not pooled:
            continue
        singles = ", ".join(f"{pct(run, 95):.0f}" for run in per if run)
        out.append(f"  {phase:21} n={len(pooled):4}  p50 {pct(pooled, 50):4.0f}  p95 {pct(pooled, 95):4.0f}  "
                   f"p99 {pct(pooled, 99):4.0f}  max {max(pooled):4.0f} ms   each run's p95: {singles}")
    if slow_ms is not None:
        for f, (t0, presses) in zip(files, runs):
            slow = [f"{sent - (t0 or sent):.1f} s {1000 * (shown - sent):.0f} ms ({ph})"
                    for sent, shown, ph in presses if 1000 * (shown - sent) > slow_ms]
            out.append(f"  {Path(f).name}: " + ("; ".join(slow) or "none"))
    return out


def main(argv: list[str]) -> None:
    slow = next((float(a.split("=", 1)[1]) for a in argv if a.startswith("--slow=")), None)
    groups: dict[str, list[str]] = {}
    name = "runs"
    for a in argv:
        if a.startswith("--slow="):
            continue
        if a.endswith(":"):  # the files after it are this group's
            name = a[:-1]
            continue
        groups.setdefault(name, []).append(a)
    if not groups:
        raise SystemExit(__doc__)
    for name, files in groups.items():
        print("\n".join(report(name, sorted(files), slow)))


if __name__ == "__main__":
    main(sys.argv[1:])
