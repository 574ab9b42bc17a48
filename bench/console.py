"""The console: first frame, key-press-to-screen latency and memory while 8 processes each log
2,000 lines/s for 30 s, no line lost; node-table filter on 2,000 nodes.

    .venv/bin/python bench/console.py            # everything (about two minutes)
    .venv/bin/python bench/console.py filter     # one part: first, flood, idle, filter
    .venv/bin/python bench/console.py first --reps 9 --before OTHER/.venv/bin/atomdeck   # first frame, alternated

first and flood drive the real `atomdeck` in tmux (the terminal is real; times are from sending
the key to the screen showing its effect, read through a tmux control-mode client, which reports
pane output as it happens). filter drives the app headless (Pilot): a press returns once the
screen is idle again, i.e. after the table was rebuilt and drawn.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import (
    ATOMDECK,
    ConsoleProcs,
    Term,
    big_cluster,
    console_in_tmux,
    console_pid,
    cpu_s,
    down_runs,
    launch_to_serving,
    pct,
    renice_run,
    rss_mb,
    state_env,
    tear_down_from_console,
    watcher_pid,
)

GOALS = {"first_frame_s": 1.0, "key_p95_s": 0.05, "rss_mb": 300, "filter_s": 0.05, "idle_cpu_pct": 5}  # issue 19


# -- (a) first frame ---------------------------------------------------------------------------------
def _one_start(atomdeck: Path) -> tuple[float, float]:
    """(first paint, Nodes view filled) in seconds from the start of tmux's command: the views' tabs
    ("1 Nodes") are the first frame; the node count ("usable") shows once the recipe and cluster are read."""
    with tempfile.TemporaryDirectory() as d:
        term = Term(Path(d), state_env(Path(d)))
        try:
            t0 = time.monotonic()
            term.start(str(atomdeck))
            first = term.wait_for("1 Nodes", timeout=20, every=0.005) - t0
            return first, term.wait_for("usable", timeout=20, every=0.005) - t0
        finally:
            term.kill()


def _summary(starts: list[tuple[float, float]]) -> dict:
    first, filled = [s[0] for s in starts], [s[1] for s in starts]
    return {"median_s": round(statistics.median(first), 3), "max_s": round(max(first), 3),
            "all_s": [round(t, 3) for t in first], "filled_median_s": round(statistics.median(filled), 3),
            "filled_max_s": round(max(filled), 3)}


def first_frame(reps: int = 5, before: Path | None = None) -> dict:
    """`before`: the `atomdeck` of another build (e.g. a venv of an older checkout), started alternately
    with this one, `reps` times each, so both see the same machine."""
    mine: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    for _ in range(reps):
        if before is not None:
            theirs.append(_one_start(before))
        mine.append(_one_start(ATOMDECK))
    out = _summary(mine)
    if before is not None:
        out["before"] = {"atomdeck": str(before), **_summary(theirs)}
    out["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    return out


# -- (b) log flood -----------------------------------------------------------------------------------
CLUSTER8 = """name: bench8
description: eight simulated nodes for the console flood benchmark
launcher: local
gpus_per_node: 8
node_ip: {method: static}
simulator: {enabled: true, speed: 1.0}
nodes:
""" + "".join(f"  - {{name: flood-n{i:02d}, addr: 127.0.0.{40 + i}, gpus: 8, partition: bench}}\n" for i in range(1, 9))

RECIPE8 = """name: flood-8
description: eight aggregate workers, each logging 2,000 lines/s once up
mode: aggregate
model: {path: atomdeck/demo-tiny-8b}
aggregate: {workers: 8, tp: 8, env: {ATOMSIM_FLOOD: "2000"}}
router: {policy: round_robin}
health: {worker_timeout_s: 120, router_timeout_s: 60, smoke_timeout_s: 30}
"""


def _gaps(log: Path) -> tuple[int, int]:
    """(flood lines, numbers missing between the first and the last)."""
    numbers = [int(m.group(1)) for m in re.finditer(rb"\(status #(\d+)\)", log.read_bytes())]
    if not numbers:
        return 0, 0
    return len(numbers), (numbers[-1] - numbers[0] + 1) - len(set(numbers))


def flood(seconds: float = 30.0, presses: int = 50, engines_nice: int = 0) -> dict:
    """Key press to screen in the log view of a local 8-process run flooding 2,000 lines/s each.
    engines_nice > 0: the simulators are reniced once serving (the engines apart, as on a cluster)."""
    from atomdeck.core.run.run import Run

    # (ignore_cleanup_errors: a watcher still finishing its last write in the state directory made the
    # cleanup raise, and the run's numbers were lost with it)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as d:
        tmp = Path(d)
        (tmp / "bench8.yaml").write_text(CLUSTER8)
        (tmp / "flood-8.yaml").write_text(RECIPE8)
        env = state_env(tmp, ATOMDECK_SIM_SPEED="20")
        trace = os.environ.get("KEY_TRACE")  # a file: where each key waited (bench/atomdeck_key_trace.py)
        console = f"{sys.executable} {Path(__file__).parent / 'atomdeck_key_trace.py'}" if trace else str(ATOMDECK)
        if trace:
            env["KEY_TRACE"] = trace
        term = Term(tmp, env)
        old_state = os.environ.get("XDG_STATE_HOME")
        os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
        run_id = None
        try:
            term.start(f"{console} tui --cluster {tmp / 'bench8.yaml'} --recipe {tmp / 'flood-8.yaml'}")
            term.wait_for("1 Nodes", timeout=20)
            term.wait_for("flood-n01", timeout=20)
            term.keys("3", "L", "y")
            term.wait_for("SERVING", timeout=90)
            run_id = Run.list()[-1]["id"]
            reniced = renice_run(run_id, engines_nice) if engines_nice else 0
            pid = console_pid(term.pane_pid())
            t_flood = time.monotonic()
            term.keys("enter")  # worker-0's log, following the flood
            term.wait_for("FOLLOW", timeout=10)
            term.attach_control()
            latencies: list[float] = []
            rss: list[float] = []
            watcher = watcher_pid(pid)
            watcher_rss: list[float] = []

            def waited(p: int | None) -> float:
                """Seconds `p` was runnable but waiting for a CPU (/proc/PID/schedstat): the machine's load."""
                try:
                    return int(Path(f"/proc/{p}/schedstat").read_text().split()[1]) / 1e9 if p else 0.0
                except (OSError, ValueError, IndexError):
                    return 0.0

            def written(p: int | None) -> int:
                """Bytes `p` wrote (/proc/PID/io): for the watcher, nearly all of it is its stream to the console."""
                try:
                    return int(re.search(r"wchar: (\d+)", Path(f"/proc/{p}/io").read_text()).group(1)) if p else 0
                except (OSError, AttributeError):
                    return 0

            wait0 = (waited(pid), waited(watcher), os.getloadavg()[0], written(watcher))
            cpu0 = (cpu_s(pid), cpu_s(watcher), time.monotonic())
            wrap = False
            shown_at: list[float] = []  # (monotonic) when each press was seen on screen
            gap = max(0.05, (seconds - 3) / presses)
            while time.monotonic() - t_flood < seconds:
                if len(latencies) < presses:
                    wrap = not wrap
                    want = re.compile(r"wrap on" if wrap else r"wrap off")
                    latencies.append(term.press_until("w", want))
                    shown_at.append(time.monotonic())
                rss.append(rss_mb(pid))
                watcher_rss.append(rss_mb(watcher) if watcher else 0.0)
                time.sleep(gap)
            elapsed = time.monotonic() - cpu0[2]
            cpu = (100 * (cpu_s(pid) - cpu0[0]) / elapsed, 100 * (cpu_s(watcher) - cpu0[1]) / elapsed)
            wait = (1000 * (waited(pid) - wait0[0]) / elapsed, 1000 * (waited(watcher) - wait0[1]) / elapsed)
            load = (wait0[2], os.getloadavg()[0])
            stream_kb_s = (written(watcher) - wait0[3]) / 1024 / elapsed
            if "wrap off" in term.screen():  # the line numbers sit at the end of long lines
                term.press_until("w", re.compile("wrap on"))
                time.sleep(0.3)
            shown = term.screen()
            still_follow = "FOLLOW" in shown
            # is core keeping up? the newest line on screen against the newest line in the file
            on_screen = max((int(n) for n in re.findall(r"status #(\d+)", shown)), default=0)
            run = Run.open(run_id)
            tail = run.rd.log_path("worker-0").read_bytes()[-4096:].decode(errors="replace")
            on_disk = max((int(n) for n in re.findall(r"status #(\d+)", tail)), default=0)
            behind_s = max(0, on_disk - on_screen) / 2000
            term.detach_control()
            term.keys("Escape")
            term.wait_for("enter: full log", timeout=10)  # back on the run view
            term.keys("D")
            term.wait_for("Tear down run", timeout=10)
            term.keys("y")
            term.wait_for("verified clean", timeout=60)
            term.keys("Escape", "q")
            run = Run.open(run_id)
            lines, missing = 0, 0
            for name in run.processes:
                if name.startswith("worker"):
                    n, m = _gaps(run.rd.log_path(name))
                    lines, missing = lines + n, missing + m
            if trace:
                Path(trace + ".bench.json").write_text(json.dumps(
                    [(t - x, t) for t, x in zip(shown_at, latencies)]))  # (sent, shown) of each press
            return {"seconds": seconds, "processes": 8, "rate_per_process": 2000, "presses": len(latencies),
                    "engines_nice": engines_nice, "groups_reniced": reniced,
                    "key_p50_s": round(pct(latencies, 50), 4), "key_p95_s": round(pct(latencies, 95), 4),
                    "key_max_s": round(max(latencies), 4), "key_all_ms": sorted(round(x * 1000) for x in latencies),
                    "rss_max_mb": round(max(rss), 1), "watcher_rss_max_mb": round(max(watcher_rss), 1),
                    "console_cpu_pct": round(cpu[0]), "watcher_cpu_pct": round(cpu[1]),
                    # ms per second each waited for a CPU while runnable (CPU starvation, not its own work)
                    "console_cpu_wait_ms_per_s": round(wait[0]), "watcher_cpu_wait_ms_per_s": round(wait[1]),
                    "load_avg_1min": [round(x, 1) for x in load], "watcher_stream_kb_per_s": round(stream_kb_s),
                    "rss_median_mb": round(statistics.median(rss), 1), "flood_lines_on_disk": lines,
                    "lines_missing": missing, "following_at_end": still_follow,
                    "screen_behind_file_s": round(behind_s, 2)}
        finally:
            term.kill()
            down_runs(env)  # whatever happened: nothing may stay up
            if old_state is None:
                os.environ.pop("XDG_STATE_HOME", None)
            else:
                os.environ["XDG_STATE_HOME"] = old_state


def idle_serving(seconds: float = 30.0) -> dict:
    """The console on the run view of a serving 2P1D demo, nobody typing: its CPU and its watcher's
    (health checks and metrics scrapes go on underneath). Issue 14's goal: console < 5 % of a core."""
    from atomdeck.core.run.run import Run

    with tempfile.TemporaryDirectory() as d, \
            console_in_tmux(Path(d), f"{ATOMDECK} tui --recipe demo-2p1d", ATOMDECK_SIM_SPEED="20") as term:
        launch_to_serving(term, "demo-n01")
        time.sleep(5)  # the smoke request and the first scrapes are over
        procs = ConsoleProcs(term)
        mark = procs.cpu_s()
        time.sleep(seconds)
        console_cpu, watcher_cpu, elapsed = procs.cpu_pct_since(mark)
        still = "SERVING" in term.screen()
        run_id = Run.list()[-1]["id"]
        tear_down_from_console(term)
        return {"seconds": round(elapsed, 1), "run": run_id, "console_cpu_pct": round(console_cpu, 1),
                "watcher_cpu_pct": round(watcher_cpu, 1), "serving_throughout": still}


# -- (c) node filter -----------------------------------------------------------------------------------
def press_until_shown(term: Term, key: str, check, timeout: float = 5.0) -> tuple[float, float]:
    """Send a key; (seconds until the pane's output made the screen pass `check`, seconds until a capture
    of the screen passed it). Term.press_until_screen answers the second: a capture (a tmux client
    process, 10-30 ms on this loaded machine) after each piece of output, so its time is the frame's plus
    a capture, and a frame that came in two pieces waited for two. Here the output is read as tmux sends
    it and its time noted; the capture only decides which output did it: the last piece read before a
    passing capture, when nothing more came meanwhile (else the capture's time: an upper bound)."""
    if check(term.screen()):
        raise ValueError("the screen passes the check before the key: it cannot time the key's effect")
    term.forget()
    t0 = time.monotonic()
    term.send_control(key)
    shown_at: float | None = None  # when the last output after the key was read
    while time.monotonic() - t0 < timeout:
        if term._waiting(0.05) and term._read():
            shown_at = time.monotonic()
        if term._pending == 0 and shown_at is not None and check(term.screen()):
            captured = time.monotonic()
            more = term._waiting(0) and term._read()
            return ((captured if more else shown_at) - t0, captured - t0)
    raise RuntimeError(f"the screen never passed the check within {timeout}s:\n{term.screen()}")


def node_filter(n: int = 2000, typed: str = "10.7.1") -> dict:
    """Type a filter one key at a time, then delete it: key -> the table shows the filtered rows.

    The filter (part of an address) is picked so that every change of the matching set is visible on
    screen: the rows that enter or leave interleave with the ones around the cursor."""
    row = re.compile(r"(node-\d{4}) +(10\.\d+\.\d+\.1)")

    def matching(needle: str) -> int:
        return sum(1 for i in range(n) if needle in f"node-{i:04d}" or needle in f"10.{i // 250}.{i % 250}.1")

    def shows(state: str, before: str):
        """The filter box shows `state` and the rows on screen are the new ones: all match it, and when
        the filter widened, some did not match the one before (the cursor's row may keep the table
        scrolled anywhere, so which rows is not fixed)."""
        widened = matching(state) > matching(before)

        def check(screen: str) -> bool:
            lines = screen.splitlines()
            head = next((i for i, x in enumerate(lines) if "NODE" in x and "ADDR" in x), None)
            if head is None or not any(x.strip() == state for x in lines[:head]):
                return False
            rows = [m.groups() for x in lines[head + 1:] if (m := row.search(x))]
            if not rows or not all(state in name or state in addr for name, addr in rows):
                return False
            return not widened or any(before not in name and before not in addr for name, addr in rows)
        return check

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "big.yaml").write_text(big_cluster(n))
        term = Term(tmp, state_env(tmp))
        times: list[float] = []
        captured: list[float] = []  # the same presses timed by the capture that saw them (the measure before)
        try:
            term.start(f"{ATOMDECK} tui --offline --cluster {tmp / 'big.yaml'} --recipe demo-1p1d")
            term.wait_for("node-0000", timeout=30)
            term.keys("/")
            # the box shows once "/" was handled, its focus queued before the redraw: a key sent before
            # that went to the table (the app drops keys typed before the box has focus)
            term.wait_for("filter nodes:", timeout=20)
            term.attach_control()
            states = [typed[:i] for i in range(1, len(typed) + 1)] + [typed[:i] for i in range(len(typed) - 1, 0, -1)]
            keys = list(typed) + ["BSpace"] * (len(typed) - 1)
            for _ in range(3):
                before = ""
                for key, state in zip(keys, states):
                    try:
                        shown, seen = press_until_shown(term, key, shows(state, before))
                        times.append(shown)
                        captured.append(seen)
                    except RuntimeError as e:
                        raise RuntimeError(f"after {key!r} (filter {before!r} -> {state!r}): {e}") from None
                    before = state
                term.keys("BSpace")
        finally:
            term.kill()
    return {"nodes": n, "keystrokes": len(times), "median_s": round(statistics.median(times), 4),
            "p95_s": round(pct(times, 95), 4), "max_s": round(max(times), 4),
            "all_ms": [[round(a * 1000), round(b * 1000)] for a, b in zip(times, captured)],
            "by_capture": {"median_s": round(statistics.median(captured), 4), "p95_s": round(pct(captured, 95), 4)}}


# -- the table ---------------------------------------------------------------------------------------------
def _ms(s: float) -> str:
    return f"{s * 1000:.0f} ms"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def rows(r: dict) -> list[str]:
    out = []
    f = r.get("first_frame")
    if f:
        filled = (f" (Nodes view filled: median {_ms(f['filled_median_s'])}, max {_ms(f['filled_max_s'])})"
                  if "filled_median_s" in f else "")
        out.append(f"| console first frame (tmux, process start to first paint) | median {_ms(f['median_s'])}, "
                   f"max {_ms(f['max_s'])}{filled} | <= 1 s | {_yes(f['median_s'] <= GOALS['first_frame_s'])} |")
    fl = r.get("flood")
    if fl:
        out.append(f"| key press to screen while 8 processes log 2,000 lines/s each (30 s, log view following) | "
                   f"p50 {_ms(fl['key_p50_s'])}, p95 {_ms(fl['key_p95_s'])} (n={fl['presses']}) | p95 <= 50 ms | "
                   f"{_yes(fl['key_p95_s'] <= GOALS['key_p95_s'])} |")
        out.append(f"| log view behind the file at the end of that flood | {fl['screen_behind_file_s']:.2f} s | "
                   f"(core keeps up) | |")
        both = fl["rss_max_mb"] + fl.get("watcher_rss_max_mb", 0)
        out.append(f"| console memory during that flood | max {fl['rss_max_mb']:.0f} MB RSS + its watcher process "
                   f"{fl.get('watcher_rss_max_mb', 0):.0f} MB = {both:.0f} MB | <= 300 MB | "
                   f"{_yes(both <= GOALS['rss_mb'])} |")
        out.append(f"| CPU during that flood (one core = 100%) | console {fl.get('console_cpu_pct', '?')}%, watcher "
                   f"{fl.get('watcher_cpu_pct', '?')}% | | |")
        out.append(f"| flood lines on disk after teardown | {fl['flood_lines_on_disk']:,} lines, "
                   f"{fl['lines_missing']} missing | zero lost | {_yes(fl['lines_missing'] == 0)} |")
    fa = r.get("flood_apart")
    if fa:
        out.append(f"| same flood, the 8 simulators at nice {fa['engines_nice']} (engines on other nodes, as on a "
                   f"cluster: only the console and its watcher compete for this machine's CPU) | p50 "
                   f"{_ms(fa['key_p50_s'])}, p95 {_ms(fa['key_p95_s'])} (n={fa['presses']}); console "
                   f"{fa['console_cpu_pct']}%, watcher {fa['watcher_cpu_pct']}%; behind the file "
                   f"{fa['screen_behind_file_s']:.2f} s; {fa['lines_missing']} lines missing | p95 <= 50 ms | "
                   f"{_yes(fa['key_p95_s'] <= GOALS['key_p95_s'])} |")
    idle = r.get("idle")
    if idle:
        out.append(f"| CPU while a 2P1D serves with the console on the run view, nobody typing ({idle['seconds']:.0f} s; "
                   f"health checks and metrics scrapes underneath) | console {idle['console_cpu_pct']}%, watcher "
                   f"{idle['watcher_cpu_pct']}% of a core | console < 5 % | {_yes(idle['console_cpu_pct'] < GOALS['idle_cpu_pct'])} |")
    nf = r.get("filter")
    if nf:
        out.append(f"| node table filter, {nf['nodes']:,} nodes: keystroke to table redrawn | median "
                   f"{_ms(nf['median_s'])}, p95 {_ms(nf['p95_s'])} | p95 <= 50 ms | "
                   f"{_yes(nf['p95_s'] <= GOALS['filter_s'])} |")
    return out


def main(parts: list[str] | None = None) -> dict:
    parts = parts or ["first", "flood", "flood-apart", "idle", "filter"]
    r: dict = {}
    if shutil.which("tmux") is None:
        parts = [p for p in parts if p == "filter"]
    if "first" in parts:
        r["first_frame"] = first_frame()
    if "flood" in parts:
        r["flood"] = flood()
    if "flood-apart" in parts:
        r["flood_apart"] = flood(engines_nice=19)
    if "idle" in parts:
        r["idle"] = idle_serving()
    if "filter" in parts:
        r["filter"] = node_filter()
    r["table"] = rows(r)
    return r


if __name__ == "__main__":
    import json

    args = sys.argv[1:]
    if args[:1] == ["first"] and len(args) > 1:  # first [--reps N] [--before PATH-TO-ATOMDECK]: the first frame only
        import argparse

        ap = argparse.ArgumentParser(prog="console.py first")
        ap.add_argument("--reps", type=int, default=7, help="starts of each build (default 7)")
        ap.add_argument("--before", type=Path, default=None, help="`atomdeck` of another build, started alternately")
        opts = ap.parse_args(args[1:])
        res = {"first_frame": first_frame(opts.reps, opts.before)}
        res["table"] = rows(res)
    else:
        res = main(args or None)
    print(json.dumps({k: v for k, v in res.items() if k != "table"}, indent=2))
    print("\n".join(res["table"]))
