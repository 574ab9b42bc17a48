"""Nodes view: filter, pick in rank order, refuse unusable nodes with core's reason, override."""

from __future__ import annotations

from atomdeck.tui.screens.nodes import NodesScreen
from atomdeck.tui.widgets.findings import FindingsView
from atomdeck.tui.widgets.node_table import NodeTable
from textual.widgets import Input

from .conftest import SIZE, make_app, ready


def _table(app) -> NodeTable:
    return app.screen.query_one(NodeTable)


async def _goto(pilot, node: str) -> None:
    table = _table(pilot.app)
    table.move_cursor(row=table.shown.index(node))
    await pilot.pause()


async def test_opens_on_the_demo_with_the_inventory():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert isinstance(app.screen, NodesScreen)
        assert app.workspace.cluster.name == "local" and app.design.recipe.name == "demo-1p1d"
        assert _table(app).shown == [f"demo-n0{i}" for i in range(1, 7)]
        summary = str(app.screen.query_one("#nodes-summary").render())
        assert "6 nodes, 4 usable" in summary and "read 12:00:00" in summary


async def test_filter_is_incremental_and_escape_clears():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("slash")
        assert app.screen.query_one("#filter", Input).has_focus
        await pilot.press("d", "r", "a")
        assert _table(app).shown == ["demo-n05", "demo-n06"]  # "drained" / "persistently drained"
        await pilot.press("backspace", "backspace", "backspace", "n", "0", "3")
        assert _table(app).shown == ["demo-n03"]
        await pilot.press("escape")
        assert _table(app).shown == [f"demo-n0{i}" for i in range(1, 7)]
        assert not app.screen.query_one("#filter", Input).display
        assert _table(app).has_focus


async def test_keys_typed_right_after_slash_go_into_the_filter():
    """Focus reaches the filter box on a later turn of the loop: keys queued before it lands (typing fast,
    a paste, a loaded machine) went to the table, where "1" is the Nodes key; now they are the filter."""
    from textual import events

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        for key, ch in (("slash", "/"), ("n", "n"), ("0", "0"), ("3", "3")):  # one turn of the loop
            app.post_message(events.Key(key, ch))
        await pilot.pause()
        await pilot.pause()
        box = app.screen.query_one("#filter", Input)
        assert box.value == "n03" and box.has_focus
        assert _table(app).shown == ["demo-n03"]
        await pilot.press("escape")
        await pilot.press("r")  # the filter is closed: keys are the view's again, not the filter's
        assert box.value == "" and not box.display


async def test_space_picks_in_rank_order_prefill_first():
    app = make_app(recipe="demo-2p1d")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        for node in ("demo-n04", "demo-n02", "demo-n03"):
            await _goto(pilot, node)
            await pilot.press("space")
        assert app.design.nodes == ("demo-n04", "demo-n02", "demo-n03")
        sel = app.assessment.selection
        assert sel.prefill == ("demo-n04", "demo-n02") and sel.decode == ("demo-n03",)
        table = _table(app)
        assert str(table.get_cell("demo-n04", "pick")) == "●1"
        assert str(table.get_cell("demo-n03", "role")) == "decode"
        await pilot.press("space")  # unpick the node under the cursor (demo-n03)
        assert app.design.nodes == ("demo-n04", "demo-n02")
        assert any(f.rule == "too-few-nodes" for f in app.assessment.errors())
        await pilot.press("a")
        assert app.design.auto and app.assessment.ok


async def test_drained_and_excluded_nodes_are_refused_with_their_reason():
    """g37-style: demo-n05 is drained, demo-n06 excluded by a cluster rule; neither can be picked."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        for node, reason in (("demo-n05", "drained: gpu memory not released"),
                             ("demo-n06", "excluded by cluster rule 'demo-n06'")):
            await _goto(pilot, node)
            await pilot.press("space")
            assert node not in app.design.nodes
            status = str(app.screen.query_one("#nodes-status").render())
            assert f"{node} cannot be picked" in status and reason in status
            assert reason in str(_table(app).get_cell(node, "why"))
            assert any(reason in n.message for n in app._notifications)
        assert app.design.auto


async def test_override_asks_then_warns_and_the_warning_stays():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await _goto(pilot, "demo-n01")
        await pilot.press("space")
        await _goto(pilot, "demo-n05")
        await pilot.press("o")
        assert app.screen.query_one("#no").has_focus  # the safe choice
        await pilot.press("enter")  # = Cancel
        assert "demo-n05" not in app.design.overrides
        await pilot.press("o", "y")
        assert app.design.nodes == ("demo-n01", "demo-n05") and app.design.overrides == {"demo-n05"}
        assert app.assessment.ok  # a warning, not an error

        def warning_shown() -> bool:
            shown = app.screen.query_one(FindingsView).findings
            return any(f.rule == "node-unhealthy" and f.severity == "warning" and f.node == "demo-n05"
                       for f in shown)

        assert warning_shown()
        assert "overridden" in str(_table(app).get_cell("demo-n05", "why"))
        await pilot.press("2")  # Layout shows it too, and it is still there when we come back
        assert warning_shown()
        await pilot.press("1")
        app.refresh_inventory()
        await ready(pilot)
        assert warning_shown()
        await _goto(pilot, "demo-n05")
        await pilot.press("o")  # withdraw
        assert not app.design.overrides and "demo-n05" not in app.design.nodes
        assert not warning_shown()
