"""A process's scheduling group: with the kernel's autogroups (sched_autogroup_enabled, the default of most
distributions) each session is one group, ranked against the others by the group's nice value; a process's own nice
value ranks it only inside its session. The console's watcher (core/cli/watcher.py) lowers its own group with these.
"""

from __future__ import annotations

import asyncio
import os

GROUP_NICE_TRIES = 20  # the kernel takes one autogroup nice value a tenth of a second from a non-root user


def group_nice_of(pid: int | str = "self") -> int:
    """A process's autogroup nice value (0 where there are none, or in the kernel's root group)."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            words = f.read().split()
        return int(words[words.index("nice") + 1])
    except (OSError, ValueError, IndexError):
        return 0


async def group_nice(pid: int, nice: int) -> bool:
    """Set the nice value of `pid`'s autogroup (its session's scheduling group, sched_autogroup_enabled): what
    ranks a session's processes against other sessions', where a process's own nice value ranks it only inside
    its session. A user may only raise it, and the kernel accepts one such change in the whole system every
    HZ/10 from a user without CAP_SYS_ADMIN (EAGAIN otherwise): tried again for up to ~2 s. False when it could
    not be set (no autogroups, the process gone, or refused)."""
    path = f"/proc/{pid}/autogroup"
    for _ in range(GROUP_NICE_TRIES):
        try:
            with open(path, "w") as f:
                f.write(str(nice))
            return True
        except BlockingIOError:
            await asyncio.sleep(0.1)
        except OSError:
            return False
    return False


# sched_setattr(2): on Linux >= 6.12 (EEVDF) a SCHED_OTHER thread's sched_runtime is its slice, the time it may run
# before a thread whose turn came since may take the CPU; a shorter slice gives an earlier deadline, so a waking
# thread with one is run sooner (kernel/sched/fair.c PREEMPT_SHORT). Its share of the CPU stays its weight's.
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
_RESET_ON_FORK = 0x01  # what the thread starts (threads and processes) gets the kernel's default slice back
SLICE_NS = 100_000  # the least the kernel takes (0.1 ms)


def short_slice(ns: int = SLICE_NS) -> int:
    """Ask the kernel for a slice of `ns` on each of this process's threads (its nice value kept): a thread woken by
    a key or a frame to write then waits less behind the machine's busy ones. Unprivileged; on an older kernel or
    another system it does nothing. Returns how many threads took it."""
    import ctypes
    import platform

    nr = _SCHED_SETATTR.get(platform.machine())
    if nr is None:
        return 0

    class SchedAttr(ctypes.Structure):
        _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                    ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                    ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return 0
    done = 0
    for tid in tids:
        try:
            if os.sched_getscheduler(tid) != os.SCHED_OTHER:
                continue
            attr = SchedAttr(size=ctypes.sizeof(SchedAttr), policy=os.SCHED_OTHER, flags=_RESET_ON_FORK,
                             nice=os.getpriority(os.PRIO_PROCESS, tid), runtime=ns)
        except OSError:  # the thread ended meanwhile
            continue
        if libc.syscall(nr, tid, ctypes.byref(attr), 0) == 0:
            done += 1
    return done
