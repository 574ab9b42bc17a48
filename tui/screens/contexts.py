"""The context switcher (k9s's `:ctx`): every cluster known by name, the one shown marked, whether each answers,
which run each has attached here; Enter shows it and the others stay watched. And the `:` command line that
opens it: `ctx` (or `context`) lists, `ctx NAME` switches, a view's name (`runs`, `nodes`, ...) shows that view."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static

from .. import bindings

if TYPE_CHECKING:
    from ..protocols import Console

COLUMNS = [("mark", ""), ("name", "CONTEXT"), ("launcher", "LAUNCHER"), ("answers", "ANSWERS"),
           ("run", "RUN HERE"), ("source", "DEFINED IN")]


def context_rows(console: Console) -> tuple[list[dict], str]:
    """(a row per known cluster, a problem reading them). The console's own contexts first (the shown one, then
    the ones left), then every other cluster the files define."""
    from ...core.config import clusters
    from ...core.config.errors import AtomdeckError

    book = console.contexts
    problem = ""
    try:
        refs = {r.name: r for r in clusters.contexts()}
    except AtomdeckError as e:  # a broken clusters file: say so, list what is open here
        refs, problem = {}, str(e)
    watched = {ctx: run for run, ctx in book.watched().items()}
    rows = []
    for name in dict.fromkeys([*book.names(), *refs]):
        ref = refs.get(name)
        r = book.reach.get(name)
        cluster = book.cluster_of(name)
        rows.append({"name": name, "shown": name == book.current, "open": name in book.names(),
                     "launcher": cluster.launcher if cluster else "", "answers": None if r is None else r.answers,
                     "detail": r.detail if r else "", "run": watched.get(name, ""),
                     "source": _where(ref) if ref else "(a run's cluster)",
                     "description": cluster.description if cluster else ""})
    return rows, problem


def _where(ref) -> str:
    """Where a cluster is defined, short: the clusters file's entry, a file of the user's, a shipped example."""
    from pathlib import Path

    from ...core.config.paths import recipes_dir

    if ref.in_clusters_file:
        return f"clusters file: {ref.name}"
    if ref.path.resolve().is_relative_to(recipes_dir().resolve()):
        return f"shipped: {ref.path.name}"
    home = str(Path.home())
    text = str(ref.path)
    return "~" + text[len(home):] if text.startswith(home + "/") else text


class ContextScreen(ModalScreen[None]):
    BINDINGS = bindings.CONTEXTS

    def __init__(self) -> None:
        super().__init__(classes="dialog")
        self.rows: list[dict] = []

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box", id="contexts-box"):
            yield Static(Text("Contexts: the clusters this console can show"), classes="dialog-title")
            yield DataTable(id="contexts-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="contexts-detail", classes="dialog-body")
            yield Static("enter shows the cluster (every other one stays watched) · esc closes · "
                         "`atomdeck context NAME` sets the default", classes="dialog-hint")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self.reload()
        table.focus()

    def contexts_changed(self) -> None:
        if self.is_mounted:
            self.reload()

    def reload(self) -> None:
        table = self.query_one(DataTable)
        keep = self.current
        self.rows, problem = context_rows(self.console)
        table.clear()
        for row in self.rows:
            answers = {None: Text("-", style="dim"), True: Text("yes", style="green"),
                       False: Text("NO", style="bold red")}[row["answers"]]
            table.add_row(Text("*" if row["shown"] else "●" if row["open"] else "", style="bold"),
                          Text(row["name"], style="bold" if row["open"] else ""), Text(row["launcher"]), answers,
                          Text(row["run"]), Text(row["source"], style="dim"), key=row["name"])
        names = [r["name"] for r in self.rows]
        if keep in names:
            table.move_cursor(row=names.index(keep), animate=False)
        self._detail(problem)

    @property
    def current(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return str(self.rows[table.cursor_row]["name"])

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail("")

    def _detail(self, problem: str) -> None:
        out = Text()
        row = next((r for r in self.rows if r["name"] == self.current), None)
        if problem:
            out.append(problem + "\n", style="bold red")
        if row is not None:
            out.append(row["name"], style="bold")
            if row["description"]:
                out.append(f"  {row['description']}")
            if row["answers"] is False:
                out.append(f"\ndoes not answer: {row['detail']}", style="red")
            elif row["answers"]:
                out.append(f"\nanswers ({row['detail']})", style="dim")
            else:
                out.append("\nnot asked yet" if row["open"] else "\nnot open here: asked once shown", style="dim")
            out.append("\n* shown · ● open here, its run watched", style="dim")
        self.query_one("#contexts-detail", Static).update(out)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_switch()

    def action_switch(self) -> None:
        name = self.current
        if name is None:
            return
        self.dismiss(None)
        self.console.switch_context(name)

    def action_close(self) -> None:
        self.dismiss(None)


class CommandPrompt(ModalScreen[None]):
    """The `:` line of k9s: ctx, ctx NAME, or a view's name."""

    BINDINGS = [bindings.CONTEXTS[1]]

    def __init__(self) -> None:
        super().__init__(classes="dialog")

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box", id="command-box"):
            yield Input(placeholder="ctx · ctx NAME · nodes, layout, preview, run, runs, bench", id="command")
            yield Static("", id="command-error", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted, "#command")
    def run_command(self, event: Input.Submitted) -> None:
        words = event.value.split()
        views = dict(self.console.views)
        if not words:
            self.dismiss(None)
            return
        verb, rest = words[0].lower().lstrip(":"), words[1:]
        if verb in ("ctx", "context", "contexts"):
            self.dismiss(None)
            if rest:
                self.console.switch_context(rest[0])
            else:
                self.app.push_screen(ContextScreen())
            return
        if verb in views and not rest:
            self.dismiss(None)
            self.app.call_later(self.app.run_action, f"view('{verb}')")
            return
        self.query_one("#command-error", Static).update(
            Text(f"unknown command {event.value.strip()!r}: ctx, ctx NAME, or one of {', '.join(views)}"))

    def action_close(self) -> None:
        self.dismiss(None)
