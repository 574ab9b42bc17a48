"""Small modal dialogs: confirm (safe choice focused), ask for a line of text, show a message."""

from __future__ import annotations

from typing import ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from .. import bindings


class ConfirmDialog(ModalScreen[bool]):
    """Yes/no. The safe choice (No) has the focus, so Enter alone never does the risky thing."""

    BINDINGS = bindings.DIALOG

    def __init__(self, title: str, message: RenderableType, yes: str = "Yes", no: str = "Cancel",
                 danger: bool = True) -> None:
        super().__init__(classes="dialog")
        self.title_text, self.message, self.yes_label, self.no_label = title, message, yes, no
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static(Text(self.title_text), classes="dialog-title")
            with VerticalScroll(classes="dialog-scroll"):  # a long teardown plan scrolls; the buttons stay
                yield Static(_plain(self.message), classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.yes_label} (y)", id="yes", variant="error" if self.danger else "primary")
                yield Button(f"{self.no_label} (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed, "#yes")
    def action_yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def action_no(self) -> None:
        self.dismiss(False)


class InputDialog(ModalScreen[str | None]):
    """Ask for one line (a path, node names); Enter accepts, Esc cancels."""

    BINDINGS: ClassVar = [bindings.DIALOG[1]]

    def __init__(self, title: str, prompt: str, default: str = "", placeholder: str = "") -> None:
        super().__init__(classes="dialog")
        self.title_text, self.prompt, self.default, self.placeholder = title, prompt, default, placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static(Text(self.title_text), classes="dialog-title")
            yield Static(_plain(self.prompt), classes="dialog-body")
            yield Input(self.default, placeholder=self.placeholder, id="answer")
            yield Static("enter to accept · esc to cancel", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#answer", Input).focus()

    @on(Input.Submitted, "#answer")
    def accept(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_no(self) -> None:
        self.dismiss(None)


class MessageDialog(ModalScreen[None]):
    """A titled message (e.g. why launch is blocked); any of Enter/Esc closes it."""

    BINDINGS: ClassVar = [bindings.DIALOG[1]]

    def __init__(self, title: str, body: RenderableType) -> None:
        super().__init__(classes="dialog")
        self.title_text, self.body = title, body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static(Text(self.title_text), classes="dialog-title")
            with VerticalScroll(classes="dialog-scroll"):
                yield Static(_plain(self.body), classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button("OK", id="ok", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#ok", Button).focus()

    @on(Button.Pressed, "#ok")
    def action_no(self) -> None:
        self.dismiss(None)


def _plain(body: RenderableType) -> RenderableType:
    """Text as given: node names and paths are never read as markup."""
    return Text(body) if isinstance(body, str) else body
