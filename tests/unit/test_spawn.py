"""Starting a process never holds the event loop: Popen returns only once the child has exec'd, and at
128 nodes on 2 cores each exec waited for a core while the console, which launches, drew nothing for
20-30 s (bench/scale_console.py's "launching" keys). core.launch.base.spawn runs Popen in a thread."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading

from atomdeck.core.design.commands import ProcessSpec
from atomdeck.core.launch import base
from atomdeck.core.launch.local import LocalLauncher, alive

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
        assert launcher._children["worker-0"].pid == handle.pid
    finally:
        os.killpg(handle.pid, 9)
        launcher._children["worker-0"].wait(5)


def test_a_start_cancelled_while_the_child_forks_still_records_the_child(tmp_path, monkeypatch):
    """The launcher keeps the child that started after all (teardown must find it), and the cancellation
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
    child = launcher._children["worker-1"]
    try:
        assert outcome == ["cancelled"]
        assert alive(child.pid)
    finally:
        os.killpg(child.pid, 9)
        child.wait(5)


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
