"""The console's Bench view driven by Pilot against real runs (local launcher, simulator, real router):
the form, progress per step, the live table, this run's curve over an earlier run's, the export."""

from __future__ import annotations

import asyncio
import csv
import json
from datetime import datetime

import pytest
from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.run import Run
from atomdeck.tui.app import ConsoleApp
from atomdeck.tui.screens.bench import BenchScreen
from atomdeck.tui.widgets.pareto import ParetoChart
from textual.widgets import DataTable, Input, ProgressBar

from tests.leftovers import alive, not_serving

from .test_bench_local import PORTS

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _sim_speed(monkeypatch):
    monkeypatch.setenv("ATOMDECK_SIM_SPEED", "20")


async def serving(recipe: str) -> Run:
    ws = load_workspace(recipe, "local")
    ws.inventory = ws.cluster.static_inventory()
    for path, value in PORTS.items():
        ws.recipe = set_field(ws.recipe, path.replace("__", "."), value)
    run = await Run.launch(ws, ws.assess())
    state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
    if state.status != "serving":  # nothing of a failed start may outlive the test
        why = not_serving(state)  # before the teardown writes its own words over the state
        await run.teardown(grace=2)
        pytest.fail(why)
    return run


async def until(pilot, cond, what: str, timeout: float = 60) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, f"timed out waiting for {what}"
        await pilot.pause(0.05)


async def fill(pilot, **values) -> None:
    for key, value in values.items():
        box = pilot.app.screen.query_one(f"#bench-{key}", Input)
        box.value = str(value)
    await pilot.pause()


async def bench_in_console(run: Run) -> tuple[BenchScreen, list]:
    app = ConsoleApp(refresh_s=None, clock=lambda: datetime(2025, 1, 1, 12, 0, 0))
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        app.runs.attach(run, watch=False)
        await pilot.press("6")
        await until(pilot, lambda: isinstance(app.screen, BenchScreen), "the bench view")
        screen = app.screen
        # the form starts from the recipe's benchmark section (demo: concurrencies 1,4,16,64)
        assert screen.query_one("#bench-concurrency", Input).value == "1,4,16,64"
        # bad input: said in the view, nothing starts
        await fill(pilot, concurrency="1,x")
        screen.query_one("#bench-isl", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert not screen.running and "positive integers" in screen.status
        await fill(pilot, isl=48, osl=12, concurrency="1,4", num_prompts=8)
        await pilot.press("enter")
        # started (a small sweep on the sped-up simulator can also be over before the first look)
        await until(pilot, lambda: screen.running or screen.status.startswith("done"), "the bench to start", 5)
        await until(pilot, lambda: not screen.running, "the bench to finish")
        await pilot.pause(0.2)
        assert screen.status.startswith("done: saved"), screen.status
        table = screen.query_one(DataTable)
        assert table.row_count == 2
        rows = [table.get_row_at(i) for i in range(2)]
        assert [[r[0], str(r[1]), *r[2:5]] for r in rows] == [["1", "yes", "8", "0", "0"], ["4", "yes", "8", "0", "0"]]
        bars = list(screen.query(ProgressBar).results(ProgressBar))
        assert [(b.progress, b.total) for b in bars] == [(8, 8), (8, 8)]
        chart = screen.query_one(ParetoChart)
        curves = list(chart.curves)
        await pilot.press("x")
        await pilot.pause()
        return screen, curves


async def test_bench_view_measures_and_compares_with_an_earlier_layout():
    first = await serving("demo-1p1d")
    try:
        _, curves = await bench_in_console(first)
        assert [(c.label, c.current, len(c.points)) for c in curves] == [("1P1D TP8 (this run)", True, 2)]
    finally:
        await first.teardown(grace=2)
    assert not alive(first)
    second = await serving("demo-2p1d")
    try:
        _, curves = await bench_in_console(second)
    finally:
        await second.teardown(grace=2)
    assert not alive(second)
    # the earlier run (torn down, its results on disk) under this one, labelled by layout
    assert [(c.label.split(" · ")[0], c.current, len(c.points)) for c in curves] == [
        ("1P1D TP8", False, 2), ("2P1D DPA TP8 (this run)", True, 2)]
    exported = sorted((second.rd.path / "bench").glob("compare-*"))
    assert [p.suffix for p in exported] == [".csv", ".json", ".svg"]
    rows = list(csv.DictReader(exported[0].open()))
    assert [(r["layout"], r["max_concurrency"]) for r in rows] == [
        ("1P1D TP8", "1"), ("1P1D TP8", "4"), ("2P1D DPA TP8", "1"), ("2P1D DPA TP8", "4")]
    assert len(json.loads(exported[1].read_text())["rows"]) == 4
    assert exported[2].read_text().startswith("<svg")


async def test_stopping_a_bench_keeps_the_steps_done_and_leaves_nothing_running():
    run = await serving("demo-1p1d")
    try:
        app = ConsoleApp(refresh_s=None, clock=lambda: datetime(2025, 1, 1, 12, 0, 0))
        async with app.run_test(size=(160, 50)) as pilot:
            await app.workers.wait_for_complete()
            app.runs.attach(run, watch=False)
            await pilot.press("6")
            await until(pilot, lambda: isinstance(app.screen, BenchScreen), "the bench view")
            screen = app.screen
            await fill(pilot, isl=16, osl=64, concurrency="16,1", num_prompts=200)
            await pilot.press("b")
            await until(pilot, lambda: len(screen.results) == 1 and screen.counts[1][0] >= 2, "step 2 under way")
            await pilot.press("s")
            await until(pilot, lambda: not screen.running, "the bench to stop", 10)
            assert screen.status == "stopped after 1 step(s); the steps done are saved", screen.status
            assert not [w for w in screen.workers if w.group == "bench" and not w.is_finished]
            (saved,) = (run.rd.path / "bench").glob("2*.json")
            assert [r["max_concurrency"] for r in json.loads(saved.read_text())["results"]] == [16]
    finally:
        await run.teardown(grace=2)
    assert not alive(run)


def worker_pid(run: Run, name: str) -> int:
    """The simulated ATOM server of one worker (its run marker in the environment, this machine's /proc)."""
    import os

    mark = f"ATOMDECK_RUN={run.id}:{name}".encode()
    found = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and mark in open(f"/proc/{d}/environ", "rb").read().split(b"\0") \
                    and b"openai_server" in open(f"/proc/{d}/cmdline", "rb").read():
                found.append(int(d))
        except OSError:
            continue
    return max(found)


async def test_a_prefill_frozen_during_a_bench_is_named_and_its_step_invalid():
    """Issue 40's first finding: a prefill frozen (SIGSTOP) mid-step, the Bench view said nothing. Now the view names
    it (core's state: the bench's sentinel found it), the step stops, INVALID, with the process named, the table and
    the saved report agree, and nothing is left running."""
    import os
    import signal

    from textual.widgets import Label, Static

    from tests.frozen import stop

    run = await serving("demo-2p1d")
    pid = None
    try:
        app = ConsoleApp(refresh_s=None, clock=lambda: datetime(2025, 1, 1, 12, 0, 0))
        async with app.run_test(size=(160, 50)) as pilot:
            await app.workers.wait_for_complete()
            app.runs.attach(run, watch=False)
            await pilot.press("6")
            await until(pilot, lambda: isinstance(app.screen, BenchScreen), "the bench view")
            screen = app.screen
            await fill(pilot, isl=16, osl=64, concurrency="4,4", num_prompts=400)
            await pilot.press("b")
            await until(pilot, lambda: screen.running and screen.counts[0][0] >= 8, "step 1 under way")
            pid = worker_pid(run, "prefill-1")
            stop([pid])
            await until(pilot, lambda: not screen.running, "the bench to stop on its own", 30)
            await pilot.pause(0.3)
            health = str(screen.query_one("#bench-health", Static).render())
            assert "prefill-1" in health and "UNRESPONSIVE" in health, health
            label = str(screen.query_one("#bench-count-0", Label).render())
            assert "INVALID" in label and "prefill-1 unresponsive" in label, label
            assert str(screen.query_one(DataTable).get_row_at(0)[1]) == "NO"
            assert screen.status.startswith("NOT complete: concurrency 4 INVALID: health: prefill-1 unresponsive")
            assert len(screen.results) == 1  # the second step never ran on the broken run
            (saved,) = (run.rd.path / "bench").glob("2*.json")
            (step,) = json.loads(saved.read_text())["results"]
            assert step["valid"] is False and step["checks"]["health"]["processes"] == ["prefill-1"]
            assert step["completed"] + step["failed"] < 400
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        await run.teardown(grace=2)
    assert not alive(run)
