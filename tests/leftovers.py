"""What a run left behind, checked from outside: live processes (by PID) and open ports (by connecting)."""

from __future__ import annotations

import socket
import time

from atomdeck.core.launch.procfs import group_members
from atomdeck.core.run.diagnose import describe_proc
from atomdeck.core.run.events import RunState
from atomdeck.core.run.run import Run


def alive(run: Run) -> list[str]:
    """Processes of the run whose process group still has members on this machine."""
    return [h.name for h in run.handles.values() if h.pid and group_members(h.pid)]


def open_ports(run: Run, label: str = "node") -> list[str]:
    """`<node or host>:<port>` for every port of the run that still accepts a connection."""
    left = []
    for p in run.processes.values():
        for port in p.ports:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((p.host, port)) == 0:
                    left.append(f"{getattr(p, label)}:{port}")
    return left


def gone(run: Run) -> list[str]:
    """Problems left after a teardown on the local launcher: live process groups and open ports."""
    left = [f"{h.name}: pids {group_members(h.pid)}" for h in run.handles.values() if h.pid and group_members(h.pid)]
    return left + [f"{where} open" for where in open_ports(run, label="host")]


def not_serving(state: RunState) -> str:
    """Why a run that should serve did not, in words taken before a teardown overwrites them: its status
    and diagnosis, and each process's stage, exit and last lines."""
    out = [f"status {state.status}: {state.diagnosis}"]
    for p in state.procs.values():
        out.append(f"  {describe_proc(p, time.time())}")
        out += [f"    error: {e}" for e in p.errors]
        out += [f"    | {line}" for line in list(p.last_lines)[-3:]]
    out += [f"  check {c.name}: {c.ok} {c.detail}" for c in state.checks.values()]
    return "\n".join(out)
