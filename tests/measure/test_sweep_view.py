"""The console's Sweep view (issue 40.4) driven by Pilot against the local demo: the form starts a layout search of
core's, one progress bar for the whole search, each layout's state, the Pareto of the layouts' steps with every point
labelled (layout, concurrency), and core's recommendation."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from atomdeck.core.run.run import Run
from atomdeck.tui.app import ConsoleApp
from atomdeck.tui.screens.sweep import SweepScreen
from atomdeck.tui.widgets.pareto import ParetoChart
from textual.widgets import DataTable, Input, ProgressBar, Static

from tests.leftovers import alive

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _sim_speed(monkeypatch):
    monkeypatch.setenv("ATOMDECK_SIM_SPEED", "20")


async def until(pilot, cond, what: str, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, f"timed out waiting for {what}"
        await pilot.pause(0.1)


async def test_the_sweep_view_searches_layouts_and_recommends_one():
    app = ConsoleApp(refresh_s=None, clock=lambda: datetime(2025, 1, 1, 12, 0, 0))
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.press("7")
        await until(pilot, lambda: isinstance(app.screen, SweepScreen), "the sweep view")
        screen = app.screen
        assert screen.query_one("#sweep-layouts", Input).value == "1p1d,1p2d,2p1d"
        assert screen.query_one("#sweep-nodes", Input).value == "demo-n01,demo-n02,demo-n03"
        values = {"layouts": "1p1d,2p1d", "isl": "64", "osl": "16", "concurrency": "2,8", "num_prompts": "8",
                  "slo": "ttft_ms:60000,tpot_ms:1000,bogus:3"}
        for key, value in values.items():
            screen.query_one(f"#sweep-{key}", Input).value = value
        screen.query_one("#sweep-isl", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert not screen.running and "'bogus:3' is not KEY:MILLISECONDS" in screen.status, screen.status
        screen.query_one("#sweep-slo", Input).value = "ttft_ms:60000,tpot_ms:1000"
        await pilot.press("enter")
        await until(pilot, lambda: screen.running, "the search to start", 5)
        await until(pilot, lambda: not screen.running, "the search to finish")
        await pilot.pause(0.3)
        assert screen.status.startswith("done: saved"), screen.status
        search = screen.search
        bar = screen.query_one("#sweep-bar", ProgressBar)
        assert (bar.progress, bar.total) == (4, 4)
        table = screen.query_one(DataTable)
        assert [str(table.get_row_at(i)[1]) for i in range(2)] == ["done", "done"]
        assert [str(table.get_row_at(i)[5]) for i in range(2)] == ["2/2", "2/2"]
        pick = str(screen.query_one("#sweep-pick", Static).render())
        assert pick.startswith("best per GPU within SLO ttft_ms:60000,tpot_ms:1000: ") and " at concurrency " in pick
        chart = screen.query_one(ParetoChart)
        assert [c.names for c in chart.curves] == [("1p1d c=2", "1p1d c=8"), ("2p1d c=2", "2p1d c=8")]
        await pilot.press("g")
        await pilot.pause()
        assert "InferenceX" in str(screen.query_one("#bench-chart-box").border_title)
    for e in search.entries:
        assert not alive(Run.open(e.run))
