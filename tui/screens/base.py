"""What the design views (Nodes, Layout, Preview; later Run) share: the context bar, and a
redraw whenever the App's assessment changed since the view last drew it."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.screen import Screen

from ..widgets.context_bar import ContextBar

if TYPE_CHECKING:
    from ..app import ConsoleApp


class DesignScreen(Screen):
    VIEW = ""  # the App mode this screen is shown in

    def __init__(self) -> None:
        super().__init__()
        self.shown_version = -1

    @property
    def console(self) -> ConsoleApp:
        return cast("ConsoleApp", self.app)

    def on_screen_resume(self) -> None:
        self.sync()

    def sync(self) -> None:
        """Redraw from the App's state if it changed since the last draw (cheap when it did not)."""
        app = self.console
        if self.shown_version == app.version or not self.is_mounted:
            return
        self.shown_version = app.version
        self.query_one(ContextBar).show(app.views, self.VIEW, app.assessment, app.design.recipe.name,
                                        app.workspace.cluster.name, app.readonly,
                                        edited=app.design.recipe != app.workspace.recipe)
        self.render_design()

    def render_design(self) -> None:
        """Draw the view from `self.console.assessment` and friends."""

    def inventory_refreshed(self) -> None:
        """A refresh found nothing new; views that show the refresh time update it."""
