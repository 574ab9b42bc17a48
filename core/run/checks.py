"""The checks before a launch, in their order: no live run of this machine on the wanted nodes (inuse.py: a real
worker binds its port only minutes after it started), then no port of the plan already taken (ports.py). Both run
before the run directory exists, each over a launcher of its own made for the check (and closed by it)."""

from __future__ import annotations

from collections.abc import Callable

from ..design.commands import ProcessSpec
from ..design.plan import Plan
from ..launch.choose import launcher_for
from .inuse import check_nodes_free
from .ports import check_ports_free


async def check_free(plan: Plan, processes: list[ProcessSpec], say: Callable[[str], None]) -> None:
    """Raise (nothing was launched) naming what holds a node or a port of `plan`; `say` hears what is checked."""
    ports = sum(len(p.ports) for p in processes)
    say(f"checking that the {ports} ports are free on {len(plan.nodes)} nodes")
    await check_nodes_free(plan, lambda: launcher_for(plan.cluster, "preflight", "/", {}))
    await check_ports_free(plan, processes, launcher_for(plan.cluster, "preflight", "/", {}))
