"""The ssh launcher on the real lab: OpenSSH sshd in every node, reached through the login host."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from atomdeck.core.config.paths import find_cluster
from atomdeck.core.run.run import Run

from tests.leftovers import open_ports

from .runhelpers import SPEED, assert_said, cli, run_pids, serve, teardown, wait_for, workspace

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.mark.parametrize("recipe,shape", [("demo-1p1d", "1/1P 1/1D router serving"),
                                          ("demo-2p1d", "2/2P 1/1D router serving")])
def test_serving_over_ssh_then_down_leaves_nothing(lab, recipe, shape):
    said: list[str] = []
    run, state = serve(workspace(recipe, "lab-ssh"), said=said)
    try:
        assert state.status == "serving", state.diagnosis
        nodes = len(run.plan.selection.all())
        assert_said(said, run, "checking that the", f"connecting to {nodes} nodes over SSH",
                    f"connected to {nodes} of {nodes} nodes", f"pre-flight checks on {nodes} nodes",
                    "checking the engines' flags")
        assert state.readiness() == shape and state.checks["smoke"].ok
        assert set(run_pids(lab, run.id)) == set(run.plan.selection.all())
        meta = run.rd.meta()
        assert meta["remote_dir"].endswith(run.id)
        h = run.handles["prefill-0"]
        assert h.log_path.startswith(meta["remote_dir"]) and h.pid
        node_side = lab.node_exec(h.node, ["cat", h.extra["pid_path"]]).stdout.strip()
        assert node_side == str(h.pid)  # the pidfile on the node
    finally:
        report = teardown(run.id)
    assert report.clean, report.lines()
    assert run_pids(lab, run.id) == {} and open_ports(run) == []


def test_unknown_host_key_is_refused_with_how_to_trust_it(lab, tmp_path, monkeypatch):
    cluster = yaml.safe_load(find_cluster("lab-ssh").read_text())
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    cluster["login"]["known_hosts"] = cluster["ssh"]["known_hosts"] = str(empty)
    cluster["name"] = "lab-ssh-untrusted"
    (tmp_path / "recipes" / "clusters").mkdir(parents=True)
    (tmp_path / "recipes" / "clusters" / "lab-ssh-untrusted.yaml").write_text(yaml.safe_dump(cluster))
    monkeypatch.chdir(tmp_path)
    p = cli("up", "demo-1p1d", "--cluster", "lab-ssh-untrusted")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "not in" in p.stderr and str(empty) in p.stderr and "ssh-keyscan" in p.stderr
    assert empty.read_text() == ""  # nothing trusted behind the user's back


def test_connection_cut_mid_run_tail_resumes_with_every_line_once(lab):
    ws = workspace("demo-1p1d", "lab-ssh", decode__env={"ATOMSIM_FLOOD": "200"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert state.status == "serving", state.diagnosis
        node = run.plan.endpoint("decode-0").node
        watcher = asyncio.create_task(run.watch(timeout=12))
        await asyncio.sleep(2)
        killed = await asyncio.to_thread(lab.kill_sshd_sessions, node)
        assert killed, "no sshd session to kill"
        await asyncio.sleep(4)
        await asyncio.to_thread(lab.kill_sshd_sessions, node)
        state = await watcher
        await run.close()
        return run, state, node

    run, state, node = asyncio.run(go())
    try:
        # the connection state was reported, and the mirror of the node's log holds every line exactly once
        h = run.handles["decode-0"]
        mirror = (run.rd.path / "logs" / "decode-0.log").read_text().splitlines()
        remote = lab.node_exec(h.node, ["cat", h.log_path]).stdout.splitlines()
        assert len(mirror) > 1000
        assert mirror == remote[:len(mirror)], "lines lost or duplicated"
        assert len(set(x for x in mirror if "flood" in x.lower())) == len([x for x in mirror if "flood" in x.lower()])
        assert state.conns.get(node, ("ok",))[0] == "ok"
        events = [line for line in run.rd.event_lines() if '"kind":"conn"' in line and node in line]
        assert any('"value":"lost"' in e or '"value":"reconnecting"' in e for e in events), events
    finally:
        assert teardown(run.id).clean


def test_down_after_the_console_was_killed_leaves_nothing(lab):
    env = {**os.environ, "ATOMDECK_SIM_SPEED": SPEED}
    p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "up", "demo-2p1d", "--cluster", "lab-ssh",
                          "--wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    run_id = p.stdout.readline().strip()
    assert run_id, p.stderr.read()
    time.sleep(1.5)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    run = Run.open(run_id)
    assert wait_for(lambda: run_pids(lab, run_id), 10), "the processes should outlive the console"
    down = cli("down", run_id)
    assert down.returncode == 0, down.stdout + down.stderr
    assert run_pids(lab, run_id) == {} and open_ports(run) == []




def test_worker_killed_on_its_node_is_reported_over_ssh(lab):
    from .runhelpers import kill_worker_python

    ws = workspace("demo-2p1d", "lab-ssh")

    async def go():
        run = await Run.launch(ws, ws.assess())
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        assert state.status == "serving", state.diagnosis
        t_kill = time.time()
        kill_worker_python(lab, run.plan.endpoint("prefill-1").node, run.id, "prefill-1")
        state = await run.watch(until=lambda s: s.procs["prefill-1"].alive is False, timeout=10)
        await run.close()
        return run, state, t_kill

    run, state, t_kill = asyncio.run(go())
    try:
        p = state.procs["prefill-1"]
        assert p.stage == "failed" and p.exit_code == 137
        assert p.since >= t_kill  # this kill, not something before it (how soon: bench/README.md notes)
        assert state.procs["prefill-0"].alive is not False  # the other processes are still watched
    finally:
        assert teardown(run.id).clean


def test_a_node_unreachable_during_teardown_does_not_stop_the_others(lab):
    """One node's cable pulled: `down` still stops every other node, says which one it could not verify,
    records the run as dirty (never stuck at "stopping"), and a second `down` once it answers is clean."""
    run, state = serve(workspace("demo-2p1d", "lab-ssh"))
    decode = run.handles["decode-0"].node
    others = set(run.plan.selection.all()) - {decode}
    lab.link_down(decode)
    try:
        report = teardown(run.id)
        assert not report.clean
        (left,) = [r for r in report.processes if not r.ok]
        assert left.name == "decode-0" and "could not stop it on" in left.detail and "again" in left.detail
        assert not set(run_pids(lab, run.id)) & others  # every reachable node stopped
        assert Run.open(run.id).rd.meta()["status"] == "dirty"
    finally:
        lab.link_up(decode)
    report = teardown(run.id)
    assert report.clean, report.lines()
    assert run_pids(lab, run.id) == {} and open_ports(run) == []
