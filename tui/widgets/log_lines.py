"""A bounded, follow-mode log: only the lines on screen are drawn, however many arrive.

Lines arrive in batches (the log screen feeds it on a timer), the oldest fall off past `max_lines`
(the full log stays on disk). Following keeps the end in view; scrolling up pauses it and counts
the lines that arrived since; reaching the end again (End, F, or scrolling down) resumes it.
Errors and known fatal lines (core's HIGHLIGHT) are coloured; search matches are marked.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as TextualStyle

from ..logtext import HIGHLIGHT, clean
from .log_scrollbar import KeptScrollBars


class LogLines(KeptScrollBars, ScrollView, can_focus=True):
    COMPONENT_CLASSES = {"log-lines--error", "log-lines--match", "log-lines--current"}
    DEFAULT_CSS = """
    LogLines {
        background: $surface;
        overflow: auto auto;
    }
    /* a line wider than the view: the horizontal scrollbar's row stays while wrapped too (an empty track
       then), so toggling wrap changes no scrollbar and needs no layout pass of the screen */
    LogLines.-wide { overflow-x: scroll; }
    LogLines > .log-lines--error { color: $text-error; }
    LogLines > .log-lines--match { color: $text-warning; text-style: reverse; }
    LogLines > .log-lines--current { background: $primary-muted; }
    """

    @dataclass
    class FollowChanged(Message):
        """Following started or stopped (the screen updates its status line)."""

        follow: bool

    def __init__(self, max_lines: int = 5_000, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.lines: deque[str] = deque()
        self.cells: deque[int] = deque()  # cell length of each line (for wrapping and the width)
        self.base = 0  # absolute number of lines[0] (lines dropped from the front so far)
        self.follow = True
        self.pending = 0  # lines that arrived while paused
        self.wrap = False
        self.search = ""
        self.current: int | None = None  # absolute line of the current search match
        self._width = 0
        self._rows: list[int] | None = None  # wrap: first visual row of each line (prefix sums)
        self._rows_width = 0
        self._cache: LRUCache[tuple, Strip] = LRUCache(1024)
        self._moving = False  # our own scroll, not the user's
        # render_lines: each row's finished strip by (absolute line, first column) for the frame's look
        self._rows_cache: dict[tuple, Strip] = {}
        self._frame: tuple | None = None
        self.frame_rows_drawn = 0  # rows the last frame drew (not taken from the rows' cache)

    # -- feeding -----------------------------------------------------------------------------------
    def append(self, lines: Iterable[str]) -> int:
        """Add lines (cleaned for the screen); returns how many were added."""
        new = [clean(x) for x in lines]
        if not new:
            return 0
        top_before = self._top_line()  # (before the lines grow: the wrap rows are grown below, not recounted)
        self.lines.extend(new)
        # (a cleaned ASCII line is printable, one cell a character; rich's cell_len caches each distinct
        # line it measures: ~8 us a flood line, 3 ms of a 400-line batch, for len's answer)
        lens = [len(x) if x.isascii() else cell_len(x) for x in new]
        self.cells.extend(lens)
        self._width = max(self._width, max(lens))
        dropped = len(self.lines) - self.max_lines
        if dropped > 0:
            for _ in range(dropped):
                self.lines.popleft()
                self.cells.popleft()
            self.base += dropped
        self._grow_rows(lens, max(0, dropped))
        self._mark_wide()
        self._update_size()
        if self.follow:
            self._scroll_to_end()
        else:
            self.pending += len(new)
            if dropped > 0:  # keep the same lines in view while paused, as far as they still exist
                self._scroll_to_line(max(0, top_before - self.base), 0)
        self.refresh()
        return len(new)

    def _grow_rows(self, lens: list[int], dropped: int) -> None:
        """Keep the wrap rows (prefix sums) up to date in O(lines added) + one subtraction pass, instead of
        recounting every line's rows each pulse (5,000 lines, ~1-2 ms a pulse while wrapped)."""
        rows = self._rows
        if rows is None:
            return
        width = self._rows_width
        total = rows.pop()
        for n in lens:
            rows.append(total)
            total += max(1, -(-n // width))
        rows.append(total)
        if dropped:
            gone = rows[dropped]
            self._rows = [r - gone for r in rows[dropped:]] if gone else rows[dropped:]

    def clear(self) -> None:
        self.lines.clear()
        self.cells.clear()
        self.base, self.pending, self._width, self.current = 0, 0, 0, None
        self._rows = None
        self._cache.clear()
        self._rows_cache.clear()
        self._update_size()
        self.refresh()

    # -- follow ----------------------------------------------------------------------------------------
    def resume(self) -> None:
        """Follow again: jump to the end."""
        self._set_follow(True)
        self._scroll_to_end()

    def _set_follow(self, on: bool) -> None:
        if on:
            self.pending = 0
        if on != self.follow:
            self.follow = on
            self.post_message(self.FollowChanged(on))

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if self._moving:
            return
        if new < old and self.max_scroll_y > 0 and old <= self.max_scroll_y:  # (not a clamp after shrinking)
            self._set_follow(False)
        elif new >= self.max_scroll_y and not self.follow:
            self._set_follow(True)

    def action_scroll_end(self) -> None:
        self.resume()

    def _scroll_to_end(self) -> None:
        self._moving = True
        try:
            # force: right after the virtual size grew the scrollbar may not be laid out yet
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)
        finally:
            self._moving = False

    def _scroll_to_line(self, index: int, col: int, center: bool = False) -> None:
        """Put line `index` (in self.lines) at the top (or the middle) of the view."""
        if self.wrap:
            width = max(1, self.scrollable_content_region.width)
            y, x = self._row_of(index) + col // width, 0
        else:
            width = max(1, self.scrollable_content_region.width)
            y, x = index, (max(0, col - width // 2) if col >= width else 0)
        if center:
            y -= self.scrollable_content_region.height // 2
        self._moving = True
        try:
            self.scroll_to(x=x, y=max(0, y), animate=False, immediate=True, force=True)
        finally:
            self._moving = False

    # -- wrap --------------------------------------------------------------------------------------------
    def set_wrap(self, on: bool) -> None:
        top = self._top_line()
        self.wrap = on
        self._rows = None
        self._cache.clear()
        self._moving = True  # the virtual height changes: a clamped scroll_y is not the user scrolling
        try:
            self._update_size()
        finally:
            self._moving = False
        if self.follow:
            self._scroll_to_end()
        else:
            self._scroll_to_line(max(0, top - self.base), 0)
        self.refresh()

    def _mark_wide(self) -> None:
        """A line wider than the view keeps the horizontal scrollbar's row (see -wide in the CSS): set once
        when the first such line arrives (the scrollbar comes, a layout pass as before), not per wrap toggle."""
        bar = self.styles.scrollbar_size_vertical if self.show_vertical_scrollbar else 0
        width = self.container_size.width - bar
        if width > 0:
            self.set_class(self._width > width, "-wide")

    def on_resize(self) -> None:
        self._mark_wide()
        if self.wrap:
            self._rows = None
            self._update_size()
        if self.follow:
            self._scroll_to_end()

    def _wrap_rows(self) -> list[int]:
        width = max(1, self.scrollable_content_region.width)
        if self._rows is None or self._rows_width != width:
            # (a wrap toggle counts them: one comprehension and accumulate, ~3x the Python loop's speed)
            self._rows = [0, *accumulate([(n - 1) // width + 1 if n else 1 for n in self.cells])]
            self._rows_width = width
        return self._rows

    def _row_of(self, index: int) -> int:
        return self._wrap_rows()[index]

    def _top_line(self) -> int:
        """The absolute number of the first line in view."""
        y = int(self.scroll_y)
        if self.wrap and self.lines:
            y = max(0, bisect_right(self._wrap_rows(), y) - 1)
        return self.base + y

    def _update_size(self) -> None:
        if self.wrap:
            rows = self._wrap_rows()
            size = Size(max(1, self.scrollable_content_region.width), rows[-1])
        else:
            size = Size(self._width, len(self.lines))
        if size == self.virtual_size:
            return
        if self.is_mounted and self._bars(size) == (self.show_horizontal_scrollbar, self.show_vertical_scrollbar):
            # The scrollbars stay as they are (a flood grows the height; wrap changes both sizes): the
            # view and its scrollbars are updated in place, no layout pass. Setting virtual_size re-lays
            # the whole screen out (a reactive with layout=True), which under a flood re-rendered every
            # widget on the log screen each pulse (py-spy: 41 % of the console's loop) and was most of a
            # wrap toggle's cost. (_scroll_update decides the scrollbars itself: if it ever differed from
            # _bars, its own reactives ask for the layout pass.)
            self.set_reactive(LogLines.virtual_size, size)
            self._scroll_update(size)  # the scrollbars' windows and the scroll limits
            self.refresh()
        else:
            self.virtual_size = size

    def _bars(self, size: Size) -> tuple[bool, bool]:
        """(horizontal, vertical) scrollbar shown for a virtual size: Textual's rule (_refresh_scrollbars)."""
        styles = self.styles
        width, height = self.container_size
        over_x, over_y = styles.overflow_x, styles.overflow_y
        across = over_x == "scroll" or (over_x == "auto" and size.width > width)
        down = over_y == "scroll" or (over_y == "auto" and size.height > height)
        if over_x == "auto" and down and not across:
            across = size.width > width - styles.scrollbar_size_vertical
        if over_y == "auto" and across and not down:
            down = size.height > height - styles.scrollbar_size_horizontal
        return across, down

    # -- search -------------------------------------------------------------------------------------------
    def set_search(self, term: str) -> None:
        if term != self.search:
            self.search = term
            self.current = None
            self._cache.clear()
            self.refresh()

    def matches(self) -> list[int]:
        """Absolute line numbers whose text contains the search term (case-insensitive)."""
        needle = self.search.lower()
        if not needle:
            return []
        return [self.base + i for i, line in enumerate(self.lines) if needle in line.lower()]

    def find(self, backward: bool = False) -> int | None:
        """Go to the next (previous) match after (before) the current one or the view; None if none."""
        needle = self.search.lower()
        if not needle or not self.lines:
            return None
        n = len(self.lines)
        if self.current is not None and self.current >= self.base:
            start = self.current - self.base
        else:
            start = self._top_line() - self.base + (0 if backward else -1)
            if self.follow and backward:
                start = n
        order = range(start - 1, -1, -1) if backward else range(start + 1, n)
        hit = next((i for i in order if needle in self.lines[i].lower()), None)
        if hit is None:  # wrap around
            order = range(n - 1, -1, -1) if backward else range(n)
            hit = next((i for i in order if needle in self.lines[i].lower()), None)
        if hit is None:
            return None
        self.current = self.base + hit
        self._set_follow(False)
        self._cache.clear()
        self._scroll_to_line(hit, self.lines[hit].lower().find(needle), center=True)
        self.refresh()
        return self.current

    # -- drawing --------------------------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()
        self._rows_cache.clear()

    def render_lines(self, crop: Region) -> list[Strip]:
        """A frame of the log. Under a flood every row shows another line each frame; Textual's StylesCache
        drew each row again through its general path (borders, padding, tint, opacity: none here) and our
        render_line asked for the widget's rich_style per row (an ancestor walk): ~0.5 ms a row, ~45 rows a
        frame. With the plain box this widget has, a frame's rows are made here, as StylesCache would make
        them, and each row's finished strip is kept under (line, column): a row that only moved up the
        screen (its line was on screen in the last frame) is not drawn again. A box with anything more
        (a border, padding, opacity...) takes Textual's path."""
        look = self._frame_look()
        if look is None:
            if self._frame is not None:  # Textual's cache of lines by screen row was not kept meanwhile
                self._frame = None
                self._rows_cache.clear()
                self._styles_cache.clear()
            return super().render_lines(crop)
        if look != self._frame:  # style, size, filters, search...: every row looks different
            self._frame = look
            self._rows_cache.clear()
        style, inner, width, content_width, full_width, filters, background = look[:7]
        scroll_x, scroll_y = self.scroll_offset
        rows_cache = self._rows_cache
        content_height = self.content_region.height
        strips: list[Strip] = []
        self.frame_rows_drawn = 0
        wrap_rows = self._wrap_rows() if self.wrap else None
        if len(rows_cache) > 2 * max(1, content_height):  # keep only what may still shift into view
            keep = {self._row_key(scroll_x, scroll_y + y, width, wrap_rows) for y in range(content_height)}
            self._rows_cache = rows_cache = {k: v for k, v in rows_cache.items() if k in keep}
        for y in crop.line_range:
            key = self._row_key(scroll_x, scroll_y + y, width, wrap_rows) if y < content_height else ("",)
            strip = rows_cache.get(key)
            if strip is None:
                self.frame_rows_drawn += 1
                if y < content_height:
                    line = self._render_row(key, width, style)
                    line = line.adjust_cell_length(content_width, inner)
                else:
                    line = Strip.blank(content_width, inner)
                strip = line if line.cell_length == full_width else Strip(list(line), full_width)
                for f in filters:
                    strip = strip.apply_filter(f, background)
                rows_cache[key] = strip
            strips.append(strip)
        if crop.column_span != (0, full_width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _frame_look(self) -> tuple | None:
        """What every row of a frame depends on besides its line (None: a box this path does not draw)."""
        styles = self.styles
        if (self.BLANK or any(edge for edge, _ in styles.border) or any(edge for edge, _ in styles.outline)
                or any(styles.padding) or styles.tint.a or self.opacity != 1.0 or styles.text_opacity != 1.0
                or (styles.has_rule("hatch") and styles.hatch != "none")):
            return None
        base_background, background = self.background_colors
        inner = TextualStyle(background=base_background + background).rich_style
        return (self.rich_style, inner, self.scrollable_content_region.width, self.content_region.width,
                self.region.width, tuple(self.get_line_filters()), background, self.wrap, self.search,
                self.current)

    def _row_key(self, scroll_x: int, row: int, width: int, rows: list[int] | None = None) -> tuple:
        """(absolute line, first column shown) of a row of the view; ("",) past the end. `rows`: the wrap
        rows, when the caller has them (a frame asks once, not per row)."""
        if self.wrap:
            rows = rows if rows is not None else self._wrap_rows()
            if row >= rows[-1]:
                return ("",)
            index = bisect_right(rows, row) - 1
            return (self.base + index, (row - rows[index]) * width)
        if row >= len(self.lines):
            return ("",)
        return (self.base + row, scroll_x)

    def _render_row(self, key: tuple, width: int, style: Style) -> Strip:
        if key == ("",):
            return Strip.blank(width, style)
        index, start = key[0] - self.base, key[1]
        plain = self._plain_row(index, start, width, style)
        if plain is not None:
            return plain
        return self._line_strip(index, style).crop_extend(start, start + width, style)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        return self._render_row(self._row_key(scroll_x, scroll_y + y, width), width, self.rich_style)

    def _plain_row(self, index: int, start: int, width: int, style: Style) -> Strip | None:
        """The common row, made in one go: an ASCII line (one cell a character) with nothing to colour.
        Under a flood every row shows a new line each pulse; cropping a whole-line strip made three strips
        a row (each with its caches), the largest part of this console's drawing."""
        line = self.lines[index]
        if not line.isascii() or self.base + index == self.current or HIGHLIGHT.search(line):
            return None
        if self.search and self.search.lower() in line.lower():
            return None
        piece = line[start:start + width]
        if len(piece) < width:
            piece += " " * (width - len(piece))
        return Strip([Segment(piece, style)], width)

    def _line_strip(self, index: int, style: Style) -> Strip:
        absolute = self.base + index
        key = (absolute, absolute == self.current)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        line = self.lines[index]
        m = HIGHLIGHT.search(line)
        marked = self.search and self.search.lower() in line.lower()
        if not m and not marked and absolute != self.current:
            # the common case, cheaply: one plain segment (lines were cleaned of control characters)
            strip = Strip([Segment(line, style)], self.cells[index])
            self._cache[key] = strip
            return strip
        text = Text(line, no_wrap=True, end="")
        text.stylize(style)
        if m:
            text.stylize(self.get_component_rich_style("log-lines--error", partial=True))
        if self.search:
            needle, low = self.search.lower(), line.lower()
            start = low.find(needle)
            mark = self.get_component_rich_style("log-lines--match", partial=True)
            while start >= 0:
                text.stylize(mark, start, start + len(needle))
                start = low.find(needle, start + max(1, len(needle)))
        if absolute == self.current:
            text.stylize(self.get_component_rich_style("log-lines--current", partial=True))
        strip = Strip(text.render(self.app.console), cell_len(line))
        self._cache[key] = strip
        return strip
