"""Console at scale without 129 simulators: the deterministic 128-node run of tests/tui/fakescale.py
(64P64D TP8 + router), attached headless at 160x50, fed what a serving run sends: a metrics scrape per
endpoint every 2 s (129 endpoints), a health/stage event every 0.25 s and log lines; a key press (down or up in
the process table) every 0.35-0.85 s (random gaps, seeded: the keys meet the console's one-second clock at every
phase). Also prints the loop's stalls: how late a 5 ms sleep wakes (what a key pressed then waits before it is
read). Prints console CPU (share of a core) and key press -> screen latency: Pilot's
press + pause (its idle waits of >= 20 ms each included), and from the key to the first frame the compositor hands
the driver with the next process's last lines (as `filter` does).

    ATOMDECK_BENCH_SECONDS=20 .venv/bin/python bench/console_scale_keys.py [serving|idle|coming-up|version]
    .venv/bin/python bench/console_scale_keys.py filter [nodes]
    .venv/bin/python bench/console_scale_keys.py teardown

`coming-up` sends no metrics but moves the 4,096 handshake pairs from waiting to transferred, 40 pair events
every 50 ms (~800 a second, what a 64P64D handshake sends while it comes up), besides the health events and
log lines. `idle` is `serving` with nobody typing and no health events (a run that merely serves: what the
console costs on its own, its clock redraw and the scrapes). `version` is the cruder load of the first measurement: only `live.version += 1` every 0.25 s.
`filter` types a filter into the Nodes view of a 2,000-node cluster (read offline) one key at a time and
deletes it again, three times (bench/console.py filter's keys), and times each keystroke to the first frame
whose table shows the new matching rows: the frame the compositor hands to the driver (headless, so the
terminal's own drawing is not in it; its escape sequences are built, as a terminal would be sent them).
Finer than bench/console.py's tmux capture at 50 ms polling.
Numbers are written, not asserted; the machine is shared, compare ratios in one session."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from common import big_cluster

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="atomdeck-bench-")
os.environ.setdefault("ATOMDECK_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-home-"))



def record_frames(app, what):
    """From now on, (when, CPU time, what()) for every frame the compositor hands the driver, built into
    what a terminal would be sent (headless, the terminal's own drawing is not in it). Returns the list
    the frames go to and a function that stops recording."""
    from textual._compositor import CompositorUpdate

    frames: list[tuple[float, float, object]] = []
    display = app._display

    def timed_display(screen, renderable) -> None:
        if renderable is not None and not app._batch_count:
            if isinstance(renderable, CompositorUpdate):
                renderable.render_segments(app.console)
            frames.append((time.perf_counter(), time.process_time(), what()))
        display(screen, renderable)

    app._display = timed_display
    return frames, lambda: setattr(app, "_display", display)

class Stalls:
    """How late a coroutine that asks to wake every 5 ms wakes: the longest stretch the loop was busy (or the
    process without a core) is what a key pressed then waits before it is even read."""

    def __init__(self) -> None:
        self.late: list[float] = []
        self.t0 = time.perf_counter()
        self.big: list[tuple[float, float]] = []  # (seconds in, lateness) of each stall over 40 ms
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            self.late.append(time.perf_counter() - t - 0.005)
            if self.late[-1] > 0.04:
                self.big.append((t - self.t0, self.late[-1]))

    def report(self) -> str:
        self.task.cancel()
        late = sorted(self.late)
        if not late:
            return "no samples"
        q = lambda f: late[min(len(late) - 1, int(len(late) * f))] * 1000  # noqa: E731
        return (f"loop stalls (a 5 ms sleep's lateness): p50 {q(0.5):.1f} p95 {q(0.95):.1f} p99 {q(0.99):.1f}"
                f" max {late[-1] * 1000:.1f} ms; {sum(x > 0.02 for x in late)} over 20 ms, {sum(x > 0.04 for x in late)}"
                f" over 40 ms ({len(late)} samples)"
                + ("; over 40 ms at " + ", ".join(f"{at:.1f} s ({d * 1000:.0f} ms)" for at, d in self.big[:12])
                   if os.environ.get("STALLS_AT") else ""))


class GcPasses:
    """The cyclic GC's passes while measuring, by generation: how many and how long (a full pass over the
    console's objects holds the loop as a stall does; a key pressed then waits behind it)."""

    def __init__(self) -> None:
        import gc

        self.gc = gc
        self.passes: list[tuple[int, float]] = []
        self._t = 0.0
        self.t0 = time.perf_counter()
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.passes.append((info["generation"], time.perf_counter() - self._t))
            if info["generation"] == 2 and os.environ.get("STALLS_AT"):
                print(f"gen2 pass at {self._t - self.t0:.1f} s: {(time.perf_counter() - self._t) * 1000:.0f} ms")

    def report(self) -> str:
        self.gc.callbacks.remove(self._cb)
        out = []
        for g in (0, 1, 2):
            d = sorted(s for gen, s in self.passes if gen == g)
            if d:
                out.append(f"gen{g} {len(d)} passes, max {d[-1] * 1000:.1f} ms, total {sum(d) * 1000:.0f} ms")
        return "gc: " + ("; ".join(out) or "no passes") + f"; frozen {self.gc.get_freeze_count()} objects"


async def main(mode: str, seconds: float) -> None:
    from atomdeck.core.run.events import Event
    from atomdeck.tui.widgets.process_table import ProcessTable

    from tests.tui.conftest import FIXED_TIME, make_app
    from tests.tui.fakescale import fake_scale_run

    # the console's clock moves as a real one (the run view's times in stage change every second, as on a real
    # run); FIXED_CLOCK=1: frozen at the tests' time (the measurements before 2026-12-02's "idle128")
    began = time.time()
    app = make_app(clock=(lambda: FIXED_TIME) if os.environ.get("FIXED_CLOCK")
                   else (lambda: FIXED_TIME + timedelta(seconds=time.time() - began)))
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        run = fake_scale_run()
        pair_events: list[tuple[str, str]] = []
        if mode == "coming-up":  # every pair from waiting to transferred, ~800 pair events a second
            for pr in run.state.pairs.values():
                pr.stage, pr.since, pr.failed = "waiting", 0.0, ""
            pair_events = [(key, st) for st in ("both_registered", "ports_reachable", "transferred")
                           for key in run.state.pairs]
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

        if mode in ("serving", "idle"):  # metrics for every endpoint before measuring: the Serving panel is full
            for n in names:
                scrape(n, 0)
        await pilot.pause()
        t = app.screen.query_one(ProcessTable)
        t.focus()
        step = 0.05
        screen = app.screen
        frames, _ = record_frames(app, lambda: screen.tail_name)  # the last lines' process per frame out
        c0, w0 = time.process_time(), time.monotonic()
        stalls = Stalls()
        passes = GcPasses()
        lat: list[float] = []  # pilot's press + pause (its idle waits included)
        key_cpu: list[float] = []
        shown_s: list[float] = []  # key -> the first frame showing the next process's last lines
        shown_cpu: list[float] = []
        i = 0
        # a key every 7-17 steps (0.35-0.85 s), not every 20: at a fixed second apart each key met the console's
        # one-second clock at the same phase, so a run measured one point of the clock's cycle (KEY_EVERY=20: as before)
        gaps = random.Random(19)
        fixed = int(os.environ.get("KEY_EVERY", 0))
        next_key = 10
        while time.monotonic() - w0 < seconds:
            if mode == "version":
                if i % 5 == 0:
                    app.live.version += 1
            else:
                if mode == "coming-up":
                    for j in range(40 * i, 40 * (i + 1)):
                        k = j % len(pair_events)
                        if k == 0 and j:  # all transferred: again from waiting (not an event: the bench's own)
                            for pr in run.state.pairs.values():
                                pr.stage = "waiting"
                        key, st = pair_events[k]
                        run.emit(Event("pair", key, st, "handshake"))
                else:  # 129 endpoints every 2 s = ~3 per 50 ms step
                    for j in range(3):
                        scrape(names[(3 * i + j) % len(names)], i)
                if i % 5 == 0 and mode != "idle":  # a state change every 0.25 s
                    w = workers[i % len(workers)]
                    run.emit(Event("proc.health", w, "unresponsive" if (i // 5) % 2 else "ok", "GET /health"))
                for w in workers[i % 8::8][:8]:  # log lines
                    for f in list(run.line_listeners):
                        f(w, f"[atom] step {i} decode batch 32 tok/s 51.2")
            await asyncio.sleep(step)
            if i == next_key and mode != "idle":
                next_key += fixed or gaps.randint(7, 17)
                was = screen.tail_name
                frames.clear()
                f0 = time.perf_counter()
                k0, kc0 = time.monotonic(), time.process_time()
                await pilot.press("down" if len(lat) % 2 == 0 else "up")
                await pilot.pause()
                lat.append(time.monotonic() - k0)
                key_cpu.append(time.process_time() - kc0)
                for _ in range(200):
                    hit = [(w, c) for w, c, name in frames if name != was]
                    if hit:
                        shown_s.append(hit[0][0] - f0)
                        shown_cpu.append(hit[0][1] - kc0)
                        break
                    await pilot.pause(0.01)
            i += 1
        cpu_s = time.process_time() - c0
        cpu = cpu_s / (time.monotonic() - w0)
        print(f"{mode}: {stalls.report()}")
        print(f"{mode}: {passes.report()}")
        if not lat:  # idle: nobody typed
            print(f"{mode}: console cpu {cpu * 100:.1f}% of a core; CPU per 50 ms step of load {cpu_s / i * 1000:.1f} ms"
                  f" ({i} steps); {len(frames)} frames")
            return
        lat.sort()
        key_cpu.sort()
        p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
        print(f"{mode}: console cpu {cpu * 100:.0f}% of a core; key press -> screen p50 {lat[len(lat) // 2] * 1000:.0f} ms"
              f" p95 {p95 * 1000:.0f} ms max {lat[-1] * 1000:.0f} ms ({len(lat)} presses; pilot's press + pause)")
        if shown_s:
            shown_s.sort()
            shown_cpu.sort()
            print(f"{mode}: key press -> first frame with the next process's last lines: p50 "
                  f"{shown_s[len(shown_s) // 2] * 1000:.0f} ms p95 {shown_s[min(len(shown_s) - 1, int(len(shown_s) * 0.95))] * 1000:.0f} ms"
                  f" max {shown_s[-1] * 1000:.0f} ms; console CPU to it p50 {shown_cpu[len(shown_cpu) // 2] * 1000:.0f} ms"
                  f" max {shown_cpu[-1] * 1000:.0f} ms ({len(shown_s)} of {len(lat)} presses)")
        # on a shared machine the console waits for a core: CPU time is what the console itself costs
        print(f"{mode}: console CPU per 50 ms step of load {cpu_s / i * 1000:.1f} ms ({i} steps); CPU per key press"
              f" p50 {key_cpu[len(key_cpu) // 2] * 1000:.0f} ms max {key_cpu[-1] * 1000:.0f} ms")




async def teardown_dialog() -> None:
    """The teardown dialog over the 128-node run while core stops it, fed what a teardown sends, on the clock
    of one (bench/teardown.py: 3.2 s at 128 nodes): 129 'stopping' events at once, then for 2.5 s the
    processes' last lines (16 a step), the 642 barrier cells closing (13 a step) and 129 'gone' events (about 3
    a step), in 50 ms steps. Prints how often the dialog drew its table, the main thread's CPU in those draws
    and in all, and the loop's stalls (what a key pressed then waits)."""
    from atomdeck.core.run.events import Event
    from atomdeck.tui.screens.teardown import TeardownScreen

    from tests.tui.conftest import make_app
    from tests.tui.runhelpers import attached_scale

    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, _ = await attached_scale(pilot)
        live = app.live
        live.begin_teardown()
        screen = TeardownScreen(live)
        app.push_screen(screen)
        await pilot.pause()
        await pilot.pause()
        body = screen.query_one("#teardown-body")
        draws: list[float] = []  # main-thread CPU of each run_updated that drew the table (Textual lays it out later)
        real_update, real_run_updated = body.update, screen.run_updated
        drew = [False]

        def update(content=""):
            drew[0] = True
            return real_update(content)

        def run_updated() -> None:
            drew[0] = False
            c = time.thread_time()
            real_run_updated()
            if drew[0]:
                draws.append(time.thread_time() - c)

        body.update, screen.run_updated = update, run_updated
        procs = list(run.state.procs.values())
        cells = list(run.state.cells)
        lines = ["INFO:     Shutting down", "INFO:     Waiting for application shutdown.",
                 "INFO:     Application shutdown complete.", "INFO:     Finished server process"]
        stalls = Stalls()
        c0, w0 = time.process_time(), time.monotonic()
        for p in procs:
            run.emit(Event("teardown", p.name, "stopping", f"on {p.node}"))
        steps = 50  # 2.5 s
        for i in range(steps):
            for k in range(16):
                p = procs[(16 * i + k) % len(procs)]
                for f in list(run.line_listeners):
                    f(p.name, lines[(16 * i + k) // len(procs) % len(lines)])
            for key in cells[i * len(cells) // steps:(i + 1) * len(cells) // steps]:
                c = run.state.cells[key]
                run.emit(Event("cell", key, "refused", data={"node": c.node, "port": c.port}))
            for p in procs[i * len(procs) // steps:(i + 1) * len(procs) // steps]:
                run.emit(Event("teardown", p.name, "gone", "SIGTERM, gone in 0.4s"))
            await asyncio.sleep(0.05)
        await pilot.pause(0.3)
        cpu_s, wall = time.process_time() - c0, time.monotonic() - w0
        print(f"teardown: {stalls.report()}")
        print(f"teardown dialog: {len(draws)} draws of its table in {wall:.1f} s, CPU in run_updated {sum(draws) * 1000:.0f} ms "
              f"(max {max(draws, default=0) * 1000:.0f} ms); console CPU {cpu_s * 1000:.0f} ms "
              f"({cpu_s / wall * 100:.0f}% of a core)")


async def node_filter(n: int, typed: str = "10.7.1") -> None:

    from tests.tui.conftest import make_app

    d = Path(tempfile.mkdtemp(prefix="atomdeck-bench-filter-"))
    (d / "big.yaml").write_text(big_cluster(n))
    app = make_app(cluster=str(d / "big.yaml"), offline=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.screen.query_one("#node-table")
        await pilot.press("slash")
        await pilot.pause()
        frames, stop_recording = record_frames(app, lambda: table.shown)  # the table's rows when each frame went out
        hays = [f"node-{i:04d} 10.{i // 250}.{i % 250}.1" for i in range(n)]
        keys = list(typed) + ["backspace"] * len(typed)
        states = [typed[:i] for i in range(1, len(typed) + 1)] + [typed[:i] for i in range(len(typed) - 1, -1, -1)]
        times: list[float] = []
        cpu: list[float] = []
        before = ""
        for _ in range(3):
            for key, state in zip(keys, states):
                # (no reason text holds these needles; a key that keeps the same nodes: its first frame counts)
                same = [h for h in hays if before in h] == [h for h in hays if state in h]
                want = sum(1 for h in hays if state in h)
                old = table.shown
                frames.clear()
                t0, c0 = time.perf_counter(), time.process_time()
                await pilot.press(key)
                for _ in range(500):
                    shown = [(t, c) for t, c, rows in frames if (same or rows is not old) and len(rows) == want]
                    if shown:
                        break
                    await pilot.pause(0.01)
                else:
                    raise RuntimeError(f"after {key!r}: the table never showed {want} rows for {state!r}")
                times.append(shown[0][0] - t0)
                cpu.append(shown[0][1] - c0)
                if os.environ.get("VERBOSE"):
                    print(f"{key!r} -> {state!r}: {want} rows, {times[-1] * 1000:.1f} ms, CPU {cpu[-1] * 1000:.1f} ms")
                before = state
                await pilot.pause(0.05)
        stop_recording()
    times.sort()
    cpu.sort()
    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
    print(f"filter, {n:,} nodes: keystroke -> first frame with the new rows: median {times[len(times) // 2] * 1000:.1f} ms"
          f" p95 {p95 * 1000:.1f} ms max {times[-1] * 1000:.1f} ms ({len(times)} keystrokes)")
    print(f"filter: console CPU per keystroke (to that frame) median {cpu[len(cpu) // 2] * 1000:.1f} ms"
          f" p95 {cpu[min(len(cpu) - 1, int(len(cpu) * 0.95))] * 1000:.1f} ms max {cpu[-1] * 1000:.1f} ms")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "filter":
        asyncio.run(node_filter(int(sys.argv[2]) if len(sys.argv) > 2 else 2000))
    elif len(sys.argv) > 1 and sys.argv[1] == "teardown":
        asyncio.run(teardown_dialog())
    else:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "serving",
                         float(os.environ.get("ATOMDECK_BENCH_SECONDS", 20))))
