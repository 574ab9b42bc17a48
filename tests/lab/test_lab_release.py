"""Releasing a Slurm allocation through the login host (issue 19): one command there (scripts/slurm-release.sh)
instead of one SSH round trip per squeue, sweep, scancel, squeue and sacct, and still every check: a process of
the run left on a node is swept, the job is cancelled and its end read back from sacct."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from atomdeck.core.run.run import Run

from tests.leftovers import open_ports

from .runhelpers import node_pids, run_pids, squeue_job, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_release_through_the_login_host_is_one_command_that_sweeps_cancels_and_reads_the_job_back(lab):
    ws = workspace("demo-1p1d", "lab-login")

    async def up():
        run = await Run.launch(ws, ws.assess())
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=90)
        await run.close()
        return run, state

    run, state = asyncio.run(up())
    job = str(run.rd.meta()["job_id"])
    node = run.plan.selection.all()[0]
    # a process of the run that no handle knows (as a crashed console could leave one): only the sweep finds it
    lab.node_exec(node, f"ATOMDECK_RUN={run.id}:stray setsid sleep 300 </dev/null >/dev/null 2>&1 &", check=True)
    marked = f'tr "\\0" "\\n" < "$f" 2>/dev/null | grep -qx "ATOMDECK_RUN={run.id}:stray"'
    stray = node_pids(lab, node, marked)
    calls: list[tuple[str, list[str]]] = []  # (phase, argv) of every command through the login host

    async def down():
        again = Run.open(run.id)
        launcher = again.launcher
        phase = "stop"
        real_run, real_release = launcher.runner.run, launcher.release

        async def counted(argv, *a, **kw):
            calls.append((phase, list(argv)))
            return await real_run(argv, *a, **kw)

        async def release(*a, **kw):
            nonlocal phase
            phase = "release"
            try:
                return await real_release(*a, **kw)
            finally:
                phase = "verify"

        launcher.runner.run, launcher.release = counted, release
        try:
            return await again.teardown(grace=3)
        finally:
            await again.close()

    try:
        assert state.status == "serving", state.diagnosis
        assert len(stray) == 1, stray
    finally:
        report = asyncio.run(down())
    assert report.clean, report.lines()
    released = [c for phase, c in calls if phase == "release"]
    assert len(released) == 1 and released[0][:2] == ["sh", "-c"], released
    assert any(r.startswith("swept leftovers: ") and f"killed {stray[0]} " in r for r in report.released), report.released
    assert any(r.startswith(f"holding job {job} cancelled (CANCELLED") for r in report.released), report.released
    assert node_pids(lab, node, marked) == [] and run_pids(lab, run.id) == {}
    assert squeue_job(job) == "" and open_ports(run) == []
    acct = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], capture_output=True, text=True)
    assert acct.stdout.startswith("CANCELLED")
