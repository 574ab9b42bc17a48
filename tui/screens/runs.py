"""Runs: every run directory on this machine (core's Run.list), newest first, of every cluster, each with its
cluster (marked when that cluster does not answer: its runs then show what was last recorded). Enter (or o)
reattaches and watches a run, showing its cluster's context first; D tears the selected run down (asks first)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from .. import bindings
from ..widgets.context_bar import ContextBar
from ..widgets.footer import QuietFooter
from .base import ViewScreen

if TYPE_CHECKING:
    from ..protocols import Console

COLUMNS = [("mark", ""), ("id", "RUN"), ("status", "STATUS"), ("recipe", "RECIPE"), ("cluster", "CLUSTER"),
           ("launcher", "LAUNCHER"), ("created", "STARTED"), ("job", "JOB"), ("diagnosis", "LAST DIAGNOSIS")]


class RunsScreen(ViewScreen):
    VIEW = "runs"
    BINDINGS = bindings.RUNS
    # A run's status in the theme's colours (a stopped run's in the default colour).
    COMPONENT_CLASSES = {"runs--launching", "runs--starting", "runs--serving", "runs--degraded", "runs--failed",
                         "runs--stopping", "runs--dirty", "runs--error"}
    DEFAULT_CSS = """
    RunsScreen > .runs--launching, RunsScreen > .runs--starting { color: $text-accent; }
    RunsScreen > .runs--serving { color: $text-success; }
    RunsScreen > .runs--degraded, RunsScreen > .runs--stopping { color: $text-warning; }
    RunsScreen > .runs--failed, RunsScreen > .runs--dirty, RunsScreen > .runs--error { color: $text-error; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[dict] = []
        self.error = ""

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def compose(self) -> ComposeResult:
        yield ContextBar()
        yield Static("", id="runs-summary")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-detail")
        yield QuietFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        table.focus()
        self.reload()

    def on_screen_resume(self) -> None:
        self.reload()

    def run_updated(self) -> None:
        self._bar()

    def contexts_changed(self) -> None:
        """A cluster's answer changed, or the context shown did (the App): the marks and the summary."""
        if self.is_mounted:
            self.reload()

    @property
    def current(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.runs or not 0 <= table.cursor_row < len(self.runs):
            return None
        return self.runs[table.cursor_row]["id"]

    def reload(self) -> None:
        from ...core.run.run import Run

        keep = self.current
        try:
            self.runs = list(reversed(Run.list()))
            self.error = ""
        except Exception as e:
            self.runs, self.error = [], f"cannot list runs: {e}"
        table = self.query_one(DataTable)
        table.clear()
        attached = self.console.live.id if self.console.live else None
        self.console.contexts.want(self.runs)  # the clusters of live runs not open here are asked too
        watched = self.console.contexts.watched()
        for m in self.runs:
            table.add_row(*self._cells(m, attached, watched), key=m["id"])
        ids = [m["id"] for m in self.runs]
        if keep in ids:
            table.move_cursor(row=ids.index(keep), animate=False)
        elif attached in ids:
            table.move_cursor(row=ids.index(attached), animate=False)
        self._bar()
        self._detail()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail()

    def _detail(self) -> None:
        """The highlighted run: where it lives, who started it, its last diagnosis, what to type."""
        run_id = self.current
        out = Text()
        m = next((m for m in self.runs if m["id"] == run_id), None)
        if m is None:
            out.append("no runs yet: launch one from 3 Preview, or `atomdeck up RECIPE`", style="dim")
        else:
            out.append(f"{m['id']}", style="bold")
            status = str(m.get("status", "?"))
            out.append(f"  {status}", style=self._color(status))
            out.append(f"  on {m.get('cluster', '?')}")
            reach = self.console.contexts.reach.get(str(m.get("cluster")))
            if reach is not None and not reach.answers:
                out.append(f" (does not answer: {reach.detail}; the status is as last recorded)",
                           style=self._color("error"))
            out.append(f"\n{m.get('diagnosis') or 'no diagnosis recorded'}")
            where = f"\ndirectory {m.get('dir', '')}"
            if m.get("console_host"):
                where += f" · started from {m['console_host']} (pid {m.get('console_pid', '?')})"
            if m.get("job_id"):
                where += f" · Slurm job {m['job_id']}"
            out.append(where, style="dim")
            out.append(f"\nfrom a shell: atomdeck status {m['id']} · atomdeck logs {m['id']} · atomdeck down {m['id']}",
                       style="dim")
        self.query_one("#runs-detail", Static).update(out)

    def _bar(self) -> None:
        if not self.is_mounted:
            return
        from .run import run_context

        app = self.console
        self.query_one(ContextBar).show_run(app.views, self.VIEW, run_context(app), app.readonly)
        out = Text()
        from ...core.config.paths import runs_dir

        if self.error:
            out.append(self.error, style=self._color("error"))
        else:
            book = app.contexts
            clusters = list(dict.fromkeys(str(m.get("cluster", "?")) for m in self.runs))
            out.append(f"{len(self.runs)} run(s) on {len(clusters)} cluster(s) in {runs_dir()}", style="bold")
            down = [n for n in clusters if (r := book.reach.get(n)) is not None and not r.answers]
            if down:
                out.append(f" · {', '.join(down)}: NO ANSWER", style=self._color("error"))
            out.append(" · enter reattaches and watches" + ("" if app.readonly else " · D tears down (asks first)"),
                       style="dim")
            out.append(f" · ● watched here ({book.current}), ○ watched in another context", style="dim")
        self.query_one("#runs-summary", Static).update(out)

    def _color(self, status: str) -> Style:
        return self.get_component_rich_style(f"runs--{status}", partial=True, default=Style())

    def _cells(self, m: dict, attached: str | None, watched: dict[str, str]) -> list[Text]:
        status = str(m.get("status", "?"))
        created = m.get("created")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created)) if created else ""
        mark = "●" if m["id"] == attached else "○" if m["id"] in watched else ""
        cluster = Text(str(m.get("cluster", "")))
        reach = self.console.contexts.reach.get(str(m.get("cluster")))
        if reach is not None and not reach.answers:
            cluster.append(" ×", style=self._color("error"))
        return [Text(mark, style="bold"), Text(m["id"], style="bold"),
                Text(status, style=self._color(status)), Text(str(m.get("recipe", ""))),
                cluster, Text(str(m.get("launcher", ""))), Text(when),
                Text(str(m.get("job_id") or ""), style="dim"),
                Text(_short(str(m.get("diagnosis") or ""), 44), style="dim")]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_run()

    def action_open_run(self) -> None:
        run_id = self.current
        if run_id:
            self.console.open_run_anywhere(run_id)

    def action_reload(self) -> None:
        self.reload()

    def action_teardown(self) -> None:
        run_id = self.current
        if run_id:
            self.console.open_run_anywhere(run_id, teardown=True)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "teardown":
            return not self.console.readonly
        return True


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"
