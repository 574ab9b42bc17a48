"""Who had the CPU while the console waited for it: the console's scheduling delays (runnable, not running)
from a `perf sched record` of the whole machine, each charged to what ran on that CPU meanwhile.

    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null    # root; perf sched needs the sched tracepoints
    taskset -c 1 perf sched record -a -o /tmp/run.perf &      # started BEFORE the bench: forks tell who is who
    bench/isolated .venv/bin/python bench/scale_console.py 128
    kill -INT %1
    python3 bench/sched_blame.py /tmp/run.perf [--min-ms=2] [--from=S --to=S]

It reads `perf sched timehist` (perf's own per-switch table: when a task ran, for how long, and how long it
had waited runnable before: "sch delay"). The console is the process named `atomdeck` that waited most. Each
delay of the console's threads of at least --min-ms is charged to the tasks that ran on its CPU during it,
grouped by kind from the fork tree: the console's other threads, its watcher (the child of the console that
ran most), commands the watcher started, the engines (descendants of the local starter, the console's child
that forked most), tmux, the bench and its clients (python), kernel threads, other. --from/--to: seconds from the
launch (the starter's birth). Numbers are printed, not asserted.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys

ROW = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+(.+?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
KERNEL = ("kworker", "ksoftirqd", "rcu_", "kdamond", "kcompactd", "migration", "swapper", "kswapd")


def timehist(path: str) -> list[tuple]:
    """(end time, cpu, comm, tid, pid, sch delay ms, run ms) per switch-out, from perf sched timehist."""
    out = subprocess.run(["perf", "sched", "timehist", "-i", path], capture_output=True, text=True,
                         check=True).stdout
    rows = []
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows.append((float(m[1]), int(m[2]), m[3].strip(), int(m[4]), int(m[5] or m[4]), float(m[7]),
                         float(m[8])))
    return rows


def forks(path: str) -> dict[int, int]:
    """child tid -> the tid that made it (threads included)."""
    out = subprocess.run(["perf", "script", "-i", path, "-F", "pid,tid,cpu,time,event,trace"],
                         capture_output=True, text=True).stdout
    parent = {}
    for line in out.splitlines():
        if "sched_process_fork" in line:
            m = re.search(r"\bpid=(\d+) .*child_pid=(\d+)", line)
            if m:
                parent[int(m[2])] = int(m[1])
    return parent


def main(argv: list[str]) -> None:
    opts = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a}
    path = next(a for a in argv if not a.startswith("--"))
    min_ms = float(opts.get("--min-ms", 2))
    rows = timehist(path)
    tgid = {r[3]: r[4] for r in rows}  # thread -> its process
    # process -> the process that made it (a fork from a thread, as Popen in an executor, is the process's)
    parent = {c: tgid.get(p, p) for c, p in forks(path).items() if tgid.get(c, c) == c}
    t0 = rows[0][0]
    lo, hi = float(opts.get("--from", -1e18)), float(opts.get("--to", 1e18))

    ran = collections.Counter()
    waited = collections.Counter()
    for (_t, _c, comm, _tid, pid, sch, run) in rows:
        ran[pid] += run
        if comm == "atomdeck":
            waited[pid] += sch
    if not waited:
        raise SystemExit(f"{path}: no process named atomdeck ran while it was recorded")
    console = waited.most_common(1)[0][0]
    kids = collections.defaultdict(list)
    for child, par in parent.items():
        kids[par].append(child)
    console_kids = [k for k in kids[console] if ran[k] > 0 and k != console]
    starter = max(console_kids, key=lambda k: len(kids[k]), default=None)
    watcher = max((k for k in console_kids if k != starter), key=lambda k: ran[k], default=None)

    def descends(pid: int, top: int | None) -> bool:
        seen = 0
        while pid in parent and seen < 64:
            pid, seen = parent[pid], seen + 1
            if pid == top:
                return True
        return False

    def kind(comm: str, pid: int) -> str:
        if pid == console:
            return "the console's other threads"
        if pid == watcher:
            return "its watcher"
        if watcher is not None and descends(pid, watcher):
            return "commands the watcher started"
        if starter is not None and (pid == starter or descends(pid, starter)):
            return "engines (the local starter's processes)"
        if comm.startswith("tmux"):
            return "tmux"
        if comm.startswith(KERNEL):
            return "kernel threads"
        if comm.startswith("python") and not descends(pid, console):
            return "the bench and its clients (python)"
        return f"other ({comm})"

    # times are from the launch: the starter's birth (its first switch), else the recording's start
    launch = min((r[0] - r[6] / 1000 for r in rows if r[4] == starter), default=t0)
    per_cpu = collections.defaultdict(list)
    for r in rows:
        per_cpu[r[1]].append(r)
    blame = collections.Counter()
    total = big = 0.0
    n_big, worst = 0, 0.0
    for (t, cpu, _comm, _tid, pid, sch, run) in rows:
        if pid != console or not lo <= t - launch <= hi:
            continue
        total += sch
        if sch < min_ms:
            continue
        n_big, big, worst = n_big + 1, big + sch, max(worst, sch)
        w1 = t - run / 1000
        w0 = w1 - sch / 1000
        for (t2, _c2, comm2, _tid2, pid2, _s2, run2) in per_cpu[cpu]:
            overlap = min(t2, w1) - max(t2 - run2 / 1000, w0)
            if overlap > 0:
                blame[kind(comm2, pid2)] += overlap * 1000
    span = f"{lo:g} to {hi:g} s from the launch" if hi < 1e17 or lo > -1e17 else "the whole recording"
    print(f"console pid {console} (watcher {watcher}, starter {starter}, started {launch - t0:.1f} s into the "
          f"recording); {span}")
    print(f"the console's threads waited for a CPU {total:.0f} ms in all; {n_big} waits of >= {min_ms:g} ms "
          f"({big:.0f} ms, the longest {worst:.1f} ms), during which ran:")
    for k, ms in blame.most_common():
        print(f"  {ms:8.1f} ms  {k}")


if __name__ == "__main__":
    main(sys.argv[1:])
