"""The simulator's own cost: a 2P1D deployment (4 processes) with delays off, from launch to serving,
and the total RSS of its process trees. Goals: under 5 s, under 400 MB."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.run import Run
from common import save


def tree_rss_kb(pid: int) -> int:
    """RSS of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


async def main(reps: int = 3) -> dict:
    os.environ["ATOMDECK_SIM_SPEED"] = "0"
    times, rss = [], []
    for _ in range(reps):
        ws = load_workspace("demo-2p1d", "local")
        ws.inventory = ws.cluster.static_inventory()
        t0 = time.perf_counter()
        run = await Run.launch(ws, ws.assess())
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)
        times.append(time.perf_counter() - t0)
        assert state.status == "serving", state.diagnosis
        rss.append(sum(tree_rss_kb(h.pid) for h in run.handles.values()) / 1024)
        await run.teardown(grace=3)
    return {"launch_to_serving_s": round(sorted(times)[len(times) // 2], 3), "rss_mb": round(max(rss), 1),
            "goal_start_le_5s": max(times) <= 5, "goal_rss_le_400mb": max(rss) <= 400}


if __name__ == "__main__":
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    res = asyncio.run(main())
    save("sim", res)
    print(res)
