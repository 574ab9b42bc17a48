"""The log view under a flood, headless: the console's own cost, without 8 simulators and a watcher.

    .venv/bin/python bench/console_flood_keys.py [seconds] [rate]      # defaults: 15 s, 2,000 lines/s

A fake run (tests/tui/fakerun.py) attached at 160x50; its decode-0 log view is open and following while
`rate` engine-status lines a second (the simulator's ATOMSIM_FLOOD line) reach core's line listeners in
batches every 50 ms, as the watcher client folds them. Every ~0.6 s the bench presses `w` (wrap, what
bench/console.py flood presses) and times it to the first frame handed to the driver whose status line
shows the new wrap state (the terminal's escape sequences are built, as a terminal would be sent them).
Prints console CPU (share of a core), key -> frame p50/p95, CPU per key press, frames a second, rows
rendered through the log's render_line per frame, and how far the view was behind the lines fed at the end.
Numbers are written, not asserted; on a shared machine compare ratios in one session."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="atomdeck-bench-")
os.environ.setdefault("ATOMDECK_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-home-"))


def line(n: int) -> str:
    return (f"[atom {time.strftime('%H:%M:%S')}] Engine Core: running=0 reqs, waiting=0 reqs, KV cache usage=0.0%, "
            f"prefix cache hit rate=0.0%, prompt throughput=0.0 tokens/s, generation throughput=0.0 tokens/s "
            f"(status #{n})")


async def main(seconds: float, rate: float) -> dict:
    from atomdeck.tui.widgets.log_lines import LogLines
    from textual._compositor import CompositorUpdate

    from tests.tui.conftest import make_app
    from tests.tui.test_run_logs import open_log

    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        run, screen, log = await open_log(pilot)
        status = screen.query_one("#log-status")
        frames: list[tuple[float, float, bool, int]] = []  # (when, CPU, wrap shown, rows rendered so far)
        rendered = [0]
        # rows of the log drawn (not taken from a cache): _render_row where there is one, else render_line
        hook = "_render_row" if hasattr(LogLines, "_render_row") else "render_line"
        render_row = getattr(LogLines, hook)

        def counting(self, *args):
            rendered[0] += 1
            return render_row(self, *args)

        setattr(LogLines, hook, counting)
        display = app._display

        def timed_display(scr, renderable) -> None:
            if renderable is not None and not app._batch_count:
                if isinstance(renderable, CompositorUpdate):
                    renderable.render_segments(app.console)
                frames.append((time.perf_counter(), time.process_time(), "wrap on" in str(status.render()),
                               rendered[0]))
            display(scr, renderable)

        app._display = timed_display
        count = 0
        stop = False

        async def flood() -> None:
            nonlocal count
            owed, tick, t = 0.0, 0.05, time.monotonic()
            while not stop:
                owed += rate * tick
                batch = []
                while owed >= 1:
                    owed -= 1
                    count += 1
                    batch.append(line(count))
                for x in batch:
                    for f in list(run.line_listeners):
                        f("decode-0", x)
                t += tick
                await asyncio.sleep(max(0.0, t - time.monotonic()))

        feeder = asyncio.create_task(flood())
        await asyncio.sleep(1.0)
        lat: list[float] = []
        key_cpu: list[float] = []
        prof = None
        if os.environ.get("PROFILE"):  # cProfile of the measured part, to the file named
            import cProfile

            prof = cProfile.Profile()
            if not os.environ.get("PROFILE_KEYS"):  # (PROFILE_KEYS=1: only from each key press to its frame)
                prof.enable()
        c0, w0, f0, r0 = time.process_time(), time.monotonic(), len(frames), rendered[0]
        wrap = log.wrap
        while time.monotonic() - w0 < seconds:
            await asyncio.sleep(0.6)
            wrap = not wrap
            n = len(frames)
            if prof is not None and os.environ.get("PROFILE_KEYS"):
                prof.enable()
            t0, k0 = time.perf_counter(), time.process_time()
            await pilot.press("w")
            for _ in range(500):
                hit = [(t, c) for t, c, w, _ in frames[n:] if w == wrap]
                if hit:
                    break
                await asyncio.sleep(0.005)
            else:
                raise RuntimeError("no frame showed the wrap state")
            if prof is not None and os.environ.get("PROFILE_KEYS"):
                prof.disable()
            lat.append(hit[0][0] - t0)
            key_cpu.append(hit[0][1] - k0)
        elapsed = time.monotonic() - w0
        if prof is not None:
            prof.disable()
            prof.dump_stats(os.environ["PROFILE"])
        cpu = (time.process_time() - c0) / elapsed
        nframes = len(frames) - f0
        rows = rendered[0] - r0
        stop = True
        await feeder
        await pilot.pause(0.3)


        last = [int(m.group(1)) for m in map(re.compile(r"status #(\d+)\)").search, list(log.lines)[-50:]) if m]
        behind = (count - max(last, default=0)) / rate
        app._display = display
        setattr(LogLines, hook, render_row)
    pairs = [(round(a * 1000), round(b * 1000)) for a, b in zip(lat, key_cpu)]
    lat.sort()
    key_cpu.sort()

    def p(v: list[float], q: float) -> float:
        return v[min(len(v) - 1, int(len(v) * q))]

    return {"seconds": round(elapsed, 1), "rate": rate, "console_cpu_pct": round(cpu * 100, 1),
            "key_p50_ms": round(p(lat, 0.5) * 1000, 1), "key_p95_ms": round(p(lat, 0.95) * 1000, 1),
            "key_max_ms": round(lat[-1] * 1000, 1), "presses": len(lat),
            "key_cpu_p50_ms": round(p(key_cpu, 0.5) * 1000, 1), "key_cpu_p95_ms": round(p(key_cpu, 0.95) * 1000, 1),
            "frames_per_s": round(nframes / elapsed, 1), "log_rows_drawn_per_frame": round(rows / max(1, nframes), 1),
            "behind_at_end_s": round(behind, 2), "key_ms_and_cpu_ms": pairs}


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 15.0
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 2000.0
    print(json.dumps(asyncio.run(main(secs, rate)), indent=1))
