"""A process's log (or a node's processes' logs): the tail from disk, then live lines.

Follows by default; scrolling up pauses and counts "+N new lines" (End or F follows again).
/ searches, n/N go to the next/previous match, w wraps long lines, s saves the full log (from disk,
secrets masked) to a file. Only the last 5,000 lines are kept on screen; the file has everything.
Lines come from the LiveRun's bounded buffers, read at most ten times a second.
"""

from __future__ import annotations

from pathlib import Path
from time import monotonic
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input, Static

from ...core.config.secrets import redact_line
from .. import bindings
from ..formatting import words
from ..live import settle_gc
from ..logtext import save_logs
from ..widgets.context_bar import ContextBar
from ..widgets.footer import QuietFooter
from ..widgets.log_lines import LogLines
from ..widgets.quiet import update_quietly
from .base import can_draw
from .dialogs import InputDialog
from .run import run_context
from .typeahead import TypeAhead

if TYPE_CHECKING:
    from ..live import LiveRun
    from ..protocols import Console

KEEP = 5_000
# While every row on screen shows another line each time lines are appended (a flood: nobody reads
# 2,000 lines a second), append at most this often: 5 frames a second of the log instead of the pulse's
# 10, each as costly (every row new), so a key press finds the loop free more often. The view stays
# within ~0.2 s (+ the watcher's 50 ms batches) of the file.
FLOOD_S = 0.2
# A key press's frame goes out before the next batch of lines: appending right behind a key put every
# row of the log into the frame that shows the key's effect.
KEY_FIRST_S = 0.05


class LogScreen(TypeAhead, Screen):
    TYPEAHEAD = ("slash", "#log-search", "search")
    VIEW = "run"
    BINDINGS = bindings.LOGS
    COMPONENT_CLASSES = {"log-screen--error", "log-screen--follow", "log-screen--paused"}
    DEFAULT_CSS = """
    LogScreen > .log-screen--error { color: $text-error; }
    LogScreen > .log-screen--follow { color: #ffffff; background: $success; text-style: bold; }
    LogScreen > .log-screen--paused { color: #000000; background: $warning; text-style: bold; }
    """

    def __init__(self, live: LiveRun, names: list[str], node: str | None = None, keep: int = KEEP) -> None:
        super().__init__()
        self.live = live
        self.names = [n for n in names if n in live.state.procs] or names
        self.node = node
        self.keep = keep
        self.prefix = len(self.names) > 1
        self.seen: dict[str, int] = {}
        self.skipped = 0  # lines that left the buffers before this screen read them (still on disk)
        self.received = 0
        self._shown: dict[str, Text] = {}
        self._drawn_version = -1
        self._resyncs: dict[str, int] = {}  # the watcher's answers for each process when it was loaded
        self._appended_at = -1e9  # (monotonic) when lines were last appended
        self._flooding = False  # that batch replaced every row on screen
        self._key_at = -1e9  # (monotonic) the last key press on this screen
        self._later: Timer | None = None  # a deferred append
        self.flood_s, self.key_first_s = FLOOD_S, KEY_FIRST_S  # (tests set them)

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def compose(self) -> ComposeResult:
        yield ContextBar()
        yield Static("", id="log-head")
        yield LogLines(self.keep, id="log")
        yield Input(placeholder="search this log (enter: find; n/N: next/previous; esc: close)", id="log-search",
                    compact=True)
        yield Static("", id="log-status")
        yield QuietFooter()

    @property
    def logview(self) -> LogLines:
        return self.query_one(LogLines)

    def on_mount(self) -> None:
        self.query_one("#log-search", Input).display = False
        # every line of these processes from now on (the watcher sends only what a view shows); until it
        # says from which offset (one report, ~50 ms), the end of the file is shown, then loaded again
        self.live.want_lines(self, self.names)
        self._load()
        self.logview.focus()
        self._draw()
        # what the console holds now (the run view under this one, this screen) out of the cyclic GC's full
        # passes while lines flood in (see settle_gc); after the first frame, not before it
        self.call_after_refresh(settle_gc)

    def on_unmount(self) -> None:
        self.live.want_lines(self, [])

    def _load(self) -> None:
        """History from disk (the lines before those this console received), then what the buffers hold."""
        live = self.live
        lines: list[str] = []
        per = max(1, self.keep // len(self.names))
        self.logview.clear()
        for name in self.names:
            self._resyncs[name] = live.resyncs.get(name, 0)
            if not live.streams(name):  # not sent (yet, or any more): the file has them
                mine = live.history(name, per, to_end=True)
                self.seen[name] = live.line_seq.get(name, 0)
            else:
                buf, seq = live.snapshot_lines(name)
                older: list[str] = []
                if seq == len(buf) and len(buf) < per:  # nothing dropped yet: disk has what came before
                    older = live.history(name, per - len(buf))
                mine = older + buf[-per:]
                self.seen[name] = live.line_seq.get(name, 0)
            lines += [f"{name}| {x}" for x in mine] if self.prefix else mine
        self.logview.append(lines)

    def run_updated(self) -> None:
        """New lines (at most ten times a second): appended in one batch. Only once loaded, and not
        while the app quits (RunController.redraw checks, see base.can_draw)."""
        if any(self.live.resyncs.get(n, 0) != self._resyncs.get(n, 0) for n in self.names):
            self._load()  # the watcher said from where its lines come: the file up to there, then them
            self._draw()
            return
        now = monotonic()
        wait = self._key_at + self.key_first_s - now
        if self._flooding and self.logview.follow:
            wait = max(wait, self._appended_at + self.flood_s - now)
        if wait > 0:  # not yet: a timer appends then (the lines wait in the LiveRun's buffers)
            if self._later is None:
                self._later = self.set_timer(wait, self._deferred)
            return
        batch: list[str] = []
        for name in self.names:
            if not self.live.streams(name):  # shown from the file until the watcher says from where it sends
                self.seen[name] = self.live.line_seq.get(name, 0)
                continue
            new, skipped, seq = self.live.lines_after(name, self.seen.get(name, 0))
            self.seen[name] = seq
            if skipped:
                self.skipped += skipped
                batch.append(f"… {skipped} lines of {name} arrived faster than shown; the file on disk has them")
            batch += [f"{name}| {x}" for x in new] if self.prefix else new
            self.received += len(new)
        if batch:
            self.logview.append(batch)
            self._appended_at = now
            self._flooding = len(batch) >= self.logview.scrollable_content_region.height
        self._draw()

    def _deferred(self) -> None:
        self._later = None
        if can_draw(self):
            self.run_updated()

    def on_key(self, event: events.Key) -> None:
        self._key_at = monotonic()
        super().on_key(event)

    # -- status ------------------------------------------------------------------------------------
    def _set(self, selector: str, content: Text, shape: object = None) -> None:
        """Update a Static only when its text changed, and in place when only digits changed (or, with
        `shape`, while that stays the same): under a flood the status line's line count changes every
        pulse, and a layout pass for it re-rendered every widget on the screen (py-spy: 41 % of the
        console's loop)."""
        if self._shown.get(selector) != content:
            self._shown[selector] = content
            update_quietly(self.query_one(selector, Static), content, shape)

    def _draw(self) -> None:
        """The top bar and the head (they change with the run's state, not with every line)."""
        if self._drawn_version == self.live.version:
            self._status()
            return
        self._drawn_version = self.live.version
        app = self.console
        self.query_one(ContextBar).show_run(app.views, self.VIEW, run_context(app) if app.live is self.live
                                            else f"run [b]{self.live.id}[/b]", app.readonly)
        state = self.live.state
        head = Text()
        what = self.node or self.names[0]
        head.append(what, style="bold")
        for name in self.names:
            p = state.procs.get(name)
            if p is None:
                continue
            head.append(f"  {name}: " if self.prefix else f" · {p.role} on {p.node} · ", style="dim")
            if p.alive is False:
                end = f"exit {p.exit_code}" if p.exit_code is not None else (p.exit_detail or "gone")
                error = self.get_component_rich_style("log-screen--error", partial=True)
                head.append(f"{words(p.stage)}, {end}", style=error if p.stage == "failed" else "dim")
            else:
                head.append(f"{words(p.stage)}, {'alive' if p.alive else 'not started'}")
        paths = [str(self.live.log_path(n)) for n in self.names if self.live.log_path(n)]
        if paths:
            head.append(f"\nfull log on disk: {_home(paths[0])}" + (f" (+{len(paths) - 1} more)"
                                                                     if len(paths) > 1 else ""), style="dim")
        self._set("#log-head", head)
        self._status()

    def _status(self) -> None:
        log = self.logview
        out = Text()
        if log.follow:
            out.append(" FOLLOW ", style=self.get_component_rich_style("log-screen--follow", partial=True))
        else:
            out.append(" PAUSED ", style=self.get_component_rich_style("log-screen--paused", partial=True))
            if log.pending:
                out.append(f"  +{log.pending:,} new lines", style="bold")
        if log.search:  # first after the badge: the status line is cut at the right on narrow terminals
            found = log.matches()
            if found:
                pos = f"{found.index(log.current) + 1}/" if log.current in found else ""
                out.append(f"  ·  '{log.search}': match {pos}{len(found)}", style="bold")
            else:
                out.append(f"  ·  '{log.search}': no match in the lines on screen",
                           style=self.get_component_rich_style("log-screen--error", partial=True))
        if not log.follow:
            out.append("  (End or F follows)", style="dim")
        out.append(f"  ·  {len(log.lines):,} lines on screen (last {self.keep:,})", style="dim")
        out.append(f"  ·  wrap {'on' if log.wrap else 'off'}", style="dim")
        # one row whatever it says (#log-status is height: 1 and as wide as the screen): "wrap on" -> "wrap
        # off", FOLLOW -> PAUSED change its words, never its size, so no key here asks for a layout pass
        self._set("#log-status", out, shape="one row")

    def on_log_lines_follow_changed(self, event: LogLines.FollowChanged) -> None:
        self._status()

    # -- keys --------------------------------------------------------------------------------------
    def action_follow(self) -> None:
        self.logview.resume()
        self._status()

    def action_wrap(self) -> None:
        self.logview.set_wrap(not self.logview.wrap)
        self._status()

    def action_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.value = self.logview.search
        self.typeahead_open(box)

    @on(Input.Submitted, "#log-search")
    def search_submitted(self, event: Input.Submitted) -> None:
        self.logview.set_search(event.value.strip())
        event.input.display = False
        self.typeahead_closed()
        self.logview.focus()
        if self.logview.search and self.logview.find(backward=True) is None:
            self.notify(f"'{self.logview.search}' is not in the last {len(self.logview.lines):,} lines",
                        severity="warning")
        self._status()

    def action_find(self, backward: bool) -> None:
        if not self.logview.search:
            self.action_search()
            return
        if self.logview.find(backward=backward) is None:
            self.notify(f"'{self.logview.search}' is not in the lines on screen", severity="warning")
        self._status()

    def action_close(self) -> None:
        box = self.query_one("#log-search", Input)
        if box.display:
            box.display = False
            self.typeahead_closed()
            self.logview.focus()
            return
        self.dismiss()

    def action_save(self) -> None:
        default = f"./{self.live.id}-{self.node or self.names[0]}.log"

        def done(path: str | None) -> None:
            if path:
                self._save(Path(path).expanduser())

        self.app.push_screen(InputDialog("Save log", "Write the full log from disk (not only the lines on "
                                         "screen) to a file; secret values are masked.", default), done)

    @work(thread=True, exclusive=True, group="save-log")
    def _save(self, target: Path) -> None:
        known = self.live.secrets()
        sources = [(n, self.live.log_path(n)) for n in self.names]
        try:
            count = save_logs(target, sources, lambda line: redact_line(line, known), self.prefix)
        except OSError as e:
            self.app.call_from_thread(self.notify, f"cannot write {target}: {e}", title="Save log", severity="error")
            return
        self.app.call_from_thread(self.notify, f"wrote {count:,} lines to {target}", title="Saved log")


def _home(path: str) -> str:
    home = str(Path.home())
    return "~" + path[len(home):] if path.startswith(home + "/") else path
