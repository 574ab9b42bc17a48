"""Teardown: what will be stopped where (the confirmation's text), then per-node, per-process progress
from core's teardown events until core reports the run verified clean (or not)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from .. import bindings
from ..formatting import port_ranges

if TYPE_CHECKING:
    from ..live import LiveRun

BOLD = Style(bold=True)


def plan_text(live: LiveRun) -> Text:
    """The confirmation: every process by node, with its PID and ports, and what happens after."""
    run = live.run
    out = Text()
    out.append(f"{run.recipe.name} ({run.plan.shape}) on {run.cluster.name}, run {run.id}\n\n", style="bold")
    by_node: dict[str, list[str]] = {}
    for name, p in run.processes.items():
        by_node.setdefault(p.node, []).append(name)
    for node, names in by_node.items():
        out.append(f"{node}\n", style="bold")
        for name in names:
            p, st = run.processes[name], live.state.procs.get(name)
            pid = live.pid(name)
            alive = "already gone" if st is not None and st.alive is False else "running"
            out.append(f"  {name:<12} pid {pid or '?':<8} ports {port_ranges(p.ports) or '-':<16} {alive}\n")
    launcher = run.cluster.launcher
    how = {"local": "SIGTERM to each process group, SIGKILL after the grace period",
           "slurm": "scancel of each step, then of the job",
           "ssh": "kill of each recorded process group over SSH"}.get(launcher, "stop each process")
    out.append(f"\nHow: {how}; then every port is checked closed.", style="dim")
    return out


def progress_rows(rows: list[tuple[str, str, Text]], width: int, console: Console) -> Text:
    """The dialog's NODE / PROCESS / PROGRESS rows as lines of text: the first two columns padded to their
    widest, a PROGRESS longer than the room left wrapped under itself (`width`: the body's; 0 before it is
    laid out, then the Static wraps it). A Rich Table of the same rows was laid out twice per draw by Textual,
    every cell measured: ~100 ms a draw at 128 nodes (bench/console_scale_keys.py teardown)."""
    w_node = max((cell_len(r[0]) for r in rows), default=0)
    w_name = max((cell_len(r[1]) for r in rows), default=0)
    w_node, w_name = max(w_node, len("NODE")) + 2, max(w_name, len("PROCESS")) + 2
    room = width - w_node - w_name
    out = Text(no_wrap=room >= 16)
    out.append(f"{'NODE':<{w_node}}{'PROCESS':<{w_name}}PROGRESS", style="bold")
    for node, name, cell in rows:
        out.append("\n")
        # (the padding inside each column's span, as a table pads its cells: a span that starts with spaces
        # loses them in some SVG renderers of the screenshots)
        out.append(node + " " * (w_node - cell_len(node)), style="bold")
        out.append(name + " " * (w_name - cell_len(name)))
        if room >= 16 and cell.cell_len > room:
            for i, part in enumerate(cell.wrap(console, room)):
                if i:
                    out.append("\n" + " " * (w_node + w_name))
                out.append_text(part)
        else:
            out.append_text(cell)
    return out


class TeardownScreen(ModalScreen[None]):
    """Progress of a teardown the App started (its worker owns the work; this only draws)."""

    BINDINGS = bindings.TEARDOWN
    COMPONENT_CLASSES = {"teardown--ok", "teardown--error", "teardown--warning"}
    DEFAULT_CSS = """
    TeardownScreen > .teardown--ok { color: $text-success; }
    TeardownScreen > .teardown--error { color: $text-error; text-style: bold; }
    TeardownScreen > .teardown--warning { color: $text-warning; }
    """

    def __init__(self, live: LiveRun) -> None:
        super().__init__(classes="dialog")
        self.live = live
        self._drawn: tuple | None = None  # what the dialog last drew from (see run_updated)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box", id="teardown-box"):
            yield Static("", classes="dialog-title", id="teardown-title")
            with VerticalScroll(classes="dialog-scroll"):
                yield Static("", id="teardown-body")
            yield Static("", id="teardown-result")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()
        self.run_updated()

    def run_updated(self) -> None:
        live = self.live
        done = not live.teardown_running
        ok, err, warn = (self.get_component_rich_style(f"teardown--{v}", partial=True)
                         for v in ("ok", "error", "warning"))
        # a pulse comes for every log line too (the processes' last words while they stop): at 128 nodes the
        # 130-row table costs ~40 ms to lay out, so it is drawn again only when what it shows changed
        drawn = (done, tuple(live.teardown_events.items()), live.teardown_error, id(live.report), ok, err, warn)
        if drawn == self._drawn:
            return
        self._drawn = drawn
        title = f"Tearing down {live.id}" if not done else f"Teardown of {live.id}"
        self.query_one("#teardown-title", Static).update(Text(title))
        rows: list[tuple[str, str, Text]] = []
        progress = live.teardown_events
        order = {n.name: i for i, n in enumerate(live.run.plan.nodes)}
        procs = sorted(live.run.processes.items(), key=lambda kv: order.get(kv[1].node, len(order)))
        for name, p in procs:
            value, detail = progress.get(name, ("", ""))
            if not value:
                cell = Text("… waiting" if not done else "not reached", style="dim")
            elif value == "stopping":
                cell = Text(f"… stopping {detail}".rstrip(), style=warn)
            elif value == "gone":
                cell = Text(f"✓ gone · {detail}", style=ok)
            else:
                cell = Text(f"× {value} · {detail}", style=err)
            rows.append((p.node, name, cell))
        for key, (value, detail) in progress.items():
            if key in live.run.processes:
                continue
            if key == "allocation":
                rows.append(("", "allocation", Text(f"✓ {value} {detail}", style=ok)))
            elif key == "gpus":  # VRAM back to baseline, or what still holds it (core/run/watchers/gpus.py)
                rows.append(("", "GPUs", Text(f"{'✓' if value == 'baseline' else '×'} {detail}",
                                              style=ok if value == "baseline" else err)))
            elif value == "open":
                node, _, port = key.rpartition(":")
                rows.append((node, f"port {port}", Text(f"× {detail}", style=err)))
        body = self.query_one("#teardown-body", Static)
        width = body.content_region.width
        body.update(progress_rows(rows, width, self.app.console))
        if not width:  # not laid out yet (the first draw): again once it is, to wrap a long PROGRESS under itself
            self.call_after_refresh(self._again)
        self.query_one("#teardown-result", Static).update(self._result(done, ok, err))

    def _again(self) -> None:
        if self.is_mounted and self.query_one("#teardown-body", Static).content_region.width:
            self._drawn = None
            self.run_updated()

    def on_resize(self) -> None:
        self.call_after_refresh(self._again)  # the rows' wrapping follows the width

    def _result(self, done: bool, ok: Style, err: Style) -> Text:
        live = self.live
        if not done:
            gone = sum(1 for v, _ in live.teardown_events.values() if v == "gone")
            return Text(f"\n… {gone}/{len(live.run.processes)} processes gone; then every port is checked closed",
                        style="dim")
        if live.teardown_error:
            return Text(f"\n× teardown did not run: {live.teardown_error}", style=err)
        report = live.report
        if report is None:
            return Text("")
        if report.clean:
            out = Text("\n✓ verified clean: every process gone, every port closed", style=BOLD + ok)
            by_node: dict[str, list[int]] = {}
            for p in live.run.processes.values():
                by_node.setdefault(p.node, []).extend(p.ports)
            out.append("\n  ports checked closed: " + " · ".join(f"{n} {port_ranges(ports)}"
                                                                for n, ports in by_node.items()), style="dim")
            if report.gpus:
                out.append(f"\n✓ {report.gpus}", style=ok)
            return out
        out = Text(f"\n× NOT clean: {len(report.open_ports)} port(s) open, "
                   f"{sum(not r.ok for r in report.processes)} process(es) left", style=err)
        if report.gpus.startswith("VRAM not back"):
            out.append(f"\n× {report.gpus}", style=err)
        out.append(f"\n  try again with D, or `atomdeck down {live.id}`", style="dim")
        return out

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(None)
