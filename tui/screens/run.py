"""Run: the attached deployment as core sees it. Processes with their stage and time in stage, the
barrier grid with the blocking cells marked, the one-line diagnosis (always on screen), the router
and its checks, the Mooncake handshake per pair, node health, and the last lines of the process
under the cursor. Enter opens a log; D tears the run down (asks first)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Container, Vertical, VerticalScroll
from textual.markup import escape
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
from .run_pacing import PacedRunView

if TYPE_CHECKING:
    from ..live import LiveRun
    from ..protocols import Console

WIDE = 140  # at this width and more the router/handshake/nodes panels sit beside the tables
TAIL_LINES = 20
ALL_PARTS = frozenset(("procs", "cells", "pairs", "checks", "conns", "metrics", "run"))
# While the run comes up its panels keep their highest line count (RunPanel.keep_rows): the screen is not
# re-laid out each time the diagnosis or the handshake panel gains or loses a line. Released at serving.
COMING_UP = ("launching", "starting")


def run_context(app: Console) -> str:
    """The top bar's right side on the run views: which run, what it runs, where."""
    live = app.live
    if live is None:
        return "[b]launching[/b]" if app.launching else "[$text-muted]no run attached[/]"
    run = live.run
    return (f"run [b]{escape(run.id)}[/b] · {escape(run.recipe.name)} ({escape(run.plan.shape)}) on "
            f"[b]{escape(run.cluster.name)}[/b] · {escape(run.cluster.launcher)}")


class RunScreen(PacedRunView):
    VIEW = "run"
    BINDINGS = bindings.RUN

    def __init__(self) -> None:
        super().__init__()
        self.metrics_drawn = -1  # the LiveRun's metrics_version the Serving panel shows
        self.tail_name: str | None = None
        self.culprit: str | None = None
        self.drawn_changes: dict[str, int] = {}  # LiveRun.changes as last drawn
        self.redraws: dict[str, int] = {}  # panel -> times redrawn (tests: which events redraw what)
        self._pairs_timer = False  # a timer will draw the pairs' change the panel's rate held back

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
        live = self.console.live
        if live is not None and live is self.shown and self._spreads(live):
            # a large run's view shown again (4 from another view): the switch's frame goes out with the panels
            # as they were last drawn, their line caches intact, and what changed meanwhile follows a panel a
            # frame. Redrawn whole in the switch's turn while 129 processes started, 4 took a mean 41 ms against
            # 27 ms for 1 in the same runs (bench/scale_console.py; headless, nothing changing: no difference)
            self.run_worker(self._clock(), group="run-redraw", exit_on_error=True)  # (a change or the times)
            return
        self.redraw()

    def _show_empty(self, empty: bool) -> None:
        """The "no run" text instead of the run's panels, or the panels. Each widget's own display: a class
        on the screen restyled every widget of the view when a run attached."""
        self.query_one("#run-empty").display = empty
        self.query_one("#run-main").display = not empty
        self.query_one("#run-head").display = not empty

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "-wide")

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
        self.frames_mark = self.frames_s
        app = self.console
        live = app.live
        if live is not self.shown:
            clock = False  # a run not drawn yet is drawn whole (a clock redraw first left its router panel empty)
        if not clock:
            self.query_one(ContextBar).show_run(app.views, self.VIEW, run_context(app), app.readonly)
            self._show_empty(live is None)
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
        if app.launching:  # core's launch starts the processes (attached before the first start: RunController)
            # (the launcher's count, as it starts them: core's state hears of them all at once, when all started)
            step = app.runs.launch_step or f"starting {len(state.procs)} processes"
            note = f"{step} … ({app.runs.launch_elapsed} s)"  # (q says what quitting now does, and asks again)

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
        self._redrawn(cost)

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

    def action_snapshot(self) -> None:
        from .snapshot import open_snapshot

        open_snapshot(self.app)

    def action_teardown(self) -> None:
        self.console.runs.request_teardown()

    def action_act(self, kind: str) -> None:
        """Restart or remove the process under the cursor (core's action; the console asks first)."""
        self.console.runs.request_action(kind, self.query_one(ProcessTable).current)

    def action_add(self, role: str) -> None:
        self.console.runs.request_action("add", role=role)

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
        # (while core's launch starts the processes, D and enter say to wait for the starts (RunController): the
        # footer keeps its keys, not recomposed while 129 processes boot)
        if action == "teardown":
            return not self.console.readonly and self.console.live is not None
        if action in ("open_log", "panel"):
            return self.console.live is not None
        return True
