"""One process exactly as it will run: engine argv, environment (secrets masked), the container
and launcher wrappers, and the KV-transfer config pretty-printed."""

from __future__ import annotations

import json

from rich.console import Group, RenderableType
from rich.json import JSON
from rich.style import Style
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...core.design.commands import ProcessSpec, shell_line
from ..formatting import argv_groups, argv_lines, kv_transfer_config, port_ranges

CONTINUE = " \\\n    "


def command_text(argv: list[str], width: int | None = None) -> str:
    """A multi-line shell command (backslash continuations) that runs exactly `argv`. With a width,
    a line that would not fit is broken between arguments (never inside one), with a trailing backslash,
    so a block copied with the mouse is still one valid command."""
    if not width:
        return CONTINUE.join(argv_lines(argv))
    room = max(20, width - len(CONTINUE.lstrip(" \\\n")) - 2)  # the indent and the trailing " \\"
    lines: list[str] = []
    for group in argv_groups(argv):
        line = ""
        for token in group:
            if line and len(line) + 1 + len(token) > room:
                lines.append(line)
                line = token
            else:
                line = f"{line} {token}" if line else token
        lines.append(line)
    return CONTINUE.join(lines)


class CommandView(VerticalScroll):
    """Shows a redacted ProcessSpec; `process` is what is on screen."""

    COMPONENT_CLASSES = {"command-view--prefill", "command-view--decode", "command-view--worker",
                         "command-view--router"}
    DEFAULT_CSS = """
    CommandView > .command-view--prefill { color: $text-accent; }
    CommandView > .command-view--decode { color: $text-primary; }
    CommandView > .command-view--worker { color: $text-primary; }
    CommandView > .command-view--router { color: $text-success; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.process: ProcessSpec | None = None

    def compose(self):
        yield Static("", id="command-body")

    def show(self, process: ProcessSpec | None, empty: str = "no process") -> None:
        before = self.process.name if self.process else None
        self.process = process.redacted() if process is not None else None
        body = self.query_one("#command-body", Static)
        body.update(self._render_process(self.process) if self.process else Text(empty, style="dim"))
        self._fit()
        if (self.process.name if self.process else None) != before:
            self.scroll_home(animate=False)

    @property
    def launch_line(self) -> str:
        """The one-line shell form of the full launch command (what `c` copies)."""
        return shell_line(self.process.launch_argv) if self.process else ""

    def _render_process(self, p: ProcessSpec) -> RenderableType:
        color = self.get_component_rich_style(f"command-view--{p.role}", partial=True, default=Style())
        head = Text()
        head.append(p.name, style=Style(bold=True) + color)
        where = p.node if p.host == p.node else f"{p.node} ({p.host})"
        head.append(f"  {p.role} on {where} · ports {port_ranges(p.ports)} · log {p.log}")
        if p.container:
            head.append(f"\ncontainer {p.container}", style="dim")
        width = self.scrollable_content_region.width or None
        parts: list[RenderableType] = [head, _heading("Engine command"), _command(p.argv, width)]
        kv = kv_transfer_config(p.argv)
        if kv is not None:
            parts += [_heading("kv-transfer-config (Mooncake)"), JSON(json.dumps(kv), indent=2)]
        parts += [_heading("Environment"), _env_text(p.env)]
        if p.runtime_env:
            parts += [_heading("Added by atomdeck's runtime (simulator, not production)"), _env_text(p.runtime_env)]
        parts += [_heading("Launch command (launcher and container/env wrappers)"),
                  _command(p.launch_argv, width)]
        return Group(*parts)

    def on_resize(self) -> None:
        if self.process is not None:  # commands break between arguments at the width shown
            self.query_one("#command-body", Static).update(self._render_process(self.process))
            self._fit()

    def _fit(self) -> None:
        """As wide as the widest command line (an argument wider than the view scrolls sideways)."""
        view = self.scrollable_content_region.width
        widest = 0
        if self.process is not None and view:
            for argv in (self.process.argv, self.process.launch_argv):
                widest = max([widest, *(len(x) for x in command_text(argv, view).splitlines())])
        self.query_one("#command-body", Static).styles.width = max(widest, view) if widest > view else "auto"


def _command(argv: list[str], width: int | None) -> Text:
    # never soft-wrapped: a line break inside an argument (an IP, a JSON) would break a copied command;
    # an argument wider than the view runs past the edge instead (the view scrolls sideways)
    return Text(command_text(argv, width), no_wrap=True, overflow="ignore")


def _heading(title: str) -> Text:
    return Text(f"\n── {title} ", style="bold")


def _env_text(env: dict[str, str]) -> Text:
    if not env:
        return Text("(none)", style="dim")
    out = Text()
    for i, (k, v) in enumerate(env.items()):
        out.append(("\n" if i else "") + k, style="bold")
        out.append(f"={v}")
    return out
