"""Before a launch: refuse ports that something already listens on (that listener would pass the barrier)."""

from __future__ import annotations

import asyncio

from ..config.errors import AtomdeckError
from ..design.commands import ProcessSpec
from ..design.plan import Plan
from ..launch.base import Launcher
from ..remote.probes import tcp_probe


async def check_ports_free(plan: Plan, processes: list[ProcessSpec], launcher: Launcher) -> None:
    """Refuse to launch onto ports something else already listens on (it would pass the barrier)."""
    wanted = sorted({(p.node, p.host, port, p.name) for p in processes for port in p.ports})
    try:
        results = await asyncio.gather(*(tcp_probe(host, port, 1.0, launcher.probe_runner(node))
                                         for node, host, port, _ in wanted))
    finally:
        await launcher.close()
    taken = [f"{node} {host}:{port} (wanted by {name})" for (node, host, port, name), r in zip(wanted, results)
             if r == "open"]
    if taken:
        raise AtomdeckError(f"port(s) already in use, nothing was launched: {'; '.join(taken)}. Stop what holds "
                            "them (an earlier run? `atomdeck runs`) or change ports.* in the recipe")
