"""The dialogs' buttons and the named inputs reach their @on(Message, "#id") handlers (a click, not a key)."""

from __future__ import annotations

from atomdeck.tui.screens.dialogs import ConfirmDialog, InputDialog, MessageDialog
from atomdeck.tui.screens.nodes import NodesScreen

from .conftest import SIZE, make_app, ready


async def test_dialog_buttons_answer_by_their_id():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        answers: list[object] = []
        for button, expected in (("#yes", True), ("#no", False)):
            app.push_screen(ConfirmDialog("Sure?", "a question", yes="Go"), answers.append)
            await pilot.pause()
            await pilot.click(button)
            await pilot.pause()
            assert answers[-1] is expected and not isinstance(app.screen, ConfirmDialog)
        app.push_screen(MessageDialog("Note", "a message"), answers.append)
        await pilot.pause()
        await pilot.click("#ok")
        await pilot.pause()
        assert not isinstance(app.screen, MessageDialog)
        app.push_screen(InputDialog("Name", "a name"), answers.append)
        await pilot.pause()
        await pilot.press("a", "b", "enter")
        await pilot.pause()
        assert answers[-1] == "ab" and not isinstance(app.screen, InputDialog)


async def test_the_nodes_filter_box_filters_and_enter_returns_to_the_table():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        screen = app.screen
        assert isinstance(screen, NodesScreen)
        every = list(screen.table.shown)
        await pilot.press("slash")
        await pilot.press(*every[0])
        await pilot.pause()
        assert screen.filter_text == every[0] and every[0] in screen.table.shown
        assert len(screen.table.shown) < len(every)
        await pilot.press("enter")
        await pilot.pause()
        assert screen.table.has_focus


async def test_design_views_redraw_from_the_apps_version_on_top_at_once_hidden_on_resume():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        nodes = app.screen
        await pilot.press("2")
        await pilot.pause()
        layout = app.screen
        assert isinstance(nodes, NodesScreen) and layout is not nodes
        drawn = {"nodes": 0, "layout": 0}
        for name, screen in (("nodes", nodes), ("layout", layout)):
            draw = screen.render_design

            def counted(draw=draw, name=name) -> None:
                drawn[name] += 1
                draw()

            screen.render_design = counted
        for _ in range(3):  # a burst of changes in one go: one redraw of the view on top
            app._redraw()
        await pilot.pause()
        assert drawn == {"nodes": 0, "layout": 1}
        app._redraw()
        await pilot.pause()
        assert drawn == {"nodes": 0, "layout": 2}  # the hidden view never redrew
        await pilot.press("1")
        await pilot.pause()
        assert app.screen is nodes and drawn == {"nodes": 1, "layout": 2}  # it caught up on resume
        await pilot.press("2")
        await pilot.pause()
        assert drawn == {"nodes": 1, "layout": 2}  # nothing changed meanwhile: no redraw
        await pilot.press("1")
        await pilot.pause()
        app._redraw()
        await pilot.pause()
        assert drawn == {"nodes": 2, "layout": 2}
        await pilot.press("2")
        await pilot.pause()
        assert drawn == {"nodes": 2, "layout": 3}  # the change it missed while hidden
