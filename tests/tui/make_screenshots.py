"""Screenshots of every console view: SVG via App.save_screenshot, PNG via cairosvg (Fira Code).

    .venv/bin/python tests/tui/make_screenshots.py            # all, into screenshots/
    .venv/bin/python tests/tui/make_screenshots.py OUT nodes  # some, elsewhere

The mia1 shot plans offline by node name: it never contacts the cluster. The run shots (16-) show
deterministic runs (fakerun.py: real run directories and core state, fixed times, nothing started).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIG, SMALL = (160, 50), (100, 30)
CLOCK = datetime(2025, 1, 1, 12, 0, 0)
MIA1 = ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03"]


async def _offline(cluster, offline):
    from atomdeck.core.run.inventory import fetch_inventory

    return await fetch_inventory(cluster, offline=True)


async def _type(pilot, field_id: str, text: str) -> None:
    box = pilot.app.screen.query_one(f"#{field_id}")
    box.focus()
    await pilot.pause()
    await pilot.press("end", *["backspace"] * len(box.value), *text, "escape")


async def _goto_node(pilot, node: str) -> None:
    table = pilot.app.screen.query_one("#node-table")
    table.move_cursor(row=table.shown.index(node))
    await pilot.pause()


# name -> (app arguments, size, what to do before the shot)
Step = Callable[[object], Awaitable[None]]


async def _nodes_refusal(pilot) -> None:
    await _goto_node(pilot, "demo-n06")
    await pilot.press("space")


async def _override(pilot) -> None:
    await _goto_node(pilot, "demo-n01")
    await pilot.press("space")
    await _goto_node(pilot, "demo-n05")
    await pilot.press("o", "y")


async def _layout_errors(pilot) -> None:
    await pilot.press("2")
    await _type(pilot, "f-prefill-tp", "16")
    await _type(pilot, "f-ports-router", "99999")


def _fake(scenario: str, recipe: str = "demo-1p1d"):
    try:
        from .fakerun import fake_run
    except ImportError:  # run as a script
        from fakerun import fake_run  # type: ignore[no-redef]
    return fake_run(scenario, recipe)


def _run(scenario: str, then: Step | None = None, recipe: str = "demo-1p1d") -> Step:
    async def step(pilot) -> None:
        app = pilot.app
        run = _fake(scenario, recipe)
        app.runs.attach(run, watch=False)
        app.live.watching = True  # as it would be: these runs are made up, a real one is watched
        app.switch_mode("run")
        await pilot.pause()
        if then is not None:
            await then(pilot)
        await pilot.pause(0.3)
    return step


def _scale(then: Step | None = None) -> Step:
    """A 128-node 64P64D run coming up with three failed handshake pairs (fakescale.py)."""
    async def step(pilot) -> None:
        try:
            from .fakescale import fake_scale_run
        except ImportError:  # run as a script
            from fakescale import fake_scale_run  # type: ignore[no-redef]
        app = pilot.app
        app.runs.attach(fake_scale_run(), watch=False)
        app.live.watching = True
        app.switch_mode("run")
        await pilot.pause()
        if then is not None:
            await then(pilot)
        await pilot.pause(0.3)
    return step


async def _bench(pilot) -> None:
    """The Bench view of a benched run over two earlier layouts (tests/measure/fakebench.py)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.measure.fakebench import benched

    app = pilot.app
    run = _fake("serving")
    benched(run)
    app.runs.attach(run, watch=False)
    app.switch_mode("bench")
    await pilot.pause(0.3)


async def _bench_trouble(pilot) -> None:
    """The Bench view of a run whose decode froze during the last step: named live, the step INVALID."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.measure.fakebench import benched_with_trouble

    app = pilot.app
    run = _fake("degraded")
    benched_with_trouble(run)
    app.runs.attach(run, watch=False)
    app.switch_mode("bench")
    await pilot.pause(0.3)


async def _sweep(pilot) -> None:
    """The Sweep view of a finished layout search (tests/measure/fakebench.py)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.measure.fakebench import fake_search

    app = pilot.app
    app.switch_mode("sweep")
    await pilot.pause(0.2)
    screen = app.screen
    screen.search = fake_search()
    screen.drawn = None
    screen._tick()
    await pilot.pause(0.3)


async def _focus_pairs(pilot) -> None:
    """Scroll the handshake panel into view (at 100x30 it is below the tables)."""
    box = pilot.app.screen.query_one("#pairs-box")
    box.scroll_visible(animate=False, top=True)
    await pilot.pause()


def _feed(app, name: str, lines: list[str]) -> None:
    for fn in list(app.live.run.line_listeners):
        for line in lines:
            fn(name, line)


def _status_line(i: int) -> str:
    return (f"[atom 11:59:{i // 20 % 60:02d}] Engine Core: running=4 reqs, waiting=0 reqs, KV cache usage="
            f"{(i * 7) % 60 + 5}.0%, prefix cache hit rate=0.0%, prompt throughput={(i * 37) % 900}.0 tokens/s, "
            f"generation throughput={(i * 13) % 400}.0 tokens/s (status #{i})")


async def _open_log(pilot) -> None:
    """decode-0's log under load: a search for a known fatal line, paused, new lines counted."""
    app = pilot.app
    await pilot.press("down", "enter")
    await pilot.pause(0.2)
    lines = [_status_line(i) for i in range(1, 301)]
    lines[212] = ("[atom 11:59:10] [CONSUMER] Timed out waiting for write-done for req 17 (transfer_id=17) "
                  "after 30.0s; returning HTTP 500")
    lines[250] = "INFO:     127.0.0.1:51314 - \"POST /v1/completions HTTP/1.1\" 500 Internal Server Error"
    _feed(app, "decode-0", lines)
    await pilot.pause(0.3)
    await pilot.press("slash", *"timed out", "enter")
    _feed(app, "decode-0", [_status_line(i) for i in range(301, 358)])
    await pilot.pause(0.3)


def _teardown(finished: bool) -> Step:
    async def then(pilot) -> None:
        from atomdeck.core.launch.base import StopReport
        from atomdeck.core.run.events import Event
        from atomdeck.core.run.run import TeardownReport
        from atomdeck.tui.screens.teardown import TeardownScreen

        app = pilot.app
        live = app.live
        run = live.run
        live.watching = False  # the console stops watching before it tears down
        live.begin_teardown()
        t = CLOCK.timestamp()
        names = list(run.handles)
        for i, name in enumerate(names):
            h = run.handles[name]
            run.emit(Event("run", value="stopping", detail="grace 10s", t=t))
            run.emit(Event("teardown", name, "stopping", f"on {h.node}", t=t))
            if finished or i == 0:
                run.emit(Event("teardown", name, "gone", f"SIGTERM, gone in 0.{i + 1}s", t=t + 0.1))
                run.emit(Event("proc.exit", name, "stopped", f"SIGTERM, gone in 0.{i + 1}s", t=t + 0.1))
                for key, c in run.state.cells.items():  # its ports close (the watcher sees it)
                    if c.owner == name:
                        run.emit(Event("cell", key, "refused", t=t + 0.2))
        if finished:
            gpus = f"VRAM back to baseline on every GPU ({8 * len(run.plan.nodes)} GPUs on {len(run.plan.nodes)} nodes)"
            run.emit(Event("teardown", "gpus", "baseline", gpus, t=t + 0.3))
            run.emit(Event("run", value="stopped", detail="verified clean", t=t + 0.3))
            live.report = TeardownReport(True, [StopReport(n, run.handles[n].node, True, "SIGTERM") for n in names],
                                         gpus=gpus)
            live.teardown_running = False
        app.push_screen(TeardownScreen(live))
    return _run("serving", then)


def _gpus(orphan: bool = False, then: Step | None = None) -> Step:
    """The run's GPU readings (as core/run/watchers/gpus.py reports them): each worker's 8 GPUs hold 0.85 of
    288 GiB; with `orphan`, the decode has died and its GPUs stay held by the pin's orphans (#1511)."""
    async def step(pilot) -> None:
        from atomdeck.core.run.events import Event
        from atomdeck.core.run.gpustate import expected_gpus

        run = pilot.app.live.run
        owners = expected_gpus(run.plan)
        t = CLOCK.timestamp()
        for node in run.plan.nodes:
            mine = {k: v for k, (n, v) in owners.items() if n == node.name}
            held = {i for v in mine.values() for i in v}
            gpus = [[i, 282 + 250675 if i in held else 282, 294912, 37.0 if i in held else 0.0,
                     624.0 if i in held else 180.0, 52.0 if i in held else 38.0] for i in range(8)]
            dead = orphan and any(k.startswith("decode") for k in mine)
            foreign = sorted(held) if dead else []
            holders = [[i, 48120 + i, f"ATOM::TP{i}", 250675] for i in foreign]
            if dead:
                for name in mine:
                    run.emit(Event("proc.exit", name, "failed", "killed by SIGKILL", {"code": -9}, t=t))
            run.emit(Event("gpus", node.name, "amd-smi", "", {"gpus": gpus, "foreign": foreign, "holders": holders,
                                                            "owners": mine}, t=t))
        await pilot.pause()
        if then is not None:
            await then(pilot)
    return step


async def _runs(pilot) -> None:
    _fake("crashed")
    _fake("hung", "demo-2p1d")
    await pilot.press("5")


async def _preflight(pilot) -> None:
    """What core's pre-flight says of three nodes (findings_from on each node's script output): a leftover run and a
    busy GPU, a port taken, a model path missing."""
    from atomdeck.core.remote.preflight import NodeCheck, findings_from, parse
    from atomdeck.tui.run_control import _preflight_text
    from atomdeck.tui.screens.dialogs import MessageDialog

    said = {
        "mia1-p01-g01": "busy_ports= 8010",
        "mia1-p01-g02": "atomdeck_runs= 20261203-181502-dsv4-2p1d-9c1e\ngpu_json={\"card0\": {\"GPU Memory Allocated "
                        "(VRAM%)\": \"87\"}}",
        "mia1-p01-g03": "model=missing"}
    findings = []
    for node, out in said.items():
        check = NodeCheck(node, [8010], "/it-share/data/DeepSeek-V4-Pro")
        check.result = parse(f"preflight=done\n{out}\n")
        findings += findings_from(check, "/models/DeepSeek-V4-Pro")
    pilot.app.switch_mode("run")
    await pilot.pause()
    pilot.app.push_screen(MessageDialog("Pre-flight failed: nothing was launched", _preflight_text(findings)))


def _launching(step: str, seconds: int) -> Step:
    """A launch `seconds` after its key, core's launch saying `step` (Run.launch's progress): the run view."""
    async def shot(pilot) -> None:
        app = pilot.app
        a = app.assessment
        app.runs.launching = (f"Launching {a.recipe.name} ({a.plan.shape}) on {a.cluster.name}: "
                              f"{len(a.processes)} processes on {len(a.plan.nodes)} nodes")
        app.runs._launch_t0 = app.now() - seconds
        app.runs._launch_said(step.format(n=len(a.processes)))
        app.switch_mode("run")
        await pilot.pause()
        app.runs.poke()
    return shot


def _launching_run(seconds: int) -> Step:
    """A launch `seconds` after its key, core's run made and its first process started (fakerun.launching_run):
    the run view shows the run while the others start."""
    async def shot(pilot) -> None:
        try:
            from .fakerun import launching_run
        except ImportError:  # run as a script
            from fakerun import launching_run  # type: ignore[no-redef]
        app = pilot.app
        a = app.assessment
        app.runs.launching = (f"Launching {a.recipe.name} ({a.plan.shape}) on {a.cluster.name}: "
                              f"{len(a.processes)} processes on {len(a.plan.nodes)} nodes")
        app.runs._launch_t0 = app.now() - seconds
        app.runs.attach(launching_run(CLOCK.timestamp() - seconds + 1), watch=False, settled=True)
        app.runs._launch_said(f"1 of {len(a.processes)} processes started")
        app.switch_mode("run")
        await pilot.pause()
        app.runs.poke()
    return shot


CLUSTERS = """\
# ~/.config/atomdeck/clusters.yaml: the operator's clusters, one file
current: local
clusters:
  gpu-east:
    description: MI355X, Slurm through its login host
    launcher: slurm
    login: {host: east-login}
    partition: gpu
  gpu-west:
    description: MI300X, Slurm through its login host
    launcher: slurm
    login: {host: west-login}
"""


def _answers(app, **down: str) -> None:
    """What each open cluster answered (made up: the shots never ask a cluster); `down`: name -> why not."""
    from atomdeck.core.run.reach import Reach

    for name in app.contexts.names():
        why = down.get(name.replace("-", "_"))
        app.contexts.reach[name] = Reach(name, why is None, why or "this machine", 0.1, CLOCK.timestamp())
    app.clear_notifications()
    app.contexts_changed()


async def _two_clusters(pilot) -> None:
    """Two clusters open: a run watched on each (the lab's Slurm controller stopped), and a stopped run."""
    from atomdeck.core.config.paths import config_dir

    app = pilot.app
    config_dir().mkdir(parents=True, exist_ok=True)
    (config_dir() / "clusters.yaml").write_text(CLUSTERS)
    here = _fake("serving")
    _fake("crashed")
    lab = _fake("hung", "demo-2p1d")
    lab.rd.write_json("run.json", {**lab.rd.meta(), "cluster": "lab", "launcher": "slurm", "job_id": "4817"})
    app.switch_context("lab")
    app.runs.attach(lab, watch=False)
    app.live.watching = True
    app.switch_context("local")
    app.runs.attach(here, watch=False)
    app.live.watching = True
    _answers(app, lab="the Slurm controller does not answer (this machine: Slurmctld(primary) at ctl is DOWN)")
    await pilot.pause()


def _runs_across(pilot_keys: tuple[str, ...] = ("5",)) -> Step:
    async def step(pilot) -> None:
        await _two_clusters(pilot)
        await pilot.press(*pilot_keys)
        await pilot.pause(0.3)
    return step


async def _contexts(pilot) -> None:
    await _two_clusters(pilot)
    await pilot.press("colon", *"ctx", "enter")
    await pilot.pause(0.3)


def _snapshot(compared: bool, *keys: str) -> Step:
    """The Snapshot view over the hung run, with core's snapshots of a real hung 1P1D run (fakesnap.py): the first
    only, or compared with the one 2 s later; then `keys`."""
    async def then(pilot) -> None:
        try:
            from .fakesnap import fake_snapshots
        except ImportError:  # run as a script
            from fakesnap import fake_snapshots  # type: ignore[no-redef]
        from atomdeck.tui.screens.snapshot import SnapshotScreen

        app = pilot.app
        live = app.live
        shots = fake_snapshots(live.id, CLOCK.timestamp() - 2, str(live.run.rd.path))
        app.push_screen(SnapshotScreen(live, shots if compared else shots[:1]))
        await pilot.pause()
        await pilot.press(*keys)
    return _run("hung", then)


def _keys(*keys: str) -> Step:
    async def step(pilot) -> None:
        await pilot.press(*keys)
    return step


async def _nodes_vram(pilot) -> None:
    """The nodes' GPUs read before any run (tui/node_gpus.py, the `g` key), through the simulator's amd-smi, while
    another job (sim/gpus.py hold) holds 240 GiB on each GPU of demo-n03."""
    import subprocess
    import sys

    from atomdeck.core.config.paths import sim_shim_dir

    env = {k: v for k, v in os.environ.items() if not k.startswith("ATOMSIM_")}
    env.update(ATOMSIM_NODE_IP="127.0.0.13", PYTHONPATH=str(sim_shim_dir()),
               ATOMSIM_GPU_DIR=os.environ.get("ATOMSIM_GPU_DIR", ""))
    hold = subprocess.Popen([sys.executable, "-c", "import atomsim_boot; atomsim_boot.ensure(); import sys; "
                             "from atomdeck.sim.gpus import hold_main; sys.exit(hold_main(sys.argv[1:]))",
                             "--gb", "240"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout is not None and hold.stdout.readline().strip() == "holding"
        await pilot.press("g")
        await pilot.app.workers.wait_for_complete()
    finally:
        hold.kill()
        hold.wait()


# A restart of prefill-1 of a serving 2P1D as core's events tell it (issue 38): the steps up to `until`.
ACTION_STEPS = [("requested", "by console on ops-1 (pid 4242)"), ("draining", "removing it from the router"),
                ("draining", "3 in flight"), ("drained", "nothing in flight"),
                ("stopping", "the same verified stop as a teardown, for this process's whole tree"),
                ("stopped", ""), ("starting", "on demo-n02"), ("loading", "pid 51207 on demo-n02"),
                ("loading", "kv registered (pid 51207)"), ("ready", "port open, /health 200 (pid 51207)"),
                ("handshake", "1 KV pair(s) checked again from the consumers' nodes"),
                ("registering", "POST /workers http://127.0.0.12:8010 (prefill)"),
                ("registered", "router id 6230557b-6472-4e08-82b2-fca006f94fc6"),
                ("smoke", "completions through the router until this worker served one"),
                ("done", "serving again after 6.3s")]


def _acting(until: str, kind: str = "restart", target: str = "prefill-1") -> Step:
    async def then(pilot) -> None:
        from atomdeck.core.run.diagnose import diagnose
        from atomdeck.core.run.events import Event

        run = pilot.app.live.run
        t = CLOCK.timestamp() - 8
        data = {"id": "a1b2c3d4e5f6", "kind": kind, "source": "console on ops-1 (pid 4242)"}
        steps = ACTION_STEPS if kind == "restart" else ACTION_STEPS[:6] + [("done", "removed after 1.2s; 1 "
                                                                                   "prefill(s) serve")]
        for i, (step, detail) in enumerate(steps):
            run.emit(Event("action", target, step, detail, data, t=t + i * 0.4))
            if step == "stopped":
                run.emit(Event("proc.exit", target, "stopped", "SIGTERM, gone in 0.1s: stopped for the restart",
                               t=t + i * 0.4))
                for key, c in run.state.cells.items():
                    if c.owner == target:
                        run.emit(Event("cell", key, "refused", t=t + i * 0.4))
                if kind == "remove":
                    run.emit(Event("proc.removed", target, "", "removed by console on ops-1", t=t + i * 0.4))
            if step == "loading" and detail.startswith("pid"):
                run.emit(Event("proc.reset", target, "", "started again (pid 51207)", {"pid": 51207}, t=t + i * 0.4))
                run.emit(Event("proc.started", target, "", "pid 51207 on demo-n02", {"pid": 51207}, t=t + i * 0.4))
                run.emit(Event("proc.stage", target, "loading", t=t + i * 0.4 + 0.1))
            if step == "loading" and detail.startswith("kv"):
                run.emit(Event("proc.stage", target, "kv_registered", t=t + i * 0.4))
            if step == "ready":
                for key, c in run.state.cells.items():
                    if c.owner == target:
                        run.emit(Event("cell", key, "open", t=t + i * 0.4))
                run.emit(Event("proc.stage", target, "http_up", t=t + i * 0.4))
            if step == "handshake":  # the pair watcher sees both sides again, the action waits for it
                for key, pr in run.state.pairs.items():
                    if target in (pr.prefill, pr.decode):
                        run.emit(Event("pair", key, "both_registered", t=t + i * 0.4))
                        run.emit(Event("pair", key, "ports_reachable", t=t + i * 0.4 + 0.1))
            if step == "registered":
                run.emit(Event("proc.stage", target, "registered", t=t + i * 0.4))
            if step == "done" and kind == "restart":
                for key, pr in run.state.pairs.items():
                    if target in (pr.prefill, pr.decode):
                        run.emit(Event("pair", key, "transferred", t=t + i * 0.4))
            if step == "smoke":
                run.emit(Event("proc.stage", target, "serving", t=t + i * 0.4))
            if step == until:
                break
        st = run.state
        running = any(a.running for a in st.actions.values())
        run.emit(Event("run", value="degraded" if running else "serving",
                       detail=diagnose(st).headline if running else f"serving again: {st.readiness()}",
                       t=t + 7))
        await pilot.pause()
    return _run("serving", then, recipe="demo-2p1d")


def _ask(key: str, row: int = 1) -> Step:
    """On the served 2P1D: the cursor on the `row`-th process, then the action's key: the confirmation."""
    async def then(pilot) -> None:
        for _ in range(row):
            await pilot.press("down")
        await pilot.press(key)
        await pilot.pause(0.5)
    return _run("serving", then, recipe="demo-2p1d")


SHOTS: dict[str, tuple[dict, tuple[int, int], Step]] = {
    "01-nodes": ({"read_gpus": True}, BIG, _keys()),  # (the simulator's amd-smi: every GPU idle)
    "02-nodes-refused": ({}, BIG, _nodes_refusal),
    "03-nodes-override": ({}, BIG, _override),
    "04-layout-2p1d": ({"recipe": "demo-2p1d"}, BIG, _keys("2")),
    "05-layout-errors": ({}, BIG, _layout_errors),
    "06-preview-demo": ({}, BIG, _keys("3")),
    "07-preview-mia1-offline": ({"recipe": "dsv4-fp4-mi355x-2p1d-dpa", "cluster": "mia1", "offline": True,
                                 "named_nodes": MIA1, "fetch": _offline}, BIG, _keys("3", "down", "down")),
    "08-launch-confirm": ({}, BIG, _keys("3", "L")),
    "09-launch-blocked": ({"nodes": ["demo-n01"]}, BIG, _keys("L")),
    "10-help": ({}, BIG, _keys("question_mark")),
    "11-open": ({}, BIG, _keys("ctrl+o")),
    "12-nodes-100x30": ({"read_gpus": True}, SMALL, _keys()),
    "13-layout-100x30": ({"recipe": "demo-2p1d"}, SMALL, _keys("2")),
    "14-preview-100x30": ({}, SMALL, _keys("3")),
    "15-layout-light-theme": ({"recipe": "demo-2p1d", "theme": "textual-light"}, BIG, _keys("2")),
    "16-run-serving": ({}, BIG, _run("serving")),
    "17-run-hung-barrier": ({}, BIG, _run("hung")),
    "18-run-crashed-worker": ({}, BIG, _run("crashed")),
    "19-log-view": ({}, BIG, _run("serving", _open_log)),
    "20-teardown-in-progress": ({}, BIG, _teardown(finished=False)),
    "21-teardown-finished": ({}, BIG, _teardown(finished=True)),
    "22-runs": ({}, BIG, _run("serving", _runs)),
    "23-run-hung-100x30": ({}, SMALL, _run("hung")),
    "24-preflight-failed": ({"recipe": "dsv4-fp4-mi355x-2p1d-dpa", "cluster": "mia1", "offline": True,
                             "named_nodes": MIA1, "fetch": _offline}, BIG, _preflight),
    "25-bench-pareto": ({}, BIG, _bench),
    "26-run-degraded-serving-panel": ({}, BIG, _run("degraded")),
    "27-run-degraded-100x30": ({}, SMALL, _run("degraded")),
    "28-run-pair-matrix-16x16": ({}, BIG, _run("matrix", _focus_pairs)),
    "29-run-pair-matrix-100x30": ({}, SMALL, _run("matrix", _focus_pairs)),
    "30-run-kv-parked": ({}, BIG, _run("parked")),
    "30-run-128-nodes": ({}, BIG, _scale()),
    "31-run-128-nodes-100x30": ({}, SMALL, _scale()),
    "32-run-128-nodes-handshake-100x30": ({}, SMALL, _scale(_focus_pairs)),
    "33-run-128-nodes-last-process-100x30": ({}, SMALL, _scale(_keys("end"))),
    "34-first-frame": ({"defer": True}, BIG, _keys()),  # before the recipe is read (kept there: see shoot)
    "35-launch-waits-for-slurm": ({"recipe": "dsv4-fp4-mi355x-2p1d-dpa", "cluster": "mia1", "offline": True,
                                   "named_nodes": MIA1, "fetch": _offline}, BIG,
                                  _launching("Slurm job 48213 is PENDING (Resources); waiting up to 120 s for it "
                                             "to start", 37)),
    "36-launch-counting-100x30": ({}, SMALL, _launching_run(2)),
    "37-snapshot-hung-rank": ({}, BIG, _snapshot(False)),
    "38-snapshot-compared-stacks": ({}, BIG, _snapshot(True, "enter")),
    "39-snapshot-compared-100x30": ({}, SMALL, _snapshot(True)),
    "40-run-gpus": ({}, BIG, _run("serving", _gpus())),
    "41-run-gpus-100x30": ({}, SMALL, _run("serving", _gpus())),
    "42-nodes-gpus-orphan": ({}, BIG, _run("serving", _gpus(orphan=True, then=_keys("1")))),
    "43-nodes-gpus-orphan-100x30": ({}, SMALL, _run("serving", _gpus(orphan=True, then=_keys("1")))),
    "44-run-gpus-orphan-100x30": ({}, SMALL, _run("serving", _gpus(orphan=True))),
    "45-action-restart-confirm": ({}, BIG, _ask("R")),
    "46-action-restart-draining": ({}, BIG, _acting("draining")),
    "47-action-restart-loading": ({}, BIG, _acting("loading")),
    "48-action-restart-registered-100x30": ({}, SMALL, _acting("registered")),
    "49-action-restart-done": ({}, BIG, _acting("done")),
    "50-action-removed-100x30": ({}, SMALL, _acting("done", kind="remove")),
    "51-action-add-confirm-100x30": ({}, SMALL, _ask("A", 0)),
    # several clusters (tui/contexts.py): the lab's made-up run is watched in its context while local's is shown
    "52-runs-two-clusters": ({"fetch": _offline, "ask_clusters": False}, BIG, _runs_across()),
    "53-runs-two-clusters-100x30": ({"fetch": _offline, "ask_clusters": False}, SMALL, _runs_across()),
    "54-contexts-switcher": ({"fetch": _offline, "ask_clusters": False}, BIG, _contexts),
    "55-contexts-switcher-100x30": ({"fetch": _offline, "ask_clusters": False}, SMALL, _contexts),
    "56-run-header-context-100x30": ({"fetch": _offline, "ask_clusters": False}, SMALL, _runs_across(("4",))),
    "57-bench-invalid-step": ({}, BIG, _bench_trouble),
    "58-bench-invalid-step-100x30": ({}, SMALL, _bench_trouble),
    "59-sweep-layouts": ({}, BIG, _sweep),
    "60-sweep-layouts-100x30": ({}, SMALL, _sweep),
    "61-nodes-vram-another-job": ({"read_gpus": True}, BIG, _nodes_vram),
    "62-nodes-vram-100x30": ({"read_gpus": True}, SMALL, _nodes_vram),
}


async def shoot(name: str, out: Path) -> Path:
    from atomdeck.tui.app import ConsoleApp

    kw, size, step = SHOTS[name]
    app = ConsoleApp(**{"refresh_s": None, "clock": lambda: CLOCK, "read_gpus": False, **kw})
    if kw.get("defer"):  # the command line's first frame (screens/loading.py), held: the load never starts
        app._load_then_start = lambda: None  # type: ignore[method-assign]
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await step(pilot)
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.pause()
        path = app.save_screenshot(f"{name}.svg", str(out))
    return Path(path)


def to_png(svg: Path) -> Path:
    import cairosvg

    png = svg.with_suffix(".png")
    cairosvg.svg2png(url=str(svg), write_to=str(png))
    return png


def main(out: Path = ROOT / "screenshots", names: list[str] | None = None, png: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "ATOMSIM_GPU_DIR")}
    state = Path(tempfile.gettempdir()) / "atomdeck-screenshots"  # a stable path: it shows in the log view
    cfg = Path(tempfile.gettempdir()) / "atomdeck-screenshots-config"  # stable too: the help shows it
    shutil.rmtree(cfg, ignore_errors=True)
    cfg.mkdir()
    os.environ["XDG_CONFIG_HOME"] = str(cfg)  # the user's keymap and theme stay out of the pictures
    gpus = Path(tempfile.gettempdir()) / "atomdeck-screenshots-gpus"  # the simulated GPUs: no other demo run's
    shutil.rmtree(gpus, ignore_errors=True)
    os.environ["ATOMSIM_GPU_DIR"] = str(gpus)
    try:
        for name in names or list(SHOTS):
            shutil.rmtree(state, ignore_errors=True)
            os.environ["XDG_STATE_HOME"] = str(state)  # the shown runs, and only those
            svg = asyncio.run(shoot(name, out))
            written.append(svg)
            if png:
                written.append(to_png(svg))
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(cfg, ignore_errors=True)
        shutil.rmtree(gpus, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return written


if __name__ == "__main__":
    args = sys.argv[1:]
    target = Path(args[0]) if args else ROOT / "screenshots"
    chosen = [n for n in SHOTS if any(a in n for a in args[1:])] if len(args) > 1 else None
    for p in main(target, chosen):
        print(p)
