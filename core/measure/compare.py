"""Comparing layouts: one row per step of every bench, the Pareto front of output tok/s per GPU against
tok/s per user (interactivity), and the comparison as JSON and CSV.

Per GPU has two meanings in the field for a disaggregated layout, and the chart says which it draws (BASES):
srt-slurm divides output tok/s by all the layout's GPUs; InferenceX divides output tok/s by the decode GPUs
(input tok/s by the prefill GPUs, total by all). Invalid steps (validity.py) are in the table, marked, and never on
the Pareto front unless asked (`include_invalid`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

# basis -> (result key, the chart's words for its y axis, whose definition)
BASES = {
    "all": ("output_throughput_per_gpu", "output tok/s per GPU (all GPUs)", "srt-slurm: output / all GPUs"),
    "decode": ("output_throughput_per_decode_gpu", "output tok/s per decode GPU",
               "InferenceX: output / decode GPUs"),
}
DEFAULT_BASIS = "all"

COLUMNS = ("run", "layout", "total_gpus", "prefill_gpus", "decode_gpus", "workload", "max_concurrency", "completed",
           "failed", "short", "duration", "request_throughput", "output_throughput", "output_throughput_per_gpu",
           "output_throughput_per_decode_gpu", "input_throughput_per_prefill_gpu", "total_token_throughput_per_gpu",
           "interactivity", "p90_interactivity", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms",
           "median_e2el_ms", "request_goodput", "valid", "invalid_reasons", "pareto")


def basis_of(name: str) -> str:
    if name not in BASES:
        raise ValueError(f"--per-gpu must be one of {', '.join(BASES)} ({'; '.join(b[2] for b in BASES.values())}), "
                         f"got {name!r}")
    return name


def y_of(r: dict, basis: str = DEFAULT_BASIS) -> float:
    """A step's output tok/s per GPU under the basis; computed from its GPUs for reports saved before the key."""
    key = BASES[basis][0]
    if key in r:
        return float(r[key] or 0.0)
    total = r.get("total_gpus", 0) or 0
    dec = (r.get("decode_gpus", 0) or 0) if r.get("prefill_gpus") and r.get("decode_gpus") else total
    div = dec if basis == "decode" else total
    return float(r.get("output_throughput", 0.0)) / div if div else 0.0


def rows(reports: Sequence[dict], include_invalid: bool = False, basis: str = DEFAULT_BASIS) -> list[dict]:
    """One flat row per concurrency step of every report, with the layout's GPUs and whether the point
    is on the Pareto front of its workload (invalid steps only with `include_invalid`)."""
    out = []
    for rep in reports:
        g = rep.get("gpus", {})
        for r in rep.get("results", []):
            row = {"run": rep.get("run", ""), "layout": rep.get("layout", ""),
                   "total_gpus": g.get("total_gpus", 0), "prefill_gpus": g.get("prefill_gpus", 0),
                   "decode_gpus": g.get("decode_gpus", 0), "workload": rep.get("workload_key", "")}
            for k in COLUMNS:
                if k not in row and k not in ("pareto", "valid", "invalid_reasons"):
                    row[k] = r.get(k, 0)
            row["output_throughput_per_decode_gpu"] = y_of({**r, **row}, "decode")
            row["valid"] = bool(r.get("valid", True))
            row["invalid_reasons"] = list(r.get("invalid_reasons", []))
            out.append(row)
    for key in {r["workload"] for r in out}:
        same = [r for r in out if r["workload"] == key]
        judged = [r for r in same if r["valid"] or include_invalid]
        front = pareto_front([(r["interactivity"], y_of(r, basis)) for r in judged])
        for r in same:
            r["pareto"] = False
        for i, r in enumerate(judged):
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
        w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else "; ".join(v) if isinstance(v, list) else v)
                    for k, v in r.items()})
    return buf.getvalue()


def to_text(table: Sequence[dict], basis: str = DEFAULT_BASIS) -> str:
    """The table as aligned text (the CLI's `compare` output); the per-GPU column is the basis's."""
    per = "TOK/S/DGPU" if basis == "decode" else "TOK/S/GPU"
    head = (f"{'RUN':34} {'LAYOUT':14} {'GPUS':>9} {'CONC':>5} {'OK':>5} {'FAIL':>5} {'OUT TOK/S':>10} "
            f"{per:>10} {'TOK/S/USER':>10} {'TTFT ms':>9} {'TPOT ms':>8}  PARETO  VALID")
    lines = [head]
    for r in table:
        gpus = f"{r['total_gpus']}={r['prefill_gpus']}+{r['decode_gpus']}"
        valid = "yes" if r["valid"] else "NO: " + (r["invalid_reasons"][0] if r["invalid_reasons"] else "?")
        lines.append(f"{r['run'][:34]:34} {r['layout'][:14]:14} {gpus:>9} {r['max_concurrency']:>5} "
                     f"{r['completed']:>5} {r['failed']:>5} {r['output_throughput']:>10.1f} "
                     f"{y_of(r, basis):>10.2f} {r['interactivity']:>10.2f} "
                     f"{r['median_ttft_ms']:>9.1f} {r['median_tpot_ms']:>8.2f}  "
                     f"{'*' if r['pareto'] else ' ':6}  {valid}")
    lines.append(f"per GPU: {BASES[basis][2]}" + ("" if basis == "decode" else " (--per-gpu decode: InferenceX's "
                                                                                "output / decode GPUs)"))
    return "\n".join(lines)
