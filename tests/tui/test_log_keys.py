"""The log view's keys under a flood (issue 19): toggling wrap, scrolling up and following again change
what the log and its status line show, never the size of a widget, so none asks Textual for a layout
pass (a reflow of the whole screen and a render of every widget on it: most of a wrap toggle's cost).
Counts, not times: a layout pass is a call of Screen._refresh_layout that is not only a scroll."""

from __future__ import annotations

from textual.screen import Screen
from textual.strip import Strip

from .conftest import make_app
from .runhelpers import BIG, text_of, until
from .test_run_logs import feed, open_log

WIDE = 230  # cells of a flood line (the simulator's engine-status line): wider than the 160-cell view


def wide(i: int) -> str:
    head = f"INFO status #{i} "
    return head + "abcdefghij" * ((WIDE - len(head)) // 10) + f" end#{i}"


def count_layouts(monkeypatch) -> list[bool]:
    """Every layout pass of any screen from now on (a scroll-only reflow is not one)."""
    passes: list[bool] = []
    original = Screen._refresh_layout

    def counted(self, size=None, scroll: bool = False):
        if not scroll or self._layout_widgets:
            passes.append(True)
        return original(self, size, scroll=scroll)

    monkeypatch.setattr(Screen, "_refresh_layout", counted)
    return passes


def row_text(strip: Strip) -> str:
    return "".join(seg.text for seg in strip).rstrip()


async def test_wrap_toggle_is_drawn_without_a_layout_pass(monkeypatch):
    """w under a flood of lines wider than the view: the lines really wrap (and unwrap: horizontal scroll
    again), the status line says so, and no layout pass is asked for. The horizontal scrollbar's row stays
    while wrapped (an empty track: nothing to scroll), so the view keeps its size."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", [wide(i) for i in range(300)])
        await until(pilot, lambda: log.lines[-1].endswith("end#299") and log.show_horizontal_scrollbar
                    and log.show_vertical_scrollbar, what="the lines and both scrollbars")
        await pilot.pause(0.2)
        unwrapped = (log.virtual_size, log.scrollable_content_region)
        assert log.virtual_size.width > log.scrollable_content_region.width
        passes = count_layouts(monkeypatch)
        status = screen.query_one("#log-status")
        for turn in range(4):
            await pilot.press("w")
            feed(run, "decode-0", [wide(300 + turn)])  # the flood goes on
            await until(pilot, lambda t=turn: log.lines[-1].endswith(f"end#{300 + t}"), what="the new line")
            await pilot.pause(0.1)
            width = log.scrollable_content_region.width
            assert log.scrollable_content_region == unwrapped[1]  # the view kept its size
            assert log.show_horizontal_scrollbar and log.show_vertical_scrollbar
            last = log.lines[-1]
            bottom = row_text(log.render_line(log.scrollable_content_region.height - 1))
            if turn % 2 == 0:  # wrapped: a line takes ceil(cells / width) rows; the last row ends the line
                assert log.wrap and "wrap on" in text_of(status)
                assert log.virtual_size.height == sum(max(1, -(-len(x) // width)) for x in log.lines)
                assert bottom == last[(len(last) - 1) // width * width:]
                assert log.max_scroll_x == 0  # the bar is an empty track
                assert log.horizontal_scrollbar.window_virtual_size == log.horizontal_scrollbar.window_size
            else:  # not wrapped: a row a line, cut at the view's width, scrolled sideways by the bar
                assert not log.wrap and "wrap off" in text_of(status)
                assert log.virtual_size.height == len(log.lines)
                assert bottom == last[:width]
                assert log.max_scroll_x == max(map(len, log.lines)) - width
            assert log.follow and log.scroll_y == log.max_scroll_y
        assert passes == [], f"{len(passes)} layout passes for 4 wrap toggles"
        # sideways scrolling still works once unwrapped
        last = log.lines[-1]
        width = log.scrollable_content_region.width
        log.scroll_to(x=len(last) - width, animate=False, immediate=True)
        await pilot.pause(0.1)
        assert row_text(log.render_line(log.scrollable_content_region.height - 1)) == last[len(last) - width:]


async def test_pausing_and_following_again_ask_for_no_layout_pass(monkeypatch):
    """Scrolling up pauses (the status line says PAUSED, +N new lines), End follows again: new words in
    the one-row status line, no layout pass."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", [wide(i) for i in range(300)])
        await until(pilot, lambda: log.lines[-1].endswith("end#299") and log.show_horizontal_scrollbar,
                    what="the lines")
        await pilot.pause(0.2)
        passes = count_layouts(monkeypatch)
        status = screen.query_one("#log-status")
        await pilot.press("pageup")
        await until(pilot, lambda: "PAUSED" in text_of(status), what="paused")
        feed(run, "decode-0", [wide(300 + i) for i in range(5)])
        await until(pilot, lambda: "+5 new lines" in text_of(status), what="the new lines counted")
        assert not log.follow and log.scroll_y < log.max_scroll_y
        await pilot.press("end")
        await until(pilot, lambda: "FOLLOW" in text_of(status), what="following again")
        assert log.follow and log.scroll_y == log.max_scroll_y
        await pilot.pause(0.1)
        assert passes == [], f"{len(passes)} layout passes for pause, new lines and follow"


async def test_short_lines_keep_no_horizontal_scrollbar_wrapped_or_not():
    """A log whose lines fit the view shows no horizontal scrollbar, wrapped or not (the kept row is only
    for logs with a line wider than the view); the first wide line brings it."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        log.clear()  # (the fake run's log from disk has wide lines)
        feed(run, "decode-0", [f"short #{i}" for i in range(100)])
        await until(pilot, lambda: log.lines and log.lines[-1] == "short #99", what="the lines")
        await pilot.pause(0.1)
        assert not log.show_horizontal_scrollbar
        await pilot.press("w")
        await pilot.pause(0.1)
        assert log.wrap and not log.show_horizontal_scrollbar
        feed(run, "decode-0", [wide(1)])
        await until(pilot, lambda: log.show_horizontal_scrollbar, what="the scrollbar's row for a wide line")
        assert log.max_scroll_x == 0  # wrapped: nothing to scroll sideways
        await pilot.press("w")
        await until(pilot, lambda: log.max_scroll_x > 0, what="sideways scrolling")
