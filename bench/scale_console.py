"""The console at scale: 64P64D TP8 + router on a synthetic 128-node local cluster (127.0.N.M addresses,
the simulator sped up), launched and watched from the real `atomdeck tui` in tmux at 160x50.

Measured (issue 19's goals in brackets):
- key press to screen while core starts the 129 processes (the run view says "Launching ..."): 1 and 4, the
  Nodes view and back, each timed to the view on screen; and the launch key to the run view and to its
  process table
- key press to screen while the 129 processes come up and while they serve [p95 <= 50 ms]: the key
  moves the process table's cursor, the screen shows the next process's last lines (its name in the
  panel's title); timed from sending the key to the pane printing that name (tmux control mode)
- the console's RSS and its watcher process's RSS [together <= 300 MB], their CPU while serving with
  nobody typing [console <= 10 % of a core]
- launch (the confirming key) to SERVING on screen; teardown (the confirming key) to "verified clean"
- the simulator's own memory (its 129 process trees), so the next person knows what the machine needs
- the run view as text at 160x50 and at 100x30 (tmux resized), saved with the results
- then the same serving measures once more with the 129 simulators at nice 19 ("engines apart"): on a
  cluster the engines run on other nodes and the console's host has only the console and its watcher;
  here 129 simulators share the console's 2 cores, so this says how much of the wait is theirs

    bench/isolated .venv/bin/python bench/scale_console.py          # 128 nodes
    bench/isolated .venv/bin/python bench/scale_console.py 16       # a smaller cluster
    bench/isolated .venv/bin/python bench/scale_console.py --engines-nice=19   # printed, not saved
    bench/isolated .venv/bin/python bench/scale_console.py --engines-cpus=1    # printed, not saved
    PRESSES_OUT=/tmp/presses.json ... bench/scale_console.py      # and each press, with the launch's time

`--engines-cpus=1` pins every simulator to CPU 1 from its start (ATOMSIM_CPUS) and this process, tmux, the console
and its watcher to the other CPUs: the console's host with a core of its own, as on a cluster where the engines
run on other nodes (nice values only share a core; the console still waited for one).
`--engines-nice=N` starts every simulator at nice N (ATOMSIM_NICE, set before their imports; also the nice value
of its session's scheduling group: with the kernel's autogroups each session is a group of its own, and before
2026-12-02 the nice value alone left each of the 129 groups a share equal to the console's; since 2026-12-03 a local
launch's processes share one session, their starter's): the run comes
up with the engines yielding the CPU from their first instant, so "while it comes up" measures the console
rather than 129 Python starts on its 2 cores.

Benchmarks write numbers, they do not assert them.
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import (
    ATOMDECK,
    ConsoleProcs,
    NotShown,
    Term,
    console_in_tmux,
    cpu_s,
    pct,
    renice_run,
    save,
    sched_wait_s,
    tear_down_from_console,
    tree_rss_mb,
)

GOALS = {"key_p95_s": 0.05, "rss_mb": 300, "console_cpu_pct": 10}
TITLE = re.compile(r"Last lines \S (\S+) on ")
PRESSES: list[tuple[float, float, str]] = []  # (sent, shown, phase) of each cursor key: KEY_TRACE's FILE.bench.json
# With PRESSES_OUT=FILE: every press timed (the view switches while starting too) and the launch key's time, all
# time.monotonic() (the console's clock too: compare with bench/busy_trace's stretches), as JSON
STARTING: list[tuple[float, float, str]] = []
T_LAUNCH: list[float] = []


def cluster_yaml(n: int) -> str:
    nodes = "".join(f"  - {{name: s{i:03d}, addr: 127.0.{1 + i // 100}.{10 + i % 100}, gpus: 8, partition: scale}}\n"
                    for i in range(n))
    return (f"name: scale{n}\ndescription: {n} simulated nodes for the console scale benchmark\nlauncher: local\n"
            f"gpus_per_node: 8\nnode_ip: {{method: static}}\nsimulator: {{enabled: true, speed: 1.0}}\nnodes:\n{nodes}")


def recipe_yaml(n: int, engines_nice: int | None = None, engines_cpus: str | None = None) -> str:
    half = n // 2
    env = {**({"ATOMSIM_NICE": str(engines_nice)} if engines_nice is not None else {}),
           **({"ATOMSIM_CPUS": engines_cpus} if engines_cpus else {})}
    env = "env: {" + ", ".join(f"{k}: '{v}'" for k, v in env.items()) + "}\n" if env else ""
    return env + f"""name: scale-{half}p{half}d
description: {half}P{half}D TP8 + router, one worker per node
model: {{path: atomdeck/demo-tiny-8b}}
mooncake: {{protocol: tcp}}
prefill: {{workers: {half}, tp: 8}}
decode: {{workers: {half}, tp: 8}}
router:
  policy: round_robin
  args: {{disable-health-check: true, disable-circuit-breaker: true}}
health: {{worker_timeout_s: 600, router_timeout_s: 300, smoke_timeout_s: 60}}
"""


def press_shows(term: Term, key: str, text: str) -> float | None:
    """Seconds from sending `key` to the pane showing `text` (Term.press_until); None if it never did."""
    try:
        return term.press_until(key, text)
    except NotShown:
        return None


def _step(term: Term, names: list[str]) -> tuple[str, str] | None:
    """The next key and the name it brings on screen: down, or up at the last row."""
    m = TITLE.search(term.screen())
    if not m or m.group(1) not in names:
        return None
    i = names.index(m.group(1))
    # "· NAME on " is the title only (the router panel says "router on NODE" too)
    return ("Down", f"· {names[i + 1]} on ") if i + 1 < len(names) else ("Up", f"· {names[i - 1]} on ")


def idle_cpu(term: Term, procs: ConsoleProcs, seconds: float, rss: list) -> tuple[float, float, float]:
    """The console's and its watcher's CPU (% of a core) over `seconds` of nobody typing, after 3 s of
    quiet, and the seconds measured. The control client is read every second meanwhile: one left unread
    makes tmux stop reading the pane, and the console's writes then block (a 16-node run's console sat
    12 s in Textual's writer queue during the earlier unread `sleep`: its CPU read low)."""
    time.sleep(3)
    term.forget()
    mark = procs.cpu_s()
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        rss.append(procs.rss_mb())
        term.forget()
        time.sleep(1)
    return procs.cpu_pct_since(mark)


LAUNCHING = "Launching scale-"  # the run view before core made the run (the ports check, before 2026-12-04 the starts)
BADGE = " LAUNCHING "  # the run view's header while core starts the processes (the run drawn before the first start)


def launching_keys(term: Term, t_launch: float, gap: float = 0.25) -> dict:
    """While core starts the 129 processes: 1 (the Nodes view) and 4 (back to the run view), each timed to the
    screen showing that view, `gap` seconds apart. A console whose loop is held by the starts shows neither: each
    press then waits up to 60 s. Ends on the run view with its process table and the run no longer LAUNCHING
    (every process started): the run view says "Launching ..." until core made the run, then shows the run with
    its processes pending, LAUNCHING (until 2026-12-04 it said "Launching ..." until every process had started,
    and showed the run only then). `table_s`: seconds from the launch key to the process table seen first."""
    lat: list[float] = []
    missed = 0
    on_run = True
    table_s = None
    while True:
        screen = term.screen()
        if table_s is None and "PROCESS" in screen:
            table_s = round(time.monotonic() - t_launch, 2)
        if on_run and "PROCESS" in screen and BADGE not in screen:
            break
        key, check = (("1", lambda s: "s000" in s and LAUNCHING not in s and "PROCESS" not in s) if on_run
                      else ("4", lambda s: LAUNCHING in s or "PROCESS" in s))
        try:
            lat.append(term.press_until_screen(key, check, timeout=60))
            t = time.monotonic()
            STARTING.append((t - lat[-1], t, "starting"))
        except NotShown:
            missed += 1
        except ValueError:  # the view changed by itself (the run attached): look again
            continue
        on_run = not on_run
        term.forget(gap)
        time.sleep(gap)
    term.wait_for("PROCESS", timeout=120, every=0.05)
    return {**_summary(lat, missed), "table_s": table_s}


def cpu_shares(term: Term, procs: ConsoleProcs, since: dict | None = None) -> dict:
    """CPU seconds so far of the console, its watcher, the tmux server and this bench (itself and the
    children it waited for: tmux clients), and the machine's busy CPU (/proc/stat); the seconds the console's
    threads waited for a CPU while runnable (console_waited); with `since` (an earlier
    call's result) each one's share since then in % of a core instead, and the seconds between."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    now = {"console": cpu_s(procs.console), "console_waited": sched_wait_s(procs.console),
           "watcher": cpu_s(procs.watcher), "tmux": cpu_s(term.server_pid()),
           "bench": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
           "machine": (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK"), "t": time.monotonic()}
    if since is None:
        return now
    el = now["t"] - since["t"]
    return {**{k: round(100 * (now[k] - since[k]) / el, 1) for k in now if k != "t"}, "seconds": round(el, 1)}


def _summary(lat: list[float], missed: int) -> dict:
    if not lat:
        return {"presses": 0, "missed": missed}
    return {"presses": len(lat), "missed": missed, "p50_s": round(pct(lat, 50), 4), "p95_s": round(pct(lat, 95), 4),
            "max_s": round(max(lat), 4), "all_ms": sorted(round(x * 1000) for x in lat)}


def key_presses(term: Term, names: list[str], gap: float, rss: list[tuple[float, float]], procs: ConsoleProcs, *,
                presses: int | None = None, until: Callable[[], bool] | None = None, phase: str = "") -> dict:
    """Press keys that move the process table's cursor, each timed to the screen showing the process it
    brings (`press_shows`), `gap` seconds apart, sampling the RSS after each: `presses` times, or until
    `until()` says stop (asked before each press). Returns their summary (_summary)."""
    lat: list[float] = []
    missed = 0
    done = 0
    while (presses is None or done < presses) and not (until is not None and until()):
        step = _step(term, names)
        if step:
            shown = press_shows(term, *step)
            if shown is None:
                missed += 1
            else:
                lat.append(shown)
                t = time.monotonic()
                PRESSES.append((t - shown, t, phase))
        rss.append(procs.rss_mb())
        done += 1
        # read the control client also when no key was pressed (the screen had no process's title yet): one
        # left unread makes tmux stop reading the pane, the console's writes block, and the frame that would
        # show the title never comes (a run of 9f8b4d6 sat 5 minutes so, its attach's frame half written)
        term.forget(gap)
        time.sleep(gap)
    return _summary(lat, missed)


def scale(n: int = 128, speed: str = "20", serving_presses: int = 30, idle_s: float = 20.0, gap: float = 0.25,
          engines_nice: int | None = None, engines_cpus: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "scale.yaml").write_text(cluster_yaml(n))
        (tmp / "scale-recipe.yaml").write_text(recipe_yaml(n, engines_nice, engines_cpus))
        out: dict = {"nodes": n, "processes": n + 1, "sim_speed": speed}
        rss: list[tuple[float, float]] = []
        trace = os.environ.get("KEY_TRACE")  # a file: where each key waited (bench/atomdeck_key_trace.py)
        console = f"{sys.executable} {Path(__file__).parent / 'atomdeck_key_trace.py'}" if trace else str(ATOMDECK)
        extra = {"KEY_TRACE": trace} if trace else {}
        with console_in_tmux(tmp, f"{console} tui --cluster {tmp / 'scale.yaml'} --recipe {tmp / 'scale-recipe.yaml'}",
                             ATOMDECK_SIM_SPEED=speed, **extra) as term:
            try:
                return _measure(term, n, out, rss, serving_presses, idle_s, gap)
            except Exception as e:  # what was measured before it went wrong is kept, with the error
                if "key_coming_up" not in out:
                    raise
                out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
                print(f"bench: {type(e).__name__}: {e}", file=sys.stderr)  # (the screen and the stacks, whole)
                return out
            finally:
                if os.environ.get("PRESSES_OUT"):
                    Path(os.environ["PRESSES_OUT"]).write_text(json.dumps(
                        {"t_launch": T_LAUNCH[0] if T_LAUNCH else None, "presses": STARTING + PRESSES}))
                if trace:
                    Path(trace + ".bench.json").write_text(json.dumps(PRESSES))
                    t_end = time.monotonic() + 20  # the console writes its trace as it exits (after q)
                    while not Path(trace).exists() and time.monotonic() < t_end:
                        time.sleep(0.2)


def _measure(term: Term, n: int, out: dict, rss: list[tuple[float, float]], serving_presses: int, idle_s: float,
             gap: float) -> dict:
    from atomdeck.core.run.run import Run

    term.wait_for("1 Nodes", timeout=30)
    term.wait_for("s000", timeout=30)
    term.keys("3")
    term.wait_for(f"{n + 1} processes on {n} nodes", timeout=60)  # the preview is drawn
    term.keys("L")
    term.wait_for("Launch this deployment?", timeout=30)
    procs = ConsoleProcs(term)
    term.attach_control()
    t_launch = time.monotonic()
    term.send_control("y")
    T_LAUNCH[:] = [t_launch]
    out["launch_to_view_s"] = round(term.wait_for((LAUNCHING, "PROCESS"), timeout=120) - t_launch, 2)  # launching or attached
    out["key_launching"] = launching_keys(term, t_launch)
    out["launch_to_started_s"] = round(time.monotonic() - t_launch, 2)
    out["launch_to_table_s"] = out["key_launching"].pop("table_s")
    run_id = Run.list()[-1]["id"]
    names = list(Run.open(run_id).state.procs)
    t_serving = None

    def serving() -> bool:
        nonlocal t_serving
        screen = term.screen()
        if "FAILED" in screen:
            raise RuntimeError(f"the run failed:\n{screen}")
        if "SERVING" in screen:
            t_serving = time.monotonic()
            return True
        procs.find_watcher()
        return time.monotonic() - t_launch >= 600

    procs.find_watcher()
    mark = cpu_shares(term, procs)
    out["key_coming_up"] = key_presses(term, names, gap, rss, procs, until=serving, phase="coming up")
    out["coming_up_cpu_pct"] = cpu_shares(term, procs, mark)
    out["matched_coming_up"] = dict(term.matched)
    if t_serving is None:
        raise RuntimeError(f"not serving after 600 s:\n{term.screen()}")
    out["launch_to_serving_s"] = round(t_serving - t_launch, 2)
    print(json.dumps(out), file=sys.stderr, flush=True)
    procs.find_watcher()
    run = Run.open(run_id)
    out["sim_rss_mb"] = round(sum(tree_rss_mb(h.pid) for h in run.handles.values() if h.pid), 0)
    out["sim_rss_per_worker_mb"] = round(statistics.median(
        tree_rss_mb(h.pid) for name, h in run.handles.items() if h.pid and name != "router"), 1)
    # serving, nobody typing: the console's and its watcher's own CPU
    console_cpu, watcher_cpu, el = idle_cpu(term, procs, idle_s, rss)
    out["idle_serving_s"] = round(el, 1)
    out["console_cpu_pct"] = round(console_cpu, 1)
    out["watcher_cpu_pct"] = round(watcher_cpu, 1)
    out["key_serving"] = key_presses(term, names, gap, rss, procs, presses=serving_presses, phase="serving")
    print(json.dumps(out), file=sys.stderr, flush=True)
    # the same with the engines apart: the simulators at nice 19, the console and its watcher as they were
    out["apart_groups_reniced"] = renice_run(run_id, 19)
    console_cpu, watcher_cpu, el = idle_cpu(term, procs, idle_s, rss)
    out["apart_console_cpu_pct"] = round(console_cpu, 1)
    out["apart_watcher_cpu_pct"] = round(watcher_cpu, 1)
    out["key_serving_apart"] = key_presses(term, names, gap, rss, procs, presses=serving_presses,
                                           phase="serving apart")
    print(json.dumps(out), file=sys.stderr, flush=True)
    out["console_rss_max_mb"] = round(max(r[0] for r in rss), 1)
    out["watcher_rss_max_mb"] = round(max(r[1] for r in rss), 1)
    out["rss_max_mb"] = round(max(a + b for a, b in rss), 1)
    out["screen_160x50"] = term.screen()
    term.detach_control()
    term("resize-window", "-t", "s", "-x", "100", "-y", "30")
    time.sleep(1.5)
    out["screen_100x30"] = term.screen()
    term("resize-window", "-t", "s", "-x", "160", "-y", "50")
    time.sleep(1.0)
    dialog_s, teardown_s = tear_down_from_console(term, timeout=300, dialog_timeout=120, every=0.05)
    out["teardown_dialog_s"] = round(dialog_s, 2)  # D to the dialog on screen
    out["teardown_s"] = round(teardown_s, 2)
    return out


def _ms(s) -> str:
    return "-" if s is None else f"{s:.1f} s" if s >= 10 else f"{s * 1000:.0f} ms"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def rows(r: dict) -> list[str]:
    if "key_serving" not in r or "rss_max_mb" not in r:
        return []
    shape = (f"{r['nodes'] // 2}P{r['nodes'] // 2}D TP8 on {r['nodes']} simulated nodes ({r['processes']} process trees: "
             f"a server, its EngineCore and 8 TP ranks per worker)")
    out = []
    for key, when in (("key_launching", "while core starts the processes (1 / 4: the Nodes view and back)"),
                      ("key_coming_up", "while it comes up"), ("key_serving", "while it serves")):
        k = r.get(key)
        if k is None:  # (a result from before this was measured)
            continue
        miss = f", {k['missed']} never shown within 5 s" if k.get("missed") else ""
        out.append(f"| console, {shape}: key press to screen {when} | p50 {_ms(k.get('p50_s'))}, p95 "
                   f"{_ms(k.get('p95_s'))} (n={k['presses']}{miss}) | p95 <= 50 ms | "
                   f"{_yes(k.get('p95_s') is not None and k['p95_s'] <= GOALS['key_p95_s'] and not k.get('missed'))} |")
    if "key_serving_apart" in r:
        k = r["key_serving_apart"]
        miss = f", {k['missed']} never shown within 5 s" if k.get("missed") else ""
        out.append(f"| same, serving, the {r['apart_groups_reniced']} simulators at nice 19 (engines on other nodes, as "
                   f"on a cluster): key press to screen; CPU nobody typing | p50 {_ms(k.get('p50_s'))}, p95 "
                   f"{_ms(k.get('p95_s'))} (n={k['presses']}{miss}); console {r['apart_console_cpu_pct']}%, watcher "
                   f"{r['apart_watcher_cpu_pct']}% | p95 <= 50 ms; console <= 10 % | "
                   f"{_yes(k.get('p95_s') is not None and k['p95_s'] <= GOALS['key_p95_s'] and not k.get('missed'))}; "
                   f"{_yes(r['apart_console_cpu_pct'] <= GOALS['console_cpu_pct'])} |")
    out.append(f"| console at that scale: memory (max) | console {r['console_rss_max_mb']:.0f} MB + watcher "
               f"{r['watcher_rss_max_mb']:.0f} MB = {r['rss_max_mb']:.0f} MB | <= 300 MB | "
               f"{_yes(r['rss_max_mb'] <= GOALS['rss_mb'])} |")
    out.append(f"| console at that scale: CPU while serving, nobody typing ({r['idle_serving_s']:.0f} s) | console "
               f"{r['console_cpu_pct']}%, watcher {r['watcher_cpu_pct']}% of a core | console <= 10 % | "
               f"{_yes(r['console_cpu_pct'] <= GOALS['console_cpu_pct'])} |")
    down = (f"{r['teardown_s']:.1f} s (D to its dialog {r['teardown_dialog_s']:.1f} s)" if "teardown_s" in r
            else f"not measured: {r.get('error', '?')}")
    view = (f"launch -> the run view {r['launch_to_view_s']:.1f} s, -> its process table {r['launch_to_table_s']:.1f} s"
            if "launch_to_table_s" in r else "")
    if "launch_to_started_s" in r:
        view += f", -> every process started {r['launch_to_started_s']:.1f} s"
    view += "; " if view else ""
    out.append(f"| console at that scale: launch -> SERVING on screen; teardown -> verified clean | "
               f"{view}{r['launch_to_serving_s']:.1f} s; {down} | | |")
    out.append(f"| the simulator at that scale (ATOMDECK_SIM_SPEED={r['sim_speed']}) | {r['sim_rss_mb']:,.0f} MB RSS in "
               f"all ({r['sim_rss_per_worker_mb']:.0f} MB per worker) | | |")
    return out


def main(n: int = 128, engines_nice: int | None = None, engines_cpus: str | None = None) -> dict:
    if engines_cpus:  # this process, tmux, the console and its watcher on the other CPUs (the sims move at start)
        mine = set(os.sched_getaffinity(0)) - {int(c) for c in engines_cpus.split(",")}
        if not mine:
            raise SystemExit(f"--engines-cpus={engines_cpus} leaves no CPU for the console")
        os.sched_setaffinity(0, mine)
    r = scale(n, engines_nice=engines_nice, engines_cpus=engines_cpus)
    if engines_nice is not None:
        r["engines_nice"] = engines_nice
    if engines_cpus:
        r["engines_cpus"] = engines_cpus
    r["table"] = rows(r)
    return r


if __name__ == "__main__":
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # kill -USR1 PID: where it waits
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` tears the run down
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    args = [a for a in sys.argv[1:] if not a.startswith("--engines-")]
    nice = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--engines-nice=")), None)
    cpus = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--engines-cpus=")), None)
    res = main(int(args[0]) if args else 128, nice, cpus)
    if nice is None and cpus is None:  # the section's numbers; a run with the engines set apart is printed only
        save("console-scale", res)
    print(json.dumps({k: v for k, v in res.items() if k not in ("table",) and not k.startswith("screen")}, indent=2))
    print(res["screen_160x50"])
    print(res["screen_100x30"])
    print("\n".join(res["table"]))
