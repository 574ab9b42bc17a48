"""Issue 45's goal: two clusters, the lab (real Slurm, nodes in their namespaces) and the local demo, watched from
one console at the same time, a run on each; then the lab's login host unreachable: the lab-login cluster is
marked as not answering while the demo's run is still watched and the keys go on.

The demo runs on the demo's own settings but on loopback addresses of its own (127.0.0.61-62, `demo-b` in the
clusters file), so only the lab's lock is needed: `flock /tmp/atomdeck-lab2.lock pytest tests/lab/test_lab_two_clusters.py`
(the login host's link is taken down for a moment, under the lab's lock, and put back whatever happens)."""

from __future__ import annotations

import os
from datetime import datetime

import pytest
from atomdeck.core.config.paths import config_dir
from atomdeck.core.run.run import Run
from atomdeck.tui.app import ConsoleApp
from atomdeck.tui.screens.dialogs import ConfirmDialog
from atomdeck.tui.screens.run import RunScreen
from atomdeck.tui.screens.runs import RunsScreen
from atomdeck.tui.widgets.context_bar import ContextBar
from textual.widgets import DataTable

from tests.tui.runhelpers import BIG, settle, text_of, until

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    monkeypatch.setenv("ATOMDECK_SIM_SPEED", "20")
    monkeypatch.setenv("USER", "operator")


DEMO_B = """\
current: demo-b
clusters:
  demo-b:
    description: the demo cluster's settings on loopback addresses of its own
    launcher: local
    node_ip: {method: static}
    simulator: {enabled: true}
    nodes:
      - {name: demo-b-n01, addr: 127.0.0.61, gpus: 8}
      - {name: demo-b-n02, addr: 127.0.0.62, gpus: 8}
"""


def header(app) -> str:
    return text_of(app.screen.query_one(ContextBar).query_one("#ctx"))


async def launch_here(pilot, app) -> None:
    await pilot.press("3", "L")
    assert isinstance(app.screen, ConfirmDialog), app.screen
    await pilot.press("y")
    await until(pilot, lambda: app.live is not None and not app.launching and isinstance(app.screen, RunScreen),
                timeout=90, what="the run view, its processes started")
    await until(pilot, lambda: app.live.state.status == "serving", timeout=120, what="serving")


async def test_the_lab_and_the_demo_watched_from_one_console(lab):
    path = config_dir() / "clusters.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEMO_B)  # and the shipped lab and lab-login clusters, by name
    app = ConsoleApp("demo-1p1d", "demo-b", refresh_s=None, clock=datetime.now, ask_clusters=True)
    try:
        async with app.run_test(size=BIG) as pilot:
            await settle(pilot)
            await launch_here(pilot, app)
            demo = app.live
            demo_watcher = app.runs._watcher

            await pilot.press("colon", *"ctx lab", "enter")
            await until(pilot, lambda: app.contexts.current == "lab" and app.workspace.inventory,
                        what="the lab's nodes from Slurm")
            await settle(pilot)
            await until(pilot, lambda: "lab" in app.contexts.reach, what="the lab asked")
            assert app.contexts.reach["lab"].answers, app.contexts.reach["lab"]
            assert "ctx lab ●" in header(app)
            await pilot.press("1")
            await launch_here(pilot, app)
            on_lab = app.live
            assert on_lab.run.cluster.name == "lab" and on_lab.run.rd.meta().get("job_id")

            # both watched at once, each by its own watcher process, each run's news still folded
            assert demo.watching and on_lab.watching
            pids = {demo_watcher.pid, app.runs._watcher.pid}
            assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
            seen = demo.metrics_version, on_lab.metrics_version
            await until(pilot, lambda: demo.metrics_version > seen[0] + 1 and on_lab.metrics_version > seen[1] + 1,
                        timeout=60, what="both runs' metrics still arriving")

            await pilot.press("5")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, RunsScreen)
            table = screen.query_one(DataTable)
            rows = {str(r.value): table.get_row(r.value) for r in table.rows}
            assert str(rows[demo.id][4]) == "demo-b" and str(rows[on_lab.id][4]) == "lab"
            assert str(rows[on_lab.id][0]) == "●" and str(rows[demo.id][0]) == "○"

            # the lab's login host unreachable: lab-login does not answer, marked; the rest goes on
            assert app.switch_context("lab-login")
            await settle(pilot)
            lab.link_down("mia1-login")
            try:
                app.contexts.reach.pop("lab-login", None)
                app.contexts.ask("lab-login")
                await until(pilot, lambda: "lab-login" in app.contexts.reach, timeout=30, what="lab-login asked")
                assert not app.contexts.reach["lab-login"].answers
                assert "login host mia1-login" in app.contexts.reach["lab-login"].detail
                await pilot.pause()
                assert "× no answer" in header(app)
                seen = demo.metrics_version
                await until(pilot, lambda: demo.metrics_version > seen + 1, timeout=30,
                            what="the demo's run still watched while the lab's login host is gone")
                await pilot.press("5")
                await pilot.pause()
                assert isinstance(app.screen, RunsScreen)
            finally:
                lab.link_up("mia1-login")
            assert app.switch_context("demo-b")
            await pilot.pause()
            assert app.live is demo and "ctx demo-b" in header(app)
            await pilot.press("q")
            await pilot.pause()
    finally:
        for meta in Run.list():
            run = Run.open(meta["id"])
            report = await run.teardown(grace=3)
            assert report.clean, report.lines()
