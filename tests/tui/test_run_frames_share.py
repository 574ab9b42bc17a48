"""A large run's state changes are spaced by what their frames cost, not only by the panels' own drawing (issue 19:
key -> screen p95 <= 50 ms while 128 nodes come up). The view sums its frames' wall time; a change of a run of
SPREAD_FROM processes or more waits until the frames drawn since the last redraw began had REDRAW_SHARE of the
loop, at most FRAMES_HOLD_S after that redraw ended. Counted, not timed: which redraws start, and when they are
due by the view's own sums (set by the test)."""

from __future__ import annotations

import pytest
from atomdeck.core.run.events import Event
from atomdeck.tui.screens.run import RunScreen
from atomdeck.tui.screens.run_pacing import FRAMES_HOLD_S, REDRAW_SHARE

from .conftest import make_app
from .runhelpers import attached_scale, until
from .test_run_scale_idle import Clock


async def test_the_view_sums_its_frames():
    app = make_app(clock=Clock())
    async with app.run_test(size=(160, 50)) as pilot:
        _, screen = await attached_scale(pilot, redraw=True)
        before = screen.frames_s
        screen.query_one("#proc-table").refresh()
        await pilot.pause()
        await pilot.pause()
        assert screen.frames_s > before > 0


async def test_a_large_runs_change_waits_for_its_frames_share():
    """After a redraw whose frames took 0.2 s, a change is held until those frames had their share (on the tree
    before: only the panels' drawing counted, and the change was drawn at once); the hold then ends by itself
    and draws it; frames far beyond the share hold a change at most FRAMES_HOLD_S after the redraw ended."""
    app = make_app(clock=Clock())
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        await pilot.pause()
        await until(pilot, lambda: not screen._clock_busy and not screen._deferred, timeout=5)
        live = app.live
        screen.redraw()
        screen.frames_s += 0.2  # the frames since that redraw began
        due = screen._change_due(live)
        assert due == pytest.approx(screen.next_redraw_at + 0.2 * (1 - REDRAW_SHARE) / REDRAW_SHARE)
        started = screen.spread_changes
        worker = next(n for n in run.state.procs if n != "router")
        run.emit(Event("proc.health", worker, "unresponsive", "GET /health"))
        assert live.version != screen.drawn_version
        screen.run_updated()
        assert screen._deferred and screen.spread_changes == started  # held, a timer brings it back
        await until(pilot, lambda: screen.drawn_version == live.version and not screen._clock_busy, timeout=5,
                    what="the held change drawn")
        assert screen.spread_changes > started
        screen.redraw()
        screen.frames_s += 100.0
        assert screen._change_due(live) == pytest.approx(screen.redrawn_at + FRAMES_HOLD_S)


async def test_a_small_runs_change_is_spaced_by_its_panels_only():
    """Below SPREAD_FROM processes a change is drawn in one turn, the frames' time aside (tests and the pulse read
    the screen right after it)."""
    from .fakescale import fake_scale_run

    app = make_app(clock=Clock())
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        app.runs.attach(fake_scale_run(8), watch=False)
        app.switch_mode("run")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RunScreen) and not screen._spreads(app.live)
        screen.redraw()
        screen.frames_s += 100.0
        assert screen._change_due(app.live) == screen.next_redraw_at
