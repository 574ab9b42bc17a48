"""The run view's text panels and the layout passes their updates cost (issue 19: at 128 nodes each layout pass
of the run view took 40-540 ms while the simulators started). While a run comes up a panel keeps the most lines it
has shown (keep_rows): fewer lines are padded, not re-laid out; released, it shrinks to its own size. A panel whose
content is a Group of tables (the router's) is measured as Textual measures it: a change that keeps its line count
lays nothing out. Counted, not timed."""

from __future__ import annotations

from atomdeck.tui.widgets.run_panels import RunPanel
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult

from .runhelpers import count_layouts


class PanelApp(App):
    CSS = "RunPanel { height: auto; width: 40; }"

    def compose(self) -> ComposeResult:
        yield RunPanel(id="panel")


def lines(n: int, word: str = "line") -> Text:
    return Text("\n".join(f"{word} {i}" for i in range(n)))


async def test_a_held_panel_keeps_its_rows_without_a_layout_pass_and_shrinks_when_released(monkeypatch):
    app = PanelApp()
    async with app.run_test(size=(60, 20)) as pilot:
        panel = app.query_one(RunPanel)
        panel.set(lines(3))
        await pilot.pause()
        assert panel.size.height == 3
        passes = count_layouts(monkeypatch)
        panel.keep_rows(True)
        panel.set(lines(2, "other"))  # one line fewer: padded
        await pilot.pause()
        panel.set(lines(3, "again"))  # back to three: the same size
        await pilot.pause()
        panel.set(lines(1, "one"))
        await pilot.pause()
        assert passes[0] == 0 and panel.size.height == 3
        assert "one 0" in str(panel.render()) and "line 0" not in str(panel.render())
        panel.set(lines(4))  # more lines than ever: the panel grows (Textual lays out twice for it)
        await pilot.pause()
        grown = passes[0]
        assert grown > 0 and panel.size.height == 4
        panel.set(lines(2, "two"))
        await pilot.pause()
        assert passes[0] == grown and panel.size.height == 4
        panel.keep_rows(False)  # the run serves: its own size again
        await pilot.pause()
        assert passes[0] > grown and panel.size.height == 2
        assert "two 1" in str(panel.render())


class Grows(RunPanel):
    GROW_ROWS = 8


class GrowsApp(App):
    CSS = "Grows { height: auto; width: 40; }"

    def compose(self) -> ComposeResult:
        yield Grows(id="panel")


async def test_a_held_panel_that_grows_in_steps_lays_out_once_a_step(monkeypatch):
    """The Why panel (GROW_ROWS: its box scrolls) grows 8 rows at a time while held: at 128 nodes coming up its
    text grew a row or two at a time, and each growth was a layout pass of the whole run view."""
    app = GrowsApp()
    async with app.run_test(size=(60, 40)) as pilot:
        panel = app.query_one(Grows)
        panel.set(lines(3))
        await pilot.pause()
        panel.keep_rows(True)
        passes = count_layouts(monkeypatch)
        panel.set(lines(5))
        await pilot.pause()
        assert panel.size.height == 8
        grown = passes[0]
        for n in (6, 8, 7, 2):  # within the step: padded, nothing laid out
            panel.set(lines(n, f"n{n}"))
            await pilot.pause()
            assert panel.size.height == 8 and passes[0] == grown, n
        assert "n2 1" in str(panel.render())
        panel.set(lines(9))  # the next step
        await pilot.pause()
        assert panel.size.height == 16 and passes[0] > grown
        panel.keep_rows(False)  # the run serves: its own size again
        await pilot.pause()
        assert panel.size.height == 9


async def test_a_panel_not_held_follows_its_line_count():
    app = PanelApp()
    async with app.run_test(size=(60, 20)) as pilot:
        panel = app.query_one(RunPanel)
        panel.set(lines(3))
        await pilot.pause()
        panel.set(lines(1))
        await pilot.pause()
        assert panel.size.height == 1


def tables(rows: int, detail: str) -> Group:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    for i in range(rows):
        grid.add_row(Text(f"check {i}"), Text(detail))
    return Group(Text("router on node-0"), grid)


async def test_a_group_that_keeps_its_line_count_lays_nothing_out(monkeypatch):
    app = PanelApp()
    async with app.run_test(size=(60, 20)) as pilot:
        panel = app.query_one(RunPanel)
        panel.set(tables(3, "waiting"))
        await pilot.pause()
        assert panel.size.height == 4
        passes = count_layouts(monkeypatch)
        panel.set(tables(3, "ok"))
        await pilot.pause()
        assert passes[0] == 0 and "ok" in str(panel.render_line(1))
        panel.set(tables(3, "a detail long enough to fold onto a second line of the panel"))  # a line more each
        await pilot.pause()
        assert passes[0] > 0 and panel.size.height == 7
