"""The run view redraws a panel only when the part of the state it shows changed (issue 19: at 128
nodes every event redrew every panel, and keys waited behind the redraws)."""

from __future__ import annotations

import time

from atomdeck.core.run.events import Event

from .conftest import make_app
from .runhelpers import attached_scale, pulse


def _metrics(run, name: str, k: float) -> None:
    run.emit(Event("metrics", name, "atom", data={"t": k, "source": "atom", "gen_tok_s": k, "prompt_tok_s": k}))


async def test_a_pair_event_redraws_the_handshake_panel_only():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot)
        _metrics(run, "decode-3", 1.0)
        screen.redraw(clock=True)  # the clock: the Serving panel appears
        before = dict(screen.redraws)
        run.emit(Event("pair", "prefill-1>decode-2", "failed", "decode-2 cannot reach prefill-1"))
        await pulse(screen, pilot)  # the pulse after a state change
        after = dict(screen.redraws)
        assert after["pairs"] == before["pairs"] + 1
        for panel in ("procs", "cells", "serving", "nodes"):
            assert after.get(panel) == before.get(panel), panel
        assert "prefill-1" in str(screen.query_one("#pairs").render())


async def test_a_metrics_scrape_redraws_the_serving_panel_not_the_process_table():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot)
        before = dict(screen.redraws)
        version = app.live.version
        for i, name in enumerate(("prefill-0", "decode-0", "decode-9")):
            _metrics(run, name, 10.0 + i)
        assert app.live.version == version  # not a state change: the pulse leaves the screen alone
        screen.next_redraw_at = 0.0
        screen.run_updated()
        assert screen.redraws == before
        screen.redraw(clock=True)  # the clock shows the scrape
        assert screen.redraws["serving"] == before.get("serving", 0) + 1
        assert screen.query_one("#serving-box").display
        # a state change after it (a stage) redraws the process table
        before = dict(screen.redraws)
        run.emit(Event("proc.stage", "decode-17", "http_up", "GET /health 200"))
        await pulse(screen, pilot)
        assert screen.redraws["procs"] == before["procs"] + 1
        assert screen.query_one("#proc-table").get_cell("decode-17", "stage").plain == "http up"


async def test_after_a_costly_redraw_the_next_waits_and_is_not_lost():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot)
        before = dict(screen.redraws)
        screen.next_redraw_at = time.monotonic() + 0.3  # as after a redraw that took 0.1 s
        run.emit(Event("pair", "prefill-2>decode-2", "failed", "decode-2 cannot reach prefill-2"))
        screen.run_updated()
        assert screen.redraws == before  # deferred: keys get the loop first
        while screen.redraws.get("pairs") == before.get("pairs"):  # then drawn without another event
            await pilot.pause(0.05)
        assert screen.drawn_version == app.live.version


async def test_a_thousand_lines_between_two_pulses_are_one_log_view_update():
    from .test_run_logs import feed, open_log

    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        run, screen, log = await open_log(pilot)
        screen.run_updated()  # whatever the opening left: drawn
        calls: list[int] = []
        append = log.append

        def counting(lines):
            lines = list(lines)
            calls.append(len(lines))
            return append(lines)

        log.append = counting  # type: ignore[method-assign]
        before = len(log.lines)
        feed(run, "decode-0", [f"flood line {i}" for i in range(1000)])
        assert calls == []  # lines only land in LiveRun's buffer: no per-line work on the screen
        screen.run_updated()  # the pulse
        assert calls == [1000]
        assert len(log.lines) == before + 1000 and log.lines[-1].endswith("flood line 999")
