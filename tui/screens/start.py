"""Open: choose the cluster and the recipe (shipped ones listed; a name or a path is accepted)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from rich.console import Group
from rich.padding import Padding
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option, OptionDoesNotExist

from ...core.config.errors import AtomdeckError, ConfigError
from ...core.config.paths import shipped_clusters, shipped_recipes
from .. import bindings
from ..widgets.footer import QuietFooter
from .typeahead import TypeAhead

if TYPE_CHECKING:
    from ..protocols import Console


def _describe(path: Path) -> str:
    """The file's description line, read without validating (validation happens on open)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "(cannot be read)"
    return str(data.get("description", "")) if isinstance(data, dict) else ""


class StartScreen(TypeAhead, Screen[bool]):
    """Dismissed with True once a design was opened, False on cancel."""

    BINDINGS = bindings.START
    OVERLAY = True  # the app's keys that change the design underneath are off while it is up

    def __init__(self, cluster: str | None = None, recipe: str | None = None, error: str = "",
                 clusters: list[Path] | None = None, recipes: list[Path] | None = None) -> None:
        """clusters/recipes: the files to list (default: the shipped ones)."""
        super().__init__()
        self.cluster, self.recipe, self.error = cluster, recipe, error
        self.clusters = shipped_clusters() if clusters is None else clusters
        self.recipes = shipped_recipes() if recipes is None else recipes

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("atomdeck", "bold"), " · open a deployment design: pick a cluster "
                                   "and a recipe, or type a name or a path to a .yaml file"), id="start-title")
        with Horizontal(id="start-lists"):
            with Vertical(classes="start-col"):
                yield Label("Cluster", classes="start-label")
                yield OptionList(*self._options(self.clusters), id="clusters")
                yield Input(self.cluster or "", placeholder="cluster name or path", id="cluster-input",
                            select_on_focus=False)
            with Vertical(classes="start-col"):
                yield Label("Recipe", classes="start-label")
                yield OptionList(*self._options(self.recipes), id="recipes")
                yield Input(self.recipe or "", placeholder="recipe name or path", id="recipe-input",
                            select_on_focus=False)
        yield Static(Text(self.error), id="start-error")
        yield QuietFooter()

    @staticmethod
    def _options(paths: list[Path]) -> list[Option]:
        out = []
        for p in paths:
            desc = _describe(p)
            name = Text(p.stem, style="bold")
            # the description under the name, indented also where it wraps
            line = Group(name, Padding(Text(desc, style="dim"), (0, 0, 0, 2))) if desc else name
            out.append(Option(line, id=p.stem))
        return out

    def on_mount(self) -> None:
        for list_id, value in (("#clusters", self.cluster), ("#recipes", self.recipe)):
            ol = self.query_one(list_id, OptionList)
            try:
                ol.highlighted = ol.get_option_index(value) if value else 0
            except OptionDoesNotExist:  # a path or an unknown name: leave the list alone
                ol.highlighted = 0
        self.query_one("#clusters" if not self.cluster else "#recipes", OptionList).focus()

    def on_key(self, event) -> None:
        """Typing on a list types into the name box under it (the Open screen owns its keys): the first key
        opens the box in place of its name; the keys typed (or pasted) before focus lands on it are put
        after it, never lost (TypeAhead)."""
        focused = self.focused
        if not isinstance(focused, OptionList) or not event.is_printable or not event.character:
            return
        box = self.query_one("#cluster-input" if focused.id == "clusters" else "#recipe-input", Input)
        if self.typeahead_opening() is not box:
            self.typeahead_open(box)
        self.typeahead_put(event)

    @on(OptionList.OptionSelected, "#clusters")
    def cluster_selected(self, event: OptionList.OptionSelected) -> None:
        self.query_one("#cluster-input", Input).value = event.option.id or ""
        self.query_one("#recipes", OptionList).focus()

    @on(OptionList.OptionSelected, "#recipes")
    def recipe_selected(self, event: OptionList.OptionSelected) -> None:
        self.query_one("#recipe-input", Input).value = event.option.id or ""
        self.action_open()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_open()

    def action_open(self) -> None:
        cluster = self.query_one("#cluster-input", Input).value.strip() or "local"
        recipe = self.query_one("#recipe-input", Input).value.strip()
        err = self.query_one("#start-error", Static)
        if not recipe:
            err.update(Text("choose a recipe (Enter on the list, or type a name or a path)"))
            return
        try:
            self.console.open_workspace(recipe, cluster)
        except ConfigError as e:
            err.update(Text("the configuration has problems:\n" + "\n".join(f"  {i}" for i in e.issues)))
            return
        except AtomdeckError as e:
            err.update(Text(str(e)))
            return
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
