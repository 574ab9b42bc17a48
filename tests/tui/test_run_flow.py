"""The console running real deployments on the demo cluster (the simulator, real processes and
ports): design -> launch -> serving -> teardown -> verified clean, faults, reattach, read-only.
Every run a test starts is torn down (conftest checks nothing is left, by PID)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.run import Run
from atomdeck.tui.screens.dialogs import ConfirmDialog, MessageDialog
from atomdeck.tui.screens.layout import LayoutScreen
from atomdeck.tui.screens.logs import LogScreen
from atomdeck.tui.screens.preview import PreviewScreen
from atomdeck.tui.screens.run import RunScreen
from atomdeck.tui.screens.runs import RunsScreen
from atomdeck.tui.screens.teardown import TeardownScreen
from atomdeck.tui.widgets.barrier_grid import BarrierGrid
from atomdeck.tui.widgets.node_table import NodeTable
from atomdeck.tui.widgets.process_table import ProcessTable
from textual.widgets import DataTable

from tests.holds import hold_starts
from tests.leftovers import alive, gone

from .conftest import ready
from .runhelpers import BIG, live_app, settle, sim_speed, text_of, until  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("sim_speed"), pytest.mark.timeout(120)]


def with_env(app, role: str, env: dict, **fields) -> None:
    """Edit the design's recipe as the Layout form would (through core)."""
    recipe = set_field(app.design.recipe, f"{role}.env", env)
    for path, value in fields.items():
        recipe = set_field(recipe, path.replace("__", "."), value)
    app.set_design(replace(app.design, recipe=recipe))


async def launch(pilot, app) -> None:
    await pilot.press("3", "L")
    assert isinstance(app.screen, ConfirmDialog)
    await pilot.press("y")
    await until(pilot, lambda: app.live is not None and not app.launching and isinstance(app.screen, RunScreen),
                what="the run view, its processes started")


def on_start(monkeypatch, note) -> None:
    """Call note() when a launch starts its processes (LocalLauncher.start_many), before the first start."""
    from atomdeck.core.launch.local import LocalLauncher

    real = LocalLauncher.start_many

    async def start_many(self, specs):
        note()
        return await real(self, specs)

    monkeypatch.setattr(LocalLauncher, "start_many", start_many)


async def tear_down_every_run() -> None:
    """Whatever the tests' launches started, also when a test failed half-way: torn down, verified clean."""
    for meta in Run.list():
        run = Run.open(meta["id"])
        report = await run.teardown(grace=2)
        assert report.clean and gone(run) == []


async def test_pick_layout_preview_launch_serving_teardown_verified_clean():
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        table = app.screen.query_one(NodeTable)
        for node in ("demo-n01", "demo-n02"):  # pick by hand, in rank order
            table.move_cursor(row=table.shown.index(node))
            await pilot.press("space")
        assert app.design.nodes == ("demo-n01", "demo-n02")
        await pilot.press("2")
        assert isinstance(app.screen, LayoutScreen) and app.assessment.ok
        await pilot.press("3")
        assert isinstance(app.screen, PreviewScreen)
        await launch(pilot, app)
        screen = app.screen
        await until(pilot, lambda: app.live.state.status == "serving", what="serving")
        await pilot.pause(0.2)
        run = app.live.run
        head = text_of(screen.query_one("#run-head"))
        assert "SERVING" in head and "1/1P 1/1D router serving" in head
        procs = screen.query_one(ProcessTable)
        assert procs.names == ["prefill-0", "decode-0", "router"]
        assert all(procs.get_cell(n, "stage").plain == "serving" for n in procs.names)
        assert all("alive" in procs.get_cell(n, "alive").plain for n in procs.names)
        grid = screen.query_one(BarrierGrid)
        assert grid.blocking == set() and grid.nodes == ["demo-n01", "demo-n02"]
        assert "open 8/8" in grid.get_cell("demo-n01", "handshake:6301-6308").plain
        router = text_of(screen.query_one("#router"))
        assert "smoke request" in router and "8 tokens" in router and "serves 'atomdeck/demo-tiny-8b'" in router
        assert "first transfer" in text_of(screen.query_one("#pairs"))

        await pilot.press("D")
        dialog = app.screen
        assert isinstance(dialog, ConfirmDialog) and dialog.query_one("#no").has_focus  # the safe choice
        body = text_of(dialog.query_one(".dialog-body"))
        for word in ("demo-n01", "demo-n02", "prefill-0", "decode-0", "router", "6301-6308, 8010", "8020"):
            assert word in body
        await pilot.press("y")
        assert isinstance(app.screen, TeardownScreen)
        await until(pilot, lambda: app.live.report is not None, what="the teardown report")
        await pilot.pause(0.2)
        assert app.live.report.clean
        result = text_of(app.screen.query_one("#teardown-result"))
        assert "verified clean: every process gone, every port closed" in result
        progress = text_of(app.screen.query_one("#teardown-body"))
        assert progress.count("✓ gone") == 3
        # the watcher was told of the teardown: the barrier shows the ports closing, not crashes
        await until(pilot, lambda: {c.state for c in app.live.state.cells.values()} == {"closed"}, timeout=10,
                    what="every barrier cell closed")
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert "× closed" in grid.get_cell("demo-n02", "http:8020").plain
        assert "STOPPED" in text_of(screen.query_one("#run-head"))
        assert run.state.status == "stopped"
    assert gone(run) == []
    again = Run.open(run.id)  # what the run directory says to any later session
    assert again.state.status == "stopped" and {p.stage for p in again.state.procs.values()} == {"stopped"}


async def test_a_decode_that_never_binds_marks_exactly_its_cell_and_shows_its_last_lines():
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        with_env(app, "decode", {"ATOMSIM_NEVER_BIND": "1"})
        await launch(pilot, app)
        screen = app.screen
        grid = screen.query_one(BarrierGrid)

        def hung() -> bool:
            state = app.live.state  # (a fresh copy each time: the run thread publishes them)
            others = [c for c in state.cells.values() if c.kind != "router" and c.key != "demo-n02:8020"]
            return (grid.blocking == {"demo-n02:8020"} and all(c.state == "open" for c in others)
                    and any("fully initialized" in x for x in state.procs["decode-0"].last_lines))

        await until(pilot, hung, what="the hung barrier")
        await pilot.pause(0.2)
        assert grid.blocking == {"demo-n02:8020"}
        cell = grid.get_cell("demo-n02", "http:8020")
        assert cell.plain.startswith("▌") and "not yet" in cell.plain  # marked as blocking
        assert not grid.get_cell("demo-n01", "http:8010").plain.startswith("▌")
        head = text_of(screen.query_one("#run-head"))
        assert "demo-n02 :8020 not open" in head and "decode-0 on demo-n02 alive" in head
        assert "demo-n02 :8020 not open" in text_of(screen.query_one("#why"))
        procs = screen.query_one(ProcessTable)
        assert procs.current == "decode-0"  # the cursor follows the diagnosis's culprit
        # its last lines, once the panel's turn came (its redraw is spread: 0.2 s was not always enough on a busy machine)
        await until(pilot, lambda: "fully initialized" in text_of(screen.query_one("#tail")), what="its last lines")
        await pilot.press("enter")
        assert isinstance(app.screen, LogScreen)
        log = app.screen.logview
        assert any("EngineCore fully initialized and ready" in line for line in log.lines)
        assert "decode-0 · decode on demo-n02" in text_of(app.screen.query_one("#log-head"))
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)
        assert app.live.state.procs["decode-0"].alive is True  # hung, not dead


async def test_a_crash_while_loading_shows_the_exit_code():
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        with_env(app, "decode", {"ATOMSIM_CRASH_AT": "cudagraph:3", "ATOMSIM_SLOW_LOAD": "0.5"})
        await launch(pilot, app)
        procs = app.screen.query_one(ProcessTable)
        await until(pilot, lambda: "exit 3" in procs.get_cell("decode-0", "alive").plain, step=0.02,
                    what="exit 3 on screen")
        assert Path(app.live.run.handles["decode-0"].exit_path).read_text().strip() == "3"  # the exit file's code
        await until(pilot, lambda: app.live.state.status == "failed", what="failed")
        await pilot.pause(0.2)
        assert procs.get_cell("decode-0", "stage").plain == "failed"
        head = text_of(app.screen.query_one("#run-head"))
        assert "FAILED" in head and "decode-0 on demo-n02 exited 3" in head
        assert procs.current == "decode-0"
        await until(pilot, lambda: "cudagraph" in text_of(app.screen.query_one("#tail")),
                    what="its last lines")  # (the panel's redraw is spread: its turn may come after 0.2 s)


async def test_quit_leaves_the_run_running_and_another_console_tears_it_down():
    first = live_app()
    async with first.run_test(size=BIG) as pilot:
        await ready(pilot)
        await launch(pilot, first)
        await until(pilot, lambda: first.live.state.status == "serving", what="serving")
        run = first.live.run
        await pilot.press("q")
    assert run.id in str(first.runs.quit_message) and f"atomdeck down {run.id}" in str(first.runs.quit_message)
    assert sorted(alive(run)) == ["decode-0", "prefill-0", "router"]  # quitting the console is not a teardown
    assert "127.0.0.11:30000 open" in gone(run)  # and the router still answers on its port

    second = live_app()
    async with second.run_test(size=BIG) as pilot:
        await ready(pilot)
        await pilot.press("5")
        assert isinstance(second.screen, RunsScreen)
        runs = second.screen.query_one("#runs-table", DataTable)
        assert runs.row_count == 1 and runs.get_row_at(0)[1].plain == run.id
        await pilot.press("enter")
        await until(pilot, lambda: second.live is not None and isinstance(second.screen, RunScreen), what="reattach")
        assert second.live.id == run.id and second.live.watching
        assert "serving" in text_of(second.screen.query_one("#run-head")).lower()
        await pilot.press("D", "y")
        await until(pilot, lambda: second.live.report is not None, what="the teardown report")
        assert second.live.report.clean, second.live.report.lines()
        await pilot.press("escape", "5")
        await pilot.pause(0.2)
        assert "stopped" in second.screen.query_one("#runs-table", DataTable).get_row_at(0)[2].plain
    assert gone(run) == []


async def test_a_launch_onto_the_nodes_of_the_watched_run_is_refused_and_that_run_is_watched_again():
    """The launch let go of the watched run first; a launch refused before its run existed left the console on
    "No run attached", the serving run to be found on 5 Runs."""
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        await launch(pilot, app)
        run = app.live.run
        await pilot.press("3", "L", "y")
        await until(pilot, lambda: isinstance(app.screen, MessageDialog) and app.screen.query(".dialog-body"),
                    what="the refusal")
        assert "Launch failed" in text_of(app.screen.query_one(".dialog-title"))
        said = text_of(app.screen.query_one(".dialog-body"))
        assert f"by run {run.id}" in said and f"atomdeck down {run.id}" in said, said
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.live is not None, what="the run again")
        assert app.live.id == run.id and app.live.watching
        assert [m["id"] for m in Run.list()] == [run.id]
        await pilot.press("D", "y")
        await until(pilot, lambda: app.live.report is not None, what="the teardown report")
        assert app.live.report.clean, app.live.report.lines()
    assert gone(run) == []


async def test_tui_run_opens_on_that_run_and_readonly_cannot_tear_it_down():
    ws = load_workspace("demo-1p1d", "local")
    ws.inventory = ws.cluster.static_inventory()
    run = await Run.launch(ws, ws.assess())
    await run.close()
    app = live_app(run_id=run.id[-4:], readonly=True)  # a unique suffix is enough, as for `atomdeck down`
    async with app.run_test(size=BIG) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, RunScreen) and app.live.id == run.id
        await until(pilot, lambda: app.live.state.status == "serving", what="serving")
        footer = {k.action for k in app.screen.query("FooterKey")}
        assert "teardown" not in footer and "launch" not in footer
        assert "READ-ONLY" in text_of(app.screen.query_one("#context"))
        await pilot.press("D", "ctrl+d")
        assert isinstance(app.screen, RunScreen)  # no confirmation opened: the binding is disabled
        app.runs.request_teardown()  # even called directly
        await pilot.pause(0.2)
        assert isinstance(app.screen, RunScreen) and not app.live.teardown_running
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Tear down the run…" not in titles and "Launch" not in titles
        await pilot.press("5")
        assert "teardown" not in {k.action for k in app.screen.query("FooterKey")}
        await pilot.press("D")
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("3", "L")
        assert isinstance(app.screen, PreviewScreen)
    assert sorted(alive(run)) == ["decode-0", "prefill-0", "router"]
    report = await Run.open(run.id).teardown(grace=2)
    assert report.clean and gone(run) == []


async def test_the_run_view_draws_the_run_before_the_first_process_starts(monkeypatch):
    """Once processes start (129 at 128 local nodes) each takes a share of the CPU: the run view's
    "Launching ..." went out 7-12 s after the key, and the run's panels, drawn whole when the launch ended,
    held the loop 300 ms and more while keys waited. Now a frame with "Launching ..." is out before core
    makes the run, and a frame with the run (LAUNCHING, every process pending in its table) before the first
    start; the processes' starts then change rows of a view already drawn."""
    from atomdeck.tui.widgets.run_panels import RunHeader

    app = live_app()
    frames: list[tuple[str, str, list[str]]] = []  # each frame of the run view that went out: what it said
    seen_at_start: list[list[tuple[str, str, list[str]]]] = []
    live_at_start: list[object] = []

    def note() -> None:
        seen_at_start.append(list(frames))
        live_at_start.append(app.live)

    on_start(monkeypatch, note)
    async with app.run_test(size=BIG) as pilot:
        display = app._display

        def recorded(screen, renderable):
            if isinstance(screen, RunScreen) and renderable is not None:
                main = screen.query_one("#run-main").display
                frames.append((text_of(screen.query_one("#run-empty")) if not main else "",
                               text_of(screen.query_one(RunHeader)) if main else "",
                               list(screen.query_one(ProcessTable).names) if main else []))
            display(screen, renderable)

        app._display = recorded
        await ready(pilot)
        await launch(pilot, app)
        app._display = display
        assert len(seen_at_start) == 1
        said = seen_at_start[0]
        assert any(empty.startswith("Launching demo-1p1d") for empty, _, _ in said), said
        header, names = said[-1][1], said[-1][2]  # the last frame out before the first start
        assert header.startswith(" LAUNCHING   0/1P 0/1D router pending"), said[-1]
        assert "launching: starting 3 processes" in header, said[-1]
        assert sorted(names) == ["decode-0", "prefill-0", "router"], said[-1]
        run = app.live.run
        assert live_at_start == [app.live]  # the run attached then is the one watched now
        assert app.live.watching and app.runs._watcher is not None
    report = await Run.open(run.id).teardown(grace=2)
    assert report.clean and gone(run) == []


async def test_a_launch_makes_the_gcs_settle_pass_before_its_processes_start_not_at_attach(monkeypatch):
    """The attach's full GC pass (settle_gc) took 190 ms of a key's wait once 129 local processes booted
    (bench/busy_trace): a launch makes it before the first start, and the steward's next quiet pass is due."""
    from atomdeck.tui import gc_steward, live

    order: list[str] = []
    real_settle = gc_steward.settle_gc

    def settle() -> None:
        order.append("settle")
        real_settle()

    monkeypatch.setattr(gc_steward, "settle_gc", settle)
    monkeypatch.setattr(live, "settle_gc", settle)
    on_start(monkeypatch, lambda: order.append("start"))
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        await launch(pilot, app)
        run = app.live.run
        assert order == ["settle", "start"]
        assert app.gc_steward.full_due() or app.gc_steward.full_passes > 0
    report = await Run.open(run.id).teardown(grace=2)
    assert report.clean and gone(run) == []


async def test_the_run_view_counts_the_processes_a_launch_starts(monkeypatch):
    """A launch of 129 processes took 8-23 s with nothing but "Launching ..." on screen. Core's launch
    says what it does (Run.launch's progress), and the run view shows it: here the count, with the
    second and later starts' counts held until the screen showed the first."""
    app = live_app()
    first_shown = threading.Event()  # the starter's lines are read in a thread: the count is held there
    hold_starts(monkeypatch, first_shown)
    try:
        async with app.run_test(size=BIG) as pilot:
            await ready(pilot)
            await pilot.press("3", "L", "y")

            def said() -> str:
                if not isinstance(app.screen, RunScreen) or not app.screen.query_one("#run-main").display:
                    return ""
                from atomdeck.tui.widgets.run_panels import RunHeader
                return text_of(app.screen.query_one(RunHeader))

            await until(pilot, lambda: "1 of 3 processes started" in said(), what="the first start counted")
            assert said().startswith(" LAUNCHING "), said()  # the run's header: the run is drawn, not watched yet
            # the start heard is shown started, the others pending; the headline names the nodes left
            procs = app.screen.query_one(ProcessTable)
            await until(pilot, lambda: [procs.get_cell(n, "stage").plain for n in procs.names] == [
                "launching", "pending", "pending"], what="the first process shown started")
            await until(pilot, lambda: "launching: 1 of 3 processes started; not yet on demo-n01–02" in said(),
                        what="the headline naming the nodes left")
            assert "decode-0 on demo-n02 not started yet" in text_of(app.screen.query_one("#why"))
            assert app.launching and app.live is not None and not app.live.watching
            await pilot.press("D")  # held back until the processes started: nothing asks, nothing tears down
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmDialog) and app.live.teardown_running is False
            first_shown.set()
            await until(pilot, lambda: not app.launching and app.live.watching, what="the launch to end")
            assert app.runs.launch_step == ""
            await until(pilot, lambda: "1 of 3 processes started" not in said(), what="the count gone")
    finally:
        first_shown.set()
        await tear_down_every_run()


async def test_a_port_in_use_is_shown_as_a_dialog_and_nothing_runs():
    import socket

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.12", 8020))
    holder.listen()
    try:
        app = live_app()
        async with app.run_test(size=BIG) as pilot:
            await ready(pilot)
            await pilot.press("3", "L", "y")
            await until(pilot, lambda: isinstance(app.screen, MessageDialog), what="the refusal")
            body = text_of(app.screen.query_one(".dialog-body"))
            assert "Launch failed" in text_of(app.screen.query_one(".dialog-title"))
            assert "demo-n02 127.0.0.12:8020 (wanted by decode-0)" in body
            assert app.live is None and Run.list() == []
    finally:
        holder.close()


async def test_preflight_findings_are_listed_with_their_nodes(monkeypatch):
    from atomdeck.core.config.errors import PreflightError
    from atomdeck.core.design.findings import Finding

    findings = [Finding("preflight-gpu-busy", "error", "GPU memory in use (87%) on 3 GPUs", "nodes", "pick another "
                        "node or free the GPUs", node="mia1-p01-g02"),
                Finding("preflight-model", "error", "model path /models/dsv4 missing", "model.path",
                        "copy the model to every node", node="mia1-p01-g03")]

    async def refuse(ws, a, job_id=None, progress=None, on_run=None):
        raise PreflightError(findings)

    monkeypatch.setattr(Run, "launch", staticmethod(refuse))
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        await pilot.press("3", "L", "y")
        await until(pilot, lambda: isinstance(app.screen, MessageDialog), what="the pre-flight dialog")
        assert "Pre-flight failed: nothing was launched" in text_of(app.screen.query_one(".dialog-title"))
        body = text_of(app.screen.query_one(".dialog-body"))
        assert "[mia1-p01-g02]" in body and "GPU memory in use" in body
        assert "[mia1-p01-g03]" in body and "model path /models/dsv4 missing" in body
        await pilot.press("escape")
        assert "No run attached" in text_of(app.screen.query_one("#run-empty"))


def test_atomdeck_tui_run_reaches_the_console_and_a_bad_run_is_an_error(monkeypatch, capsys):
    from atomdeck.core.cli.main import main
    from atomdeck.tui.app import ConsoleApp

    from .fakerun import fake_run

    run = fake_run("serving")
    seen = []
    monkeypatch.setattr(ConsoleApp, "run", lambda self, *a, **k: seen.append(self))
    assert main(["tui", "--run", run.id]) == 0
    app = seen[-1]
    assert app._initial_run.id == run.id and app.design.recipe.name == "demo-1p1d"
    assert main(["tui", "--run", "no-such-run"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err


async def test_teardown_key_follows_the_keymap():
    import yaml
    from atomdeck.core.config.paths import config_dir

    from .fakerun import fake_run

    path = config_dir() / "keymap.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"teardown": "X"}))
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        app.runs.attach(fake_run("serving"), watch=False)
        app.switch_mode("run")
        await pilot.pause()
        await pilot.press("D")
        assert isinstance(app.screen, RunScreen)  # moved away from D
        await pilot.press("X")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), what="the confirmation")
        await pilot.press("n")
        assert isinstance(app.screen, RunScreen) and not app.live.teardown_running


async def test_a_launch_attaches_without_parsing_the_stylesheet_or_creating_files_on_the_loop(monkeypatch):
    """Right after 129 local starts the attach held the loop, keys waiting: Textual parsed every CSS source
    again for the launch's notice and the footer's key groups (their first mount), and the watcher's log was
    created on the loop, waiting 65-370 ms for the file system's journal (bench/busy_trace). A launch adds
    that CSS before the first start, and the log is opened in a thread."""
    import os
    import threading

    from textual.css.stylesheet import Stylesheet

    started: list[bool] = []
    parses_after_start: list[int] = []
    opened_on: list[str] = []
    real_parse, real_open = Stylesheet.parse, os.open

    def parse(self) -> None:
        if started:
            parses_after_start.append(len(self.source))
        real_parse(self)

    def os_open(path, *args, **kwargs):
        if str(path).endswith("watcher.log"):
            opened_on.append(threading.current_thread().name)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Stylesheet, "parse", parse)
    on_start(monkeypatch, lambda: started.append(True))
    monkeypatch.setattr(os, "open", os_open)
    app = live_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        await launch(pilot, app)
        run = app.live.run
        await until(pilot, lambda: app._notifications and opened_on, what="the launch's notice and the watcher")
        await pilot.pause(0.3)  # its toast and the run view's footer mounted
        assert parses_after_start == []
        assert opened_on and threading.main_thread().name not in opened_on
    report = await Run.open(run.id).teardown(grace=2)
    assert report.clean and gone(run) == []


def held_app(monkeypatch):
    """A console whose launches hold the local starter at its second line: (app, the event that releases the
    starts, the event set once they are held)."""
    release = threading.Event()
    return live_app(), release, hold_starts(monkeypatch, release)


async def launch_held(pilot, second: threading.Event) -> str:
    """3 L y, until the starts are under way and held (`hold_starts`) with the run attached; its id."""
    app = pilot.app
    await ready(pilot)
    await pilot.press("3", "L", "y")
    await until(pilot, lambda: second.is_set() and app.live is not None, what="the starts under way")
    return app.live.id


async def until_ended(app, timeout: float = 10.0) -> None:
    """Until the app has quit (asyncio.sleep, not pilot.pause: the app may be gone meanwhile)."""
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while app.is_running and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)


async def test_q_a_third_time_while_the_processes_start_quits_now_and_core_records_what_started(monkeypatch):
    """A start can hang (an ssh node that does not answer, up to its timeout), and after q twice the console waited
    for every start with no way out but killing it. q once more quits now: the launch is cancelled with the app's
    workers, core records what started (its handles, the run failed naming `atomdeck down`), and core's teardown
    then leaves nothing."""
    import asyncio

    from atomdeck.core.run.rundir import RunDir

    app, release, second = held_app(monkeypatch)
    run_id = ""
    try:
        async with app.run_test(size=BIG) as pilot:
            run_id = await launch_held(pilot, second)
            await pilot.press("q", "q")
            await pilot.pause()
            assert app.is_running and any("q once more quits now" in n.message for n in app._notifications)
            await pilot.press("q")
            await until_ended(app)
            assert not app.is_running and not release.is_set()  # quit with the starts still held
        said = str(app.runs.quit_message)
        assert f"the launch of run {run_id} was interrupted" in said and f"atomdeck down {run_id}" in said, said
        rd = RunDir.find(run_id)
        # the launch's worker was cancelled with the app's workers; the local starter goes on until it has started
        # every process (core must know them to stop them), then core records them (the app's asyncio.run waits)
        release.set()
        for _ in range(100):
            if rd.meta()["status"] == "failed":
                break
            await asyncio.sleep(0.05)
        meta = rd.meta()
        assert meta["status"] == "failed" and "interrupted while its processes started" in meta["diagnosis"], meta
        assert f"stop them with `atomdeck down {run_id}`" in meta["diagnosis"]
        assert sorted(h.name for h in rd.handles()) == ["decode-0", "prefill-0", "router"]  # `atomdeck down` finds them
    finally:
        release.set()
        await tear_down_every_run()
    run = Run.open(run_id)
    assert alive(run) == []

async def test_q_twice_while_the_processes_start_quits_once_they_started_and_down_stops_them(monkeypatch):
    """q twice while core starts the processes cancelled the launch there: the started processes were left without
    the handles in the run's directory that `atomdeck down` finds them by, and ran on (found by this test). Now
    the run is attached while they start (Run.launch's on_run), and q twice quits once every start returned: the
    message names the run and how to stop it, and core's teardown from its directory leaves nothing."""

    app, release, second = held_app(monkeypatch)
    run_id = ""
    try:
        async with app.run_test(size=BIG) as pilot:
            run_id = await launch_held(pilot, second)
            await pilot.press("q")
            await pilot.pause()
            assert any(f"Press q again to quit once every start returned: the run keeps running, `atomdeck down "
                       f"{run_id}` stops it" in n.message for n in app._notifications)
            await pilot.press("q")
            await pilot.pause(0.2)
            assert app.is_running and app.launching  # waits for the starts
            assert any("quits once every start returned" in n.message for n in app._notifications)
            release.set()
            await until_ended(app)
            assert not app.is_running
        said = str(app.runs.quit_message)
        assert f"run {run_id} is still running (3 processes" in said and f"atomdeck down {run_id}" in said, said
    finally:
        release.set()
        await tear_down_every_run()
    run = Run.open(run_id)
    assert sorted(run.handles) == ["decode-0", "prefill-0", "router"]  # what `atomdeck down` finds them by
    assert alive(run) == []
