"""Every process of the run: role, node, stage, time in that stage, alive or how it ended, its GPUs (count, VRAM
used, GFX activity, from the run's GPU readings).

Rows are keyed by process name and updated in place (the cursor and scroll stay put while the run
changes under them). Enter on a row opens that process's log (the run screen handles it).
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from ...core.run.events import ROUTER_STAGES, TERMINAL, WORKER_STAGES, ProcState, RunState
from ...core.run.gpustate import gpus_cell, proc_gpus
from ..formatting import ago, words
from .vtable import VirtualTable

BOLD = Style(bold=True)
NO_STYLE = Style()
COLUMNS = [("name", "PROCESS"), ("role", "ROLE"), ("node", "NODE"), ("stage", "STAGE"), ("bar", "PROGRESS"),
           ("since", "IN STAGE"), ("alive", "ALIVE / EXIT"), ("pid", "PID"), ("gpus", "GPUS")]
SINCE = 5  # the time-in-stage cell's column


class ProcessTable(VirtualTable):
    """Drawn line by line (vtable.py): the clock's change to a row repaints that row only."""

    COMPONENT_CLASSES = {"process-table--ok", "process-table--warning", "process-table--error",
                         "process-table--prefill", "process-table--decode", "process-table--worker",
                         "process-table--router"}
    DEFAULT_CSS = """
    ProcessTable > .process-table--ok { color: $text-success; }
    ProcessTable > .process-table--warning { color: $text-warning; }
    ProcessTable > .process-table--error { color: $text-error; }
    ProcessTable > .process-table--prefill { color: $text-accent; }
    ProcessTable > .process-table--decode { color: $text-primary; }
    ProcessTable > .process-table--worker { color: $text-primary; }
    ProcessTable > .process-table--router { color: $text-success; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True)
        self.touched = False  # the operator moved the cursor: stop following the diagnosis's culprit
        self._rows: dict[str, tuple[tuple, list[Text]]] = {}  # name -> (what the row shows, its cells)
        self._colors: dict[str, Style] = {}  # a colour's name -> its style, until the styles change

    def on_key(self) -> None:
        self.touched = True

    def on_click(self) -> None:
        self.touched = True

    def on_mount(self) -> None:
        self.set_columns(COLUMNS)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rows.clear()  # (a theme: the colours are in the cells)
        self._colors.clear()

    @property
    def names(self) -> list[str]:
        return self.keys

    @property
    def current(self) -> str | None:
        return self.cursor_key

    def select(self, name: str) -> None:
        self.select_key(name)

    def show(self, state: RunState, now: float, pids: dict[str, int | None]) -> None:
        """Every process as a row; rows whose cells did not change are not drawn again."""
        colors = self._colors  # (each read walks the styles and builds a Style: 4 a row at 129 rows every second)

        def color(name: str) -> Style:
            c = colors.get(name)
            if c is None:
                c = colors[name] = self._color(name)
            return c

        self.set_rows((p.name, self._row(p, state, now, pids.get(p.name), color)) for p in state.procs.values())

    def _row(self, p: ProcState, state: RunState, now: float, pid: int | None, color=None) -> list[Text]:
        """The row's cells; the same list as last time when nothing it shows changed (the table then finds
        it unchanged by identity: a 129-row redraw builds no Text for the rows that did not change). When
        only the time in stage changed (the clock, every second for every row) only that cell is new: the
        others are the same Texts, which the table does not lay out again."""
        color = color or self._color
        styles = tuple(color(name) for name in ("error", "ok", "warning", p.role))
        since = ago(now - p.since) if p.since else ""
        stages = tuple(p.stages) if p.stage in TERMINAL else ()
        gpus = gpus_cell(proc_gpus(state.gpus, p.node, p.name)) if state.gpus else ""
        key = (p.role, p.node, p.stage, p.up_stage, stages, p.alive, p.exit_code, p.exit_detail,
               state.teardown.get(p.name), pid, styles, p.action, p.restarts, p.removed, gpus)
        hit = self._rows.get(p.name)
        if hit is not None and hit[0] == key:
            if hit[1][SINCE].plain == since:
                return hit[1]
            cells = list(hit[1])
            cells[SINCE] = _since(since)
        else:
            cells = self._cells(p, state, now, pid, styles) + [Text(gpus, justify="right")]
        self._rows[p.name] = (key, cells)
        return cells

    def _cells(self, p: ProcState, state: RunState, now: float, pid: int | None,
               styles: tuple[Style, ...] | None = None) -> list[Text]:
        err, ok, warn, color = styles or tuple(self._color(name) for name in ("error", "ok", "warning", p.role))
        stage_style = {"failed": BOLD + err, "stopped": "dim", "serving": ok, "unresponsive": BOLD + err,
                       "stalled": BOLD + warn}.get(p.stage, "")
        since = ago(now - p.since) if p.since else ""
        if p.alive is False:
            code = p.exit_code
            end = f"exit {code}" if code is not None else (p.exit_detail or "gone")
            if p.removed:  # the stage says removed; how it was stopped is in its log and the actions
                end = "stopped"
            alive = Text(f"× {end}" if p.stage == "failed" else f"■ {end}",
                         style=BOLD + err if p.stage == "failed" else "dim")
        elif p.alive:
            alive = Text("● alive", style=ok)
        else:
            alive = Text("○ not started", style="dim")
        down = state.teardown.get(p.name)
        if down:
            word = down.split(":", 1)[0]
            alive = Text({"stopping": "… stopping", "gone": "■ gone", "left": "× STILL RUNNING"}.get(word, word),
                         style={"gone": "dim", "left": BOLD + err}.get(word, warn))
        stage = Text(words(p.stage), style=stage_style)
        if p.action:  # an action on it now (restart, remove): its step, as core's state says it
            stage = Text(p.action, style=BOLD + warn)
        elif p.removed:
            stage = Text("removed", style="dim")
        name = Text(p.name, style=BOLD + color)
        if p.restarts:
            name.append(f" ⟳{p.restarts}", style="dim")
        return [name, Text(p.role, style=color), Text(p.node), stage, _bar(p), _since(since), alive,
                Text(str(pid) if pid else "", style="dim", justify="right")]

    def _color(self, name: str) -> Style:
        """A severity's or a role's colour (an empty style for none)."""
        return self.get_component_rich_style(f"process-table--{name}", partial=True, default=NO_STYLE)


def _since(since: str) -> Text:
    return Text(since, justify="right")


def _bar(p: ProcState) -> Text:
    """Stages reached out of the role's stages, as a small bar (■ reached, □ to come)."""
    order = ROUTER_STAGES if p.role == "router" else WORKER_STAGES
    steps = order[1:]
    if p.stage in TERMINAL:
        reached = max((steps.index(s) + 1 for s in p.stages if s in steps), default=0)
        return Text("■" * reached + "□" * (len(steps) - reached), style="dim")
    stage = p.up_stage  # unresponsive/stalled: the stages reached before
    reached = steps.index(stage) + 1 if stage in steps else 0
    return Text("■" * reached + "□" * (len(steps) - reached))
