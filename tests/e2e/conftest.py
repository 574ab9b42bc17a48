"""End-to-end runs on the local demo cluster with the simulator: real processes, real ports."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.run import Run

from tests.leftovers import alive

# Fast but staged: the simulator still goes through every stage, in ~0.3 s.
SPEED = "20"


@pytest.fixture(autouse=True)
def _sim_speed(monkeypatch):
    monkeypatch.setenv("ATOMDECK_SIM_SPEED", SPEED)


def workspace(recipe: str = "demo-1p1d", **edits):
    ws = load_workspace(recipe, "local")
    ws.inventory = ws.cluster.static_inventory()
    for path, value in edits.items():
        ws.recipe = set_field(ws.recipe, path.replace("__", "."), value)
    return ws


@pytest.fixture
def runs():
    """Runs started by a test; each is torn down afterwards whatever happened."""
    started: list[Run] = []
    yield started
    for run in started:  # a fresh object: the test's one belongs to an event loop that is gone
        asyncio.run(Run.open(run.id).teardown(grace=2))
    for run in started:
        assert not alive(run), f"{alive(run)} left processes behind"


def env(ws, **kw):
    return os.environ | kw


FLOOD = {"ATOMSIM_FLOOD": "500"}  # the simulator's status lines per second, on top of its own


async def until(cond, what: str, timeout: float = 60.0) -> None:
    """Wait (in the test's own loop) until cond() holds; fail naming `what` after `timeout`."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def serving(ws, runs: list):
    """Launch `ws` on the demo, record the run in `runs` (torn down after the test), wait until it serves; the
    launching session is closed (a test acts on the run from new sessions, as the CLI does)."""
    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert s.status == "serving", s.diagnosis
        await run.close()
        return run
    return asyncio.run(go())

