"""A key that moves the process table's cursor shows the next process's last lines in the same frame as
the cursor (issue 19: key press -> screen). Before, the last lines waited for RowHighlighted to bubble up to
the screen, which drew them in a second frame after the cursor's. Counted, not timed."""

from __future__ import annotations

from atomdeck.tui.widgets.process_table import ProcessTable

from .conftest import make_app
from .runhelpers import attached_scale


async def test_the_last_lines_follow_the_cursor_in_the_keys_own_turn():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        run, screen = await attached_scale(pilot)
        table = screen.query_one(ProcessTable)
        table.focus()
        await pilot.pause()
        for step in (table.action_cursor_down, table.action_cursor_down, table.action_cursor_up):
            step()  # the key's action, with no message handled after it
            name = table.current
            assert screen.tail_name == name
            box = screen.query_one("#tail-box")
            assert f"· {name} on {run.state.procs[name].node}" in str(box.border_title)
        await pilot.pause()
        assert screen.tail_name == table.current  # RowHighlighted, handled later, changes nothing


async def test_the_cursor_and_its_last_lines_go_out_in_one_frame():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        _, screen = await attached_scale(pilot)
        table = screen.query_one(ProcessTable)
        table.focus()
        await pilot.pause()
        await pilot.pause()
        updates: list[set[str]] = []
        compositor = type(screen._compositor)  # (the view's: TightCompositor)
        real = compositor.update_widgets

        def counted(self, widgets):
            updates.append({w.id or "" for w in widgets})
            return real(self, widgets)

        compositor.update_widgets = counted  # type: ignore[method-assign]
        try:
            for key in ("down", "down", "up", "down"):
                updates.clear()
                await pilot.press(key)
                await pilot.pause()
                with_table = [u for u in updates if "proc-table" in u]
                assert with_table, updates
                assert "tail-box" in with_table[0], f"the cursor's frame left the last lines for later: {updates}"
        finally:
            compositor.update_widgets = real  # type: ignore[method-assign]
