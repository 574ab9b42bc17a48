"""Issue 44.2: a supervisor killed while its engine lives on. The engine's own PID (which the supervisor
records next to the exit-code file) decides whether the process lives, in this session and in any later
one; nothing writes an exit code that was never the engine's; once the engine ends too, that its code was
not recorded is said; and teardown still removes the engine (it stays in the supervisor's process group)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from pathlib import Path

from atomdeck.core.launch import base
from atomdeck.core.launch.local import LocalLauncher, read_child
from atomdeck.core.launch.procfs import alive, proc_stat

from .test_spawn import spec

RUN = "orphan-test-1"


def _wait_reaped(pid: int) -> None:
    """Until the starter reaped the killed supervisor (so it has decided not to write an exit code)."""
    for _ in range(500):
        if proc_stat(pid) is None:
            return
        subprocess.run(["sleep", "0.02"], check=False)
    raise AssertionError(f"{pid} still there: {proc_stat(pid)}")


def test_the_supervisor_records_its_childs_pid_next_to_the_exit_code_file(tmp_path):
    ef = tmp_path / "p.exit"
    r = subprocess.run(["sh", "-c", base.SUPERVISOR, "atomdeck:r:p", str(ef), "sh", "-c", "echo $$ > pid; exit 3"],
                       cwd=tmp_path, timeout=10)
    assert r.returncode == 3 and ef.read_text() == "3\n"
    assert base.child_path(str(ef)) == str(tmp_path / "p.child")
    assert (tmp_path / "p.child").read_text().strip() == (tmp_path / "pid").read_text().strip()


def test_a_killed_supervisor_whose_engine_lives_is_alive_by_the_engines_pid_then_its_end_is_said(tmp_path):
    launcher = LocalLauncher(RUN, str(tmp_path))
    (h,) = asyncio.run(launcher.start_many([spec("decode-0", ["sleep", "60"])]))
    engine = None
    try:
        for _ in range(200):  # the supervisor writes the file just after it started the engine
            if (engine := read_child(h.exit_path)) is not None:
                break
            subprocess.run(["sleep", "0.02"], check=False)
        assert engine is not None and engine != h.pid and alive(engine)
        os.kill(h.pid, signal.SIGKILL)
        first = asyncio.run(launcher.wait(h))
        _wait_reaped(h.pid)
        later = asyncio.run(LocalLauncher(RUN, str(tmp_path)).poll(h))  # another session (`atomdeck status`)
        assert (first.alive, first.engine_pid, first.exit_code) == (True, engine, None)
        assert first.orphaned and later.orphaned and later.engine_pid == engine
        assert f"the engine (pid {engine}) still runs" in first.detail and "will not be recorded" in first.detail
        assert not Path(h.exit_path).exists()  # 137 was the supervisor's, never the engine's
        os.kill(engine, signal.SIGTERM)
        ended = asyncio.run(launcher.wait(h))
        assert (ended.alive, ended.exit_code) == (False, None)
        assert ended.detail == f"the engine (pid {engine}) ended after its supervisor was gone: its exit code " \
                               "was not recorded"
    finally:
        if engine:
            with contextlib.suppress(ProcessLookupError):
                os.kill(engine, signal.SIGKILL)
        asyncio.run(launcher.stop([h], 2.0))


def test_teardown_removes_an_engine_whose_supervisor_was_killed(tmp_path):
    launcher = LocalLauncher(RUN, str(tmp_path))
    (h,) = asyncio.run(launcher.start_many([spec("decode-0", ["sleep", "60"])]))
    for _ in range(200):
        if read_child(h.exit_path) is not None:
            break
        subprocess.run(["sleep", "0.02"], check=False)
    engine = read_child(h.exit_path)
    assert engine is not None
    os.kill(h.pid, signal.SIGKILL)
    _wait_reaped(h.pid)
    try:
        (report,) = asyncio.run(LocalLauncher(RUN, str(tmp_path)).stop([h], 2.0))
        assert report.ok, report.detail
        assert not alive(engine), f"the engine {engine} outlived the teardown: {report.detail}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(engine, signal.SIGKILL)


def _supervised(tmp_path: Path, run: str, name: str) -> tuple[subprocess.Popen, int]:
    """A supervisor (its own session, as the ssh launcher starts it) around `sleep 60`; (it, the sleep's PID)."""
    ef = tmp_path / f"{name}.exit"
    sup = subprocess.Popen(["setsid", "/bin/sh", "-c", base.SUPERVISOR, base.marker(run, name), str(ef), "sleep", "60"],
                           env={**os.environ, "ATOMDECK_RUN": f"{run}:{name}"})
    for _ in range(250):
        if (engine := read_child(str(ef))) is not None:
            return sup, engine
        subprocess.run(["sleep", "0.02"], check=False)
    raise AssertionError("the supervisor recorded no child")


def test_the_ssh_scripts_tell_an_engine_that_outlived_its_supervisor_and_then_its_end(tmp_path):
    """poll.sh and wait.sh (run on the node by the ssh launcher, and poll.sh by Slurm's through a step)."""
    from atomdeck.core.launch import ssh

    run = "orphan-ssh-1"
    sup, engine = _supervised(tmp_path, run, "decode-0")
    ef = str(tmp_path / "decode-0.exit")
    waiter = None
    try:
        sup.kill()
        sup.wait(timeout=10)  # reaped here: not a zombie
        out = subprocess.run(["sh", "-c", ssh.POLL_SCRIPT, "poll", str(sup.pid), ef, f"{run}:decode-0"],
                             capture_output=True, text=True, timeout=10).stdout
        assert out == f"orphan {engine}\n"
        other = subprocess.run(["sh", "-c", ssh.POLL_SCRIPT, "poll", str(sup.pid), ef, f"{run}x:decode-0"],
                               capture_output=True, text=True, timeout=10).stdout
        assert other == f"exit= engine={engine}\n"  # a PID that is not the run's is not its engine
        waiter = subprocess.Popen(["sh", "-c", ssh.WAIT_SCRIPT, "wait", str(tmp_path), run, f"{sup.pid}:decode-0"],
                                  stdout=subprocess.PIPE, text=True)
        assert waiter.stdout is not None
        assert waiter.stdout.readline() == f"orphan {sup.pid} {engine}\n"
        os.kill(engine, signal.SIGTERM)
        assert waiter.stdout.readline() == f"ended {sup.pid} \n"
        assert waiter.wait(timeout=10) == 0
        told = subprocess.run(["sh", "-c", ssh.WAIT_SCRIPT, "wait", str(tmp_path), run, f"{sup.pid}:decode-0:o"],
                              capture_output=True, text=True, timeout=10).stdout
        assert told == f"ended {sup.pid} \n"
        gone = subprocess.run(["sh", "-c", ssh.POLL_SCRIPT, "poll", str(sup.pid), ef, f"{run}:decode-0"],
                              capture_output=True, text=True, timeout=10).stdout
        assert gone == f"exit= engine={engine}\n"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(engine, signal.SIGKILL)
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
            waiter.wait()
