"""Issue 40.2: a prefill frozen (SIGSTOP) while the Bench screen measures -> named on the Bench screen. The console
runs headless (Textual's run_test, 160x50) with its real watcher process on the demo 2P1D; a bench runs; the
prefill-1 server is stopped at a random moment of step 1; the time is read from the SIGSTOP to the frame in which
the Bench screen's health line names prefill-1 (polled every 20 ms), and to the step saying INVALID.

    bench/isolated .venv/bin/python bench/bench_health.py [trials]

Numbers, not asserts. The goal is <= 2 s.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import sys
import time
from datetime import datetime

from common import machine  # type: ignore[import-not-found]
from serving import serving, worker_python, ws_for  # type: ignore[import-not-found]


async def one(delay: float) -> tuple[float, float]:
    from atomdeck.tui.app import ConsoleApp
    from atomdeck.tui.screens.bench import BenchScreen
    from textual.widgets import Input, Label, Static

    run = await serving(ws_for("demo-2p1d"))
    pid = None
    try:
        app = ConsoleApp(refresh_s=None, clock=lambda: datetime(2025, 1, 1, 12, 0, 0))
        async with app.run_test(size=(160, 50)) as pilot:
            await app.workers.wait_for_complete()
            app.runs.attach(run, watch=True)  # the console's own watcher process, as an operator has it
            await pilot.press("6")
            while not isinstance(app.screen, BenchScreen):
                await pilot.pause(0.05)
            screen = app.screen
            for key, value in {"isl": 16, "osl": 64, "concurrency": "4,4", "num_prompts": 400}.items():
                screen.query_one(f"#bench-{key}", Input).value = str(value)
            await pilot.press("b")
            while not (screen.running and screen.counts.get(0, (0,))[0] >= 4):
                await pilot.pause(0.05)
            await asyncio.sleep(delay)
            pid = worker_python(run.id, "prefill-1")
            t0 = time.monotonic()
            os.kill(pid, signal.SIGSTOP)
            named = marked = 0.0
            while time.monotonic() - t0 < 30 and not (named and marked):
                await pilot.pause(0.02)
                if not named and "prefill-1" in str(screen.query_one("#bench-health", Static).render()):
                    named = time.monotonic() - t0
                if not marked and "INVALID" in str(screen.query_one("#bench-count-0", Label).render()):
                    marked = time.monotonic() - t0
            return named, marked
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        await run.teardown(grace=2)


def main(trials: int) -> None:
    os.environ.setdefault("ATOMDECK_SIM_SPEED", "20")
    rng = random.Random(40)
    named, marked = [], []
    for _ in range(trials):
        n, m = asyncio.run(one(rng.uniform(0, 1.0)))
        named.append(round(n, 2))
        marked.append(round(m, 2))
    print({"named_median_s": statistics.median(named), "named_max_s": max(named), "named": named,
           "invalid_median_s": statistics.median(marked), "invalid_max_s": max(marked), "invalid": marked,
           "load": round(os.getloadavg()[0], 2), "machine": machine()}, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
