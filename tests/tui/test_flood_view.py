"""The console under a log flood (issue 19), on a real run of the simulator with its real watcher
process: the log view has every line, in order, none twice, though the watcher now sends the lines
of a process only while a view shows it; the last-lines panel stays live for the process under the
cursor; and the processes no view shows reach the console as core's last lines only."""

from __future__ import annotations

import os
import re
import signal

import pytest
from atomdeck.tui.screens.logs import LogScreen
from atomdeck.tui.screens.run import RunScreen
from atomdeck.tui.widgets.log_lines import LogLines
from atomdeck.tui.widgets.process_table import ProcessTable
from atomdeck.tui.widgets.tail_panel import TailPanel

from .conftest import ready
from .runhelpers import BIG, live_app, sim_speed, until  # noqa: F401
from .test_run_flow import launch, with_env

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("sim_speed"), pytest.mark.timeout(150)]

NUMBER = re.compile(r"status #(\d+)\)")


def numbers(lines) -> list[int]:
    return [int(m.group(1)) for m in map(NUMBER.search, lines) if m]


async def test_a_flooding_process_log_view_has_every_line_and_the_others_stay_counted():
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        with_env(app, "prefill", {"ATOMSIM_FLOOD": "500"})
        with_env(app, "decode", {"ATOMSIM_FLOOD": "500"})
        await launch(pilot, app)
        live = app.live
        await until(pilot, lambda: live.state.procs["decode-0"].stage in ("http_up", "registered", "serving")
                    and numbers(live.state.procs["decode-0"].last_lines), what="decode-0 up and flooding")
        await until(pilot, lambda: app.screen.query(ProcessTable), what="the process table")
        procs = app.screen.query_one(ProcessTable)
        procs.move_cursor(row=procs.names.index("prefill-0"))
        # the last lines panel follows prefill-0, every line of it, live; decode-0 is shown nowhere yet
        await until(pilot, lambda: live.streams("prefill-0"), what="prefill-0's lines asked for")
        panel = app.screen.query_one(TailPanel)

        def newest() -> int:
            return max(numbers(panel.content.plain.splitlines()), default=0)

        start = newest()
        await until(pilot, lambda: newest() > start + 200, what="the last lines panel moving on")
        assert not live.streams("decode-0")
        seq = live.line_seq.get("decode-0", 0)
        await until(pilot, lambda: len(live.state.procs["decode-0"].last_lines) == 20
                    and numbers(live.state.procs["decode-0"].last_lines), what="decode-0's last lines in core's state")
        assert live.line_seq.get("decode-0", 0) == seq  # no line of it was sent, only its last ones
        # opened while the watcher is held (SIGSTOP, our own child): the view shows the file's end at once, and
        # the watcher's answer (from which offset it sends decode-0's lines) comes only after the file grew
        # on: the view must load the file again up to that offset, or lines are missing or shown twice
        pid = app.runs._watcher.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            await pilot.pause(0.3)
            app.runs.open_logs(["decode-0"])  # not the process under the cursor
            await until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.query(LogLines),
                        what="the log view")
            assert not live.streams("decode-0") and len(app.screen.logview.lines) > 0  # the file's end, at once
            await pilot.pause(0.5)
        finally:
            os.kill(pid, signal.SIGCONT)
        screen = app.screen
        log = screen.logview
        await until(pilot, lambda: live.streams("decode-0") and len(log.lines) >= 3_000, what="3,000 lines on screen")
        await pilot.pause(0.3)
        got = numbers(log.lines)
        assert len(got) >= 3_000
        assert got == list(range(got[0], got[0] + len(got)))  # every line, in order, none twice
        path = live.log_path("decode-0")
        on_disk = numbers(path.read_text().splitlines())
        assert got[0] >= 1 and got[-1] <= on_disk[-1]
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)
        await until(pilot, lambda: not live.streams("decode-0") and live.streams("prefill-0"),
                    what="decode-0 no longer asked for")


async def test_plain_rows_are_drawn_as_the_general_path_draws_them():
    """Under a flood most rows take a shortcut (one strip per row, not a cropped whole-line strip): it must
    draw the same cells in the same styles, scrolled sideways and wrapped, next to highlighted and matched rows."""
    from .conftest import make_app
    from .test_run_logs import feed, open_log

    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", [f"plain line #{i} " + "x" * (i * 7 % 230) for i in range(120)]
             + ["an Error line", "ünïcode line", "tab\tline"])
        await pilot.pause(0.3)
        width = log.scrollable_content_region.width

        def general(y: int):
            style = log.rich_style
            log._cache.clear()  # strips of the general path made now, in the style of now
            if log.wrap:
                rows = log._wrap_rows()
                index = max(i for i, r in enumerate(rows[:-1]) if r <= log.scroll_offset.y + y)
                start = (log.scroll_offset.y + y - rows[index]) * width
            else:
                index, start = log.scroll_offset.y + y, log.scroll_offset.x
            return log._line_strip(index, style).crop_extend(start, start + width, style)

        def cells(strip):
            return [(seg.text, seg.style) for seg in strip.simplify()]

        for wrap, scroll_x in ((False, 0), (False, 37), (True, 0)):
            log.set_wrap(wrap)
            log.scroll_to(x=scroll_x, animate=False, immediate=True, force=True)
            await pilot.pause(0.1)
            for y in range(log.scrollable_content_region.height):
                assert cells(log.render_line(y)) == cells(general(y)), (wrap, scroll_x, y)
        log.set_search("line #11")
        for y in range(log.scrollable_content_region.height):
            assert cells(log.render_line(y)) == cells(general(y))
