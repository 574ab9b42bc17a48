"""The log view's frames under a flood (issue 19): what a frame draws, how often lines are appended while
every row is replaced, and that the console keeps what it holds out of the cyclic GC's full passes.
Counts, not times: a row of the log drawn is a call of its row makers (`_plain_row` for the common row,
`_line_strip` for a coloured one), whichever path draws the frame."""

from __future__ import annotations

import gc
import re

from atomdeck.tui.widgets.log_lines import LogLines
from textual.widget import Widget

from .conftest import make_app
from .runhelpers import BIG, until
from .test_run_logs import feed, open_log

NUMBER = re.compile(r"#(\d+)\b")


def count_rows(log: LogLines) -> dict:
    """Count the rows `log` draws, per frame (render_lines call): {"rows": n, "frames": [rows per frame]}."""
    seen = {"rows": 0, "frames": []}
    plain, coloured, frame = log._plain_row, log._line_strip, log.render_lines

    def plain_row(*a):
        seen["rows"] += 1
        return plain(*a)

    def line_strip(*a):
        seen["rows"] += 1
        return coloured(*a)

    def render_lines(crop):
        before = seen["rows"]
        strips = frame(crop)
        seen["frames"].append((seen["rows"] - before, crop.height, log.lines[-1] if log.lines else ""))
        return strips

    log._plain_row, log._line_strip, log.render_lines = plain_row, line_strip, render_lines
    return seen


def numbers(lines) -> list[int]:
    return [int(m.group(1)) for m in map(NUMBER.search, lines) if m]


async def test_new_lines_at_the_bottom_draw_only_their_rows():
    """Following, a few new lines shift the rows on screen up: the frame draws the new lines' rows, and
    takes the rows that only moved from the last frame (it drew every row of the view each frame)."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", [f"first #{i} " + "x" * (i * 37 % 300) for i in range(300)])
        await until(pilot, lambda: log.lines[-1].startswith("first #299"), what="the first lines")
        seen = count_rows(log)
        for wrap in (False, True):
            log.set_wrap(wrap)
            await pilot.pause(0.2)
            height = log.scrollable_content_region.height
            width = log.scrollable_content_region.width
            for round_ in range(3):
                new = [f"more {wrap} {round_} #{i} " + "y" * (i * 53 % 250) for i in range(3)]
                seen["frames"].clear()
                feed(run, "decode-0", new)
                await until(pilot, lambda new=new: any(last == new[-1] for _, _, last in seen["frames"]),
                            what="a frame with the new lines")
                rows = sum(max(1, -(-len(x) // width)) for x in new) if wrap else len(new)
                drawn = sum(n for n, _, last in seen["frames"] if last == new[-1])
                assert log.follow and drawn == rows, (wrap, round_, seen["frames"])
                assert rows < height


async def test_a_frame_is_the_frame_textual_would_draw():
    """The log's frames are made without Textual's StylesCache: the same cells in the same styles, for
    plain, coloured, matched and current rows, scrolled sideways, wrapped, focused or not, whole or cropped."""
    from textual.geometry import Region

    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", [f"plain line #{i} " + "x" * (i * 7 % 230) for i in range(120)]
             + ["an Error line", "ünïcode line", "tab\tline", "Traceback (most recent call last):"])
        await pilot.pause(0.3)

        def cells(strips):
            return [[(seg.text, seg.style) for seg in strip.simplify()] for strip in strips]

        def compare(what):
            size = log.region.size
            for crop in (size.region, Region(0, 3, size.width, 7), Region(5, 0, size.width - 9, size.height)):
                mine = log.render_lines(crop)
                log._styles_cache.clear()
                theirs = Widget.render_lines(log, crop)  # Textual's path: StylesCache over render_line
                assert cells(mine) == cells(theirs), (what, crop)

        for wrap, scroll_x in ((False, 0), (False, 37), (True, 0)):
            log.set_wrap(wrap)
            log.scroll_to(x=scroll_x, animate=False, immediate=True, force=True)
            await pilot.pause(0.1)
            compare((wrap, scroll_x))
        log.set_wrap(False)
        log.set_search("line #11")
        log.find()
        await pilot.pause(0.1)
        assert log.current is not None
        compare("search")
        log.blur()
        await pilot.pause(0.1)
        compare("blurred")
        assert log._frame is not None  # (the log's own path drew these)


async def test_a_flood_is_appended_in_batches_that_wait_without_losing_a_line():
    """While each batch replaces every row on screen, the next waits `flood_s` (the lines wait in the
    LiveRun's buffers); a key press holds the next batch for `key_first_s`; then one batch has them all."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        height = log.scrollable_content_region.height
        batches: list[int] = []  # lines in each batch appended
        append = log.append
        log.append = lambda lines: batches.append(len(lines)) or append(lines)
        screen.flood_s = screen.key_first_s = 3600.0  # (so that nothing here depends on time)
        feed(run, "decode-0", [f"flood #{i}" for i in range(1, 2 * height)])
        await until(pilot, lambda: log.lines[-1] == f"flood #{2 * height - 1}", what="the first batch")
        done = len(batches)
        feed(run, "decode-0", [f"flood #{i}" for i in range(2 * height, 4 * height)])
        screen.run_updated()  # a pulse right behind a batch that replaced the view: it waits
        assert len(batches) == done and log.lines[-1] == f"flood #{2 * height - 1}"
        await pilot.press("w")  # a key: the next batch waits behind its frame
        assert log.wrap
        screen.flood_s = 0.0
        screen.run_updated()
        assert len(batches) == done
        screen.key_first_s = 0.0
        screen.run_updated()
        assert len(batches) == done + 1
        got = numbers(log.lines)
        assert got[-1] == 4 * height - 1 and got == list(range(got[0], got[-1] + 1))  # in order, none twice
        # after a batch of fewer lines than rows the next is appended at once, however long flood_s is
        feed(run, "decode-0", ["trickle #1"])
        screen.run_updated()
        assert len(batches) == done + 2
        screen.flood_s = 3600.0
        feed(run, "decode-0", ["trickle #2"])
        screen.run_updated()
        assert len(batches) == done + 3 and log.lines[-1] == "trickle #2"


async def test_opening_a_log_keeps_what_the_console_holds_out_of_full_gc_passes():
    """The objects the console holds once the log view is open are frozen (gc.freeze: the cyclic GC's full
    passes under a flood no longer walk them); the log view itself among them."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        gc.unfreeze()
        assert gc.get_freeze_count() == 0
        run, screen, log = await open_log(pilot)
        # frozen objects are in none of the collector's generations (the attach froze what existed then)
        await until(pilot, lambda: not any(o is log for o in gc.get_objects()), what="the log view frozen")
        assert gc.is_tracked(log) and gc.get_freeze_count() > 0
    gc.unfreeze()


async def test_wrap_rows_grown_in_place_are_the_rows_counted_afresh():
    """While wrapped, each batch extends the rows of the lines (and drops those of lines that fell off the
    front) instead of counting 5,000 lines' rows again: the same rows as a fresh count, every batch."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        log.max_lines = 300
        log.set_wrap(True)
        for k in range(6):
            log.append([f"batch {k} #{i} " + "z" * ((i * 61 + k * 17) % 420) for i in range(120)])
            grown = list(log._wrap_rows())
            log._rows = None
            assert grown == log._wrap_rows(), k
            assert len(grown) == len(log.lines) + 1
        assert log.base > 0
        await pilot.pause()
