"""Issue 44.2 on the real lab: what stands between atomdeck and an engine dies while the engine serves on.
Over Slurm the node step's `srun` client (killed on the console host: the step and its tasks live on), and
the supervisor on the node (Slurm and SSH). The engine's own liveness decides: the run keeps serving, and
`down` still removes the engine. Rows in docs/fault-matrix.md."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from atomdeck.core.launch.base import child_path
from atomdeck.core.remote.probes import http_post
from atomdeck.core.run.run import Run

from .runhelpers import cli, launch, run_pids, teardown, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


async def _serving(ws) -> Run:
    run = await launch(ws)
    s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
    assert s.status == "serving", s.diagnosis
    return run


async def _smoke(run: Run) -> bool:
    r = run.plan.router
    body = {"model": run.recipe.model.client_name, "prompt": "hello", "max_tokens": 4}
    return (await http_post(r.host, r.port, "/v1/completions", body, 30)).ok


def test_the_srun_client_of_a_node_step_killed_is_named_as_the_end_of_the_step_and_its_processes(lab):
    """Measured on the lab (Slurm 22.05): `kill -9` of a node step's srun client makes Slurm cancel the step
    (CANCELLED by 0, 0:9) within ~2.4 s, and its tasks with it, the supervisors' setsid'd processes included.
    So the engine does not live on: what atomdeck must do is not call it alive, and name why it ended."""
    ws = workspace("demo-1p1d", "lab")

    async def go():
        run = await _serving(ws)
        h = run.handles["decode-0"]
        srun = h.extra["srun_pid"]
        os.kill(srun, signal.SIGKILL)  # the node step's client, on this machine (the lab's Slurm commands run here)
        s = await run.watch(until=lambda s: s.procs["decode-0"].alive is False, timeout=30)
        await run.close()
        return run, srun, s

    run, srun, s = asyncio.run(go())
    try:
        d = s.procs["decode-0"]
        assert d.stage == "failed" and d.exit_code is None
        assert d.exit_detail.startswith("step ") and " CANCELLED" in d.exit_detail, d.exit_detail
        assert d.exit_detail.endswith(f"; the step's srun client (pid {srun}, on this machine) was killed by "
                                      "SIGKILL, and Slurm ends a step whose srun client is gone"), d.exit_detail
        assert s.status == "failed" and s.diagnosis.startswith(f"decode-0 on {d.node} step "), s.diagnosis
        st = cli("status", run.id, "--json")
        assert st.returncode == 0 and "Traceback" not in st.stderr, st.stderr
        data = json.loads(st.stdout)
        assert data["status"] == "failed" and "was killed by SIGKILL" in data["diagnosis"]
        assert data["processes"]["decode-0"]["alive"] is False
        assert data["processes"]["prefill-0"]["alive"] is True  # another node's step is not touched
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert not run_pids(lab, run.id)


@pytest.mark.parametrize("cluster", ["lab", "lab-ssh"])
def test_a_supervisor_killed_on_its_node_while_its_engine_serves_keeps_the_run_serving(lab, cluster):
    ws = workspace("demo-1p1d", cluster)

    async def go():
        run = await _serving(ws)
        h = run.handles["decode-0"]
        node = run.plan.endpoint("decode-0").node
        engine = int(lab.node_exec(node, ["cat", child_path(h.exit_path)], check=True).stdout)
        lab.node_exec(node, ["kill", "-9", str(h.pid)], check=True)
        s = await run.watch(until=lambda s: bool(s.procs["decode-0"].supervisor_gone), timeout=30)
        ok = await _smoke(run)
        await run.close()
        return run, node, engine, s, ok

    run, node, engine, s, ok = asyncio.run(go())
    try:
        said = f"decode-0's supervisor is gone; the engine (pid {engine}) is still serving; its exit code will " \
               "not be recorded"
        assert ok
        assert s.status == "serving" and s.procs["decode-0"].alive is True
        assert s.procs["decode-0"].supervisor_gone == said
        assert said in s.diagnosis
        st = cli("status", run.id, "--json")
        assert st.returncode == 0 and "Traceback" not in st.stderr, st.stderr
        data = json.loads(st.stdout)
        assert data["status"] == "serving" and said in data["diagnosis"]
        assert data["processes"]["decode-0"]["alive"] is True
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert not run_pids(lab, run.id), "the engine outlived `down`"
    # the engine's PID no longer names a process of the run (a busy machine may give the number to another one)
    assert lab.node_exec(node, ["sh", "-c", f"tr '\\0' '\\n' < /proc/{engine}/environ 2>/dev/null | "
                                             f"grep -q '^ATOMDECK_RUN={run.id}:'"]).returncode != 0
