"""Preview: every process of the plan, per node, exactly as it will run; copy one command,
export the whole launch as a script, save the edited recipe, launch."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ...core.design.commands import ProcessSpec
from .. import bindings
from ..palette import ICONS
from ..widgets.command_view import CommandView
from ..widgets.context_bar import ContextBar
from ..widgets.findings import summary
from ..widgets.footer import QuietFooter
from .base import DesignScreen


class PreviewScreen(DesignScreen):
    VIEW = "preview"
    BINDINGS = bindings.PREVIEW

    def __init__(self) -> None:
        super().__init__()
        self.current: str | None = None  # the process shown

    def compose(self) -> ComposeResult:
        yield ContextBar()
        yield Static("", id="preview-summary")
        with Horizontal(id="preview-main"):
            yield OptionList(id="procs")
            yield CommandView(id="command")
        yield QuietFooter()

    def on_mount(self) -> None:
        self.query_one("#procs", OptionList).focus()

    @property
    def processes(self) -> dict[str, ProcessSpec]:
        return {p.name: p for p in self.console.assessment.processes}

    def render_design(self) -> None:
        a = self.console.assessment
        self.query_one("#preview-summary", Static).update(self._summary())
        procs = self.query_one("#procs", OptionList)
        options: list[Option] = []
        if a.plan is not None:
            for node in a.plan.nodes:
                label = node.name if node.addr in ("", node.name) else f"{node.name} · {node.addr}"
                options.append(Option(Text(label, style="bold"), disabled=True))
                for p in a.processes:
                    if p.node == node.name:
                        line = Text("  ")
                        line.append(p.name, style=Style(bold=True) + self.color(p.role))
                        line.append(f" :{p.ports[0]}" if p.ports else "", style="dim")
                        options.append(Option(line, id=p.name))
        procs.set_options(options)
        names = [p.name for p in a.processes]
        if self.current not in names:
            self.current = names[0] if names else None
        if self.current:
            procs.highlighted = procs.get_option_index(self.current)
        self._show_current()

    def _summary(self) -> Text:
        app = self.console
        a = app.assessment
        sev, text = summary(a.findings)
        out = Text()
        if a.plan is None:
            out.append(f"{ICONS['error']} no plan, nothing to preview: {text}", style=self.color("error"))
            out.append(" — fix them on 2 Layout / 1 Nodes")
            return out
        out.append(f"{len(a.processes)} processes on {len(a.plan.nodes)} nodes", style="bold")
        out.append(f" · launcher {a.cluster.launcher}")
        if a.cluster.container.runtime != "none":
            out.append(f" · container {a.cluster.container.runtime} {a.recipe.image or ''}")
        out.append(" · ")
        out.append(f"{ICONS[sev]} {text}", style=self.color(sev))
        if app.readonly:
            out.append(" · read-only: launch disabled", style="dim")
        elif sev == "error":
            out.append(" · launch blocked", style="dim")
        else:
            out.append(" · secrets masked · c copies a command", style="dim")
        return out

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.current = event.option.id
            self._show_current()

    def _show_current(self) -> None:
        view = self.query_one(CommandView)
        a = self.console.assessment
        empty = "no plan yet: the findings on 2 Layout say what to change" if a.plan is None else "no process"
        view.show(self.processes.get(self.current or ""), empty=empty)

    def action_copy(self) -> None:
        view = self.query_one(CommandView)
        if view.process is None:
            self.notify("nothing to copy: there is no plan yet", severity="warning")
            return
        self.app.copy_to_clipboard(view.launch_line)
        self.notify(f"copied the launch command of {view.process.name} ({len(view.launch_line)} chars, "
                    "secrets masked)", title="Copied")
