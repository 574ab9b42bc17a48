"""What a Slurm node step's agent (scripts/slurm-node.sh) prints, read back: each process's start and end."""

from __future__ import annotations

from .base import ProcStatus
from .local import describe_exit


def started_pids(text: str) -> dict[str, int]:
    """name -> PID from a node step's "started NAME PID" lines."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "started" and parts[2].isdigit():
            out[parts[1]] = int(parts[2])
    return out


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _supervisor_ended(code: int | None) -> ProcStatus:
    return ProcStatus(False, code, f"its supervisor {describe_exit(code)}" if code is not None else
                      "ended, exit code unknown")


def ended_codes(text: str) -> dict[str, int | None]:
    """name -> the supervisor's exit status (None: not known) from a node step's "ended NAME CODE" lines."""
    out: dict[str, int | None] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "ended":
            out[parts[1]] = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
    return out
