"""Co-located workers on the lab's 4 nodes through Slurm (issue 19, Scale): one `srun` step per node starts that
node's processes, yet each process keeps its own supervisor, process group, log and exit code; a killed one is
reported with its code while the others keep running; teardown leaves no job, step, process or port."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from atomdeck.core.launch.slurm import AGENT
from atomdeck.core.run.run import Run

from tests.leftovers import open_ports

from .runhelpers import kill_worker_python, node_pids, run_pids, squeue_job, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _read(path: str) -> str:
    """A file of the run's shared directory (the lab's hosts share this machine's file system)."""
    return Path(path).read_text() if Path(path).exists() else ""


@pytest.mark.parametrize("cluster", ["lab", "lab-login"])
def test_colocated_workers_each_keep_their_log_and_exit_code_and_a_killed_one_is_reported(lab, cluster):
    # 4P4D TP2, two workers per node: prefill on two nodes, decode on the other two, router with prefill-0
    ws = workspace("demo-1p1d", cluster, prefill__workers=4, prefill__per_node=2, prefill__tp=4,
                   decode__workers=4, decode__per_node=2, decode__tp=4)
    victim = "decode-1"

    async def go():
        a = ws.assess()
        assert a.ok, a.findings
        run = await Run.launch(ws, a)
        try:  # whatever happens, the run is returned so that it is torn down
            state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=120)
            serving = state.status == "serving"
            job = str(run.rd.meta()["job_id"])
            steps = await run.launcher.runner.run(["squeue", "-h", "-s", "-j", job, "-o", "%i|%j"], timeout=30)
            if serving:
                kill_worker_python(lab, run.plan.endpoint(victim).node, run.id, victim)
                state = await run.watch(until=lambda s: s.procs[victim].alive is False, timeout=60)
        finally:
            await run.close()
        return run, state, steps, serving

    run, state, steps, serving = asyncio.run(go())
    job = str(run.rd.meta()["job_id"])
    handles = run.handles
    nodes = sorted(run.plan.selection.all())
    try:
        assert serving, state.diagnosis
        assert len(nodes) == 4 and len(handles) == 9
        # one step per node holds that node's processes (the launching host keeps 4 srun clients, not 9)
        node_steps = {line.split("|")[1].removeprefix(AGENT).split(".")[0]: line.split("|")[0]
                      for line in steps.stdout.splitlines() if line.split("|")[1].startswith(AGENT)}
        assert sorted(node_steps) == nodes, steps.stdout
        assert {h.name: h.step for h in handles.values()} == {h.name: node_steps[h.node] for h in handles.values()}
        # ... yet every process has its own supervisor (its own process group), log and exit file
        assert len({h.log_path for h in handles.values()}) == len({h.exit_path for h in handles.values()}) == 9
        assert len({(h.node, h.pid) for h in handles.values()}) == 9
        for h in handles.values():
            assert _read(h.log_path).strip(), f"{h.name} logged nothing"
            if h.name != victim:
                group = node_pids(lab, h.node, f'[ "$(sed "s/.*) //" /proc/$p/stat | cut -d" " -f3)" = "{h.pid}" ]')
                assert h.pid in group, f"{h.name}: its supervisor {h.pid} does not lead its own group"
        # the killed one is reported with its code; the others still run
        d = state.procs[victim]
        assert d.exit_code == 137 and "SIGKILL" in d.exit_detail
        assert _read(handles[victim].exit_path).strip() == "137"
        assert [n for n, p in state.procs.items() if p.alive is False] == [victim]
        assert state.status == "failed" and victim in state.diagnosis
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    # every other process ended on the teardown's SIGTERM, its supervisor wrote its code; none had to be killed
    codes = {h.name: _read(h.exit_path).strip() for h in handles.values()}
    assert all(c.lstrip("-").isdigit() for c in codes.values()) and codes[victim] == "137", codes
    assert not [r.detail for r in report.processes if "KILL" in r.detail], report.lines()
    assert squeue_job(job) == "" and run_pids(lab, run.id) == {} and open_ports(run) == []
    assert subprocess.run(["squeue", "-h", "-s", "-j", job], capture_output=True, text=True).stdout.strip() == ""
