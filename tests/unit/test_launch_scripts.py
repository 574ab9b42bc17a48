"""The launchers' shell scripts are package data (core/launch/scripts/*.sh), shellcheck-clean, loaded
with importlib.resources, and do what the launchers rely on when run by a real `sh`."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tomllib
import uuid

import pytest
from atomdeck.core.launch import base, slurm, slurm_node, slurm_pyxis, ssh
from atomdeck.core.launch.base import script
from atomdeck.core.run import forensics, inuse

from tests.conftest import ROOT

SCRIPTS = sorted((ROOT / "core" / "launch" / "scripts").glob("*.sh"))


def test_the_scripts_are_package_data_and_each_is_used():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "scripts/*.sh" in data["atomdeck.core.launch"]
    assert {p.stem for p in SCRIPTS} == {"supervisor", "wait", "stop", "sweep", "poll", "slurm-sweep", "already",
                                         "slurm-node", "slurm-stop", "slurm-start", "slurm-release", "marked", "snapshot",
                                         "pyxis-clean"}
    loaded = {base.SUPERVISOR, ssh.WAIT_SCRIPT, ssh.STOP_SCRIPT, ssh.SWEEP_SCRIPT, ssh.POLL_SCRIPT, slurm.SWEEP_SCRIPT,
              ssh.ALREADY_SCRIPT, slurm_node.NODE_SCRIPT, slurm_node.STOP_SCRIPT, slurm_node.START_SCRIPT,
              slurm.RELEASE_SCRIPT, inuse.MARKED_SCRIPT, forensics.SNAPSHOT_SCRIPT, slurm_pyxis.PYXIS_CLEAN_SCRIPT}
    assert loaded == {script(p.stem) for p in SCRIPTS}


def test_the_header_comments_stay_out_of_the_command_line():
    for p in SCRIPTS:
        text = script(p.stem)
        assert p.read_text().startswith("#!/bin/sh\n#") and not text.startswith("#") and text.strip(), p


def test_no_shell_script_text_is_left_in_the_launchers_python():
    for p in sorted((ROOT / "core" / "launch").glob("*.py")):
        assert not re.search(r"r?'''|/proc/\[0-9\]", p.read_text()), f"{p.name} still holds a shell script"


def test_shellcheck_is_clean():
    sc = shutil.which("shellcheck")
    if sc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is not installed (tests/run installs it as root) but CI must check the scripts")
        pytest.skip("shellcheck is not installed (Debian package shellcheck; tests/run installs it)")
    p = subprocess.run([sc, "--shell=sh", "--format=gcc", *map(str, SCRIPTS)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_supervisor_writes_the_exit_code_and_poll_reads_it(tmp_path):
    ef = tmp_path / "p.exit"
    r = subprocess.run(["sh", "-c", base.SUPERVISOR, "atomdeck:r:p", str(ef), "sh", "-c", "exit 7"], timeout=10)
    assert r.returncode == 7 and ef.read_text() == "7\n"
    out = subprocess.run(["sh", "-c", ssh.POLL_SCRIPT, "poll", "999999999", str(ef)], capture_output=True,
                         text=True, timeout=10).stdout
    assert out == "exit=7\n"
    out = subprocess.run(["sh", "-c", ssh.POLL_SCRIPT, "poll", str(os.getpid()), str(ef)], capture_output=True,
                         text=True, timeout=10).stdout
    assert out == "alive\n"


@pytest.mark.parametrize("which", ["ssh", "slurm"])
def test_the_sweeps_kill_only_the_runs_own_processes(which):
    run = f"t{uuid.uuid4().hex[:10]}"
    ours = subprocess.Popen(["sleep", "60"], env={**os.environ, "ATOMDECK_RUN": f"{run}:decode-0"})
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, "ATOMDECK_RUN": f"{run}x:decode-0"})
    try:
        text = ssh.SWEEP_SCRIPT if which == "ssh" else slurm.SWEEP_SCRIPT
        out = subprocess.run(["sh", "-c", text, "sweep", run], capture_output=True, text=True, timeout=30,
                             env={**os.environ, "ATOMDECK_RUN": ""}).stdout
        assert ours.wait(timeout=10) == -signal.SIGKILL
        assert f"killed {ours.pid}" in out and str(other.pid) not in out
        assert other.poll() is None
    finally:
        for p in (ours, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_start_run_twice_reports_the_first_process_and_starts_no_second(tmp_path):
    """The ssh launcher's start line, re-run as RemoteShell does after a dropped connection (issue 17.4)."""
    run = f"t{uuid.uuid4().hex[:10]}"
    line = ssh.detached_command(run, "decode-0", str(tmp_path), str(tmp_path / "d.log"), str(tmp_path / "d.exit"),
                                str(tmp_path / "d.pid"), ["sleep", "60"])
    first = second = None
    try:
        first = int(subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30).stdout)
        second = int(subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30).stdout)
        assert second == first
        ours = [f for f in os.listdir("/proc") if f.isdigit() and _env_has(int(f), f"ATOMDECK_RUN={run}:decode-0")]
        assert len({os.getpgid(int(p)) for p in ours}) == 1  # one supervisor group, not two
    finally:
        for pid in {first, second} - {None}:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _env_has(pid: int, entry: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry.encode() in f.read().split(b"\0")
    except OSError:
        return False


def test_the_slurm_node_script_starts_each_process_under_its_own_supervisor_and_reports_each_end(tmp_path):
    """What one `srun` step per node runs (issue 19): every process in its own process group with its own log and
    exit file; "started"/"ended" lines for the launcher; the stop script stops one group and leaves the other."""
    run = f"t{uuid.uuid4().hex[:10]}"
    listing = tmp_path / "node.list"
    lines = [["start", n, base.marker(run, n), str(tmp_path / f"{n}.log"), str(tmp_path / f"{n}.exit"), *argv]
             for n, argv in (("a", ["sh", "-c", "echo hi from a; sleep 60"]), ("b", ["sh", "-c", "echo b; exit 3"]))]
    listing.write_text("".join(shlex.join(line) + "\n" for line in lines))
    agent = subprocess.Popen(["sh", "-c", slurm_node.NODE_SCRIPT, "node", run, base.SUPERVISOR, str(listing)],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "ATOMDECK_RUN": f"{run}:@n"})
    pids: dict[str, int] = {}
    try:
        out = ""
        while "ended b" not in out or len(pids) < 2:
            line = agent.stdout.readline()
            assert line, out
            out += line
            pids = slurm_node.started_pids(out)
        assert slurm_node.ended_codes(out) == {"b": 3} and (tmp_path / "b.exit").read_text() == "3\n"
        assert os.getpgid(pids["a"]) == pids["a"] and os.getsid(pids["a"]) == pids["a"]  # a group of its own
        assert _env_has(pids["a"], f"ATOMDECK_RUN={run}:a")
        stop = subprocess.run(["sh", "-c", slurm_node.STOP_SCRIPT, "stop", "5", f"{pids['a']}:{run}:a",
                               f"{pids['b']}:{run}:b"], capture_output=True, text=True, timeout=30)
        said = dict(line.split(" ", 1) for line in stop.stdout.splitlines())
        assert said[str(pids["a"])].startswith("gone after SIGTERM") and said[str(pids["b"])] == "gone already"
        rest = agent.stdout.read()
        assert agent.wait(timeout=10) == 0  # the node step ends once its processes have
        assert slurm_node.ended_codes(out + rest) == {"a": 143, "b": 3}
        assert (tmp_path / "a.exit").read_text() == "143\n" and (tmp_path / "a.log").read_text().startswith("hi from a\n")
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        if agent.poll() is None:
            agent.kill()
