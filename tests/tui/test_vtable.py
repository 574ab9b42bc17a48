"""The virtual table (tui/widgets/vtable.py) on its own: the cursor keeps its row key, only changed rows are
drawn again, keys and clicks move the cursor, wide content scrolls sideways, an empty table. What is drawn,
not how fast (bench/console_scale_keys.py times it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from atomdeck.tui.widgets.vtable import VirtualTable
from rich.text import Text
from textual.app import App
from textual.pilot import Pilot

COLUMNS = [("name", "NAME"), ("stage", "STAGE"), ("since", "SINCE")]


def rows(n: int, since: str = "12s", only: set[int] | None = None) -> list[tuple[str, list[Text]]]:
    return [(f"r{i:02d}", [Text(f"proc-{i:02d}"), Text("serving"), Text(since, justify="right")])
            for i in range(n) if only is None or i in only]


class One(App):
    def __init__(self, table: VirtualTable) -> None:
        super().__init__()
        self.table = table
        self.seen: list[tuple[str, str]] = []

    def compose(self):
        yield self.table

    def on_virtual_table_row_highlighted(self, event: VirtualTable.RowHighlighted) -> None:
        self.seen.append(("highlighted", event.key))

    def on_virtual_table_row_selected(self, event: VirtualTable.RowSelected) -> None:
        self.seen.append(("selected", event.key))


@asynccontextmanager
async def table_app(n: int, focus: bool = False, zebra_stripes: bool = True) -> AsyncIterator[tuple[One, VirtualTable, Pilot]]:
    """A table of `n` rows (COLUMNS) alone in an app at 60x12, drawn once: (app, table, pilot)."""
    table = VirtualTable(id="t", zebra_stripes=zebra_stripes)
    app = One(table)
    async with app.run_test(size=(60, 12)) as pilot:
        table.set_columns(COLUMNS)
        table.set_rows(rows(n))
        if focus:
            table.focus()
        await pilot.pause()
        yield app, table, pilot


def line(table: VirtualTable, y: int) -> str:
    return "".join(s.text for s in table.render_line(y))


async def test_the_cursor_stays_on_its_row_key_across_set_rows_and_filters():
    async with table_app(30) as (app, table, pilot):
        table.move_cursor(row=20)
        await pilot.pause()
        assert table.cursor_key == "r20" and app.seen[-1] == ("highlighted", "r20")
        # a filter: only every third row (r21 is one of them): the cursor stays on r21, at its new index
        table.move_cursor(row=21)
        table.set_rows(rows(30, only={i for i in range(30) if i % 3 == 0}))
        await pilot.pause()
        assert table.cursor_key == "r21" and table.cursor_row == 7
        assert table.get_row_at(7)[0].plain == "proc-21"
        # the cursor's row is on screen after the filter
        top = int(table.scroll_y)
        assert top <= 7 < top + table.size.height - 1
        assert "proc-21" in line(table, 7 - top + 1)
        # the filter removed: the same key again, at its old index
        table.set_rows(rows(30))
        await pilot.pause()
        assert table.cursor_key == "r21" and table.cursor_row == 21
        # rows in another order: still the same key
        table.set_rows(list(reversed(rows(30))))
        await pilot.pause()
        assert table.cursor_key == "r21" and table.cursor_row == 8
        # its row gone: the cursor stays at its index, on whatever row is there now
        table.set_rows([r for r in rows(30) if r[0] != "r21"])
        await pilot.pause()
        assert table.cursor_row == 8 and table.cursor_key == "r08"
        assert app.seen[-1] == ("highlighted", "r08")
        assert table.row_count == 29


async def test_only_the_rows_that_changed_are_drawn_again():
    async with table_app(40) as (app, table, pilot):
        shown = table.size.height - 1  # rows on screen (the header is the first line)
        assert table.renders == shown, "only the rows on screen are laid out"
        laid, drawn = table.renders, table.lines_drawn

        # the clock: one row's time changes (the same width), the others are given again, equal
        new = rows(40)
        new[3] = ("r03", [Text("proc-03"), Text("serving"), Text("13s", justify="right")])
        table.set_rows(new)
        await pilot.pause()
        assert table.renders == laid + 1 and table.lines_drawn == drawn + 1
        assert "13s" in line(table, 4) and "12s" in line(table, 5)
        assert table.get_cell("r03", "since").plain == "13s"

        # nothing changed: nothing drawn
        laid, drawn = table.renders, table.lines_drawn
        table.set_rows(new)
        await pilot.pause()
        assert (table.renders, table.lines_drawn) == (laid, drawn)

        # only the text's own style changed (a progress bar turning dim): that row is drawn again
        new[5] = ("r05", [Text("proc-05"), Text("serving", style="dim"), Text("12s", justify="right")])
        table.set_rows(new)
        await pilot.pause()
        assert table.renders == laid + 1

        # a cursor move restyles two lines and lays out none
        laid, drawn = table.renders, table.lines_drawn
        table.move_cursor(row=1)
        await pilot.pause()
        assert table.renders == laid and table.lines_drawn == drawn + 2

        # a filter and back: only rows never laid out before are laid out; the rows that come back are not
        laid = table.renders
        table.set_rows([r for i, r in enumerate(new) if i % 2 == 0])
        await pilot.pause()
        evens_on_screen = [2 * k for k in range(shown)]
        assert table.renders == laid + sum(1 for i in evens_on_screen if i >= shown)
        laid = table.renders
        table.set_rows(new)
        await pilot.pause()
        assert int(table.scroll_y) == 0 and table.renders == laid

        # a wider value: the column grows and the row shows all of it
        new[0] = ("r00", [Text("proc-00"), Text("serving"), Text("1h02m03s", justify="right")])
        table.set_rows(new)
        await pilot.pause()
        assert "1h02m03s" in line(table, 1)
        assert table.columns[2].content_width == len("1h02m03s")


async def test_keys_and_clicks_move_the_cursor_and_enter_selects():
    async with table_app(50, focus=True, zebra_stripes=False) as (app, table, pilot):
        view = table.size.height - 1
        await pilot.press("down", "down")
        assert table.cursor_row == 2
        await pilot.press("up")
        assert table.cursor_row == 1
        await pilot.press("pagedown")
        assert table.cursor_row == 1 + view
        assert int(table.scroll_y) <= table.cursor_row < int(table.scroll_y) + view  # on screen
        await pilot.press("pageup")
        assert table.cursor_row == 1
        await pilot.press("end")
        assert table.cursor_row == 49 and int(table.scroll_y) == 50 - view
        assert "proc-49" in line(table, table.size.height - 1)
        await pilot.press("home")
        assert table.cursor_row == 0 and int(table.scroll_y) == 0
        await pilot.press("up")  # at the top: stays
        assert table.cursor_row == 0
        app.seen.clear()
        await pilot.press("enter")
        await pilot.pause()
        assert app.seen == [("selected", "r00")]

        # a click on a row puts the cursor there; a click on the cursor's row selects it
        app.seen.clear()
        await pilot.click(table, offset=(3, 4))  # line 4: the fourth row (the header is line 0)
        await pilot.pause()
        assert table.cursor_row == 3 and app.seen == [("highlighted", "r03")]
        await pilot.click(table, offset=(3, 4))
        await pilot.pause()
        assert app.seen == [("highlighted", "r03"), ("selected", "r03")]
        await pilot.click(table, offset=(3, 0))  # the header: nothing
        await pilot.pause()
        assert table.cursor_row == 3 and len(app.seen) == 2


async def test_wide_content_scrolls_sideways():
    table = VirtualTable(id="t")
    app = One(table)
    async with app.run_test(size=(30, 8)) as pilot:
        table.set_columns([("a", "A"), ("b", "B")], widths=[20, None])
        table.set_rows([("x", [Text("left"), Text("far-right-words")])])
        table.focus()
        await pilot.pause()
        assert table.virtual_size.width == 22 + 17 > table.size.width
        assert "far-right-words" not in line(table, 1)
        for _ in range(15):
            await pilot.press("right")
        await pilot.pause()
        assert int(table.scroll_x) > 0
        assert "far-right-words" in line(table, 1) and "B" in line(table, 0)  # the header scrolls with it
        assert "left" not in line(table, 1)
        await pilot.press(*["left"] * 20)
        assert int(table.scroll_x) == 0 and "left" in line(table, 1)


async def test_an_empty_table():
    table = VirtualTable(id="t", zebra_stripes=True)
    app = One(table)
    async with app.run_test(size=(40, 8)) as pilot:
        table.set_columns(COLUMNS)
        table.focus()
        await pilot.pause()
        assert table.row_count == 0 and table.cursor_key is None and table.cursor_row == 0
        assert line(table, 0).split() == ["NAME", "STAGE", "SINCE"]
        assert line(table, 1).strip() == ""
        await pilot.press("down", "up", "pagedown", "end", "home", "enter")
        await pilot.click(table, offset=(2, 2))
        await pilot.pause()
        assert app.seen == [] and table.cursor_key is None
        table.set_rows(rows(2))
        await pilot.pause()
        assert table.cursor_key == "r00" and "proc-01" in line(table, 2)
        table.clear()
        await pilot.pause()
        assert table.row_count == 0 and line(table, 1).strip() == ""
