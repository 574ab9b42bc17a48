"""The console stays cheap (issue 19): what it redraws, not how fast. No timings here (bench/console.py
measures them); these check the mechanisms that keep the drawing small:

- the run view's one-second clock redraws only what depends on the time, in place: no layout pass
  and no redraw of the panels that show only the state (router, top bar) when the version did not
  change; the time cells do change;
- the tables (VirtualTable) change rows in place, draw only those again, and show the new values;
- the last-lines panel redraws only when its lines changed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from atomdeck.tui.screens.run import RunScreen
from atomdeck.tui.widgets.process_table import ProcessTable
from atomdeck.tui.widgets.quiet import shape_of, update_quietly
from atomdeck.tui.widgets.run_panels import RouterPanel, RunHeader
from atomdeck.tui.widgets.tail_panel import TailPanel
from atomdeck.tui.widgets.vtable import VirtualTable
from rich.text import Text
from textual.app import App
from textual.widget import Widget
from textual.widgets import Static

from .conftest import FIXED_TIME, make_app
from .fakerun import fake_run


class Clock:
    def __init__(self) -> None:
        self.t = FIXED_TIME

    def __call__(self) -> datetime:
        return self.t


def _count_refreshes(monkeypatch) -> list[tuple[str, bool]]:
    """Every Widget.refresh from now on, as (widget id or class, layout)."""
    calls: list[tuple[str, bool]] = []
    original = Widget.refresh

    def refresh(self, *regions, repaint=True, layout=False, recompose=False):
        calls.append((self.id or type(self).__name__, layout))
        return original(self, *regions, repaint=repaint, layout=layout, recompose=recompose)

    monkeypatch.setattr(Widget, "refresh", refresh)
    return calls


async def test_the_clock_redraws_only_the_time_cells_without_a_layout_pass(monkeypatch):
    clock = Clock()
    app = make_app(clock=clock)
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        app.runs.attach(fake_run("serving"), watch=False)
        app.switch_mode("run")
        await pilot.pause()
        await pilot.pause(0.1)
        screen = app.screen
        assert isinstance(screen, RunScreen)
        table = screen.query_one(ProcessTable)
        header = screen.query_one(RunHeader)
        since = {n: table.get_cell(n, "since").plain for n in table.names}
        assert "up 1m15s" in str(header.render())
        shown = {w.id: w.render() for w in screen.query(RouterPanel)}
        updates: list[str] = []
        for cls in (RouterPanel, Static):
            original = cls.update

            def update(self, *a, _original=original, **kw):
                updates.append(self.id or type(self).__name__)
                return _original(self, *a, **kw)

            monkeypatch.setattr(cls, "update", update)
        calls = _count_refreshes(monkeypatch)

        clock.t = FIXED_TIME + timedelta(seconds=1)  # 1m15s -> 1m16s: only digits change
        screen.tick()
        await pilot.pause()  # (a table measures its columns when idle)

        assert "up 1m16s" in str(header.render())
        assert all(table.get_cell(n, "since").plain != since[n] for n in table.names if since[n]), \
            "the times in stage did not move"
        assert [c for c in calls if c[1]] == [], f"the clock re-laid the screen out: {calls}"
        assert "router" not in updates and "context" not in updates and "tabs" not in updates, updates
        assert {w.id: w.render() for w in screen.query(RouterPanel)} == shown
        # nothing that is not time-dependent was refreshed at all
        refreshed = {name for name, _ in calls}
        assert refreshed <= {"run-head", "proc-table", "barrier-grid", "pairs", "nodes", "why"}, refreshed

        calls.clear()
        updates.clear()
        screen.tick()  # the same second again: nothing changed, nothing drawn
        await pilot.pause()
        assert calls == [] and updates == []


async def test_a_state_change_still_redraws_every_panel():
    """The version moved: the router panel (state only) is drawn again."""
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        run = fake_run("serving")
        live = app.runs.attach(run, watch=False)
        app.switch_mode("run")
        await pilot.pause()
        screen = app.screen
        router = screen.query_one(RouterPanel)
        before = router.render()
        run.state.checks["smoke"].detail = "a new smoke answer"
        live.version += 1
        screen.tick()
        assert router.render() is not before


class Table(App):
    def compose(self):
        yield VirtualTable(id="t")


def _row_text(table: VirtualTable, y: int) -> str:
    return "".join(seg.text for seg in table.render_line(y))


def _rows(r0: str, r1: str) -> list[tuple[str, list[Text]]]:
    return [("r0", [Text("name r0"), Text(r0)]), ("r1", [Text("name r1"), Text(r1)])]


async def test_set_rows_shows_the_new_values_in_place():
    app = Table()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(VirtualTable)
        table.set_columns([("a", "A"), ("since", "SINCE")])
        table.set_rows(_rows("12s", "12s"))
        await pilot.pause()
        assert "12s" in _row_text(table, 1)
        laid = table.renders
        table.set_rows(_rows("13s", "12s"))
        await pilot.pause()
        assert table.renders == laid + 1, "an in-place change must draw only the changed row again"
        assert "13s" in _row_text(table, 1) and "12s" in _row_text(table, 2)
        assert table.get_cell("r0", "since").plain == "13s"
        # a wider value: the column grows
        table.set_rows(_rows("13s", "1m00s"))
        await pilot.pause()
        assert "1m00s" in _row_text(table, 2)
        laid = table.renders
        table.set_rows(_rows("13s", "1m00s"))
        await pilot.pause()
        assert table.renders == laid


async def test_the_last_lines_panel_redraws_only_when_its_lines_change():
    class One(App):
        def compose(self):
            yield TailPanel(id="tail")

    app = One()
    async with app.run_test(size=(60, 10)) as pilot:
        tail = app.query_one(TailPanel)
        assert tail.show(["a", "Traceback (most recent call last):"])
        assert not tail.show(["a", "Traceback (most recent call last):"])
        await pilot.pause()
        assert tail.size.height == 2
        assert "a" == "".join(s.text for s in tail.render_line(0)).rstrip()
        assert tail.show([])
        await pilot.pause()
        assert "(no output yet)" in "".join(s.text for s in tail.render_line(0))
        long = "x" * 100
        tail.show([long])
        await pilot.pause()
        line = "".join(s.text for s in tail.render_line(0))
        assert len(line) == tail.size.width and line.endswith("…")


def test_only_digits_keep_the_shape():
    assert shape_of(Text("up 1m15s")) == shape_of(Text("up 1m16s"))
    assert shape_of(Text("up 9s")) != shape_of(Text("up 10s"))
    assert shape_of(Text("a b")) != shape_of(Text("ab "))


async def test_update_quietly_skips_equal_content_and_lays_out_only_on_a_new_shape(monkeypatch):
    class One(App):
        def compose(self):
            yield Static(id="s")

    app = One()
    async with app.run_test(size=(40, 5)) as pilot:
        s = app.query_one(Static)
        calls = _count_refreshes(monkeypatch)
        assert update_quietly(s, Text("up 12s"))
        assert calls[-1] == ("s", True)
        assert not update_quietly(s, Text("up 12s"))
        assert update_quietly(s, Text("up 13s"))
        assert calls[-1] == ("s", False)
        assert update_quietly(s, Text("up 1m00s"))
        assert calls[-1] == ("s", True)
        await pilot.pause()
        assert "1m00s" in str(s.render())


async def test_the_node_filter_on_many_nodes_keeps_the_matching_rows_and_draws_them(tmp_path):
    """2,000-node filter (bench/console.py filter): rows are added in one batch and cells drawn from
    a per-cell render; the rows shown and what is drawn must be exactly the matching nodes."""
    from atomdeck.tui.widgets.node_table import NodeTable

    n = 600
    lines = ["name: big", "description: many nodes", "launcher: slurm", "gpus_per_node: 8", "nodes:"]
    lines += [f"  - {{name: node-{i:04d}, addr: 10.{i // 250}.{i % 250}.1, gpus: 8, partition: gpu}}"
              for i in range(n)]
    (tmp_path / "big.yaml").write_text("\n".join(lines) + "\n")
    app = make_app(cluster=str(tmp_path / "big.yaml"), offline=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.screen.query_one(NodeTable)
        assert table.row_count == n
        await pilot.press("slash", "1", "0", ".", "1")
        await pilot.pause()
        want = [f"node-{i:04d}" for i in range(n) if "10.1" in f"node-{i:04d} 10.{i // 250}.{i % 250}.1"]
        assert table.shown == want and table.row_count == len(want)
        assert [table.get_row_at(i)[1].plain for i in range(table.row_count)] == want
        top = int(table.scroll_offset.y)  # (the cursor's row may keep the table scrolled)
        drawn = ["".join(s.text for s in table.render_line(y)) for y in range(1, 6)]
        assert all(name in line for name, line in zip(want[top:], drawn)), (top, drawn)
        for _ in range(4):
            await pilot.press("backspace")
        await pilot.pause()
        assert table.shown == [f"node-{i:04d}" for i in range(n)]
