"""The pre-launch ports check at 128 local nodes (scale_console.py's 64P64D on its synthetic cluster, 642 ports):
wall and CPU time of core's check_ports_free (the nodes' listening-socket table, a connect only to a port it
lists) against a connect to every port (how it checked before 991d33c), 5 of each in turn. Headless, no process
started; printed, not saved.

    bench/isolated .venv/bin/python bench/ports_check.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.remote.probes import tcp_probe
from atomdeck.core.run import ports
from atomdeck.core.run.run import make_launcher
from scale_console import cluster_yaml, recipe_yaml


async def connect_each(plan, processes, launcher) -> None:
    """The check as it was: a connect to every wanted port."""
    wanted = sorted({(p.node, p.host, port) for p in processes for port in p.ports})
    try:
        await asyncio.gather(*(tcp_probe(host, port, 1.0, launcher.probe_runner(node)) for node, host, port in wanted))
    finally:
        await launcher.close()


async def timed(check, a) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    await check(a.plan, a.processes, make_launcher(a.plan.cluster, "preflight", "/", {}))
    return time.perf_counter() - t0, time.process_time() - c0


async def main(n: int = 128, reps: int = 5) -> None:
    d = Path(tempfile.mkdtemp())
    (d / "c.yaml").write_text(cluster_yaml(n))
    (d / "r.yaml").write_text(recipe_yaml(n))
    ws = load_workspace(str(d / "r.yaml"), str(d / "c.yaml"))
    ws.inventory = ws.cluster.static_inventory()
    a = ws.assess()
    assert a.plan is not None, a.findings[:3]
    out: dict[str, list[tuple[float, float]]] = {"connect each port": [], "the table (now)": []}
    for _ in range(reps):
        out["connect each port"].append(await timed(connect_each, a))
        out["the table (now)"].append(await timed(ports.check_ports_free, a))
    print(f"{sum(len(p.ports) for p in a.processes)} ports on {n} nodes")
    for name, runs in out.items():
        print(f"{name}: wall ms {sorted(round(w * 1000) for w, _ in runs)}, CPU ms {sorted(round(c * 1000) for _, c in runs)}")


if __name__ == "__main__":
    asyncio.run(main())
