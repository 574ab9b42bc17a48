"""A second launch onto nodes a live ssh run uses is refused naming that run (its processes found on those
nodes); onto other nodes it goes ahead. A run this machine does not know (launched from another machine or state
directory) is refused by pre-flight, over ssh and Slurm alike."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.run.run import Run

from .runhelpers import launch, refused, run_pids, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_a_launch_onto_nodes_of_a_live_ssh_run_is_refused_and_onto_others_goes_ahead(lab):
    ws = workspace("demo-1p1d", "lab-ssh")
    a = ws.assess(["mia1-p01-g01", "mia1-p01-g02"])
    started: list[Run] = []

    async def go() -> None:
        first = await launch(ws, a=a)
        started.append(first)
        await first.close()
        with pytest.raises(AtomdeckError) as refused:
            await Run.launch(ws, ws.assess(["mia1-p01-g02", "mia1-p01-g03"]))
        assert str(refused.value).startswith(
            f"node(s) in use, nothing was launched: mia1-p01-g02 by run {first.id} (starting: decode-0); stop it "
            f"first with `atomdeck down {first.id}`"), refused.value
        other = await launch(ws, ["mia1-p01-g03", "mia1-p01-g04"])
        started.append(other)
        await other.close()

    try:
        asyncio.run(go())
    finally:
        for run in started:
            report = teardown(run.id)
            assert report.clean, report.lines()
    assert len(started) == 2 and all(run_pids(lab, run.id) == {} for run in started)



@pytest.mark.parametrize("cluster", ["lab", "lab-ssh"])
def test_a_node_running_a_run_this_machine_does_not_know_is_refused_by_preflight(lab, cluster):
    """Its process carries another run's marker (launched from elsewhere: this machine's run directories do not
    know it). Pre-flight finds it on that node and on no other: the lab's nodes share one process table, and only
    the node's own processes (its network namespace) count."""
    g2 = "mia1-p01-g02"
    foreign = lab.node_exec(g2, "ATOMDECK_RUN=elsewhere-0001:decode-0 setsid sleep 300 </dev/null >/dev/null 2>&1 & "
                                "echo $!", check=True)
    pid = int(foreign.stdout)
    started: list = []
    try:
        ws = workspace("demo-1p1d", cluster)
        e = refused(ws, ws.assess(["mia1-p01-g01", g2]), "launched onto a node another atomdeck run uses")
        assert [(f.rule, f.node) for f in e.findings] == [("preflight-busy", g2)], e.findings
        assert e.findings[0].message == (f"processes of another atomdeck run are running on {g2}: elsewhere-0001 "
                                         "(launched from another machine or state directory)")

        async def other() -> None:
            run = await launch(ws, ["mia1-p01-g03", "mia1-p01-g04"])
            started.append(run)
            await run.close()

        asyncio.run(other())  # the neighbours see that process in /proc, but it is not theirs
    finally:
        os.kill(pid, signal.SIGKILL)
        for run in started:
            assert teardown(run.id).clean
    assert len(started) == 1 and run_pids(lab, started[0].id) == {}
