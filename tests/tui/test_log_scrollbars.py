"""The log view's scrollbars under a flood (issue 19): a frame of a following log draws its scrollbars
again only when what they show changed (log_scrollbar.KeptScrollBar), and what they show is what
Textual's ScrollBar draws. Counts, not times: a scrollbar drawn is a call of Textual's
ScrollBar.render_lines (Widget's, through StylesCache)."""

from __future__ import annotations

from atomdeck.tui.widgets.log_lines import LogLines
from textual.scrollbar import ScrollBar
from textual.widget import Widget

from .conftest import make_app
from .runhelpers import BIG, until
from .test_run_logs import feed, open_log

STATUS = "[atom 12:00:00] Engine Core: running=0 reqs, waiting=0 reqs, KV cache usage=0.0%, prefix cache hit " \
         "rate=0.0%, prompt throughput=0.0 tokens/s, generation throughput=0.0 tokens/s (status #{})"


def count_frames(log: LogLines) -> list[int]:
    """Count the log's frames (render_lines calls) from now on: the list grows by one a frame."""
    frames: list[int] = []
    frame = log.render_lines

    def render_lines(crop):
        frames.append(crop.height)
        return frame(crop)

    log.render_lines = render_lines
    return frames


def cells(strips) -> list[list[tuple[str, object]]]:
    return [[(seg.text, seg.style) for seg in strip] for strip in strips]


async def full_and_following(pilot):
    """The log view of a fake run, holding its last 5,000 lines of a flood and following (appended at
    every pulse: the screen's flood pacing is off, so each batch is a frame of its own)."""
    run, screen, log = await open_log(pilot)
    screen.flood_s = screen.key_first_s = 0
    feed(run, "decode-0", [STATUS.format(i) for i in range(log.max_lines + 100)])
    last = STATUS.format(log.max_lines + 99)
    await until(pilot, lambda: log.lines and log.lines[-1] == last, what="a full log")
    await pilot.pause(0.1)
    assert len(log.lines) == log.max_lines and log.follow
    assert log.show_vertical_scrollbar and log.show_horizontal_scrollbar  # 190-cell lines: wider than 160
    return run, screen, log


def bar_draws(monkeypatch) -> list[str]:
    """The names of the scrollbars Textual draws from now on (its render_lines, counted)."""
    drawn: list[str] = []
    textual_path = ScrollBar.render_lines

    def counted(self, crop):
        drawn.append(self.name)
        return textual_path(self, crop)

    monkeypatch.setattr(ScrollBar, "render_lines", counted)
    return drawn


async def test_a_following_flood_draws_its_scrollbars_once(monkeypatch):
    """Following a full log, every batch changes the rows but not the scrollbars (5,000 lines, at the end):
    their rows are kept. Textual drew both bars again in every frame of the log (~2-8 ms a frame)."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await full_and_following(pilot)
        drawn = bar_draws(monkeypatch)
        frames = count_frames(log)
        n = log.max_lines + 100
        for batch in range(8):
            feed(run, "decode-0", [STATUS.format(n + batch * 50 + i) for i in range(50)])
            last = STATUS.format(n + batch * 50 + 49)
            await until(pilot, lambda last=last: log.lines[-1] == last, what="the batch")
            await until(pilot, lambda batch=batch: len(frames) > batch, what="the batch's frame")
        assert len(frames) >= 8  # every batch was drawn
        assert drawn == []  # and no scrollbar was drawn again for it
        assert log.follow and log.scroll_y == log.max_scroll_y


async def test_a_wrap_toggle_draws_the_scrollbars_only_the_first_time(monkeypatch):
    """Wrap on, off, on, off: the bars' two looks are drawn once each, then kept."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await full_and_following(pilot)
        drawn = bar_draws(monkeypatch)
        frames = count_frames(log)
        rows = log.virtual_size.height
        per_toggle = []
        for _ in range(4):
            before, seen = len(drawn), len(frames)
            await pilot.press("w")
            await until(pilot, lambda seen=seen: len(frames) > seen, what="the toggle's frame")
            await pilot.pause(0.05)
            per_toggle.append(len(drawn) - before)
        assert not log.wrap and log.virtual_size.height == rows
        assert per_toggle[2:] == [0, 0], per_toggle  # the third and fourth toggle: both looks were kept
        assert sum(per_toggle[:2]) >= 1  # (the first ones did draw: the count sees Textual's path)


async def test_kept_scrollbar_rows_are_textuals():
    """Whatever the log does (following, paused up the log, wrapped, sideways, the pointer over a bar, the
    theme changed), a bar's rows are the cells Textual's ScrollBar draws for it right then."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await full_and_following(pilot)

        def same() -> int:
            checked = 0
            for bar in (log.vertical_scrollbar, log.horizontal_scrollbar):
                if not bar.display or not bar.region:
                    continue
                crop = bar.region.reset_offset
                kept = bar.render_lines(crop)
                assert cells(kept) == cells(Widget.render_lines(bar, crop)), bar.name
                checked += 1
            return checked

        async def step() -> None:
            await pilot.pause(0.05)
            log.render_lines(log.region.reset_offset)  # (as a frame asks, in case none came)
            assert same() == 2

        await step()
        feed(run, "decode-0", [STATUS.format(10_000 + i) for i in range(30)])
        await until(pilot, lambda: log.lines[-1] == STATUS.format(10_029), what="more lines")
        await step()
        await pilot.press("up", "up", "pageup")  # paused further up: the thumb moves
        assert not log.follow
        await step()
        await pilot.press("right", "right", "right")  # sideways
        assert log.scroll_x > 0
        await step()
        await pilot.press("w")
        await step()
        log.vertical_scrollbar.mouse_over = True  # the hover colours
        await step()
        log.vertical_scrollbar.mouse_over = False
        await step()
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await step()
        await pilot.press("w", "end")
        await step()
        assert log.follow


async def test_cell_lengths_of_ascii_and_wide_lines():
    """The log measures a plain line by its length (no rich cell_len call) and any other by cell_len: the
    widths it keeps (the horizontal scroll range, the wrap rows) are the cells drawn."""
    from rich.cells import cell_len

    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        lines = ["plain", "宽字符 wide " * 30, "emoji 🚀", "bell\x07", "tab\there", "\x1b[31mred\x1b[0m", "x" * 300]
        feed(run, "decode-0", lines)
        await until(pilot, lambda: log.lines[-1] == "x" * 300, what="the lines")
        assert list(log.cells) == [cell_len(x) for x in log.lines]
        assert log.virtual_size.width == max(log.cells) == cell_len("宽字符 wide " * 30)
