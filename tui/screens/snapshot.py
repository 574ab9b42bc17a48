"""Snapshot: where every rank of every process of the attached run is (issue 39), as core's forensics took it.

The groups of ranks with the same stack, the odd ones first; enter shows each rank of the group under the cursor
(pid, kernel state, wait channel, syscall, threads, connections, its Python stack); c takes another snapshot and
compares it with the one before (stuck / moved / idle per group); r takes a fresh one; the bundle's path is at the
bottom. The snapshot runs as a Textual worker in the App's loop: core does the work (forensics.take: the nodes'
scripts as subprocesses or SSH/Slurm commands, their output read in a thread), this view only renders it, and
keys keep working meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import Static

from ...core.config.errors import AtomdeckError
from ...core.run import forensics
from ...core.run.snapshot import STATES, Snapshot, compare, fold, fold_keys, verdict
from .. import bindings
from ..widgets.context_bar import ContextBar
from ..widgets.footer import QuietFooter
from ..widgets.quiet import update_quietly
from ..widgets.vtable import VirtualTable
from .base import can_draw

if TYPE_CHECKING:
    from ..live import LiveRun
    from ..protocols import Console

VERDICT_STYLE = {"stuck": "bold red", "moved": "green", "idle": "dim", "gone": "yellow", "mixed": "yellow"}


def open_snapshot(app: Any) -> None:
    """The Run screen's key and the palette's entry: this view over the attached run (a snapshot starts at once)."""
    live = cast("Console", app).live
    if live is None:
        app.notify("no run attached: nothing to snapshot", severity="warning")
        return
    if not isinstance(app.screen, SnapshotScreen):
        app.push_screen(SnapshotScreen(live))


class SnapshotScreen(Screen):
    VIEW = "run"
    BINDINGS = bindings.SNAPSHOT
    DEFAULT_CSS = """
    SnapshotScreen #snap-head { height: auto; max-height: 8; padding: 0 1; background: $boost; }
    SnapshotScreen .snap-box {
        border: round $panel-lighten-2; border-title-color: $text-accent; border-title-style: bold;
        border-subtitle-color: $text-muted; padding: 0 1;
    }
    SnapshotScreen .snap-box:focus-within { border: round $accent; }
    SnapshotScreen #snap-groups-box { height: 2fr; min-height: 5; }
    SnapshotScreen #snap-groups { height: 1fr; }
    SnapshotScreen #snap-detail-box { height: 3fr; min-height: 5; }
    SnapshotScreen #snap-detail { height: auto; }
    SnapshotScreen #snap-foot { height: 1; padding: 0 1; background: $panel; text-wrap: nowrap;
                                text-overflow: ellipsis; }
    """

    def __init__(self, live: LiveRun, shots: list[Snapshot] | None = None) -> None:
        """`shots`: snapshots already taken, oldest first (the screenshots' fixed ones); none: one is taken now."""
        super().__init__()
        self.live = live
        self.shots: list[Snapshot] = list(shots or [])
        self.taking = ""  # "" or what the worker does now ("taking a snapshot", "taking the second snapshot")
        self.taking_since = 0.0
        self.error = ""
        self.opened: str | None = None  # the group key whose stacks the detail shows
        self._compared: tuple[tuple[int, int] | None, dict[str, list[str]] | None] = (None, None)

    @property
    def console(self) -> Console:
        return cast("Console", self.app)

    def compose(self) -> ComposeResult:
        yield ContextBar()
        yield Static("", id="snap-head")
        with Vertical(id="snap-groups-box", classes="snap-box") as box:
            box.border_title = "Ranks by stack · odd ones first"
            box.border_subtitle = "enter: each rank's stack"
            yield VirtualTable(id="snap-groups")
        with VerticalScroll(id="snap-detail-box", classes="snap-box") as box:
            box.border_title = "Stacks"
            yield Static("", id="snap-detail")
        yield Static("", id="snap-foot")
        yield QuietFooter()

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#snap-groups", VirtualTable)

    def on_mount(self) -> None:
        self.table.set_columns([("mark", ""), ("verdict", "compared"), ("process", "process"), ("members", "ranks"),
                                ("where", "where")])
        self.table.focus()
        self.set_interval(0.5, self._tick)
        if self.shots:
            self._draw()
        else:
            self.action_retake()

    # -- taking -------------------------------------------------------------------------------------------------
    def action_retake(self) -> None:
        self._take(fresh=True)

    def action_compare(self) -> None:
        self._take(fresh=not self.shots)

    def _take(self, fresh: bool) -> None:
        if self.taking:
            self.notify("a snapshot is being taken", severity="warning")
            return
        self.taking = "taking a snapshot" if fresh else "taking a second snapshot to compare"
        self.taking_since = time.monotonic()
        self.error = ""
        self._draw()
        self.run_worker(self._work(fresh), group="snapshot", exclusive=True, exit_on_error=False)

    async def _work(self, fresh: bool) -> None:
        run = self.live.run
        try:
            snap = await forensics.take(run)
            await asyncio.to_thread(forensics.bundle, snap, run.rd.path)
        except (AtomdeckError, OSError) as e:
            self.error = str(e)
        except Exception as e:  # (a bug in core's snapshot: said here, and the console goes on)
            self.error = f"{type(e).__name__}: {e}"
        else:
            self.shots = [snap] if fresh else [*self.shots[-1:], snap]
        finally:
            self.taking = ""
        if can_draw(self):
            self._draw()

    def _tick(self) -> None:
        if self.taking and can_draw(self):
            self._draw_head()

    # -- drawing ------------------------------------------------------------------------------------------------
    @property
    def moved(self) -> dict[str, list[str]] | None:
        """core's comparison of the last two snapshots (once per pair: the header redraws twice a second)."""
        if len(self.shots) < 2:
            return None
        key = (id(self.shots[-2]), id(self.shots[-1]))
        if self._compared[0] != key:
            self._compared = (key, compare(self.shots[-2], self.shots[-1]))
        return self._compared[1]

    def _draw(self) -> None:
        run = self.live.run  # (the Run view's own bar, run_context, is not imported: run.py opens this view)
        self.query_one(ContextBar).show_run(self.console.views, "run", f"snapshot · run [b]{escape(run.id)}[/b] · "
                                            f"{escape(run.recipe.name)} ({escape(run.plan.shape)}) on [b]"
                                            f"{escape(run.cluster.name)}[/b] · {escape(run.cluster.launcher)}",
                                            self.console.readonly)
        self._draw_head()
        snap = self.shots[-1] if self.shots else None
        moved = self.moved
        rows = []
        if snap is not None:
            for i, g in enumerate(snap.groups):
                v = verdict(g, moved) if moved else ""
                rows.append((str(i), [Text("odd", style="bold yellow") if g.odd else Text(""),
                                      Text(v, style=VERDICT_STYLE.get(v, "")), Text(g.process),
                                      Text(fold(g.members)), Text(g.where)]))
        self.table.set_rows(rows)
        foot = f"bundle: {snap.bundle}" if snap and snap.bundle else ""
        update_quietly(self.query_one("#snap-foot", Static), escape(foot))
        self._draw_detail()

    def _draw_head(self) -> None:
        lines: list[str] = []
        snap = self.shots[-1] if self.shots else None
        if self.taking:
            lines.append(f"[b]{self.taking}[/b] … ({time.monotonic() - self.taking_since:.0f} s)  [dim]every node "
                         f"at once, py-spy on each rank; keys keep working[/dim]")
        if self.error:
            lines.append(f"[$text-error]snapshot failed: {escape(self.error)}[/]")
        if snap is not None:
            ranks = sum(len(p.stacked()) for p in snap.procs)
            at = time.strftime("%H:%M:%S", time.localtime(snap.taken_at))
            lines.append(f"[b]snapshot at {at}[/b]: {len(snap.procs)} processes, {ranks} python processes and "
                         f"ranks on {len(snap.nodes)} node(s), took {snap.took_s:.2f} s")
            for node, word in sorted(snap.nodes.items()):
                if word != "ok":
                    lines.append(f"[$text-error]{escape(node)}: {escape(word)}[/]")
            for node, word in sorted(snap.pyspy.items()):
                if word.startswith(("missing", "ptrace")):
                    lines.append(f"[$text-warning]py-spy on {escape(node)}: {escape(word)}[/]")
            gone = [p for p in snap.procs if p.error and p.node in snap.nodes and snap.nodes[p.node] == "ok"]
            for p in gone:
                lines.append(f"[$text-warning]{escape(p.name)}: {escape(p.error)}[/]")
            moved = self.moved
            if moved is not None:
                gap = snap.taken_at - self.shots[-2].taken_at
                lines.append(f"compared with the snapshot {gap:.0f} s before: "
                             f"[bold red]stuck[/] {escape(fold_keys(moved['stuck'])) or 'none'} · "
                             f"[green]moved[/] {escape(fold_keys(moved['moved'])) or 'none'}")
            else:
                lines.append("[dim]c: take another snapshot and compare (a rank whose stack did not change with "
                             "work in flight is stuck)[/dim]")
        elif not self.taking and not self.error:
            lines.append("no snapshot yet (r takes one)")
        # (quietly: its clock ticks twice a second while a snapshot is taken, and a full update re-laid the whole
        # screen out each time, the keys waiting behind it)
        update_quietly(self.query_one("#snap-head", Static), "\n".join(lines))

    def _group(self, key: str | None):
        if key is None or not self.shots:
            return None
        groups = self.shots[-1].groups
        return groups[int(key)] if key.isdigit() and int(key) < len(groups) else None

    def _draw_detail(self) -> None:
        box = self.query_one("#snap-detail-box")
        g = self._group(self.opened if self.opened is not None else self.table.cursor_key)
        detail = self.query_one("#snap-detail", Static)
        if g is None:
            box.border_title = "Stacks"
            detail.update("")
            return
        snap = self.shots[-1]
        proc = next(p for p in snap.procs if p.name == g.process)
        box.border_title = f"Stacks · {g.process} {fold(g.members)} on {proc.node}"
        out = Text()
        if proc.queues.get("requests_running") is not None:
            out.append(f"{proc.queues['requests_running']:.0f} running, {proc.queues.get('requests_waiting', 0):.0f} "
                       "waiting", style="bold")
            if proc.router_in_flight is not None:
                out.append(f"; the router counts {proc.router_in_flight:.0f} in flight to it")
            out.append("\n")
        members = [r for r in proc.stacked() if r.label in g.members]
        full = self.opened is not None
        for r in members if full else members[:1]:
            out.append(f"{r.label}", style="bold")
            out.append(f"  pid {r.pid} · {STATES.get(r.state, r.state)} · wchan {r.wchan or '-'} · syscall "
                       f"{r.syscall or '-'} · {r.threads} threads\n", style="dim")
            for c in r.connections:
                if c.peer_name:
                    out.append(f"  tcp {c.state.lower()} to {c.peer_name} ({c.peer})\n")
            if r.stack:
                for f in r.stack:
                    out.append(f"  {f.name}", style="bold" if f is r.stack[0] else "")
                    out.append(f"  {f.file}:{f.line}\n", style="dim")
            else:
                out.append(f"  no stack: {r.stack_error or 'not a Python process'}\n", style="italic")
        if not full and len(members) > 1:
            out.append(f"\n… and {len(members) - 1} more with the same stack (enter shows each)\n", style="dim")
        if proc.last_lines:
            out.append("last lines:\n", style="bold")
            for line in proc.last_lines[-4:]:
                out.append(f"  {line}\n", style="dim")
        detail.update(out)

    # -- keys ---------------------------------------------------------------------------------------------------
    def on_virtual_table_row_highlighted(self, event: VirtualTable.RowHighlighted) -> None:
        if event.key != self.opened:
            self.opened = None
        self._draw_detail()

    def on_virtual_table_row_selected(self, event: VirtualTable.RowSelected) -> None:
        self.opened = event.key
        self._draw_detail()
        self.query_one("#snap-detail-box").scroll_home(animate=False)

    def action_close(self) -> None:
        self.app.pop_screen()
