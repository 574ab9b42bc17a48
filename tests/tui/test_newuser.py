"""What a new user tripped on in the console (issue 16): dialogs own their keys, Add by name works,
hints speak the console's language, export and save name and keep what the user had."""

from __future__ import annotations

from pathlib import Path

from atomdeck.core.config.recipe import load_recipe
from atomdeck.tui.screens.dialogs import InputDialog
from atomdeck.tui.screens.layout import LayoutScreen
from atomdeck.tui.screens.nodes import NodesScreen
from atomdeck.tui.screens.start import StartScreen
from atomdeck.tui.widgets.findings import FindingsView
from textual.widgets import Input, Select

from .conftest import SIZE, make_app, ready


def findings_text(app) -> str:
    return str(app.screen.query_one(FindingsView).render())


async def test_typing_in_the_open_screen_never_edits_the_design_underneath():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        before = (app.design, app.current_mode)
        await pilot.press("ctrl+o")
        assert isinstance(app.screen, StartScreen)
        assert app.screen.focused.id == "recipes"  # the recipe list has the focus
        await pilot.press(*"demo-2p1d")
        assert isinstance(app.screen, StartScreen)
        assert app.screen.query_one("#recipe-input", Input).value == "demo-2p1d"  # typed where it shows
        await pilot.press("q", "L", "1")  # not a quit, a launch or a view switch either
        assert isinstance(app.screen, StartScreen)
        assert app.screen.query_one("#recipe-input", Input).value == "demo-2p1dqL1"
        await pilot.press("escape")
        assert (app.design, app.current_mode) == before


async def test_keys_typed_on_the_list_before_the_box_has_focus_are_all_kept():
    """Focus moves to the name box on a later turn of the event loop: keys that arrive before (fast typing,
    a paste, a loaded machine) were each put in the box in place of the one before ('demo' became 'o')."""
    from textual import events

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+o")
        screen = app.screen
        assert isinstance(screen, StartScreen) and screen.focused.id == "recipes"
        for ch in "demo":  # all in one turn of the loop, as a paste arrives
            screen.on_key(events.Key(ch, ch))
        await pilot.pause()
        box = screen.query_one("#recipe-input", Input)
        assert box.value == "demo" and screen.focused is box
        await pilot.press(*"-2p1d")
        assert box.value == "demo-2p1d"
        screen.query_one("#recipes").focus()  # back on the list: a key starts a new name again
        await pilot.pause()
        await pilot.press("x")
        assert box.value == "x"


async def test_layout_letters_in_a_form_field_are_the_fields():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        assert isinstance(app.screen, LayoutScreen)
        before = app.design
        app.screen.query_one("#f-mode", Select).focus()  # a field that does not take letters itself
        await pilot.pause()
        await pilot.press("p", "d", "r", "a")
        assert app.design == before
        await pilot.press("escape")  # leave the form: the letters move nodes again
        await pilot.press("d")
        assert app.design != before


async def test_add_by_name_adds_a_node_the_cluster_does_not_list_with_a_warning():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert isinstance(app.screen, NodesScreen)
        assert "add_names" in {k.action for k in app.screen.query("FooterKey")}
        await pilot.press("n")
        assert isinstance(app.screen, InputDialog)
        await pilot.press(*"demo-n99", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        names = [n.name for n in app.workspace.inventory]
        assert names[-1] == "demo-n99" and "demo-n01" in names
        status = str(app.screen.query_one("#nodes-status").render())
        assert "added by name: demo-n99" in status and "not checked" in status
        app.set_design(app.design.toggle("demo-n99").toggle("demo-n01"))
        await pilot.pause()
        assert any(f.rule == "node-by-name" and f.node == "demo-n99" for f in app.assessment.findings)


async def test_hints_in_the_console_name_views_and_keys_not_cli_flags():
    app = make_app(nodes=["demo-n05", "demo-n01"])  # demo-n05 is drained
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        text = findings_text(app)
        assert "node-unhealthy" in text
        assert "--nodes" not in text and "the Nodes view (1)" in text and "override it (o)" in text


async def test_unknown_node_hint_lists_only_usable_nodes_in_the_console():
    app = make_app(nodes=["demo-n77", "demo-n01"])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        text = findings_text(app)
        hint = text.split("node-unknown")[1]
        assert "demo-n05" not in hint and "demo-n06" not in hint  # drained and excluded
        assert "demo-n02" in hint and "--nodes" not in hint


async def test_export_default_name_follows_the_edited_design():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        box = app.screen.query_one("#f-prefill-workers")
        box.focus()
        await pilot.press("end", "backspace", "2", "escape")
        assert app.design.recipe.prefill.workers == 2
        await pilot.press("3", "e")
        assert app.screen.query_one("#answer").value == "./atomdeck-demo-2p1d.sh"


async def test_save_recipe_keeps_comments_order_and_quoting(tmp_path):
    mine = tmp_path / "mine.yaml"
    original = ("# my notes: keep them\nname: mine\nmodel:\n  path: 'atomdeck/demo-tiny-8b'  # quoted\n"
                "prefill: {workers: 1, tp: 8}\ndecode:\n  tp: 8   # one decode\n")
    mine.write_text(original)
    app = make_app(recipe=str(mine))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        box = app.screen.query_one("#f-prefill-workers")
        box.focus()
        await pilot.press("end", "backspace", "2", "escape")
        await pilot.press("3", "w")
        assert app.screen.query_one("#answer").value == str(mine)
        await pilot.press("enter", "y")
        text = Path(mine).read_text()
        assert text == original.replace("{workers: 1, tp: 8}", "{workers: 2, tp: 8}")
        assert load_recipe(mine) == app.design.recipe


async def test_the_palette_offers_every_drill_and_arms_it_on_the_right_process():
    from atomdeck.core.config.drills import load_drills
    from atomdeck.tui.screens.dialogs import ConfirmDialog

    app = make_app(recipe="demo-2p1d")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        names = [d.name for d in load_drills()]
        assert all(f"Drill: {n}" in commands for n in names)
        commands["Drill: never-bind"].callback()
        await pilot.pause()
        assert app.current_mode == "preview"  # the launch shows every command first, fault env included
        await pilot.press("L")
        assert isinstance(app.screen, ConfirmDialog)  # and asks
        env = app.design.recipe.decode.env
        assert env["ATOMSIM_NEVER_BIND"] == "1" and env["ATOMSIM_ONLY"] == "127.0.0.13:8020"
        assert not app.design.recipe.prefill.env and not app.design.recipe.router.env
        assert any("Look for:" in n.message for n in app._notifications)
        await pilot.press("n")  # nothing launched


async def test_no_drills_on_a_cluster_without_the_simulator():
    app = make_app(recipe="dsv4-fp4-mi355x-1p1d-tp8", cluster="mia1", offline=True)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert not [c for c in app.get_system_commands(app.screen) if c.title.startswith("Drill:")]


async def test_every_run_panel_is_reachable_by_a_key_at_100x30():
    from .fakerun import fake_run
    from .runhelpers import until

    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        app.runs.attach(fake_run("hung", "demo-2p1d"), watch=False)
        app.switch_mode("run")
        # the footer says which keys (it is recomposed once the run view's bindings are in: wait for them)
        await until(pilot, lambda: app.screen.query("#router-box") and app.screen.query_one("#router-box").region
                    and "panel('router-box')" in
                    {k.action for k in app.screen.query("FooterKey")}, what="the panel keys in the footer")
        screen_box = app.screen.region
        for key, box in (("r", "router-box"), ("k", "pairs-box"), ("n", "nodes-box"), ("w", "why-box"),
                         ("p", "procs-box")):
            await pilot.press(key)

            def in_view(box=box) -> bool:
                region = app.screen.query_one(f"#{box}").region
                return bool(region.height) and region.y < screen_box.bottom - 3

            await until(pilot, in_view, timeout=10, what=f"{box} in view after {key}")
        await pilot.press("w")
        assert app.screen.focused is app.screen.query_one("#why-box")  # PageDown now scrolls the Why panel


def test_commands_break_between_arguments_with_a_trailing_backslash():
    import shlex

    from atomdeck.tui.widgets.command_view import command_text

    argv = ["env", "ATOM_HOST_IP=127.0.0.11", "MC_TCP_BIND_ADDRESS=127.0.0.11", "python3", "-m",
            "atom.entrypoints.openai_server", "--model", "atomdeck/demo-tiny-8b", "--host", "0.0.0.0",
            "--kv-transfer-config", '{"kv_role":"kv_producer","proxy_ip":"127.0.0.11","handshake_port":6301}',
            "--server-port", "8010", "-tp", "8"]
    text = command_text(argv, width=40)
    lines = text.splitlines()
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert shlex.split(text.replace("\\\n", " ")) == argv  # a copied block is still the exact command
    for line in lines:  # no argument is split across lines
        body = line.removesuffix(" \\").strip()
        assert len(line) <= 40 or len(shlex.split(body)) == 1 or body.startswith("--kv-transfer-config")
    assert "127.0.0.11" in next(x for x in lines if "proxy_ip" in x)


async def test_the_preview_never_soft_wraps_a_command_at_100_columns():
    import shlex

    from atomdeck.tui.widgets.command_view import CommandView
    from rich.console import Group
    from rich.text import Text

    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        await pilot.press("3")
        await pilot.pause()
        view = app.screen.query_one(CommandView)
        width = view.scrollable_content_region.width
        group = view._render_process(view.process)
        assert isinstance(group, Group)
        commands = [r for r in group.renderables if isinstance(r, Text) and r.plain.rstrip().endswith(
            tuple(shlex.quote(t) for t in view.process.argv[-1:]))]
        assert commands and all(t.no_wrap for t in commands)  # the terminal never breaks an argument
        for t in commands:
            for line in t.plain.splitlines():
                body = line.removesuffix(" \\").strip()
                assert len(line) <= width or len(shlex.split(body)) <= 2, line


async def test_toasts_cover_neither_the_status_line_nor_the_open_inputs():
    from textual.widgets._toast import Toast

    app = make_app()
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await ready(pilot)
        app.screen._say("warning", "a status line the user is reading")
        app.notify("a toast\nof three\nlines", timeout=30)
        await pilot.pause(0.3)
        toasts = [t.region for t in app.screen.query(Toast)]
        status = app.screen.query_one("#nodes-status").region
        assert toasts and status.height and not any(t.overlaps(status) for t in toasts)
        await pilot.press("ctrl+o")
        app.notify("another toast", timeout=30)
        await pilot.pause(0.3)
        toasts = [t.region for t in app.screen.query(Toast)]
        for box in ("#recipe-input", "#cluster-input"):
            region = app.screen.query_one(box).region
            assert toasts and not any(t.overlaps(region) for t in toasts), box


async def test_an_excluded_nodes_long_reason_is_shown_whole_and_wrapped(tmp_path):
    from atomdeck.core.config.paths import find_cluster

    reason = ("persistently drained since the 3rd: GPU 5 reports uncorrectable ECC errors on every job, "
              "the vendor ticket is open, do not use until the board is swapped and a burn-in passed; ask the "
              "on-call before overriding this rule, it has cost two benchmark nights already")
    text = find_cluster("local").read_text().replace(
        '"persistently drained, not responding (demo of an exclusion rule)"', repr(reason).replace("'", '"'))
    cluster = tmp_path / "long.yaml"
    cluster.write_text(text)
    app = make_app(cluster=str(cluster))
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(pilot)
        table = app.screen.table
        table.move_cursor(row=table.shown.index("demo-n06"))
        await pilot.pause()
        status = app.screen.query_one("#nodes-status")
        assert reason in " ".join(str(status.render()).split())  # the whole reason, in words
        assert status.region.height >= 2 and status.region.width <= 160  # wrapped, not cut
