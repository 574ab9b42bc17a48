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
            run.emit(Event("run", value="stopped", detail="verified clean", t=t + 0.3))
            live.report = TeardownReport(True, [StopReport(n, run.handles[n].node, True, "SIGTERM") for n in names])
            live.teardown_running = False
        app.push_screen(TeardownScreen(live))
    return _run("serving", then)


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


def _keys(*keys: str) -> Step:
    async def step(pilot) -> None:
        await pilot.press(*keys)
    return step


SHOTS: dict[str, tuple[dict, tuple[int, int], Step]] = {
    "01-nodes": ({}, BIG, _keys()),
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
    "12-nodes-100x30": ({}, SMALL, _keys()),
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
    "37-bench-invalid-step": ({}, BIG, _bench_trouble),
    "38-bench-invalid-step-100x30": ({}, SMALL, _bench_trouble),
    "39-sweep-layouts": ({}, BIG, _sweep),
    "40-sweep-layouts-100x30": ({}, SMALL, _sweep),
}


async def shoot(name: str, out: Path) -> Path:
    from atomdeck.tui.app import ConsoleApp

    kw, size, step = SHOTS[name]
    app = ConsoleApp(**{"refresh_s": None, "clock": lambda: CLOCK, **kw})
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
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")}
    state = Path(tempfile.gettempdir()) / "atomdeck-screenshots"  # a stable path: it shows in the log view
    cfg = Path(tempfile.gettempdir()) / "atomdeck-screenshots-config"  # stable too: the help shows it
    shutil.rmtree(cfg, ignore_errors=True)
    cfg.mkdir()
    os.environ["XDG_CONFIG_HOME"] = str(cfg)  # the user's keymap and theme stay out of the pictures
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
