"""Sweep: the layout search (core/measure/layouts.py) from the console. The form (layouts, nodes, workload, SLO;
defaults from the design: its recipe, cluster and nodes), one progress bar for the whole search, the layouts with
their state, the Pareto of every layout's steps with each point labelled (layout, concurrency), and core's
recommendation. Enter (or b) starts or resumes; s stops (the layout under way is torn down, the done ones kept);
g switches per GPU between srt-slurm's and InferenceX's definition.

The search is core's, in a Textual worker on the console's loop; its progress callback only records, and the view
redraws from core's Search object at most ten times a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.widgets import DataTable, Input, Label, ProgressBar, Static

from ...core.measure import compare
from ...core.measure.errors import MeasureInputError
from .. import bindings
from ..widgets.context_bar import ContextBar
from ..widgets.footer import QuietFooter
from ..widgets.pareto import ParetoChart, chart_box_title, curve_of
from .base import ViewScreen

if TYPE_CHECKING:
    from ...core.measure.layouts import Search
    from ..protocols import Console

FIELDS = [("layouts", "Layouts"), ("nodes", "Nodes"), ("isl", "ISL"), ("osl", "OSL"), ("concurrency", "Concurrency"),
          ("num_prompts", "Prompts/step"), ("slo", "SLO")]
COLUMNS = [("layout", "LAYOUT"), ("status", "STATE"), ("gpus", "GPUS"), ("best", "BEST TOK/S/GPU"),
           ("conc", "AT CONC"), ("valid", "VALID STEPS"), ("note", "NOTE")]
STATE_STYLE = {"done": "green", "failed": "bold red", "launching": "yellow", "benching": "yellow", "pending": "dim"}


class SweepScreen(ViewScreen):
    VIEW = "sweep"
    BINDINGS = bindings.SWEEP
    CSS_PATH = "../bench.tcss"

    def __init__(self) -> None:
        super().__init__()
        self.search: Search | None = None
        self.running = False
        self.status = ""
        self.basis = compare.DEFAULT_BASIS
        self.drawn: tuple | None = None
        self.filled = False

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def compose(self) -> ComposeResult:
        yield ContextBar()
        with Horizontal(id="bench-top"):
            with Vertical(id="bench-form", classes="run-box") as box:
                box.border_title = "Layout search"
                box.border_subtitle = "enter: start or resume"
                for key, label in FIELDS:
                    with Horizontal(classes="bench-field"):
                        yield Label(label, classes="bench-label")
                        yield Input(id=f"sweep-{key}", classes="bench-input")
                yield Static("", id="bench-status")
            with Vertical(id="bench-right"):
                with Vertical(id="sweep-progress-box", classes="run-box") as box:
                    box.border_title = "Search"
                    yield ProgressBar(total=1, show_eta=False, id="sweep-bar")
                    yield Static("", id="sweep-words")
                    yield Static("", id="sweep-pick")
                with Vertical(id="bench-table-box", classes="run-box") as box:
                    box.border_title = "Layouts"
                    yield DataTable(id="sweep-table", cursor_type="row", zebra_stripes=True)
        with Vertical(id="bench-chart-box", classes="run-box") as box:
            box.border_title = chart_box_title(self.basis)
            box.border_subtitle = "g: per GPU basis"
            yield ParetoChart(id="sweep-chart")
        yield QuietFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        table.focus()
        self.set_interval(0.1, self._tick)
        self.redraw()

    def on_screen_resume(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        if not self.is_mounted:
            return
        app = self.console
        ws = app.workspace
        self.query_one(ContextBar).show_tabs(app.views, self.VIEW)
        if not self.filled:
            self.filled = True
            from ...core.measure.bench import default_workload

            w = default_workload(ws.recipe)
            nodes = [n.name for n in ws.inventory if n.healthy][:3]
            values = {"layouts": "1p1d,1p2d,2p1d", "nodes": ",".join(nodes), "isl": w.isl, "osl": w.osl,
                      "concurrency": ",".join(map(str, w.concurrencies)), "num_prompts": w.num_prompts, "slo": ""}
            for key, value in values.items():
                self.query_one(f"#sweep-{key}", Input).value = str(value)
            self._say(f"{ws.recipe.name} on {ws.cluster.name}: enter (or b) searches these layouts on these nodes")
        self.drawn = None
        self._tick()

    # -- the form --------------------------------------------------------------------------------
    def read_form(self):
        """The search's spec from the form; MeasureInputError names the field at fault."""
        from ...core.measure.bench import default_workload
        from ...core.measure.layouts import SearchSpec, parse_layouts
        from ...core.measure.stats import parse_slo
        from ...core.measure.workload import parse_concurrencies

        def text(key: str) -> str:
            return self.query_one(f"#sweep-{key}", Input).value.strip()

        def number(key: str, label: str) -> int:
            try:
                return int(text(key))
            except ValueError:
                raise MeasureInputError(f"{label}: {text(key)!r} is not a whole number") from None

        layouts = parse_layouts(text("layouts"))
        nodes = [n.strip() for n in text("nodes").split(",") if n.strip()]
        need = max(lay.prefill + lay.decode for lay in layouts)
        if len(nodes) < need:
            raise MeasureInputError(f"Nodes: {len(nodes)} given, the biggest layout needs {need}")
        try:
            slo = parse_slo(text("slo"), "SLO") if text("slo") else None
        except ValueError as e:
            raise MeasureInputError(str(e)) from None
        ws = self.console.workspace
        w = default_workload(ws.recipe, isl=number("isl", "ISL"), osl=number("osl", "OSL"),
                             concurrencies=parse_concurrencies(text("concurrency")),
                             num_prompts=number("num_prompts", "Prompts/step"))
        w.validate()
        recipe = str(ws.recipe_path) if ws.recipe_path else ws.recipe.name
        from ...core.config.clusters import clusters_file

        # a cluster of the clusters file by its name (that file is no cluster file); another by its file
        in_file = ws.cluster_path is None or ws.cluster_path.resolve() == clusters_file().resolve()
        cluster = ws.cluster.name if in_file else str(ws.cluster_path)
        return SearchSpec(recipe, cluster, nodes, layouts, w, slo, None, self.basis)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_start()

    # -- actions ---------------------------------------------------------------------------------
    def action_start(self) -> None:
        from ...core.measure.layouts import Search

        if self.running:
            self._say("a search is running; s stops it", error=True)
            return
        try:
            spec = self.read_form()
            self.search = Search.open(spec)
        except MeasureInputError as e:
            self._say(str(e), error=True)
            return
        self.query_one(DataTable).focus()
        self.running = True
        done = ", ".join(self.search.resumed)
        self._say(f"searching {len(spec.layouts)} layouts" + (f" (resumed: {done} done)" if done else "") + " …")
        self.run_search(self.search)

    def action_stop(self) -> None:
        if self.running:
            self._say("stopping: tearing the layout under way down …")
            self.workers.cancel_group(self, "sweep")

    def action_basis(self) -> None:
        self.basis = "decode" if self.basis == "all" else "all"
        if self.search is not None:
            self.search.spec.basis = self.basis
        self.query_one("#bench-chart-box").border_title = chart_box_title(self.basis)
        self._say(f"per GPU: {compare.BASES[self.basis][2]}")
        self.drawn = None
        self._tick()

    @work(exclusive=True, group="sweep", exit_on_error=False)
    async def run_search(self, search: Search) -> None:
        try:
            await search.run()
        except MeasureInputError as e:
            self._say(str(e), error=True)
        except Exception as e:  # a failed search must never take the console down
            self._say(f"the search failed: {type(e).__name__}: {e}", error=True)
        else:
            pick = search.recommendation()
            self._say(f"done: saved {search.dir / 'search.json'}" if pick else
                      "done: no layout meets the SLO" if search.spec.slo else "done: no layout gave a valid step",
                      error=pick is None)
        finally:
            self.running = False
            if self.status.startswith(("stopping", "searching")):
                self._say("stopped: the layouts done are kept; enter resumes the same search")
            self.drawn = None

    # -- drawing ---------------------------------------------------------------------------------
    def _say(self, text: str, error: bool = False) -> None:
        self.status = text
        if self.is_mounted:
            style = "$text-error" if error else "$text-muted"
            self.query_one("#bench-status", Static).update(f"[{style}]{escape(text)}[/]")

    def _tick(self) -> None:
        s = self.search
        if s is None or not self.is_mounted:
            return
        p = s.progress
        key = (self.running, p.steps_done, p.words, tuple((e.status, len(e.results), e.reason) for e in s.entries),
               self.basis)
        if key == self.drawn:
            return
        self.drawn = key
        self.query_one("#sweep-bar", ProgressBar).update(total=max(1, p.steps_total), progress=p.steps_done)
        where = f"layout {p.layout + 1}/{len(s.entries)} · " if 0 <= p.layout < len(s.entries) else ""
        self.query_one("#sweep-words", Static).update(
            f"[$text-muted]{p.steps_done}/{p.steps_total} steps · {where}{escape(p.words)}[/]")
        pick = s.recommendation()
        slo = f" within SLO {','.join(f'{k}_ms:{v:g}' for k, v in s.spec.slo.items())}" if s.spec.slo else ""
        self.query_one("#sweep-pick", Static).update(
            f"[b $text-success]best per GPU{escape(slo)}: {escape(pick.words(self.basis))}[/]" if pick else
            f"[$text-muted]best per GPU{escape(slo)}: none yet[/]")
        table = self.query_one(DataTable)
        table.clear()
        for e in s.entries:
            valid = [r for r in e.results if r.get("valid", True)]
            best = max(valid, key=lambda r: compare.y_of({**e.gpus, **r}, self.basis), default=None)
            g = e.gpus
            table.add_row(f"[{STATE_STYLE.get(e.status, '')}]{e.layout}[/]", e.status,
                          f"{g.get('total_gpus', '')}={g.get('prefill_gpus', '')}+{g.get('decode_gpus', '')}"
                          if g else "",
                          f"{compare.y_of({**g, **best}, self.basis):.1f}" if best else "",
                          str(best["max_concurrency"]) if best else "", f"{len(valid)}/{len(e.results)}",
                          escape(e.reason[:80]), key=e.layout)
        curves = [curve_of(r, basis=self.basis, named=True) for r in s.reports()]
        title = f"{s.spec.workload.key} · {len(s.entries)} layouts"
        self.query_one(ParetoChart).show([c.__class__(c.label.split(" · ")[0], c.points, False, c.valid, c.names)
                                          for c in curves], title, self.basis)
