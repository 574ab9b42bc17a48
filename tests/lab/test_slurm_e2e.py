"""The Slurm launcher on the real lab: allocation, steps, serving, faults, teardown."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from atomdeck.core.run.run import Run

from tests.leftovers import open_ports

from .runhelpers import (
    SPEED,
    assert_said,
    cli,
    kill_worker_python,
    run_pids,
    serve,
    squeue_job,
    squeue_steps,
    teardown,
    wait_for,
    workspace,
)

pytestmark = [pytest.mark.lab, pytest.mark.slow]
G = "mia1-p01-g0"


def test_nodes_from_slurm_show_g37_drained_and_never_auto_selected(lab):
    out = json.loads(cli("nodes", "--cluster", "lab", "--json").stdout)
    rows = {r["name"]: r for r in out["nodes"]}
    assert rows["mia1-p01-g37"]["usable"] is False
    assert "DRAIN" in rows["mia1-p01-g37"]["state"] and rows["mia1-p01-g37"]["reason"]
    assert [r["addr"] for r in out["nodes"] if r["name"] == G + "1"] == ["10.77.0.11"]
    plan = json.loads(cli("plan", "demo-2p1d", "--cluster", "lab", "--json").stdout)
    assert "mia1-p01-g37" not in {p["node"] for p in plan["processes"]}


def test_asking_for_g37_is_refused_with_its_reason(lab):
    p = cli("up", "demo-1p1d", "--cluster", "lab", "--nodes", f"mia1-p01-g37,{G}1")
    assert p.returncode == 1
    assert "mia1-p01-g37" in p.stderr and "persistently drained, not responding" in p.stderr
    assert "nothing launched" in p.stderr


@pytest.mark.parametrize("recipe,shape", [("demo-1p1d", "1/1P 1/1D router serving"),
                                          ("demo-2p1d", "2/2P 1/1D router serving")])
def test_serving_through_slurm_then_down_leaves_no_job_step_process_or_port(lab, recipe, shape):
    said: list[str] = []
    run, state = serve(workspace(recipe, "lab"), said=said)
    job = run.rd.meta()["job_id"]
    try:
        assert state.status == "serving", state.diagnosis
        nodes = len(run.plan.selection.all())
        assert_said(said, run, "checking that the", f"asking Slurm for {nodes} nodes (sbatch on",
                    f"pre-flight checks on {nodes} nodes (one srun step each, in job {job})")
        assert state.readiness() == shape and state.checks["smoke"].ok
        assert squeue_job(job) == "RUNNING"
        assert len(squeue_steps(job).splitlines()) >= len(run.processes)
        assert set(run_pids(lab, run.id)) == set(run.plan.selection.all())
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert squeue_job(job) == "" and squeue_steps(job) == ""
    assert run_pids(lab, run.id) == {}
    assert open_ports(run) == []
    acct = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], capture_output=True, text=True)
    assert acct.stdout.startswith("CANCELLED")


def test_worker_killed_on_its_node_is_reported_failed(lab):
    ws = workspace("demo-1p1d", "lab")

    async def go():
        run = await Run.launch(ws, ws.assess())
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert state.status == "serving", state.diagnosis
        t_kill = time.time()
        kill_worker_python(lab, run.plan.endpoint("decode-0").node, run.id, "decode-0")
        state = await run.watch(until=lambda s: s.procs["decode-0"].alive is False, timeout=10)
        await run.close()
        return run, state, t_kill

    run, state, t_kill = asyncio.run(go())
    try:
        d = state.procs["decode-0"]
        assert d.stage == "failed" and d.alive is False
        assert d.since >= t_kill  # this kill, not something before it (how soon: bench/README.md notes)
        assert d.exit_code == 137 and "SIGKILL" in d.exit_detail
        assert state.status == "failed" and "decode-0" in state.diagnosis
    finally:
        assert teardown(run.id).clean


def test_node_whose_slurmd_dies_mid_run_is_reported(lab):
    ws = workspace("demo-1p1d", "lab")
    node = None

    async def go():
        nonlocal node
        run = await Run.launch(ws, ws.assess())
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert state.status == "serving", state.diagnosis
        node = run.plan.endpoint("decode-0").node
        lab.kill_slurmd(node)
        state = await run.watch(until=lambda s: s.conns.get(node, ("ok",))[0] != "ok", timeout=40)
        await run.close()
        return run, state

    try:
        run, state = asyncio.run(go())
        st, detail, _ = state.conns[node]
        assert st == "unhealthy" and "not responding" in detail
        from atomdeck.core.run.diagnose import diagnose

        assert f"node {node} is" in diagnose(state).headline
    finally:
        if node:
            lab.start_slurmd(node)
            lab.wait_node_state(node, r"^(idle|mixed|allocated)$", timeout=60)
    assert teardown(run.id).clean


def test_console_killed_then_down_from_a_new_process(lab):
    env = {**os.environ, "ATOMDECK_SIM_SPEED": SPEED}
    p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "up", "demo-1p1d", "--cluster", "lab", "--wait"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    run_id = p.stdout.readline().strip()
    assert run_id, p.stderr.read()
    time.sleep(1.0)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    run = Run.open(run_id)
    job = run.rd.meta()["job_id"]
    # the steps survived the console
    assert wait_for(lambda: len(squeue_steps(job).splitlines()) >= 3, 10)
    down = cli("down", run_id)
    assert down.returncode == 0, down.stdout + down.stderr
    assert squeue_job(job) == "" and run_pids(lab, run_id) == {} and open_ports(run) == []


def test_nodes_shows_a_node_not_responding_once_slurm_notices(lab):
    node = f"{G}4"
    lab.kill_slurmd(node)
    try:
        def row():
            rows = {r["name"]: r for r in json.loads(cli("nodes", "--cluster", "lab", "--json").stdout)["nodes"]}
            return rows[node] if not rows[node]["usable"] else None

        r = wait_for(row, timeout=40, interval=1.0)
        assert r is not None, "g04 never showed as unusable"
        assert "NOT_RESPONDING" in r["state"] and "not responding" in r["why_not"]
        plan = json.loads(cli("plan", "demo-2p1d", "--cluster", "lab", "--json").stdout)
        assert node not in {p["node"] for p in plan["processes"]}  # never auto-selected
    finally:
        lab.start_slurmd(node)
        lab.wait_node_state(node, r"^(idle|mixed|allocated)$", timeout=60)


def test_slurm_driven_through_the_login_host_over_ssh(lab):
    """sbatch/srun/squeue/scancel run on mia1-login through the SSH runner; logs are tailed from there."""
    ws = workspace("demo-1p1d", "lab-login")

    def transferred_line(s):
        return any("Write-done received" in line for line in s.procs["decode-0"].last_lines)

    async def go():
        run = await Run.launch(ws, ws.assess())
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        if state.status == "serving":  # the tail over SSH may be a moment behind the process
            state = await run.watch(until=transferred_line, timeout=15)
        await run.close()
        return run, state

    run, state = asyncio.run(go())
    job = run.rd.meta()["job_id"]
    try:
        assert state.status == "serving", state.diagnosis
        assert run.rd.meta()["shared_dir"].startswith("/tmp/atomdeck-slurm-runs/")
        assert run.handles["decode-0"].log_path.startswith("/tmp/atomdeck-slurm-runs/")
        assert squeue_job(job) == "RUNNING"
        assert transferred_line(state), list(state.procs["decode-0"].last_lines)
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert squeue_job(job) == "" and run_pids(lab, run.id) == {} and open_ports(run) == []


def test_a_session_killed_while_its_allocation_waits_leaves_a_job_that_down_finds(lab):
    """The holding job's id is on disk from sbatch on: a console killed while the job is still PENDING
    (every node busy) does not leave an allocation nobody knows about."""
    blocker = subprocess.run(["sbatch", "--parsable", "-N4", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 300"],
                             capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    try:
        assert wait_for(lambda: squeue_job(blocker) == "RUNNING", 20)
        t0 = time.time()
        env = {**os.environ, "ATOMDECK_SIM_SPEED": SPEED}
        p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "up", "demo-1p1d", "--cluster", "lab"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            meta = wait_for(lambda: next((m for m in Run.list() if m.get("created", 0) >= t0 and m.get("job_id")),
                                         None), 30)
            assert meta, "the holding job's id never reached run.json"
            job = meta["job_id"]
            assert squeue_job(job) == "PENDING"
        finally:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        assert squeue_job(job) == "PENDING"  # the session is gone, its allocation request is not
        down = cli("down", meta["id"])
        assert down.returncode == 0, down.stdout + down.stderr
        assert "cancelled" in down.stdout
        assert squeue_job(job) == ""
    finally:
        subprocess.run(["scancel", blocker], check=False)
        wait_for(lambda: squeue_job(blocker) == "", 20)


def test_a_launch_waiting_for_its_allocation_says_so_with_slurms_reason(lab):
    """Every node busy: `up` says its holding job is PENDING and Slurm's reason while it waits (a launch
    that said nothing looked hung), and goes on by itself once the nodes are free."""
    blocker = subprocess.run(["sbatch", "--parsable", "-N4", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 300"],
                             capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    t0 = time.time()
    try:
        assert wait_for(lambda: squeue_job(blocker) == "RUNNING", 20)
        env = {**os.environ, "ATOMDECK_SIM_SPEED": SPEED}
        p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "up", "demo-1p1d", "--cluster", "lab"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert p.stderr is not None and p.stdout is not None
            said = []
            for line in p.stderr:
                said.append(line.rstrip("\n"))
                if re.search(r"launch +Slurm job \d+ is PENDING \(\w+\); waiting up to 120 s for it to start", line):
                    break
            else:
                raise AssertionError(f"`up` never said its job was pending: {said}")
            subprocess.run(["scancel", blocker], check=True)
            out, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        said += err.splitlines()
        assert p.returncode == 0, said
        assert any("launch     pre-flight checks on 2 nodes" in line for line in said), said
        assert any("launch     3 of 3 processes started" in line for line in said), said
    finally:
        subprocess.run(["scancel", blocker], check=False)
        wait_for(lambda: squeue_job(blocker) == "", 20)
        for m in Run.list():  # what this test launched, however far it got
            if m.get("created", 0) >= t0:
                down = cli("down", m["id"])
                assert down.returncode == 0, down.stdout + down.stderr
