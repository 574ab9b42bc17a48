"""The in-use check before an ssh launch (core/run/inuse.py), with K earlier runs on the same nodes left `failed`
(their processes gone: nobody ran `atomdeck down`): the check's wall time and the SSH connections it opened, with
no live run (the launch may go ahead) and with one live run on those nodes (refused). Prints JSON; leaves
results/latest.json alone (a before/after comparison, issue 19).

    .venv/bin/python bench/in_use_check.py 0 5 20      # root, tests/cluster/up.sh; K earlier failed runs each

The K runs are copies of one real run's directory (launched on the lab over ssh, then torn down) under new ids,
marked failed, so every build reads the same files.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))

# (imported after the state directory is chosen)
import asyncssh
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run import inuse
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.core.run.run import Run, make_launcher
from atomdeck.core.run.rundir import RunDir

NODES = ["mia1-p01-g01", "mia1-p01-g02"]
connects = {"n": 0}
_connect = asyncssh.connect


async def counted_connect(*a, **kw):
    connects["n"] += 1
    return await _connect(*a, **kw)


asyncssh.connect = counted_connect


async def check(plan) -> dict:
    """One in-use check as the launch makes it, whichever build's signature."""
    params = inspect.signature(inuse.check_nodes_free).parameters
    arg = Run.open if "open_run" in params else (lambda: make_launcher(plan.cluster, "preflight", "/", {}))
    connects["n"] = 0
    t = time.perf_counter()
    try:
        await inuse.check_nodes_free(plan, arg)
        said = "free"
    except AtomdeckError as e:
        said = str(e)
    return {"s": round(time.perf_counter() - t, 3), "ssh_connects": connects["n"], "said": said[:160]}


def copies(template: RunDir, k: int) -> None:
    """Bring the number of failed copies of `template` to k."""
    have = [rd for rd in RunDir.all() if rd.id.startswith("copy-")]
    for i in range(len(have), k):
        dst = template.path.parent / f"copy-{i:03d}-{template.id}"
        shutil.copytree(template.path, dst)
        RunDir(dst).update_meta(id=dst.name, status="failed", diagnosis="a copy for bench/in_use_check.py")


async def main(ks: list[int]) -> dict:
    os.environ.setdefault("ATOMDECK_SIM_SPEED", "20")
    ws = load_workspace("demo-1p1d", "lab-ssh")
    ws.inventory, _ = await fetch_inventory(ws.cluster)
    plan = ws.assess(NODES).plan
    first = await Run.launch(ws, ws.assess(NODES))
    await first.teardown(2)
    await first.close()
    out: dict = {"nodes": NODES, "free": {}, "one_live": {}}
    for k in ks:
        copies(first.rd, k)
        out["free"][k] = [await check(plan) for _ in range(3)]
    live = await Run.launch(ws, ws.assess(NODES))
    try:
        out["one_live"][max(ks)] = [await check(plan) for _ in range(3)]
    finally:
        report = await live.teardown(2)
        await live.close()
        out["live_teardown_clean"] = report.clean
    return out


if __name__ == "__main__":
    ks = sorted(int(x) for x in sys.argv[1:]) or [0, 5, 20]
    result = asyncio.run(main(ks))
    print(json.dumps(result, indent=1))
