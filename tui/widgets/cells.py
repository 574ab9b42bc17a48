"""Changing a few DataTable cells without re-rendering the whole table.

`DataTable.update_cell` bumps the table's update counter, which is part of every render cache key:
each update re-renders every visible cell of every row (each a Rich Padding render), and with
`update_width=True` measures the columns again and re-lays the screen out. The run view's clock
changes one cell per process row each second (time in stage), so that was most of the console's
drawing while a run merely served (py-spy and per-call CPU timing: ~20 ms per table per second).

`set_cells` puts the new values in and drops only those cells' cached renders (the rows' cached
lines are rebuilt from the other cells' cached renders), then refreshes only the rows that changed.
A change of width falls back to `update_cell(update_width=True)`: the column may have to grow or
shrink. Textual's DataTable keeps these caches (8.x): tests/tui/test_quiet.py checks that the
rendered rows show the new values and that unchanged cells are not rendered again.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets._data_table import ColumnKey, RowKey


def set_cells(table: DataTable, changes: Iterable[tuple[str, str, Text]]) -> int:
    """Set cells (row key, column key, value); returns how many changed."""
    todo = []
    for row, column, value in changes:
        old = table.get_cell(row, column)
        if old != value:
            todo.append((row, column, value, old))
    if not todo:
        return 0
    caches = [getattr(table, name, None) for name in
              ("_cell_render_cache", "_row_render_cache", "_row_renderable_cache", "_line_cache")]
    if any(getattr(old, "cell_len", -1) != value.cell_len for _, _, value, old in todo) or None in caches:
        for row, column, value, _ in todo:  # a width changed: measure and lay out again
            table.update_cell(row, column, value, update_width=True)
        return len(todo)
    cell_cache, row_cache, renderable_cache, line_cache = caches
    rows, cells = set(), set()
    for row, column, value, _ in todo:
        rk, ck = RowKey(row), ColumnKey(column)
        table._data[rk][ck] = value
        rows.add(rk)
        cells.add((rk, ck))
    for key in [k for k in cell_cache.keys() if (k[0], k[1]) in cells]:
        cell_cache.discard(key)
    # the rows' renders are put together from the cells' (cheap once those are cached)
    row_cache.clear()
    renderable_cache.clear()
    line_cache.clear()
    for rk in rows:
        table.refresh_row(table.get_row_index(rk))
    return len(todo)
