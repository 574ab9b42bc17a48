"""Slurm through a login host with many processes (issue 17.5): OpenSSH allows 10 sessions per connection, so log
tails must not take the sessions squeue, cat and scancel need. 4P4D + router is nine processes, 6P4D eleven."""

from __future__ import annotations

import asyncio

import pytest
from atomdeck.core.launch.slurm import AGENT
from atomdeck.core.run.run import Run

from tests.leftovers import open_ports

from .runhelpers import run_pids, squeue_job, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.mark.parametrize("prefill,decode,per_node,tp", [(4, 4, 2, 4), (6, 4, 4, 2)])
def test_many_processes_through_the_login_host_serve_and_tear_down(lab, prefill, decode, per_node, tp):
    ws = workspace("demo-1p1d", "lab-login", prefill__workers=prefill, prefill__per_node=per_node, prefill__tp=tp,
                   decode__workers=decode, decode__per_node=per_node, decode__tp=tp)

    async def go():
        a = ws.assess()
        assert a.ok, a.findings
        assert len(a.processes) == prefill + decode + 1
        run = await Run.launch(ws, a)
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=120)
        if state.status == "serving":  # every log read (the tails over SSH may be a moment behind)
            state = await run.watch(until=lambda s: all(p.last_lines for p in s.procs.values()), timeout=30)
        # with every log followed, Slurm commands still get through the login host
        steps = await asyncio.wait_for(run.launcher.runner.run(
            ["squeue", "-h", "-s", "-j", str(run.rd.meta()["job_id"]), "-o", "%j"], timeout=30), 30)
        await run.close()
        return run, state, steps

    run, state, steps = asyncio.run(go())
    job = str(run.rd.meta()["job_id"])
    try:
        assert state.status == "serving", state.diagnosis
        assert state.readiness() == f"{prefill}/{prefill}P {decode}/{decode}D router serving"
        # one step per node holds that node's processes (issue 19: one srun client per node, not per process)
        node_steps = [line for line in steps.stdout.splitlines() if line.startswith(AGENT)]
        assert steps.ok and len(node_steps) == len(run.plan.selection.all()), steps.stdout
        assert [p.name for p in state.procs.values() if not p.last_lines] == []  # every log was read
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert squeue_job(job) == "" and run_pids(lab, run.id) == {} and open_ports(run) == []
