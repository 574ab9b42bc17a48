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
segments outside every span. Everything else (full updates, layout, mouse hits) sees every widget as before.
This overrides Textual's private `Compositor.render_partial_update` and its `visible_widgets` (filtered only
inside a partial update; what Textual caches from it is worked out before);
tests/tui/test_compositor.py compares the screens drawn both ways.
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

    @property
    def visible_widgets(self) -> dict[Widget, tuple[Region, Region]]:
        every = super().visible_widgets
        changed = self._changed
        if not changed or len(changed) == 1:  # (one region: its box is the region)
            return every
        out = {}
        for widget, (region, clip) in every.items():
            shown = region.intersection(clip)
            if any(shown.overlaps(r) for r in changed):
                out[widget] = (region, clip)
        self.left_out += len(every) - len(out)
        return out
