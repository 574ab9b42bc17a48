"""LineStatic (the run view's text panels): a Text drawn line by line gives the strips Static gives for the
whole, and a redraw draws only the lines that changed (issue 19: at 128 nodes the Why panel's whole redraw for
each change was the costliest widget of the frames while the run came up). Counted, not timed."""

from __future__ import annotations

from atomdeck.tui.widgets.line_static import LineStatic
from atomdeck.tui.widgets.run_panels import RunPanel
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.widgets import Static


class Both(App):
    CSS = """
    Static { height: auto; width: 36; padding: 0 1; }
    #plain { color: $text-warning; }
    #lines { color: $text-warning; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="plain")
        yield LineStatic(id="lines")


def texts() -> list[Text]:
    """What the panels show: bullets, long lines that wrap, styled spans across a wrap, blank lines, a trailing
    newline, a text style, wide characters, tabs."""
    why = Text()
    for i in range(6):
        if i:
            why.append("\n")
        why.append("• ", style="dim")
        why.append(f"prefill-{i} on s00{i}: :8010 not open; alive, loading for {i + 3}s; last line: "
                   f"[atom] loading weights shard {i}/8 " + "x" * (i * 7), style=Style(color="red") if i % 2 else "")
    spans = Text("P0 ○ ◔ ◑ ● × ● ● ○\nP1 ● ● ● ● ● ● ● ●\n\n  waiting 3 · registered 2 · transferred 11\n")
    spans.stylize("bold", 0, 2)
    spans.stylize(Style(color="green"), 5, 30)
    styled = Text("the whole text dim\nand its second line, long enough to wrap over the edge of the panel",
                  style="dim")
    wide = Text("节点 s001 没有响应 — 节点 s002 没有响应 — 节点 s003 没有响应\n\tindented by a tab")
    return [why, spans, styled, wide, Text(""), Text("\n\n")]


def drawn(widget: Static) -> list[str]:
    region = Region(0, 0, widget.outer_size.width, widget.outer_size.height)
    return [repr(list(strip)) for strip in widget.render_lines(region)]


async def test_each_text_is_drawn_as_static_draws_it():
    app = Both()
    async with app.run_test(size=(60, 40)) as pilot:
        plain, lines = app.query_one("#plain", Static), app.query_one("#lines", LineStatic)
        for text in texts():
            plain.update(text)
            lines.update(text)
            await pilot.pause()
            assert lines.size == plain.size, text.plain
            assert drawn(lines) == drawn(plain), text.plain
        assert lines.lines_drawn > 0  # (drawn by lines, not by Static)
        assert str(lines.render()) == str(plain.render())  # the visual, made when asked for


async def test_a_change_draws_only_the_lines_that_changed():
    app = Both()
    async with app.run_test(size=(60, 40)) as pilot:
        plain, lines = app.query_one("#plain", Static), app.query_one("#lines", LineStatic)
        why = texts()[0]
        lines.update(why)
        plain.update(why)
        await pilot.pause()
        drawn(lines)
        before = lines.lines_drawn
        changed = why.copy()
        changed.append("\n• decode-7 on s071: :8020 not open", style="dim")  # one line more
        lines.update(changed)
        plain.update(changed)
        await pilot.pause()
        assert drawn(lines) == drawn(plain)
        assert lines.lines_drawn == before + 1
        app.theme = "textual-light"  # another look: every line again, in its colours
        await pilot.pause()
        assert drawn(lines) == drawn(plain)
        assert lines.lines_drawn == before + 1 + len(changed.plain.split("\n"))


async def test_a_run_panel_is_drawn_by_lines():
    class One(App):
        CSS = "RunPanel { height: auto; width: 40; }"

        def compose(self) -> ComposeResult:
            yield RunPanel(id="panel")

    app = One()
    async with app.run_test(size=(60, 20)) as pilot:
        panel = app.query_one(RunPanel)
        await pilot.pause()
        before = panel.lines_drawn  # (its empty line at mount)
        panel.set(texts()[0])
        await pilot.pause()
        drawn(panel)
        assert panel.lines_drawn == before + 6


async def test_a_panel_taller_than_its_box_draws_what_the_box_shows():
    class Scrolled(App):
        CSS = """
        VerticalScroll { height: 6; width: 40; }
        Static { height: auto; }
        """

        def compose(self) -> ComposeResult:
            with VerticalScroll(id="a"):
                yield LineStatic(id="lines")
            with VerticalScroll(id="b"):
                yield Static(id="plain")

    text = Text("\n".join(f"• line {i}: a long line that wraps over the edge of the narrow box" for i in range(20)))
    app = Scrolled()
    async with app.run_test(size=(80, 30)) as pilot:
        lines, plain = app.query_one("#lines", LineStatic), app.query_one("#plain", Static)
        await pilot.pause()
        before = lines.lines_drawn
        lines.update(text)
        plain.update(text)
        await pilot.pause()
        assert lines.size.height == 40  # 20 lines of 2 rows, 6 of them shown
        # the 3 lines the box shows (drawn twice at most: once more when the box's scrollbar took its width)
        assert lines.lines_drawn - before <= 6, lines.lines_drawn - before
        for box in app.query(VerticalScroll):  # the rest, when it is shown
            box.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert lines.lines_drawn - before >= 20
        assert drawn(lines) == drawn(plain)
