"""The run view's issue-14 parts, read from the widgets (not pictures): the Serving panel's rows and
sparklines from core's metrics, the pair matrix at 100x30 and 160x50, timeout cells and stopped clocks
of a failed run."""

from __future__ import annotations

import pytest
from atomdeck.tui.formatting import ago
from atomdeck.tui.widgets.barrier_grid import BarrierGrid
from atomdeck.tui.widgets.process_table import ProcessTable
from atomdeck.tui.widgets.serving_panel import ServingPanel

from .conftest import make_app
from .fakerun import fake_run

pytestmark = pytest.mark.usefixtures("snapshot_state")  # conftest: a state directory of the test's own


def _text(widget) -> str:
    r = widget.render()
    return getattr(r, "plain", str(r))


async def _open(scenario: str, size):
    app = make_app()
    ctx = app.run_test(size=size)
    pilot = await ctx.__aenter__()
    await app.workers.wait_for_complete()
    app.runs.attach(fake_run(scenario), watch=False)
    app.switch_mode("run")
    await pilot.pause()
    await pilot.pause(0.1)
    return app, ctx, pilot


@pytest.mark.parametrize("size", [(160, 50), (100, 30)])
async def test_the_serving_panel_has_a_row_and_sparkline_per_endpoint(size):
    app, ctx, pilot = await _open("degraded", size)
    try:
        panel = app.screen.query_one(ServingPanel)
        assert app.screen.query_one("#serving-box").display
        assert panel.rows == ["prefill-0", "decode-0", "router"]
        # one line per endpoint (name, sparkline, values), not a widget per cell: see ServingPanel
        spark, value = panel.spark_data("decode-0"), panel.line("decode-0")
        assert spark[-4:] == [0.0, 0.0, 0.0, 0.0] and max(spark) > 100  # the history from core
        assert value.startswith("decode-0") and "tok/s" in value and "KV 37% · 4 run 2 wait" in value  # the sparklines give way first
        assert "0 run 0 wait" in panel.line("prefill-0")
        assert "req/s" in panel.line("router")
        errors = _text(app.screen.query_one("#sv-errors"))
        assert "timeout 3" in errors and "HTTP 504 ×3" in errors
        head = _text(app.screen.query_one("#run-head"))
        assert "DEGRADED" in head and "unresponsive" in head and "T (stopped)" in head
        assert app.screen.query_one(ProcessTable).get_cell("decode-0", "stage").plain == "unresponsive"
    finally:
        await ctx.__aexit__(None, None, None)


async def test_no_serving_panel_without_metrics():
    app, ctx, pilot = await _open("serving", (160, 50))
    try:
        assert not app.screen.query_one("#serving-box").display
    finally:
        await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize("size", [(160, 50), (100, 30)])
async def test_256_pairs_are_a_matrix_with_the_failing_pairs_listed(size):
    app, ctx, pilot = await _open("matrix", size)
    try:
        text = _text(app.screen.query_one("#pairs"))
        rows = [ln for ln in text.splitlines() if ln.startswith("P")]
        assert len(rows) == 16  # one row per prefill, at both sizes
        assert all(len(r.split()) >= 1 + 16 or "D" in r for r in rows)
        assert "3 failed" in text
        assert "× prefill-3 → decode-11: decode-11 on mia1-p02-g11 cannot reach prefill-3" in text
        assert max(len(r) for r in rows) <= app.screen.query_one("#pairs").size.width  # no row wraps
    finally:
        await ctx.__aexit__(None, None, None)


async def test_a_failed_run_shows_timeout_cells_and_its_clocks_stop():
    app, ctx, pilot = await _open("crashed", (160, 50))
    try:
        grid = app.screen.query_one(BarrierGrid)
        assert "◐ timeout" in grid.get_cell("demo-n02", "http:8020").plain
        state = app.live.state
        head = _text(app.screen.query_one("#run-head"))
        # up to the failure (0.76 s after the launch), not to the console's clock (75 s after it)
        assert f"up {ago(state.since - state.started)}" in head and "1m15s" not in head
    finally:
        await ctx.__aexit__(None, None, None)
