"""The barrier as a grid: one row per node, one column per port (a node's handshake ports share
one column as a range), each cell's state and since when; the cells core's diagnosis names as
blocking are marked.

States are core's (CellState.state): open, waiting/refused (not yet), timeout, closed (was open,
now refused: the process died or closed it). Enter on a row opens that node's logs.
"""

from __future__ import annotations

from collections import defaultdict

from rich.style import Style
from rich.text import Text

from ...core.run.events import CellState, RunState
from ..formatting import ago
from .vtable import VirtualTable

KIND_ORDER = {"http": 0, "handshake": 1, "router": 2}
# A cell's glyph and its colour (a component class; "muted" is drawn dim).
CELL_STYLE = {"open": ("●", "open"), "waiting": ("○", "muted"), "refused": ("○", "muted"),
              "timeout": ("◐", "timeout"), "closed": ("×", "closed")}
LEGEND = "● open  ○ not yet  ◐ timeout  × was open, now closed  ▌blocking"
NO_CELL = Text("·", style="dim", justify="center")  # (shared by every empty cell: never changed in place)
MANY = 12  # nodes: more than the grid shows at once; it then follows the first node not open (until the
# operator moves the cursor) and sums up which nodes are not open


def _ranges(ports: list[int]) -> list[tuple[int, int]]:
    spans: list[list[int]] = []
    for p in sorted(ports):
        if spans and spans[-1][1] == p - 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return [(a, b) for a, b in spans]


def group_cells(cells: list[CellState]) -> tuple[list[tuple[str, str]], dict[tuple[str, str], list[CellState]]]:
    """(columns as (key, label), {(node, column key): cells}). Pure, for the grid and its tests."""
    by_node_kind: dict[tuple[str, str], list[CellState]] = defaultdict(list)
    for c in cells:
        by_node_kind[(c.node, c.kind)].append(c)
    groups: dict[tuple[str, str], list[CellState]] = {}
    columns: dict[str, tuple[tuple, str]] = {}
    for (node, kind), members in by_node_kind.items():
        if kind == "handshake":
            for lo, hi in _ranges([c.port for c in members]):
                key = f"handshake:{lo}-{hi}"
                columns[key] = ((KIND_ORDER[kind], lo), f"handshake {lo}-{hi}" if lo != hi else f"handshake :{lo}")
                groups[(node, key)] = [c for c in members if lo <= c.port <= hi]
        else:
            for c in members:
                key = f"{kind}:{c.port}"
                columns[key] = ((KIND_ORDER.get(kind, 3), c.port), f"{kind} :{c.port}")
                groups[(node, key)] = [c]
    ordered = sorted(columns.items(), key=lambda kv: kv[1][0])
    return [(key, label) for key, (_, label) in ordered], groups


class BarrierGrid(VirtualTable):
    """Drawn line by line (vtable.py): the clock's change to a node's row repaints that row only."""

    COMPONENT_CLASSES = {"barrier-grid--open", "barrier-grid--timeout", "barrier-grid--closed",
                         "barrier-grid--mixed", "barrier-grid--blocking"}
    DEFAULT_CSS = """
    BarrierGrid > .barrier-grid--open { color: $text-success; }
    BarrierGrid > .barrier-grid--timeout { color: $text-warning; }
    BarrierGrid > .barrier-grid--closed { color: $text-error; }
    BarrierGrid > .barrier-grid--mixed { color: $text-warning; }
    BarrierGrid > .barrier-grid--blocking { color: $text-error; text-style: bold reverse; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=False)
        self.column_keys: list[str] = []
        self.blocking: set[str] = set()  # cell keys ("node:port") marked as blocking
        self.quiet = False
        self.timed_out = False
        self.touched = False  # the operator moved the cursor: stop following the first node not open
        self.not_open: list[str] = []  # nodes with a cell not open, blocking ones first
        self._cell_cache: dict[tuple[str, int], tuple[tuple, Text]] = {}  # (node, first port) -> (shown, text)
        self._names: dict[str, Text] = {}
        self._grouped_for: object = None  # the state's cells dict the grouping below was made from
        self._grouped_n = 0
        self._grouping: tuple[list[tuple[str, str]], list[str], dict[str, list[list[CellState]]]] = ([], [], {})
        self.groupings = 0  # how many times the cells were grouped (tests: once per run's state)
        self._cell_styles: dict[str, Style] = {}
        self._shown: object = None  # what the cells on screen were drawn from (show)
        self._next_change = 0.0

    def on_key(self) -> None:
        self.touched = True

    def on_click(self) -> None:
        self.touched = True

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cell_cache.clear()  # (a theme: the colours are in the cells)
        self._cell_styles = {}  # (each read walks the styles and builds a Style: read once until they change)
        self._shown = None

    @property
    def summary(self) -> str:
        """For the box's title at scale: how many nodes are open, and which are not (blocking first)."""
        if len(self.nodes) <= MANY:
            return ""
        if not self.not_open:
            return f"all {len(self.nodes)} nodes open"
        names = " ".join(self.not_open[:4]) + (f" +{len(self.not_open) - 4}" if len(self.not_open) > 4 else "")
        return f"{len(self.not_open)} of {len(self.nodes)} nodes not open: {names}"

    @property
    def nodes(self) -> list[str]:
        return self.keys

    @property
    def current(self) -> str | None:
        return self.cursor_key

    def _grouped(self, state: RunState) -> tuple[list[tuple[str, str]], list[str], dict[str, list[list[CellState]]]]:
        """(columns, nodes, each node's cells per column): which cell goes where depends only on the cells'
        nodes, kinds and ports, fixed when the run's state is made (core changes a cell's state in place,
        never the set of cells), so it is worked out once per state, not at every redraw (128 nodes)."""
        cells = state.cells
        if self._grouped_for is not cells or len(cells) != self._grouped_n:
            columns, groups = group_cells(list(cells.values()))
            nodes = list(dict.fromkeys(c.node for c in cells.values()))
            by_node = {n: [groups.get((n, key), []) for key, _ in columns] for n in nodes}
            self._grouping = (columns, nodes, by_node)
            self._grouped_for, self._grouped_n = cells, len(cells)
            self.groupings += 1
        return self._grouping

    def show(self, state: RunState, blocking: list[CellState], now: float, version: object = None) -> None:
        """`version` names the cells' content (the caller's count of cell events): with it, a redraw before
        any cell's "since" moves on to its next second, with the same cells and the same blocking ones (a
        process's event between two clock ticks: several a second at 128 nodes), draws nothing."""
        columns, nodes, by_node = self._grouped(state)
        blocking_keys = {c.key for c in blocking}
        shown = (version, id(state.cells), frozenset(blocking_keys), state.status, state.started, len(nodes))
        if version is not None and state.started and shown == self._shown and now < self._next_change:
            self._follow(nodes)
            return
        self._shown = shown
        self._next_change = float("inf")  # the first moment a cell's "since" shows another value (_cell)
        self.blocking = blocking_keys
        self.quiet = state.status in ("stopping", "stopped")  # closed ports are the point of a teardown
        self.timed_out = state.status == "failed"  # a cell still not open when the run gave up: timed out
        start = state.started or now
        cell = self._cell
        rows = {n: [cell(members, now, start) for members in by_node[n]] for n in nodes}
        keys = [k for k, _ in columns]
        blocked = {c.node for c in blocking}
        waiting = [n for n in nodes if any(c.state != "open" for members in by_node[n] for c in members)]
        self.not_open = [n for n in waiting if n in blocked] + [n for n in waiting if n not in blocked]
        if keys != self.column_keys:
            self.set_columns([("node", "NODE"), *((key, label.upper()) for key, label in columns)])
            self.column_keys = keys
        names = self._names
        for n in nodes:
            if n not in names:
                names[n] = Text(n, style="bold")
        self.set_rows((n, [names[n], *rows[n]]) for n in nodes)  # the cursor stays on its node
        self._follow(nodes)

    def _follow(self, nodes: list[str]) -> None:
        if len(nodes) > MANY and not self.touched and self.not_open and not self.quiet:
            self.select_key(self.not_open[0])

    def _cell(self, members: list[CellState], now: float, start: float) -> Text:
        if not members:
            return NO_CELL
        if self.timed_out:
            members = [c if c.state not in ("waiting", "refused") else
                       CellState(c.node, c.host, c.port, c.role, c.kind, c.owner, "timeout", c.since, c.was_open)
                       for c in members]
        if len(members) == 1:
            c = members[0]
            newest = c.since or start
            shown_states: tuple[str, ...] = (c.state,)
            blocking = c.key in self.blocking
        else:
            newest = max([c.since for c in members]) or start
            shown_states = tuple([c.state for c in members])
            blocking = bool(self.blocking) and any(c.key in self.blocking for c in members)
        s = int(now - newest) if now > newest else 0  # (ago shows seconds for an hour, then minutes)
        since = ago(s)
        change = newest + s + 1 if s < 3600 else newest + (s // 60 + 1) * 60
        if change < self._next_change:
            self._next_change = change
        # the same cell as last time when what it shows did not change: no Text built, and the row is found
        # unchanged by identity (128 rows are redrawn every second)
        key = (shown_states, since, blocking, self.quiet)
        where = (members[0].node, members[0].port)
        hit = self._cell_cache.get(where)
        if hit is not None and hit[0] == key:
            return hit[1]
        text = self._new_cell(members, set(shown_states), since, blocking)
        self._cell_cache[where] = (key, text)
        return text

    def _new_cell(self, members: list[CellState], states: set[str], since: str, blocking: bool) -> Text:
        if len(states) == 1:
            state = members[0].state
            glyph, var = CELL_STYLE.get(state, ("?", ""))
            word = {"refused": "not yet", "waiting": "not yet", "closed": "closed"}.get(state, state)
            count = f" {len(members)}/{len(members)}" if len(members) > 1 and state == "open" else ""
            text = Text(f"{glyph} {word}{count} {since}")
        else:
            opened = sum(c.state == "open" for c in members)
            var = "mixed"
            text = Text(f"◐ {opened}/{len(members)} open {since}")
        if blocking:
            text.stylize(self._style("blocking"))
            text = Text("▌") + text
        elif var == "muted" or self.quiet:
            text.stylize("dim")
        elif var:
            text.stylize(self._style(var))
        return text

    def _style(self, var: str) -> Style:
        style = self._cell_styles.get(var)
        if style is None:
            style = self._cell_styles[var] = self.get_component_rich_style(f"barrier-grid--{var}", partial=True,
                                                                      default=Style())
        return style
