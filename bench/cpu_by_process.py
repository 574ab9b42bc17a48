"""CPU per kind of process and per CPU, every few seconds, from /proc (what `top` shows, grouped): which
process takes the console's core while a big run comes up.

    python3 bench/cpu_by_process.py [seconds] [interval]     # e.g. beside bench/scale_console.py

Each line: seconds since the start, then the top 8 (kind@cpu: share of one core over the interval). A
process's kind is the first of KINDS in its command line, else its program; `cpu` is the CPU it last ran
on. A process born during the interval counts its whole life (a burst of starts reads above 100 %).
Numbers are printed, not asserted."""

from __future__ import annotations

import collections
import os
import sys
import time

KINDS = ("atomdeck tui", "cli.watcher", "tmux", "scale_console", "atom.entrypoints", "atomesh", "sh -c",
         "cpu_by_process")


def snapshot() -> dict[str, tuple[int, int, str]]:
    """pid -> (user + system ticks, the CPU it last ran on, its command line)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[pid] = (int(fields[11]) + int(fields[12]), int(fields[36]), cmd)
    return out


def kind(cmd: str) -> str:
    for k in KINDS:
        if k in cmd:
            return k
    return cmd.split(" ")[0][-24:]


def main(seconds: float = 100.0, interval: float = 2.0) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    before, t0 = snapshot(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(interval)
        now = snapshot()
        used: collections.Counter = collections.Counter()
        for pid, (ticks, cpu, cmd) in now.items():
            spent = ticks - before[pid][0] if pid in before else ticks
            if spent:
                used[(kind(cmd), cpu)] += spent
        before = now
        print(f"{time.monotonic() - t0:5.0f}s " + "  ".join(f"{k}@{c}:{v * 100 / hz / interval:.0f}%"
                                                          for (k, c), v in used.most_common(8)), flush=True)


if __name__ == "__main__":
    main(*(float(a) for a in sys.argv[1:3]))
