"""Bench: measure the attached run. The workload form (defaults from the recipe's `benchmark:`), a
progress bar per concurrency step, the live step table, and the Pareto chart: this run's curve over
earlier runs' curves of the same model and workload, each labelled by its layout. Enter in the form
(or b) starts; s stops (the steps done are kept); x exports the comparison (JSON, CSV, SVG).

The sweep is core's (measure.bench) running in a Textual worker on the console's loop; its callbacks
only count, and the view redraws from the counts at most ten times a second.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import DataTable, Input, Label, ProgressBar, Static

from ...core.measure import compare
from ...core.measure.errors import MeasureInputError
from ...core.measure.results import BENCH_DIR, load_all
from ...core.measure.validity import short_reason
from ...core.measure.workload import Workload, parse_concurrencies
from .. import bindings
from ..widgets.context_bar import ContextBar
from ..widgets.footer import QuietFooter
from ..widgets.pareto import Curve, ParetoChart, chart_box_title, chart_svg, curve_of
from ..widgets.serving_panel import rate_of, row_words
from .base import ViewScreen
from .run import run_context

if TYPE_CHECKING:
    from ...core.measure.stats import RequestRecord
    from ...core.measure.sweep import Live, Progress, StepResult
    from ...core.run.events import RunState
    from ..protocols import Console

FIELDS = [("isl", "ISL"), ("osl", "OSL"), ("concurrency", "Concurrency"), ("num_prompts", "Prompts/step"),
          ("random_range_ratio", "Range ratio"), ("seed", "Seed"), ("dataset", "Dataset (JSONL)")]
COLUMNS = [("conc", "CONC"), ("valid", "VALID"), ("ok", "OK"), ("fail", "FAIL"), ("short", "SHORT"),
           ("out", "OUT TOK/S"), ("gpu", "TOK/S/GPU"), ("user", "TOK/S/USER"), ("ttft", "TTFT p50"),
           ("ttft99", "TTFT p99"), ("tpot", "TPOT p50"), ("itl", "ITL p50"), ("e2e", "E2E p50")]


def step_cells(r: dict, basis: str = compare.DEFAULT_BASIS) -> tuple:
    valid = Text("yes", style="green") if r.get("valid", True) else Text("NO", style="bold red")
    return (str(r["max_concurrency"]), valid, str(r["completed"]), str(r["failed"]), str(r["short"]),
            f"{r['output_throughput']:.1f}", f"{compare.y_of(r, basis):.2f}",
            f"{r['interactivity']:.2f}", f"{r['median_ttft_ms']:.1f}", f"{r['p99_ttft_ms']:.1f}",
            f"{r['median_tpot_ms']:.2f}", f"{r['median_itl_ms']:.2f}", f"{r['median_e2el_ms']:.1f}")


def health_text(state: RunState, running: bool, trouble: list[str]) -> Text:
    """The run's health as core's state has it (evidence.sick): who is unhealthy, since when, why; and what it
    means for the step under way (its verdict: live.trouble). Empty when all is well."""
    from ...core.measure.evidence import sick

    out = Text()
    if state.status in ("stopping", "stopped", "dirty"):
        return out
    for n in sick(state, since=True):
        if out:
            out.append("\n")
        out.append("▲ ", style="bold red")
        out.append(f"{n.process} ", style="bold")
        out.append(n.what.upper(), style="bold red")
        if n.detail:
            out.append(f" · {n.detail[:150]}", style="red")
    if running and trouble:
        out.append("\n" if out else "")
        out.append("the step under way is INVALID and stopped: " + ", ".join(dict.fromkeys(trouble)), style="bold red")
    return out


def server_text(state: RunState) -> Text:
    """One line per scraped endpoint: its rate and what runs there (empty when nothing is scraped)."""
    out = Text()
    for name, m in state.metrics.items():
        proc = state.procs.get(name)
        if proc is None:
            continue
        value, unit = rate_of(name, proc.role, m)
        words = f"{value:.2f} {unit}" if unit == "req/s" else f"{value:,.0f} {unit}"
        if out:
            out.append("\n")
        out.append("server ", style="dim")
        out.append(f"{name} ", style="bold")
        out.append(f"{words} · {row_words(proc.role, m)}")
    return out


class BenchScreen(ViewScreen):
    VIEW = "bench"
    BINDINGS = bindings.BENCH
    CSS_PATH = "../bench.tcss"

    def __init__(self) -> None:
        super().__init__()
        self.shown_run: str | None = None
        self.server_drawn: tuple = ()
        self.workload: Workload | None = None
        self.running = False
        self.counts: dict[int, tuple[int, int, int]] = {}  # step -> (done, failed, total)
        self.results: list[dict] = []    # this bench's finished steps
        self.reports: list[dict] = []    # every comparable bench (this run's last is current)
        self.status = ""
        self.drawn = None
        self.health_drawn: tuple = ()
        self.basis = compare.DEFAULT_BASIS  # per GPU as srt-slurm (all GPUs) or InferenceX (decode GPUs): key g
        self.live_step: Live | None = None  # the sweep's live view while a bench runs (trouble, counts)

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def compose(self) -> ComposeResult:
        yield ContextBar()
        with Horizontal(id="bench-top"):
            with Vertical(id="bench-form", classes="run-box") as box:
                box.border_title = "Workload"
                box.border_subtitle = "enter: start"
                for key, label in FIELDS:
                    with Horizontal(classes="bench-field"):
                        yield Label(label, classes="bench-label")
                        yield Input(id=f"bench-{key}", classes="bench-input")
                yield Static("", id="bench-status")
            with Vertical(id="bench-right"):
                yield Static("", id="bench-health")  # the run's health, live: a process gone wrong is named here
                with VerticalScroll(id="bench-progress", classes="run-box") as box:
                    box.border_title = "Steps"
                with Vertical(id="bench-table-box", classes="run-box") as box:
                    box.border_title = "Results per step"
                    yield DataTable(id="bench-table", cursor_type="row", zebra_stripes=True)
                    # what the servers themselves say meanwhile (the run view's Serving panel, in words)
                    yield Static("", id="bench-server")
        with Vertical(id="bench-chart-box", classes="run-box") as box:
            box.border_title = chart_box_title(self.basis)
            box.border_subtitle = "g: per GPU basis"
            yield ParetoChart(id="bench-chart")
        yield QuietFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        table.focus()  # b, s, x work from the table; tab or a click reaches the form
        self.set_interval(0.1, self._tick)
        self.redraw()

    def on_screen_resume(self) -> None:
        self.redraw()

    def run_updated(self) -> None:
        if self.console.live is None or self.console.live.id != self.shown_run:
            self.redraw()

    # -- the form --------------------------------------------------------------------------------
    def _fill_form(self, w: Workload) -> None:
        values = {"isl": w.isl, "osl": w.osl, "concurrency": ",".join(map(str, w.concurrencies)),
                  "num_prompts": w.num_prompts, "random_range_ratio": w.random_range_ratio, "seed": w.seed,
                  "dataset": w.dataset or ""}
        for key, value in values.items():
            self.query_one(f"#bench-{key}", Input).value = str(value)

    def read_form(self) -> Workload:
        """The workload in the form; MeasureInputError names the field at fault."""
        def text(key: str) -> str:
            return self.query_one(f"#bench-{key}", Input).value.strip()

        def number(key: str, label: str, kind=int):
            try:
                return kind(text(key))
            except ValueError:
                raise MeasureInputError(f"{label}: {text(key)!r} is not a {'whole ' if kind is int else ''}number") \
                    from None

        w = Workload(isl=number("isl", "ISL"), osl=number("osl", "OSL"),
                     concurrencies=parse_concurrencies(text("concurrency")),
                     num_prompts=number("num_prompts", "Prompts/step"),
                     random_range_ratio=number("random_range_ratio", "Range ratio", float),
                     seed=number("seed", "Seed"), dataset=text("dataset") or None)
        w.validate()
        return w

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_start()

    # -- actions ---------------------------------------------------------------------------------
    def action_start(self) -> None:
        live = self.console.live
        if live is None:
            self._say("no run attached: launch one (3 Preview, L) or open one (5 Runs)", error=True)
            return
        if self.running:
            self._say("a bench is running; s stops it", error=True)
            return
        try:
            w = self.read_form()
        except MeasureInputError as e:
            self._say(str(e), error=True)
            return
        self.workload = w
        self.results, self.counts = [], {i: (0, 0, w.num_prompts) for i in range(len(w.concurrencies))}
        self._build_progress(w)
        table = self.query_one(DataTable)
        table.clear()
        table.focus()  # out of the form: b, s and x work from here
        self._load_reports()
        self.running = True
        self._say(f"measuring {w.key}: {len(w.concurrencies)} steps x {w.num_prompts} requests …")
        self.measure(w)

    def action_stop(self) -> None:
        if self.running:
            self.workers.cancel_group(self, "bench")

    def action_basis(self) -> None:
        """Switch per GPU between srt-slurm's (output / all GPUs) and InferenceX's (output / decode GPUs)."""
        self.basis = "decode" if self.basis == "all" else "all"
        self.query_one("#bench-chart-box").border_title = chart_box_title(self.basis)
        self.query_one(DataTable).clear()
        self._say(f"per GPU: {compare.BASES[self.basis][2]}")
        self.drawn = None
        self._tick()

    def action_export(self) -> None:
        live = self.console.live
        if live is None or not self.reports:
            self._say("nothing to export yet: run a bench first", error=True)
            return
        d = Path(live.run.rd.path) / BENCH_DIR
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.console.now()))
        table = compare.rows(self.reports, basis=self.basis)
        try:
            d.mkdir(mode=0o700, exist_ok=True)
            (d / f"compare-{stamp}.json").write_text(json.dumps({"rows": table, "benches": [
                r.get("path") for r in self.reports]}, indent=2))
            (d / f"compare-{stamp}.csv").write_text(compare.to_csv(table))
            (d / f"compare-{stamp}.svg").write_text(chart_svg(self._curves(), title=self._chart_title(),
                                                              basis=self.basis))
        except OSError as e:
            self._say(f"cannot write the export into {d}: {e}", error=True)
            return
        self.notify(f"wrote {d}/compare-{stamp}.json, .csv and .svg", title="Exported")

    # -- the sweep -------------------------------------------------------------------------------
    @work(exclusive=True, group="bench", exit_on_error=False)
    async def measure(self, w: Workload) -> None:
        from ...core.measure.bench import bench, target_of  # aiohttp: loaded when a bench starts

        live = self.console.live
        assert live is not None
        target = target_of(live.run)
        target.status = live.state.status

        def on_record(p: Progress, _rec: RequestRecord) -> None:
            self.counts[p.step] = (p.done, p.failed, p.total)

        def on_step(i: int, step: StepResult) -> None:
            self.results.append(step.summary)

        from ...core.measure.sweep import Live

        self.live_step = Live()
        try:
            # the console's watcher process scrapes for stalls already: the bench's sentinel asks health only
            report = await bench(target, w, on_record=on_record, on_step=on_step, live=self.live_step, stalls=False)
        except MeasureInputError as e:
            self._say(str(e), error=True)
        except Exception as e:  # a failed bench must never take the console down
            self._say(f"the bench failed: {type(e).__name__}: {e}", error=True)
        else:
            bad = report.problems()
            self._say(("NOT complete: " + "; ".join(bad)) if bad else f"done: saved {report.path}", error=bool(bad))
        finally:
            self.running = False
            if self.status.startswith("measuring"):
                self._say(f"stopped after {len(self.results)} step(s); the steps done are saved")
            self._load_reports()
            self.drawn = None

    # -- drawing ---------------------------------------------------------------------------------
    def _say(self, text: str, error: bool = False) -> None:
        self.status = text
        if self.is_mounted:
            style = "$text-error" if error else "$text-muted"
            self.query_one("#bench-status", Static).update(f"[{style}]{escape(text)}[/]")

    def _build_progress(self, w: Workload) -> None:
        box = self.query_one("#bench-progress", VerticalScroll)
        box.remove_children()
        for i, c in enumerate(w.concurrencies):
            row = Horizontal(Label(f"c={c:<4}", classes="bench-step-label"),
                             ProgressBar(total=w.num_prompts, show_eta=False, id=f"bench-bar-{i}"),
                             Label("", id=f"bench-count-{i}", classes="bench-step-count"), classes="bench-step")
            box.mount(row)
        self.call_after_refresh(self._redraw_counts)  # the bars exist once mounted

    def _redraw_counts(self) -> None:
        self.drawn = None
        self._tick()

    def _tick(self) -> None:
        self._draw_server()
        self._draw_health()
        trouble = tuple(self.live_step.trouble) if self.live_step is not None and self.running else ()
        key = (self.running, tuple(sorted(self.counts.items())), len(self.results), len(self.reports), trouble,
               self.basis)
        if key == self.drawn or not self.is_mounted:
            return
        self.drawn = key
        under_way = self.live_step.step if self.live_step is not None and self.running else -1
        for i, (done, failed, total) in self.counts.items():
            for bar in self.query(f"#bench-bar-{i}").results(ProgressBar):
                bar.update(total=total, progress=done + failed)
            for label in self.query(f"#bench-count-{i}").results(Label):
                words = f"{done}/{total}" + (f" [$text-error]{failed} failed[/]" if failed else "")
                verdict = short_reason(self.results[i]) if i < len(self.results) else ""
                if i == under_way and trouble and i >= len(self.results):
                    verdict = "stopping: " + ", ".join(dict.fromkeys(trouble))
                if verdict:
                    words += f" [bold $text-error]INVALID[/] [$text-error]{escape(verdict[:120])}[/]"
                elif i < len(self.results):
                    words += " [$text-success]valid[/]"
                label.update(words)
        table = self.query_one(DataTable)
        if table.row_count != len(self.results):
            table.clear()
            for r in self.results:
                table.add_row(*step_cells(r, self.basis), key=str(r["max_concurrency"]))
        self._draw_chart()

    def _draw_health(self) -> None:
        """The run's health from core's state, redrawn when it changes (a frozen process named at once)."""
        live = self.console.live
        if live is None or not self.is_mounted:
            return
        s = live.state
        trouble = list(self.live_step.trouble) if self.live_step is not None and self.running else []
        key = (tuple((n, p.stage, p.health_detail) for n, p in s.procs.items()),
               tuple((k, p.stage) for k, p in s.pairs.items()), s.status, self.running, tuple(trouble))
        if key == self.health_drawn:
            return
        self.health_drawn = key
        text = health_text(s, self.running, trouble)
        box = self.query_one("#bench-health", Static)
        box.display = bool(text)
        box.update(text)

    def _draw_server(self) -> None:
        """The servers' own live rates beside the client's figures: each endpoint's scraped metrics
        (ATOM's /metrics, AToMesh's mesh_*), as the watcher reports them; nothing when nobody scrapes."""
        live = self.console.live
        metrics = live.state.metrics if live is not None else {}
        key = tuple((n, m.get("t", 0)) for n, m in metrics.items())
        if key == self.server_drawn or not self.is_mounted:
            return
        self.server_drawn = key
        text = server_text(live.state) if live is not None else Text()
        box = self.query_one("#bench-server", Static)
        box.display = bool(text)
        box.update(text)

    def redraw(self) -> None:
        if not self.is_mounted:
            return
        app = self.console
        self.query_one(ContextBar).show_run(app.views, self.VIEW, run_context(app), app.readonly)
        live = app.live
        run_id = live.id if live else None
        if run_id != self.shown_run:
            self.shown_run = run_id
            if live is not None:
                from ...core.measure.bench import default_workload

                self.workload = default_workload(live.run.recipe)
                self._fill_form(self.workload)
                self._show_saved()
            else:
                self._say("no run attached: launch one (3 Preview, L) or open one (5 Runs)")
        self.drawn = None
        self._tick()

    def _show_saved(self) -> None:
        """A run benched before: its last bench in the table and the chart (its workload in the form)."""
        live = self.console.live
        assert live is not None
        mine = load_all(live.run.rd.path)
        if mine and not self.running:
            last = mine[-1]
            wl = last.get("workload", {})
            self.workload = Workload(**{k: v for k, v in wl.items() if k in Workload.__dataclass_fields__})
            self._fill_form(self.workload)
            self.results = list(last.get("results", []))
            self.counts = {i: (r["completed"], r["failed"], r["num_prompts"]) for i, r in enumerate(self.results)}
            self._build_progress(Workload(concurrencies=[r["max_concurrency"] for r in self.results],
                                          num_prompts=max([r["num_prompts"] for r in self.results] or [1])))
            self._say(f"last bench: {Path(last['path']).name} ({len(self.results)} steps)")
        else:
            self._say("enter (or b) measures this run with the workload above")
        self._load_reports()

    def _load_reports(self) -> None:
        """Every bench of the same model and workload on this machine; this run's newest is current."""
        from ...core.run.run import Run

        live, w = self.console.live, self.workload
        if live is None or w is None:
            self.reports = []
            return
        model, key = live.run.recipe.model.client_name, w.key
        found = []
        for meta in Run.list():
            try:
                found += [r for r in load_all(meta["dir"]) if r.get("model") == model and r.get("workload_key") == key]
            except OSError:
                continue
        self.reports = found

    def _curves(self) -> list[Curve]:
        live = self.console.live
        run_id = live.id if live else None
        mine = [r for r in self.reports if r.get("run") == run_id]
        current = mine[-1] if mine and not self.running else None
        curves = [curve_of(r, basis=self.basis) for r in self.reports if r is not current]
        if self.running and self.results and live is not None:  # the bench under way, step by step
            curves.append(curve_of({"layout": live.run.plan.shape, "results": self.results}, current=True,
                                   basis=self.basis))
        elif current is not None:
            curves.append(curve_of(current, current=True, basis=self.basis))
        return curves

    def _chart_title(self) -> str:
        live = self.console.live
        model = live.run.recipe.model.client_name if live else ""
        return f"{model} · {self.workload.key if self.workload else ''}"

    def _draw_chart(self) -> None:
        self.query_one(ParetoChart).show(self._curves(), self._chart_title(), self.basis)
