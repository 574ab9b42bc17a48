"""Acting on a live run on the lab (issue 38), over Slurm and over ssh: a prefill restarted in place under load loses
no request; on Slurm the new process is a new step of the run's own job (never a new job: sacct and squeue say
so); over ssh a decode is added on a free node and then removed, under load."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from atomdeck.core.run import actions
from atomdeck.core.run.adding import add
from atomdeck.core.run.run import Run

from tests.acting import act
from tests.leftovers import open_ports
from tests.load import Load

from .runhelpers import run_pids, serve, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


async def settled(run: Run, action, timeout: float = 20.0):
    """The action's result once the watch has seen the run whole again: health is probed every few seconds, and a
    probe that timed out while the add loaded the machine (2 cores, 8 clients) says so until the next one."""
    result = await action
    deadline = time.monotonic() + timeout
    while result.outcome == "done" and run.state.readiness() != "2/2P 2/2D router serving" and \
            time.monotonic() < deadline:
        await asyncio.sleep(0.25)
    return result


def steps(job: str) -> list[str]:
    """`sacct` rows of the job: JobID|JobName|State."""
    out = subprocess.run(["sacct", "-n", "-P", "-j", job, "--format=JobID,JobName,State"], capture_output=True,
                         text=True, timeout=30).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_restart_on_slurm_is_a_new_step_of_the_same_job_and_loses_no_request(lab):
    ws = workspace("demo-2p1d", "lab")
    run, state = serve(ws)
    try:
        assert state.status == "serving", state.diagnosis
        job = str(run.rd.meta()["job_id"])
        jobs_before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
        before = steps(job)
        old = run.handles["prefill-1"]
        with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=8) as load:
            load.wait_for(20)
            result, after_state = act(run.id, lambda r: actions.restart(r, "prefill-1", drain_timeout=30))
            n = load.ok
            load.wait_for(n + 20)
        assert result.outcome == "done", result.detail
        assert load.failed == [], load.failed[:5]
        new = Run.open(run.id).handles["prefill-1"]
        assert new.pid != old.pid and new.step and new.step != old.step, (old, new)
        assert new.step.split(".")[0] == job  # a step of the run's own allocation
        after = steps(job)
        assert len(after) > len(before) and any(new.step in row for row in after), (before, after)
        jobs_after = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
        assert sorted(jobs_after) == sorted(jobs_before), "a restart must never submit a job"
        assert after_state.procs["prefill-1"].restarts == 1 and after_state.status == "serving"
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert run_pids(lab, run.id) == {} and open_ports(run) == []


def test_add_then_remove_a_decode_over_ssh_under_load(lab):
    ws = workspace("demo-2p1d", "lab-ssh")
    run, state = serve(ws, ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03"])
    try:
        assert state.status == "serving", state.diagnosis
        # 256-token answers: 8 in flight all the time, without 16-token requests by the hundred a second at the
        # simulator's speed 20 (their log lines, tens of thousands a minute through SSH tails into this one test
        # process, starved its event loop: every health check then missed)
        with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=8, max_tokens=256) as load:
            load.wait_for(20)
            added, st = act(run.id, lambda r: settled(r, add(r, "decode", "mia1-p01-g04")))
            assert added.outcome == "done", added.detail
            assert st.readiness() == "2/2P 2/2D router serving", (st.readiness(), {
                n: (p.stage, p.alive, p.health_detail, p.node) for n, p in st.procs.items()})
            n = load.ok
            load.wait_for(n + 20)
            removed, st = act(run.id, lambda r: actions.remove(r, "decode-0", drain_timeout=30))
            n = load.ok
            load.wait_for(n + 20)
        assert removed.outcome == "done", removed.detail
        assert load.failed == [], load.failed[:5]
        again = Run.open(run.id)
        assert again.state.procs["decode-1"].node == "mia1-p01-g04" and again.state.procs["decode-0"].removed
        assert again.state.status == "serving", again.state.diagnosis
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert run_pids(lab, run.id) == {} and open_ports(run) == []
