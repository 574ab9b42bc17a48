"""Console at scale without 129 simulators: the deterministic 128-node run of tests/tui/fakescale.py
(64P64D TP8 + router), attached headless at 160x50, fed what a serving run sends: a metrics scrape per
endpoint every 2 s (129 endpoints), a health/stage event every 0.25 s and log lines; a key press (down in
the process table) every second. Prints console CPU (share of a core) and key press -> screen latency.

    ATOMDECK_BENCH_SECONDS=20 .venv/bin/python bench/console_scale_keys.py [serving|version]

`version` is the cruder load of the first measurement: only `live.version += 1` every 0.25 s.
Numbers are written, not asserted; the machine is shared, compare ratios in one session."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="atomdeck-bench-")
os.environ.setdefault("ATOMDECK_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-home-"))


async def main(mode: str, seconds: float) -> None:
    from atomdeck.core.run.events import Event
    from atomdeck.tui.widgets.process_table import ProcessTable

    from tests.tui.conftest import make_app
    from tests.tui.fakescale import fake_scale_run

    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        run = fake_scale_run()
        app.runs.attach(run, watch=False)
        app.switch_mode("run")
        await pilot.pause()
        await pilot.pause()
        names = list(run.state.procs)
        workers = [n for n in names if n != "router"]

        def scrape(name: str, k: int) -> None:
            if os.environ.get("NOMETRICS"):
                return
            src = "mesh" if name == "router" else "atom"
            run.emit(Event("metrics", name, src, data={"t": time.time(), "source": src, "prompt_tok_s": 100.0 + k % 7,
                                                       "gen_tok_s": 50.0 + k % 5, "requests_running": k % 3,
                                                       "requests_waiting": 0, "kv_cache_usage_ratio": 0.3,
                                                       "req_s": 3.0}))

        if mode == "serving":  # metrics for every endpoint before measuring: the Serving panel is full
            for n in names:
                scrape(n, 0)
        await pilot.pause()
        t = app.screen.query_one(ProcessTable)
        t.focus()
        step = 0.05
        c0, w0 = time.process_time(), time.monotonic()
        lat: list[float] = []
        i = 0
        while time.monotonic() - w0 < seconds:
            if mode == "version":
                if i % 5 == 0:
                    app.live.version += 1
            else:
                # 129 endpoints every 2 s = ~3 per 50 ms step
                for j in range(3):
                    scrape(names[(3 * i + j) % len(names)], i)
                if i % 5 == 0:  # a state change every 0.25 s
                    w = workers[i % len(workers)]
                    run.emit(Event("proc.health", w, "unresponsive" if (i // 5) % 2 else "ok", "GET /health"))
                for w in workers[i % 8::8][:8]:  # log lines
                    for f in list(run.line_listeners):
                        f(w, f"[atom] step {i} decode batch 32 tok/s 51.2")
            await asyncio.sleep(step)
            if i % 20 == 10:
                k0 = time.monotonic()
                await pilot.press("down" if (i // 20) % 2 == 0 else "up")
                await pilot.pause()
                lat.append(time.monotonic() - k0)
            i += 1
        cpu = (time.process_time() - c0) / (time.monotonic() - w0)
        lat.sort()
        p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
        print(f"{mode}: console cpu {cpu * 100:.0f}% of a core; key press -> screen p50 {lat[len(lat) // 2] * 1000:.0f} ms"
              f" p95 {p95 * 1000:.0f} ms max {lat[-1] * 1000:.0f} ms ({len(lat)} presses)")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "serving", float(os.environ.get("ATOMDECK_BENCH_SECONDS", 20))))
