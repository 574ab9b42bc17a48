"""What the run view's one-second clock costs at 128 nodes while a run merely serves (issue 19: the console
at <= 10 % of a core, nobody typing), and how often the handshake matrix is built while 4,096 pairs move on.
Counted, not timed: cells laid out, colours read, rows computed, matrices built."""

from __future__ import annotations

import time
from datetime import timedelta

from atomdeck.core.run.events import Event
from atomdeck.tui.widgets import run_panels, serving_panel
from atomdeck.tui.widgets.barrier_grid import BarrierGrid
from atomdeck.tui.widgets.process_table import ProcessTable
from atomdeck.tui.widgets.run_panels import HandshakePanel

from .conftest import FIXED_TIME, make_app
from .runhelpers import attached_scale, pulse, text_of, until


class Clock:
    """The console's clock, moved by the test."""

    def __init__(self) -> None:
        self.t = FIXED_TIME

    def __call__(self):
        return self.t

    def tick(self, s: float = 1.0) -> None:
        self.t += timedelta(seconds=s)


def _counting(monkeypatch, obj, name: str) -> list[int]:
    calls = [0]
    real = getattr(obj, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, counted)
    return calls



async def test_the_clock_lays_out_only_the_time_in_stage_cell_of_a_row():
    """Every second each process's time in stage changes: the row's other seven cells are the same Texts,
    which the table does not lay out again (129 rows x 8 cells were built and laid out every second)."""
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        clock.tick()  # (the rows as drawn after the styles settled: a style update draws every row anew)
        screen.redraw(clock=True)
        await pilot.pause()
        table = screen.query_one(ProcessTable)
        before = {n: table.get_row(n) for n in table.names}
        rows0, cells0 = table.renders, table.cells_laid
        clock.tick()
        screen.redraw(clock=True)
        await pilot.pause()
        rows = table.renders - rows0
        assert rows > 5  # the rows on screen were drawn again (their time in stage moved on)...
        assert table.cells_laid - cells0 == rows  # ...one cell laid out each
        name = table.names[1]
        after = table.get_row(name)
        assert after[5].plain != before[name][5].plain  # the time moved on
        assert all(a is b for i, (a, b) in enumerate(zip(after, before[name])) if i != 5)
        # a change of anything else draws the row anew
        run.emit(Event("proc.health", name, "unresponsive", "GET /health timed out"))
        await pulse(screen, pilot)
        assert table.get_row(name)[3] is not before[name][3] and "unresponsive" in table.get_row(name)[3].plain


async def test_a_clock_redraw_reads_each_colour_once(monkeypatch):
    """A component style read walks the styles and builds a Style: the process table read four per row and the
    barrier grid one per cell (~780 reads a second at 128 nodes); now once per colour until the styles change."""
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        table, grid = screen.query_one(ProcessTable), screen.query_one(BarrierGrid)
        reads_t = _counting(monkeypatch, table, "get_component_rich_style")
        reads_g = _counting(monkeypatch, grid, "get_component_rich_style")
        clock.tick()
        screen.redraw(clock=True)
        assert len(table.names) == 129 and len(grid.nodes) == 128
        assert reads_t[0] <= 10, reads_t  # (at most once each: error, ok, warning and the three roles)
        assert reads_g[0] <= 5, reads_g  # (the cells' states' colours)
        assert "live" not in table.get_row("decode-3")[3].plain  # (drawn: the rows' cells are there)
        reads_t[0] = reads_g[0] = 0  # (the first redraw read them or found them kept, as timing had it)
        table.notify_style_update()  # (a theme, or focus moving): read again, once each
        grid.notify_style_update()
        clock.tick()
        screen.redraw(clock=True)
        assert 0 < reads_t[0] <= 10 and 0 < reads_g[0] <= 5, (reads_t, reads_g)


async def test_a_redraw_computes_only_the_serving_rows_whose_endpoint_was_scraped(monkeypatch):
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        names = list(run.state.procs)

        def scrape(name: str, k: int) -> None:
            src = "mesh" if name == "router" else "atom"
            run.emit(Event("metrics", name, src, data={"t": time.time() + k, "source": src, "prompt_tok_s": 100.0 + k,
                                                       "gen_tok_s": 50.0 + k, "requests_running": k % 3,
                                                       "requests_waiting": 0, "kv_cache_usage_ratio": 0.3}))

        for n in names:
            scrape(n, 0)
        clock.tick()
        screen.redraw(clock=True)
        panel = screen.query_one("#serving")
        assert len(panel.rows) == 129
        rates = _counting(monkeypatch, serving_panel, "row_words")  # (once a row computed)
        clock.tick()
        screen.redraw(clock=True)  # no scrape since: no row computed
        assert rates[0] == 0
        scrape("decode-3", 1)
        clock.tick()
        screen.redraw(clock=True)
        assert rates[0] == 1
        assert "51 tok/s" in panel.line("decode-3")


async def test_unchanged_panels_are_not_measured_again(monkeypatch):
    """A panel whose text did not change is left alone before its wrapped size is worked out (at 128 nodes the
    diagnosis and the matrix were measured at every redraw, ~10 a second while the run comes up)."""
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        screen.redraw(clock=True)
        fits = _counting(monkeypatch, run_panels, "fit_shape")
        screen.redraw(clock=True)  # the same time: no panel changed
        screen.redraw()
        assert fits[0] == 0
        clock.tick()
        screen.redraw(clock=True)  # "up 41s": the header changed
        assert fits[0] >= 1


async def test_pairs_changing_fast_build_the_matrix_at_its_rate_and_the_last_change_is_drawn(monkeypatch):
    """~800 pair events a second while a 64P64D run comes up: after a short burst the matrix is built at most
    MATRIX_RATE times a second, not at every redraw; what was held back is drawn when the rate allows, without
    another event."""
    monkeypatch.setattr(HandshakePanel, "MATRIX_RATE", 0.001)  # (no build allowed while the test floods it)
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        panel = screen.query_one(HandshakePanel)
        panel._tokens = 0.0  # (the attach used the burst)
        built = panel.matrices
        for d in range(20):
            run.emit(Event("pair", f"prefill-30>decode-{d}", "transferred", "first transfer"))
            await pulse(screen, pilot)
        run.emit(Event("pair", "prefill-9>decode-9", "failed", "decode-9 cannot reach prefill-9"))
        await pulse(screen, pilot)
        assert panel.matrices == built and panel.deferred >= 21  # (and the clock's, if a second passed)
        assert "prefill-9" not in text_of(panel)
        panel._tokens = 1.0  # the rate allows one build now: the held-back change is drawn without an event
        await until(pilot, lambda: "prefill-9" in text_of(panel), timeout=10, what="the held-back failure drawn")
        assert panel.matrices == built + 1
        screen.redraw(clock=True)
        assert panel.matrices == built + 1  # nothing left to build
        # a change of width is built at once, whatever the rate
        await pilot.resize_terminal(130, 50)
        await pilot.pause()
        screen.redraw(clock=True)
        assert panel.matrices == built + 2


async def test_a_process_event_between_two_seconds_draws_no_barrier_cell(monkeypatch):
    """At 128 nodes a process's event (several a second) redrew the grid's 256 cells though none changed: a cell
    shows its state and since when (whole seconds); the grid draws again when a cell, the blocking ones or the
    second shown changed."""
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        grid = screen.query_one(BarrierGrid)
        await pilot.pause()  # (the focus set after the attach: a style update, which draws the grid anew)
        screen.redraw(clock=True)  # the grid drawn after that: what follows is counted from a drawn grid
        cells = _counting(monkeypatch, grid, "_cell")
        for i in range(3):
            run.emit(Event("proc.health", f"decode-{i}", "unresponsive", "GET /health timed out"))
            await pulse(screen, pilot)
        assert screen.redraws["cells"] >= 3 and cells[0] == 0
        cell = next(c for c in run.state.cells.values() if c.state != "open" and c.kind == "http")
        run.emit(Event("cell", cell.key, "open"))
        await pulse(screen, pilot)
        assert cells[0] > 0 and grid.get_cell(cell.node, f"http:{cell.port}").plain.startswith("● open")
        drawn = cells[0]
        clock.tick()  # the next second: every "since" moved on
        screen.redraw(clock=True)
        assert cells[0] > drawn
