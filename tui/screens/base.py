"""What the design views (Nodes, Layout, Preview; later Run) share: the context bar, and a
redraw whenever the App's assessment changed (its `version` reactive) since the view last drew it:
at once when the view is on top, on resume when it was hidden (a hidden view does not redraw)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from rich.style import Style
from textual import events
from textual._context import active_app
from textual.screen import Screen

from ..compositor import TightCompositor
from ..widgets.context_bar import ContextBar

if TYPE_CHECKING:
    from ..protocols import Console


class ViewScreen(Screen):
    """A view of the App's modes (1-6). Shown again, Textual re-applies the stylesheet to every widget of the
    view (ScreenResume.refresh_styles): at 128 nodes that was about a third of a switch's CPU, and nothing
    had changed. A widget's own class changes are styled as they happen, also on a hidden view, and a new
    stylesheet or theme is applied by switch_mode itself before the resume; what only the resume catches is
    a change of the App's own classes and pseudo-classes (focus, blur, dark, ...) while the view was hidden.
    So the view notes those when it is hidden, and lets the resume re-apply its styles only if they changed.

    A view shown again also ends Textual's 50 ms repaint hold of a switch as soon as its resume is handled
    (ConsoleApp.delay_update).

    A view made while the App's stylesheet is current starts as styled by it. Textual refreshes the whole
    stylesheet (every source parsed again, every widget restyled) when it shows a view whose CSS count is not
    the App's, and a new Screen starts at -1: each view's first switch refreshed it twice (once for the view
    it left, once for itself), and the run view, not yet mounted then, a third time when next shown. Keys
    while 128 nodes start waited 47-68 ms for that one (scale_console.py). Its widgets are styled as they
    mount, with the stylesheet as it is then; a theme changed while the view is hidden still refreshes it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        app = active_app.get(None)
        if app is not None and getattr(app, "css_current", False):
            self._css_update_count = app._css_update_count  # (Textual's private count, see above)
        self._compositor = TightCompositor()  # a frame draws only the widgets its changes touch
        self._app_styled_as: tuple | None = None  # the App's classes when this view was hidden
        self.frames_s = 0.0  # wall time of this view's frames so far (_on_timer_update)

    def _on_timer_update(self) -> None:
        # Textual's frame: layout if asked, the widgets' lines, the update handed to the terminal's writer. Its
        # wall time is summed, for a view that spaces its own redraws by what drawing costs (the run view). This
        # overrides Textual's private Screen._on_timer_update: if an upgrade renames it, frames_s stays 0 and
        # tests/tui/test_run_frames_share.py fails
        started = time.perf_counter()
        try:
            super()._on_timer_update()
        finally:
            self.frames_s += time.perf_counter() - started

    def _app_style_key(self) -> tuple:
        return frozenset(self.app.pseudo_classes), frozenset(self.app.classes)

    def on_screen_suspend(self) -> None:
        self._app_styled_as = self._app_style_key()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        # (this runs after the view's own handler, which redraws it, and before Screen's, which reads the
        # flag: handlers go down the class tree)
        if event.refresh_styles and self._app_styled_as == self._app_style_key():
            event.refresh_styles = False
        if self._app_styled_as is not None:  # shown before, so composed: drawn once this resume is handled
            self.call_later(cast("Console", self.app).end_switch_hold)


class DesignScreen(ViewScreen):
    VIEW = ""  # the App mode this screen is shown in
    # Colours of severities and roles, from the theme's variables (read with `color`).
    COMPONENT_CLASSES = {"design--error", "design--warning", "design--ok", "design--prefill", "design--decode",
                         "design--worker", "design--router"}
    DEFAULT_CSS = """
    DesignScreen > .design--error { color: $text-error; }
    DesignScreen > .design--warning { color: $text-warning; }
    DesignScreen > .design--ok { color: $text-success; }
    DesignScreen > .design--prefill { color: $text-accent; }
    DesignScreen > .design--decode { color: $text-primary; }
    DesignScreen > .design--worker { color: $text-primary; }
    DesignScreen > .design--router { color: $text-success; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.stale = True  # the App's version changed since the last draw

    def on_mount(self) -> None:
        self.watch(self.app, "version", self._version_changed, init=False)

    def _version_changed(self) -> None:
        was_stale, self.stale = self.stale, True
        if self.console.design_screen is self and not was_stale:  # a burst of changes: one redraw, after it
            self.call_later(self.sync)

    @property
    def console(self) -> Console:
        """The App, as the protocol it hands down to the views (protocols.py)."""
        return cast("Console", self.app)

    def on_screen_resume(self) -> None:
        self.sync()

    def sync(self) -> None:
        """Redraw from the App's state if it changed since the last draw (cheap when it did not)."""
        app = self.console
        if not self.stale or not self.is_mounted:
            return
        self.stale = False
        self.query_one(ContextBar).show(app.views, self.VIEW, app.assessment, app.design.recipe.name,
                                        app.workspace.cluster.name, app.readonly,
                                        edited=app.design.recipe != app.workspace.recipe)
        self.render_design()

    def color(self, name: str) -> Style:
        """A severity's or a role's colour (no colour for anything else)."""
        return self.get_component_rich_style(f"design--{name}", partial=True, default=Style())

    def render_design(self) -> None:
        """Draw the view from `self.console.assessment` and friends."""

    def inventory_refreshed(self) -> None:
        """A refresh found nothing new; views that show the refresh time update it."""


def can_draw(screen: Screen) -> bool:
    """A pulse is handled by the app's loop, which waits for no screen: a screen just pushed is on the
    stack before it is composed and mounted (its on_mount loads what it shows), and while the app quits
    (exit, or a test's shutdown) its screens are taken apart, children first, with pulses still coming.
    Such a screen is not drawn: mounted, its own loop running, and the app neither exiting nor shut down."""
    return screen.is_mounted and screen.is_running and screen.is_attached and screen.app.is_running
