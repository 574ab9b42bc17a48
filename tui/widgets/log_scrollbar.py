"""The log view's scrollbars: Textual's, with their rows kept while nothing they show changed.

Under a flood the log view is redrawn 5-10 times a second and the compositor draws every widget in the
changed region again, the scrollbars too: Textual's ScrollBar renders through a Rich renderable and
StylesCache each time (measured headless at 160x50: the vertical bar ~1.9 ms a frame following a flood,
~5.6 ms and the horizontal ~2.8 ms in the frame of a wrap toggle, of ~18 ms). A following view's bars
show the same thing frame after frame (5,000 lines, at the end), and a wrap toggle goes back and forth
between two states. So a bar's finished rows are kept under everything they are made of (the
renderable's size, window, position, thickness and style, the bar's size, crop, filters and
background) and handed out again; a change of any of these draws them through Textual's path.
"""

from __future__ import annotations

from textual.cache import LRUCache
from textual.geometry import Region
from textual.scrollbar import ScrollBar
from textual.strip import Strip
from textual.widget import Widget


class KeptScrollBar(ScrollBar):
    def __init__(self, vertical: bool = True, name: str | None = None, *, thickness: int = 1) -> None:
        super().__init__(vertical, name, thickness=thickness)
        self._kept: LRUCache[tuple, list[Strip]] = LRUCache(8)
        self.drawn = 0  # frames drawn through Textual's path (not kept): tests count them

    def _look(self, crop: Region) -> tuple:
        """Everything the rows depend on: what render() answers (it reads the parent's scrollbar colours,
        hover and grab) and what StylesCache applies around it."""
        bar = self.render()
        made = tuple(getattr(bar, name, None) for name in
                     ("virtual_size", "window_size", "position", "thickness", "vertical", "style"))
        return (type(bar), made, crop, self.region.size, self.background_colors, self.rich_style,
                tuple(self.get_line_filters()), self.app.ansi_theme, self.app.native_ansi_color)

    def render_lines(self, crop: Region) -> list[Strip]:
        look = self._look(crop)
        kept = self._kept.get(look)
        if kept is None:
            self.drawn += 1
            kept = super().render_lines(crop)
            self._kept[look] = kept
        return list(kept)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._kept.clear()


class KeptScrollBars(Widget):
    """A scrolling widget whose scrollbars are KeptScrollBars: Widget's two properties, making a KeptScrollBar
    (Textual offers no hook for the class, so this sets Widget's private attributes as Widget does)."""

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        if self._vertical_scrollbar is None:
            self._vertical_scrollbar = self._kept_bar(True, self.scrollbar_size_vertical)
        return self._vertical_scrollbar

    @property
    def horizontal_scrollbar(self) -> ScrollBar:
        if self._horizontal_scrollbar is None:
            self._horizontal_scrollbar = self._kept_bar(False, self.scrollbar_size_horizontal)
        return self._horizontal_scrollbar

    def _kept_bar(self, vertical: bool, thickness: int) -> KeptScrollBar:
        bar = KeptScrollBar(vertical=vertical, name="vertical" if vertical else "horizontal", thickness=thickness)
        bar.display = False
        self.app._start_widget(self, bar)
        return bar
