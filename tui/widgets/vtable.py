# Long file: one widget whose data (set_rows), cursor, keys and drawing share the same per-row caches and
# their invariants (a row's version, the cursor's key); split, each part would have to know the others' state.
"""A table drawn line by line (Textual's Line API), for the console's big tables: the run view's process
table (129 rows at 128 nodes) and barrier grid (128 node rows), and the Nodes view (2,000 nodes).

Why not Textual's DataTable: its render caches are keyed by a table-wide update counter, so changing one
cell (the run view's clock changes one per row every second) throws every cached cell and line away, and
at 128 nodes that redraw plus the compositor kept key presses at ~240 ms p95 and the console at a third
of a core; its 10,000-entry cell cache also filled up over a long run (the soak's growth). Here:

- only the rows on screen are drawn (`render_line`), and each row's drawn line is kept per row key
  with what it depends on (the row's version, whether the cursor is on it, its zebra stripe): a change
  to one row repaints that row only, a cursor move repaints two rows; changed rows on screen are marked
  for repainting as runs of neighbouring rows (the clock changes every row: one region), and a row's
  cells that are laid out as before keep their styled segments (only the changed cell is styled again);
- `set_rows` takes the whole list at once (a filter, a state change): it compares each row's cells with
  the previous ones (bumping the version of those that changed), keeps the cursor on the same row key,
  measures the auto-sized columns over the changed rows only (all rows when a widest cell got narrower),
  and draws nothing itself: the cost is the rows shown, not all rows;
- a row's cells are laid out without Rich's layout machinery where they are one plain line
  (`cell_line`), else by Rich, exactly as DataTable does (Padding, no wrap), and styled as DataTable
  styles them (the same component styles, under `vtable--*` names), so screens look the same.

Rows are one line high. Columns are sized to their content (label included) or given a fixed width.
Messages: `VirtualTable.RowHighlighted` when the cursor lands on another row (key or index),
`VirtualTable.RowSelected` on Enter or a click on the cursor's row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from . import cells as cell_layout

_NULL = Style()


@dataclass
class Column:
    key: str
    label: Text
    width: int | None = None  # fixed content width; None: sized to the content (and the label)
    content_width: int = 0

    @property
    def auto(self) -> bool:
        return self.width is None

    def render_width(self, pad: int) -> int:
        return 2 * pad + (self.content_width if self.width is None else self.width)


def _text(value: Text | str) -> Text:
    return value if isinstance(value, Text) else Text(str(value))


def _same_row(old: list[Text], new: Sequence[Text | str]) -> bool:
    """The same cells, drawn alike. (Text's == compares the characters and spans only, not the text's own
    style: a progress bar that turns dim would not count as changed.)"""
    if len(old) != len(new):
        return False
    for a, b in zip(old, new):
        if a is b:
            continue
        if not isinstance(b, Text) or a.plain != b.plain or a.style != b.style or a.justify != b.justify \
                or a._spans != b._spans:
            return False
    return True


class VirtualTable(ScrollView, can_focus=True):
    """Rows of one line, keyed by a string; draws only what is on screen (see the module's doc)."""

    ALLOW_SELECT = False
    BINDINGS = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "first_row", "First row", show=False),
        Binding("end,ctrl+end", "last_row", "Last row", show=False),
        Binding("left", "scroll_sideways(-1)", "Scroll left", show=False),
        Binding("right", "scroll_sideways(1)", "Scroll right", show=False),
    ]
    COMPONENT_CLASSES = {"vtable--cursor", "vtable--header", "vtable--header-cursor", "vtable--odd-row",
                         "vtable--even-row"}
    # DataTable's look (Textual 8), under our names
    DEFAULT_CSS = """
    VirtualTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .vtable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .vtable--header {
                background-tint: $foreground 5%;
            }
        }
        &:dark {
            & > .vtable--even-row {
                background: $surface-darken-1 40%;
            }
        }
        & > .vtable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .vtable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .vtable--odd-row {
        }
        & > .vtable--even-row {
            background: $surface-lighten-1 50%;
        }
        & > .vtable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .vtable--header-cursor {
            background: $accent-darken-1;
            color: $foreground;
        }
    }
    """

    class _RowMessage(Message):
        def __init__(self, table: VirtualTable, row: int, key: str) -> None:
            super().__init__()
            self.table = table
            self.row = row
            self.key = key

        @property
        def control(self) -> VirtualTable:
            return self.table

    class RowHighlighted(_RowMessage):
        """The cursor is on another row (its key or its index changed)."""

    class RowSelected(_RowMessage):
        """Enter on the cursor's row, or a click on it."""

    def __init__(self, *, id: str | None = None, classes: str | None = None, zebra_stripes: bool = False,
                 cell_padding: int = 1) -> None:
        super().__init__(id=id, classes=classes)
        self.zebra_stripes = zebra_stripes
        self.cell_padding = cell_padding
        self.columns: list[Column] = []
        self.keys: list[str] = []  # row keys in order
        self._vt_index: dict[str, int] = {}
        self._vt_cells: dict[str, list[Text]] = {}  # the rows shown
        self._vt_known: dict[str, list[Text]] = {}  # every row seen (a filter brings rows back unchanged)
        self._vt_version: dict[str, int] = {}
        self._vt_cursor = 0
        self._vt_announced: tuple[int, str] | None = None  # (index, key) last told by RowHighlighted
        # called at once, in the key's own turn, when the cursor lands on another row (before RowHighlighted
        # is posted): what depends on the cursor is drawn in the same frame as the cursor, not in one after
        self.on_cursor: Callable[[str], None] | None = None
        # caches: a row's laid-out cells without the table's styles, and its styled line
        # key -> (version, cells laid out, the Texts and widths they were laid out from)
        self._vt_laid: dict[str, tuple[int, list[list[Segment]], list[Text], list[int]]] = {}
        self._vt_lines: dict[str, tuple[tuple, Strip]] = {}  # key -> ((version, cursor, odd), line)
        self._vt_header: Strip | None = None
        self._vt_look: tuple | None = None  # what every cached line depends on (styles, width)
        self._vt_base = Style()  # the widget's own style, as of the last render
        self._vt_styles: dict[str, Style] = {}
        self.renders = 0  # rows laid out (a cache miss of the row's cells); tests count these
        self.cells_laid = 0  # cells laid out (a cell the row's previous layout had, the same Text, is kept)
        self.lines_drawn = 0  # rows' lines styled (a cache miss of the line: cursor, stripe, version)
        self.cells_styled = 0  # cells styled for a line (a cell laid out as before, in the same style, is kept)
        self.rows_refreshed = 0  # rows on screen marked for repainting (tests)
        # key -> (style over, style after, the cells laid out, the same styled) of the row's last line
        self._vt_styled: dict[str, tuple[Style, Style, list[list[Segment]], list[list[Segment]]]] = {}

    # -- data ---------------------------------------------------------------------------------------
    def set_columns(self, columns: Sequence[tuple[str, Text | str]],
                    widths: Sequence[int | None] | None = None) -> None:
        """The columns as (key, label), optionally with fixed content widths (None: sized to the content).
        Keeps the rows whose cells still line up (callers set the rows right after)."""
        widths = list(widths) if widths is not None else [None] * len(columns)
        new = [Column(key, _text(label), width) for (key, label), width in zip(columns, widths)]
        if [(c.key, c.label.plain, c.width) for c in new] == [(c.key, c.label.plain, c.width) for c in self.columns]:
            return  # the same columns: every drawn row stays good
        self.columns = new
        self._forget_all()
        self._measure()
        self._resized()

    def set_rows(self, rows: Iterable[tuple[str, Sequence[Text | str]]]) -> None:
        """Every row, in order, as (key, cells); a row's list of cells is not changed in place once given.
        A row whose cells did not change keeps its drawn line; the cursor stays on its row's key (or on
        its index when that row is gone)."""
        keep = self.cursor_key
        old_keys = self.keys
        known = self._vt_known
        version = self._vt_version
        new_cells: dict[str, list[Text]] = {}
        changed: list[str] = []
        was: list[list[Text] | None] = []  # the changed rows' cells before (for measuring only what changed)
        keys: list[str] = []
        for key, row in rows:
            keys.append(key)
            old = known.get(key)
            if old is not None and (old is row or _same_row(old, row)):
                if type(row) is list:  # equal cells: keep the caller's list, found by identity next time
                    old = known[key] = row
                new_cells[key] = old
                continue
            if type(row) is not list or not all(isinstance(c, Text) for c in row):
                row = [_text(c) for c in row]
            new_cells[key] = known[key] = row  # (the caller's own list: the next set_rows finds it by identity)
            version[key] = version.get(key, 0) + 1
            changed.append(key)
            was.append(old)
        if len(known) > 4 * len(new_cells) + 5000:  # many rows that left: forget them
            for key in [k for k in known if k not in new_cells]:
                del known[key]
                self._vt_laid.pop(key, None)
                self._vt_lines.pop(key, None)
                self._vt_styled.pop(key, None)
        self._vt_cells = new_cells
        same_order = keys == old_keys
        if not same_order:
            self.keys = keys
            self._vt_index = {k: i for i, k in enumerate(keys)}
        if not same_order:
            widths_changed = self._measure()
        elif changed:
            widths_changed = self._measure_changed([new_cells[k] for k in changed], was)
        else:
            widths_changed = False
        if keep is not None and keep in self._vt_index:
            self._vt_cursor = self._vt_index[keep]
        self._vt_cursor = max(0, min(self._vt_cursor, len(keys) - 1))
        if widths_changed or not same_order:
            if widths_changed:
                self._forget_all()
            self._resized()
            self.refresh()
            self._scroll_cursor_into_view()
        elif changed:
            index = self._vt_index
            self._refresh_rows([index[k] for k in changed])
        self._announce()

    def clear(self) -> None:
        self.set_rows([])

    # -- reading (tests, screens) -------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self.keys)

    @property
    def cursor_row(self) -> int:
        return self._vt_cursor

    @property
    def cursor_key(self) -> str | None:
        return self.keys[self._vt_cursor] if 0 <= self._vt_cursor < len(self.keys) else None

    def get_row_at(self, index: int) -> list[Text]:
        return list(self._vt_cells[self.keys[index]])

    def get_row(self, key: str) -> list[Text]:
        return list(self._vt_cells[key])

    def get_cell(self, key: str, column: str) -> Text:
        for i, c in enumerate(self.columns):
            if c.key == column:
                return self._vt_cells[key][i]
        raise KeyError(column)

    def get_row_index(self, key: str) -> int:
        return self._vt_index[key]

    def row_text(self, index: int) -> str:
        """A row as plain text, its cells padded as drawn (tests)."""
        return "".join(seg.text for cell in self._laid_out(self.keys[index]) for seg in cell)

    # -- the cursor ---------------------------------------------------------------------------------
    def move_cursor(self, *, row: int | None = None, column: int | None = None, animate: bool = False,
                    scroll: bool = True) -> None:
        """Put the cursor on a row (by index; `column` is accepted and ignored: the cursor is a row)."""
        if row is None:
            return
        row = max(0, min(row, len(self.keys) - 1))
        if row != self._vt_cursor:
            old = self._vt_cursor
            self._vt_cursor = row
            self._refresh_row(old)
            self._refresh_row(row)
        if scroll:
            self._scroll_cursor_into_view()
        self._announce()

    def select_key(self, key: str, scroll: bool = True) -> None:
        if key in self._vt_index:
            self.move_cursor(row=self._vt_index[key], scroll=scroll)

    def _announce(self) -> None:
        key = self.cursor_key
        if key is None:
            self._vt_announced = None
            return
        if self._vt_announced != (self._vt_cursor, key):
            self._vt_announced = (self._vt_cursor, key)
            if self.on_cursor is not None:
                self.on_cursor(key)
            self.post_message(self.RowHighlighted(self, self._vt_cursor, key))

    @property
    def _head(self) -> int:
        return 1 if self.columns else 0

    def _view_rows(self) -> int:
        return self.scrollable_content_region.height - self._head

    def _scroll_cursor_into_view(self) -> None:
        view = self._view_rows()
        if view <= 0:  # not laid out yet
            if self.is_mounted:
                self.call_after_refresh(self._scroll_when_sized)
            return
        top = int(self.scroll_y)
        row = self._vt_cursor
        if row < top:
            self.scroll_to(y=row, animate=False, force=True, immediate=True)
        elif row >= top + view:
            self.scroll_to(y=row - view + 1, animate=False, force=True, immediate=True)

    def _scroll_when_sized(self) -> None:
        if self._view_rows() > 0:
            self._scroll_cursor_into_view()

    # -- keys and mouse -----------------------------------------------------------------------------
    def action_cursor_up(self) -> None:
        self.move_cursor(row=self._vt_cursor - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(row=self._vt_cursor + 1)

    def action_page_down(self) -> None:
        view = max(1, self._view_rows())
        self.scroll_to(y=self.scroll_y + view, animate=False, force=True, immediate=True)
        self.move_cursor(row=self._vt_cursor + view)

    def action_page_up(self) -> None:
        view = max(1, self._view_rows())
        self.scroll_to(y=max(0, self.scroll_y - view), animate=False, force=True, immediate=True)
        self.move_cursor(row=self._vt_cursor - view)

    def action_first_row(self) -> None:
        self.move_cursor(row=0)

    def action_last_row(self) -> None:
        self.move_cursor(row=len(self.keys) - 1)

    def action_scroll_sideways(self, cells: int) -> None:
        self.scroll_to(x=self.scroll_x + cells, animate=False, force=True, immediate=True)

    def action_select_cursor(self) -> None:
        key = self.cursor_key
        if key is not None:
            self.post_message(self.RowSelected(self, self._vt_cursor, key))

    async def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < self._head:
            return
        row = offset.y - self._head + int(self.scroll_y)
        if not 0 <= row < len(self.keys):
            return
        event.stop()
        if row == self._vt_cursor:
            self.action_select_cursor()
        else:
            self.move_cursor(row=row)

    # -- drawing ------------------------------------------------------------------------------------
    def _measure(self) -> bool:
        """Content widths of the auto-sized columns; True if any changed."""
        changed = False
        rows = self._vt_cells.values()
        for i, col in enumerate(self.columns):
            if not col.auto:
                continue
            width = max((row[i].cell_len for row in rows if i < len(row)), default=0)
            width = max(width, col.label.cell_len)
            if width != col.content_width:
                col.content_width = width
                changed = True
        return changed

    def _measure_changed(self, rows: list[list[Text]], before: list[list[Text] | None]) -> bool:
        """As _measure after only these rows changed (the same rows in the same order; `before`: their cells
        before, None for a row not seen): a column is measured again over every row only when a changed row
        was its widest and got narrower. (The clock changes a cell of every row each second: measuring 129
        rows' eight cells for it was a fifth of the process table's redraw.)"""
        changed = False
        for i, col in enumerate(self.columns):
            if not col.auto:
                continue
            width = col.content_width
            widest = max((row[i].cell_len for row in rows if i < len(row)), default=0)
            if widest > width:
                col.content_width = widest
                changed = True
            elif widest < width and any(old is None or (i < len(old) and old[i].cell_len >= width) for old in before):
                return self._measure() or changed  # (a widest cell got narrower: every row measured again)
        return changed

    def _table_width(self) -> int:
        return sum(c.render_width(self.cell_padding) for c in self.columns)

    def _resized(self) -> None:
        size = Size(self._table_width(), len(self.keys) + self._head)
        if size != self.virtual_size:
            if self._same_box(size):
                # the table's own size cannot change: no layout pass of the whole screen (at 128 nodes one
                # cost 40-250 ms, several a second while a run came up, as columns widened); its scrollbars
                # follow and it is repainted
                self.set_reactive(VirtualTable.virtual_size, size)
                self._scroll_update(size)
                self.refresh()
            else:
                self.virtual_size = size  # (a reactive with layout=True: auto height follows)
        top = max(0, size.height - self.scrollable_content_region.height)
        if self.is_mounted and self.scroll_y > top and self.scrollable_content_region.height > 0:
            self.scroll_to(y=top, animate=False, force=True, immediate=True)

    def _same_box(self, size: Size) -> bool:
        """Whether the table keeps its size and scrollbars with this virtual size: it was taller than what it
        shows and still is (its auto height held at its max-height, the vertical scrollbar there both times),
        and it is as much wider or narrower than what it shows as before (the horizontal scrollbar as it was).
        Its width never follows its content (it fills its box)."""
        if not self.is_mounted or (self.styles.width is not None and self.styles.width.is_auto):
            return False
        region = self.scrollable_content_region
        old = self.virtual_size
        return (region.height > 0 and old.height > region.height and size.height > region.height
                and (old.width > region.width) == (size.width > region.width))

    def _forget_all(self) -> None:
        self._vt_laid.clear()
        self._vt_lines.clear()
        self._vt_styled.clear()
        self._vt_header = None

    def notify_style_update(self) -> None:
        # (focus, theme: the lines' styles; the cells' own layout does not depend on them)
        super().notify_style_update()
        self._vt_lines.clear()
        self._vt_styles.clear()
        self._vt_header = None
        self._vt_look = None

    def on_resize(self) -> None:
        self._vt_lines.clear()  # the rows' fill to the widget's width
        self._vt_header = None
        self._scroll_cursor_into_view()

    def _refresh_row(self, index: int) -> None:
        self._refresh_rows([index])

    def _refresh_rows(self, indices: Iterable[int]) -> None:
        """Repaint these rows where they are on screen, neighbours as one region (the clock changes every
        row: one region per run of rows on screen, none for the rows scrolled away)."""
        top = int(self.scroll_y) - self._head
        head, height = self._head, self.size.height
        ys = sorted(y for y in (i - top for i in indices) if head <= y < height)
        if not ys:
            return
        self.rows_refreshed += len(ys)
        width = self.size.width
        regions = []
        start = prev = ys[0]
        for y in ys[1:]:
            if y != prev + 1:
                regions.append(Region(0, start, width, prev - start + 1))
                start = y
            prev = y
        regions.append(Region(0, start, width, prev - start + 1))
        self.refresh(*regions)

    def _laid_out(self, key: str) -> list[list[Segment]]:
        """The row's cells laid out at the columns' widths, without the table's styles."""
        version = self._vt_version.get(key, 0)
        hit = self._vt_laid.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        self.renders += 1
        pad = self.cell_padding
        console = self.app.console
        out = []
        cells = self._vt_cells[key]
        widths = [col.render_width(pad) for col in self.columns]
        # a row changed: its cells given again by identity (a Text is not changed in place once given, as
        # set_rows assumes) keep their layout; the clock changes one cell of each row every second
        old_texts, old_widths, old_out = (hit[2], hit[3], hit[1]) if hit is not None else ((), (), ())
        for i, (width, text) in enumerate(zip(widths, cells)):
            if i < len(old_texts) and old_texts[i] is text and old_widths[i] == width:
                out.append(old_out[i])
                continue
            self.cells_laid += 1
            line = cell_layout.cell_line(text, width, pad, console)
            if line is None:  # something cell_line does not lay out: Rich does
                options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True)
                line = console.render_lines(Padding(text, (0, pad)), options)[0]
            out.append(line)
        self._vt_laid[key] = (version, out, list(cells), widths)
        return out

    def _styles(self, cursor: bool, header: bool) -> tuple[Style, Style]:
        """(style over the cell, style after the cell's own): DataTable's rules for a row cursor."""
        component = _NULL
        if cursor:
            component = self.get_component_rich_style("vtable--cursor")
            if header:
                component += self.get_component_rich_style("vtable--header-cursor")
        post = Style.from_color(color=component.color) + Style.from_color(bgcolor=component.bgcolor)
        return component, post

    def _line(self, cells: list[list[Segment]], row_style: Style, cursor: bool, header: bool,
              key: str | None = None) -> Strip:
        """`key`: the row's; a cell laid out as in the row's last line (the same segments), in the same
        styles, keeps its styled segments (the clock changes one cell of a row each second)."""
        component, post = self._styles(cursor, header)
        pre = row_style + component
        segments: list[Segment] = []
        last = self._vt_styled.get(key) if key is not None else None
        if last is not None and (last[0] != pre or last[1] != post):
            last = None
        styled: list[list[Segment]] = []
        for i, line in enumerate(cells):
            if last is not None and i < len(last[2]) and last[2][i] is line:
                done = last[3][i]
            else:
                self.cells_styled += 1
                done = list(Segment.apply_style(line, pre, post))
            styled.append(done)
            segments.extend(done)
        if key is not None:
            self._vt_styled[key] = (pre, post, cells, styled)
        table_width = self._table_width()
        fill = max(0, self.size.width - table_width)
        if fill:
            segments.append(Segment(" " * fill, row_style + component))
        return Strip(segments, table_width + fill)

    def _style_of(self, component: str) -> Style:
        """A component's style as DataTable takes it (`get_component_styles(...).rich_style`, which costs
        ~0.1 ms: kept until the look changes)."""
        style = self._vt_styles.get(component)
        if style is None:
            style = self._vt_styles[component] = self.get_component_styles(component).rich_style
        return style

    def _row_style(self, index: int) -> Style:
        if not self.zebra_stripes:
            return self._vt_base
        return self._style_of("vtable--odd-row" if index % 2 else "vtable--even-row")

    def render_lines(self, crop: Region) -> list[Strip]:
        base = self.rich_style
        look = (self.get_pseudo_class_state(), base, self.size.width)
        if look != self._vt_look:  # focus, theme or width: every line looks different
            self._vt_look = look
            self._vt_base = base
            self._vt_styles.clear()
            self._vt_lines.clear()
            self._vt_header = None
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self._vt_base
        if self.columns and y == 0:
            if self._vt_header is None:
                pad = self.cell_padding
                labels = []
                for col in self.columns:
                    w = col.render_width(pad)
                    line = cell_layout.cell_line(col.label, w, pad, self.app.console)
                    if line is None:
                        options = self.app.console_options.update_dimensions(w, 1).update(no_wrap=True)
                        line = self.app.console.render_lines(Padding(col.label, (0, pad)), options)[0]
                    labels.append(line)
                self._vt_header = self._line(labels, self._style_of("vtable--header"), False, True)
            strip = self._vt_header
        else:
            index = y - self._head + int(self.scroll_y)
            if not 0 <= index < len(self.keys):
                return Strip.blank(width, base)
            key = self.keys[index]
            sig = (self._vt_version.get(key, 0), index == self._vt_cursor, bool(self.zebra_stripes and index % 2))
            hit = self._vt_lines.get(key)
            if hit is not None and hit[0] == sig:
                strip = hit[1]
            else:
                self.lines_drawn += 1
                strip = self._line(self._laid_out(key), self._row_style(index), sig[1], False, key)
                self._vt_lines[key] = (sig, strip)
        x = int(self.scroll_x)
        if x or strip.cell_length != width:
            strip = strip.crop(x, x + width).adjust_cell_length(width, base)
        return strip

