"""Looks of the run views: SVG snapshots of deterministic runs (fakerun.py: fixed event times, the
console's clock frozen at 12:00:00, a state directory of each test's own whose path the pictures show as
/tmp/atomdeck-snapshot-state: conftest.snapshot_state).

Regenerate after an intended change with
    .venv/bin/python -m pytest tests/tui/test_run_snapshots.py --snapshot-update
and review the SVG diff.
"""

from __future__ import annotations

import pytest
from atomdeck.core.launch.base import StopReport
from atomdeck.core.run.events import Event
from atomdeck.core.run.run import TeardownReport
from atomdeck.tui.screens.teardown import TeardownScreen
from atomdeck.tui.widgets.vtable import VirtualTable

from .conftest import make_app
from .fakerun import fake_run

BIG, SMALL = (160, 50), (100, 30)
pytestmark = pytest.mark.usefixtures("snapshot_state")  # conftest: a state directory of the test's own


def _show(scenario: str, recipe: str = "demo-1p1d", then=None):
    async def run_before(pilot):
        app = pilot.app
        await app.workers.wait_for_complete()
        run = fake_run(scenario, recipe)
        app.runs.attach(run, watch=False)
        app.switch_mode("run")
        await pilot.pause()
        if then is not None:
            await then(pilot, run)
        await pilot.pause(0.15)
        await pilot.pause()
    return run_before


def test_run_view_serving(snap_compare):
    assert snap_compare(make_app(), terminal_size=BIG, run_before=_show("serving"))


def test_run_view_hung_barrier(snap_compare):
    assert snap_compare(make_app(), terminal_size=BIG, run_before=_show("hung"))


def test_run_view_crashed_worker_small_terminal(snap_compare):
    assert snap_compare(make_app(), terminal_size=SMALL, run_before=_show("crashed"))


async def _log_with_search(pilot, run):
    await pilot.press("enter")  # the cursor is on the culprit, decode-0
    await pilot.press("slash", *"kv registration", "enter")


def test_log_view_with_search(snap_compare):
    assert snap_compare(make_app(), terminal_size=BIG, run_before=_show("hung", then=_log_with_search))


async def _torn_down(pilot, run):
    app = pilot.app
    live = app.live
    live.begin_teardown()
    for i, (name, h) in enumerate(run.handles.items()):
        t = 1735732800.0 + i * 0.01
        run.emit(Event("teardown", name, "stopping", f"on {h.node}", t=t))
        run.emit(Event("teardown", name, "gone", "SIGTERM, gone in 0.1s", t=t + 0.1))
        run.emit(Event("proc.exit", name, "stopped", "SIGTERM, gone in 0.1s", t=t + 0.1))
        for key, c in run.state.cells.items():
            if c.owner == name:
                run.emit(Event("cell", key, "refused", t=t + 0.2))
    run.emit(Event("run", value="stopped", detail="verified clean"))
    live.report = TeardownReport(True, [StopReport(n, h.node, True, "SIGTERM, gone in 0.1s")
                                        for n, h in run.handles.items()])
    live.teardown_running = False
    app.push_screen(TeardownScreen(live))


def test_teardown_finished(snap_compare):
    assert snap_compare(make_app(), terminal_size=BIG, run_before=_show("serving", then=_torn_down))


async def _runs(pilot, run):
    fake_run("crashed")
    fake_run("hung", "demo-2p1d")
    await pilot.press("5")


def test_runs_list(snap_compare):
    assert snap_compare(make_app(), terminal_size=BIG, run_before=_show("serving", then=_runs))


def test_run_view_without_a_run(snap_compare):
    async def run_before(pilot):
        await pilot.app.workers.wait_for_complete()
        await pilot.press("4")
    assert snap_compare(make_app(), terminal_size=SMALL, run_before=run_before)


def test_run_view_degraded_with_serving_panel(snap_compare):
    """Issue 14: a frozen decode while serving: DEGRADED, the stage `unresponsive`, its /proc state in the
    headline, the Serving panel with a sparkline per endpoint and the router's errors."""
    assert snap_compare(make_app(), terminal_size=BIG, run_before=_show("degraded"))


def test_run_view_kv_parked_with_serving_panel(snap_compare):
    """Issue 44.3: the KV path broke after serving: decode-0's row in the Serving panel says 8 parked for KV, the
    oldest's age and the prefill it waits on (core's figures), in the error colour; DEGRADED names both."""
    assert snap_compare(make_app(), terminal_size=BIG, run_before=_show("parked"))


def test_run_view_pair_matrix_small_terminal(snap_compare):
    """Issue 14: 256 pairs as a prefill x decode matrix with the failing pairs listed, at 100x30."""
    async def focus(pilot, run):
        # the tables above measure their rows after a refresh: scroll once they have their height
        for table in pilot.app.screen.query("#proc-table, #barrier-grid").results(VirtualTable):
            for _ in range(100):
                if table.region.height >= table.row_count + 1:
                    break
                await pilot.pause(0.01)
        pilot.app.screen.query_one("#pairs-box").scroll_visible(animate=False, top=True)
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SMALL, run_before=_show("matrix", then=focus))
