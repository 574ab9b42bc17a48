"""A view shown again does not re-apply the stylesheet to all its widgets (tui/screens/base.py ViewScreen,
issue 19): at 128 nodes that was about a third of a switch's CPU. Counted, not timed. A change of the App's
own classes or pseudo-classes (focus, blur, dark) while the view was hidden still restyles it on resume."""

from __future__ import annotations

from textual.screen import Screen

from .conftest import make_app
from .runhelpers import until


async def test_a_view_shown_again_is_restyled_only_when_the_apps_classes_changed(monkeypatch):
    restyled: list[str] = []
    real = Screen.update_node_styles

    def counted(self, animate: bool = True) -> None:
        restyled.append(type(self).__name__)
        real(self, animate)

    monkeypatch.setattr(Screen, "update_node_styles", counted)
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.loaded and type(app.screen).__name__ == "NodesScreen", what="the Nodes view")
        for key in "1414":  # each view shown once
            await pilot.press(key)
            await pilot.pause()
        restyled.clear()
        for key in "141414":
            await pilot.press(key)
            await pilot.pause()
        assert type(app.screen).__name__ == "RunScreen"
        assert restyled == []  # (Textual: one whole-view restyle per switch)
        app.add_class("-probe")  # an App class changes: Textual restyles the view on top, not the hidden one
        await pilot.pause()
        assert restyled == ["RunScreen"]
        restyled.clear()
        await pilot.press("1")
        await pilot.pause()
        assert restyled == ["NodesScreen"]  # ... which its resume does
        restyled.clear()
        await pilot.press("4")
        await pilot.pause()
        assert restyled == []  # the Run view was styled with it


async def test_a_view_shown_again_is_painted_when_drawn_not_after_textuals_switch_hold(monkeypatch):
    """Textual's switch_mode holds every repaint for 50 ms (App.delay_update), idle, on every switch; a view
    shown before ends the hold once its resume is handled. Here the hold's timer is stretched to 60 s: the
    switch still ends it (Textual's alone would keep it for the minute); a view shown the first time
    (composed then) keeps the timer."""
    from textual.app import App

    real = App.set_timer

    def stretched(self, delay, callback=None, *, name=None, pause=False):
        return real(self, 60.0 if name == "delay_update" else delay, callback, name=name, pause=pause)

    monkeypatch.setattr(App, "set_timer", stretched)
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.loaded and type(app.screen).__name__ == "NodesScreen", what="the Nodes view")
        await pilot.pause()
        assert app._batch_count == 1  # the Nodes view's first show (after the loading screen): the timer's hold
        app.end_switch_hold()
        assert app._batch_count == 0
        await pilot.press("4")  # the Run view's first show: composed, the timer's hold
        await pilot.pause()
        assert app._batch_count == 1
        app.end_switch_hold()  # (what the minute would do)
        await pilot.pause()
        for key in "1414":
            await pilot.press(key)
            await until(pilot, lambda: app._batch_count == 0, what="the hold ended", timeout=5)
            assert type(app.screen).__name__ == ("NodesScreen" if key == "1" else "RunScreen")


async def test_a_view_shown_the_first_time_does_not_refresh_the_whole_stylesheet(monkeypatch):
    """Textual refreshed the whole stylesheet (every source parsed, every widget restyled) on each view's first
    switch, twice, and on the run view's second one: keys while 128 nodes start waited 47-68 ms for it
    (bench/scale_console.py). A view made while the stylesheet is current is styled as it mounts. A theme
    changed while a view is hidden still refreshes that view when it is shown."""
    from textual.app import App

    refreshed: list[str] = []
    real = App.refresh_css

    def counted(self, animate: bool = True) -> None:
        refreshed.append(type(self.screen).__name__)
        real(self, animate)

    monkeypatch.setattr(App, "refresh_css", counted)
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.loaded and type(app.screen).__name__ == "NodesScreen", what="the Nodes view")
        await pilot.pause()
        refreshed.clear()
        for key in "34214":  # the Preview, Run and Layout views made and shown, then shown again
            await pilot.press(key)
            await pilot.pause()
        assert type(app.screen).__name__ == "RunScreen"
        assert refreshed == []  # (before: 7)
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await until(pilot, lambda: app.css_current, what="the theme's refresh")
        assert refreshed == ["RunScreen"]  # the view on top, at once
        refreshed.clear()
        await pilot.press("1")
        await pilot.pause()
        assert refreshed == ["NodesScreen"]  # the hidden one when shown
        refreshed.clear()
        await pilot.press("4")
        await pilot.pause()
        assert refreshed == []
