"""The cluster's nodes: state, GPUs, partition, why a node may not be used, and its role."""

from __future__ import annotations

import gc

from rich.cells import cell_len
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.geometry import Size
from textual.widgets import DataTable
from textual.widgets._data_table import Row, RowKey

from ...core.config.cluster import Cluster
from ...core.design.draft import Design
from ...core.design.inventory import Node
from ...core.design.lint import Assessment
from ...core.design.plan import node_verdict

FREEZE_AT = 500  # nodes
COLUMNS = [("pick", "#"), ("node", "NODE"), ("addr", "ADDR"), ("state", "STATE"), ("gpus", "GPUS"),
           ("partition", "PARTITION"), ("role", "ROLE"), ("why", "WHY NOT / REASON")]


class Cell:
    """A cell DataTable need not measure (NodeTable sets every column's width once per inventory):
    measuring 16,000 Text cells on each filter keystroke was most of the time at 2,000 nodes."""

    __slots__ = ("lines", "text")

    def __init__(self, text: Text) -> None:
        self.text = text
        self.lines: tuple[int, list] | None = None  # (width, rendered without the table's styles)

    def __rich_console__(self, console, options):
        yield self.text

    @property
    def plain(self) -> str:
        return self.text.plain

    def __str__(self) -> str:
        return self.text.plain

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cell) and other.text == self.text

    __hash__ = None  # type: ignore[assignment]


_NULL = Style()
_NEWLINE = Text("\n")


def cell_line(text: Text, width: int, pad: int, console) -> list[Segment] | None:
    """The one line Rich draws for `Padding(text, (0, pad))` at `width` with no_wrap, for the plain
    case (one line that fits, left/right/default justified), without Rich's layout machinery
    (measure, wrap, split and crop: ~0.3 ms a cell, ~100 ms for a screenful of never-drawn rows at
    2,000 nodes). None when the text is not the plain case; the caller then asks Rich.
    tests/tui/test_nodes.py checks it against Rich segment for segment."""
    inner = width - 2 * pad
    plain = text.plain
    justify = text.justify or "default"
    length = text.cell_len
    if inner < 0 or length > inner or "\n" in plain or "\t" in plain or justify not in ("default", "left", "right"):
        return None
    if justify == "right" and plain != plain.rstrip():  # Rich strips before it right-justifies
        return None
    excess = inner - length
    if justify == "default" or not excess:
        padded = text
    else:
        padded = text.copy()
        if justify == "right":
            padded.pad_left(excess)
        else:
            padded.pad_right(excess)
        excess = 0
    # as Text.__rich_console__ does: joining makes the text's own style a span that render applies
    segments = [s for s in _NEWLINE.join([padded]).render(console, end="") if s.text]
    if excess:
        segments.append(Segment(" " * excess, _NULL))
    if pad:
        return [Segment(" " * pad, _NULL), *segments, Segment(" " * pad, _NULL)]
    return segments


class NodeTable(DataTable):
    """Rows keyed by node name. Unusable nodes are dimmed with core's verdict (node_verdict)."""

    COMPONENT_CLASSES = {"node-table--prefill", "node-table--decode", "node-table--worker",
                         "node-table--router", "node-table--warning"}
    DEFAULT_CSS = """
    NodeTable > .node-table--prefill { color: $text-accent; }
    NodeTable > .node-table--decode { color: $text-primary; }
    NodeTable > .node-table--worker { color: $text-primary; }
    NodeTable > .node-table--router { color: $text-success; }
    NodeTable > .node-table--warning { color: $text-warning; }
    """
    ROLES = frozenset({"prefill", "decode", "worker", "router", "warning"})

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.verdicts: dict[str, str] = {}
        self.shown: list[str] = []  # node names currently listed, in order
        self._cells_key: tuple = ()
        self._rows: list[tuple[str, list[Text]]] = []
        self._hay: list[str] = []  # each row's text, lower-case, for the filter
        self._drawn: list[int] | None = None
        self._keys: list[RowKey] = []
        self._row_data: list[dict] = []
        self._row_objs: list[Row] = []

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def _set_columns(self, rows: list[tuple[str, list[Text]]]) -> None:
        """Fixed widths from every node's cells (stable while the filter changes what is shown)."""
        widths = [cell_len(label) for _, label in COLUMNS]
        for _, cells in rows:
            for i, c in enumerate(cells):
                widths[i] = max(widths[i], c.cell_len)
        self.clear(columns=True)
        for (key, label), width in zip(COLUMNS, widths):
            self.add_column(label, key=key, width=width)

    @property
    def current(self) -> str | None:
        """The node under the cursor."""
        if not self.shown or self.cursor_row < 0 or self.cursor_row >= len(self.shown):
            return None
        return self.shown[self.cursor_row]

    def show(self, nodes: list[Node], cluster: Cluster, design: Design, assessment: Assessment,
             filter_text: str = "") -> None:
        """Rows for the nodes matching the filter. The cells are computed once per inventory/design/
        assessment and reused while the filter is typed; when the matching set does not change the
        table is left alone (2,000 nodes stay responsive)."""
        keep = self.current
        # the App's version changes with every design, assessment, inventory or theme change
        key = (getattr(self.app, "version", None), id(nodes), len(nodes), id(cluster))
        if key != self._cells_key:
            sel = assessment.selection
            self.verdicts = {n.name: node_verdict(n, cluster) for n in nodes}
            rows = [(n.name, self._cells(n, design, sel)) for n in nodes]
            self._hay = [" ".join(c.plain for c in cells).lower() for _, cells in rows]
            self._set_columns(rows)
            self._rows = [(name, [Cell(c) for c in cells]) for name, cells in rows]
            # DataTable's own records of each row, made once per inventory: a keystroke only picks them
            ordered = self.ordered_columns
            self._keys = [RowKey(name) for name, _ in self._rows]
            self._row_data = [{column.key: cell for column, cell in zip(ordered, cells)} for _, cells in self._rows]
            self._row_objs = [Row(key, 1, None, False) for key in self._keys]
            self._cells_key = key
            self._drawn = None
            if len(nodes) >= FREEZE_AT:
                # tens of thousands of long-lived cells: keep them out of the cyclic GC's full passes
                # (a full pass over them took ~80 ms in the middle of a filter keystroke at 2,000 nodes).
                # Only the cyclic collector skips them; reference counting still frees them. Frozen
                # objects are never collected, so first thaw and collect what died since the last
                # rebuild (closed screens, old rows): one full pass per rebuild, none per keystroke.
                gc.unfreeze()
                gc.collect()
                gc.freeze()
        needle = filter_text.strip().lower()
        picked = [i for i, hay in enumerate(self._hay) if not needle or needle in hay]
        if picked == self._drawn:
            return
        self._drawn = picked
        self.clear()
        self.shown = [self._rows[i][0] for i in picked]
        self._add_rows(picked)
        if keep in self.shown:
            # scroll now, before the first paint, so the rebuilt table is drawn once, not twice
            row = self.shown.index(keep)
            self._size_now()
            view = max(1, self.scrollable_content_region.height - (1 if self.show_header else 0))
            if row >= view:
                self.scroll_to(y=row - view // 2, animate=False, immediate=True, force=True)
            self.move_cursor(row=row, animate=False, scroll=row < view)

    def _add_rows(self, picked: list[int]) -> None:
        """DataTable.add_row for many one-line rows at once, into an empty table. add_row sets the
        cursor (a reactive, with its watcher) and checks for idle once per row: ~0.1 ms a row, 200 ms
        when a backspace brings 2,000 nodes back (py-spy: the filter's p95). The same bookkeeping, done
        once, from the row records made with the cells (a few dict comprehensions a keystroke)."""
        if not picked:
            return
        keys = self._keys
        self._row_locations = TwoWayDict({keys[i]: n for n, i in enumerate(picked)})
        data, objs = self._row_data, self._row_objs
        self._data.update({keys[i]: data[i] for i in picked})
        self.rows.update({keys[i]: objs[i] for i in picked})
        self._new_rows.update(keys[i] for i in picked)
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if self.columns and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()
        self._update_count += 1
        self.check_idle()

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False):
        """DataTable renders every cell through Rich (a Padding in a Styled) each time the rows change,
        which a filter keystroke does: ~0.3 ms a cell, >100 ms for a screen of 2,000-node rows. A Cell
        is rendered once per width; each draw only layers the row's styles over it, as Styled does."""
        if row_index < 0 or column_index < 0 or self.fixed_rows or self.fixed_columns:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        cell = self._data[row_key].get(self._column_locations.get_key(column_index))
        if not isinstance(cell, Cell) or self.rows[row_key].height != 1:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        if cell.lines is None or cell.lines[0] != width:
            line = cell_line(cell.text, width, self.cell_padding, self.app.console)
            if line is None:  # something cell_line does not lay out: Rich does
                options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True)
                cell.lines = (width, self.app.console.render_lines(Padding(cell, (0, self.cell_padding)), options))
            else:
                cell.lines = (width, [line])
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
        pre = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        return [list(Segment.apply_style(line, pre, post_style)) for line in cell.lines[1]]

    def _size_now(self) -> None:
        """The virtual size of fixed-width columns and one-line rows, known without measuring."""
        width = sum(c.get_render_width(self) for c in self.columns.values())
        self.virtual_size = Size(width, len(self.shown) + (self.header_height if self.show_header else 0))

    def _update_dimensions(self, new_rows) -> None:
        """DataTable measures every cell of every new row to size auto-width columns; ours have fixed
        widths (set from all nodes in _set_columns) and one-line rows, so there is nothing to measure."""
        if self._rows and all(not c.auto_width for c in self.columns.values()):
            self._size_now()
            return
        super()._update_dimensions(new_rows)

    def _cells(self, n: Node, design: Design, sel) -> list[Text]:
        verdict = self.verdicts[n.name]
        overridden = n.name in design.overrides
        dim = "dim" if verdict and not overridden else ""
        role = sel.role_of(n.name) if sel else ""
        if sel and sel.router == n.name and role != "router":
            role_text = Text(role, style=self._role(role)) + Text("+router", style=self._role("router"))
        else:
            role_text = Text(role, style=self._role(role))
        if design.nodes:
            pick = f"●{design.nodes.index(n.name) + 1}" if n.name in design.nodes else ""
        else:
            pick = "auto" if role else ""
        if verdict and overridden:
            why = Text(f"▲ overridden: {verdict}", style=self._role("warning"))
        else:
            why = Text(verdict or n.reason, style=dim)
        plain = [pick, n.name, n.addr, n.state, str(n.gpus), ",".join(n.partitions)]
        cells = [Text(c, style=dim) for c in plain]
        cells[0].stylize("bold")
        cells[4].justify = "right"
        return [*cells, role_text if not dim else Text(role, style="dim"), why]

    def _role(self, role: str) -> Style:
        """A role's (or 'warning') colour from the theme (none for a node without a role)."""
        if role not in self.ROLES:
            return Style()
        return self.get_component_rich_style(f"node-table--{role}", partial=True, default=Style())
