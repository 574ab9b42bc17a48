"""The console as a whole: launch hand-off, read-only, keymap, help, palette, themes, Open,
inventory refresh, small terminals."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import yaml
from atomdeck.core.config.paths import config_dir
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.tui import bindings
from atomdeck.tui.messages import LaunchRequested
from atomdeck.tui.screens.dialogs import ConfirmDialog, MessageDialog
from atomdeck.tui.screens.help import HelpScreen
from atomdeck.tui.screens.layout import LayoutScreen
from atomdeck.tui.screens.nodes import NodesScreen
from atomdeck.tui.screens.preview import PreviewScreen
from atomdeck.tui.screens.start import StartScreen
from textual.widgets import DataTable, Input

from .conftest import SIZE, make_app, ready


def footer_actions(app) -> set[str]:
    return {k.action for k in app.screen.query("FooterKey")}


def recording_app(**kw):
    """An app whose launch handler only records what it was handed."""
    got: list = []

    async def handler(assessment):
        got.append(assessment)

    return make_app(launch_handler=handler, **kw), got


async def test_launch_asks_then_hands_the_assessment_to_the_handler():
    msgs = []
    app, got = recording_app()
    async with app.run_test(size=SIZE, message_hook=msgs.append) as pilot:
        await ready(pilot)
        await pilot.press("3", "L")
        assert isinstance(app.screen, ConfirmDialog) and app.screen.query_one("#no").has_focus
        await pilot.press("n")
        assert not got
        await pilot.press("ctrl+l", "y")
        await app.workers.wait_for_complete()
        assert got == [app.assessment]
        assert [m.assessment for m in msgs if isinstance(m, LaunchRequested)] == [app.assessment]


async def test_the_default_launch_handler_is_the_run_engine():
    """Without a handler given, a confirmed launch goes to core's Run.launch (tests/tui/test_run_*.py
    drive it for real); here nothing is launched."""
    app = make_app()
    assert app.launch_handler == app.launch_shown  # the shown context's RunController.launch_run
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("3", "L", "n")
        assert app.live is None


async def test_launch_happens_from_the_preview_only():
    """L on the nodes or layout view shows the preview (every command) first; only there does it ask."""
    app, got = recording_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        for view in ("1", "2"):
            await pilot.press(view, "L")
            await pilot.pause()
            assert isinstance(app.screen, PreviewScreen) and app.current_mode == "preview"
            assert "Press L again to launch" in "".join(n.message for n in app._notifications)
        await pilot.press("L")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        assert got == [app.assessment]


async def test_readonly_hides_launch():
    msgs = []
    app = make_app(readonly=True)
    async with app.run_test(size=SIZE, message_hook=msgs.append) as pilot:
        await ready(pilot)
        for view in ("1", "2", "3"):
            await pilot.press(view)
            assert "launch" not in footer_actions(app)
        assert "Launch" not in [c.title for c in app.get_system_commands(app.screen)]
        await pilot.press("L", "ctrl+l")
        assert isinstance(app.screen, PreviewScreen)  # no dialog opened
        assert not any(isinstance(m, LaunchRequested) for m in msgs)
        assert "READ-ONLY" in str(app.screen.query_one("#context").render())
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert "launch" in footer_actions(app)


async def test_keymap_remaps_by_binding_id():
    path = config_dir() / "keymap.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"nodes.toggle": "x", "view.preview": "f3", "launch": "ctrl+g",
                                    "no.such.id": "k"}))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("x")
        assert app.design.nodes == ("demo-n01",)
        await pilot.press("space")  # no longer bound
        assert app.design.nodes == ("demo-n01",)
        await pilot.press("f3")
        assert isinstance(app.screen, PreviewScreen)
        await pilot.press("ctrl+g")
        assert isinstance(app.screen, MessageDialog)  # launch moved to ctrl+g (blocked: one node picked)
        await pilot.press("escape", "question_mark")
        table = app.screen.query_one("#help-table", DataTable)
        rows = {table.get_row_at(i)[2]: table.get_row_at(i)[1] for i in range(table.row_count)}
        assert rows["nodes.toggle"] == "x" and rows["launch"] == "^g"
        assert any("unknown binding id 'no.such.id'" in n.message for n in app._notifications)


async def test_help_lists_every_binding_with_its_id():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one("#help-table", DataTable)
        ids = {table.get_row_at(i)[2] for i in range(table.row_count)}
        assert bindings.binding_ids() - {"view.run"} <= ids  # view.run appears once the run view exists
        await pilot.press("escape")
        assert isinstance(app.screen, NodesScreen)


async def test_views_by_number_and_palette_commands():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        for key, screen in (("2", LayoutScreen), ("3", PreviewScreen), ("1", NodesScreen)):
            await pilot.press(key)
            assert isinstance(app.screen, screen)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for t in ("View: Nodes", "View: Layout", "View: Preview", "Open recipe or cluster…",
                  "Export launch script…", "Save recipe…", "Launch"):
            assert t in titles
        await pilot.press("ctrl+p")
        assert app.screen.__class__.__name__ == "CommandPalette"


async def test_theme_switch_redraws_and_is_remembered():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        before = app.version
        app.theme = "nord"
        await pilot.pause()
        assert app.version > before
    assert yaml.safe_load((config_dir() / "console.yaml").read_text())["theme"] == "nord"
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "nord"


async def test_open_screen_switches_recipe_and_reports_bad_names():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+o")
        assert isinstance(app.screen, StartScreen)
        box = app.screen.query_one("#recipe-input", Input)
        box.value = "no-such-recipe"
        await pilot.press("ctrl+o")
        assert isinstance(app.screen, StartScreen)
        assert "no recipe named 'no-such-recipe'" in str(app.screen.query_one("#start-error").render())
        recipes = app.screen.query_one("#recipes")
        recipes.focus()
        recipes.highlighted = recipes.get_option_index("demo-2p1d")
        await pilot.press("enter")
        await ready(pilot)
        assert isinstance(app.screen, NodesScreen)
        assert app.design.recipe.name == "demo-2p1d" and app.assessment.plan.shape == "2P1D DPA TP8"


async def test_a_recipe_path_can_be_opened(tmp_path):
    src = Path(__file__).resolve().parents[2] / "recipes" / "demo-agg.yaml"
    mine = tmp_path / "mine.yaml"
    mine.write_text(src.read_text().replace("workers: 2", "workers: 3"))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.open_workspace(str(mine), "local")
        await ready(pilot)
        assert app.assessment.plan.shape == "3x agg TP8"


async def test_inventory_refresh_never_overlaps_and_pauses_under_a_dialog():
    from .runhelpers import until  # (imported here: other changes to this file's imports are under way)

    state = {"active": 0, "peak": 0, "calls": 0, "paused_ticks": 0}

    async def slow(cluster, offline):
        state["calls"] += 1
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        try:
            await asyncio.sleep(0.05)
            return await fetch_inventory(cluster, offline)
        finally:
            state["active"] -= 1

    app = make_app(refresh_s=0.01, fetch=slow)
    tick = app._refresh_tick

    def counted_tick() -> None:  # the refresh timer firing: counted when a dialog is open
        if app.screen_stack and app.paused:
            state["paused_ticks"] += 1
        tick()

    app._refresh_tick = counted_tick  # type: ignore[method-assign]  # the timer is armed with this attribute
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: state["calls"] >= 3, step=0.01, what="three refreshes")
        assert state["calls"] >= 3 and state["peak"] == 1
        app.push_screen(ConfirmDialog("?", "a dialog"))
        # the refresh in flight (if any) finishes; its timer then fires under the dialog (a fetch arms the
        # timer only when it ends, so once it fired paused, nothing is in flight)
        await until(pilot, lambda: state["paused_ticks"] >= 1, step=0.01, what="the timer firing under the dialog")
        calls = state["calls"]
        await until(pilot, lambda: state["paused_ticks"] >= 11, step=0.01, what="ten more timer firings")
        assert state["calls"] == calls and state["active"] == 0  # paused while the dialog is open
        app.pop_screen()
        await until(pilot, lambda: state["calls"] > calls, step=0.01, what="a refresh after the dialog closed")
        assert state["calls"] > calls and state["peak"] == 1


async def test_a_refresh_timer_firing_while_the_console_closes_is_ignored():
    """Seen in CI: the refresh timer fired after the screen stack was emptied on quit and the
    console died with ScreenStackError instead of closing."""
    app = make_app(refresh_s=0.01)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
    assert app.screen_stack == []
    app._refresh_tick()  # what the timer does when it fires that late
    assert app.paused and app.design_screen is None and app._refresh_timer is None
    app.on_inventory_updated(None)  # a refresh finishing late: nothing to redraw, no error
    app._redraw()  # a late re-assessment (the version the design views watch): no error


async def test_a_failing_refresh_keeps_the_nodes_and_says_why():
    fail = {"on": False}

    async def flaky(cluster, offline):
        if fail["on"]:
            raise RuntimeError("slurmctld unreachable")
        return await fetch_inventory(cluster, offline)

    app = make_app(fetch=flaky)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        fail["on"] = True
        await pilot.press("ctrl+r")
        await ready(pilot)
        assert len(app.workspace.inventory) == 6
        assert "slurmctld unreachable" in str(app.screen.query_one("#nodes-summary").render())


async def test_plan_by_name_when_no_inventory():
    nodes = ["mia1-p01-g01", "mia1-p01-g02"]

    async def offline_only(cluster, offline):
        assert offline
        return await fetch_inventory(cluster, offline=True)

    app = make_app(recipe="dsv4-fp4-mi355x-1p1d-tp8", cluster="mia1", offline=True, fetch=offline_only)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert not app.workspace.inventory and not app.assessment.ok
        assert "add_names" in footer_actions(app)
        await pilot.press("n")
        app.screen.query_one("#answer", Input).value = ",".join(nodes)
        await pilot.press("enter")
        await ready(pilot)
        assert [n.name for n in app.workspace.inventory] == nodes
        assert app.assessment.ok and app.assessment.plan.shape == "1P1D TP8"
        assert "planned by node name" in str(app.screen.query_one("#nodes-summary").render())


async def test_small_terminal_100x30_renders_every_view():
    app = make_app(recipe="demo-2p1d")
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        checks = {"1": "#node-table", "2": "#picture", "3": "#command"}
        for key, wid in checks.items():
            await pilot.press(key)
            await pilot.pause()
            region = app.screen.query_one(wid).region
            assert region.width > 40 and region.height >= 5, (key, region)
            app.export_screenshot()
        await pilot.press("question_mark")
        app.export_screenshot()
        await pilot.press("escape", "ctrl+o")
        app.export_screenshot()


def test_importing_the_console_stays_light():
    """First frame fast: the console module must not pull in launchers, SSH or the exporter."""
    code = ("import sys, atomdeck.tui.app; heavy = [m for m in ('asyncssh', 'atomdeck.core.launch.slurm', "
            "'atomdeck.core.design.export', 'atomdeck.tui.screens.help', 'atomdeck.tui.screens.start') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_the_run_views_sit_next_to_the_design_views():
    """4 Run and 5 Runs are always there; a launch handler given by the caller replaces Run.launch."""
    from atomdeck.tui.screens.run import RunScreen
    from atomdeck.tui.screens.runs import RunsScreen

    got = []

    async def handler(assessment):
        got.append(assessment)
        app.action_view("run")

    app = make_app(launch_handler=handler)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("4")
        assert isinstance(app.screen, RunScreen)
        assert "No run attached" in str(app.screen.query_one("#run-empty").render())
        assert "4 Run" in str(app.screen.query_one("#tabs").render())
        await pilot.press("5")
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("L")  # launching starts from the design views only
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("3", "L", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert got == [app.assessment] and isinstance(app.screen, RunScreen)


def test_atomdeck_without_arguments_opens_the_demo(monkeypatch):
    """`atomdeck` and `atomdeck tui ...` reach run_console with the right choices."""
    from atomdeck.core.cli.main import main
    from atomdeck.tui.app import ConsoleApp

    seen = []
    monkeypatch.setattr(ConsoleApp, "run", lambda self, *a, **k: seen.append(self))
    assert main([]) == 0
    app = seen[-1]
    assert (app.workspace.cluster.name, app.design.recipe.name, app.readonly, app._ask) == \
        ("local", "demo-1p1d", False, False)
    assert main(["tui", "--cluster", "local", "--recipe", "demo-2p1d", "--readonly"]) == 0
    app = seen[-1]
    assert (app.workspace.cluster.name, app.design.recipe.name, app.readonly, app._ask) == \
        ("local", "demo-2p1d", True, False)
    assert main(["tui", "--cluster", "local"]) == 0
    assert seen[-1]._ask  # a cluster without a recipe opens the Open screen
    assert main(["tui", "--recipe", "no-such-recipe"]) == 2  # reported before the screen opens


async def test_a_launch_in_progress_is_never_cancelled_by_a_second_launch_or_a_single_q():
    gate, calls = asyncio.Event(), []

    async def slow(assessment):  # a launch that waits, as one does for a Slurm allocation
        calls.append(assessment)
        app.runs.launching = "Launching … waiting for the allocation"
        try:
            await gate.wait()
        finally:
            app.runs.launching = ""

    app = make_app(launch_handler=slow)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("3", "L", "y")
        await pilot.pause()
        assert len(calls) == 1 and app.launching
        await pilot.press("L")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmDialog)
        assert any("a launch is in progress" in n.message for n in app._notifications)
        await pilot.press("q")  # once: only a warning, the launch goes on
        await pilot.pause()
        assert app.is_running and app.launching and not gate.is_set()
        assert any("Press q again" in n.message for n in app._notifications)
        gate.set()
        await app.workers.wait_for_complete()
        assert len(calls) == 1 and not app.launching


async def test_a_long_confirmation_scrolls_and_keeps_its_buttons_on_screen_at_100x30():
    """A teardown plan of a big run lists many processes: the buttons must stay reachable."""
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        body = "\n".join(f"  decode-{i}    pid {4000 + i}    ports 8020    running" for i in range(40))
        app.push_screen(ConfirmDialog("Tear down run X?", body, yes="Tear down"))
        await pilot.pause()
        for button in ("#yes", "#no"):
            region = app.screen.query_one(button).region
            assert region.height > 0 and region.bottom <= 30, (button, region)
        assert app.screen.query_one("#no").has_focus
