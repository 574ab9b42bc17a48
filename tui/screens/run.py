# Long file: the run view draws every panel from one place (which part of the state each panel shows, and
# a large run's redraw spread over frames so keys go between its panels); the panels live in widgets/.
"""Run: the attached deployment as core sees it. Processes with their stage and time in stage, the
barrier grid with the blocking cells marked, the one-line diagnosis (always on screen), the router
and its checks, the Mooncake handshake per pair, node health, and the last lines of the process
under the cursor. Enter opens a log; D tears the run down (asks first)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from textual.app import ComposeResult
from textual.containers import Container, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Static

from ...core.run.diagnose import diagnose
from .. import bindings
from ..widgets.barrier_grid import LEGEND, BarrierGrid
from ..widgets.context_bar import ContextBar
from ..widgets.footer import QuietFooter
from ..widgets.pair_matrix import LEGEND as PAIR_LEGEND
from ..widgets.process_table import ProcessTable
from ..widgets.quiet import set_if_changed
from ..widgets.run_panels import (
    MATRIX_FROM,
    HandshakePanel,
    NodesPanel,
    RouterPanel,
    RunHeader,
    RunPanel,
    TailPanel,
    WhyPanel,
)
from ..widgets.serving_panel import ServingPanel
from ..widgets.vtable import VirtualTable
from .base import ViewScreen

if TYPE_CHECKING:
    from ..app import ConsoleApp
    from ..live import LiveRun

WIDE = 140  # at this width and more the router/handshake/nodes panels sit beside the tables
TAIL_LINES = 20
TAIL_EVERY_S = 0.25
REDRAW_SHARE = 0.25  # at most this share of the event loop goes to redrawing after state changes
UNDER_DIALOG_S = 1.0  # a pulse redraws the run view under a dialog at most this often
ALL_PARTS = frozenset(("procs", "cells", "pairs", "checks", "conns", "metrics", "run"))
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
# While the run comes up its panels keep their highest line count (RunPanel.keep_rows): the screen is not
# re-laid out each time the diagnosis or the handshake panel gains or loses a line. Released at serving.
COMING_UP = ("launching", "starting")
FRAME_ASK_TURNS = 8  # loop turns a panel's repaint may take to reach the screen (_frame_out)


def run_context(app: ConsoleApp) -> str:
    """The top bar's right side on the run views: which run, what it runs, where."""
    live = app.live
    if live is None:
        return "[b]launching[/b]" if app.launching else "[$text-muted]no run attached[/]"
    run = live.run
    return (f"run [b]{escape(run.id)}[/b] · {escape(run.recipe.name)} ({escape(run.plan.shape)}) on "
            f"[b]{escape(run.cluster.name)}[/b] · {escape(run.cluster.launcher)}")


class RunScreen(ViewScreen):
    VIEW = "run"
    BINDINGS = bindings.RUN

    def __init__(self) -> None:
        super().__init__()
        self.shown: LiveRun | None = None
        self.drawn_version = -1
        self.metrics_drawn = -1  # the LiveRun's metrics_version the Serving panel shows
        self.tail_drawn_at = 0.0
        self.tail_name: str | None = None
        self.culprit: str | None = None
        self.drawn_changes: dict[str, int] = {}  # LiveRun.changes as last drawn
        self.redraws: dict[str, int] = {}  # panel -> times redrawn (tests: which events redraw what)
        self.redraw_cost = 0.0  # seconds the last full redraw took
        self.next_redraw_at = 0.0  # redraws are spaced so they never take more than REDRAW_SHARE of the loop
        self._deferred = False
        self.under_dialog_at = 0.0  # when a pulse last drew it under a dialog
        self._pairs_timer = False  # a timer will draw the pairs' change the panel's rate held back
        self.redraw_gen = 0  # redraws started: a spread clock redraw sees another one ran between its turns
        self._clock_busy = False  # a spread redraw is under way (over loop turns: _spread)
        self.clock_turns: list[list[str]] = []  # tests: the panels each turn of the last spread clock redraw drew
        self.change_turns: list[list[str]] = []  # tests: the same, of the last spread redraw of a state change
        self.spread_changes = 0  # state changes drawn spread (a large run: SPREAD_FROM)
        self._change_pending = False  # a state change came while a spread redraw was under way

    @property
    def console(self) -> ConsoleApp:
        return cast("ConsoleApp", self.app)

    def compose(self) -> ComposeResult:
        yield ContextBar()
        yield RunHeader(id="run-head")
        with Container(id="run-main"):
            with Vertical(id="run-left"):
                with Vertical(id="procs-box", classes="run-box") as box:
                    box.border_title = "Processes"
                    box.border_subtitle = "enter: log"
                    yield ProcessTable(id="proc-table")
                with Vertical(id="barrier-box", classes="run-box") as box:
                    box.border_title = "Barrier · node × port"
                    box.border_subtitle = LEGEND
                    yield BarrierGrid(id="barrier-grid")
                with Vertical(id="tail-box", classes="run-box") as box:
                    box.border_title = "Last lines"
                    yield TailPanel(id="tail")
            with Vertical(id="run-right"):
                with Vertical(id="router-box", classes="run-box") as box:
                    box.border_title = "Router · AToMesh"
                    yield RouterPanel(id="router")
                with Vertical(id="serving-box", classes="run-box") as box:
                    box.border_title = "Serving · live metrics"
                    yield ServingPanel(id="serving")
                with Vertical(id="pairs-box", classes="run-box") as box:
                    box.border_title = "KV handshake · Mooncake"
                    yield HandshakePanel(id="pairs")
                with Vertical(id="nodes-box", classes="run-box") as box:
                    box.border_title = "Nodes"
                    yield NodesPanel(id="nodes")
                with VerticalScroll(id="why-box", classes="run-box") as box:
                    box.border_title = "Why · diagnosis in detail"
                    yield WhyPanel(id="why")
        yield Static("", id="run-empty")
        yield QuietFooter()

    def on_mount(self) -> None:
        table = self.query_one(ProcessTable)
        table.on_cursor = self._cursor_moved  # the last lines follow in the cursor's own frame
        table.focus()
        self.set_interval(1.0, self._clock)  # time in stage keeps counting without events
        self.redraw()

    def on_screen_resume(self) -> None:
        self.redraw()

    def _visible(self) -> bool:
        """On top, or under dialogs only."""
        for screen in reversed(self.app.screen_stack):
            if screen is self:
                return True
            if not isinstance(screen, ModalScreen):
                return False
        return False

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "-wide")

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
            if live is not None and live is self.shown and self._held_until(self.next_redraw_at):
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

    def _dirty(self, live: LiveRun, clock: bool) -> frozenset[str]:
        """The parts of the state changed since the last redraw (all of them for a new run, or a
        change not told by an event such as the watcher ending)."""
        if live is not self.shown:
            return ALL_PARTS
        dirty = frozenset(k for k, n in live.changes.items() if self.drawn_changes.get(k) != n)
        if not clock and live.version != self.drawn_version and not dirty - {"metrics"}:
            return ALL_PARTS
        return dirty

    def _counted(self, panel: str) -> None:
        self.redraws[panel] = self.redraws.get(panel, 0) + 1

    # -- drawing ---------------------------------------------------------------------------------
    def redraw(self, clock: bool = False) -> None:
        """Everything from the run's state; `clock`: the state did not change since the last redraw,
        only the time did (see tick). All panels in this turn (the clock's timer spreads them: _clock)."""
        for _ in self._redraw_steps(clock):
            pass

    def _redraw_steps(self, clock: bool) -> Iterator[str]:
        """The redraw as steps: yields each panel's name once it is drawn and "" between turns (where the
        clock's timer lets the loop run keys and frames). Panels are drawn from core's state (live) with the
        time and diagnosis of the first turn, or of the turn after another redraw ran in between."""
        if not self.is_mounted or not self._visible():
            return  # (a log view covers it: on_screen_resume draws it again)
        self.redraw_gen += 1
        gen = self.redraw_gen
        app = self.console
        live = app.live
        if live is not self.shown:
            clock = False  # a run not drawn yet is drawn whole (a clock redraw first left its router panel empty)
        if not clock:
            self.query_one(ContextBar).show_run(app.views, self.VIEW, run_context(app), app.readonly)
            self.set_class(live is None, "-empty")
        if live is None:
            self.query_one("#run-empty", Static).update(self._empty_text())
            self.refresh_bindings()
            return
        started = time.perf_counter()
        cost = 0.0
        dirty = self._dirty(live, clock)
        self.drawn_changes = dict(live.changes)
        if live is not self.shown:
            self.shown, self.culprit, self.tail_name = live, None, None
            for panel in self._panels():  # (the lines another run's panels kept)
                panel.keep_rows(False)
            self.query_one(ServingPanel).reset()
            self.query_one(HandshakePanel).matrix_key = None
            table = self.query_one(ProcessTable)
            table.touched = False
            if self.focused is None or not self.focused.display:
                self.call_after_refresh(table.focus)  # it was hidden while no run was attached
            self.refresh_bindings()
        run, state = live.run, live.state
        self.drawn_version = live.version
        now = app.now()
        if state.status in ("failed", "stopped", "dirty") and state.since:
            now = min(now, state.since)  # a run that ended: its clocks stop where it ended
        d = diagnose(state, now)
        coming_up = state.status in COMING_UP
        for panel in self._panels():
            panel.keep_rows(coming_up)
        note = "tearing down…" if live.teardown_running else ""
        self.query_one(RunHeader).show(state, d, now, watching=live.watching, note=note)
        self.query_one(WhyPanel).show(state, d)
        # the light panels with the header, in the first turn (what changes each second there is a few lines);
        # the big tables and the Serving rows each in a turn of their own
        router = self.query_one(RouterPanel)
        if (not clock and dirty - {"metrics", "cells", "pairs"}) or router.outdated_colours():
            router.show(state, now, node=run.plan.router.node, url=run.plan.router.url,
                        model=run.recipe.model.client_name)
            yield "router"
        if clock or dirty & {"pairs", "procs", "run"}:
            self._counted("pairs")
            # (pairs change only by pair events: their count names the matrix's input)
            self._show_pairs(live, now)
            set_if_changed(self.query_one("#pairs-box"), "border_subtitle",
                           PAIR_LEGEND if len(state.pairs) >= MATRIX_FROM else "")
            yield "pairs"
        if clock or dirty & {"conns", "procs", "run"}:
            self._counted("nodes")
            self.query_one(NodesPanel).show(state, [n.name for n in run.plan.nodes], now, run.cluster.launcher)
            yield "nodes"
        yield "head"

        def turn() -> Iterator[str]:  # a turn ends (the time it took is the redraw's cost)
            nonlocal cost, started, now, d
            cost += time.perf_counter() - started
            yield ""
            started = time.perf_counter()
            if gen != self.redraw_gen:  # another redraw drew meanwhile (a scrape, a state change): the next
                now = app.now()  # panels are drawn as of now, with the diagnosis it drew
                if state.status in ("failed", "stopped", "dirty") and state.since:
                    now = min(now, state.since)
                d = diagnose(state, now)

        table = self.query_one(ProcessTable)
        if clock or dirty & {"procs", "run"}:
            yield from turn()
            self._counted("procs")
            table.show(state, now, {n: live.pid(n) for n in state.procs})
            yield "procs"
        if not table.touched:  # the process to look at, until the operator picks one
            if d.culprit:
                table.select(d.culprit)
            elif self.culprit:  # nothing to point at any more (serving): back to the top
                table.move_cursor(row=0, animate=False)
        self.culprit = d.culprit
        grid = self.query_one(BarrierGrid)
        if clock or dirty & {"cells", "procs", "run"}:
            yield from turn()
            self._counted("cells")
            grid.show(state, d.blocking, now, version=live.changes.get("cells", 0))
            set_if_changed(self.query_one("#barrier-box"), "border_title",
                           "Barrier · node × port" + (f" · {grid.summary}" if grid.summary else ""))
            yield "cells"
        if "metrics" in dirty or live.metrics_version != self.metrics_drawn or (not clock and dirty & {"procs", "run"}):
            yield from turn()
            if gen == self.redraw_gen or live.metrics_version != self.metrics_drawn:  # (else drawn meanwhile)
                self._counted("serving")
                self.metrics_drawn = live.metrics_version
                self.query_one("#serving-box").display = bool(state.metrics)
                if state.metrics:
                    self.query_one(ServingPanel).show(state)
                yield "serving"
        if not clock:
            self._draw_tail()
        cost += time.perf_counter() - started
        self.redraw_cost = cost
        self.next_redraw_at = time.monotonic() + cost * (1 - REDRAW_SHARE) / REDRAW_SHARE

    def _panels(self) -> list[RunPanel]:
        panels = self.__dict__.get("_run_panels")
        if panels is None:
            panels = self._run_panels = list(self.query(RunPanel))
        return panels

    def _show_pairs(self, live: LiveRun, now: float) -> None:
        version = (id(live.state), live.changes.get("pairs", 0))
        wait = self.query_one(HandshakePanel).show(live.state, now, version=version)
        if wait and not self._pairs_timer:  # pairs changing fast: the change is drawn when the panel's rate allows
            self._pairs_timer = True
            self.set_timer(wait, self._pairs_due)

    def _pairs_due(self) -> None:
        self._pairs_timer = False
        live = self.console.live
        if live is not None and live is self.shown and self.is_mounted and self._visible():
            self._show_pairs(live, self.console.now())

    def _draw_tail(self) -> None:
        live = self.console.live
        name = self.query_one(ProcessTable).current
        if live is None or name is None:
            return
        self.tail_name = name
        self.tail_drawn_at = time.monotonic()
        live.want_lines(self, [name])  # its every line (the watcher sends the others' last lines only)
        p = live.state.procs[name]
        lines = live.tail(name, TAIL_LINES)
        box = self.query_one("#tail-box")
        set_if_changed(box, "border_title", f"Last lines · {name} on {p.node}")
        set_if_changed(box, "border_subtitle", "enter: full log")
        self.query_one(TailPanel).show(lines)  # it shows the newest that fit ("enter": the whole log)

    def _empty_text(self) -> str:
        app = self.console
        if app.launching:
            runs = app.runs
            return (f"[b]{escape(app.launching)}[/b]\n\n{escape(runs.launch_step or 'starting')} …"
                    f"  [dim]({runs.launch_elapsed} s)[/dim]\n\n"
                    "[dim]q twice interrupts it and quits[/dim]")
        return ("[b]No run attached.[/b]\n\nLaunch one from [b]3 Preview[/b] (L asks first), or open an earlier "
                "run on [b]5 Runs[/b]." + ("" if not app.readonly else "\n\nRead-only: launching and tearing "
                                           "down are disabled."))

    # -- selection -------------------------------------------------------------------------------
    def _cursor_moved(self, name: str) -> None:
        if self.is_attached:
            self._draw_tail()

    def on_virtual_table_row_highlighted(self, event: VirtualTable.RowHighlighted) -> None:
        if isinstance(event.table, ProcessTable) and event.key != self.tail_name:  # (drawn at the move already)
            self._draw_tail()

    def on_virtual_table_row_selected(self, event: VirtualTable.RowSelected) -> None:
        key = event.key
        if isinstance(event.table, ProcessTable):
            self.console.runs.open_logs([key])
        elif isinstance(event.table, BarrierGrid):
            live = self.console.live
            if live is not None:
                self.console.runs.open_logs([p.name for p in live.state.procs.values() if p.node == key], node=key)

    def action_open_log(self) -> None:
        focused = self.focused
        if isinstance(focused, BarrierGrid) and focused.current:
            live = self.console.live
            if live is not None:
                self.console.runs.open_logs([p.name for p in live.state.procs.values() if p.node == focused.current],
                                       node=focused.current)
            return
        name = self.query_one(ProcessTable).current
        if name:
            self.console.runs.open_logs([name])

    def action_teardown(self) -> None:
        self.console.runs.request_teardown()

    def action_panel(self, box_id: str) -> None:
        """Bring a panel into view (top of the scrolled area); a scrolling panel also takes the focus so
        PageDown scrolls it, the process table for Processes."""
        box = self.query_one(f"#{box_id}")
        self.query_one("#run-main").scroll_to_widget(box, top=True, animate=False)
        if box_id == "procs-box":
            self.query_one(ProcessTable).focus()
        elif box.focusable:
            box.focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "teardown":
            return not self.console.readonly and self.console.live is not None
        if action in ("open_log", "panel"):
            return self.console.live is not None
        return True
