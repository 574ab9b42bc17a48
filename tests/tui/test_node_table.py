"""The node table draws only what is on screen, and each cell without Rich's layout (issue 19): what it
draws, not how fast (bench/console.py filter measures that)."""

from __future__ import annotations

from atomdeck.tui.widgets import cells as cell_layout
from atomdeck.tui.widgets.cells import cell_line
from atomdeck.tui.widgets.node_table import NodeTable
from rich.padding import Padding
from rich.style import Style
from rich.text import Text

from .conftest import SIZE, make_app, ready


def _rich(text: Text, width: int, pad: int, console) -> list:
    options = console.options.update_dimensions(width, 1).update(no_wrap=True)
    lines = console.render_lines(Padding(text, (0, pad)), options)
    return [[s for s in line if s.text] for line in lines]


def _big(tmp_path, n: int) -> str:
    lines = ["name: big", "description: many nodes", "launcher: slurm", "gpus_per_node: 8", "nodes:"]
    for i in range(n):
        extra = ', state: "IDLE+DRAIN", reason: "gpu memory not released"' if i % 37 == 0 else ""
        lines.append(f"  - {{name: node-{i:04d}, addr: 10.{i // 250}.{i % 250}.1, gpus: 8, partition: gpu{extra}}}")
    (tmp_path / "big.yaml").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "big.yaml")


def test_cell_line_is_what_rich_draws():
    """Segment for segment, where cell_line answers at all (None hands the cell to Rich)."""
    from rich.console import Console

    console = Console(width=100, color_system="truecolor")
    texts = [Text("8", style="dim", justify="right"), Text("8", justify="left", style="dim"), Text("node-1", style="dim"),
             Text("●1", style="bold"), Text("prefill", style=Style(color="red")) + Text("+router", style=Style(color="green")),
             Text(""), Text("", justify="right"), Text("x ", justify="right"), Text(" x", justify="right", style="dim"),
             Text("a b ", style="dim"), Text("▲ overridden: drained", style=Style(color="yellow")), Text("two\nlines"),
             Text("centre", justify="center")]
    answered = 0
    for text in texts:
        for width in range(0, 24):
            for pad in (0, 1, 2):
                line = cell_line(text, width, pad, console)
                if line is not None:
                    answered += 1
                    assert [line] == _rich(text, width, pad, console), (text, width, pad)
    assert answered > 300


async def test_every_cell_of_the_demo_is_drawn_as_rich_draws_it():
    """Picks, roles (+router), dimmed drained/excluded nodes with reasons, an override warning."""
    app = make_app(recipe="demo-2p1d")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        table = app.screen.query_one(NodeTable)
        for node in ("demo-n04", "demo-n02"):
            table.move_cursor(row=table.shown.index(node))
            await pilot.pause()
            await pilot.press("space")
        await pilot.pause()
        widths = [c.render_width(table.cell_padding) for c in table.columns]
        checked = 0
        for key in table.keys:
            for text, width in zip(table.get_row(key), widths):
                line = cell_line(text, width, table.cell_padding, app.console)
                assert line is not None, text
                assert [line] == _rich(text, width, table.cell_padding, app.console)
                checked += 1
        assert checked == 6 * 9
        assert str(table.get_cell("demo-n04", "pick")) == "●1"


async def test_filter_keeps_exactly_the_matching_rows_renders_only_visible_ones_and_keeps_the_picks(
        tmp_path, monkeypatch):
    app = make_app(cluster=_big(tmp_path, 700), offline=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.screen.query_one(NodeTable)
        for node in ("node-0003", "node-0300", "node-0002"):  # rank order, not table order
            table.move_cursor(row=table.shown.index(node))
            await pilot.pause()
            await pilot.press("space")
        assert app.design.nodes == ("node-0003", "node-0300", "node-0002")

        rendered: list[str] = []
        original = cell_layout.cell_line

        def counting(text, width, pad, console):
            rendered.append(text.plain)
            return original(text, width, pad, console)

        monkeypatch.setattr(cell_layout, "cell_line", counting)
        await pilot.press("slash", "1", "0", ".", "1")
        await pilot.pause()
        want = [f"node-{i:04d}" for i in range(700) if "10.1" in f"node-{i:04d} 10.{i // 250}.{i % 250}.1"]
        assert len(want) > 60  # more than a screenful
        assert table.shown == want and table.row_count == len(want)
        assert [table.get_row_at(i)[1].plain for i in range(table.row_count)] == want
        # cells are laid out once, for the rows on screen only (the table is < 40 lines high)
        names = {p for p in rendered if p.startswith("node-")}
        assert names and len(names) <= table.size.height
        assert names <= set(want)
        top = int(table.scroll_offset.y)
        drawn = ["".join(s.text for s in table.render_line(y)) for y in range(1, 6)]
        assert all(name in line for name, line in zip(want[top:], drawn)), (top, drawn)
        # the picks survive the filter, in rank order, and show in the visible pick cells
        assert app.design.nodes == ("node-0003", "node-0300", "node-0002")
        assert str(table.get_cell("node-0300", "pick")) == "●2"
        await pilot.press("backspace", "backspace", "backspace", "backspace")
        await pilot.pause()
        assert table.shown == [f"node-{i:04d}" for i in range(700)]
        assert app.design.nodes == ("node-0003", "node-0300", "node-0002")
        assert str(table.get_cell("node-0002", "pick")) == "●3"
