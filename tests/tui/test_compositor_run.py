"""TightCompositor on the run view at 128 nodes: a partial update that leaves out the containers whose changed
parts lie inside a child sends the terminal what Textual's own compositor sends, with the run view's own
widgets (the process table, the barrier grid, the panels drawn line by line, the kept scrollbars, the boxes)
while their drawings change; and a cursor moved in the process table draws the table, not the box around it
nor the view's containers under it (issue 19: at 128 nodes coming up, the boxes' draws were a seventh of the
frames' CPU). Compared and counted, not timed."""

from __future__ import annotations

import random
import re

import pytest
from atomdeck.tui.compositor import TightCompositor
from atomdeck.tui.widgets.process_table import ProcessTable
from atomdeck.tui.widgets.quiet import set_if_changed
from textual._compositor import Compositor
from textual.geometry import Region
from textual.widget import Widget

from .conftest import make_app
from .runhelpers import attached_scale
from .test_compositor import segments
from .test_run_scale_idle import Clock


@pytest.mark.parametrize("size", [(160, 50), (100, 30)])
async def test_the_run_view_at_128_nodes_is_sent_as_textual_sends_it(size):
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=size) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        tight = screen._compositor
        assert isinstance(tight, TightCompositor)
        plain = Compositor()
        rng = random.Random(11)
        width, height = screen.size
        for i in range(80):
            if i % 8 == 0:  # the panels' drawings change (times in stage, the diagnosis): their caches go
                clock.tick(3)
                screen.redraw(clock=i % 16 != 0)
                await pilot.pause()
                plain.reflow(screen, screen.size)
            tight._dirty_regions.clear()
            plain._dirty_regions.clear()
            regions = []
            for _ in range(rng.randint(1, 4)):
                x, y = rng.randrange(width), rng.randrange(height)
                regions.append(Region(x, y, rng.randint(1, width - x), rng.randint(1, min(6, height - y))))
            pair = (tight, plain) if i % 2 else (plain, tight)  # (either asks the widgets first)
            sent = {}
            for compositor in pair:
                compositor._dirty_regions.update(regions)
                sent[compositor] = segments(compositor.render_partial_update())
            assert sent[tight] == sent[plain], regions
        assert tight.covered > 0


async def test_a_cursor_move_draws_the_table_only_and_beside_its_scrollbar():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        table = screen.query_one(ProcessTable)
        table.focus()
        await pilot.press("home")  # (the first row: a move down does not scroll the table)
        await pilot.pause()
        drawn: list[str] = []

        def counted(widget: Widget, name: str):
            original = widget.render_lines

            def render_lines(crop: Region):
                drawn.append(name)
                return original(crop)
            return render_lines

        table.render_lines = counted(table, "table")  # type: ignore[method-assign]
        for n, node in enumerate(table.ancestors):  # its box, the view's containers, the screen
            if isinstance(node, Widget):
                node.render_lines = counted(node, f"container {n}: {node!r}")  # type: ignore[method-assign]
        asked = _asked(screen._compositor)
        await pilot.press("down")
        await pilot.pause()
        assert "table" in drawn and drawn == ["table"] * len(drawn), drawn  # (Textual's frame: all of them)
        # the two rows changed, up to the scrollbar's column and not into it (the bar did not change: Textual asked
        # for the rows across the bar too, and drew it)
        bar = table.vertical_scrollbar.region
        mine = [r for r in asked if r.overlaps(table.region)]
        assert mine and max(r.right for r in mine) == bar.x, (mine, bar)


MOVE = re.compile(r"\x1b\[(\d+);(\d+)H|\x1b\[[0-9;?]*[A-Za-z]|\n")


def _paint(screen_rows: list[list[str]], update) -> None:
    """What a frame's update writes, onto rows of characters (its cursor moves and text; styles left out)."""
    text = "".join(seg.text for seg in update.__rich_console__(None, None))
    row = col = 0
    pos = 0
    for m in MOVE.finditer(text):
        for ch in text[pos:m.start()]:
            if 0 <= row < len(screen_rows) and 0 <= col < len(screen_rows[row]):
                screen_rows[row][col] = ch
            col += 1
        if m.group(1):
            row, col = int(m.group(1)) - 1, int(m.group(2)) - 1
        pos = m.end()
    for ch in text[pos:]:
        if 0 <= row < len(screen_rows) and 0 <= col < len(screen_rows[row]):
            screen_rows[row][col] = ch
        col += 1



def _terminal(app, screen) -> list[list[str]]:
    """From now on, the screen's frames painted onto rows of characters as a terminal gets them; the first one
    whole (what the terminal holds from then on, once the caller lets a frame go)."""
    width, height = screen.size
    rows = [[" "] * width for _ in range(height)]
    real = app._display

    def display(on, renderable) -> None:
        if on is screen and renderable is not None:
            _paint(rows, renderable)
        real(on, renderable)

    app._display = display
    screen.refresh()
    return rows


def _asked(compositor) -> list[Region]:
    """From now on, the regions the compositor was asked to repaint (after each update_widgets)."""
    asked: list[Region] = []
    real = compositor.update_widgets

    def update_widgets(widgets: set[Widget]) -> None:
        real(widgets)
        asked.extend(compositor._dirty_regions)

    compositor.update_widgets = update_widgets
    return asked

async def test_the_frames_written_add_up_to_the_screen():
    """Frame after frame, as a terminal gets them (the first whole, then the changed spans) while the run view
    at 128 nodes redraws, its cursor moves and its tables scroll: the screen they leave is the screen drawn
    whole. Its scrolling widgets' changes left their unchanged scrollbars out."""
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        rows = _terminal(app, screen)
        await pilot.pause()
        table = screen.query_one(ProcessTable)
        table.focus()
        for step in range(24):
            if step % 4 == 0:
                clock.tick(2)
                screen.redraw(clock=step % 8 != 0)
            else:
                await pilot.press(["down", "down", "pagedown", "up", "home", "end"][step % 6])
            await pilot.pause()
            await pilot.pause()
        width, height = screen.size
        whole = [[" "] * width for _ in range(height)]
        _paint(whole, screen._compositor.render_full_update())
        assert ["".join(r) for r in rows] == ["".join(r) for r in whole]
        assert screen._compositor.bars_left_out > 0


async def test_a_box_title_repaints_its_border_row_only():
    """The barrier box's title (it counts the nodes open while the run comes up) goes out in a frame of its border
    row: Textual's setter repainted the whole box, and with it the barrier grid inside (set_if_changed)."""
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        rows = _terminal(app, screen)
        await pilot.pause()
        asked = _asked(screen._compositor)
        box = screen.query_one("#barrier-box")
        for title in ("Barrier · node × port · 17 of 128 nodes open", "Barrier · node × port · 18 of 128"):
            asked.clear()
            assert set_if_changed(box, "border_title", title)
            await pilot.pause()
            assert title in "".join(rows[box.region.y]), "".join(rows[box.region.y])
            assert asked == [Region(box.region.x, box.region.y, box.region.width, 1)], asked
