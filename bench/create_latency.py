"""How long creating a file in a run's directory takes while a run comes up, against a `stat` of it (run by hand,
prints, writes no results): the loop that found that `open(O_CREAT)` waits for the file system's journal while
129 local processes write their logs (bench/README.md, "128 nodes starting").

    bench/isolated sh -c '.venv/bin/python bench/create_latency.py 100 & .venv/bin/python bench/scale_console.py 128'

It waits for a new run directory under /tmp/*/state/atomdeck/runs (scale_console.py's), then for `seconds`
(default 100) creates, closes and removes a file there every 20 ms, timing the create and, in between, a `stat`
of the directory and of the file."""

from __future__ import annotations

import glob
import os
import sys
import time

from common import pct


def main(seconds: float = 100.0) -> None:
    t_end = time.monotonic() + seconds
    pattern = "/tmp/*/state/atomdeck/runs/*/"
    there = set(glob.glob(pattern))  # an earlier bench's runs left behind are not this one's
    where = None
    while where is None and time.monotonic() < t_end:
        found = sorted(set(glob.glob(pattern)) - there)
        where = found[0] if found else None
        time.sleep(0.05)
    if where is None:
        raise SystemExit("no run directory appeared under /tmp/*/state/atomdeck/runs: start scale_console.py beside it")
    took: dict[str, list[float]] = {"create": [], "stat": []}
    i = 0
    while time.monotonic() < t_end:
        path = os.path.join(where, f".create-latency-{os.getpid()}-{i}")
        i += 1
        try:
            t = time.monotonic()
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            took["create"].append(time.monotonic() - t)
            time.sleep(0.01)
            t = time.monotonic()
            os.stat(where)
            os.stat(path)
            took["stat"].append(time.monotonic() - t)
            os.unlink(path)
        except OSError:  # the run's directory went (the bench tore the run down and cleaned up)
            break
        time.sleep(0.01)
    print(where)
    for kind, v in took.items():
        if v:
            print(f"{kind:6s} n={len(v)} p50 {1000 * pct(v, 50):.1f} p99 {1000 * pct(v, 99):.1f} "
                  f"max {1000 * max(v):.1f} ms")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 100.0)
