"""Comparing layouts: one row per step of every bench, the Pareto front of output tok/s per GPU against
tok/s per user (interactivity), and the comparison as JSON and CSV.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

COLUMNS = ("run", "layout", "total_gpus", "prefill_gpus", "decode_gpus", "workload", "max_concurrency", "completed",
           "failed", "short", "duration", "request_throughput", "output_throughput", "output_throughput_per_gpu",
           "total_token_throughput_per_gpu", "interactivity", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
           "median_itl_ms", "median_e2el_ms", "pareto")


def rows(reports: Sequence[dict]) -> list[dict]:
    """One flat row per concurrency step of every report, with the layout's GPUs and whether the point
    is on the Pareto front of its workload."""
    out = []
    for rep in reports:
        g = rep.get("gpus", {})
        for r in rep.get("results", []):
            row = {"run": rep.get("run", ""), "layout": rep.get("layout", ""),
                   "total_gpus": g.get("total_gpus", 0), "prefill_gpus": g.get("prefill_gpus", 0),
                   "decode_gpus": g.get("decode_gpus", 0), "workload": rep.get("workload_key", "")}
            for k in COLUMNS:
                if k not in row and k != "pareto":
                    row[k] = r.get(k, 0)
            out.append(row)
    for key in {r["workload"] for r in out}:
        same = [r for r in out if r["workload"] == key]
        front = pareto_front([(r["interactivity"], r["output_throughput_per_gpu"]) for r in same])
        for i, r in enumerate(same):
            r["pareto"] = i in front
    return out


def pareto_front(points: Sequence[tuple[float, float]]) -> set[int]:
    """Indices of the points no other point beats on both axes (higher is better on both)."""
    front = set()
    for i, (x, y) in enumerate(points):
        dominated = any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i)
        if not dominated:
            front.add(i)
    return front


def to_csv(table: Sequence[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in table:
        w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def to_text(table: Sequence[dict]) -> str:
    """The table as aligned text (the CLI's `compare` output)."""
    head = (f"{'RUN':34} {'LAYOUT':14} {'GPUS':>9} {'CONC':>5} {'OK':>5} {'FAIL':>5} {'OUT TOK/S':>10} "
            f"{'TOK/S/GPU':>10} {'TOK/S/USER':>10} {'TTFT ms':>9} {'TPOT ms':>8}  PARETO")
    lines = [head]
    for r in table:
        gpus = f"{r['total_gpus']}={r['prefill_gpus']}+{r['decode_gpus']}"
        lines.append(f"{r['run'][:34]:34} {r['layout'][:14]:14} {gpus:>9} {r['max_concurrency']:>5} "
                     f"{r['completed']:>5} {r['failed']:>5} {r['output_throughput']:>10.1f} "
                     f"{r['output_throughput_per_gpu']:>10.2f} {r['interactivity']:>10.2f} "
                     f"{r['median_ttft_ms']:>9.1f} {r['median_tpot_ms']:>8.2f}  {'*' if r['pareto'] else ''}")
    return "\n".join(lines)
