"""The log view: tail from disk then live lines, follow / pause with "+N new lines", search, wrap,
save, hostile lines, bounded memory, a node's logs, and a flood that must not freeze the console.

Lines are fed through the run's line listeners exactly as core calls them (a fake run from
fakerun.py: nothing is started)."""

from __future__ import annotations

import asyncio

from atomdeck.tui.logtext import MAX_CELLS
from atomdeck.tui.screens.dialogs import InputDialog
from atomdeck.tui.screens.logs import LogScreen
from atomdeck.tui.screens.run import RunScreen
from atomdeck.tui.widgets.barrier_grid import BarrierGrid
from atomdeck.tui.widgets.log_lines import LogLines
from textual.widgets import Input

from .conftest import make_app
from .fakerun import fake_run
from .runhelpers import BIG, text_of, until


def feed(run, name: str, lines: list[str]) -> None:
    for line in lines:
        for fn in list(run.line_listeners):
            fn(name, line)


async def open_log(pilot, scenario: str = "hung", name: str = "decode-0"):
    app = pilot.app
    run = fake_run(scenario)
    app.runs.attach(run, watch=False)
    app.switch_mode("run")
    await pilot.pause()
    app.runs.open_logs([name])
    # the log screen composes on a later turn of the loop (later still on a loaded machine)
    await until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.query(LogLines),
                what="the log screen and its lines")
    return run, app.screen, app.screen.logview


async def test_opens_with_the_tail_from_disk_then_follows_live_lines():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        disk = run.rd.log_path("decode-0").read_text().splitlines()
        assert list(log.lines) == disk  # everything logged before the console attached
        feed(run, "decode-0", [f"live line #{i}" for i in range(1, 101)])
        await until(pilot, lambda: log.lines[-1] == "live line #100", what="the live lines")
        assert log.lines[-1] == "live line #100" and len(log.lines) == len(disk) + 100
        assert log.follow and log.scroll_y == log.max_scroll_y
        assert "FOLLOW" in text_of(screen.query_one("#log-status"))


async def test_scrolling_up_pauses_and_counts_new_lines_until_end_or_f():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", [f"line #{i}" for i in range(200)])
        await until(pilot, lambda: log.lines[-1] == "line #199", what="the 200 lines")
        await pilot.press("pageup")
        assert not log.follow
        top = log.scroll_y
        feed(run, "decode-0", [f"more #{i}" for i in range(30)])
        # (appends come in batches, slower while a flood replaces the screen: wait for it, not a fixed time)
        await until(pilot, lambda: "+30 new lines" in text_of(screen.query_one("#log-status")), what="+30")
        status = text_of(screen.query_one("#log-status"))
        assert "PAUSED" in status and "+30 new lines" in status and "End or F follows" in status
        assert log.scroll_y == top  # the lines being read stay put
        await pilot.press("F")
        assert log.follow and log.pending == 0 and log.scroll_y == log.max_scroll_y
        assert "FOLLOW" in text_of(screen.query_one("#log-status"))
        await pilot.press("up")
        assert not log.follow
        await pilot.press("end")
        assert log.follow and log.scroll_y == log.max_scroll_y


async def test_search_then_next_and_previous():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", ["ERROR first", "ok", "ERROR second", "ok", "ERROR third"])
        await until(pilot, lambda: log.lines[-1] == "ERROR third", what="the fed lines")
        await pilot.press("slash")
        box = screen.query_one("#log-search", Input)
        assert box.display and box.has_focus
        await pilot.press(*"error", "enter")
        assert not box.display and log.has_focus
        hits = log.matches()
        assert [log.lines[h - log.base] for h in hits] == ["ERROR first", "ERROR second", "ERROR third"]
        assert log.current == hits[-1] and not log.follow  # the newest match first
        assert "match 3/3" in text_of(screen.query_one("#log-status"))
        await pilot.press("N")
        assert log.current == hits[1]
        await pilot.press("N", "N")
        assert log.current == hits[2]  # wraps around
        await pilot.press("n")
        assert log.current == hits[0]
        assert "match 1/3" in text_of(screen.query_one("#log-status"))


async def test_keys_typed_right_after_slash_are_the_search():
    """A burst such as '/second' in one turn of the loop (typing fast, a paste, a loaded machine): the keys
    behind '/' reached the log before the search box had focus, where n/N are next/previous."""
    from textual import events

    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", ["ERROR first", "ok", "ERROR second", "ok"])
        await until(pilot, lambda: list(log.lines)[-4:] == ["ERROR first", "ok", "ERROR second", "ok"],
                    what="the fed lines")
        for key, ch in (("slash", "/"), *((c, c) for c in "second")):
            app.post_message(events.Key(key, ch))
        box = screen.query_one("#log-search", Input)
        await until(pilot, lambda: box.has_focus, what="the search box's focus")
        assert box.value == "second"
        await pilot.press("d", "enter")  # after focus: typed at the end, not over a selection
        assert log.search == "secondd" and not box.display
        await pilot.press("slash")  # opens with the last search, selected: a key typed replaces it
        await pilot.press(*"ok", "enter")
        assert log.search == "ok"


async def test_a_flood_of_lines_makes_no_layout_pass():
    """Lines appended under a flood change only the log's height: the view and its scrollbar are updated
    in place. A layout pass per pulse re-rendered every widget on the screen (41 % of the console's loop
    under the 8 x 2,000 lines/s flood)."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", [f"INFO status #{i}" for i in range(200)])  # more than a screen: a scrollbar
        await until(pilot, lambda: log.show_vertical_scrollbar, what="the scrollbar")
        layouts = []
        refresh = log.refresh

        def counted(*regions, layout=False, **kw):
            layouts.append(layout)
            return refresh(*regions, layout=layout, **kw)

        log.refresh = counted
        for n in range(20):
            feed(run, "decode-0", [f"INFO status #{200 + n * 10 + i}" for i in range(10)])
            await pilot.pause()
        await until(pilot, lambda: log.lines and log.lines[-1] == "INFO status #399", what="the last line")
        assert layouts and not any(layouts)
        assert log.virtual_size.height == len(log.lines) and log.follow
        assert log.vertical_scrollbar.window_virtual_size == len(log.lines)
        assert log.scroll_y == log.max_scroll_y  # still following the end
        assert log.max_scroll_y == len(log.lines) - log.scrollable_content_region.height


async def test_wrap_toggle_and_highlighted_errors():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot, scenario="crashed")
        assert any("OutOfMemoryError" in line for line in log.lines)
        rows = log.virtual_size.height
        await pilot.press("w")
        assert log.wrap and log.virtual_size.height > rows  # long lines take several rows
        assert "wrap on" in text_of(screen.query_one("#log-status"))
        app.save_screenshot("wrapped.svg", str(run.rd.path))  # every visible row draws
        await pilot.press("w")
        assert not log.wrap and log.virtual_size.height == rows


async def test_save_writes_the_full_log_from_disk_with_secrets_masked(tmp_path):
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        secret = "hf_" + "Zq8" * 12
        with run.rd.log_path("decode-0").open("a") as f:
            f.write(f"debug: HF_TOKEN={secret}\n")
        await pilot.press("s")
        assert isinstance(app.screen, InputDialog)
        target = tmp_path / "decode.log"
        app.screen.query_one("#answer", Input).value = str(target)
        await pilot.press("enter")
        await app.workers.wait_for_complete([w for w in app.workers if w.group == "save-log"])
        await pilot.pause()
        saved = target.read_text().splitlines()
        disk = run.rd.log_path("decode-0").read_text().splitlines()
        assert len(saved) == len(disk) and saved[0] == disk[0]
        assert saved[-1] == "debug: HF_TOKEN=***" and secret not in target.read_text()
        assert any("wrote" in n.message and str(target) in n.message for n in app._notifications)


async def test_oversized_binary_and_escape_lines_are_shown_safely():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        feed(run, "decode-0", ["x" * 3_000_000, "bin\x00\x01\x1b[31mred\x1b[0m\x07end", "tab\there", "\udcff\ufffd"])
        await pilot.pause(0.3)
        big, binary, tab, odd = list(log.lines)[-4:]
        assert len(big) < MAX_CELLS + 100 and "line cut at" in big
        assert "\x1b" not in binary and "\x00" not in binary and binary.startswith("bin") and "red" in binary
        assert "\t" not in tab
        await pilot.press("w", "home", "end", "w")
        app.export_screenshot()  # renders every visible row without an error
        assert isinstance(app.screen, LogScreen)


async def test_memory_is_bounded_and_no_line_is_lost_or_reordered():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        for batch in range(4):
            feed(run, "decode-0", [f"status #{i}" for i in range(batch * 3000 + 1, (batch + 1) * 3000 + 1)])
            await pilot.pause(0.15)
        for _ in range(100):  # the view flushes on a timer: on a busy machine it may need a moment more
            if log.lines and list(log.lines)[-1] == "status #12000":
                break
            await pilot.pause(0.1)
        assert len(log.lines) == 5_000 and len(app.live.buffers["decode-0"]) == 5_000
        numbers = [int(line.split("#")[1]) for line in log.lines]
        assert numbers == list(range(7_001, 12_001))


async def test_a_node_shows_the_logs_of_all_its_processes():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run = fake_run("serving")
        app.runs.attach(run, watch=False)
        app.switch_mode("run")
        await pilot.pause()
        grid = app.screen.query_one(BarrierGrid)
        grid.focus()
        grid.move_cursor(row=grid.nodes.index("demo-n01"))
        await pilot.press("enter")
        assert isinstance(app.screen, LogScreen) and app.screen.names == ["prefill-0", "router"]
        lines = list(app.screen.logview.lines)
        assert any(x.startswith("prefill-0| ") for x in lines) and any(x.startswith("router| ") for x in lines)
        feed(run, "router", ["a live router line"])
        await until(pilot, lambda: app.screen.logview.lines[-1] == "router| a live router line", what="the line")
        assert app.screen.logview.lines[-1] == "router| a live router line"


async def test_sixteen_flooding_processes_do_not_freeze_the_log_view():
    """16 processes x 2,000 lines/s through core's line listener path while keys are pressed."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run, screen, log = await open_log(pilot)
        names = ["decode-0"] + [f"worker-{i}" for i in range(15)]
        stop = False

        async def flood() -> None:
            n = 0
            while not stop:
                for name in names:
                    feed(run, name, [f"[atom] Engine Core: running=0 reqs (status #{n + i + 1})" for i in range(200)])
                n += 200
                await asyncio.sleep(0.1)

        task = asyncio.create_task(flood())
        try:
            for _ in range(8):  # every key press takes effect during the flood (its latency: bench/console.py)
                before = log.wrap
                await pilot.press("w")
                assert log.wrap is not before
                await asyncio.sleep(0.1)
        finally:
            stop = True
            await task
        await pilot.pause(0.3)
        numbers = [int(x.rsplit("#", 1)[1].rstrip(")")) for x in log.lines if "status #" in x]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # in order, no gap
        assert all(len(b) <= 5_000 for b in app.live.buffers.values())


async def test_lines_arriving_while_the_log_view_opens_are_not_lost():
    """The pulse may reach a log view that was pushed but not composed yet (it crashed once)."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run = fake_run("hung")
        app.runs.attach(run, watch=False)
        app.switch_mode("run")
        await pilot.pause()
        app.runs.open_logs(["decode-0"])
        feed(run, "decode-0", ["racing line"])
        app.runs.poke()  # a pulse right now, before the screen mounted
        await until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.query(LogLines)
                    and app.screen.logview.lines and app.screen.logview.lines[-1] == "racing line",
                    what="the racing line")
        assert isinstance(app.screen, LogScreen) and app.screen.logview.lines[-1] == "racing line"


async def test_run_views_are_usable_at_100x30():
    """At 100x30 the panels stack and scroll; the diagnosis, the processes and the barrier stay on the
    first screen, and the log, runs and teardown screens fit."""
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        run = fake_run("hung")
        app.runs.attach(run, watch=False)
        app.switch_mode("run")
        # laid out and drawn from the run (a busy machine lags): wait for it, then measure
        await until(pilot, lambda: any(t.region.height >= 2 for t in app.screen.query("#proc-table")), timeout=10,
                    what="the process table drawn")
        screen = app.screen
        for wid in ("#run-head", "#proc-table", "#barrier-grid"):
            region = screen.query_one(wid).region
            assert region.height >= 2 and region.bottom <= 29, (wid, region)
        assert "demo-n02 :8020 not open" in text_of(screen.query_one("#run-head"))
        await pilot.press("enter")
        await pilot.pause(0.2)  # laid out (a busy machine lags)
        assert isinstance(app.screen, LogScreen) and app.screen.logview.region.height >= 20
        app.export_screenshot()
        await pilot.press("escape", "5")
        await pilot.pause(0.2)
        assert app.screen.query_one("#runs-table").region.height >= 10
        app.export_screenshot()


async def test_opening_another_run_does_not_show_the_previous_runs_log():
    """A log view left open on the run view belonged to the run watched before: reattaching to another
    run from 5 Runs shows that run, not the old log (frozen, its listeners gone)."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        first, _, _ = await open_log(pilot, "hung")
        other = fake_run("serving", run_id="20261129-000000-demo-1p1d-other")
        await pilot.press("5")
        await pilot.pause()
        app.runs.open_run(other.id)
        await app.workers.wait_for_complete()
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.query("#proc-table"),
                    what="the run view of the other run")
        assert app.live.id == other.id
        assert app.screen.query_one("#proc-table").display
