"""A teardown ends a process's whole tree, also a descendant that left its process group (issue 39: an ATOM rank
that called setsid is still its EngineCore's child, and signalling the group alone misses it). Real processes:
the group's leader dies on SIGTERM, its child has left the group with setsid and ignores SIGTERM; the stop must
not say "gone" while that child lives, and must end it (SIGKILL after the grace period). The local stop, the ssh
launcher's stop.sh and the Slurm launcher's slurm-stop.sh each."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import uuid

from atomdeck.core.launch import slurm_node, ssh
from atomdeck.core.launch.base import ProcHandle
from atomdeck.core.launch.local import stop_groups
from atomdeck.core.launch.procfs import alive, carries_marker, env_marker, scan_trees

# The leader (the supervisor's place) starts a child that leaves the group and session and ignores SIGTERM.
TREE = "setsid sh -c 'trap \"\" TERM; exec sleep 300' & wait"


def start(run: str, name: str) -> tuple[subprocess.Popen, int]:
    """The leader, and the PID of its child once that child has left the group."""
    leader = subprocess.Popen(["/bin/sh", "-c", TREE], start_new_session=True,
                              env={**os.environ, "ATOMDECK_RUN": env_marker(run, name).split("=", 1)[1]})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        tree = scan_trees([leader.pid])[leader.pid]
        odd = [p for p in tree if p != leader.pid and os.getpgid(p) != leader.pid and _is_sleep(p)]
        if odd:
            return leader, odd[0]
        time.sleep(0.02)
    raise AssertionError("the child never left the group")


def _is_sleep(pid: int) -> bool:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as f:
        return f.read().strip() == "sleep"
    return False


def _cleanup(leader: subprocess.Popen, odd: int) -> None:
    for kill in (lambda: os.killpg(leader.pid, signal.SIGKILL), lambda: os.kill(odd, signal.SIGKILL)):
        with contextlib.suppress(ProcessLookupError):
            kill()
    leader.wait(5)


def test_scan_trees_finds_the_descendant_that_left_the_group():
    run = f"t{uuid.uuid4().hex[:8]}"
    leader, odd = start(run, "decode-0")
    try:
        assert odd in scan_trees([leader.pid])[leader.pid]
        assert os.getsid(odd) == odd != leader.pid
    finally:
        _cleanup(leader, odd)


def test_the_local_stop_ends_a_descendant_outside_the_group():
    run = f"t{uuid.uuid4().hex[:8]}"
    leader, odd = start(run, "decode-0")
    try:
        h = ProcHandle("decode-0", "local", "127.0.0.1", "local", pid=leader.pid)
        (report,) = asyncio.run(stop_groups([(h, leader.pid)], 0.5,
                                            lambda h, members: carries_marker(members, run, h.name)))
        assert report.ok and report.detail.startswith("SIGKILL after 0.5s grace, gone"), report.detail
        assert f"1 outside its process group: {odd} sleep" in report.detail
        assert not alive(odd)
    finally:
        _cleanup(leader, odd)


def test_the_ssh_stop_script_ends_a_descendant_outside_the_group():
    run = f"t{uuid.uuid4().hex[:8]}"
    leader, odd = start(run, "decode-0")
    try:
        res = subprocess.run(["sh", "-c", ssh.STOP_SCRIPT, "stop", str(leader.pid), f"{run}:decode-0", "1"],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0 and res.stdout.startswith("gone after SIGKILL (grace 1s)"), res.stdout + res.stderr
        assert f"outside its process group: {odd} sleep" in res.stdout
        assert not alive(odd)
    finally:
        _cleanup(leader, odd)


def test_the_slurm_stop_script_ends_a_descendant_outside_the_group():
    run = f"t{uuid.uuid4().hex[:8]}"
    (a, odd_a), (b, odd_b) = start(run, "prefill-0"), start(run, "decode-0")
    try:
        res = subprocess.run(["sh", "-c", slurm_node.STOP_SCRIPT, "stop", "1", f"{a.pid}:{run}:prefill-0",
                              f"{b.pid}:{run}:decode-0"], capture_output=True, text=True, timeout=30)
        said = dict(line.split(" ", 1) for line in res.stdout.splitlines())
        assert res.returncode == 0, res.stdout + res.stderr
        for leader, odd in ((a, odd_a), (b, odd_b)):
            assert said[str(leader.pid)].startswith("gone after SIGKILL (grace 1s)"), said
            assert f"outside its process group: {odd} sleep" in said[str(leader.pid)]
            assert not alive(odd)
    finally:
        _cleanup(a, odd_a)
        _cleanup(b, odd_b)
