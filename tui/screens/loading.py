"""The console's first frame when started from the command line: the views' tabs and what is being
opened, drawn before the recipe and cluster are read and validated (pydantic, YAML, the lint and
command modules: ~0.3 s of CPU here). The App replaces it with the Nodes view once they are loaded
(ConsoleApp.defer). Light on purpose: it imports nothing from core or from the design views."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import Static


def tabs_markup(views: list[tuple[str, str]], current: str) -> str:
    """The views with their keys, as the design views' context bar draws them (widgets/context_bar.py)."""
    tabs = []
    for i, (mode, title) in enumerate(views, 1):
        style = "reverse bold $accent" if mode == current else "$text-muted"
        tabs.append(f"[@click=app.view('{mode}')][{style}] {i} {title} [/][/]")
    return " ".join(tabs)


class LoadingScreen(Screen):
    """The context bar of the Nodes view with 'reading ...', and nothing else."""

    def __init__(self, views: list[tuple[str, str]], recipe: str, cluster: str) -> None:
        super().__init__(id="_default")  # App.get_default_screen's screen: the first mode's base
        self.views, self.recipe, self.cluster = views, recipe, cluster

    def compose(self) -> ComposeResult:
        with Horizontal(classes="context-bar"):
            yield Static(tabs_markup(self.views, "nodes"), id="tabs")
            yield Static(f"[b]{escape(self.recipe)}[/b] on [b]{escape(self.cluster)}[/b] · reading …",
                         id="context")
