"""When the run view redraws: the pulse after a state change, the one-second clock, and a large run's redraw
spread over frames so that keys go between its panels (issue 19: key -> screen p95 <= 50 ms at 128 nodes). What
each redraw draws is the run view's (screens/run.py: redraw, _redraw_steps, _draw_tail); this class decides when
it runs and in how many turns of the loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from textual.screen import ModalScreen

from .base import ViewScreen

if TYPE_CHECKING:
    from ..live import LiveRun
    from ..protocols import Console

TAIL_EVERY_S = 0.25
REDRAW_SHARE = 0.25  # at most this share of the event loop goes to redrawing after state changes
# A large run's change waits also for its frames' share (_change_due), but at most this long after the last redraw
# ended (the clock's redraw, every second, draws a change regardless).
FRAMES_HOLD_S = 1.0
UNDER_DIALOG_S = 1.0  # a pulse redraws the run view under a dialog at most this often
# The clock's redraw goes one panel per frame: a panel is drawn, the frame with its changed lines goes out,
# then the next panel. A key pressed meanwhile waits behind one panel's drawing and one panel's frame, not
# the whole redraw and the frame of all of it (at 128 nodes ~40 ms each). A frame not out after this long
# (the screen covered, a frozen loop): the next panel anyway.
CLOCK_STEP_S = 0.1
# A state change's redraw of a run this large is spread the same way: at 128 nodes a change while the run
# comes up redraws the process table, the barrier grid and the handshake matrix (~30-60 ms together on this
# machine), and a key pressed then waited behind all of them and their frame. Smaller runs draw a change in
# one turn (it costs a few ms, and tests and the pulse read the screen right after it).
SPREAD_FROM = 32  # processes
FRAME_ASK_TURNS = 8  # loop turns a panel's repaint may take to reach the screen (_frame_out)


class PacedRunView(ViewScreen):
    """The run view's redraw pacing. The view gives `redraw`, `_redraw_steps` (the redraw as steps: a panel's
    name once drawn, "" between turns) and `_draw_tail`; the steps keep `shown`, `drawn_version`, `redraw_gen`
    and, when they end, tell `_redrawn` what their panels cost."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: LiveRun | None = None
        self.drawn_version = -1
        self.tail_drawn_at = 0.0
        self.redraw_cost = 0.0  # seconds the last full redraw took
        self.next_redraw_at = 0.0  # redraws are spaced so they never take more than REDRAW_SHARE of the loop
        self.redrawn_at = 0.0  # when the last redraw ended
        self.frames_mark = 0.0  # frames_s (ViewScreen) when the last redraw began
        self._deferred = False
        self.under_dialog_at = 0.0  # when a pulse last drew it under a dialog
        self.redraw_gen = 0  # redraws started: a spread clock redraw sees another one ran between its turns
        self._clock_busy = False  # a spread redraw is under way (over loop turns: _spread)
        self.clock_turns: list[list[str]] = []  # tests: the panels each turn of the last spread clock redraw drew
        self.change_turns: list[list[str]] = []  # tests: the same, of the last spread redraw of a state change
        self.spread_changes = 0  # state changes drawn spread (a large run: SPREAD_FROM)
        self._change_pending = False  # a state change came while a spread redraw was under way

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def redraw(self, clock: bool = False) -> None:
        raise NotImplementedError

    def _redraw_steps(self, clock: bool) -> Iterator[str]:
        raise NotImplementedError

    def _draw_tail(self) -> None:
        raise NotImplementedError

    def _visible(self) -> bool:
        """On top, or under dialogs only."""
        for screen in reversed(self.app.screen_stack):
            if screen is self:
                return True
            if not isinstance(screen, ModalScreen):
                return False
        return False

    def run_updated(self) -> None:
        """The pulse: everything after a state change; after new log lines only the last-lines
        panel, at most four times a second (under a flood that is what keeps the console light). Under a
        dialog (the teardown's, dimmed below it) at most once every UNDER_DIALOG_S besides its clock, and
        whole by on_screen_resume when the dialog goes: at 128 nodes its redraws at every pulse while the
        cells closed took half the console's CPU in a teardown (bench/console_scale_keys.py teardown)."""
        if self.app.screen is not self:
            if self._held_until(self.under_dialog_at + UNDER_DIALOG_S):
                return
            self.under_dialog_at = time.monotonic()
        live = self.console.live
        if live is None or live is not self.shown or live.version != self.drawn_version:
            # the last redraw was costly: keys get the loop first, the change is drawn a bit later
            if live is not None and live is self.shown and self._held_until(self._change_due(live)):
                return
            if self._spreads(live):
                # a large run's change, one panel per frame; one at a time (no pulse follows a change that
                # arrives meanwhile: _spread draws it when the one under way ends)
                if self._clock_busy:
                    self._change_pending = True  # drawn when the one under way ends (_spread)
                else:
                    self._clock_busy = True  # (now: a second change before the worker starts waits for it)
                    self.run_worker(self._spread_claimed(clock=False), group="run-redraw", exit_on_error=True)
                return
            self.redraw()
            return
        now = time.monotonic()
        if now - self.tail_drawn_at >= TAIL_EVERY_S:
            self._draw_tail()

    def _redrawn(self, cost: float) -> None:
        """A redraw ended; its panels took `cost` seconds: the next one is spaced to REDRAW_SHARE."""
        self.redraw_cost = cost
        self.redrawn_at = time.monotonic()
        self.next_redraw_at = self.redrawn_at + cost * (1 - REDRAW_SHARE) / REDRAW_SHARE

    def _change_due(self, live: LiveRun) -> float:
        """When a state change may be drawn: once the last redraw's panels had their REDRAW_SHARE of the loop
        (next_redraw_at), and for a large run (_spreads) also the frames drawn since that redraw began, up to
        FRAMES_HOLD_S after it ended. At 128 nodes, while the run comes up, the frames (the widgets' lines, the
        layout) take more of the loop than the panels' own drawing, and under a loaded CPU each takes several
        times its CPU in wall time: a key pressed meanwhile waited behind them."""
        if not self._spreads(live):
            return self.next_redraw_at
        frames = self.frames_s - self.frames_mark
        held = self.next_redraw_at + frames * (1 - REDRAW_SHARE) / REDRAW_SHARE
        return max(self.next_redraw_at, min(held, self.redrawn_at + FRAMES_HOLD_S))

    def _spreads(self, live: LiveRun | None) -> bool:
        """A state change of this run is drawn spread over frames (the run shown, SPREAD_FROM processes or more)."""
        return live is not None and live is self.shown and len(live.state.procs) >= SPREAD_FROM

    def tick(self) -> None:
        """The clock, every second: only what depends on the time (times in stage, "up", the durations
        in the diagnosis) and the live metrics. Panels that draw only the state (the router, the top
        bar, the last lines) wait for its version to change; the others redraw a cell only if its text
        changed, without a layout pass unless its width did."""
        live = self.console.live
        if live is None or live is not self.shown or live.version != self.drawn_version:
            self.redraw()
        else:
            self.redraw(clock=True)

    async def _clock(self) -> None:
        """The clock's timer: as tick, but a clock redraw is drawn one panel per frame (a key waits behind one
        panel's drawing and its frame, not the whole redraw's: CLOCK_STEP_S). Another run or a view
        covering this one ends it; a redraw in between (a scrape, a state change) leaves the panels after it to
        be drawn as of then (_redraw_steps)."""
        live = self.console.live
        if live is None or live is not self.shown or live.version != self.drawn_version:
            if self._clock_busy:
                self._change_pending = True
            elif self._spreads(live):
                await self._spread(clock=False)
            else:
                self.redraw()
            return
        await self._spread(clock=True)

    async def _spread(self, clock: bool) -> None:
        """A redraw (the clock's, or a large run's state change), one turn per frame (_redraw_steps)."""
        if self._clock_busy:
            return  # (the last one is still going: a slow loop; the next clock or pulse draws what is left)
        self._clock_busy = True
        await self._spread_claimed(clock)

    async def _spread_claimed(self, clock: bool) -> None:
        try:
            if not clock:
                self.spread_changes += 1
            steps = self._redraw_steps(clock=clock)
            turns: list[list[str]] = []
            turn: list[str] = []
            for panel in steps:
                if panel == "":  # the end of a turn
                    turns.append(turn)
                    turn = []
                    await self._frame_out()
                    if self.console.live is not self.shown or not self.is_mounted or not self._visible():
                        steps.close()  # another run, or covered: what is shown next is drawn whole
                        break
                else:
                    turn.append(panel)
            if turn:
                turns.append(turn)
            if clock:
                self.clock_turns = turns
            else:
                self.change_turns = turns
        finally:
            self._clock_busy = False
        if self._change_pending and self.is_mounted:  # a change came while this one was drawn (no pulse follows)
            self._change_pending = False
            self.run_updated()

    async def _frame_out(self) -> None:
        """Until the screen's next frame went out (at most CLOCK_STEP_S), then one more loop turn (a key
        that came meanwhile goes first). A panel asks for its repaint in its own task (its idle posts the screen
        an update), and a wait for the refresh asked before that reaches the screen ends at once, before the
        panel's frame: so first a few loop turns until the screen has something to draw (none if the panel's
        change is scrolled away)."""
        for _ in range(FRAME_ASK_TURNS):
            if self._layout_required or self._repaint_required or self._dirty_widgets:
                break
            await asyncio.sleep(0)
        try:
            await asyncio.wait_for(self.wait_for_refresh(), CLOCK_STEP_S)
        except TimeoutError:
            pass
        await asyncio.sleep(0)

    def _held_until(self, at: float) -> bool:
        """Whether a pulse now must wait until `at`; if so, one timer then brings it again (_redraw_deferred)."""
        now = time.monotonic()
        if now >= at:
            return False
        if not self._deferred:
            self._deferred = True
            self.set_timer(at - now, self._redraw_deferred)
        return True

    def _redraw_deferred(self) -> None:
        self._deferred = False
        self.run_updated()
