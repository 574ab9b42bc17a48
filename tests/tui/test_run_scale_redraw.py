"""What the run view rebuilds at 128 nodes (issue 19): the handshake matrix of 4,096 pairs only when a pair
changed (or the panel's width), the router panel only when what it shows changed, the barrier grid's grouping
of its cells once per run; and the Serving panel's sparklines drawn as Textual's renderable draws them.
Counted, not timed (timings: bench/console_scale_keys.py)."""

from __future__ import annotations

import random

from atomdeck.core.run.events import Event
from atomdeck.tui.widgets import barrier_grid, run_panels
from atomdeck.tui.widgets.run_panels import RouterPanel
from atomdeck.tui.widgets.serving_panel import spark_text
from rich.color import Color
from rich.console import Console
from rich.text import Text
from textual.renderables.sparkline import Sparkline
from textual.widget import Widget

from .conftest import make_app
from .fakerun import fake_run
from .fakescale import fake_scale_run
from .runhelpers import attached_scale, pulse, text_of


def _counting(monkeypatch, module, name: str) -> list[int]:
    """Count the calls of `module.name` (the real function still runs)."""
    calls = [0]
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls



async def test_the_handshake_matrix_is_collapsed_again_only_when_a_pair_changed(monkeypatch):
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        collapses = _counting(monkeypatch, run_panels, "pair_matrix")
        for i in range(3):  # the clock, and process events: nothing the matrix shows changed
            screen.redraw(clock=True)
            run.emit(Event("proc.health", f"decode-{i}", "unresponsive", "GET /health timed out"))
            await pulse(screen, pilot)
        assert screen.redraws["pairs"] >= 6  # the panel was asked to redraw every time...
        assert collapses[0] == 0  # ...and built nothing
        run.emit(Event("pair", "prefill-1>decode-2", "failed", "decode-2 cannot reach prefill-1"))
        await pulse(screen, pilot)
        assert collapses[0] == 1
        assert "prefill-1" in text_of(screen.query_one("#pairs"))
        screen.redraw(clock=True)
        assert collapses[0] == 1
        # another width: built again for it
        await pilot.resize_terminal(130, 50)
        await pilot.pause()
        screen.redraw(clock=True)
        assert collapses[0] == 2


async def test_pairs_moving_on_redraw_the_matrix_in_place_without_a_layout_pass(monkeypatch):
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        pairs = screen.query_one("#pairs")
        for d in range(10):  # ten pairs transferred: the counts line names that stage from now on
            run.emit(Event("pair", f"prefill-30>decode-{d}", "transferred", "first transfer"))
        await pulse(screen, pilot)
        await pilot.pause()
        layouts = _layouts(monkeypatch)
        # a whole block of 8x8 pairs reaches transferred (its glyph changes; the counts' digits change):
        # the panel keeps its size
        before = text_of(pairs)
        for p in range(8, 16):
            for d in range(8, 16):
                run.emit(Event("pair", f"prefill-{p}>decode-{d}", "transferred", "first transfer"))
        await pulse(screen, pilot)
        await pilot.pause()
        after = text_of(pairs)
        assert after != before and "74 transferred" in after
        assert "pairs" not in layouts, layouts
        # a line that wraps into more rows does re-lay it out: a failure with a long reason
        run.emit(Event("pair", "prefill-9>decode-9", "failed", "decode-9 cannot reach prefill-9 " + "x " * 60))
        await pulse(screen, pilot)
        assert "pairs" in layouts


async def test_a_process_event_does_not_redraw_the_router_panel(monkeypatch):
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        panel = screen.query_one(RouterPanel)
        run.emit(Event("proc.health", "decode-9", "unresponsive", "GET /health timed out"))
        await pulse(screen, pilot)  # (the first draw after the panel's styles were applied)
        updates = _counting(monkeypatch, panel, "update")  # each one a layout pass of the screen
        for i in range(4):
            run.emit(Event("proc.health", f"prefill-{i}", "unresponsive", "GET /health timed out"))
            await pulse(screen, pilot)
            screen.redraw(clock=True)
        assert updates[0] == 0
        run.emit(Event("check", "workers", "ok", "128 workers registered"))
        await pulse(screen, pilot)
        assert updates[0] == 1
        assert "128 workers registered" in text_of(panel)
        run.emit(Event("proc.stage", "router", "failed", "router exited"))
        await pulse(screen, pilot)
        assert updates[0] == 2
        assert "router failed" in text_of(panel)


async def test_the_barrier_cells_are_grouped_once_per_run(monkeypatch):
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        grouped = _counting(monkeypatch, barrier_grid, "group_cells")
        run, screen = await attached_scale(pilot, redraw=True)
        grid = screen.query_one(barrier_grid.BarrierGrid)
        assert grouped[0] == 1
        cell = next(c for c in run.state.cells.values() if c.state != "open" and c.kind == "http")
        column = f"http:{cell.port}"
        assert "not yet" in grid.get_cell(cell.node, column).plain
        for _ in range(3):
            screen.redraw(clock=True)
        run.emit(Event("cell", cell.key, "open"))
        await pulse(screen, pilot)
        assert grouped[0] == 1
        assert grid.get_cell(cell.node, column).plain.startswith("● open")  # the same cell object, now open
        # another run: its cells are grouped for it
        app.runs.attach(fake_scale_run(run_id="20250101-115920-scale-64p64d-k1l3"), watch=False)
        await pilot.pause()
        screen.redraw()
        assert grouped[0] == 2


def test_a_sparkline_is_drawn_as_textuals_renderable_draws_it():
    console = Console(width=100)
    rnd = random.Random(7)
    lo, hi = Color.from_rgb(20, 40, 60), Color.from_rgb(220, 120, 30)
    for _ in range(400):
        data = [rnd.choice([0.0, 1.0, 5.0, rnd.random() * 100]) for _ in range(rnd.choice([0, 1, 2, 3, 13, 14, 15, 40]))]
        width = rnd.choice([3, 5, 14])
        want = Text()
        r = Sparkline(data, width=width, height=1, min_color=lo, max_color=hi, summary_function=max)
        for seg in console.render(r, console.options.update(width=width, height=1)):
            if seg.text != "\n":
                want.append(seg.text, seg.style)
        got = spark_text(data, width, lo, hi)
        assert (got.plain, got.spans) == (want.plain, want.spans), (data, width)


async def test_moving_to_a_process_with_another_count_of_lines_lays_nothing_out(monkeypatch):
    """The run view's Last lines panel takes the height of its box: a process with more lines, or fewer,
    is drawn without a layout pass (at 128 nodes the screen's whole reflow, on the key that moved the
    cursor), and when it has more lines than rows it shows the newest."""
    from atomdeck.tui.widgets.process_table import ProcessTable
    from atomdeck.tui.widgets.tail_panel import TailPanel

    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        run = fake_run("serving")
        procs = run.state.procs
        procs["prefill-0"].last_lines.clear()
        procs["prefill-0"].last_lines.extend(f"prefill line {i}" for i in range(20))
        procs["decode-0"].last_lines.clear()
        procs["decode-0"].last_lines.extend(["decode line 0", "decode line 1"])
        app.runs.attach(run, watch=False)
        app.switch_mode("run")
        await pilot.pause()
        screen = app.screen
        table, tail = screen.query_one(ProcessTable), screen.query_one(TailPanel)
        table.select_key("prefill-0")
        await pilot.pause()
        rows = tail.size.height
        assert 0 < rows < 20
        shown = [tail.render_line(y).text.rstrip() for y in range(rows)]
        assert shown == [f"prefill line {i}" for i in range(20 - rows, 20)]  # the newest that fit
        layouts = _layouts(monkeypatch)
        table.select_key("decode-0")
        await pilot.pause()
        assert [tail.render_line(y).text.rstrip() for y in range(3)] == ["decode line 0", "decode line 1", ""]
        table.select_key("prefill-0")
        await pilot.pause()
        assert tail.render_line(rows - 1).text.rstrip() == "prefill line 19"
        assert "tail" not in layouts, layouts


def _layouts(monkeypatch) -> list[str]:
    """The ids of the widgets that ask for a layout pass from now on."""
    layouts: list[str] = []
    real = Widget.refresh

    def refresh(self, *regions, repaint=True, layout=False, recompose=False):
        if layout:
            layouts.append(self.id or type(self).__name__)
        return real(self, *regions, repaint=repaint, layout=layout, recompose=recompose)

    monkeypatch.setattr(Widget, "refresh", refresh)
    return layouts


async def test_a_style_update_rebuilds_the_matrix_only_when_a_colour_changed(monkeypatch):
    """Focus moving inside the run view updates the panels' styles several times per key press; the kept
    matrix (and router panel) is drawn from the colours, so only a change of colour (a theme) builds it again.
    (Clearing it at every style update made a rebuild land inside the first test's count now and then.)"""
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        panel, router = screen.query_one("#pairs"), screen.query_one(RouterPanel)
        collapses = _counting(monkeypatch, run_panels, "pair_matrix")
        drawn = router.drawn
        for widget in (panel, router):
            widget.notify_style_update()  # what a focus change does to them
        screen.redraw(clock=True)
        await pulse(screen, pilot)
        assert collapses[0] == 0 and router.drawn == drawn
        app.theme = "textual-light"
        await pilot.pause()
        screen.redraw(clock=True)
        assert collapses[0] == 1 and router.drawn == drawn + 1
