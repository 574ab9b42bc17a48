"""The console's threads ask the kernel for a short slice (core/run/schedgroup.py short_slice): every thread that runs
when it is asked takes it with its nice value kept, and nothing the console starts afterwards (a thread, a launched
engine) inherits it. Read back from the kernel (/proc/PID/task/TID/sched `se.slice`)."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest
from atomdeck.core.run.schedgroup import SLICE_NS


def _kernel() -> tuple[int, int]:
    major, minor = platform.release().split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


pytestmark = pytest.mark.skipif(_kernel() < (6, 12) or platform.machine() not in ("x86_64", "aarch64"),
                                reason="a fair thread's own slice needs Linux >= 6.12 (EEVDF's sched_runtime)")

# Each case in a fresh interpreter: the slice stays on the threads that took it, pytest's among them.
CASE = textwrap.dedent("""
    import os, subprocess, threading
    from atomdeck.core.run.schedgroup import SLICE_NS, short_slice

    def slice_of(tid):
        with open(f"/proc/self/task/{tid}/sched") as f:
            return int(next(l for l in f if l.startswith("se.slice")).split()[-1])

    go, seen = threading.Event(), {}
    def waits():
        seen["tid"] = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, seen["tid"], 3)
        go.wait()
    before = threading.Thread(target=waits)
    before.start()
    while "tid" not in seen:
        pass
    default = slice_of(threading.get_native_id())
    took = short_slice()
    after = {}
    later = threading.Thread(target=lambda: after.update(slice=slice_of(threading.get_native_id())))
    later.start(); later.join()
    child = subprocess.run(["sh", "-c", "grep se.slice /proc/self/sched"], capture_output=True, text=True).stdout
    waiting, nice = slice_of(seen["tid"]), os.getpriority(os.PRIO_PROCESS, seen["tid"])
    go.set(); before.join()
    print(default, took, slice_of(threading.get_native_id()), waiting, nice, after["slice"], int(child.split()[-1]))
""")


def test_every_running_thread_takes_it_and_nothing_started_later_inherits_it() -> None:
    out = subprocess.run([sys.executable, "-c", CASE], capture_output=True, text=True, timeout=60, check=True).stdout
    default, took, main, waiting, nice, later, child = map(int, out.split())
    assert default > SLICE_NS, "the kernel's own slice is longer than the one asked for, or the test shows nothing"
    assert took == 2
    assert (main, waiting) == (SLICE_NS, SLICE_NS)
    assert nice == 3, "a thread's nice value is kept"
    assert (later, child) == (default, default), "a thread or process started afterwards gets the kernel's slice"

