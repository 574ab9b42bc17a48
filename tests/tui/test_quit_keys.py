"""alt+q quits wherever q quits (a real terminal hands Escape then q, typed fast or read late, over as
alt+q), and nowhere else: not while typing, not under a dialog, not where q is another key's."""

from __future__ import annotations

from atomdeck.tui.screens.dialogs import ConfirmDialog
from atomdeck.tui.screens.help import HelpScreen
from textual.widgets import Input

from .conftest import SIZE, make_app, ready


async def _gone(pilot) -> bool:
    for _ in range(200):
        if not pilot.app.is_running:
            return True
        await pilot.pause(0.01)
    return False


async def test_alt_q_quits_where_q_quits():
    for key in ("q", "alt+q"):
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press(key)
            assert await _gone(pilot), key
        assert app.return_code == 0


async def test_alt_q_does_not_quit_while_typing_in_the_filter():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press("alt+q", "q")  # q is typed into the filter, and alt+q does not quit either
        await pilot.pause()
        assert app.is_running and app.focused.value == "q"


async def test_alt_q_does_not_quit_under_a_dialog_or_on_the_help_screen():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.push_screen(ConfirmDialog("Sure?", "a question"))
        await pilot.pause()
        await pilot.press("alt+q")
        await pilot.pause()
        assert app.is_running and isinstance(app.screen, ConfirmDialog)
        await pilot.press("escape")
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("alt+q")  # q closes help there; alt+q neither closes it nor quits
        await pilot.pause()
        assert app.is_running and isinstance(app.screen, HelpScreen)
