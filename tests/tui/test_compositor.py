"""TightCompositor (every view's): a partial update that draws only the widgets its changed regions touch sends
the terminal exactly what Textual's own compositor sends, and draws fewer widgets when the changes are far apart
(issue 19: at 128 nodes most widget draws of a frame were for widgets outside every change). Compared, not timed."""

from __future__ import annotations

import random
import re

from atomdeck.tui.compositor import TightCompositor
from textual._compositor import Compositor
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Region
from textual.screen import Screen
from textual.widgets import Footer, Static


class Boxes(Screen):
    CSS = """
    .box { border: round $accent; height: auto; }
    #left { width: 2fr; }
    #right { width: 1fr; }
    #scroll { height: 12; border: round $accent; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._compositor = TightCompositor()

    def compose(self) -> ComposeResult:
        yield Static("header: run 12345 · 64P64D on scale128 · starting 12s", id="head")
        with Horizontal():
            with Vertical(id="left"):
                for i in range(3):
                    with Vertical(classes="box") as box:
                        box.border_title = f"box {i}"
                        yield Static("\n".join(f"row {i}.{j} " + "·" * (j * 3) for j in range(5)), id=f"l{i}")
            with Vertical(id="right"):
                with VerticalScroll(id="scroll"):
                    yield Static("\n".join(f"why {j}: a long line that wraps over the edge of the panel " * 2
                                           for j in range(12)), id="why")
                with Vertical(classes="box"):
                    yield Static("pairs ○ ◔ ◑ ● ×", id="pairs")
        yield Footer()


class BoxesApp(App):
    def on_mount(self) -> None:
        self.push_screen(Boxes())


def segments(update) -> str:
    """What a partial update sends the terminal, less the cursor moves that nothing is written after (the
    compositor left out a container whose strips there were all under a child: Textual still moves the
    cursor to the piece of the line that container's strip began, and writes nothing of it)."""
    sent = "".join(seg.text for seg in update.__rich_console__(None, None)) if update is not None else ""
    return re.sub(r"(?:\x1b\[\d+;\d+H)+(?=\n?(?:\x1b\[\d+;\d+H|$))", "", sent)


async def test_a_partial_update_sends_what_textual_sends_and_draws_fewer_widgets():
    app = BoxesApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, Boxes)
        tight = screen._compositor
        plain = Compositor()
        plain.reflow(screen, screen.size)
        tight._dirty_regions.clear()  # (what the reflow and the last frame left)
        plain._dirty_regions.clear()
        rng = random.Random(7)
        width, height = screen.size
        for _ in range(60):
            regions = []
            for _ in range(rng.randint(1, 4)):
                x, y = rng.randrange(width), rng.randrange(height)
                regions.append(Region(x, y, rng.randint(1, width - x), rng.randint(1, min(4, height - y))))
            for compositor in (tight, plain):
                compositor._dirty_regions.update(regions)
            assert segments(tight.render_partial_update()) == segments(plain.render_partial_update()), regions
        assert tight.left_out > 0
        # a change at the top and one at the bottom right: the header and the pairs panel are drawn, the
        # left column's panels (inside the box around both) are not
        drawn: list[str] = []

        def counted(widget: Static):
            original = widget.render_lines

            def render_lines(crop: Region):
                drawn.append(widget.id or "")
                return original(crop)
            return render_lines

        for w in screen.query(Static):
            w.render_lines = counted(w)  # type: ignore[method-assign]
        head, pairs = screen.query_one("#head").region, screen.query_one("#pairs").region
        tight._dirty_regions.update([head, pairs])
        tight.render_partial_update()
        assert "head" in drawn and "pairs" in drawn
        assert not {"l0", "l1", "l2"} & set(drawn), drawn
