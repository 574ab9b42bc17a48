"""A table taller than its box keeps its size when a column widens or rows come and go: no layout pass of the
whole screen for it (tui/widgets/vtable.py _same_box, issue 19: at 128 nodes each cost 40-250 ms while a run
came up). A table that fits its rows still grows with them. Counted, not timed."""

from __future__ import annotations

from atomdeck.tui.widgets.vtable import VirtualTable
from rich.text import Text
from textual.app import App

from .runhelpers import count_layouts

COLUMNS = [("name", "NAME"), ("stage", "STAGE")]


def _rows(n: int, stage: str = "starting") -> list[tuple[str, list[Text]]]:
    return [(f"p{i:03d}", [Text(f"p{i:03d}"), Text(stage)]) for i in range(n)]


class Table(App):
    def compose(self):
        yield VirtualTable(id="t")


async def test_a_wider_column_of_a_table_taller_than_its_box_lays_nothing_out(monkeypatch):
    app = Table()
    async with app.run_test(size=(60, 20)) as pilot:
        t = app.query_one(VirtualTable)
        t.set_columns(COLUMNS)
        t.set_rows(_rows(129))
        await pilot.pause()
        height = t.size.height
        passes = count_layouts(monkeypatch)
        t.set_rows(_rows(129, "loading weights from disk"))  # the stage column widens
        await pilot.pause()
        t.set_rows(_rows(140, "loading weights from disk"))  # more rows, still taller than the box
        await pilot.pause()
        assert passes[0] == 0
        assert t.virtual_size.height == 141 and t.size.height == height
        assert t.vertical_scrollbar.window_virtual_size == 141  # the scrollbar follows
        t.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert t.scroll_y == t.max_scroll_y > 0
        assert "loading weights from disk" in "".join(s.text for s in t.render_line(t.size.height - 1))


async def test_a_table_that_fits_its_rows_still_grows_with_them(monkeypatch):
    app = Table()
    async with app.run_test(size=(60, 20)) as pilot:
        t = app.query_one(VirtualTable)
        t.set_columns(COLUMNS)
        t.set_rows(_rows(3))
        await pilot.pause()
        assert t.size.height == 4
        passes = count_layouts(monkeypatch)
        t.set_rows(_rows(8))
        await pilot.pause()
        assert passes[0] >= 1 and t.size.height == 9
