"""Where each key press of a traced flood run waited: `.venv/bin/python bench/key_trace_report.py FILE`
(FILE from `KEY_TRACE=FILE bench/console.py flood` or `KEY_TRACE=FILE bench/scale_console.py`, see
atomdeck_key_trace.py). One row a press, slowest last,
in ms: sent -> the input thread's key event (to_key), -> the wrap action or the run view's cursor move
(key_to_action: the loop was busy; with the run view's panels drawn and the frames made meanwhile, and how
many of those frames laid the screen out),
the action, -> the start and the end of the frame that drew it, -> its write to the terminal starting (the
writer thread's queue), the write, and -> the bench seeing it in tmux's output (tmux, the bench's reading).
`key_trace_report.py FILE --frames [PHASE]`: the console's frames, widget draws and GC passes per second while
scale_console.py pressed the keys of PHASE ("coming up", "serving")."""

from __future__ import annotations

import json
import statistics
import sys


def report(path: str) -> list[dict]:
    rec = json.load(open(path))
    presses = json.load(open(path + ".bench.json"))
    kind = {k: [r for r in rec if r[0] == k] for k in "KAWFDGPJM"}
    rows = []
    for press in presses:
        sent, shown = press[0], press[1]
        key = next((r for r in kind["K"] if r[1] >= sent - 0.001), None)
        act = next((r for r in kind["A"] if r[1] >= sent), None)
        if key is None or act is None:
            continue
        frame = next((r for r in kind["F"] if r[2] >= act[2]), None)
        if act[3] is None:  # (the run view's cursor: the first write after the frame that drew it)
            write = next((r for r in kind["W"] if frame and r[1] >= frame[2]), None)
        else:  # (the log view's wrap: the write that says so)
            write = next((r for r in kind["W"] if r[1] >= act[1] and (r[4] if act[3] else r[5])), None)
        ms = lambda a, b: round((b - a) * 1000, 1)  # noqa: E731
        # the run view's panels drawn between the key event and the action (the loop busy with them), by panel
        def drawn(a: float, b: float) -> dict[str, float] | None:
            out: dict[str, float] = {}
            for r in kind["P"]:
                if r[2] > a and r[1] < b:
                    out[r[3]] = round(out.get(r[3], 0) + (min(r[2], b) - max(r[1], a)) * 1000, 1)
            return out or None
        frames = [r for r in kind["F"] if r[2] > key[1] and r[1] < act[1]]
        rows.append({"total": ms(sent, shown), "phase": press[2] if len(press) > 2 else None,
                     "to_key": ms(sent, key[1]), "key_to_action": ms(key[1], act[1]),
                     "panels_before": drawn(key[1], act[1]),
                     "panels_after": drawn(act[2], frame[1]) if frame else None,  # before the frame that drew it
                     "frames_before": round(sum(min(f[2], act[1]) - max(f[1], key[1]) for f in frames) * 1000, 1),
                     # the watcher's messages parsed and folded meanwhile
                     "messages_before": round(sum(min(m[2], act[1]) - max(m[1], key[1]) for m in kind["J"] + kind["M"]
                                                  if m[2] > key[1] and m[1] < act[1]) * 1000, 1),
                     "layouts_before": sum(1 for f in frames if len(f) > 3 and f[3]),
                     "frame_layout": frame[3] if frame and len(frame) > 3 else None,
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


def frames(path: str, phase: str) -> list[str]:
    """The console's drawing between the first and the last press of `phase` (scale_console.py: "coming up"): its
    frames (wall and main-thread CPU, those that laid the screen out), each widget class's `render_lines` calls,
    and the cyclic GC's passes by generation, per second of that span."""
    rec = json.load(open(path))
    presses = [p for p in json.load(open(path + ".bench.json")) if len(p) > 2 and p[2] == phase]
    a, b = presses[0][0], presses[-1][1]
    span = b - a
    got = [r for r in rec if a <= r[1] <= b]
    fr = [r for r in got if r[0] == "F"]
    out = [f"{phase}: {span:.1f} s, {len(presses)} presses; per second of it:",
           f"  frames {len(fr) / span:.1f}: wall {sum(r[2] - r[1] for r in fr) * 1000 / span:.0f} ms, CPU "
           f"{sum(r[4] for r in fr if len(r) > 4) * 1000 / span:.0f} ms; laying out "
           f"{sum(1 for r in fr if len(r) > 3 and r[3]) / span:.1f} of them"]
    by: dict[str, list[float]] = {}
    for r in got:
        if r[0] == "R":
            by.setdefault(r[3], []).append(r[2] - r[1])
    for name, times in sorted(by.items(), key=lambda kv: -sum(kv[1]))[:12]:
        out.append(f"  {name:20} {len(times) / span:5.1f} draws, {sum(times) * 1000 / span:5.1f} ms")
    parsed = [r for r in got if r[0] == "J"]
    folded = [r for r in got if r[0] == "M"]
    if parsed or folded:
        out.append(f"  watcher messages {len(folded) / span:.1f}: parsed {sum(r[2] - r[1] for r in parsed) * 1000 / span:.1f} ms "
                   f"({sum(r[3] for r in parsed) / span / 1000:.0f} KB), folded {sum(r[2] - r[1] for r in folded) * 1000 / span:.1f} ms "
                   f"({sum(r[3] for r in folded) / span:.0f} events); longest "
                   f"{max((r[2] - r[1] for r in parsed + folded), default=0) * 1000:.0f} ms")
    for gen in (0, 1, 2):
        passes = [r[2] - r[1] for r in got if r[0] == "G" and r[3] == gen]
        out.append(f"  GC generation {gen}: {len(passes) / span:5.2f} passes, {sum(passes) * 1000 / span:5.1f} ms"
                   + (f" (longest {max(passes) * 1000:.0f} ms)" if passes else ""))
    return out


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "--frames":  # KEY_TRACE=FILE scale_console.py: where the CPU went
        print("\n".join(frames(sys.argv[1], sys.argv[3] if len(sys.argv) > 3 else "coming up")))
        sys.exit(0)
    rows = report(sys.argv[1])
    for r in rows:
        print(r)
    for k in rows[0]:
        vals = sorted(r[k] for r in rows if isinstance(r[k], (int, float)) and not isinstance(r[k], bool))
        if vals:
            print(f"{k:15} median {statistics.median(vals):6.1f}  p95 {vals[min(len(vals) - 1, int(len(vals) * .95))]:6.1f}")
