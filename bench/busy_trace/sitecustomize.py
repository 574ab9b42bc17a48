"""Where the console's loop is busy, in bursts: put this folder on PYTHONPATH and set BUSY_TRACE=FILE; in a
process started with `tui` in its arguments (the console; the watcher and the simulators are left alone) a
thread looks at the main thread's stack every 5 ms. A stretch of samples that are not the loop's idle wait
(selectors' select) lasting 60 ms or more is written to FILE (JSON, rewritten at each one, so a console
killed with its tmux still leaves it): when (time.monotonic()), how long, how many samples it got, and its
most common stacks (6 frames each, the event loop's own frames left out). Few samples over a long stretch
mean the main thread waited for a CPU (or the GIL) rather than worked: compare `n` with `dur` / 5 ms.

    PYTHONPATH=$PWD/bench/busy_trace BUSY_TRACE=/tmp/busy.json \\
        bench/isolated .venv/bin/python bench/scale_console.py --engines-cpus=1
    .venv/bin/python bench/busy_trace/report.py /tmp/busy.json

The sampler takes the GIL every 5 ms: it slows the console a little; use it to find where, not how long."""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time

IDLE = "selectors.py:select"
LOOP_FRAMES = ("events.py", "base_events.py", "selectors.py", "threading.py")
MIN_BUSY_S = 0.06


def _frames(f) -> list[str]:
    out = []
    while f is not None:
        out.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}:{f.f_lineno}")
        f = f.f_back
    return out


DEPTH = int(os.environ.get("BUSY_TRACE_DEPTH", "6"))  # frames kept of each stack, innermost first


def _summary(t0: float, dur: float, stacks: list[list[str]]) -> dict:
    ours = collections.Counter(" < ".join([x for x in s if not x.startswith(LOOP_FRAMES)][:DEPTH]) for s in stacks)
    return {"t": t0, "dur": dur, "n": len(stacks), "stacks": ours.most_common(6)}


def _sample(out: str) -> None:
    main_id = threading.main_thread().ident
    busy: list[dict] = []
    stacks: list[list[str]] = []
    since = None
    while True:
        time.sleep(0.005)
        f = sys._current_frames().get(main_id)
        if f is None:
            continue
        st = _frames(f)
        now = time.monotonic()
        if not st[0].startswith(IDLE):
            if since is None:
                since, stacks = now, []
            stacks.append(st)
        elif since is not None:
            if now - since >= MIN_BUSY_S:
                busy.append(_summary(since, now - since, stacks))
                try:  # whole or not at all: the console may be killed with its tmux at any moment
                    with open(out + ".tmp", "w") as fh:
                        json.dump(busy, fh, indent=1)
                    os.replace(out + ".tmp", out)
                except OSError:
                    pass
            since = None


if os.environ.get("BUSY_TRACE") and "tui" in sys.argv:
    threading.Thread(target=_sample, args=(os.environ["BUSY_TRACE"],), daemon=True, name="busy-trace").start()
