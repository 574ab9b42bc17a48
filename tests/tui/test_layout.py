"""Layout view: edits go through core (set_field) and re-assess; the picture, ports and findings follow."""

from __future__ import annotations

import io

from atomdeck.tui.messages import LaunchRequested
from atomdeck.tui.screens.dialogs import MessageDialog
from atomdeck.tui.widgets.findings import FindingsView
from atomdeck.tui.widgets.layout_picture import LayoutPicture
from rich.console import Console
from textual.widgets import Input, Select

from .conftest import SIZE, make_app, ready
from .runhelpers import until


def picture_text(app) -> str:
    console = Console(width=120, record=True, color_system=None, file=io.StringIO())
    console.print(app.screen.query_one(LayoutPicture).render())
    return console.export_text()


async def type_into(pilot, field_id: str, text: str) -> None:
    box = pilot.app.screen.query_one(f"#{field_id}", Input)
    box.focus()
    await pilot.pause()
    await pilot.press("end", *["backspace"] * len(box.value), *text)


async def test_1p1d_to_2p1d_changes_picture_ports_and_lint():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        before = picture_text(app)
        assert "1P1D TP8" in before and "prefill-1" not in before and "barrier 11 ports on 2 nodes" in before
        await type_into(pilot, "f-prefill-workers", "2")
        assert app.design.recipe.prefill.workers == 2
        after = picture_text(app)
        assert "2P1D TP8" in after and "barrier 20 ports on 3 nodes" in after
        assert after.count("handshake 6301-6308") == 2  # one block per prefill node
        plan = app.assessment.plan
        assert [(e.name, e.node, e.http_port) for e in plan.endpoints] == [
            ("prefill-0", "demo-n01", 8010), ("prefill-1", "demo-n02", 8010), ("decode-0", "demo-n03", 8020)]
        assert "decode-0" in after and "demo-n03" in after

        # with two nodes picked by hand, the same edit makes core report too few nodes
        app.set_design(app.design.auto_pick().toggle("demo-n01").toggle("demo-n02"))
        await pilot.pause()
        errors = {f.rule: f for f in app.screen.query_one(FindingsView).findings if f.severity == "error"}
        assert errors["too-few-nodes"].key == "--nodes"
        assert "no layout yet" in picture_text(app)
        await type_into(pilot, "f-prefill-workers", "1")
        assert app.assessment.ok


async def test_tp16_error_names_the_key_and_blocks_launch():
    msgs = []
    app = make_app()
    async with app.run_test(size=SIZE, message_hook=msgs.append) as pilot:
        await ready(pilot)
        await pilot.press("2")
        await type_into(pilot, "f-prefill-tp", "16")
        assert app.design.recipe.prefill.tp == 16
        tp = [f for f in app.screen.query_one(FindingsView).findings if f.rule == "tp-gpus"]
        assert tp and tp[0].severity == "error" and tp[0].key == "prefill.tp" and "8 or less" in tp[0].fix
        await pilot.press("escape", "L")
        assert isinstance(app.screen, MessageDialog)
        body = str(app.screen.query_one(".dialog-body").render())
        assert "tp-gpus" in body and "change prefill.tp" in body
        await pilot.press("enter")
        assert not any(isinstance(m, LaunchRequested) for m in msgs)


async def test_too_few_nodes_blocks_launch():
    msgs = []
    app = make_app(nodes=["demo-n01"])
    async with app.run_test(size=SIZE, message_hook=msgs.append) as pilot:
        await ready(pilot)
        await pilot.press("L")
        assert isinstance(app.screen, MessageDialog)
        assert "too-few-nodes" in str(app.screen.query_one(".dialog-body").render())
        assert not any(isinstance(m, LaunchRequested) for m in msgs)


async def test_invalid_value_shows_core_issue_and_keeps_last_good_recipe():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        await type_into(pilot, "f-ports-router", "70000")
        err = app.screen.query_one("#err-f-ports-router")
        assert err.has_class("-shown") and "must be at most 65535" in str(err.render())
        # every keystroke is an edit: 7, 70, 700, 7000 were valid; 70000 is kept as typed, not applied
        assert app.design.recipe.ports.router == 7000
        assert app.screen.query_one("#f-ports-router", Input).value == "70000"
        await type_into(pilot, "f-ports-router", "31000")
        assert not err.has_class("-shown") and app.design.recipe.ports.router == 31000
        assert app.assessment.plan.router.port == 31000
        assert ":31000" in picture_text(app)


async def test_aggregate_mode_waits_for_the_worker_count_it_needs():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        assert [k for k in app.screen.query("FooterKey") if k.action.startswith("assign")]
        app.screen.query_one("#f-mode", Select).value = "aggregate"
        err = app.screen.query_one("#err-f-mode")
        workers = app.screen.query_one("#f-aggregate-workers", Input)
        # the fields it needs are shown (laid out on a later turn of the loop: wait for it)
        await until(pilot, lambda: "aggregate.workers" in str(err.render()) and workers.display
                    and workers.region.height, what="the aggregate fields shown")
        assert app.design.recipe.mode == "disagg"
        await type_into(pilot, "f-aggregate-workers", "2")
        assert app.design.recipe.mode == "aggregate" and app.design.recipe.aggregate.workers == 2
        assert app.assessment.plan.shape == "2x agg TP8"
        assert not err.has_class("-shown")
        # laid out on a later turn of the loop (one pause was not always enough under load): wait for it
        await until(pilot, lambda: app.screen.query_one("#err-f-aggregate-tp").region.height == 0  # no blank rows
                    and not app.screen.query_one("#f-prefill-tp").region.height  # disagg fields hidden
                    and not [k for k in app.screen.query("FooterKey") if k.action.startswith("assign")],
                    what="no blank error rows, the disagg fields and the assign keys gone")


async def test_dp_attention_and_policy_reach_the_commands():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        app.screen.query_one("#f-prefill-dp-attention", Select).value = True
        await pilot.pause()
        assert app.design.recipe.prefill.dp_attention
        prefill = next(p for p in app.assessment.processes if p.name == "prefill-0")
        assert "--enable-dp-attention" in prefill.argv
        app.screen.query_one("#f-router-policy", Select).value = "round_robin"
        await pilot.pause()
        router = next(p for p in app.assessment.processes if p.name == "router")
        assert router.argv[router.argv.index("--policy") + 1] == "round_robin"


async def test_assign_a_node_to_decode_and_move_the_router_by_hand():
    app = make_app(recipe="demo-2p1d")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        pic = app.screen.query_one(LayoutPicture)
        assert pic.has_focus and pic.current == "demo-n01"
        await pilot.press("d")
        sel = app.assessment.selection
        assert sel.decode == ("demo-n01",) and sel.prefill == ("demo-n03", "demo-n02")
        assert pic.current == "demo-n01"  # the cursor follows the node
        assert app.assessment.plan.router.node == "demo-n03"
        await pilot.press("r")
        assert app.design.recipe.router.node == "demo-n01" and app.assessment.plan.router.node == "demo-n01"
        await pilot.press("r")
        assert app.design.recipe.router.node is None
        await pilot.press("p")
        assert "demo-n01" in app.assessment.selection.prefill


async def test_opening_the_layout_changes_nothing():
    """Fields are filled from the recipe; mounting them must not edit it (a Select picks its first
    option when mounted, which once turned DP attention on)."""
    app = make_app(recipe="demo-2p1d")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        before = app.design.recipe
        await pilot.press("2")
        await ready(pilot)
        assert app.design.recipe == before == app.workspace.recipe
        assert app.design.recipe.router.policy == "round_robin" and app.design.recipe.prefill.dp_attention
        assert app.screen.query_one("#f-router-policy", Select).value == "round_robin"
