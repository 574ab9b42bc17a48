"""Hang forensics at scale (issue 39): how long `atomdeck snapshot` takes, what it costs, and what the console's keys
wait while one runs.

    bench/isolated .venv/bin/python bench/snapshot.py local [N]   # N/2 P N/2 D TP8 on an N-node local cluster (128)
    flock /tmp/atomdeck-lab.lock .venv/bin/python bench/snapshot.py lab   # 2P1D TP8 on the lab: Slurm and ssh
    git show REV:core/launch/scripts/snapshot.sh > /tmp/old.sh
    bench/isolated .venv/bin/python bench/snapshot.py ab /tmp/old.sh [N]  # that node script and this one, alternated

- `local`: a synthetic N-node local cluster on 127.88.x.y (one worker per node: at 128, 129 process trees, 1,152
  rank processes, on this machine), launched with `atomdeck up` (the simulator at speed 20), serving. Then: the
  memory of the run's trees (RSS summed, and PSS: the ranks are forked, much is shared); three snapshots in this
  process (core's forensics.take, NODE_FANOUT nodes at once, SPY_PARALLEL py-spy dumps per node) with the time,
  the number of ranks read and this process's and its children's peak RSS; py-spy run by hand on 128 of the ranks
  one after the other (an operator's loop: per rank, and the whole run's worth at that rate); and the console's
  keys while a snapshot runs: the real console, headless at 160x50, attached to the run (its watcher off: the
  snapshot's cost alone), on the Snapshot view; c starts a second snapshot, and meanwhile a cursor key every
  0.15 s, each timed from the press to the first frame the compositor hands the driver with the cursor on the
  next row (headless: the terminal's drawing is not in it). The same keys with no snapshot running, for the
  baseline.
- `lab`: demo-2p1d (2P1D TP8: 3 nodes x 8 ranks + the router) on the lab over Slurm (`lab`) and ssh (`lab-ssh`):
  py-spy copied first (--install-py-spy, timed), then three snapshots timed through the CLI (`atomdeck snapshot
  --json --no-bundle`: the command as typed, Python's start included) and core's own `took_s`; by hand over ssh,
  `py-spy dump` of each of the 24 ranks one after the other.

Goals: 2P1D on the lab <= 3 s; 64P64D local <= 15 s; key p95 <= 50 ms while a snapshot runs.
Benchmarks write numbers (bench/results/latest.json, section snapshot-local / snapshot-lab), they do not assert.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, pct, save, summary

ATOMDECK = [sys.executable, "-m", "atomdeck.core.cli.main"]
GOALS = {"lab_s": 3.0, "local_s": 15.0, "key_p95_s": 0.05}


def cluster_yaml(n: int) -> str:
    nodes = "".join(f"  - {{name: s{i:03d}, addr: 127.88.{i // 100}.{10 + i % 100}, gpus: 8, partition: scale}}\n"
                    for i in range(n))
    return (f"name: snap{n}\ndescription: {n} simulated nodes for the snapshot benchmark\nlauncher: local\n"
            f"gpus_per_node: 8\nnode_ip: {{method: static}}\nsimulator: {{enabled: true, speed: 1.0}}\nnodes:\n{nodes}")


def recipe_yaml(n: int) -> str:
    half = n // 2
    return f"""name: snap-{half}p{half}d
description: {half}P{half}D TP8 + router, one worker per node
model: {{path: atomdeck/demo-tiny-8b}}
mooncake: {{protocol: tcp}}
prefill: {{workers: {half}, tp: 8}}
decode: {{workers: {half}, tp: 8}}
router:
  policy: round_robin
  args: {{disable-health-check: true, disable-circuit-breaker: true}}
health: {{worker_timeout_s: 900, router_timeout_s: 600, smoke_timeout_s: 120}}
"""


def cli(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([*ATOMDECK, *args], capture_output=True, text=True, timeout=timeout,
                          env=os.environ | {"ATOMDECK_SIM_SPEED": "20"})


def up(recipe: str, cluster: str, timeout: int) -> str:
    t0 = time.monotonic()
    res = cli("up", recipe, "-c", cluster, "--wait", "--timeout", str(timeout), "--json", timeout=timeout + 120)
    try:
        out = json.loads(res.stdout)
    except ValueError:
        out = {}
    run_id = out.get("run")
    if res.returncode != 0 or not run_id:
        raise SystemExit(f"launch failed ({res.returncode}): {res.stdout[-2000:]} {res.stderr[-2000:]}")
    print(f"{run_id} serving after {time.monotonic() - t0:.0f} s", flush=True)
    return run_id


def up_local(n: int) -> str:
    """N/2 P N/2 D TP8 on a fresh N-node local cluster (its own state and config directories), serving."""
    tmp = Path(tempfile.mkdtemp(prefix="atomdeck-snapbench-"))
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    (tmp / "cluster.yaml").write_text(cluster_yaml(n))
    (tmp / "recipe.yaml").write_text(recipe_yaml(n))
    return up(str(tmp / "recipe.yaml"), str(tmp / "cluster.yaml"), timeout=1200)


def down(run_id: str) -> None:
    res = cli("down", run_id, timeout=900)
    print(res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-500:], flush=True)


# ---- memory ----------------------------------------------------------------------------------------------------

def tree_memory(run_id: str) -> dict:
    """RSS summed and PSS summed over every process of the run's trees, and how many there are."""
    from atomdeck.core.launch.procfs import scan_trees
    from atomdeck.core.run.run import Run

    run = Run.open(run_id)
    roots = [h.pid for h in run.handles.values() if h.pid]
    pids = {p for tree in scan_trees(roots).values() for p in tree}
    rss = pss = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return {"processes": len(pids), "rss_mb": round(rss / 1024), "pss_mb": round(pss / 1024)}


# ---- snapshots in this process ---------------------------------------------------------------------------------

def takes(run_id: str, times: int = 3, **kw) -> dict:
    from atomdeck.core.run import forensics
    from atomdeck.core.run.run import Run

    took, ranks, bundle_s, nodes_ok = [], 0, [], 0

    async def one() -> None:
        nonlocal ranks, nodes_ok
        run = Run.open(run_id)
        try:
            t0 = time.monotonic()
            s = await forensics.take(run, **kw)
            took.append(time.monotonic() - t0)
            t1 = time.monotonic()
            forensics.bundle(s, run.rd.path)
            bundle_s.append(time.monotonic() - t1)
            ranks = sum(1 for p in s.procs for r in p.ranks if r.kind == "rank")
            nodes_ok = sum(v == "ok" for v in s.nodes.values())
            stacks = sum(1 for p in s.procs for r in p.ranks if r.stack)
            print(f"  snapshot: {took[-1]:.2f} s, {ranks} ranks, {stacks} stacks, {nodes_ok}/{len(s.nodes)} nodes, "
                  f"{len(s.groups)} groups, bundle {bundle_s[-1]:.2f} s", flush=True)
        finally:
            await run.close()

    for _ in range(times):
        asyncio.run(one())
    return {"took_s": summary(took), "bundle_s": summary(bundle_s), "ranks": ranks, "nodes_ok": nodes_ok,
            "self_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "children_maxrss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024), **kw}


def by_hand(run_id: str, sample: int = 128) -> dict:
    """`py-spy dump --pid P` of `sample` ranks one after the other, as an operator's loop would."""
    from atomdeck.core.launch.procfs import scan_trees, title
    from atomdeck.core.run.forensics import local_pyspy
    from atomdeck.core.run.run import Run

    run = Run.open(run_id)
    roots = [h.pid for h in run.handles.values() if h.pid]
    ranks = sorted(p for tree in scan_trees(roots).values() for p in tree if "::TP" in title(p))
    chosen = ranks[:: max(1, len(ranks) // sample)][:sample]
    t0 = time.monotonic()
    ok = 0
    for p in chosen:
        ok += subprocess.run([local_pyspy(), "dump", "--pid", str(p)], capture_output=True, timeout=60).returncode == 0
    per = (time.monotonic() - t0) / max(1, len(chosen))
    return {"ranks_dumped": len(chosen), "ok": ok, "per_rank_s": round(per, 3), "all_ranks": len(ranks),
            "all_ranks_at_that_rate_s": round(per * len(ranks), 1)}


# ---- the console's keys while a snapshot runs -----------------------------------------------------------------

def keys(run_id: str, gap: float = 0.15) -> dict:
    from atomdeck.core.run.run import Run
    from atomdeck.tui.app import ConsoleApp
    from atomdeck.tui.screens.snapshot import SnapshotScreen
    from atomdeck.tui.widgets.vtable import VirtualTable
    from textual._compositor import CompositorUpdate

    out: dict = {}

    async def go() -> None:
        app = ConsoleApp(refresh_s=None)
        async with app.run_test(size=(160, 50)) as pilot:
            await app.workers.wait_for_complete()
            run = Run.open(run_id)
            app.runs.attach(run, watch=False)
            app.switch_mode("run")
            await pilot.pause()
            app.push_screen(SnapshotScreen(app.live))
            while not (isinstance(app.screen, SnapshotScreen) and app.screen.shots and not app.screen.taking):
                await asyncio.sleep(0.1)
            screen = app.screen
            table = screen.query_one(VirtualTable)
            table.focus()
            frames: list[tuple[float, int]] = []
            display = app._display

            def timed(scr, renderable) -> None:
                if renderable is not None and not app._batch_count:
                    if isinstance(renderable, CompositorUpdate):
                        renderable.render_segments(app.console)
                    frames.append((time.perf_counter(), table.cursor_row))
                display(scr, renderable)

            app._display = timed  # type: ignore[method-assign]

            async def presses(until_done: bool, n: int) -> list[float]:
                lat: list[float] = []
                down = True
                for _ in range(n):
                    if until_done and not screen.taking:
                        break
                    rows = table.row_count
                    if table.cursor_row >= rows - 1:
                        down = False
                    elif table.cursor_row <= 0:
                        down = True
                    want = table.cursor_row + (1 if down else -1)
                    sent = time.perf_counter()
                    await pilot.press("down" if down else "up")
                    while not any(t >= sent and row == want for t, row in frames) and time.perf_counter() - sent < 5:
                        await asyncio.sleep(0.002)
                    shown = next((t for t, row in frames if t >= sent and row == want), None)
                    if shown is not None:
                        lat.append(shown - sent)
                    await asyncio.sleep(gap)
                return lat

            base = await presses(False, 40)
            t0 = time.monotonic()
            await pilot.press("c")  # the second snapshot, to compare: a worker in the App's loop
            while not screen.taking:
                await asyncio.sleep(0.01)
            during = await presses(True, 10_000)
            while screen.taking:
                await asyncio.sleep(0.05)
            out.update({"snapshot_in_console_s": round(time.monotonic() - t0, 2),
                        "keys_baseline": summary(base), "keys_during_snapshot": summary(during),
                        "key_p95_during_s": pct(during, 95), "groups": len(screen.shots[-1].groups)})
            await run.close()

    asyncio.run(go())
    return out


# ---- the runs ----------------------------------------------------------------------------------------------------

def local(n: int = 128) -> dict:
    run_id = up_local(n)
    out: dict = {"nodes": n, "run": run_id}
    try:
        time.sleep(5)
        out["memory"] = tree_memory(run_id)
        print(f"memory: {out['memory']}", flush=True)
        out["snapshot"] = takes(run_id)
        print(f"snapshot: {out['snapshot']}", flush=True)
        out["by_hand"] = by_hand(run_id)
        print(f"by hand: {out['by_hand']}", flush=True)
        out["console"] = keys(run_id)
        print(f"console: {out['console']}", flush=True)
    finally:
        down(run_id)
    out["goals"] = GOALS
    save(f"snapshot-local-{n}", out)
    return out


def lab() -> dict:
    out: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix="atomdeck-snapbench-lab-"))
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    for cluster in ("lab", "lab-ssh"):
        run_id = up("demo-2p1d", cluster, timeout=300)
        r: dict = {"run": run_id}
        try:
            t0 = time.monotonic()
            res = cli("snapshot", run_id, "--install-py-spy", "--json", "--no-bundle")
            r["install_and_snapshot_s"] = round(time.monotonic() - t0, 2)
            first = json.loads(res.stdout)
            r["installed"] = first.get("installed")
            wall, took = [], []
            for _ in range(3):
                t0 = time.monotonic()
                res = cli("snapshot", run_id, "--json", "--no-bundle")
                wall.append(time.monotonic() - t0)
                s = json.loads(res.stdout)
                took.append(s["took_s"])
                ranks = sum(1 for p in s["procs"] for x in p["ranks"] if x["kind"] == "rank")
                stacks = sum(1 for p in s["procs"] for x in p["ranks"] if x["stack"])
                print(f"{cluster}: cli {wall[-1]:.2f} s, core {took[-1]:.2f} s, {ranks} ranks, {stacks} stacks, "
                      f"nodes {s['nodes']}", flush=True)
            r.update({"cli_s": summary(wall), "core_took_s": summary(took), "ranks": ranks, "stacks": stacks})
            if cluster == "lab-ssh":
                r["by_hand"] = by_hand_ssh(s, f"{s_remote_dir(cluster)}/bin/py-spy")
                print(f"{cluster}: by hand {r['by_hand']}", flush=True)
        finally:
            down(run_id)
        out[cluster] = r
    out["goals"] = GOALS
    save("snapshot-lab", out)
    return out


def s_remote_dir(cluster: str) -> str:
    from atomdeck.core.config.cluster import load_cluster
    from atomdeck.core.config.paths import find_cluster

    return load_cluster(find_cluster(cluster)).remote_dir


def by_hand_ssh(snap: dict, spy: str) -> dict:
    """ssh to each rank's node and `py-spy dump --pid` it, one after the other (the lab's ssh_config)."""
    cfg = "/var/lib/atomdeck-lab/ssh/ssh_config"
    todo = [(p["node"], r["pid"]) for p in snap["procs"] for r in p["ranks"] if r["kind"] == "rank"]
    t0 = time.monotonic()
    ok = 0
    for node, pid in todo:
        ok += subprocess.run(["ssh", "-F", cfg, f"{node}-via-login", spy, "dump", "--pid", str(pid)],
                             capture_output=True, timeout=60).returncode == 0
    return {"ranks": len(todo), "ok": ok, "total_s": round(time.monotonic() - t0, 2)}


# ---- two node scripts alternated on one run, and what a snapshot costs a bare event loop ---------------------------

def ab(old_script: str, n: int = 128, rounds: int = 3) -> dict:
    """The node script at `old_script` (a copy of an earlier core/launch/scripts/snapshot.sh) and the current one,
    alternated on one N-node run: wall time and the children's CPU of core's `take` with each. Then one `take` with
    a 5 ms timer in the same loop, for how long the loop is held (no console: core's part alone)."""
    from atomdeck.core.run import forensics
    from atomdeck.core.run.run import Run

    scripts = {"old": Path(old_script).read_text().split("\n", 1)[1], "new": forensics.SNAPSHOT_SCRIPT}
    run_id = up_local(n)
    out: dict = {"nodes": n, "run": run_id, "old_script": old_script, "old": [], "new": []}

    def children_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    async def take(which: str) -> None:
        forensics.SNAPSHOT_SCRIPT = scripts[which]
        run = Run.open(run_id)
        try:
            c0, t0 = children_cpu(), time.monotonic()
            await forensics.take(run)
            out[which].append({"wall_s": round(time.monotonic() - t0, 2), "children_cpu_s": round(children_cpu() - c0, 1)})
            print(f"  {which}: {out[which][-1]}", flush=True)
        finally:
            await run.close()

    async def loop_lag() -> dict:
        run = Run.open(run_id)
        lags: list[float] = []
        done = False

        async def probe() -> None:
            while not done:
                t = time.perf_counter()
                await asyncio.sleep(0.005)
                lags.append(time.perf_counter() - t - 0.005)
        try:
            p = asyncio.ensure_future(probe())
            await forensics.take(run)
            done = True
            await p
        finally:
            await run.close()
        return {"n": len(lags), **{f"p{q}_ms": round(pct(lags, q) * 1000, 1) for q in (50, 95, 99)},
                "max_ms": round(max(lags) * 1000, 1)}

    try:
        time.sleep(5)
        for _ in range(rounds):
            for which in ("old", "new"):
                asyncio.run(take(which))
        forensics.SNAPSHOT_SCRIPT = scripts["new"]
        out["loop_lag_during_take"] = asyncio.run(loop_lag())
        print(f"  loop lag: {out['loop_lag_during_take']}", flush=True)
    finally:
        down(run_id)
    save(f"snapshot-ab-{n}", out)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    what = sys.argv[1] if len(sys.argv) > 1 else "local"
    if what == "local":
        print(json.dumps(local(int(sys.argv[2]) if len(sys.argv) > 2 else 128), indent=1, default=str))
    elif what == "lab":
        print(json.dumps(lab(), indent=1, default=str))
    elif what == "ab" and len(sys.argv) > 2:
        print(json.dumps(ab(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 128), indent=1, default=str))
    else:
        raise SystemExit("usage: bench/snapshot.py local [N] | lab | ab OLD_SNAPSHOT_SH [N]")
