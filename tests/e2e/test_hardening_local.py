"""Hardening on the local launcher: faults survived, nothing leaked, nothing lost."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.run.run import Run
from atomdeck.core.run.rundir import RunDir

from tests.leftovers import gone

from .conftest import workspace

pytestmark = pytest.mark.slow


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=120, **kw)


def test_worker_crash_while_serving_is_reported_and_its_log_is_kept(runs):
    ws = workspace(prefill__env={"ATOMSIM_CRASH_AFTER_SERVED": "1.5"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=30)
        assert s.status == "serving", s.diagnosis
        s = await run.watch(until=lambda s: s.status == "failed", timeout=10)
        return run, s

    run, state = asyncio.run(go())
    p = state.procs["prefill-0"]
    assert p.alive is False and p.exit_code == 1 and "serving" in p.stages
    assert state.diagnosis.startswith("prefill-0 on demo-n01 exited 1")
    asyncio.run(Run.open(run.id).teardown(grace=2))
    log = (run.rd.path / "logs" / "prefill-0.log").read_text()
    assert "died unexpectedly" in log and "Traceback" in log  # every line kept after down
    assert gone(run) == []


def test_port_already_taken_refuses_the_launch_and_names_it(monkeypatch):
    """... found in the nodes' table of listening sockets, and confirmed by a connect to that port only (at 128
    local nodes a connect to each of the 642 ports held the console's loop ~0.2 s)."""
    from atomdeck.core.run import ports

    probed: list[tuple[str, int]] = []
    real_probe = ports.tcp_probe

    async def probe(host, port, *args, **kwargs):
        probed.append((host, port))
        return await real_probe(host, port, *args, **kwargs)

    monkeypatch.setattr(ports, "tcp_probe", probe)
    ws = workspace()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.12", 8020))
    holder.listen()
    try:
        with pytest.raises(AtomdeckError) as e:
            asyncio.run(Run.launch(ws, ws.assess()))
        assert "demo-n02 127.0.0.12:8020 (wanted by decode-0)" in str(e.value)
        assert "nothing was launched" in str(e.value)
        assert RunDir.all() == []
        assert probed == [("127.0.0.12", 8020)]
    finally:
        holder.close()


def test_console_killed_during_teardown_then_down_again_is_clean():
    up = _cli("up", "demo-2p1d", "--wait")
    assert up.returncode == 0, up.stderr
    run_id = up.stdout.strip()
    p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "down", run_id, "--grace", "5"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    again = _cli("down", run_id)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "verified clean" in again.stdout
    assert gone(Run.open(run_id)) == []


def test_two_teardowns_at_once_cannot_both_run(runs):
    up = _cli("up", "demo-1p1d", "--wait")
    run_id = up.stdout.strip()
    try:
        with RunDir.find(run_id).lock():
            second = _cli("down", run_id)
        assert second.returncode == 2
        assert "already tearing this run down" in second.stderr
    finally:
        assert _cli("down", run_id).returncode == 0


def test_a_reused_pid_is_never_signalled():
    """After a reboot the recorded PID may belong to someone else: teardown must leave it alone."""
    up = _cli("up", "demo-1p1d", "--wait")
    run_id = up.stdout.strip()
    run = Run.open(run_id)
    assert _cli("down", run_id).returncode == 0
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        rd = RunDir.find(run_id)
        h = json.loads((rd.path / "procs" / "router.json").read_text())
        h["pid"] = stranger.pid  # the PID now belongs to an unrelated process group
        (rd.path / "procs" / "router.json").write_text(json.dumps(h))
        down = _cli("down", run_id, "--json")
        report = json.loads(down.stdout)
        router = next(p for p in report["processes"] if p["name"] == "router")
        assert "someone else's processes; left alone" in router["detail"]
        assert stranger.poll() is None, "atomdeck killed a process that was not its own"
    finally:
        stranger.kill()
        stranger.wait()
    assert gone(run) == []


def test_secrets_never_reach_the_run_directory_or_shown_lines(runs):
    secret = "hf_" + "Zq8" * 12
    ws = workspace(decode__env={"HF_TOKEN": secret, "ATOMSIM_FLOOD": "0"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        # a line with the secret, as a careless program would print it
        with open(run.handles["decode-0"].log_path, "a") as f:
            f.write(f"debug: environment HF_TOKEN={secret}\n")
        return run, await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=30)

    run, state = asyncio.run(go())
    assert state.status == "serving"
    for path in run.rd.path.rglob("*"):
        if path.is_file() and path.parent.name != "logs":  # logs are the program's own output, kept as is
            assert secret not in path.read_text(errors="replace"), path
            assert oct(path.stat().st_mode & 0o777) == "0o600", path
    assert all(secret not in line for line in state.procs["decode-0"].last_lines)
    shown = _cli("logs", run.id, "--process", "decode-0").stdout
    assert "HF_TOKEN=***" in shown and secret not in shown
    assert 'HF_TOKEN="${HF_TOKEN}"' in (run.rd.path / "commands.sh").read_text()


def test_a_run_nobody_watches_is_listed_as_starting_not_launching():
    up = _cli("up", "demo-1p1d")
    assert up.returncode == 0, up.stderr
    run_id = up.stdout.strip().splitlines()[0]
    try:
        (meta,) = [m for m in Run.list() if m["id"] == run_id]
        assert meta["status"] == "starting"
        listed = json.loads(_cli("runs", "--json").stdout)
        assert any(r["id"] == run_id and r["status"] == "starting" for r in listed["runs"]), listed
    finally:
        down = _cli("down", run_id)
    assert down.returncode == 0, down.stdout + down.stderr
