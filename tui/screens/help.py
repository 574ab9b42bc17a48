"""Help: every key binding with its id (the name to use in keymap.yaml) and what it does."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from .. import bindings


class HelpScreen(ModalScreen[None]):
    BINDINGS = bindings.HELP

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box", id="help-box"):
            yield Static("Keys", classes="dialog-title")
            yield DataTable(id="help-table", cursor_type="row", zebra_stripes=True)
            yield Static(Text(f"Remap a key by its id in {bindings.keymap_path()}  (e.g.  launch: ctrl+g)"),
                         classes="dialog-hint")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("WHERE", "KEY", "ID", "WHAT")
        views = dict(getattr(self.app, "views", []))
        for scope, group in bindings.SCOPES.items():
            for b in group:
                if b.action.startswith("view(") and b.action[6:-2] not in views \
                        and b.action[6:-2] not in getattr(self.app, "MODES", {}):
                    continue  # a view that is not there (yet)
                table.add_row(scope, self.keys_of(b), b.id or "", b.description)
        table.add_row("Everywhere", self.app.get_key_display(Binding(self.app.COMMAND_PALETTE_BINDING, "")),
                      "(textual)", "Command palette: views, open, export, save, themes …")
        table.focus()

    def keys_of(self, b: Binding) -> str:
        """The key(s) in effect, after the user's keymap."""
        keys = getattr(self.app, "keymap", {}).get(b.id or "", b.key)
        return ", ".join(self.app.get_key_display(replace(b, key=k.strip(), key_display=None))
                         for k in keys.split(","))

    def action_close(self) -> None:
        self.dismiss(None)
