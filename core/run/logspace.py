"""The directories the processes write their logs into, seen where they live: a node's that fills (the SSH
launcher's run directory on the node, the shared directory of Slurm's `srun --output` files) is named with the
node and the path, since when and why, instead of showing only as logs that went quiet. The run directory on
this machine (local logs, a shared directory mounted here) is the run directory's own check (rundir.py)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from ..config.storage import UNWRITABLE, fix_words, size_words
from .events import Event

# df's line for the directory, then a real write of 4 KiB (a full disk, a quota or a read-only mount each answer
# with the OS's words: "No space left on device", "Disk quota exceeded", "Read-only file system")
PROBE = ('d="$1"; f="$d/.atomdeck-probe.$$"; df -Pk "$d" 2>/dev/null | tail -n 1; '
         'if err=$( { head -c 4096 /dev/zero > "$f"; } 2>&1 ); then echo writable; else echo "unwritable: $err"; fi; '
         'rm -f "$f"')
TIMEOUT_S = 10.0


def _parse(out: str) -> tuple[str, int | None, int | None, str] | None:
    """(mount point, bytes free, errno, the OS's words) of a directory that cannot be written; None if it can."""
    lines = [x for x in out.splitlines() if x.strip()]
    if not lines or lines[-1].strip() == "writable":
        return None
    last = lines[-1]
    if not last.startswith("unwritable:"):
        return None  # not our probe's answer (the directory is gone, the shell failed): said elsewhere
    words = last.split(":", 1)[1].strip()
    code = next((c for c in UNWRITABLE if os.strerror(c) in words), None)
    reason = os.strerror(code) if code else words[-160:]
    mount, free = "", None
    if len(lines) > 1:
        fields = lines[-2].split()
        if len(fields) >= 6 and fields[3].isdigit():
            mount, free = " ".join(fields[5:]), int(fields[3]) * 1024
    return mount, free, code, reason


class LogSpace:
    """Checks a run's log directories where they live, and tells the run's state (a `storage` event per
    directory) when one cannot be written and when it can again."""

    def __init__(self, run: Any):  # a Run (run.py imports this module)
        self.run = run
        self.since: dict[str, float] = {}

    def _groups(self) -> dict[str, tuple[object, str, list[str], list[str]]]:
        """key -> (runner, directory, nodes, processes): one check per directory per place it is seen from."""
        run = self.run
        out: dict[str, tuple[object, str, list[str], list[str]]] = {}
        for name, h in sorted(run.handles.items()):
            if not h.log_path:
                continue
            d = os.path.dirname(h.log_path)
            runner = run.launcher.log_runner(h.node)
            if getattr(runner, "where", "") == "local" and os.path.abspath(d).startswith(str(run.rd.path)):
                continue  # in the run directory here: its own check says it
            key = f"{h.node}:{d}" if getattr(runner, "where", "") != "local" and h.launcher == "ssh" else d
            _, _, nodes, names = out.setdefault(key, (runner, d, [], []))
            if h.node not in nodes:
                nodes.append(h.node)
            names.append(name)
        return out

    async def check(self) -> None:
        groups = self._groups()
        if not groups:
            return

        async def one(key: str, runner, d: str) -> tuple[str, tuple | None] | None:
            try:
                res = await runner.run(["sh", "-c", PROBE, "sh", d], timeout=TIMEOUT_S)
            except Exception:  # an unreachable node is the connection watcher's to say
                return None
            return key, _parse(res.stdout)

        found = await asyncio.gather(*(one(k, r, d) for k, (r, d, _, _) in groups.items()))
        events = []
        for item in found:
            if item is None:
                continue
            key, bad = item
            _, d, nodes, names = groups[key]
            said = key in self.run.state.storage
            if bad is None:
                if said:
                    self.since.pop(key, None)
                    events.append(Event("storage", key, "ok", f"the log directory {d} on {', '.join(nodes)} is "
                                                              f"written again"))
                continue
            mount, free, code, reason = bad
            since = self.since.setdefault(key, time.time())
            where = f"{d} (filesystem {mount}, {size_words(free)})" if mount else d
            events.append(Event(
                "storage", key, "unwritable",
                f"on {', '.join(nodes)}, the log directory {where} cannot be written since "
                f"{time.strftime('%H:%M:%S', time.localtime(since))} ({reason}): the log lines of {', '.join(names)} "
                f"are lost meanwhile; the processes go on, but atomdeck sees nothing new from them. Fix: "
                f"{fix_words(code, d, mount or d)} on {nodes[0] if len(nodes) == 1 else 'the shared filesystem'}",
                data={"nodes": nodes, "directory": d, "mount": mount, "free": free, "processes": names}))
        if events:
            self.run.emit_many(events)
