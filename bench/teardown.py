"""Teardown: from the request to verified clean (processes gone, ports closed) for 1P1D and 2P1D on
the local, Slurm and SSH launchers. Goal: <= grace period + 1 s."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time

from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.core.run.run import Run
from common import save

GRACE = 5.0


async def one(recipe: str, cluster: str) -> dict:
    os.environ["ATOMDECK_SIM_SPEED"] = "20"
    ws = load_workspace(recipe, cluster)
    ws.inventory, _ = await fetch_inventory(ws.cluster)
    run = await Run.launch(ws, ws.assess())
    state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=90)
    assert state.status == "serving", state.diagnosis
    t0 = time.perf_counter()
    report = await run.teardown(grace=GRACE)
    dt = time.perf_counter() - t0
    await run.close()
    return {"seconds": round(dt, 3), "clean": report.clean, "goal_le_grace_plus_1s": dt <= GRACE + 1}


async def main(clusters: list[str]) -> dict:
    out = {"grace_s": GRACE}
    for cluster in clusters:
        for recipe in ("demo-1p1d", "demo-2p1d"):
            out[f"{cluster}/{recipe}"] = await one(recipe, cluster)
    return out


if __name__ == "__main__":
    import sys

    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    clusters = sys.argv[1:] or ["local", "lab", "lab-ssh"]
    res = asyncio.run(main(clusters))
    save("teardown", res)
    import json

    print(json.dumps(res, indent=2))
