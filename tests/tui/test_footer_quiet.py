"""The key bar rebuilds only when the keys it shows changed (tui/widgets/footer.py, issue 19): Textual's Footer
rebuilt itself at every bindings refresh, each rebuild a layout pass of the whole screen (50-250 ms at 128 nodes).
Counted, not timed: rebuilds and layout passes."""

from __future__ import annotations

from atomdeck.tui.widgets.footer import QuietFooter
from atomdeck.tui.widgets.process_table import ProcessTable

from .conftest import make_app
from .runhelpers import attached_scale, count_layouts, until


def _keys(footer: QuietFooter) -> list[tuple[str, bool]]:
    return [(k.description, k.disabled) for k in footer.query("FooterKey") if k.description]


async def test_a_bindings_refresh_that_changes_nothing_rebuilds_nothing(monkeypatch):
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        footer = screen.query_one(QuietFooter)
        await until(pilot, lambda: footer.rebuilds > 0 and _keys(footer), what="the footer's keys")
        await pilot.pause()
        shown, rebuilds = _keys(footer), footer.rebuilds
        assert ("Tear down", False) in shown
        passes = count_layouts(monkeypatch)
        for _ in range(5):  # what a redraw, a focus move, a screen shown again do
            screen.refresh_bindings()
            await pilot.pause()
        screen.query_one("#barrier-grid").focus()
        await pilot.pause()
        screen.query_one(ProcessTable).focus()
        await pilot.pause()
        await pilot.pause()
        assert footer.rebuilds == rebuilds and _keys(footer) == shown
        assert passes[0] == 0  # (Textual's Footer: a rebuild, so a layout pass, for each of them)


async def test_a_key_that_changes_is_shown():
    """A read-only console cannot tear down: once the run view says so, the bar is rebuilt without that key."""
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot, redraw=True)
        footer = screen.query_one(QuietFooter)
        await until(pilot, lambda: ("Tear down", False) in _keys(footer), what="teardown enabled")
        rebuilds = footer.rebuilds
        app.readonly = True
        screen.refresh_bindings()
        await until(pilot, lambda: "Tear down" not in [d for d, _ in _keys(footer)], what="teardown gone")
        assert footer.rebuilds == rebuilds + 1


async def test_switching_views_rebuilds_no_key_bar_once_each_was_shown():
    """A view shown or hidden asks every view's key bar to look again (Textual's Screen.stack_updates). The
    hidden view's bar took the keys of the view on top (Launch is a key of the design views only): each
    switch rebuilt two bars, ~half the switch's cost at 128 nodes. Now a bar looks only while its view is on
    top (or under dialogs only), so after each view was shown once, switching back and forth rebuilds none
    and each shows its own."""
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.loaded and app.screen.query(QuietFooter), what="the Nodes view")
        for key in "1414":
            await pilot.press(key)
            await pilot.pause()
        nodes, run = app.get_screen_stack("nodes")[-1], app.get_screen_stack("run")[-1]
        bars = [nodes.query_one(QuietFooter), run.query_one(QuietFooter)]
        await until(pilot, lambda: all(b.rebuilds for b in bars), what="both bars built")
        await pilot.pause()
        rebuilds = [b.rebuilds for b in bars]
        for key in "14141414":
            await pilot.press(key)
            await pilot.pause()
            await pilot.pause()
            assert "Launch" in [d for d, _ in _keys(bars[0])] and "Launch" not in [d for d, _ in _keys(bars[1])]
        assert [b.rebuilds for b in bars] == rebuilds
