"""The busy stretches of a BUSY_TRACE file (see sitecustomize.py beside this), one line each: seconds since
the first, how long, the samples it got, and its most common stack.

    .venv/bin/python bench/busy_trace/report.py FILE [min_ms]"""

from __future__ import annotations

import json
import os
import sys

WIDTH = int(os.environ.get("BUSY_TRACE_WIDTH", "200"))  # characters of the stack printed


def main(path: str, min_ms: float = 0) -> None:
    try:
        busy = json.load(open(path))
    except FileNotFoundError:
        raise SystemExit(f"{path}: no such file: the console wrote no busy stretch long enough to keep, or did not "
                         "load the sampler (PYTHONPATH must be an absolute path: the console runs elsewhere)") from None
    if not busy:
        print("no busy stretch")
        return
    t0 = busy[0]["t"]
    for b in busy:
        if b["dur"] * 1000 < min_ms:
            continue
        stack = b["stacks"][0][0] if b["stacks"] else ""
        print(f"{b['t'] - t0:8.2f} s  {b['dur'] * 1000:6.0f} ms  n={b['n']:<4} {stack[:WIDTH]}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0)
