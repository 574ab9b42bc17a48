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
from atomdeck.core.run.run import Run
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
            if os.path.exists("/proc/self/autogroup"):
                assert watcher._niced is not None and await watcher._niced
                group = open(f"/proc/{watcher.proc.pid}/autogroup").read().split()
                assert group[-2:] == ["nice", str(WATCHER_NICE)], group
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
