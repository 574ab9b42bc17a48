"""A Static that draws its text line by line, keeping each line's drawing until that line changes.

A Static draws its whole content again whenever it changes: Textual converts the Text to its own Content,
wraps every line and styles every cell. The run view's panels change a line or two at a time, several times a
second while a big run comes up (the diagnosis gains a line, one worker's stage moves on), and at 128 nodes
drawing the Why panel's ~25 long lines again for each change was the costliest widget of the frames
(bench/atomdeck_key_trace.py: ~1.1 s of 19 s of frames; a key pressed meanwhile waited for it). Here the
draw splits the content (Textual's Content, as Static made it) into its lines, as Textual does before
wrapping them, and draws each line as Textual draws it within the whole (wrapped by the same rules at the same
width, in the same style, with the line's own place in each cell's offset: lines wrap independently, so the
strips are the ones the whole gives), reusing the strips of every line that is the same, at the same place, as
at the last draw (its characters and spans), at the same width and base style. Lines are drawn as far down as
rows are asked for: a panel taller than the box it scrolls in (the Why panel's ~25 wrapped lines in ~10 rows)
draws only what its box shows. This uses Textual's private
`Content._wrap_and_format` and `Strip._apply_link_style`, as Content.render_strips and Visual.to_strips do.

Anything else (a Group of tables), a text selection or a content alignment other than top-left is drawn by
Static itself. tests/tui/test_line_static.py compares both drawings line for line.
"""

from __future__ import annotations

from collections.abc import Iterator

from textual.content import Content
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widget import _RenderCache
from textual.widgets import Static


class LineStatic(Static):
    """A Static whose Content is drawn line by line, unchanged lines from the last draw's strips."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._line_strips: dict[tuple, list[Strip]] = {}  # a line's key -> its strips, as of the last draw
        self._line_look: tuple | None = None  # (width, base style) the kept strips were drawn at
        self._kept: dict[tuple, list[Strip]] = {}  # the draw before's strips, while this one goes on
        self._lines: Iterator[tuple[int, Content]] | None = None  # the lines not drawn yet (None: all drawn)
        self._filling: list[Strip] = []  # the rows drawn so far, which those lines go on
        self.lines_drawn = 0  # lines drawn anew (tests: an unchanged line is not)

    def _render_content(self) -> None:
        visual = self.visual
        if not isinstance(visual, Content) or self.text_selection is not None \
                or self.styles.content_align != ("left", "top"):
            self._lines = None
            super()._render_content()
            return
        look = (self.size.width, self.visual_style)
        self._kept = self._line_strips if look == self._line_look else {}
        self._line_strips, self._line_look = {}, look
        self._lines = enumerate(visual.split("\n", allow_blank=True))
        self._filling = []
        self._render_cache = _RenderCache(self.size, self._filling)  # filled as far as rows are asked for (render_line)
        self._dirty_regions.clear()

    def render_line(self, y: int) -> Strip:
        """Row `y`, drawing the lines down to it if not drawn yet: rows never shown (a panel taller than its
        scrolled box) are never drawn."""
        if self._dirty_regions:
            self._render_content()
        if self._lines is not None and self._render_cache.lines is not self._filling:
            self._lines = None  # (Textual replaced the drawing: a widget removed)
        if self._lines is not None:
            strips = self._render_cache.lines
            width, height = self.size
            style = self.visual_style
            while len(strips) <= y and len(strips) < height:
                nxt = next(self._lines, None)
                if nxt is None:
                    break
                n, line = nxt
                key = (n, line.plain, tuple(line.spans))  # (its place too: its cells' offsets say where it is)
                got = self._kept.get(key)
                if got is None:
                    self.lines_drawn += 1
                    got = self._draw_line(line, n, width, style)
                self._line_strips[key] = got
                strips.extend(got[:height - len(strips)])
            if len(strips) >= height or len(strips) <= y:  # (every row drawn: the lines left are not shown)
                self._lines = None
                self._kept = {}  # (the draw before's strips: the lines still the same are in _line_strips now)
        return super().render_line(y)

    def _draw_line(self, line: Content, y: int, width: int, style: VisualStyle) -> list[Strip]:
        """One line of the content, at line `y`, as Content.render_strips and Visual.to_strips draw it within the
        whole: wrapped by the widget's rules, each cell's offset in its style (text selection finds the
        character under the mouse by it: the line's own `y`, not 0), links styled."""
        get_rule = self.styles.get
        rows = line._wrap_and_format(
            width, align=get_rule("text_align", "left"), overflow=get_rule("text_overflow", "fold"),
            no_wrap=get_rule("text_wrap", "wrap") == "nowrap", line_pad=get_rule("line_pad", 0), tab_size=8,
            get_style=self._get_style)
        strips = []
        for row in rows:
            row.y = y
            strips.append(Strip(*row.to_strip(style)))
        if self.auto_links and not self.is_container and not self.screen._selecting:
            link_style = self.link_style
            strips = [strip._apply_link_style(link_style) for strip in strips]
        return strips

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._line_look = None  # (a theme: the spans' colours may read differently)
