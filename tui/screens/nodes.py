"""Nodes: the cluster's inventory; pick nodes (rank order), filter, auto-pick, override."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import Input, Static

from ...core.design.plan import nodes_needed
from .. import bindings
from ..palette import ICONS
from ..widgets.context_bar import ContextBar
from ..widgets.findings import FindingsView
from ..widgets.footer import QuietFooter
from ..widgets.node_table import NodeTable
from .base import DesignScreen
from .dialogs import ConfirmDialog, InputDialog
from .typeahead import TypeAhead


class NodesScreen(TypeAhead, DesignScreen):
    TYPEAHEAD = ("slash", "#filter", "filter")
    VIEW = "nodes"
    BINDINGS = bindings.NODES

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""
        self.status: Text = Text("")

    def compose(self) -> ComposeResult:
        yield ContextBar()
        yield Static("", id="nodes-summary")
        yield Input(placeholder="filter nodes: name, address, state, reason, role …", id="filter", compact=True)
        yield NodeTable(id="node-table")
        yield Static("", id="nodes-status")
        yield FindingsView(id="nodes-findings")
        yield QuietFooter()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one(NodeTable).focus()
        self.set_interval(2.0, self._gpus_changed)  # the run's GPU readings come every 5-16 s
        self.console.node_gpus.on_change = self._gpus_changed  # (its own readings: drawn as each ends)
        self.console.node_gpus.want()

    def on_screen_resume(self) -> None:  # (Textual also runs DesignScreen's: handlers go down the class tree)
        self._gpus_changed()  # readings that came while another view was shown: drawn now, not at the next check
        self.console.node_gpus.want()  # (once its last reading is STALE_S old)

    def action_read_gpus(self) -> None:
        if self.console.node_gpus.want(force=True):  # (the summary says it is reading; the 2 s check redraws)
            self.query_one("#nodes-summary", Static).update(self._summary())

    def _run_gpus(self) -> dict:
        """Each node's GPUs: the attached run's readings of its nodes over the Nodes view's own (node_gpus.py)."""
        app = self.console
        live = app.live
        mine = app.node_gpus.shown(app.workspace.cluster.name)
        return {**mine, **live.run.state.gpus} if live is not None else mine

    def _gpus_changed(self) -> None:
        gpus = self._run_gpus()
        mark = (self.console.node_gpus.version, *((n, g.since) for n, g in gpus.items()))
        if mark != getattr(self, "_gpu_mark", ()) and self.is_current:
            self._gpu_mark = mark
            self.render_design()

    @property
    def table(self) -> NodeTable:
        return self.query_one(NodeTable)

    def render_design(self) -> None:
        app = self.console
        ws = app.workspace
        self.table.show(ws.inventory, ws.cluster, app.design, app.assessment, self.filter_text, self._run_gpus())
        self.query_one("#nodes-summary", Static).update(self._summary())
        self._show_status()
        self.query_one(FindingsView).show(app.assessment.findings)

    def inventory_refreshed(self) -> None:
        """(called only when this view can draw: see ConsoleApp.design_screen)"""
        self.query_one("#nodes-summary", Static).update(self._summary())

    def _summary(self) -> Text:
        app = self.console
        ws, design, a = app.workspace, app.design, app.assessment
        verdicts = self.table.verdicts
        need = nodes_needed(design.recipe)
        out = Text()
        usable = sum(1 for v in verdicts.values() if not v)
        out.append(f"{len(ws.inventory)} nodes, {usable} usable", style="bold")
        shape = a.plan.shape if a.plan else design.recipe.name
        needs = " + ".join(f"{n} {role}" for role, n in need.items())
        out.append(f" · {shape} needs {sum(need.values())} ({needs})")
        out.append(" · picked: ")
        out.append("auto (core picks)" if design.auto else f"{len(design.nodes)} by hand",
                   style="bold")
        out.append("\n")
        out.append(app.inventory_status() + " · " + app.node_gpus.status(ws.cluster.name), style="dim")
        flags = [f"{n}: {ns.flag()}" for n, ns in sorted(self._run_gpus().items()) if ns.flag()]
        for line in flags[:3]:  # memory held by no process of the run (issue 42; ROCm/ATOM #1511)
            out.append("\n▲ " + line, style="bold")
        if len(flags) > 3:
            out.append(f"\n▲ and {len(flags) - 3} more nodes whose GPUs hold memory", style="bold")
        return out

    # -- filter -------------------------------------------------------------------------------
    def action_filter(self) -> None:
        self.typeahead_open(self.query_one("#filter", Input))

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if not box.display and not self.filter_text:
            return
        box.value = ""
        box.display = False
        self.typeahead_closed()
        self.filter_text = ""
        self._redraw_table()
        self.table.focus()

    @on(Input.Changed, "#filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._redraw_table()

    @on(Input.Submitted, "#filter")
    def filter_submitted(self) -> None:
        self.table.focus()

    def _redraw_table(self) -> None:
        app = self.console
        self.table.show(app.workspace.inventory, app.workspace.cluster, app.design, app.assessment,
                        self.filter_text, self._run_gpus())

    def on_virtual_table_row_highlighted(self, event: NodeTable.RowHighlighted) -> None:
        node = event.key
        verdict = self.table.verdicts.get(node or "", "")
        if node and verdict and node not in self.console.design.overrides:
            self._say("warning", f"{node} is not usable: {verdict} (o overrides)")

    # -- picking ------------------------------------------------------------------------------
    def _say(self, severity: str, text: str) -> None:
        self.status = Text(f"{ICONS[severity]} {text}", style=self.color(severity))
        self._show_status()

    def _show_status(self) -> None:
        box = self.query_one("#nodes-status", Static)
        box.update(self.status)
        box.set_class(not self.status.plain, "-empty")

    def action_toggle(self) -> None:
        node = self.table.current
        if node is None:
            return
        app = self.console
        verdict = self.table.verdicts.get(node, "")
        if verdict and node not in app.design.overrides:
            msg = f"{node} cannot be picked: {verdict}. Press o to override if you know it is fine."
            self._say("error", msg)
            self.notify(msg, title="Node not usable", severity="warning")
            return
        picked = node not in app.design.nodes
        app.set_design(app.design.toggle(node))
        rank = app.design.nodes.index(node) + 1 if picked else 0
        self._say("ok", f"picked {node} as #{rank}" if picked else f"unpicked {node}")

    def action_auto(self) -> None:
        app = self.console
        app.set_design(app.design.auto_pick())
        self._say("ok", "auto-pick: core chooses usable nodes for the layout")

    def action_override(self) -> None:
        node = self.table.current
        if node is None:
            return
        app = self.console
        verdict = self.table.verdicts.get(node, "")
        if node in app.design.overrides:
            app.set_design(app.design.override(node, on=False))
            self._say("ok", f"override of {node} withdrawn; it is no longer picked")
            return
        if not verdict:
            self._say("ok", f"{node} is usable; no override needed (space picks it)")
            return

        def done(yes: bool | None) -> None:
            if yes:
                app.set_design(app.design.override(node))
                self._say("warning", f"{node} overridden and picked although it is {verdict}")

        self.app.push_screen(ConfirmDialog(
            f"Use {node} anyway?",
            f"{node} is {verdict}.\n\nA launch on it may hang or fail. The override stays listed as a "
            f"warning until you withdraw it (o again).", yes="Override"), done)

    def action_add_names(self) -> None:
        app = self.console
        listed = {n.name for n in app.workspace.inventory if n.source != "offline"}

        def done(text: str | None) -> None:
            if not text:
                return
            names = [n.strip() for n in text.replace(" ", ",").split(",") if n.strip()]
            app.add_named_nodes(names)
            new = [n for n in names if n not in listed]
            if listed and new:
                self._say("warning", f"added by name: {', '.join(new)}. The cluster does not list "
                          f"{'them' if len(new) > 1 else 'it'}: state, GPUs and address are not checked; "
                          "space picks, as for any node")

        if listed:
            title, prompt = "Add a node by name", (
                "Add a node the cluster does not list (comma-separated for several). Its state, GPUs and "
                "address are not checked: a launch on it may fail.")
        else:
            title, prompt = "Plan by node name", (
                "No inventory could be read. Name the nodes to plan on (comma-separated, rank order); their "
                "states are not checked.")
        self.app.push_screen(InputDialog(title, prompt, placeholder="mia1-p01-g01,mia1-p01-g02"), done)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "add_names":
            return self.console.can_add_names
        return True
