"""A process's state and listening sockets "on its node" (a slow health check, a worker ready but not bound), on the
local launcher, whose nodes are this machine: read from /proc in the watcher's own process, one read for every
marker asked at once, with the answers of the command a remote node runs (procscan.py as `python3 -c`). Before,
each ask started an interpreter in a session (so a scheduling group) of its own: 50-100 at once while a 64P64D's
slow simulators missed their checks, and the console waited for a CPU."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

from atomdeck.core.launch.local import LocalLauncher
from atomdeck.core.remote import node_probes
from atomdeck.core.remote.node_probes import processes_on_node
from atomdeck.core.remote.shell import LocalRunner

SERVE = ("import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True)\n"
         "time.sleep(60)\n")


def marked(marker: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-c", SERVE], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "ATOMDECK_RUN": marker})
    assert p.stdout is not None
    return p, int(p.stdout.readline())


def wait_stopped(pid: int) -> None:
    for _ in range(250):
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T":
            return
        time.sleep(0.02)
    raise AssertionError(f"{pid} did not stop")


def test_read_here_answers_as_the_command_on_the_node(tmp_path):
    run = f"here{os.getpid()}"
    a, a_port = marked(f"{run}:a")
    b, b_port = marked(f"{run}:b")
    try:
        os.kill(b.pid, signal.SIGSTOP)
        wait_stopped(b.pid)

        async def node_run(argv: list[str], timeout: float):
            return await LocalRunner().run(argv, timeout=timeout)

        async def both():
            launcher = LocalLauncher(run, str(tmp_path))
            here = await asyncio.gather(*(launcher.node_processes("n1", f"{run}:{n}") for n in ("a", "b", "none")))
            there = await asyncio.gather(*(processes_on_node(node_run, f"{run}:{n}") for n in ("a", "b", "none")))
            return here, there

        here, there = asyncio.run(both())
        assert here == there
        (pa,), (pb,), none = here
        assert (pa.pid, pa.state, pa.listening) == (a.pid, "S", [f"127.0.0.1:{a_port}"])
        assert pa.comm == os.path.basename(sys.executable)[:15]  # (the name it was started by)
        assert (pb.pid, pb.state_words, pb.listening) == (b.pid, "T (stopped)", [f"127.0.0.1:{b_port}"])
        assert none == []
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_asks_made_together_are_one_read_of_proc_and_none_starts_a_process(tmp_path, monkeypatch):
    run = f"once{os.getpid()}"
    procs = [marked(f"{run}:w{i}")[0] for i in range(3)]
    reads: list[list[str]] = []
    real = node_probes.processes_here

    def counted(markers):
        reads.append(sorted(markers))
        return real(markers)

    monkeypatch.setattr(node_probes, "processes_here", counted)
    started = []
    real_exec = asyncio.create_subprocess_exec

    async def no_exec(*args, **kwargs):  # (what a command per ask would call)
        started.append(args)
        return await real_exec(*args, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", no_exec)
    try:
        async def asks():
            launcher = LocalLauncher(run, str(tmp_path))
            first = await asyncio.gather(*(launcher.node_processes(f"n{i}", f"{run}:w{i}") for i in range(3)))
            again = await launcher.node_processes("n0", f"{run}:w0")
            return first, again

        first, again = asyncio.run(asks())
        assert [[p.pid for p in got] for got in first] == [[p.pid] for p in procs]
        assert [p.pid for p in again] == [procs[0].pid]
        assert reads == [[f"{run}:w0", f"{run}:w1", f"{run}:w2"], [f"{run}:w0"]]
        assert started == []
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_an_unreadable_proc_is_an_error_each_caller_hears(tmp_path, monkeypatch):
    def broken(markers):
        raise PermissionError("/proc: permission denied")

    monkeypatch.setattr(node_probes, "processes_here", broken)

    async def ask():
        launcher = LocalLauncher("r", str(tmp_path))
        return await asyncio.gather(launcher.node_processes("n", "r:a"), launcher.node_processes("n", "r:b"),
                                    return_exceptions=True)

    errors = asyncio.run(ask())
    assert [(type(e), str(e)) for e in errors] == [(RuntimeError, "could not read /proc: /proc: permission denied")] * 2
