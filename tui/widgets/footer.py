"""The key bar at the bottom of every view, rebuilt only when what it shows changed.

Textual's Footer takes itself apart and mounts its keys again whenever the screen says its bindings may have
changed: a focus move, a `refresh_bindings()`, a screen shown again. Each rebuild mounts a few dozen widgets and
so re-lays the whole screen out; at 128 nodes a layout pass of the run view costs 50-250 ms on this machine, and
the run view's first second held five of them (traced with a hook on Screen._refresh_layout, issue 19), with the
operator's first keys waiting behind them. Almost always the keys shown are the same: this footer compares what
it would show with what it shows, and rebuilds only on a difference."""

from __future__ import annotations

from textual.screen import ModalScreen
from textual.widgets import Footer


class QuietFooter(Footer):
    """A Footer that rebuilds only when the keys it shows (key, its display, description, action, enabled,
    tooltip, group) or its command-palette key changed. `rebuilds` counts rebuilds (tests)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple | None = None
        self.rebuilds = 0

    def _visible(self) -> bool:
        """Its view is on top, or under dialogs only (dimmed below them, its keys as a dialog leaves them)."""
        stack = self.app.screen_stack
        mine = self.screen
        if mine not in stack:  # the view of another mode
            return False
        return all(isinstance(s, ModalScreen) for s in stack[stack.index(mine) + 1:])

    def _what_it_shows(self) -> tuple:
        app = self.app
        shown = []
        for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items():
            if binding.show or key == app.COMMAND_PALETTE_BINDING:
                group = binding.group
                shown.append((key, app.get_key_display(binding), binding.description, binding.action, enabled,
                              tooltip, binding.tooltip, group.description if group else None,
                              group.compact if group else None))
        return (self.show_command_palette, app.ENABLE_COMMAND_PALETTE, tuple(shown))

    async def recompose(self) -> None:
        if not self.is_attached or not self._bindings_ready:
            await super().recompose()
            return
        if not self._visible():  # a view shown or hidden asks every view's footer (Screen.stack_updates); a
            return  # hidden view's keys are taken when it is shown again, which asks once more
        shown = self._what_it_shows()
        if shown == self._shown:
            return
        self._shown = shown
        self.rebuilds += 1
        await super().recompose()
