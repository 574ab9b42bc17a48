"""The busy stretches of a BUSY_TRACE file (see sitecustomize.py beside this), one line each: seconds since
the first, how long, the samples it got, and its most common stack.

    .venv/bin/python bench/busy_trace/report.py FILE [min_ms] [--presses=PRESSES_OUT_FILE]

With --presses (the file `PRESSES_OUT=FILE bench/scale_console.py` writes) the times are seconds from the launch
key, and the presses that took 40 ms or more are listed among the stretches (both use the same clock)."""

from __future__ import annotations

import json
import os
import sys

WIDTH = int(os.environ.get("BUSY_TRACE_WIDTH", "200"))  # characters of the stack printed
SLOW_PRESS_S = 0.04


def main(path: str, min_ms: float = 0, presses: str = "") -> None:
    try:
        busy = json.load(open(path))
    except FileNotFoundError:
        raise SystemExit(f"{path}: no such file: the console wrote no busy stretch long enough to keep, or did not "
                         "load the sampler (PYTHONPATH must be an absolute path: the console runs elsewhere)") from None
    rows = []
    t0 = busy[0]["t"] if busy else 0.0
    if presses:
        pressed = json.load(open(presses))
        t0 = pressed["t_launch"] or t0
        rows += [(sent, f"{sent - t0:8.2f} s  {1000 * (shown - sent):6.0f} ms  press while {phase}")
                 for sent, shown, phase in pressed["presses"] if shown - sent >= SLOW_PRESS_S]
    for b in busy:
        if b["dur"] * 1000 < min_ms:
            continue
        stack = b["stacks"][0][0] if b["stacks"] else ""
        rows.append((b["t"], f"{b['t'] - t0:8.2f} s  {b['dur'] * 1000:6.0f} ms  n={b['n']:<4} {stack[:WIDTH]}"))
    if not rows:
        print("no busy stretch")
    for _, line in sorted(rows):
        print(line)


if __name__ == "__main__":
    opts = [a for a in sys.argv[1:] if a.startswith("--presses=")]
    args = [a for a in sys.argv[1:] if a not in opts]
    main(args[0], float(args[1]) if len(args) > 1 else 0, opts[0].split("=", 1)[1] if opts else "")
