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
