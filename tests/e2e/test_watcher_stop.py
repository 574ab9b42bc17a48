"""The console's watcher process ends, whole, when told to (issue 19): its stdin closed (the console quit or
died) or SIGTERM, while a real run of the simulator serves and floods its logs (every log follower busy,
the barrier's node loops and the listening-table reader running). It exits 0 and its log (watcher.log)
names no task left running after its cancellation, nor a watch that outlived its cancellation.

The races that made a watcher outlive its console (a cancellation lost in asyncio.wait_for on Python
3.11) are made to happen on purpose in tests/unit/test_cancel_races.py; this is the whole process."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from atomdeck.core.cli.watcher import GROUP_NICE
from atomdeck.core.run.run import Run
from atomdeck.core.run.schedgroup import group_nice_of
from atomdeck.tui.watch_client import WATCHER_NICE, WatchProcess

from .conftest import FLOOD, until, workspace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]



@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_the_watcher_exits_whole_while_a_flooding_run_serves(runs, how):
    ws = workspace("demo-1p1d", prefill__env=FLOOD, decode__env=FLOOD)

    async def go() -> tuple[int | None, str]:
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        await run.close()
        mine = Run.open(run.id)  # the console's session on the run
        watcher = WatchProcess(mine)
        await watcher.start()
        pump = asyncio.create_task(watcher.pump())
        try:
            await until(lambda: watcher.ready and mine.state.status == "serving", "serving, as the watcher saw it")
            await until(lambda: all(p.last_lines for p in mine.state.procs.values() if p.role != "router"),
                        "the workers' lines through the watcher")
            assert watcher.proc is not None
            # it yields to the console (WATCHER_NICE; the kernel's range ends at 19)
            nice = os.getpriority(os.PRIO_PROCESS, 0)
            assert os.getpriority(os.PRIO_PROCESS, watcher.proc.pid) == min(19, nice + WATCHER_NICE)
            # ... as a session of its own, whose scheduling group yields too (the kernel ranks a process's own
            # nice only inside its session: in the console's it took from the console's share)
            assert os.getsid(watcher.proc.pid) == watcher.proc.pid != os.getsid(0)
            if os.path.exists("/proc/self/autogroup"):  # (it sets it itself, as soon as the kernel takes it)
                want = ["nice", str(min(19, group_nice_of() + GROUP_NICE))]
                await until(lambda: open(f"/proc/{watcher.proc.pid}/autogroup").read().split()[-2:] == want,
                            f"the watcher's group at {want}", timeout=10)
            if how == "SIGTERM":
                watcher.proc.send_signal(signal.SIGTERM)
            else:
                watcher.proc.stdin.close()  # what the console's quit (or its death) does first
            code = await asyncio.wait_for(watcher.proc.wait(), 60)  # a bound against a hang, not a timing
            await pump
        finally:
            await mine.close()
        return code, watcher.stderr_path.read_text() if watcher.stderr_path.exists() else ""

    code, log = asyncio.run(go())
    assert code == 0, log
    assert "still running" not in log, log


CONSOLE = """
import asyncio, sys
from atomdeck.core.run.run import Run
from atomdeck.tui.watch_client import WatchProcess

async def main():
    run = Run.open(sys.argv[1])
    watcher = WatchProcess(run)
    await watcher.start()
    pump = asyncio.create_task(watcher.pump())
    while not watcher.ready:
        await asyncio.sleep(0.05)
    print(watcher.pid, flush=True)
    await pump

asyncio.run(main())
"""


def test_the_watcher_ends_when_its_console_is_killed(runs):
    """The watcher is a session of its own (its scheduling group apart from the console's), so no signal of the
    console's terminal reaches it: it ends on its own when the console is SIGKILLed, from its stdin closing."""
    import subprocess
    import sys
    import time

    ws = workspace("demo-1p1d")

    async def launch() -> str:
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        await run.close()
        return run.id

    run_id = asyncio.run(launch())
    console = subprocess.Popen([sys.executable, "-c", CONSOLE, run_id], stdout=subprocess.PIPE, text=True)
    try:
        assert console.stdout is not None
        line = console.stdout.readline()
        assert line.strip().isdigit(), f"the console printed {line!r}, exit {console.poll()}"
        watcher = int(line)
        assert os.getsid(watcher) == watcher != os.getsid(console.pid)
    finally:
        console.kill()
        console.wait()
    deadline = time.monotonic() + 30  # a bound against a hang, not a timing
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{watcher}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break  # (exited; its parent, killed, left it to init)
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(watcher, signal.SIGKILL)
        raise AssertionError(f"the watcher {watcher} outlived its killed console by 30 s")
