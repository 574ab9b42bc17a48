"""Helpers for the console tests: a deterministic app (fixed clock, no timed refresh)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from atomdeck.tui.app import ConsoleApp
from textual.pilot import Pilot

FIXED_TIME = datetime(2025, 1, 1, 12, 0, 0)
SIZE = (140, 45)


@pytest.fixture(autouse=True)
def _no_run_left_behind(_isolated_state):
    """Whatever a console test launched is torn down afterwards, and checked gone by PID."""
    yield
    import asyncio

    from atomdeck.core.run.run import Run

    from tests.leftovers import alive

    left = []
    for meta in Run.list():
        if meta.get("fake"):
            continue
        run = Run.open(meta["id"])
        if any(p.alive is not False for p in run.state.procs.values()) or meta.get("status") != "stopped":
            asyncio.run(run.teardown(grace=2))
        left += alive(run)
    assert not left, f"processes left behind: {left}"


@pytest.fixture(autouse=True)
def _stable_env(monkeypatch):
    """Container names carry $USER and the simulator env carries the speed: pin both."""
    monkeypatch.setenv("USER", "operator")
    monkeypatch.delenv("ATOMDECK_SIM_SPEED", raising=False)


def make_app(**kw) -> ConsoleApp:
    kw.setdefault("refresh_s", None)
    kw.setdefault("clock", lambda: FIXED_TIME)
    kw.setdefault("read_gpus", False)  # (the nodes' GPUs are read where a test asks: test_node_gpus.py)
    return ConsoleApp(**kw)


async def ready(pilot: Pilot) -> None:
    """Wait for the inventory worker and the redraw it causes."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


def pytest_configure(config):
    """A failed snapshot writes an HTML report; keep it out of the checkout."""
    import tempfile

    if getattr(config.option, "snapshot_report", None) == "snapshot_report.html":
        config.option.snapshot_report = str(Path(tempfile.gettempdir()) / "atomdeck-snapshot-report.html")


SHOWN_STATE = "/tmp/atomdeck-snapshot-state"  # the state directory the snapshots show


@pytest.fixture
def snapshot_state(monkeypatch):
    """A state directory of this test's own (two test sessions at once never share one), whose path has
    the length of SHOWN_STATE, so every line that shows it is laid out alike; screenshots taken in the
    test (snap_compare) show SHOWN_STATE in its place. The user's config stays out (no keymap, no theme)."""
    import shutil
    import tempfile

    import textual._doc

    state = tempfile.mkdtemp(prefix="atomdeck-snaps-", dir="/tmp")  # /tmp/atomdeck-snaps-XXXXXXXX
    assert len(state) == len(SHOWN_STATE), state
    monkeypatch.setenv("XDG_STATE_HOME", state)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg-config")
    take = textual._doc.take_svg_screenshot  # snap_compare imports it from there when it is called

    def take_shown(*args, **kwargs) -> str:
        return take(*args, **kwargs).replace(state, SHOWN_STATE)

    monkeypatch.setattr(textual._doc, "take_svg_screenshot", take_shown)
    yield Path(state)
    shutil.rmtree(state, ignore_errors=True)
