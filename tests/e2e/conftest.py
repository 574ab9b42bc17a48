"""End-to-end runs on the local demo cluster with the simulator: real processes, real ports."""

from __future__ import annotations

import asyncio
import os

import pytest
from atomdeck.core.edit import set_field
from atomdeck.core.run import Run
from atomdeck.core.session import load_workspace

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
        for h in run.handles.values():
            if h.pid:
                from atomdeck.core.launch.local import group_members

                assert not group_members(h.pid), f"{h.name} left processes behind"


def gone(run: Run) -> list[str]:
    """Problems left after a teardown: live processes (by PID) and open ports (by connecting)."""
    import socket

    from atomdeck.core.launch.local import group_members

    left = [f"{h.name}: pids {group_members(h.pid)}" for h in run.handles.values() if h.pid and group_members(h.pid)]
    for p in run.processes.values():
        for port in p.ports:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((p.host, port)) == 0:
                    left.append(f"{p.host}:{port} open")
    return left


def env(ws, **kw):
    return os.environ | kw
