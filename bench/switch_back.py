"""The console's CPU for a view switch with a 128-node run attached, headless: 1 (the Nodes view) then 4 (back to
the run view), main thread CPU until the switch's frame is drawn (what the key waits for) and until 50 ms later
(with what the switch set going: a spread redraw), medians over N rounds after two warm-up rounds. No simulator, no tmux: the deterministic 128-node run of
tests/tui/fakescale.py, attached without a watch. Prints, saves nothing.

    .venv/bin/python bench/switch_back.py [rounds]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

from common import ROOT

sys.path.insert(0, str(ROOT / "tests" / "tui"))


async def measure(rounds: int) -> dict:
    from atomdeck.tui.app import ConsoleApp
    from fakescale import fake_scale_run  # type: ignore[import-not-found]

    app = ConsoleApp(refresh_s=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        app.switch_mode("run")
        await pilot.pause(0.3)
        app.runs.attach(fake_scale_run(), watch=False)
        await pilot.pause(1.0)
        cpu: dict[str, list[float]] = {"1": [], "1+": [], "4": [], "4+": []}
        for _ in range(rounds + 2):
            for key in ("1", "4"):
                t = time.thread_time()
                await pilot.press(key)
                await app.screen.wait_for_refresh()
                cpu[key].append(time.thread_time() - t)
                await pilot.pause(0.05)
                cpu[key + "+"].append(time.thread_time() - t)
    return {"rounds": rounds, **{k: round(1000 * statistics.median(v[2:]), 1) for k, v in cpu.items()}}


def main() -> None:
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))  # the fake run's dir
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    r = asyncio.run(measure(rounds))
    print(f"main-thread CPU, medians of {rounds} rounds (128-node run attached, 160x50, headless): "
          f"1 (to Nodes) {r['1']} ms to its frame, {r['1+']} ms with 50 ms after; "
          f"4 (back to the run view) {r['4']} ms to its frame, {r['4+']} ms with 50 ms after")


if __name__ == "__main__":
    main()
