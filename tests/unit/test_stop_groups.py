"""Local teardown (issue 19): stopping many process groups at once reads /proc once per tick for all of
them, not once per group, and still ends every group's processes, a child that ignores SIGTERM too
(SIGKILL after the grace period). Real processes; the /proc reader and the tick are counted, not timed."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import time

from atomdeck.core.launch.base import ProcHandle
from atomdeck.core.launch.local import LocalLauncher, stop_groups
from atomdeck.core.launch.procfs import carries_marker, env_marker, scan_groups

RUN = "r-stop-groups"
# the group leader dies on SIGTERM; its child ignores it (the disposition survives exec) and stays alone
STUBBORN = '(trap "" TERM; exec sleep 300) & wait'
PLAIN = "sleep 300 & wait"


def start(name: str, script: str) -> subprocess.Popen:
    return subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True,
                            env={**os.environ, "ATOMDECK_RUN": env_marker(RUN, name).split("=", 1)[1]})


def _wait_for_pairs(procs) -> None:
    """Until every group has its two processes (the leader and its child)."""
    deadline = time.monotonic() + 30
    while any(len(m) < 2 for m in scan_groups([p.pid for p in procs.values()]).values()):
        assert time.monotonic() < deadline, "the groups never had their two processes"
        time.sleep(0.02)


class Counted:
    """The /proc reader and the tick given to stop_groups (or a launcher), counting their calls."""

    def __init__(self) -> None:
        self.scans: list[set[int]] = []
        self.ticks = 0

    def scan(self, pgids):
        self.scans.append(set(pgids))
        return scan_groups(pgids)

    async def tick(self) -> None:
        self.ticks += 1
        await asyncio.sleep(0.05)


def test_stopping_many_groups_reads_proc_once_per_tick_and_ends_every_process():
    names = [f"decode-{i}" for i in range(5)] + ["stubborn"]
    procs = {n: start(n, STUBBORN if n == "stubborn" else PLAIN) for n in names}
    try:
        _wait_for_pairs(procs)
        counted = Counted()
        items = [(ProcHandle(n, "local", "127.0.0.1", "local", pid=p.pid), p.pid) for n, p in procs.items()]
        reports = asyncio.run(stop_groups(items, 1.0, lambda h, members: carries_marker(members, RUN, h.name),
                                          scan=counted.scan, tick=counted.tick))
        by_name = {r.name: r for r in reports}
        assert [r.name for r in reports] == names
        assert all(r.ok for r in reports), [r.detail for r in reports]
        assert by_name["stubborn"].detail == "SIGKILL after 1s grace, gone", by_name["stubborn"].detail
        for n in names[:-1]:
            assert by_name[n].detail.startswith("SIGTERM, gone in"), by_name[n].detail
        assert scan_groups([p.pid for p in procs.values()]) == {p.pid: [] for p in procs.values()}
        # one read of /proc before the signals, then one per tick, each for every group not yet gone
        scans, ticks = counted.scans, counted.ticks
        assert len(scans) == ticks + 1 and ticks >= 2
        assert scans[0] == {p.pid for p in procs.values()}
        assert all(later <= earlier for earlier, later in itertools.pairwise(scans))
        assert scans[-1] == {procs["stubborn"].pid}
        for p in procs.values():
            p.wait(5)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait(5)


def test_a_group_that_is_not_ours_is_left_alone_without_another_read_of_proc():
    other = subprocess.Popen(["/bin/sh", "-c", PLAIN], start_new_session=True)
    try:
        counted = Counted()
        h = ProcHandle("decode-0", "local", "127.0.0.1", "local", pid=other.pid)
        (rep,) = asyncio.run(stop_groups([(h, other.pid)], 1.0,
                                         lambda h, members: carries_marker(members, RUN, h.name),
                                         scan=counted.scan))
        assert rep.ok and "someone else's processes; left alone" in rep.detail
        assert other.poll() is None and counted.scans == [{other.pid}]
    finally:
        os.killpg(other.pid, 9)
        other.wait(5)


def test_a_teardown_stopping_each_process_on_its_own_still_reads_proc_once_per_tick(tmp_path):
    """Run.teardown calls the launcher's stop once per process, all at once: those calls join one batch."""
    names = ["prefill-0", "prefill-1", "decode-0", "router"]
    procs = {n: start(n, PLAIN) for n in names}
    try:
        _wait_for_pairs(procs)
        launcher = LocalLauncher(RUN, str(tmp_path))
        counted = Counted()
        launcher.scan, launcher.tick = counted.scan, counted.tick
        handles = [ProcHandle(n, "local", "127.0.0.1", "local", pid=p.pid) for n, p in procs.items()]
        never = ProcHandle("decode-1", "local", "127.0.0.1", "local", pid=None)

        async def teardown():
            return await asyncio.gather(*(launcher.stop([h], 5.0) for h in [*handles, never]))

        reports = [r for (r,) in asyncio.run(teardown())]
        assert [r.name for r in reports] == [*names, "decode-1"]
        assert all(r.ok for r in reports) and reports[-1].detail == "never started"
        assert all(r.detail.startswith("SIGTERM, gone in") for r in reports[:-1]), [r.detail for r in reports]
        scans, ticks = counted.scans, counted.ticks
        assert scans[0] == {p.pid for p in procs.values()} and len(scans) == ticks + 1
        assert scan_groups([p.pid for p in procs.values()]) == {p.pid: [] for p in procs.values()}
        for p in procs.values():
            p.wait(5)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait(5)
