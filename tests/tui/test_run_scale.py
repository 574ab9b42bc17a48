"""The run view with 128 nodes (64P64D + router, 129 processes, 4,096 handshake pairs) at 100x30: the
failing pairs and what holds the handshake back are on screen in a panel that fits, and the operator
can reach the last process and the last node. A deterministic run (fakescale.py), nothing started."""

from __future__ import annotations

from atomdeck.tui.widgets.barrier_grid import BarrierGrid
from atomdeck.tui.widgets.process_table import ProcessTable

from .conftest import make_app
from .fakescale import FAILED_PAIRS, LOADING, fake_scale_run
from .runhelpers import text_of

SMALL = (100, 30)


async def _attached(pilot):
    app = pilot.app
    await app.workers.wait_for_complete()
    app.runs.attach(fake_scale_run(), watch=False)
    app.switch_mode("run")
    await pilot.pause()
    await pilot.pause()
    return app.screen


async def test_the_failing_pairs_of_a_64x64_handshake_are_on_screen_first():
    app = make_app()
    async with app.run_test(size=SMALL) as pilot:
        screen = await _attached(pilot)
        box = screen.query_one("#pairs-box")
        box.scroll_visible(animate=False, top=True)
        await pilot.pause()
        pairs = screen.query_one("#pairs")
        text = text_of(pairs)
        lines = text.splitlines()
        # the three failing pairs share decode-52: one group, named before the matrix
        assert lines[0] == "× 3 failed pairs"
        assert "× decode-52 ← prefill-5, prefill-40, prefill-63: decode-52 on s116 cannot reach prefill-5" in text
        assert "held back by " + ", ".join(sorted(LOADING, key=lambda n: (n.split("-")[0] != "decode", n))) in text
        assert "64P × 64D, in blocks of 8×8 pairs" in text
        assert "3 failed" in lines[-1] and "ports reachable" in lines[-1]
        # a panel that fits the screen: a row per prefill (64 rows, in bands) would not
        assert pairs.size.height <= SMALL[1] - 6, text
        # and what the screen shows is that panel, failing pairs first
        shot = app.export_screenshot()
        for key in FAILED_PAIRS:
            assert key.split(">")[0] in shot


async def test_the_last_process_and_the_last_node_can_be_reached():
    app = make_app()
    async with app.run_test(size=SMALL) as pilot:
        screen = await _attached(pilot)
        table = screen.query_one(ProcessTable)
        assert len(table.names) == 129
        table.focus()
        await pilot.press("end")
        await pilot.pause()
        assert table.current == "router"
        assert table.scroll_offset.y > 0  # scrolled: the router row is the last of 129
        assert "router on s000" in screen.query_one("#tail-box").border_title
        await pilot.press("home")
        await pilot.pause()
        assert table.current == "prefill-0"

        grid = screen.query_one(BarrierGrid)
        assert len(grid.nodes) == 128
        # until the operator moves it, the grid shows the first node not open (a blocking one first)
        assert grid.current == grid.not_open[0]
        assert set(grid.not_open) >= {"s061", "s081", "s127"}
        title = str(screen.query_one("#barrier-box").border_title)
        assert f"{len(grid.not_open)} of 128 nodes not open" in title and "s061" in title
        grid.focus()
        await pilot.press("end")
        await pilot.pause()
        assert grid.current == "s127" and grid.touched
        await pilot.press("up", "up")
        app.live.version += 1  # a state change redraws the view: the cursor stays where the operator put it
        screen.redraw()
        await pilot.pause()
        assert grid.current == "s125"
        # the nodes panel stays one line: 128 lines would push the diagnosis off the screen
        assert text_of(screen.query_one("#nodes")) == "128 nodes · local, nothing to watch"


async def test_the_teardown_dialog_of_128_nodes_wraps_a_long_progress_under_its_column():
    """The dialog's rows are lines of text (a Rich table of 130 rows cost ~100 ms a draw): a long detail
    wraps under PROGRESS, every word of it kept, and the rows stay in their columns at 100x30."""
    from atomdeck.tui.screens.teardown import TeardownScreen

    from .runhelpers import until

    app = make_app()
    async with app.run_test(size=SMALL) as pilot:
        await _attached(pilot)
        live = app.live
        live.begin_teardown()
        why = "still running after SIGKILL: pid 50007 in state D (uninterruptible sleep) on its node; see dmesg"
        live.teardown_events.update({"prefill-7": ("left", why), "prefill-8": ("gone", "SIGTERM, gone in 0.4s")})
        app.push_screen(TeardownScreen(live))
        screen = app.screen
        await until(pilot, lambda: screen.is_mounted and screen.query_one("#teardown-body").content_region.width
                    and "gone in 0.4s" in text_of(screen.query_one("#teardown-body")), what="the dialog's rows")
        await pilot.pause(0.1)  # the draw again once the body has its width
        body = screen.query_one("#teardown-body")
        lines = text_of(body).splitlines()
        width = body.content_region.width
        column = lines[0].index("PROGRESS")
        assert lines[0].startswith("NODE") and lines[0].index("PROCESS") < column
        at = next(i for i, line in enumerate(lines) if "prefill-7" in line)
        assert lines[at].index("× left") == column
        wrapped = [lines[at]]
        for line in lines[at + 1:]:
            if line[:column].strip():
                break
            wrapped.append(line)
        assert len(wrapped) > 1 and all(len(line.rstrip()) <= width for line in wrapped)
        assert all(line[column] != " " for line in wrapped)  # each continuation starts under PROGRESS
        assert " ".join(line[column:].strip() for line in wrapped) == f"× left · {why}"
        assert sum(1 for line in lines if "… waiting" in line) == 127


async def test_a_run_attached_restyles_only_the_widgets_it_shows_or_hides(monkeypatch):
    """The run view said "no run" with a class on the screen, and a run attached removed it: Textual restyled
    every widget of the view (a tenth of the attach's CPU at 128 nodes, keys waiting). Now the three widgets
    shown or hidden change their own display."""
    from atomdeck.tui.screens.run import RunScreen
    from textual.dom import DOMNode

    restyled: list[str] = []
    real = DOMNode.update_node_styles

    def counted(self, animate: bool = True) -> None:
        restyled.append(type(self).__name__)
        real(self, animate)

    monkeypatch.setattr(DOMNode, "update_node_styles", counted)
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        app.switch_mode("run")
        await pilot.pause()
        assert "No run attached" in text_of(app.screen.query_one("#run-empty"))
        restyled.clear()
        screen = await _attached(pilot)
        assert isinstance(screen, RunScreen) and screen.query_one("#run-main").display
        assert not screen.query_one("#run-empty").display
        assert "RunScreen" not in restyled
        await app.runs.detach()
        await pilot.pause()
        assert screen.query_one("#run-empty").display and not screen.query_one("#run-main").display
        assert "RunScreen" not in restyled


async def test_back_on_a_128_node_run_the_switch_frame_goes_first_and_the_panels_follow(monkeypatch):
    """4 from another view redrew a 128-node run whole in the key's turn: while 129 processes started (the run is
    shown from before the first start) that press took twice as long as 1 (bench/scale_console.py). Now the
    switch's frame goes out with the panels as last drawn; a change made while the view was hidden follows, a
    panel a frame, and so do the clock's times."""
    from atomdeck.core.run.events import Event
    from atomdeck.tui.screens.run import RunScreen

    whole: list[int] = []
    real = RunScreen.redraw

    def redraw(self, clock: bool = False) -> None:
        whole.append(1)
        real(self, clock)

    monkeypatch.setattr(RunScreen, "redraw", redraw)
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _attached(pilot)
        await pilot.pause(0.3)
        await pilot.press("1")
        await pilot.pause()
        app.live.run.emit(Event("proc.stage", "decode-17", "http_up", "GET /health 200"))  # while hidden
        whole.clear()
        changes = screen.spread_changes
        await pilot.press("4")
        assert app.screen is screen
        for _ in range(100):
            if screen.drawn_version == app.live.version and not screen._clock_busy:
                break
            await pilot.pause(0.02)
        assert whole == []
        assert screen.spread_changes == changes + 1  # the change, spread
        table = screen.query_one(ProcessTable)
        assert "http up" in " ".join(str(c) for c in table.get_row("decode-17")), table.get_row("decode-17")
        await pilot.press("1")
        await pilot.pause()
        clock_turns = screen.clock_turns
        await pilot.press("4")  # nothing changed meanwhile: the clock's times only
        for _ in range(100):
            if screen.clock_turns is not clock_turns and not screen._clock_busy:
                break
            await pilot.pause(0.02)
        assert whole == [] and screen.clock_turns is not clock_turns
