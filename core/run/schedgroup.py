"""A process's scheduling group: with the kernel's autogroups (sched_autogroup_enabled, the default of most
distributions) each session is one group, ranked against the others by the group's nice value; a process's own nice
value ranks it only inside its session. The console's watcher (core/cli/watcher.py) lowers its own group with these.
"""

from __future__ import annotations

import asyncio

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
