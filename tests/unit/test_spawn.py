"""Starting a process never holds the event loop: Popen returns only once the child has exec'd, and at
128 nodes on 2 cores each exec waited for a core while the console, which launches, drew nothing for
20-30 s (bench/scale_console.py's "launching" keys). core.launch.base.spawn runs Popen in a thread (ssh,
Slurm); the local launcher runs one starter (core/launch/starter.py) for a launch, from a thread."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

from atomdeck.core.design.commands import ProcessSpec
from atomdeck.core.launch import base
from atomdeck.core.launch.base import ProcHandle
from atomdeck.core.launch.local import LocalLauncher
from atomdeck.core.launch.procfs import alive, parent_of, proc_stat

RUN = "spawn-test-1"


def spec(name: str, argv: list[str]) -> ProcessSpec:
    return ProcessSpec(name=name, role="worker", node="local", host="127.0.0.1", argv=argv, env={}, runtime_env={},
                       launch_argv=argv, inner=argv, ports=[], log="")


class GatedPopen:
    """The real Popen, which first waits until a coroutine on the event loop opened the gate: if Popen ran
    on the loop, that coroutine could not run and the gate would stay shut (the wait gives up after 10 s,
    and the test sees it did)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.opened_in_time: list[bool] = []
        self.real = subprocess.Popen

    def __call__(self, *args, **kwargs):
        self.opened_in_time.append(self.gate.wait(10))
        return self.real(*args, **kwargs)


def stop_all(launcher: LocalLauncher, handles) -> list:
    return asyncio.run(launcher.stop(list(handles), 2.0))


def test_the_local_launcher_starts_a_process_while_the_loop_keeps_running(tmp_path, monkeypatch):
    gated = GatedPopen()
    monkeypatch.setattr(subprocess, "Popen", gated)
    launcher = LocalLauncher(RUN, str(tmp_path))

    async def launch():
        start = asyncio.create_task(launcher.start(spec("worker-0", ["sleep", "30"])))
        await asyncio.sleep(0)  # the start is under way: this coroutine runs only if the loop is free
        gated.gate.set()
        return await start

    handle = asyncio.run(launch())
    try:
        assert gated.opened_in_time == [True]
        assert handle.pid and alive(handle.pid)
        assert launcher._started["worker-0"] is handle
    finally:
        assert all(r.ok for r in stop_all(launcher, [handle]))


def test_a_start_cancelled_while_the_starter_forks_still_records_the_process(tmp_path, monkeypatch):
    """The launcher keeps the process that started after all (teardown must find it), and the cancellation
    reaches the caller."""
    gated = GatedPopen()
    monkeypatch.setattr(subprocess, "Popen", gated)
    launcher = LocalLauncher(RUN, str(tmp_path))
    outcome: list[str] = []

    async def launch():
        start = asyncio.create_task(launcher.start(spec("worker-1", ["sleep", "30"])))
        await asyncio.sleep(0)
        start.cancel()
        await asyncio.sleep(0)
        gated.gate.set()
        try:
            await start
            outcome.append("finished")
        except asyncio.CancelledError:
            outcome.append("cancelled")

    asyncio.run(launch())
    handle = launcher._started["worker-1"]
    try:
        assert outcome == ["cancelled"]
        assert handle.pid and alive(handle.pid)
    finally:
        assert all(r.ok for r in stop_all(launcher, [handle]))


class CountedPopen:
    def __init__(self) -> None:
        self.argvs: list[list[str]] = []
        self.real = subprocess.Popen

    def __call__(self, argv, *args, **kwargs):
        self.argvs.append(list(argv))
        return self.real(argv, *args, **kwargs)


def test_one_launch_forks_the_console_once_and_its_processes_share_one_session(tmp_path, monkeypatch):
    """The kernel's autogroups give every session the console's share of the CPU: 129 local processes with a
    session each left the console ~1/130 of the cores while they booted, and 129 Popen calls held its GIL
    through each fork. One starter, in a session of its own, starts them all; each keeps a process group
    of its own (what teardown signals), and the starter is reaped once they are stopped."""
    counted = CountedPopen()
    monkeypatch.setattr(subprocess, "Popen", counted)
    launcher = LocalLauncher(RUN, str(tmp_path))
    names = [f"worker-{i}" for i in range(5)]
    handles = asyncio.run(launcher.start_many([spec(n, ["sleep", "30"]) for n in names]))
    try:
        assert len(counted.argvs) == 1 and counted.argvs[0][-1].endswith("starter.py")
        assert all(isinstance(h, ProcHandle) for h in handles)
        pids = [h.pid for h in handles]
        sessions = {os.getsid(p) for p in pids}
        (starter,) = launcher._starters
        assert sessions == {starter} and starter != os.getsid(0)
        assert [os.getpgid(p) for p in pids] == pids
        assert {parent_of(p) for p in pids} == {starter}
        for h in handles:
            assert f"ATOMDECK_RUN={RUN}:{h.name}".encode() in Path(f"/proc/{h.pid}/environ").read_bytes()
    finally:
        reports = stop_all(launcher, handles)
    assert all(r.ok for r in reports), reports
    assert launcher._starters == {} and proc_stat(starter) is None


def test_a_starter_whose_processes_end_on_their_own_is_reaped_without_a_stop(tmp_path):
    """Nobody stops a run whose processes all exit: the starter exits with the last of them and must not stay
    this console's zombie (a console kept open for days would collect one per launch)."""
    launcher = LocalLauncher(RUN, str(tmp_path))
    handles = asyncio.run(launcher.start_many([spec(f"worker-{i}", ["true"]) for i in range(3)]))
    (starter,) = launcher._starters
    for _ in range(500):  # up to 10 s on a loaded machine
        if proc_stat(starter) is None:
            break
        threading.Event().wait(0.02)
    assert proc_stat(starter) is None, f"the starter {starter} is still {proc_stat(starter)}"
    assert launcher._starters[starter].returncode == 0
    assert [asyncio.run(launcher.poll(h)).exit_code for h in handles] == [0, 0, 0]


def test_a_process_that_cannot_start_is_an_error_and_the_others_start(tmp_path):
    (tmp_path / "logs" / "worker-b.log").mkdir(parents=True)  # its log cannot be opened for writing
    launcher = LocalLauncher(RUN, str(tmp_path))
    said: list[str] = []
    launcher.on_progress = said.append
    out = asyncio.run(launcher.start_many([spec(n, ["sleep", "30"]) for n in ("worker-a", "worker-b", "worker-c")]))
    try:
        assert isinstance(out[1], OSError) and "Is a directory" in str(out[1]) and "worker-b.log" in str(out[1])
        assert isinstance(out[0], ProcHandle) and isinstance(out[2], ProcHandle)
        assert said[-1] == "2 of 3 processes started, 1 could not start"
    finally:
        stop_all(launcher, [h for h in out if isinstance(h, ProcHandle)])


def test_a_supervisor_killed_by_a_signal_says_so_to_any_later_session(tmp_path):
    """Its process group killed (supervisor and engine), nothing wrote the exit-code file; the starter writes
    128+N there before it reaps it, so a launcher that did not start it (another console, `atomdeck status`)
    still learns how. (A supervisor killed alone, its engine living on: tests/unit/test_orphaned_engine.py.)"""
    launcher = LocalLauncher(RUN, str(tmp_path))
    (h,) = asyncio.run(launcher.start_many([spec("worker-k", ["sleep", "30"])]))
    try:
        os.killpg(h.pid, signal.SIGKILL)
        first = asyncio.run(launcher.wait(h))
        later = asyncio.run(LocalLauncher(RUN, str(tmp_path)).poll(h))
    finally:
        with contextlib.suppress(ProcessLookupError):  # its `sleep` may live on in the group
            os.killpg(h.pid, signal.SIGKILL)
        stop_all(launcher, [h])
    assert (first.alive, first.exit_code) == (False, 137)
    assert (later.alive, later.exit_code, later.detail) == (False, 137, "killed by SIGKILL (exit 137)")


def test_a_command_that_cannot_start_raises_and_leaves_no_child(tmp_path):
    kept: list = []

    async def go():
        await base.spawn([str(tmp_path / "no-such-program")], kept.append)

    try:
        asyncio.run(go())
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("a missing program must raise")
    assert kept == []
