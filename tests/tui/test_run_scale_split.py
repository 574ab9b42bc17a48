"""The run view's one-second clock at 128 nodes, spread: a key pressed while the clock redraws waits behind one
panel and that panel's frame, not behind the whole redraw and a frame of every panel's changed rows (issue 19:
key -> screen p95 <= 50 ms). And the big tables' share of a frame: only the rows on screen that changed are
repainted, as runs of rows, and a row's unchanged cells are neither measured nor styled again.
Counted, not timed: panels per frame, regions marked for repainting, columns measured, cells styled."""

from __future__ import annotations

from atomdeck.core.run.diagnose import diagnose
from atomdeck.core.run.events import Event
from atomdeck.tui.screens.run import RunScreen
from atomdeck.tui.widgets import vtable
from atomdeck.tui.widgets.barrier_grid import BarrierGrid
from atomdeck.tui.widgets.vtable import VirtualTable
from rich.segment import Segment
from rich.text import Text
from textual._callback import invoke
from textual.app import App
from textual.widget import Widget

from .conftest import make_app
from .runhelpers import attached_scale
from .test_run_scale_idle import Clock

# the panels that change many lines at a clock redraw at 128 nodes (the header, the handshake and nodes panels
# change a few: they go together in the clock's first turn)
HEAVY = {"proc-table", "barrier-grid", "serving"}


def _clock_timer(screen: RunScreen):
    """The screen's one-second timer, as Textual runs it."""
    timers = [t for t in screen._timers if t._interval == 1.0]
    assert len(timers) == 1, timers
    return timers[0]


def _frames(screen: RunScreen) -> list[set[str]]:
    """From now on, per frame the compositor builds: the run view's panels it repaints."""
    frames: list[set[str]] = []
    compositor = screen._compositor
    real = compositor.update_widgets

    def update_widgets(widgets: set[Widget]) -> None:
        names = set()
        for w in widgets:
            for node in (w, *w.ancestors):
                if isinstance(node, Widget) and node.id in HEAVY:
                    names.add(node.id)
                    break
        frames.append(names)
        real(widgets)

    compositor.update_widgets = update_widgets
    return frames


async def test_the_clock_draws_one_panel_per_frame():
    """The clock's timer draws the process table, the barrier grid and the Serving rows each in its own frame, after
    the light panels' (on the tree before: all of them in one turn of the loop, so in one frame)."""
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        screen.redraw(clock=True)
        await pilot.pause()
        frames = _frames(screen)
        clock.tick()
        await invoke(_clock_timer(screen)._callback)
        await pilot.pause()
        await pilot.pause()
        drawn = set().union(*frames)
        assert {"proc-table", "barrier-grid"} <= drawn, frames  # (every time in stage and "since" moved on)
        assert all(len(f) <= 1 for f in frames), f"a frame repainted several panels: {frames}"
        turns = screen.clock_turns
        assert [p for turn in turns for p in turn if p in ("procs", "cells", "nodes", "pairs")] \
            == ["pairs", "nodes", "procs", "cells"]
        assert "head" in turns[0] and all(len(turn) == 1 for turn in turns[1:]), turns


async def test_a_state_change_while_the_clock_draws_is_drawn_when_it_ends(monkeypatch):
    """A state change (here a cell closing, which makes cells blocking) while the clock's redraw is under way waits
    for it to end (one spread redraw at a time: a key never waits behind two), then is drawn with the diagnosis of
    the state then, not the one the clock started with; nothing else has to come for it to be drawn."""
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        grid = screen.query_one(BarrierGrid)
        cell = next(c for c in run.state.cells.values() if c.kind == "http" and c.state == "open")
        real = screen._frame_out
        calls = [0]

        async def frame_out() -> None:
            calls[0] += 1
            if calls[0] == 1:  # after the first turn: the state changes (its pulse comes)
                run.emit(Event("cell", cell.key, "closed"))
                screen.next_redraw_at = 0.0
                screen.run_updated()
                assert cell.key not in grid.blocking  # not drawn in the middle of the clock's turns
            await real()

        monkeypatch.setattr(screen, "_frame_out", frame_out)
        clock.tick()
        await invoke(_clock_timer(screen)._callback)
        assert calls[0] >= 2  # (after the first turn and after the process table)
        drawn = [p for turn in screen.clock_turns for p in turn]
        assert "cells" in drawn and "procs" in drawn and "nodes" in drawn, screen.clock_turns
        await _drawn(app, screen, pilot)
        assert screen.spread_changes == 1
        assert "cells" in [p for turn in screen.change_turns for p in turn], screen.change_turns
        want = {c.key for c in diagnose(run.state, app.now()).blocking}
        assert cell.key in want and grid.blocking == want


async def test_a_large_runs_state_change_draws_one_panel_per_frame(monkeypatch):
    """A state change of a 128-node run (a health event: the process table, the grid, the Serving rows) is drawn
    one panel per turn of the loop, a frame let out between them, like the clock (on the tree before: all of them
    in one turn, and a key pressed then waited behind the whole redraw); a change that comes meanwhile is drawn
    after it, in turn. (Which frame carries a panel is not asserted: a cursor that follows the culprit scrolls, and
    a scroll repaints the panels it exposes together.)"""
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        worker = next(n for n in run.state.procs if n != "router")
        real = screen._frame_out
        calls = [0]

        async def frame_out() -> None:
            calls[0] += 1
            if calls[0] == 1:  # after the first turn: another change, and its pulse
                run.emit(Event("proc.health", worker, "ok", "GET /health"))
                screen.next_redraw_at = 0.0
                screen.run_updated()
            await real()

        monkeypatch.setattr(screen, "_frame_out", frame_out)
        run.emit(Event("proc.health", worker, "unresponsive", "GET /health"))
        screen.next_redraw_at = 0.0
        screen.run_updated()
        assert screen._clock_busy
        await _drawn(app, screen, pilot)
        assert screen.spread_changes == 2
        assert calls[0] >= 4  # a frame let out after each turn of both redraws
        turns = screen.change_turns
        assert [p for turn in turns for p in turn if p in ("procs", "cells")] == ["procs", "cells"], turns
        assert all(len(turn) == 1 for turn in turns[1:]), turns


async def _drawn(app, screen: RunScreen, pilot) -> None:
    """Until the screen drew the run's last state (a redraw after a costly one waits its share: REDRAW_SHARE)."""
    for _ in range(300):
        if screen.drawn_version == app.live.version and not screen._clock_busy:
            return
        await pilot.pause(0.01)
    raise AssertionError(f"not drawn in 3 s: {screen.drawn_version} of {app.live.version}")


class Table(App):
    def compose(self):
        yield VirtualTable(id="t")


_FIXED: dict[int, list[Text]] = {}


def _rows(n: int, second: int) -> list[tuple[str, list[Text]]]:
    """n rows whose last cell shows the second; the other cells are the same Texts each time (as the process
    table gives them: a Text is not changed in place once given)."""
    for i in range(n):
        if i not in _FIXED:
            _FIXED[i] = [Text(f"p{i:03d}"), Text("decode"), Text(f"s{i:03d}"), Text("serving")]
    return [(f"p{i:03d}", [*_FIXED[i], Text(f"{second}s", justify="right")]) for i in range(n)]


async def _table_of_129(app, pilot) -> VirtualTable:
    t = app.query_one(VirtualTable)
    t.set_columns([("name", "NAME"), ("role", "ROLE"), ("node", "NODE"), ("stage", "STAGE"), ("since", "SINCE")])
    t.set_rows(_rows(129, 10))
    await pilot.pause()
    return t


async def test_a_change_to_every_row_repaints_the_rows_on_screen_as_one_region(monkeypatch):
    """The clock changes a cell of each of 129 rows: the rows on screen are marked for repainting as one region
    (on the tree before: one region per row, the rows scrolled away included in the work)."""
    app = Table()
    async with app.run_test(size=(60, 20)) as pilot:
        t = await _table_of_129(app, pilot)
        regions: list = []
        real = t.refresh

        def refresh(*args, **kwargs):
            regions.append(args)
            return real(*args, **kwargs)

        monkeypatch.setattr(t, "refresh", refresh)
        t.set_rows(_rows(129, 11))
        assert len(regions) == 1 and len(regions[0]) == 1, regions
        region = regions[0][0]
        assert region.y == 1 and region.height == t.size.height - 1  # every row on screen, below the header


async def test_a_changed_cell_is_measured_and_styled_alone(monkeypatch):
    """The table measures its auto-sized columns over the changed rows (not every row) unless the widest got
    narrower, and styles a row's line again only for its changed cells."""
    app = Table()
    async with app.run_test(size=(60, 20)) as pilot:
        t = await _table_of_129(app, pilot)
        measured = [0]
        real_measure = t._measure

        def measure():
            measured[0] += 1
            return real_measure()

        monkeypatch.setattr(t, "_measure", measure)
        styled = [0]

        class Counted(Segment):
            @classmethod
            def apply_style(cls, *args, **kwargs):
                styled[0] += 1
                return Segment.apply_style(*args, **kwargs)

        monkeypatch.setattr(vtable, "Segment", Counted)
        t.set_rows(_rows(129, 11))
        assert measured[0] == 0
        drawn = t.lines_drawn
        await pilot.pause()
        lines = t.lines_drawn - drawn
        assert lines >= 10 and styled[0] == lines, (lines, styled[0])  # one cell a line, not five
        # the widest cell of a column gets narrower: that column is measured again
        rows = _rows(129, 11)
        wide = [(k, [*cells[:4], Text("1234567s")]) if k == "p005" else (k, cells) for k, cells in rows]
        t.set_rows(wide)
        width = t.columns[4].content_width
        assert width == len("1234567s")
        assert measured[0] == 0  # (a wider cell: that width, without measuring the others)
        t.set_rows(rows)
        assert measured[0] == 1 and t.columns[4].content_width < width
        assert t.get_row("p005")[4].plain == "11s"
