"""Looks of the Bench view: a run benched with the same workload as two earlier layouts; the Pareto chart
shows the three curves with the front marked. Regenerate with --snapshot-update and review the SVG."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pytest
from atomdeck.tui.app import ConsoleApp

from tests.tui.fakerun import fake_run

from .fakebench import benched

STATE = Path("/tmp/atomdeck-bench-snapshot-state")


@pytest.fixture(autouse=True)
def _fixed_dirs(monkeypatch):
    shutil.rmtree(STATE, ignore_errors=True)
    monkeypatch.setenv("XDG_STATE_HOME", str(STATE))
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg-config")
    monkeypatch.setenv("USER", "operator")
    monkeypatch.delenv("ATOMDECK_SIM_SPEED", raising=False)
    yield
    shutil.rmtree(STATE, ignore_errors=True)


async def show_bench(pilot) -> None:
    app = pilot.app
    await app.workers.wait_for_complete()
    run = fake_run("serving")
    benched(run)
    app.runs.attach(run, watch=False)
    app.switch_mode("bench")
    await pilot.pause()
    await pilot.pause(0.3)


def test_bench_view_pareto(snap_compare):
    app = ConsoleApp(refresh_s=None, clock=lambda: datetime(2025, 1, 1, 12, 0, 0))
    assert snap_compare(app, terminal_size=(160, 50), run_before=show_bench)
