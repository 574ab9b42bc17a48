"""alt+q is taken as Escape then q: a real terminal hands those two keys, typed fast or read late, over as
alt+q (nobody types alt+q on purpose). Each case is compared with the same two keys pressed one by one:
a dialog or the help screen closed and the console quit, the filter left and then q where it lands."""

from __future__ import annotations

from atomdeck.tui.screens.dialogs import ConfirmDialog
from atomdeck.tui.screens.help import HelpScreen
from textual.widgets import Input

from .conftest import SIZE, make_app, ready


async def _gone(pilot) -> bool:
    for _ in range(300):
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


async def test_alt_q_under_a_dialog_cancels_it_and_quits_as_escape_then_q_do():
    for keys in (("escape", "q"), ("alt+q",)):
        app = make_app()
        answers = []
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            app.push_screen(ConfirmDialog("Sure?", "a question"), answers.append)
            await pilot.pause()
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            assert await _gone(pilot), keys
        assert answers == [False], (keys, answers)  # cancelled, as Escape does, and then q quit
        assert app.return_code == 0


async def test_alt_q_on_the_help_screen_closes_it_and_quits():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("alt+q")
        assert await _gone(pilot)


async def test_alt_q_in_the_filter_does_what_escape_then_q_do():
    outcomes = []
    for keys in (("escape", "q"), ("alt+q",)):
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press("slash", "d", "e")
            assert isinstance(app.focused, Input)
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            gone = await _gone(pilot)
            outcomes.append((gone, None if gone else (type(app.focused).__name__, getattr(app.focused, "value", None))))
    assert outcomes[0] == outcomes[1], outcomes
