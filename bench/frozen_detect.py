"""A worker frozen while serving (SIGSTOP of the decode's python) -> `unresponsive`, at a random moment of the
health checks' period (issue 19: a passing endpoint is asked every 2 s now, its metrics scrapes count as
answers, and a process in state T is called unresponsive at its first miss). bench/serving.py measures the
same at a fixed moment and writes serving.json; this one writes nothing, for before/after runs:

    bench/isolated .venv/bin/python bench/frozen_detect.py 8
    PYTHONPATH=/tmp/old bench/isolated .venv/bin/python bench/frozen_detect.py 8   # an older tree

Benchmarks write numbers, they do not assert them.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import sys
import time

from serving import serving, worker_python, ws_for  # type: ignore[import-not-found]


async def frozen(delay: float) -> float:
    run = await serving(ws_for())
    try:
        await run.watch(timeout=3 + delay)  # checks and scrapes running, at a random phase
        pid = worker_python(run.id, "decode-0")
        t0 = time.time()
        os.kill(pid, signal.SIGSTOP)
        s = await run.watch(until=lambda s: s.procs["decode-0"].stage == "unresponsive", timeout=30)
        dt = s.procs["decode-0"].since - t0
        if os.environ.get("FROZEN_DEBUG"):
            print(round(dt, 2), s.procs["decode-0"].health_detail[:200], run.watchers.health.misses, flush=True)
        os.kill(pid, signal.SIGCONT)
        return dt
    finally:
        await run.teardown(grace=2)


def main(trials: int) -> None:
    from atomdeck.core.run.watchers import health

    rng = random.Random(19)
    values = [asyncio.run(frozen(rng.uniform(0, 2))) for _ in range(trials)]
    print({"health.py": health.__file__, "median_s": round(statistics.median(values), 2),
           "max_s": round(max(values), 2), "values": [round(v, 2) for v in values],
           "load": round(os.getloadavg()[0], 2)}, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
