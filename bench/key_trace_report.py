"""Where each key press of a traced flood run waited: `.venv/bin/python bench/key_trace_report.py FILE`
(FILE from `KEY_TRACE=FILE bench/console.py flood`, see atomdeck_key_trace.py). One row a press, slowest last,
in ms: sent -> the input thread's key event (to_key), -> the wrap action (key_to_action: the loop was busy),
the action, -> the start and the end of the frame that drew it, -> its write to the terminal starting (the
writer thread's queue), the write, and -> the bench seeing it in tmux's output (tmux, the bench's reading)."""

from __future__ import annotations

import json
import statistics
import sys


def report(path: str) -> list[dict]:
    rec = json.load(open(path))
    presses = json.load(open(path + ".bench.json"))
    kind = {k: [r for r in rec if r[0] == k] for k in "KAWFDG"}
    rows = []
    for sent, shown in presses:
        key = next((r for r in kind["K"] if r[1] >= sent - 0.001), None)
        act = next((r for r in kind["A"] if r[1] >= sent), None)
        if key is None or act is None:
            continue
        frame = next((r for r in kind["F"] if r[2] >= act[2]), None)
        write = next((r for r in kind["W"] if r[1] >= act[1] and (r[4] if act[3] else r[5])), None)
        ms = lambda a, b: round((b - a) * 1000, 1)  # noqa: E731
        rows.append({"total": ms(sent, shown), "to_key": ms(sent, key[1]), "key_to_action": ms(key[1], act[1]),
                     "action": ms(act[1], act[2]),
                     "to_frame": ms(act[2], frame[1]) if frame else None,
                     "frame": ms(frame[1], frame[2]) if frame else None,
                     "to_write": ms(frame[2], write[1]) if frame and write else None,
                     "write": ms(write[1], write[2]) if write else None,
                     "write_to_shown": ms(write[2], shown) if write else None,
                     # the cyclic GC's passes inside the press (the loop held by them), and the longest one's generation
                     "gc": round(sum(min(g[2], shown) - max(g[1], sent) for g in kind["G"]
                                     if g[2] > sent and g[1] < shown) * 1000, 1),
                     "gc_gen": max((g[3] for g in kind["G"] if g[2] > sent and g[1] < shown), default=None)})
    return sorted(rows, key=lambda r: r["total"])


if __name__ == "__main__":
    rows = report(sys.argv[1])
    for r in rows:
        print(r)
    for k in rows[0]:
        vals = sorted(r[k] for r in rows if r[k] is not None)
        if vals:
            print(f"{k:15} median {statistics.median(vals):6.1f}  p95 {vals[min(len(vals) - 1, int(len(vals) * .95))]:6.1f}")
