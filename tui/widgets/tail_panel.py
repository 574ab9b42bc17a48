"""The run view's "Last lines": the newest lines of one process, drawn line by line; the newest that
fit when the panel is shorter than its lines.

Under a run that serves, the process under the cursor logs about a line a second (the health
checks' access lines), so this panel redraws often. As a Static it rendered all of its lines as one
text each time (~10 ms of CPU per redraw, the largest part of the console's drawing while idle);
here each line is drawn once into a cached strip, and a redraw that shifts the lines by one only
looks them up.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.strip import Strip
from textual.widget import Widget

from ..logtext import HIGHLIGHT, clean

DIM = Style(dim=True)


class TailPanel(Widget):
    """The last lines of one process (errors highlighted); one row per line, cut with … at the edge."""

    COMPONENT_CLASSES = {"tail-panel--error"}
    DEFAULT_CSS = """
    TailPanel { height: auto; }
    TailPanel > .tail-panel--error { color: $text-error; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[tuple[str, str]] = []  # (line, "" | "error" | "dim")
        self._cache: LRUCache[tuple, Strip] = LRUCache(256)

    def show(self, lines: list[str], empty: str = "(no output yet)") -> bool:
        """Show these lines; returns whether the panel changed (a layout pass only if the count did)."""
        rows = []
        for line in lines:
            line = clean(line, 400)
            rows.append((line, "error" if HIGHLIGHT.search(line) else ""))
        rows = rows or [(empty, "dim")]
        if rows == self.rows:
            return False
        # A panel whose height its box sets (the run view's) needs no layout pass for a new count of
        # lines; one sized by its lines (height: auto) does. At 128 nodes a layout pass is the screen's
        # whole reflow, on the key press that moved the cursor to a process with another count.
        layout = len(rows) != len(self.rows) and self.styles.height is not None and self.styles.height.is_auto
        self.rows = rows
        self.refresh(layout=layout)
        return True

    @property
    def content(self) -> Text:
        """What the panel shows, as one Text (for tests and for reading it back)."""
        return Text("\n".join(line for line, _ in self.rows))

    def render(self) -> Text:
        """Not used for drawing (render_line is); what the panel shows, for reading it back."""
        return self.content

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self.rows))

    def get_content_width(self, container, viewport) -> int:
        return max((len(line) for line, _ in self.rows), default=0)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        y += max(0, len(self.rows) - self.size.height)  # more lines than rows: the newest ones
        if y >= len(self.rows):
            return Strip.blank(width, base)
        line, kind = self.rows[y]
        key = (line, kind, width, base)
        strip = self._cache.get(key)
        if strip is None:
            text = Text(line, no_wrap=True, overflow="ellipsis", end="")
            text.stylize(base)
            if kind == "error":
                text.stylize(self.get_component_rich_style("tail-panel--error", partial=True))
            elif kind == "dim":
                text.stylize(DIM)
            text.truncate(width, overflow="ellipsis")
            strip = Strip(text.render(self.app.console), text.cell_len).crop_extend(0, width, base)
            self._cache[key] = strip
        return strip
