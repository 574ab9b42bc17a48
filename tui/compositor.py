"""A frame draws only the widgets its changes touch.

Textual's partial screen update draws every visible widget that overlaps the box around all the regions that
changed, then sends the terminal only the changed spans of each line. When two changes are far apart (the run
view's header at the top and the Why panel at the bottom right, the process table's rows on the left and the
handshake matrix on the right) that box is most of the screen, and every panel, box border, scrollbar and
bar in it is asked for its lines, for nothing: what they give outside the changed spans is thrown away. At 128
nodes, while the run came up, most of each frame's widget calls were such (bench/atomdeck_key_trace.py).

`TightCompositor` gives the partial update, while it gathers the widgets to draw, only the widgets whose
visible part overlaps one of the changed regions. A line's changed span lies in the regions, so every widget
that draws in a span is still drawn, in the same order (front to back); the widgets left out only drew
segments outside every span. It also leaves out a container when each changed part of it lies inside the
visible part of one of its children: the child is drawn in front, and on each line the first strip laid on a
piece stays, so the container's strips there (its background and border under the child) were all thrown
away. A row changed in a panel drew the box around it too, and the view's containers and the screen under
them: while 128 nodes came up the boxes alone were drawn ~57 times a second, a seventh of the frames' CPU.
And a scrolling widget's change leaves out its scrollbars' columns (or rows): the bar is in front of the
widget, so the widget's strips there were all thrown away, and the bar was drawn again for nothing. A bar
that changes (the widget scrolled, its content grew) asks for its own region, as every widget does.
Everything else (full updates, layout, mouse hits) sees every widget as before.
This overrides Textual's private `Compositor.render_partial_update`, its `visible_widgets` (filtered only
inside a partial update; what Textual caches from it is worked out before) and `update_widgets` (trimming
Widget's private `_repaint_regions` before Textual's reads them, and reading its scrollbar attributes);
tests/tui/test_compositor.py compares the screens drawn both ways, and tests/tui/test_compositor_run.py the run
view's at 128 nodes, frame after frame as a terminal gets them.
"""

from __future__ import annotations

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.widget import Widget


class TightCompositor(Compositor):
    def __init__(self) -> None:
        super().__init__()
        self._changed: list[Region] | None = None  # the regions of the partial update being drawn
        self.left_out = 0  # widgets a partial update did not draw (tests)
        self.covered = 0  # of them, containers whose every changed part lay inside a child's (tests)
        self.bars_left_out = 0  # changed regions trimmed of a scrollbar in front of them (tests)

    def render_partial_update(self) -> ChopsUpdate | None:
        # what Textual keeps worked out from every visible widget (each line's cuts, the widgets per line that
        # mouse hits are found in), worked out first if it is not yet, so that none of it is made from the
        # filtered set below
        self.cuts  # noqa: B018
        self.layers_visible  # noqa: B018
        self._changed = list(self._dirty_regions)
        try:
            return super().render_partial_update()
        finally:
            self._changed = None

    def update_widgets(self, widgets: set[Widget]) -> None:
        # each changed widget's regions to repaint (its own coordinates) less the columns of its vertical scrollbar
        # and the rows of its horizontal one; then Textual's, which clips them to what is shown of it
        visible = self.visible_widgets
        for widget in visible.keys() & widgets:
            bars = self._bars(widget, visible)
            asked = widget._repaint_regions
            if bars and asked:
                offset = -visible[widget][0].offset
                trimmed = set()
                for dirty in asked:
                    for bar in bars:
                        dirty = self._beside(dirty, bar.translate(offset))
                    if dirty:
                        trimmed.add(dirty)
                asked.clear()
                asked.update(trimmed)
        super().update_widgets(widgets)

    @staticmethod
    def _bars(widget: Widget, visible: dict[Widget, tuple[Region, Region]]) -> list[Region]:
        """What is shown of the widget's scrollbars."""
        out = []
        for bar in (widget._vertical_scrollbar, widget._horizontal_scrollbar):
            if bar is not None:
                got = visible.get(bar)
                if got is not None:
                    out.append(got[0].intersection(got[1]))
        return out

    def _beside(self, update: Region, bar: Region) -> Region:
        """`update` less a bar at its right edge spanning all its rows, or at its bottom spanning all its columns
        (anything else: `update` as it is)."""
        if not bar or not update.overlaps(bar):
            return update
        if bar.y <= update.y and bar.bottom >= update.bottom and update.x < bar.x and bar.right >= update.right:
            self.bars_left_out += 1
            return Region(update.x, update.y, bar.x - update.x, update.height)
        if bar.x <= update.x and bar.right >= update.right and update.y < bar.y and bar.bottom >= update.bottom:
            self.bars_left_out += 1
            return Region(update.x, update.y, update.width, bar.y - update.y)
        return update

    @property
    def visible_widgets(self) -> dict[Widget, tuple[Region, Region]]:
        every = super().visible_widgets
        changed = self._changed
        if not changed:
            return every
        out = {}
        for widget, (region, clip) in every.items():
            shown = region.intersection(clip)
            parts = [part for part in (shown.intersection(r) for r in changed) if part]
            if parts and not (widget._nodes and self._covered(widget, parts, every)):
                out[widget] = (region, clip)
            elif parts:
                self.covered += 1
        self.left_out += len(every) - len(out)
        return out

    @staticmethod
    def _covered(widget: Widget, parts: list[Region], every: dict[Widget, tuple[Region, Region]]) -> bool:
        """Whether each changed part of a container lies inside the visible part of one of its children."""
        kids = []
        for child in widget._nodes:
            got = every.get(child)
            if got is not None:
                kids.append(got[0].intersection(got[1]))
        return bool(kids) and all(any(kid.contains_region(part) for kid in kids) for part in parts)
