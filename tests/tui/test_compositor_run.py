"""TightCompositor on the run view at 128 nodes: a partial update that leaves out the containers whose changed
parts lie inside a child sends the terminal what Textual's own compositor sends, with the run view's own
widgets (the process table, the barrier grid, the panels drawn line by line, the kept scrollbars, the boxes)
while their drawings change; and a cursor moved in the process table draws the table, not the box around it
nor the view's containers under it (issue 19: at 128 nodes coming up, the boxes' draws were a seventh of the
frames' CPU). Compared and counted, not timed."""

from __future__ import annotations

import random

import pytest
from atomdeck.tui.compositor import TightCompositor
from atomdeck.tui.widgets.process_table import ProcessTable
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


async def test_a_cursor_move_draws_the_changed_rows_only():
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
        await pilot.press("down")
        await pilot.pause()
        assert "table" in drawn and drawn == ["table"] * len(drawn), drawn  # (Textual's frame: all of them)
