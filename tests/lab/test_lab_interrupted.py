"""A launch interrupted while its processes start (Ctrl-C in `atomdeck up`, a console quitting) on the ssh and
Slurm launchers: what a node reported started is recorded by its handle, what was still starting is found by the
sweep, and `atomdeck down` leaves nothing on any node."""

from __future__ import annotations

import asyncio

import pytest
from atomdeck.core.launch.base import LauncherBase
from atomdeck.core.run.run import Run

from tests.leftovers import open_ports

from .runhelpers import run_pids, squeue_job, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.mark.parametrize("cluster", ["lab-ssh", "lab"])
def test_a_launch_cancelled_once_a_node_started_is_torn_down_clean(lab, cluster, monkeypatch):
    ws = workspace("demo-2p1d", cluster)
    made: list[Run] = []
    launching: list[asyncio.Task] = []
    real_count = LauncherBase._count_started

    def count(self, total: int, started: int = 0, failed: int = 0) -> None:
        real_count(self, total, started, failed)
        if started and launching:  # the first node said its processes started: the others' are on the way
            launching.pop().cancel()

    monkeypatch.setattr(LauncherBase, "_count_started", count)

    async def keep(run: Run) -> None:
        made.append(run)

    async def go() -> None:
        task = asyncio.create_task(Run.launch(ws, ws.assess(), on_run=keep))
        launching.append(task)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 120)

    try:
        asyncio.run(go())
        (run,) = made
        meta, handles = run.rd.meta(), run.rd.handles()
        assert meta["status"] == "failed" and "the launch was interrupted while its processes started" in \
            meta["diagnosis"] and f"`atomdeck down {run.id}`" in meta["diagnosis"], meta
        assert handles and all(h.pid for h in handles), handles  # at least the node that said so
    finally:
        if made:
            report = teardown(made[0].id)
    assert report.clean, report.lines()
    # the nodes still starting when the cancellation came: their processes had no handle, the sweep got them
    assert len(handles) < len(run.processes) and any("swept" in r for r in report.released), report.released
    assert run_pids(lab, run.id) == {} and open_ports(run) == []
    if cluster == "lab":
        assert squeue_job(str(meta["job_id"])) == ""

