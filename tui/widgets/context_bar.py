"""The top line of every view (k9s-style): the views with their keys, the context (the cluster shown, marked
when it does not answer: the App's `context_line`), and what is being designed or watched: recipe, cluster,
layout shape, lint status, read-only."""

from __future__ import annotations

from textual.containers import Horizontal
from textual.markup import escape
from textual.widgets import Static

from ...core.design.lint import Assessment
from ..palette import ICONS
from .findings import summary
from .quiet import update_quietly

SEVERITY_VAR = {"error": "$text-error", "warning": "$text-warning", "ok": "$text-success"}


class ContextBar(Horizontal):
    DEFAULT_CLASSES = "context-bar"

    def compose(self):
        yield Static("", id="tabs")
        yield Static("", id="ctx")
        yield Static("", id="context")

    def show_context(self) -> None:
        """The context: which cluster this console shows (every view has it; switch with `:ctx`)."""
        update_quietly(self.query_one("#ctx", Static), getattr(self.app, "context_line", ""))

    def show_tabs(self, views: list[tuple[str, str]], current: str) -> None:
        tabs = []
        for i, (mode, title) in enumerate(views, 1):
            style = "reverse bold $accent" if mode == current else "$text-muted"
            tabs.append(f"[@click=app.view('{mode}')][{style}] {i} {title} [/][/]")
        update_quietly(self.query_one("#tabs", Static), " ".join(tabs))
        self.show_context()

    def show_run(self, views: list[tuple[str, str]], current: str, context: str, readonly: bool) -> None:
        """The run views' bar: the same tabs, then `context` (markup, already escaped)."""
        self.show_tabs(views, current)
        if readonly:
            context += " · [reverse $text-warning] READ-ONLY [/]"
        update_quietly(self.query_one("#context", Static), context)

    def show(self, views: list[tuple[str, str]], current: str, assessment: Assessment | None,
             recipe: str, cluster: str, readonly: bool, edited: bool = False) -> None:
        self.show_tabs(views, current)
        ctx = f"[b]{escape(recipe)}[/b]" + (" [$text-warning](edited)[/]" if edited else "")
        ctx += f" on [b]{escape(cluster)}[/b]"
        if assessment is not None:
            if assessment.plan is not None:
                ctx += f" · {escape(assessment.plan.shape)}"
            sev, text = summary(assessment.findings)
            ctx += f" · [{SEVERITY_VAR[sev]}]{ICONS[sev]} {text}[/]"
        if readonly:
            ctx += " · [reverse $text-warning] READ-ONLY [/]"
        update_quietly(self.query_one("#context", Static), ctx)
