"""Layout: worker counts, TP, DP attention, EP, ports and router policy; nodes per role by hand;
the picture of the plan; lint findings as you edit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from ...core.config.errors import ConfigIssue
from ...core.design.draft import apply_edits
from .. import bindings
from ..palette import ICONS
from ..widgets.context_bar import ContextBar
from ..widgets.findings import FindingsView
from ..widgets.footer import QuietFooter
from ..widgets.layout_picture import LayoutPicture
from ..widgets.recipe_form import RecipeForm
from .base import DesignScreen


class LayoutScreen(DesignScreen):
    VIEW = "layout"
    BINDINGS = bindings.LAYOUT

    def __init__(self) -> None:
        super().__init__()
        self.drafts: dict[str, Any] = {}  # edits core refused, kept as typed
        self.issues: dict[str, list[ConfigIssue]] = {}
        self._workspace = None
        self._follow: str | None = None

    def compose(self) -> ComposeResult:
        yield ContextBar()
        with Horizontal(id="layout-main"):
            yield RecipeForm(self.console.design.recipe, id="form")
            with Vertical(id="layout-right"):
                with VerticalScroll(id="picture-scroll", can_focus=False):
                    yield LayoutPicture(id="picture")
                yield Static("", id="layout-status")
                with VerticalScroll(id="layout-findings-scroll"):
                    yield FindingsView(id="layout-findings")
        yield QuietFooter()

    def on_mount(self) -> None:
        self.query_one(LayoutPicture).focus()

    @property
    def picture(self) -> LayoutPicture:
        return self.query_one(LayoutPicture)

    def render_design(self) -> None:
        app = self.console
        if self._workspace is not app.workspace:  # another recipe was opened: forget drafts
            self._workspace, self.drafts, self.issues = app.workspace, {}, {}
        self.query_one(RecipeForm).load(app.design.recipe, self.drafts, self.issues)
        self.picture.show(app.assessment, app.design, app.workspace.inventory, app.workspace.cluster)
        if self._follow:
            self.picture.select(self._follow)
            self._follow = None
        self.query_one(FindingsView).show(app.assessment.findings)

    def _say(self, severity: str, text: str) -> None:
        self.query_one("#layout-status", Static).update(
            Text(f"{ICONS[severity]} {text}", style=self.color(severity)))

    # -- edits go to core -----------------------------------------------------------------------
    def on_recipe_form_edited(self, event: RecipeForm.Edited) -> None:
        self._edit({event.path: event.value})

    def _edit(self, edits: dict[str, Any]) -> None:
        app = self.console
        pending = {**edits, **{p: v for p, v in self.drafts.items() if p not in edits}}
        recipe, issues = apply_edits(app.design.recipe, pending)
        self.drafts = {p: pending[p] for p in issues}
        self.issues = issues
        if recipe != app.design.recipe:
            app.set_design(replace(app.design, recipe=recipe))
        else:
            self.query_one(RecipeForm).load(app.design.recipe, self.drafts, self.issues)

    # -- nodes to roles -------------------------------------------------------------------------
    def action_assign(self, role: str) -> None:
        app = self.console
        node = self.picture.current
        if node is None:
            self._say("warning", "no node to assign: pick nodes first (1 Nodes)")
            return
        try:
            design = app.design.assign(node, role, app.assessment.selection)
        except ValueError as e:
            self._say("warning", str(e))
            return
        self._follow = node
        app.set_design(design)
        self._say("ok", f"{node} now serves {role}")

    def action_router_here(self) -> None:
        node = self.picture.current
        if node is None:
            return
        recipe = self.console.design.recipe
        target = None if recipe.router.node == node else node
        self._follow = node
        self._edit({"router.node": target})
        self._say("ok", f"router pinned to {node} (router.node)" if target
                  else "router.node cleared: the router runs on the first prefill node")

    def action_auto(self) -> None:
        app = self.console
        app.set_design(app.design.auto_pick())
        self._say("ok", "auto-pick: core chooses usable nodes for the layout")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("assign", "router_here", "auto") and self._in_form():
            return False  # a letter typed in a form field is the field's, never a node move
        if action == "assign":  # roles to swap exist only in a disaggregated layout
            return self.console.design.recipe.mode == "disagg"
        return True

    def _in_form(self) -> bool:
        focused = self.focused
        return focused is not None and any(isinstance(w, RecipeForm) for w in focused.ancestors_with_self)

    def action_form(self) -> None:
        self.query_one("#f-mode").focus()

    def action_leave_form(self) -> None:
        self.picture.focus()
